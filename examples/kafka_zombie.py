#!/usr/bin/env python3
"""The zombie producer, told with an unmodified Kafka client (confluent-kafka, librdkafka).

Starts a coordinator and a broker with a Kafka listener (the binaries of `cargo build --release`,
or of EPOCHFENCE_BIN), then:

1. producer A (transactional id "payments") opens a transaction and writes;
2. producer B starts with the same transactional id: its init fences A;
3. A, a zombie now, writes again and tries to commit: librdkafka reports A fenced (a fatal
   _FENCED error) and nothing A wrote is visible to a read_committed consumer;
4. B writes and commits: the committed view holds B's records, and only those.

Then the same story against a broker started with --no-fencing: A's late write is acknowledged
and lands in the log (the coordinator still refuses A's commit). Exits 0 only if both outcomes
were seen.

    cargo build --release
    py="$(scripts/kafka-clients-venv | tail -n1)"     # confluent-kafka 2.16.1, pinned
    "$py" examples/kafka_zombie.py
"""

import os
import re
import subprocess
import sys
import tempfile
import time
import uuid

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("EPOCHFENCE_BIN", os.path.join(ROOT, "target", "release"))
TOPIC = "payments"


def start(argv, log, pattern):
    """Start a process, return it and the address its stdout line matching `pattern` names."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True)
    for line in proc.stdout:
        m = re.match(pattern, line)
        if m:
            return proc, m.group(1)
    raise SystemExit(f"{argv[0]} exited before printing its address (see {log.name})")


def cluster(tmp, fencing):
    """A coordinator and one broker with a Kafka listener; returns (processes, Kafka bootstrap)."""
    log = open(os.path.join(tmp, "log"), "a")
    coordinator, coord = start([os.path.join(BIN, "coordinator"), "--listen", "127.0.0.1:0",
                                "--data-dir", os.path.join(tmp, "coordinator")],
                               log, r"coordinator listening on (\S+)")
    argv = [os.path.join(BIN, "broker"), "--id", "1", "--listen", "127.0.0.1:0", "--kafka-listen", "127.0.0.1:0",
            "--coordinator", coord, "--data-dir", os.path.join(tmp, "broker-1")]
    if not fencing:
        argv.append("--no-fencing")
    broker, _ = start(argv, log, r"broker 1 listening on (\S+)")
    line = broker.stdout.readline()
    kafka = re.match(r"broker 1 kafka listening on (\S+)", line).group(1)
    # A topic of one partition, made with epochfence's own admin tool (retried while the broker
    # registers).
    for _ in range(100):
        made = subprocess.run([os.path.join(BIN, "admin"), "--bootstrap", coord, "create-topic", TOPIC,
                               "--partitions", "1"], capture_output=True, text=True)
        if made.returncode == 0:
            break
        time.sleep(0.1)
    else:
        raise SystemExit(f"cannot create the topic: {made.stderr}")
    return [coordinator, broker], kafka


def committed_values(bootstrap):
    """Every record a read_committed consumer sees, from the start of the partition."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4()}",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
        c.assign([TopicPartition(TOPIC, 0, 0)])
        out = []
        while hi > lo and c.position([TopicPartition(TOPIC, 0)])[0].offset < hi:
            for m in c.consume(1000, 0.5):
                if not m.error():
                    out.append(m.value().decode())
        return out
    finally:
        c.close()


def producer(bootstrap, name):
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "payments", "linger.ms": 5,
                  "client.id": name})
    p.init_transactions(30)
    return p


def story(bootstrap, fencing):
    print(f"--- a broker with fencing {'on' if fencing else 'OFF (--no-fencing)'} ---")
    a = producer(bootstrap, "A")
    a.begin_transaction()
    a.produce(TOPIC, b"A: debit 100", partition=0)
    a.flush(30)
    print("A: opened a transaction and wrote 'A: debit 100'")
    b = producer(bootstrap, "B")
    print("B: started with the same transactional id (its init fences A's epoch)")
    a_late_acked = False
    try:
        a.produce(TOPIC, b"A: debit 100 again", partition=0)
        a.flush(30)
        a_late_acked = True
        print("A: its late write 'A: debit 100 again' was ACKNOWLEDGED")
        a.commit_transaction(30)
        print("A: committed (the zombie won)")
    except KafkaException as e:
        err = e.args[0]
        print(f"A: refused, {err.name()} (fatal={err.fatal()}): {err.str()[:140]}")
    except BaseException as e:  # confluent-kafka may raise a bare KafkaError object
        print(f"A: refused: {e}")
    b.begin_transaction()
    b.produce(TOPIC, b"B: debit 100", partition=0)
    b.commit_transaction(30)
    print("B: wrote 'B: debit 100' and committed")
    seen = committed_values(bootstrap)
    print(f"read_committed view: {seen}")
    return seen, a_late_acked


def main():
    outcomes = []
    for fencing in (True, False):
        with tempfile.TemporaryDirectory() as tmp:
            procs, bootstrap = cluster(tmp, fencing)
            try:
                outcomes.append(story(bootstrap, fencing))
            finally:
                for p in procs:
                    p.kill()
                    p.wait()
    (fenced_view, fenced_late), (open_view, open_late) = outcomes
    fenced_ok = fenced_view == ["B: debit 100"] and not fenced_late
    zombie_won = open_late
    print()
    print(f"with fencing: only B's record is committed, A's late write refused: {fenced_ok}")
    print(f"without fencing: the zombie's late write was acknowledged: {zombie_won}")
    sys.exit(0 if fenced_ok and zombie_won else 1)


if __name__ == "__main__":
    main()
