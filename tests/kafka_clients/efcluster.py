"""Real epochfence processes for the Kafka-client tests.

A `Cluster` is one coordinator and N brokers, each a separate process started from the
binaries in `$EPOCHFENCE_BIN`, on ephemeral loopback ports, with data and logs in one
directory. Nothing here sleeps for a fixed time: a process's address is taken from the
line it prints, and cluster states are awaited by polling `admin describe --json` with a
short interval and a deadline, failing with what was last seen.
"""

import ctypes
import json
import os
import re
import signal
import subprocess
import threading
import time

BINARIES = ("coordinator", "broker", "admin", "producer", "consumer")


class HarnessError(AssertionError):
    """A cluster did not reach the state a test waited for (an AssertionError, so it is a failure)."""


def bin_dir():
    """The directory of the prebuilt binaries: `$EPOCHFENCE_BIN`, required."""
    d = os.environ.get("EPOCHFENCE_BIN")
    if not d:
        raise HarnessError(
            "EPOCHFENCE_BIN is not set: point it at the directory holding the epochfence binaries "
            "(coordinator, broker, admin, producer, consumer), e.g. EPOCHFENCE_BIN=target/release"
        )
    d = os.path.abspath(d)
    missing = [b for b in BINARIES if not os.access(os.path.join(d, b), os.X_OK)]
    if missing:
        raise HarnessError(f"EPOCHFENCE_BIN={d} lacks executable(s): {', '.join(missing)}")
    return d


def wait_until(predicate, timeout, what, interval=0.05, state=None):
    """Poll `predicate` (truthy when done) every `interval` s until `timeout` s have passed.

    Returns the truthy value. At the deadline fails naming `what` and the last thing seen:
    `state()` if given, else the predicate's last exception, if any."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while True:
        try:
            value = predicate()
        except HarnessError:
            raise
        except Exception as e:  # noqa: BLE001 - keep polling, report at the deadline
            value, last_exc = None, f"{type(e).__name__}: {e}"
        if value:
            return value
        if time.monotonic() >= deadline:
            seen = state() if state is not None else last_exc
            raise HarnessError(f"timed out after {timeout:.1f} s waiting for {what}; last seen: {seen}")
        time.sleep(interval)


def _die_with_parent():
    """preexec_fn: the child gets SIGKILL when the test process dies, however it dies."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class Process:
    """One child process: stdout lines collected (and copied to a file), stderr to a file."""

    def __init__(self, name, argv, log_dir, env=None):
        self.name = name
        self.argv = argv
        self.stdout_path = os.path.join(log_dir, f"{name}.stdout")
        self.stderr_path = os.path.join(log_dir, f"{name}.stderr")
        self._lines = []
        self._cond = threading.Condition()
        self._eof = False
        self.stopped = False
        self._stderr = open(self.stderr_path, "ab")
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            preexec_fn=_die_with_parent,
        )
        self.pid = self.proc.pid
        self._reader = threading.Thread(target=self._read_stdout, name=f"{name}-stdout", daemon=True)
        self._reader.start()

    def _read_stdout(self):
        with open(self.stdout_path, "ab") as copy:
            for raw in self.proc.stdout:
                copy.write(raw)
                copy.flush()
                with self._cond:
                    self._lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
                    self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def wait_line(self, pattern, timeout=15.0):
        """The first stdout line matching `pattern` (a regex), waiting for it to be printed."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for line in self._lines[seen:]:
                    m = rx.search(line)
                    if m:
                        return m
                seen = len(self._lines)
                if self._eof:
                    raise HarnessError(
                        f"{self.name} exited (code {self.proc.poll()}) before printing /{pattern}/;\n"
                        f"stderr tail:\n{self.tail(self.stderr_path, 30)}"
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise HarnessError(f"{self.name} printed no line matching /{pattern}/ within {timeout} s")
                self._cond.wait(left)

    def alive(self):
        return self.proc.poll() is None

    def signal(self, sig):
        if self.alive():
            os.kill(self.pid, sig)

    def kill9(self):
        self.signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self):
        self.signal(signal.SIGSTOP)
        self.stopped = True

    def cont(self):
        self.signal(signal.SIGCONT)
        self.stopped = False

    def terminate(self):
        """Teardown: SIGKILL (a stopped process dies of it too), reap, close files."""
        if self.alive():
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self._reader.join(timeout=5)
        self._stderr.close()

    @staticmethod
    def tail(path, n):
        try:
            with open(path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - 64 * 1024))
                lines = f.read().decode("utf-8", "replace").splitlines()
        except OSError as e:
            return f"<cannot read {path}: {e}>"
        return "\n".join(lines[-n:])

    def log_tail(self, n=40):
        state = "running" if self.alive() else f"exited {self.proc.returncode}"
        if self.stopped:
            state = "stopped (SIGSTOP)"
        return (
            f"----- {self.name} (pid {self.pid}, {state}) stdout: {self.stdout_path}\n"
            f"{self.tail(self.stdout_path, 5)}\n"
            f"----- {self.name} stderr (last {n} lines): {self.stderr_path}\n"
            f"{self.tail(self.stderr_path, n)}"
        )


class Broker:
    def __init__(self, broker_id, process, addr, kafka_addr):
        self.id = broker_id
        self.process = process
        self.addr = addr
        self.kafka_addr = kafka_addr

    def kill9(self):
        self.process.kill9()

    def stop(self):
        self.process.stop()

    def cont(self):
        self.process.cont()

    def alive(self):
        return self.process.alive()


class Cluster:
    """A coordinator and `brokers` brokers, started at construction; `close()` ends them all."""

    def __init__(self, base_dir, brokers=1, lease_ms=None, heartbeat_ms=None, no_fencing=False,
                 fsync="always", broker_args=(), coordinator_args=(), secret_file=None,
                 admin_args=()):
        self.bin = bin_dir()
        self.base_dir = base_dir
        self.log_dir = os.path.join(base_dir, "logs")
        os.makedirs(self.log_dir, exist_ok=True)
        self.processes = []
        self.brokers = {}
        self.lease_ms = lease_ms if lease_ms is not None else 3000
        # With a cluster secret, every process (and admin) proves membership with it.
        self.secret_args = ["--cluster-secret-file", secret_file] if secret_file else []
        self.admin_args = self.secret_args + list(admin_args)
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "info")
        self._env = env
        try:
            argv = [self._bin("coordinator"), "--listen", "127.0.0.1:0",
                    "--data-dir", os.path.join(base_dir, "coordinator")]
            if lease_ms is not None:
                argv += ["--broker-lease-ms", str(lease_ms)]
            argv += self.secret_args + list(coordinator_args)
            self.coordinator = self._spawn("coordinator", argv)
            self.coord_addr = self.coordinator.wait_line(r"^coordinator listening on (\S+)").group(1)
            for i in range(1, brokers + 1):
                self.start_broker(i, heartbeat_ms=heartbeat_ms, no_fencing=no_fencing, fsync=fsync,
                                  extra=broker_args)
            self.wait_brokers_alive(list(self.brokers))
        except BaseException:
            self.close()
            raise

    def restart_coordinator(self):
        """Start the coordinator again (after `coordinator.kill9()`), on its address and data."""
        argv = list(self.coordinator.argv)
        argv[argv.index("--listen") + 1] = self.coord_addr
        self.coordinator = self._spawn("coordinator", argv)
        self.coordinator.wait_line(r"^coordinator listening on (\S+)")
        return self.coordinator

    def _bin(self, name):
        return os.path.join(self.bin, name)

    def _spawn(self, name, argv):
        p = Process(name, argv, self.log_dir, env=self._env)
        self.processes.append(p)
        return p

    def start_broker(self, broker_id, heartbeat_ms=None, no_fencing=False, fsync="always", extra=()):
        argv = [self._bin("broker"), "--id", str(broker_id), "--listen", "127.0.0.1:0",
                "--kafka-listen", "127.0.0.1:0", "--coordinator", self.coord_addr,
                "--data-dir", os.path.join(self.base_dir, f"broker-{broker_id}"), "--fsync", fsync]
        if heartbeat_ms is not None:
            argv += ["--heartbeat-ms", str(heartbeat_ms)]
        if no_fencing:
            argv.append("--no-fencing")
        argv += self.secret_args + list(extra)
        p = self._spawn(f"broker-{broker_id}", argv)
        addr = p.wait_line(rf"^broker {broker_id} listening on (\S+)").group(1)
        kafka_addr = p.wait_line(rf"^broker {broker_id} kafka listening on (\S+)").group(1)
        b = Broker(broker_id, p, addr, kafka_addr)
        self.brokers[broker_id] = b
        return b

    # ----- the cluster as the coordinator sees it

    def admin(self, *args, check=True, timeout=20):
        r = subprocess.run([self._bin("admin"), "--bootstrap", self.coord_addr, *self.admin_args, *args],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
                           env=self._env)
        if check and r.returncode != 0:
            raise HarnessError(f"admin {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()} {r.stdout.strip()}")
        return r

    def describe(self):
        d = json.loads(self.admin("describe", "--json").stdout)
        self._last_describe = d
        return d

    def _seen(self, topic=None):
        """What the last `describe` showed (of `topic`), for timeout messages."""
        d = getattr(self, "_last_describe", None)
        if d is None:
            return "no describe answer"
        brokers = [(b["id"], b.get("alive")) for b in d.get("brokers", [])]
        parts = [{k: p.get(k) for k in ("topic", "partition", "leader", "leader_epoch", "isr", "replica_progress")}
                 for p in d.get("partitions", []) if topic is None or p["topic"] == topic]
        return f"brokers(id, alive)={brokers} partitions={parts}"

    def partition(self, topic, partition):
        for p in self.describe()["partitions"]:
            if p["topic"] == topic and p["partition"] == partition:
                return p
        raise HarnessError(f"{topic}-{partition} is not in admin describe")

    def wait_brokers_alive(self, ids, timeout=15):
        ids = set(ids)

        def check():
            d = self.describe()
            alive = {b["id"] for b in d["brokers"] if b.get("alive")}
            return ids <= alive or None

        wait_until(check, timeout, f"brokers {sorted(ids)} to be alive at the coordinator", state=self._seen)

    def create_topic(self, name, partitions, replicas, timeout=15):
        """Create a topic, retrying while brokers are still registering, and wait for its leaders."""
        def attempt():
            r = self.admin("create-topic", name, "--partitions", str(partitions), "--replicas", str(replicas),
                           check=False)
            out = r.stdout + r.stderr
            if r.returncode == 0 and "created topic" in out:
                return True
            if "BROKER_NOT_AVAILABLE" in out or "INVALID_REPLICATION_FACTOR" in out or \
               "BrokerNotAvailable" in out or "InvalidReplicationFactor" in out:
                return None
            raise HarnessError(f"admin create-topic {name} failed ({r.returncode}): {out.strip()}")

        wait_until(attempt, timeout, f"admin create-topic {name} to be accepted", interval=0.1)

        def led():
            parts = [p for p in self.describe()["partitions"] if p["topic"] == name]
            ok = len(parts) == partitions and all(
                p["leader"] in self.brokers and len(p["isr"]) == replicas for p in parts)
            return parts if ok else None

        return wait_until(led, timeout, f"every partition of {name} to have a leader and {replicas} in sync",
                          state=lambda: self._seen(name))

    def wait_leader_change(self, topic, partition, old_leader, old_epoch, timeout=20):
        """Wait until another broker leads at a higher leader epoch; return the partition."""
        def check():
            p = self.partition(topic, partition)
            if p["leader"] not in (old_leader, -1, None) and p["leader_epoch"] > old_epoch:
                return p
            return None

        return wait_until(check, timeout,
                          f"{topic}-{partition} to be led by a broker other than {old_leader} "
                          f"at a leader epoch above {old_epoch}", state=lambda: self._seen(topic))

    def wait_in_isr(self, topic, partition, broker_id, timeout=30):
        return wait_until(
            lambda: (lambda p: p if broker_id in p["isr"] else None)(self.partition(topic, partition)),
            timeout, f"broker {broker_id} to be in the ISR of {topic}-{partition}",
            state=lambda: self._seen(topic))

    def read_log(self, topic, partition, isolation="read_uncommitted"):
        """Every record of a partition through the own CLI consumer (`consumer --json`)."""
        r = subprocess.run([self._bin("consumer"), "--bootstrap", self.coord_addr, "--topic", topic,
                            "--partition", str(partition), "--json", "--isolation", isolation],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, env=self._env)
        if r.returncode != 0:
            raise HarnessError(f"consumer {topic}-{partition} failed ({r.returncode}): {r.stderr.strip()}")
        return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]

    # ----- addresses

    def bootstrap(self, ids=None):
        """The Kafka addresses (bootstrap.servers) of the given brokers, default all."""
        ids = list(self.brokers) if ids is None else ids
        return ",".join(self.brokers[i].kafka_addr for i in ids)

    # ----- teardown and diagnostics

    def log_tails(self, n=40):
        return "\n".join(p.log_tail(n) for p in self.processes)

    def close(self):
        for p in self.processes:
            p.terminate()
