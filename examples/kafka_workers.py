#!/usr/bin/env python3
"""Two read-process-write workers and a zombie, told with an unmodified Kafka client
(confluent-kafka, librdkafka): exactly-once with consumer-group generation fencing (KIP-447).

Starts a coordinator and a broker with a Kafka listener (the binaries of `cargo build --release`,
or of EPOCHFENCE_BIN), a topic `in` of 4 partitions holding 40 records and a topic `out`, then:

1. worker "zombie" joins group "workers", reads a batch, writes its outputs inside a
   transaction (its own transactional id), and freezes (SIGSTOP) before committing: it misses
   its session timeout (2 s) but not its transaction timeout (60 s), so only the group's
   generation can fence it;
2. worker "healthy" joins; once the zombie's session lapses the group moves every partition
   to it, and it processes every input from the committed offsets, committing outputs and
   offsets in its transactions;
3. the zombie wakes and commits its batch with the generation it held: the coordinator refuses
   its TxnOffsetCommit (UNKNOWN_MEMBER_ID: its generation is over), it aborts, and the
   committed output holds every input exactly once.

Then the same against a coordinator started with --no-generation-fencing: the zombie's commit
succeeds and its batch is in the output twice. Exits 0 only if both outcomes were seen.

    cargo build --release
    py="$(scripts/kafka-clients-venv | tail -n1)"     # confluent-kafka 2.16.1, pinned
    "$py" examples/kafka_workers.py [--group-protocol consumer]

With `--group-protocol consumer` the workers are KIP-848 members (`group.protocol=consumer`): the
coordinator assigns the partitions, its session timeout is 2 s
(`--group-consumer-session-timeout-ms`), and what fences the zombie is its *member epoch*: its
TxnOffsetCommit carries the epoch it held, and the coordinator refuses it (UNKNOWN_MEMBER_ID once
its session lapsed, ILLEGAL_GENERATION if it rejoined since). Without fencing its batch is doubled.

`kafka_workers.py --worker BOOTSTRAP NAME [--freeze] [--kafka-python] [--group-protocol consumer]`
runs one worker (the example starts two; `--kafka-python` makes it a kafka-python 3.0.12 worker, as
the real-client tests do; kafka-python speaks only the classic protocol).
"""

import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
import uuid

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("EPOCHFENCE_BIN", os.path.join(ROOT, "target", "release"))
PARTITIONS = 4
PER_PARTITION = 10
INPUTS = PARTITIONS * PER_PARTITION


def worker(bootstrap, name, freeze, group_protocol="classic"):
    """Consume `in` in group `workers`, write each record to `out`, and commit the consumed
    offsets in the same transaction. With `freeze`: after writing the first batch, print FROZEN,
    wait for a line on stdin (the example SIGSTOPs the worker meanwhile), then try to commit that
    batch with the generation (or member epoch) held, and print ZOMBIE COMMITTED or ZOMBIE REFUSED
    <error>."""
    config = {
        "bootstrap.servers": bootstrap, "group.id": "workers", "client.id": name,
        "auto.offset.reset": "earliest", "enable.auto.commit": False, "isolation.level": "read_committed",
    }
    if group_protocol == "consumer":
        # KIP-848: the session timeout and heartbeat interval are the coordinator's.
        config["group.protocol"] = "consumer"
    else:
        config.update({"session.timeout.ms": 2000, "heartbeat.interval.ms": 200})
    consumer = Consumer(config)
    producer = Producer({
        "bootstrap.servers": bootstrap, "transactional.id": f"worker-{name}", "transaction.timeout.ms": 60000,
    })
    producer.init_transactions(30)
    consumer.subscribe(["in"])
    while True:
        batch = [m for m in consumer.consume(num_messages=100, timeout=0.2) if not m.error()]
        if not batch:
            continue
        # What the worker holds while it processes: its positions and its group generation.
        positions = consumer.position(consumer.assignment())
        metadata = consumer.consumer_group_metadata()
        producer.begin_transaction()
        for m in batch:
            producer.produce("out", key=m.key(), value=m.value())
        producer.flush(30)
        if freeze:
            print("FROZEN", flush=True)
            sys.stdin.readline()
            try:
                producer.send_offsets_to_transaction(positions, metadata, 30)
                producer.commit_transaction(30)
                print("ZOMBIE COMMITTED", flush=True)
            except KafkaException as e:
                # Abortable, as librdkafka raises it: abort, as an application must.
                producer.abort_transaction(30)
                print(f"ZOMBIE REFUSED {e.args[0].name()}", flush=True)
            return
        producer.send_offsets_to_transaction(positions, metadata, 30)
        producer.commit_transaction(30)
        print(f"COMMITTED {len(batch)}", flush=True)


def kafka_python_worker(bootstrap, name, freeze):
    """`worker`, with kafka-python 3.0.12 (KafkaConsumer.group_metadata(): KIP-447)."""
    from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata
    from kafka.errors import KafkaError
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap.split(","), group_id="workers", client_id=name, auto_offset_reset="earliest",
        enable_auto_commit=False, isolation_level="read_committed", session_timeout_ms=2000,
        heartbeat_interval_ms=200)
    producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), transactional_id=f"worker-{name}",
                             transaction_timeout_ms=60000)
    producer.init_transactions()
    consumer.subscribe(["in"])
    # Fetch the topic's metadata before the first join: kafka-python 3.0.12 drops the result of a
    # rebalance it starts itself on a metadata change when a short poll returns mid-join.
    consumer.topics()
    while True:
        batch = [r for records in consumer.poll(timeout_ms=200).values() for r in records]
        if not batch:
            continue
        offsets = {tp: OffsetAndMetadata(consumer.position(tp), "", -1) for tp in consumer.assignment()}
        metadata = consumer.group_metadata()
        producer.begin_transaction()
        for r in batch:
            producer.send("out", key=r.key, value=r.value)
        producer.flush()
        if freeze:
            print("FROZEN", flush=True)
            sys.stdin.readline()
            try:
                producer.send_offsets_to_transaction(offsets, metadata)
                producer.commit_transaction()
                print("ZOMBIE COMMITTED", flush=True)
            except KafkaError as e:
                producer.abort_transaction()
                print(f"ZOMBIE REFUSED {type(e).__name__}", flush=True)
            return
        producer.send_offsets_to_transaction(offsets, metadata)
        producer.commit_transaction()
        print(f"COMMITTED {len(batch)}", flush=True)


def start(argv, log, pattern):
    """Start a process, return it and the address its stdout line matching `pattern` names."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True)
    for line in proc.stdout:
        m = re.match(pattern, line)
        if m:
            return proc, m.group(1)
    raise SystemExit(f"{argv[0]} exited before printing its address (see {log.name})")


# The coordinator's KIP-848 timings for the story: a 2 s session, as the classic workers ask.
KIP848_ARGS = ["--group-consumer-session-timeout-ms", "2000", "--group-consumer-heartbeat-interval-ms", "200"]


def cluster(tmp, generation_fencing):
    """A coordinator and one broker with a Kafka listener; returns (processes, Kafka bootstrap)."""
    log = open(os.path.join(tmp, "log"), "a")
    argv = [os.path.join(BIN, "coordinator"), "--listen", "127.0.0.1:0", "--data-dir", os.path.join(tmp, "coordinator"),
            "--group-initial-rebalance-delay-ms", "0", "--group-min-session-timeout-ms", "1000"] + KIP848_ARGS
    if not generation_fencing:
        argv.append("--no-generation-fencing")
    coordinator, coord = start(argv, log, r"coordinator listening on (\S+)")
    broker, _ = start([os.path.join(BIN, "broker"), "--id", "1", "--listen", "127.0.0.1:0",
                       "--kafka-listen", "127.0.0.1:0", "--coordinator", coord,
                       "--data-dir", os.path.join(tmp, "broker-1")],
                      log, r"broker 1 listening on (\S+)")
    kafka = re.match(r"broker 1 kafka listening on (\S+)", broker.stdout.readline()).group(1)
    for topic, n in (("in", PARTITIONS), ("out", 1)):
        for _ in range(100):  # retried while the broker registers
            made = subprocess.run([os.path.join(BIN, "admin"), "--bootstrap", coord, "create-topic", topic,
                                   "--partitions", str(n)], capture_output=True, text=True)
            if made.returncode == 0:
                break
            time.sleep(0.1)
        else:
            raise SystemExit(f"cannot create topic {topic}: {made.stderr}")
    return [coordinator, broker], kafka


def committed_offsets(bootstrap):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "workers"})
    try:
        return {tp.partition: tp.offset for tp in c.committed([TopicPartition("in", p) for p in range(PARTITIONS)], 10)}
    finally:
        c.close()


def committed_output(bootstrap):
    """Every value a read_committed consumer sees in `out`."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4()}",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition("out", 0), timeout=10)
        c.assign([TopicPartition("out", 0, 0)])
        out = []
        # The position passes every record and marker up to the high watermark.
        while hi > lo and c.position([TopicPartition("out", 0)])[0].offset < hi:
            for m in c.consume(1000, 0.5):
                if not m.error():
                    out.append(int(m.value()))
        return out
    finally:
        c.close()


def line(proc, prefix, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        text = proc.stdout.readline()
        if not text:
            break
        if text.startswith(prefix):
            return text.strip()
    raise SystemExit(f"no '{prefix}' line from a worker within {timeout} s")


def spawn_worker(bootstrap, name, freeze, client="confluent", group_protocol="classic"):
    argv = [sys.executable, os.path.abspath(__file__), "--worker", bootstrap, name] + (["--freeze"] if freeze else [])
    if client == "kafka-python":
        argv.append("--kafka-python")
    argv += ["--group-protocol", group_protocol]
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def story(bootstrap, generation_fencing, client="confluent", group_protocol="classic"):
    """Returns (what the zombie printed when woken, the committed output values). The topics
    `in` and `out` must exist, on a coordinator started with KIP848_ARGS for `group_protocol`
    consumer. tests/kafka_clients/test_groups.py and test_kip848.py run it too."""
    print(f"--- {group_protocol} groups, a coordinator with generation fencing "
          f"{'on' if generation_fencing else 'OFF (--no-generation-fencing)'} ---")
    zombie = spawn_worker(bootstrap, "zombie", True, client, group_protocol)
    healthy = None
    try:
        p = Producer({"bootstrap.servers": bootstrap})
        for i in range(INPUTS):
            p.produce("in", key=str(i).encode(), value=str(i).encode(), partition=i % PARTITIONS)
        p.flush(30)
        print(f"{INPUTS} inputs written to 'in' ({PARTITIONS} partitions)")
        line(zombie, "FROZEN")
        zombie.send_signal(signal.SIGSTOP)
        print("zombie: read a batch, wrote its outputs in an open transaction, and froze before committing")
        healthy = spawn_worker(bootstrap, "healthy", False, client, group_protocol)
        want = {p: PER_PARTITION for p in range(PARTITIONS)}
        deadline = time.monotonic() + 60
        while committed_offsets(bootstrap) != want:
            if time.monotonic() > deadline:
                raise SystemExit(f"the healthy worker did not commit every input: {committed_offsets(bootstrap)}")
            time.sleep(0.1)
        print("healthy: the group moved the zombie's partitions to it; it committed every input")
        zombie.send_signal(signal.SIGCONT)
        zombie.stdin.write("\n")
        zombie.stdin.flush()
        outcome = line(zombie, "ZOMBIE")
        held = "member epoch" if group_protocol == "consumer" else "generation"
        print(f"zombie: woke and committed with the {held} it held: {outcome}")
    finally:
        for proc in (zombie, healthy):
            if proc is not None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait()
    values = committed_output(bootstrap)
    dups = sorted({v for v in values if values.count(v) > 1})
    print(f"committed output: {len(values)} records for {INPUTS} inputs; duplicated inputs: {dups}")
    return outcome, values


def group_protocol_arg(argv):
    """`--group-protocol classic|consumer` among `argv` (classic if absent)."""
    if "--group-protocol" not in argv:
        return "classic"
    i = argv.index("--group-protocol")
    value = argv[i + 1] if i + 1 < len(argv) else ""
    if value not in ("classic", "consumer"):
        raise SystemExit(f"--group-protocol takes classic or consumer, not {value!r}")
    return value


def main():
    if sys.argv[1:2] == ["--worker"]:
        protocol = group_protocol_arg(sys.argv[4:])
        if "--kafka-python" in sys.argv[4:]:
            if protocol != "classic":
                raise SystemExit("kafka-python speaks only the classic group protocol (no KIP-848)")
            return kafka_python_worker(sys.argv[2], sys.argv[3], "--freeze" in sys.argv[4:])
        return worker(sys.argv[2], sys.argv[3], "--freeze" in sys.argv[4:], protocol)
    protocol = group_protocol_arg(sys.argv[1:])
    outcomes = []
    for generation_fencing in (True, False):
        with tempfile.TemporaryDirectory() as tmp:
            procs, bootstrap = cluster(tmp, generation_fencing)
            try:
                outcomes.append(story(bootstrap, generation_fencing, group_protocol=protocol))
            finally:
                for p in procs:
                    p.kill()
                    p.wait()
    (fenced, fenced_values), (open_, open_values) = outcomes
    exactly_once = fenced.startswith("ZOMBIE REFUSED") and sorted(fenced_values) == list(range(INPUTS))
    doubled = open_ == "ZOMBIE COMMITTED" and len(open_values) > len(set(open_values))
    print()
    print(f"with generation fencing: the zombie's commit refused, every input exactly once: {exactly_once}")
    print(f"without generation fencing: the zombie's batch committed a second time: {doubled}")
    sys.exit(0 if exactly_once and doubled else 1)


if __name__ == "__main__":
    main()
