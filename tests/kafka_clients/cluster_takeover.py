"""confluent-kafka through `cluster` with coordinator replicas on etcd, for tests/coordinator_ha.rs
(`--features etcd`): `python cluster_takeover.py DATA_DIR ETCD_ENDPOINTS`, with `cluster` at
$EPOCHFENCE_CLUSTER.

A transaction is open (its record written) when `cluster kill coordinator` kills the active
replica; once the other has taken over (its event awaited) the commit goes through it. A new
instance of the transactional id then fences the old one, whose late write is refused as fenced,
and commits. A read_committed consumer sees exactly the committed records. Prints `OK` at the end;
any failure is an exception (exit 1).
"""

import os
import sys
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))

import confluent_kafka as ck  # noqa: E402
import confluent_kafka.admin  # noqa: E402, F401
from epochfence_cluster import EpochfenceCluster  # noqa: E402

TOPIC = "ha-orders"


def main():
    data_dir, endpoints = sys.argv[1:3]
    c = EpochfenceCluster(data_dir, brokers=3, coordinator_args=["--etcd-lease-ms=1000"],
                          up_args=["--etcd-endpoints", endpoints, "--coordinators", "2"])
    try:
        run(c)
    finally:
        c.close()
    print("OK", flush=True)


def run(c):
    took_over = lambda e: e.get("event") == "coordinator took over"  # noqa: E731
    first = c.wait_for_event(took_over)["process"]
    admin = ck.admin.AdminClient({"bootstrap.servers": c.bootstrap})
    for f in admin.create_topics([ck.admin.NewTopic(TOPIC, 1, 3)]).values():
        f.result(30)
    tid = f"ha-{uuid.uuid4().hex[:8]}"

    def producer(client_id):
        return ck.Producer({"bootstrap.servers": c.bootstrap, "transactional.id": tid, "client.id": client_id})

    old = producer("ha-instance-1")
    old.init_transactions(60)
    old.begin_transaction()
    old.produce(TOPIC, b"before", partition=0)
    assert old.flush(60) == 0
    old.commit_transaction(60)

    # The active replica killed mid-transaction; the commit goes through the one that takes over.
    old.begin_transaction()
    old.produce(TOPIC, b"across", partition=0)
    assert old.flush(60) == 0
    n = len(c.events())
    said = c.kill("coordinator")
    assert said.startswith(f"killed {first} (pid "), said
    second = c.wait_for_event(took_over, after=n)["process"]
    assert second != first, (first, second)
    old.commit_transaction(90)

    # A new instance fences the old one through the new active replica.
    new = producer("ha-instance-2")
    new.init_transactions(60)
    old.begin_transaction()
    old.produce(TOPIC, b"zombie", partition=0)
    try:
        old.flush(30)
        raise AssertionError("the old instance's late write was not refused")
    except ck.KafkaException as e:
        assert e.args[0].code() == ck.KafkaError._FENCED, e
    new.begin_transaction()
    new.produce(TOPIC, b"after", partition=0)
    assert new.flush(60) == 0
    new.commit_transaction(60)

    seen = read_committed(c.bootstrap)
    assert seen == ["before", "across", "after"], seen
    # The new instance's epoch was granted by the replica that took over, above the old one's.
    grants = [e for e in c.events() if e.get("event") == "granted" and e.get("transactional_id") == tid]
    assert grants[0]["process"] == first and grants[-1]["process"] == second, grants
    assert grants[-1]["epoch"] > grants[0]["epoch"], grants


def read_committed(bootstrap):
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}",
                            "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        tp = ck.TopicPartition(TOPIC, 0, 0)
        consumer.assign([tp])
        _, high = consumer.get_watermark_offsets(tp, timeout=30)
        seen = []
        while consumer.position([ck.TopicPartition(TOPIC, 0)])[0].offset < high:
            msg = consumer.poll(5)
            if msg is not None and not msg.error():
                seen.append(msg.value().decode())
        return seen
    finally:
        consumer.close()


if __name__ == "__main__":
    main()
