"""Run your Kafka application's tests against a local epochfence cluster, with faults on demand.

Copy this file into your project and make the fixture visible to pytest, e.g. in conftest.py:

    from epochfence_cluster import epochfence_cluster  # noqa: F401  (the fixture)

then, in a test:

    def test_orders_survive_a_frozen_leader(epochfence_cluster):
        c = epochfence_cluster
        app = start_my_app(bootstrap_servers=c.bootstrap)
        leader = c.leader("orders", 0)
        c.pause("broker", leader)                      # SIGSTOP
        c.wait_for_event(lambda e: e["event"] == "leader elected" and e["leader"] != leader)
        ...                                            # your app goes on through the new leader
        c.resume("broker", leader)

Every fault (`pause`, `resume`, `kill`, `restart`, `isolate`, `heal`) is the `cluster` command of
the same name; `events()` reads the run's fencing events (docs/EVENTS.md in epochfence), and
at the end of each test its timeline is written beside its data (`timeline.html` in the test's
tmp_path, pass or fail), ready to open in a browser.

The `cluster` executable is `$EPOCHFENCE_CLUSTER`, else `$EPOCHFENCE_BIN/cluster`, else `cluster`
on PATH (`cargo build --release --bin cluster` in epochfence makes target/release/cluster).
"""

import json
import os
import shutil
import subprocess
import threading
import time

import pytest


def cluster_executable():
    """The `cluster` executable to run (see the module's docstring)."""
    if os.environ.get("EPOCHFENCE_CLUSTER"):
        return os.environ["EPOCHFENCE_CLUSTER"]
    if os.environ.get("EPOCHFENCE_BIN"):
        return os.path.join(os.environ["EPOCHFENCE_BIN"], "cluster")
    found = shutil.which("cluster")
    if not found:
        raise RuntimeError(
            "no epochfence `cluster` executable: set EPOCHFENCE_CLUSTER to it "
            "(cargo build --release --bin cluster makes target/release/cluster)"
        )
    return found


class EpochfenceCluster:
    """A running `cluster up`: its bootstrap servers, its processes, faults and events."""

    def __init__(self, data_dir, brokers=3, replicas=None, broker_args=(), coordinator_args=(), up_args=(),
                 start_timeout=60):
        self.data_dir = str(data_dir)
        self.exe = cluster_executable()
        cmd = [self.exe, "up", "--brokers", str(brokers), "--kafka-port", "0", "--data-dir", self.data_dir, "--json"]
        if replicas is not None:
            cmd += ["--replicas", str(replicas)]
        cmd += [f"--broker-arg={a}" for a in broker_args]
        cmd += [f"--coordinator-arg={a}" for a in coordinator_args]
        cmd += list(up_args)  # e.g. ["--etcd-endpoints", URL, "--coordinators", "2"]
        os.makedirs(self.data_dir, exist_ok=True)
        self._log = open(os.path.join(self.data_dir, "cluster-up.log"), "ab")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._log)
        line = []
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(start_timeout)
        if not line or not line[0]:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"cluster up did not start; its log: {self._log.name}")
        self.info = json.loads(line[0])
        self.bootstrap = self.info["bootstrap_servers"]

    def run(self, *args):
        """Run `cluster ARGS... --data-dir DIR`; returns what it printed, raises if it failed."""
        out = subprocess.run([self.exe, *map(str, args), "--data-dir", self.data_dir], capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"cluster {' '.join(map(str, args))} failed: {out.stderr.strip()}")
        return out.stdout.strip()

    def pause(self, kind, n=None):
        return self.run("pause", kind, *([] if n is None else [n]))

    def resume(self, kind, n=None):
        return self.run("resume", kind, *([] if n is None else [n]))

    def kill(self, kind, n=None):
        return self.run("kill", kind, *([] if n is None else [n]))

    def restart(self, kind, n=None):
        return self.run("restart", kind, *([] if n is None else [n]))

    def isolate(self, broker):
        return self.run("isolate", "broker", broker)

    def heal(self):
        return self.run("heal")

    def kafka_address(self, broker):
        """Broker `broker`'s Kafka listener, HOST:PORT."""
        return next(p["kafka"] for p in self.info["processes"] if p["name"] == f"broker {broker}")

    def events(self):
        """Every event of the run so far (a dict per line of events.jsonl)."""
        events = []
        with open(os.path.join(self.data_dir, "events.jsonl")) as f:
            for line in f:
                try:
                    events.append(json.loads(line))
                except ValueError:
                    pass  # a line being written now
        return events

    def wait_for_event(self, predicate, timeout=30, after=0):
        """The first event at index `after` or later that `predicate` accepts, waiting for it."""
        deadline = time.monotonic() + timeout
        while True:
            for e in self.events()[after:]:
                if predicate(e):
                    return e
            if time.monotonic() > deadline:
                raise AssertionError(f"no such event after {timeout} s; the last ones: {self.events()[-5:]}")
            time.sleep(0.05)

    def leader(self, topic, partition):
        """The partition's leader as the events tell it (its last election, else its creation)."""
        leader = None
        for e in self.events():
            if e.get("event") == "topic created" and e.get("topic") == topic:
                leader = int(e["leaders"].split(",")[partition])
            if e.get("event") == "leader elected" and e.get("topic") == topic and e.get("partition") == partition:
                leader = e["leader"]
        return leader

    def timeline(self, path):
        """Write the run's timeline page to `path`."""
        subprocess.run([self.exe, "timeline", str(path), "--data-dir", self.data_dir], check=True, capture_output=True)

    def close(self):
        """`cluster down`, and wait for every process to stop."""
        if self.proc.poll() is None:
            subprocess.run([self.exe, "down", "--data-dir", self.data_dir], capture_output=True)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()  # its children die with it
                self.proc.wait()
        self._log.close()


@pytest.fixture
def epochfence_cluster(tmp_path):
    """A 3-broker epochfence cluster for one test; its timeline is written to timeline.html in
    the test's tmp_path at the end, pass or fail."""
    c = EpochfenceCluster(tmp_path / "cluster")
    yield c
    try:
        c.timeline(tmp_path / "timeline.html")
    finally:
        c.close()
