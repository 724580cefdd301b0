#!/usr/bin/env python3
"""Measure `cluster` (docs/BENCHMARKS.md, "cluster"): the time from `cluster up` to its bootstrap
line with 1 and 3 brokers, the memory of a 3-broker cluster at rest, the throughput cost of its
proxies on replication (acks=all through `cluster` against the same processes started by hand,
alternating in one run), and the cost of writing fencing events on the produce path (brokers
with `--events-file` against without, alternating).

    cargo build --release --bins
    py="$(scripts/kafka-clients-venv | tail -n1)"
    "$py" scripts/bench_cluster.py --bin target/release [--records 300000] [--repeat 5] [--json]

The load is confluent-kafka's producer (librdkafka) from this process: 100-byte records, one
partition, `linger.ms=5`; throughput counts from the first produce to the last delivery report.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import confluent_kafka as ck
import confluent_kafka.admin  # noqa: F401


def up(exe, brokers, data_dir, extra=()):
    started = time.monotonic()
    proc = subprocess.Popen(
        [exe, "up", "--brokers", str(brokers), "--kafka-port", "0", "--data-dir", data_dir, "--json", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    info = json.loads(proc.stdout.readline())
    return proc, info, (time.monotonic() - started) * 1000


def down(exe, proc, data_dir):
    subprocess.run([exe, "down", "--data-dir", data_dir], capture_output=True)
    proc.wait(60)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class ByHand:
    """A coordinator and brokers started directly (no proxies), as the README's by-hand setup."""

    def __init__(self, bin_dir, brokers, data_dir, events=False):
        self.procs = []
        c = subprocess.Popen([os.path.join(bin_dir, "coordinator"), "--listen", "127.0.0.1:0", "--data-dir",
                              os.path.join(data_dir, "coordinator"), "--default-replication-factor", str(brokers)],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.procs.append(c)
        addr = c.stdout.readline().split()[-1]
        self.kafka = []
        for i in range(1, brokers + 1):
            args = [os.path.join(bin_dir, "broker"), "--id", str(i), "--listen", "127.0.0.1:0", "--coordinator", addr,
                    "--data-dir", os.path.join(data_dir, f"broker-{i}"), "--kafka-listen", "127.0.0.1:0"]
            if events:
                args += ["--events-file", os.path.join(data_dir, "events.jsonl")]
            b = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            b.stdout.readline()
            self.kafka.append(b.stdout.readline().split()[-1])
            self.procs.append(b)
        self.bootstrap = ",".join(self.kafka)
        wait_brokers(self.bootstrap, brokers)

    def close(self):
        for p in reversed(self.procs):
            p.terminate()
            p.wait(30)


def wait_brokers(bootstrap, n):
    admin = ck.admin.AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 30
    while len(admin.list_topics(timeout=5).brokers) < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"{bootstrap}: not {n} brokers after 30 s")
        time.sleep(0.05)


def throughput(bootstrap, topic, records, replicas, acks):
    admin = ck.admin.AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([ck.admin.NewTopic(topic, 1, replicas)]).values():
        f.result(30)
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "enable.idempotence": True,
                     "batch.size": 1_000_000, "queue.buffering.max.messages": 2_000_000})
    value = b"x" * 100
    done = [0]

    def report(err, _msg):
        if err is None:
            done[0] += 1

    start = time.monotonic()
    for _ in range(records):
        while True:
            try:
                p.produce(topic, value, partition=0, callback=report)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    p.flush(120)
    elapsed = time.monotonic() - start
    assert done[0] == records, f"{done[0]} of {records} acknowledged"
    return records / elapsed


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="target/release")
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    exe = os.path.join(a.bin, "cluster")
    out = {}
    tmp = tempfile.mkdtemp(prefix="bench-cluster-")

    # 1. cluster up to its bootstrap line.
    for n in (1, 3):
        walls, readies = [], []
        for r in range(a.repeat):
            d = os.path.join(tmp, f"up-{n}-{r}")
            proc, info, wall = up(exe, n, d)
            walls.append(wall)
            readies.append(info["ready_ms"])
            if n == 3 and r == 0:
                time.sleep(2)  # at rest
                pids = [p["pid"] for p in info["processes"]] + [proc.pid]
                out["rss_mib_3_brokers"] = round(sum(rss_kib(p) for p in pids) / 1024, 1)
            down(exe, proc, d)
        out[f"up_ms_{n}_brokers"] = {"median_wall": round(statistics.median(walls)), "min": round(min(walls)),
                                     "max": round(max(walls)), "median_ready_ms": statistics.median(readies)}
        print(f"cluster up, {n} broker(s): {out[f'up_ms_{n}_brokers']}", file=sys.stderr)

    # 2. acks=all on 3 replicas: through cluster's proxies against by hand, alternating.
    via, hand = [], []
    for r in range(a.repeat):
        order = ("cluster", "hand") if r % 2 == 0 else ("hand", "cluster")
        for which in order:
            d = os.path.join(tmp, f"rep-{which}-{r}")
            if which == "cluster":
                proc, info, _ = up(exe, 3, d)
                via.append(throughput(info["bootstrap_servers"], "perf", a.records, 3, "all"))
                down(exe, proc, d)
            else:
                h = ByHand(a.bin, 3, d)
                hand.append(throughput(h.bootstrap, "perf", a.records, 3, "all"))
                h.close()
        print(f"acks=all run {r}: cluster {via[-1]:.0f}/s, by hand {hand[-1]:.0f}/s", file=sys.stderr)
    ratios = [v / h for v, h in zip(via, hand)]
    out["acks_all_records_per_s"] = {"cluster_median": round(statistics.median(via)),
                                     "by_hand_median": round(statistics.median(hand)),
                                     "median_ratio": round(statistics.median(ratios), 3),
                                     "ratios": [round(x, 3) for x in ratios]}

    # 3. The events file on the produce path: one broker, with and without --events-file.
    on, off = [], []
    for r in range(a.repeat):
        order = (True, False) if r % 2 == 0 else (False, True)
        for events in order:
            d = os.path.join(tmp, f"ev-{events}-{r}")
            h = ByHand(a.bin, 1, d, events=events)
            (on if events else off).append(throughput(h.bootstrap, "perf", a.records, 1, "all"))
            h.close()
        print(f"events run {r}: on {on[-1]:.0f}/s, off {off[-1]:.0f}/s", file=sys.stderr)
    ratios = [x / y for x, y in zip(on, off)]
    out["events_on_off"] = {"on_median": round(statistics.median(on)), "off_median": round(statistics.median(off)),
                            "median_ratio": round(statistics.median(ratios), 3), "ratios": [round(x, 3) for x in ratios]}
    subprocess.run(["rm", "-rf", tmp])
    print(json.dumps(out, indent=None if a.json else 2))


if __name__ == "__main__":
    main()
