"""Consumer groups with real clients: subscribe() consumers sharing a topic, committed
offsets across a coordinator kill -9, and read-process-write workers where one freezes past its
session timeout (but not its transaction timeout): the group's generation fences its commit
(KIP-447), and against `--no-generation-fencing` its output is doubled.

They do not take the suite's `client` fixture: the read-process-write tests run with each client's
worker (examples/kafka_workers.py), kafka-python's subscribers have a test of their own, and the
rest are confluent-kafka's.
"""

import os
import sys

import pytest

from clients import kafka_python_subscribe
from efcluster import wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
PARTITIONS = 4
PER_PARTITION = 10


@pytest.fixture
def cluster(group_cluster):
    """A factory: cluster(coordinator_args) starts a coordinator and one broker (conftest's)."""
    return group_cluster


def _fill(bootstrap, topic):
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(PARTITIONS * PER_PARTITION):
        p.produce(topic, key=str(i).encode(), value=str(i).encode(), partition=i % PARTITIONS)
    assert p.flush(30) == 0


def _consumer(bootstrap, name, **extra):
    from confluent_kafka import Consumer
    config = {"bootstrap.servers": bootstrap, "group.id": "readers", "client.id": name, "auto.offset.reset": "earliest",
              "enable.auto.commit": False, "session.timeout.ms": 2000, "heartbeat.interval.ms": 200}
    config.update(extra)
    return Consumer(config)


def _committed(bootstrap, group, topic):
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


def _drain(consumers, want, seen, timeout=30):
    """Poll every consumer until `want` values are seen in all (each value counted)."""
    def step():
        for c in consumers:
            m = c.poll(0.05)
            if m is not None and not m.error():
                seen.append(int(m.value()))
        return len(set(seen)) >= want
    wait_until(step, timeout, f"{want} distinct records consumed", interval=0)


@pytest.mark.timeout(120)
def test_subscribers_share_partitions_and_resume_from_committed_offsets(cluster):
    c = cluster()
    c.create_topic("in", partitions=PARTITIONS, replicas=1)
    bs = c.bootstrap()
    _fill(bs, "in")
    a, b = _consumer(bs, "a"), _consumer(bs, "b")
    a.subscribe(["in"])
    b.subscribe(["in"])
    seen = []
    _drain([a, b], PARTITIONS * PER_PARTITION, seen)
    # Before the second member joined, the first read every partition; those that moved were
    # read again from the start (nothing was committed yet), as Kafka's eager rebalance does.
    assert set(seen) == set(range(PARTITIONS * PER_PARTITION)), "every record read by the group"
    wait_until(lambda: (a.poll(0.01), b.poll(0.01), len(a.assignment()) == len(b.assignment()) == PARTITIONS // 2)[2],
               30, "the partitions shared two each", interval=0)
    # librdkafka's admin client lists and describes the group (ListGroups, DescribeGroups).
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bs})
    listed = admin.list_consumer_groups().result(10)
    assert [g.group_id for g in listed.valid] == ["readers"], listed.valid
    # ListGroups v5's type filter (KIP-848): every group here is a classic one.
    from confluent_kafka import ConsumerGroupType
    classic = admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC}).result(10)
    assert [(g.group_id, g.type) for g in classic.valid] == [("readers", ConsumerGroupType.CLASSIC)], classic.valid
    assert admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(10).valid == []
    described = admin.describe_consumer_groups(["readers"])["readers"].result(10)
    assert str(described.state).endswith("STABLE") and len(described.members) == 2, described
    assigned = sorted(tp.partition for m in described.members for tp in m.assignment.topic_partitions)
    assert assigned == list(range(PARTITIONS)), assigned
    # Commit half of what was read, per partition: offset 5 everywhere.
    from confluent_kafka import TopicPartition
    for cons in (a, b):
        cons.commit(offsets=[TopicPartition("in", tp.partition, PER_PARTITION // 2) for tp in cons.assignment()],
                    asynchronous=False)
    # a is killed (no LeaveGroup): its session lapses and b takes every partition.
    a_parts = {tp.partition for tp in a.assignment()}
    del a  # never closed: librdkafka's threads stop with the process; the member just goes silent
    wait_until(lambda: (b.poll(0.05), len(b.assignment()) == PARTITIONS)[1], 30, "b to own every partition", interval=0)
    # The coordinator is killed and restarted: the offsets are durable.
    c.coordinator.kill9()
    c.restart_coordinator()
    assert _committed(bs, "readers", "in") == {p: PER_PARTITION // 2 for p in range(PARTITIONS)}
    # b resumes a's partitions from the committed offsets: exactly the second halves.
    b.close()
    fresh = _consumer(bs, "c")
    fresh.subscribe(["in"])
    again = []
    _drain([fresh], PARTITIONS * PER_PARTITION // 2, again)
    want = sorted(i for i in range(PARTITIONS * PER_PARTITION) if i // PARTITIONS >= PER_PARTITION // 2)
    assert sorted(again) == want, f"resumed at the committed offsets ({a_parts} were a's)"
    fresh.close()


def _zombie_worker_run(c, client):
    """examples/kafka_workers.py's story on cluster `c` with `client`'s workers: two workers, the
    first frozen with an uncommitted batch past its session; returns what the zombie printed
    when woken and the committed output values."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples"))
    import kafka_workers
    c.create_topic("in", partitions=PARTITIONS, replicas=1)
    c.create_topic("out", partitions=1, replicas=1)
    fencing = "--no-generation-fencing" not in c.coordinator.argv
    return kafka_workers.story(c.bootstrap(), fencing, client)


WORKER_CLIENTS = ("confluent", "kafka-python")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("client", WORKER_CLIENTS)
def test_a_frozen_worker_is_fenced_by_the_group_generation(cluster, client):
    outcome, values = _zombie_worker_run(cluster(), client)
    assert outcome.startswith("ZOMBIE REFUSED"), outcome
    assert sorted(values) == list(range(PARTITIONS * PER_PARTITION)), "every input exactly once in the output"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("client", WORKER_CLIENTS)
def test_without_generation_fencing_the_zombie_doubles_output(cluster, client):
    outcome, values = _zombie_worker_run(cluster(["--no-generation-fencing"]), client)
    assert outcome == "ZOMBIE COMMITTED", outcome
    dups = sorted(v for v in set(values) if values.count(v) > 1)
    assert dups, f"the zombie's batch was committed a second time: {sorted(values)}"


@pytest.mark.timeout(120)
def test_a_replaced_static_member_is_fenced(cluster):
    """Static membership (KIP-345): a new instance with the same group.instance.id replaces the
    old one, which librdkafka then reports fatally fenced (FENCED_INSTANCE_ID)."""
    c = cluster()
    c.create_topic("in", partitions=PARTITIONS, replicas=1)
    bs = c.bootstrap()
    _fill(bs, "in")
    old = _consumer(bs, "old", **{"group.instance.id": "worker-1"})
    old.subscribe(["in"])
    wait_until(lambda: (old.poll(0.05), len(old.assignment()) == PARTITIONS)[1], 30, "the old instance assigned",
               interval=0)
    new = _consumer(bs, "new", **{"group.instance.id": "worker-1"})
    new.subscribe(["in"])
    errors = []

    def old_fenced():
        m = old.poll(0.05)
        new.poll(0.01)
        if m is not None and m.error():
            errors.append(m.error())
        return any("Static consumer fenced" in e.str() for e in errors)
    wait_until(old_fenced, 30, "the old instance fenced", interval=0, state=lambda: errors)
    from confluent_kafka import KafkaError
    assert any(e.code() == KafkaError._FATAL for e in errors), errors
    wait_until(lambda: (new.poll(0.05), len(new.assignment()) == PARTITIONS)[1], 30, "the new instance assigned",
               interval=0)
    new.close()


@pytest.mark.timeout(120)
def test_kafka_python_subscribers_share_partitions_and_commit(cluster):
    """kafka-python's group consumer: two members share the topic, commit, and a third resumes
    at the committed offsets."""
    from kafka import KafkaConsumer
    c = cluster()
    c.create_topic("in", partitions=PARTITIONS, replicas=1)
    bs = c.bootstrap()
    _fill(bs, "in")

    def member(name):
        k = KafkaConsumer(bootstrap_servers=bs.split(","), group_id="py", client_id=name, auto_offset_reset="earliest",
                          enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500,
                          consumer_timeout_ms=100)
        kafka_python_subscribe(k, ["in"])
        return k

    a, b = member("a"), member("b")
    seen = set()

    def shared():
        for k in (a, b):
            for recs in k.poll(timeout_ms=50).values():
                seen.update(int(r.value) for r in recs)
        return len(seen) == PARTITIONS * PER_PARTITION and len(a.assignment()) == len(b.assignment()) == 2
    wait_until(shared, 60, "two kafka-python members sharing the partitions", interval=0,
               state=lambda: (len(seen), a.assignment(), b.assignment()))
    from kafka import OffsetAndMetadata, TopicPartition
    from kafka.errors import RebalanceInProgressError

    def committed_by(k):
        try:
            k.commit({tp: OffsetAndMetadata(PER_PARTITION, "", -1) for tp in k.assignment()})
            return True
        except RebalanceInProgressError:
            # What the client says to do: poll (completing the rebalance), then retry.
            for other in (a, b):
                other.poll(timeout_ms=50)
            return False
    for k in (a, b):
        wait_until(lambda: committed_by(k), 30, "a kafka-python commit", interval=0)
    a.close()
    b.close()
    assert _committed(bs, "py", "in") == {p: PER_PARTITION for p in range(PARTITIONS)}


def _commit_standalone(bootstrap, group, offsets):
    """Commit `offsets` ({(topic, partition): offset}) for `group` as an assign() consumer
    (no member id, generation -1), then leave: a group with offsets and no members."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    finally:
        c.close()


@pytest.mark.timeout(120)
def test_admin_clients_delete_groups_and_their_offsets(cluster):
    """Issue 32, item 3: DeleteGroups through confluent-kafka's AdminClient, kafka-python's
    KafkaAdminClient and `admin delete-group`; OffsetDelete (KIP-496) through kafka-python's. A group
    with a member is not deleted (NON_EMPTY_GROUP) and keeps the offsets of the topics it subscribes
    to (GROUP_SUBSCRIBED_TO_TOPIC); a group that does not exist is GROUP_ID_NOT_FOUND; deleted
    offsets stay deleted across a coordinator restart, and a consumer of a deleted group starts over
    at auto.offset.reset."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient
    import kafka
    import kafka.errors as kerrors
    c = cluster()
    c.create_topic("in", partitions=PARTITIONS, replicas=1)
    c.create_topic("other", partitions=1, replicas=1)
    bs = c.bootstrap()
    _fill(bs, "in")
    for group in ("idle-a", "idle-b", "idle-c"):
        _commit_standalone(bs, group, {("in", 0): 7})
    # "active" has a member subscribed to "in", and offsets for "in" and "other".
    live = _consumer(bs, "live", **{"group.id": "active"})
    live.subscribe(["in"])
    wait_until(lambda: (live.poll(0.05), len(live.assignment()) == PARTITIONS)[1], 30, "the member assigned",
               interval=0)
    live.commit(offsets=[TopicPartition("in", p, 3) for p in range(PARTITIONS)] + [TopicPartition("other", 0, 2)],
                asynchronous=False)

    admin = AdminClient({"bootstrap.servers": bs})
    futures = admin.delete_consumer_groups(["active", "idle-a", "nope"], request_timeout=10)
    futures["idle-a"].result(10)
    for group, code in (("active", KafkaError.NON_EMPTY_GROUP), ("nope", KafkaError.GROUP_ID_NOT_FOUND)):
        with pytest.raises(KafkaException) as refused:
            futures[group].result(10)
        assert refused.value.args[0].code() == code, (group, refused.value)
    assert _committed(bs, "idle-a", "in")[0] < 0, "the deleted group's offsets went with it"
    assert _committed(bs, "idle-b", "in")[0] == 7, "another group's stay"

    kadmin = kafka.KafkaAdminClient(bootstrap_servers=bs.split(","), request_timeout_ms=10000)
    try:
        got = kadmin.delete_group_offsets("active", [kafka.TopicPartition("in", 0), kafka.TopicPartition("other", 0)])
        assert got == {kafka.TopicPartition("in", 0): kerrors.GroupSubscribedToTopicError,
                       kafka.TopicPartition("other", 0): kerrors.NoError}, got
        with pytest.raises(kerrors.GroupIdNotFoundError):
            kadmin.delete_group_offsets("nope", [kafka.TopicPartition("in", 0)])
        got = kadmin.delete_groups(["idle-b", "active", "nope"])
        assert got == {"idle-b": "OK", "active": "NonEmptyGroupError", "nope": "GroupIdNotFoundError"}, got
    finally:
        kadmin.close()
    from confluent_kafka import Consumer
    probe = Consumer({"bootstrap.servers": bs, "group.id": "active"})
    try:
        kept = probe.committed([TopicPartition("in", 0), TopicPartition("other", 0)], timeout=10)
    finally:
        probe.close()
    assert [tp.offset for tp in kept] == [3, -1001], kept

    # Durable: after a coordinator restart the deleted group and offsets are still gone.
    c.coordinator.kill9()
    c.restart_coordinator()
    assert _committed(bs, "idle-b", "in")[0] < 0
    # The member leaves; the binary deletes the group, and says so; a second time it does not exist.
    live.close()
    assert c.admin("delete-group", "idle-c").stdout == "deleted group 'idle-c'\n"
    wait_until(lambda: c.admin("delete-group", "active", check=False).returncode == 0, 30, "the group empty and deleted")
    again = c.admin("delete-group", "active", check=False)
    assert again.returncode == 1 and "GROUP_ID_NOT_FOUND" in again.stderr, (again.returncode, again.stderr)
    # A consumer of the deleted group starts over at auto.offset.reset: every record again.
    fresh = _consumer(bs, "fresh", **{"group.id": "active"})
    fresh.subscribe(["in"])
    seen = []
    _drain([fresh], PARTITIONS * PER_PARTITION, seen)
    assert sorted(seen) == list(range(PARTITIONS * PER_PARTITION))
    fresh.close()
