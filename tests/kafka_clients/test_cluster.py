"""An unmodified transactional application under `cluster` and its faults, one after another.

confluent-kafka's transactional producer writes transactions (some aborted) to a topic of three
replicas while `cluster` pauses the partition's leader, kills the next one, kills the
coordinator mid-transaction, and isolates the leader after that (whose Kafka listener then
acknowledges no acks=all write, once another leader is elected); then the producer freezes with
a transaction open and a new instance takes its transactional id. A read_committed consumer
sees every committed record exactly once and nothing aborted, and the run's timeline holds the
fence of the frozen instance, the elections and every fault.

The cluster is the README's pytest fixture's (examples/epochfence_cluster.py), so this test
also keeps that fixture working. confluent-kafka only: the fixture is client-agnostic, and
kafka-python's reactions to each fault are covered by the other tests of this suite.
"""

import os
import sys
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
from epochfence_cluster import EpochfenceCluster  # noqa: E402

TOPIC = "orders"


@pytest.mark.timeout(300)
def test_a_transactional_application_through_every_fault(tmp_path):
    import confluent_kafka as ck
    import confluent_kafka.admin  # noqa: F401  (ck.admin)

    c = EpochfenceCluster(tmp_path / "cluster", brokers=3, coordinator_args=["--broker-lease-ms=1500"])
    try:
        _scenario(ck, c, tmp_path)
    finally:
        try:
            c.timeline(tmp_path / "timeline.html")
        finally:
            c.close()


def _scenario(ck, c, tmp_path):
    admin = ck.admin.AdminClient({"bootstrap.servers": c.bootstrap})
    for f in admin.create_topics([ck.admin.NewTopic(TOPIC, 1, 3)]).values():
        f.result(30)
    tid = f"app-{uuid.uuid4().hex[:8]}"
    committed, aborted = [], []

    def producer(client_id):
        return ck.Producer({
            "bootstrap.servers": c.bootstrap,
            "transactional.id": tid,
            "client.id": client_id,
            # A frozen broker's requests are given up on after 5 s (not librdkafka's 60), so
            # the producer finds the new leader within the test's time.
            "socket.timeout.ms": 5000,
            "transaction.timeout.ms": 120000,
        })

    def txn(p, values, commit=True):
        p.begin_transaction()
        for v in values:
            p.produce(TOPIC, v.encode(), partition=0)
        assert p.flush(60) == 0, f"{values} not delivered"
        if commit:
            p.commit_transaction(90)
            committed.extend(values)
        else:
            p.abort_transaction(90)
            aborted.extend(values)

    def isr_full():
        """Wait until every replica is in sync again (after a fault healed)."""
        def full():
            isr = None
            for e in c.events():
                if e.get("topic") == TOPIC and e.get("event") in ("leader elected", "isr changed"):
                    isr = e["isr"]
                if e.get("event") == "topic created" and e.get("topic") == TOPIC:
                    isr = "1,2,3"
            return isr is not None and len(isr.split(",")) == 3
        deadline_events(c, full, "all three replicas back in sync")

    def elected_away_from(old, after):
        return c.wait_for_event(
            lambda e: e.get("event") == "leader elected" and e.get("topic") == TOPIC and e["leader"] not in (old, -1),
            timeout=60, after=after)

    a = producer("app-instance-1")
    a.init_transactions(30)
    txn(a, ["0-a", "0-b"])
    txn(a, ["0-aborted"], commit=False)

    # 1. The leader freezes (SIGSTOP): another is elected, the application goes on through it.
    leader = c.leader(TOPIC, 0)
    n = len(c.events())
    assert c.pause("broker", leader).startswith(f"paused broker {leader}")
    elected_away_from(leader, n)
    txn(a, ["1-a", "1-b"])
    c.resume("broker", leader)
    isr_full()

    # 2. The leader is killed (SIGKILL), and later started again: the crash.
    leader = c.leader(TOPIC, 0)
    n = len(c.events())
    assert c.kill("broker", leader).startswith(f"killed broker {leader}")
    elected_away_from(leader, n)
    txn(a, ["2-a"])
    c.restart("broker", leader)
    isr_full()

    # 3. The coordinator is killed mid-transaction and started again; the commit goes through.
    a.begin_transaction()
    a.produce(TOPIC, b"3-a", partition=0)
    assert a.flush(60) == 0
    c.kill("coordinator")
    c.restart("coordinator")
    a.commit_transaction(90)
    committed.append("3-a")

    # 4. The leader is cut off from the cluster while its Kafka listener keeps serving: once
    # another leader is elected it acknowledges no acks=all write (the zombie leader).
    isr_full()
    leader = c.leader(TOPIC, 0)
    n = len(c.events())
    assert c.isolate(leader).startswith(f"isolated broker {leader}")
    elected_away_from(leader, n)
    reports = []
    zombie_leader = ck.Producer({
        "bootstrap.servers": c.kafka_address(leader),
        "acks": "all",
        "enable.idempotence": False,
        "message.timeout.ms": 6000,
    })
    zombie_leader.produce(TOPIC, b"4-through-the-isolated-leader", partition=0,
                          callback=lambda err, msg: reports.append(err))
    zombie_leader.flush(30)
    assert len(reports) == 1 and reports[0] is not None, f"the isolated leader acknowledged a write: {reports}"
    c.heal()
    isr_full()
    txn(a, ["4-a"])

    # 5. The application's instance freezes with a transaction open; a new instance takes its
    # transactional id, which fences the old one and aborts what it had open.
    a.begin_transaction()
    a.produce(TOPIC, b"5-frozen-open", partition=0)
    assert a.flush(60) == 0
    b = producer("app-instance-2")
    b.init_transactions(60)
    aborted.append("5-frozen-open")
    # The old instance wakes up: its late write is refused and it is fenced for good.
    a.produce(TOPIC, b"5-frozen-late", partition=0)
    with pytest.raises(ck.KafkaException) as exc:
        a.flush(30)
    assert exc.value.args[0].code() == ck.KafkaError._FENCED, exc.value
    aborted.append("5-frozen-late")
    txn(b, ["5-b"])

    # A read_committed consumer sees every committed record exactly once, and nothing else.
    seen = _read_committed(ck, c.bootstrap)
    assert sorted(seen) == sorted(committed), f"read {seen}, committed {committed}"
    assert len(seen) == len(set(seen)), f"a record twice: {seen}"
    assert not set(seen) & (set(aborted) | {"4-through-the-isolated-leader"}), seen

    # The run's timeline: the fence of the frozen instance, the elections and every fault.
    events = c.events()
    faults = {(e["action"], e["target"]) for e in events if e.get("event") == "fault"}
    for action in ("pause", "resume", "kill", "restart", "isolate", "heal"):
        assert any(a_ == action for a_, _ in faults), f"no {action} in {faults}"
    assert ("kill", "coordinator") in faults and ("restart", "coordinator") in faults, faults
    elections = [e for e in events if e.get("event") == "leader elected" and e.get("topic") == TOPIC]
    assert len(elections) >= 3, elections
    fences = [e for e in events if e.get("event") == "granted" and e.get("transactional_id") == tid
              and e.get("fenced_partitions", 0) > 0]
    assert fences, "no grant fenced the frozen instance"
    instances = [e for e in events if e.get("event") == "kafka producer initialised" and e.get("transactional_id") == tid]
    assert {e["client_id"] for e in instances} == {"app-instance-1", "app-instance-2"}, instances
    page = tmp_path / "run.html"
    c.timeline(page)
    html = page.read_text()
    assert "fenced by epoch" in html and f"{tid} (producer id" in html, "no fence on the frozen instance's lane"
    assert "client app-instance-1 at 127.0.0.1:" in html
    assert "leads orders-0" in html
    for action in ("pause", "kill", "restart", "isolate", "heal"):
        assert f"cluster: fault action={action}" in html, action


def _read_committed(ck, bootstrap):
    consumer = ck.Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"check-{uuid.uuid4().hex[:8]}",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    try:
        tp = ck.TopicPartition(TOPIC, 0, 0)
        consumer.assign([tp])
        _, high = consumer.get_watermark_offsets(tp, timeout=30)
        seen = []
        while True:
            position = consumer.position([ck.TopicPartition(TOPIC, 0)])[0].offset
            if position >= high:
                return seen
            msg = consumer.poll(5)
            if msg is None or msg.error():
                continue
            seen.append(msg.value().decode())
    finally:
        consumer.close()


def deadline_events(c, predicate, what, timeout=60):
    import time
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {timeout} s; the last events: {c.events()[-6:]}")
        time.sleep(0.05)
