"""KIP-848 consumer groups with librdkafka's `group.protocol=consumer` (confluent-kafka 2.16.1):
the coordinator assigns the partitions, and every member carries a member epoch that fences it.

- subscribers share a topic, and under churn no partition is ever owned by two members at once
  (checked from the members' own assignment callbacks);
- a killed member's partitions (epochfence's own `consumer --group-protocol consumer`, kill -9)
  are consumed again once its session lapses, from the committed offsets;
- examples/kafka_workers.py's frozen worker is fenced by its member epoch; without fencing its
  batch is committed twice;
- a static member that leaves is replaced by a new instance without a rebalance, and a second
  live instance of it is refused (UNRELEASED_INSTANCE_ID, fatal to librdkafka);
- a regex subscription picks up a topic created later;
- a classic and a KIP-848 consumer on one group id: the group is of one type at a time;
- kafka-python's classic consumers keep working beside KIP-848 groups;
- after a coordinator kill -9 the members' epochs and partitions are what they were told, and a
  commit at an epoch from before the last rebalance is still refused.

They do not take the suite's `client` fixture: kafka-python speaks only the classic protocol.
"""

import os
import re
import subprocess
import sys

import pytest

from clients import kafka_python_subscribe
from efcluster import wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples"))
import kafka_workers  # noqa: E402

PARTITIONS = 4
PER_PARTITION = 10


@pytest.fixture
def cluster(group_cluster):
    """A factory: cluster(coordinator_args) starts a coordinator and one broker (conftest's),
    with the example's KIP-848 timings: a 2 s session and 200 ms heartbeats."""
    return lambda coordinator_args=(): group_cluster(kafka_workers.KIP848_ARGS + list(coordinator_args))


def _fill(bootstrap, topic, partitions=PARTITIONS, per_partition=PER_PARTITION, first=0):
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(first, first + partitions * per_partition):
        p.produce(topic, value=str(i).encode(), partition=i % partitions)
    assert p.flush(30) == 0


def _member(bootstrap, name, group="readers", **extra):
    from confluent_kafka import Consumer
    config = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": name, "group.protocol": "consumer",
              "auto.offset.reset": "earliest", "enable.auto.commit": False}
    config.update(extra)
    return Consumer(config)


class Owners:
    """Which member owns each partition, as the members' assignment callbacks tell it; a
    partition handed to a member while another still owns it is a violation."""

    def __init__(self):
        self.owner = {}
        self.violations = []
        self.assigned = 0

    def callbacks(self, name):
        def assign(_consumer, partitions):
            for tp in partitions:
                key = (tp.topic, tp.partition)
                held = self.owner.get(key)
                if held not in (None, name):
                    self.violations.append((key, held, name))
                self.owner[key] = name
                self.assigned += 1

        def revoke(_consumer, partitions):
            for tp in partitions:
                key = (tp.topic, tp.partition)
                if self.owner.get(key) == name:
                    del self.owner[key]

        return {"on_assign": assign, "on_revoke": revoke, "on_lost": revoke}

    def of(self, name):
        return sorted(p for (_, p), n in self.owner.items() if n == name)


def _fatal(error):
    from confluent_kafka import KafkaError
    return error.code() == KafkaError._FATAL


def _poll_all(members, seen=None):
    for m in members:
        msg = m.poll(0.02)
        if msg is not None and not msg.error() and seen is not None:
            seen.append(int(msg.value()))


@pytest.mark.timeout(180)
def test_subscribers_never_own_a_partition_together_under_churn(cluster):
    c = cluster()
    c.create_topic("in", partitions=PARTITIONS, replicas=1)
    bs = c.bootstrap()
    _fill(bs, "in")
    owners = Owners()
    live = {}

    def join(name):
        m = _member(bs, name)
        m.subscribe(["in"], **owners.callbacks(name))
        live[name] = m

    def leave(name):
        live.pop(name).close()  # revokes (on_revoke), then leaves with epoch -1

    def settled(want_members):
        def check():
            _poll_all(live.values())
            return (len(owners.owner) == PARTITIONS and all(owners.of(n) for n in live)
                    and set(owners.owner.values()) <= set(live) and len(live) == want_members)
        wait_until(check, 30, f"{want_members} members sharing every partition", interval=0,
                   state=lambda: (owners.owner, owners.violations))

    join("a")
    settled(1)
    assert owners.of("a") == list(range(PARTITIONS)), owners.owner
    # Churn: members join and leave while the others poll; each step waits for the group to
    # settle, and every callback in between is checked.
    for step, (joining, leaving) in enumerate([("b", None), ("c", None), ("d", "b"), (None, "a"), ("e", "c")]):
        if joining:
            join(joining)
        if leaving:
            leave(leaving)
        settled(len(live))
        assert not owners.violations, f"step {step}: a partition owned by two members: {owners.violations}"
    assert sorted(live) == ["d", "e"] and [len(owners.of(n)) for n in live] == [2, 2], owners.owner
    assert owners.assigned > PARTITIONS, "partitions moved between members"
    # epochfence's admin shows the KIP-848 group: its epochs, each member's epoch and partitions
    # (a member whose partitions did not change moves to the new epoch at its next heartbeat).
    def at_assignment_epoch():
        _poll_all(live.values())
        g = described(c)
        return g if all(m["member_epoch"] == g["assignment_epoch"] for m in g["members"]) else None
    g = wait_until(at_assignment_epoch, 30, "every member at the assignment epoch", interval=0.05,
                   state=lambda: described(c))
    assert g["group_protocol"] == "consumer" and g["assignor"] == "uniform", g
    assert g["assignment_epoch"] == g["group_epoch"], g
    assert sorted(len(m["assignment"]) for m in g["members"]) == [2, 2], g
    # librdkafka's admin client: ListGroups' type filter and ConsumerGroupDescribe.
    from confluent_kafka import ConsumerGroupType
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bs})
    consumer_groups = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(10).valid
    assert [(g.group_id, g.type) for g in consumer_groups] == [("readers", ConsumerGroupType.CONSUMER)]
    assert admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC}).result(10).valid == []
    d = admin.describe_consumer_groups(["readers"])["readers"].result(10)
    assert d.type == ConsumerGroupType.CONSUMER and len(d.members) == 2, d
    assert sorted(tp.partition for m in d.members for tp in m.assignment.topic_partitions) == list(range(PARTITIONS))
    for name in list(live):
        leave(name)


@pytest.mark.timeout(120)
def test_epochs_and_assignments_survive_a_coordinator_kill9(cluster):
    """Every epoch is journaled before a member learns it: after kill -9 and a restart the group
    has the epochs and partitions its members were told, they go on without a rebalance, and a
    commit at an epoch from before the last rebalance is still refused."""
    c = cluster()
    c.create_topic("in", partitions=PARTITIONS, replicas=1)
    bs = c.bootstrap()
    _fill(bs, "in")
    owners = Owners()
    a, b = _member(bs, "a"), _member(bs, "b")
    a.subscribe(["in"], **owners.callbacks("a"))
    wait_until(lambda: (_poll_all([a]), len(owners.of("a")) == PARTITIONS)[1], 30, "a alone", interval=0)
    stale = a.consumer_group_metadata()  # a's epoch before b joined
    b.subscribe(["in"], **owners.callbacks("b"))

    def settled():
        _poll_all([a, b])
        g = described(c)
        return g if (len(owners.of("a")) == len(owners.of("b")) == 2
                     and all(m["member_epoch"] == g["assignment_epoch"] for m in g["members"])) else None
    before = wait_until(settled, 30, "a and b settled", interval=0.05, state=lambda: owners.owner)
    c.coordinator.kill9()
    c.restart_coordinator()
    after = wait_until(settled, 30, "the group back after the restart", interval=0.05, state=lambda: owners.owner)
    assert after["group_epoch"] == before["group_epoch"], f"no rebalance: {before} -> {after}"
    assert {m["member_id"]: (m["member_epoch"], sorted(m["assignment"])) for m in after["members"]} == \
        {m["member_id"]: (m["member_epoch"], sorted(m["assignment"])) for m in before["members"]}
    assert not owners.violations, owners.violations
    # A transactional commit with a's metadata from before b joined: ILLEGAL_GENERATION, abortable.
    from confluent_kafka import KafkaException, Producer, TopicPartition
    p = Producer({"bootstrap.servers": bs, "transactional.id": "late"})
    p.init_transactions(30)
    p.begin_transaction()
    with pytest.raises(KafkaException) as refused:
        p.send_offsets_to_transaction([TopicPartition("in", owners.of("a")[0], 1)], stale, 30)
    assert refused.value.args[0].txn_requires_abort(), refused.value
    p.abort_transaction(30)
    a.close()
    b.close()


def _consumer_bin(c, group, topic):
    """epochfence's own `consumer --group-protocol consumer --follow`, as a process."""
    argv = [os.path.join(c.bin, "consumer"), "--kafka", "--bootstrap", c.bootstrap(), "--topic", topic,
            "--group", group, "--group-protocol", "consumer", "--follow"]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _joined_lines(proc, want_partitions, timeout=30):
    """Read the consumer's stderr until a `joined group ... at member epoch N: partitions [...]`
    line names `want_partitions` partitions; returns (member id, epoch, partitions)."""
    import select
    import time
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line.strip())
        m = re.match(r"joined group \S+ as (\S+) at member epoch (\d+): partitions \[(.*)\]", line)
        if m:
            parts = [p for p in m.group(3).split(",") if p]
            if len(parts) == want_partitions:
                return m.group(1), int(m.group(2)), parts
    raise AssertionError(f"no joined line with {want_partitions} partitions; stderr: {seen}")


@pytest.mark.timeout(120)
def test_a_killed_members_partitions_are_consumed_again_after_its_session(cluster):
    c = cluster()
    c.create_topic("in", partitions=PARTITIONS, replicas=1)
    bs = c.bootstrap()
    _fill(bs, "in")
    own = _consumer_bin(c, "readers", "in")
    try:
        member_id, epoch, parts = _joined_lines(own, PARTITIONS)
        assert epoch >= 1 and parts == [f"in-{p}" for p in range(PARTITIONS)], parts
        # It prints every record and commits; a librdkafka member joins and the coordinator moves
        # two partitions to it once epochfence's member gave them up (committed, revoked).
        owners = Owners()
        b = _member(bs, "b")
        b.subscribe(["in"], **owners.callbacks("b"))
        wait_until(lambda: (_poll_all([b]), len(owners.of("b")) == 2)[1], 30, "b to get two partitions", interval=0)
        _joined_lines(own, 2)
        # kill -9: no leave. Its partitions come to b once its session (2 s) lapses.
        own.kill()
        own.wait()
        seen = []
        wait_until(lambda: (_poll_all([b], seen), len(owners.of("b")) == PARTITIONS)[1], 30,
                   "b to own every partition after the killed member's session", interval=0,
                   state=lambda: owners.owner)
        # What the killed member committed is not read again: b reads past it (the killed
        # member printed and committed every record of its partitions), then the new records.
        _fill(bs, "in", first=1000)
        wait_until(lambda: (_poll_all([b], seen), len([v for v in seen if v >= 1000]) == 40)[1], 30,
                   "b to read the new records of every partition", interval=0, state=lambda: sorted(seen))
        old = [v for v in seen if v < 1000]
        assert old == [], f"the killed member committed what it printed; b read past it: {sorted(old)}"
        b.close()
    finally:
        own.kill()
        own.wait()


def _zombie_run(c):
    c.create_topic("in", partitions=PARTITIONS, replicas=1)
    c.create_topic("out", partitions=1, replicas=1)
    fencing = "--no-generation-fencing" not in c.coordinator.argv
    return kafka_workers.story(c.bootstrap(), fencing, "confluent", group_protocol="consumer")


@pytest.mark.timeout(180)
def test_a_frozen_worker_is_fenced_by_its_member_epoch(cluster):
    outcome, values = _zombie_run(cluster())
    assert outcome.startswith("ZOMBIE REFUSED"), outcome
    assert sorted(values) == list(range(PARTITIONS * PER_PARTITION)), "every input exactly once in the output"


@pytest.mark.timeout(180)
def test_without_generation_fencing_the_zombie_member_doubles_output(cluster):
    outcome, values = _zombie_run(cluster(["--no-generation-fencing"]))
    assert outcome == "ZOMBIE COMMITTED", outcome
    assert any(values.count(v) > 1 for v in set(values)), f"the zombie's batch committed again: {sorted(values)}"


@pytest.mark.timeout(120)
def test_a_static_member_is_replaced_without_a_rebalance_and_never_twice(cluster):
    c = cluster()
    c.create_topic("in", partitions=PARTITIONS, replicas=1)
    bs = c.bootstrap()
    owners = Owners()
    old = _member(bs, "old", **{"group.instance.id": "worker-1"})
    old.subscribe(["in"], **owners.callbacks("old"))
    wait_until(lambda: (_poll_all([old]), len(owners.of("old")) == PARTITIONS)[1], 30, "the old instance assigned",
               interval=0)
    # A second live instance of worker-1: UNRELEASED_INSTANCE_ID, fatal to librdkafka.
    twin = _member(bs, "twin", **{"group.instance.id": "worker-1"})
    twin.subscribe(["in"])
    errors = []

    def twin_refused():
        old.poll(0.01)
        m = twin.poll(0.05)
        if m is not None and m.error():
            errors.append(m.error())
        return any(_fatal(e) for e in errors)
    wait_until(twin_refused, 30, "the second instance refused", interval=0, state=lambda: errors)
    fatal = [e for e in errors if _fatal(e)]
    assert "instance ID is still used" in fatal[0].str(), fatal
    twin.close()
    # The old instance leaves (epoch -2: away for now, its partitions kept); a new instance with
    # the same id takes its place and its partitions, at once and well within the 2 s session.
    before = described(c)
    old.close()
    new = _member(bs, "new", **{"group.instance.id": "worker-1"})
    new.subscribe(["in"], **owners.callbacks("new"))
    wait_until(lambda: (_poll_all([new]), len(owners.of("new")) == PARTITIONS)[1], 30, "the new instance assigned",
               interval=0)
    after = described(c)
    assert after["group_epoch"] == before["group_epoch"], f"no rebalance: {before} -> {after}"
    assert [m["instance_id"] for m in after["members"]] == ["worker-1"], after
    new.close()


def described(c, group="readers"):
    return [g for g in c.describe()["groups"] if g["group"] == group][0]


@pytest.mark.timeout(120)
def test_a_regex_subscription_picks_up_a_topic_created_later(cluster):
    c = cluster()
    c.create_topic("rx-1", partitions=1, replicas=1)
    bs = c.bootstrap()
    _fill(bs, "rx-1", partitions=1, per_partition=5)
    owners = Owners()
    m = _member(bs, "rx")
    m.subscribe(["^rx-.*"], **owners.callbacks("rx"))
    seen = []
    wait_until(lambda: (_poll_all([m], seen), len(seen) == 5)[1], 30, "rx-1 read", interval=0)
    c.create_topic("rx-2", partitions=2, replicas=1)
    c.create_topic("other", partitions=1, replicas=1)
    _fill(bs, "rx-2", partitions=2, per_partition=5, first=100)
    _fill(bs, "other", partitions=1, per_partition=5, first=500)
    wait_until(lambda: (_poll_all([m], seen), len(seen) == 15)[1], 30, "rx-2 read once created", interval=0,
               state=lambda: (sorted(seen), owners.owner))
    assert sorted(seen) == list(range(5)) + list(range(100, 110)), "rx-1 and rx-2, never 'other'"
    assert sorted(owners.owner) == [("rx-1", 0), ("rx-2", 0), ("rx-2", 1)], owners.owner
    m.close()


@pytest.mark.timeout(120)
def test_a_group_id_is_classic_or_kip848_not_both(cluster):
    """A classic member cannot join a KIP-848 group with members (INCONSISTENT_GROUP_PROTOCOL,
    which librdkafka's classic consumer retries), and a KIP-848 member cannot join a classic
    group with members (GROUP_ID_NOT_FOUND, fatal to librdkafka); an empty group converts."""
    from confluent_kafka import Consumer
    c = cluster()
    c.create_topic("in", partitions=PARTITIONS, replicas=1)
    bs = c.bootstrap()
    owners = Owners()
    modern = _member(bs, "modern", group="mixed")
    modern.subscribe(["in"], **owners.callbacks("modern"))
    wait_until(lambda: (_poll_all([modern]), len(owners.of("modern")) == PARTITIONS)[1], 30, "the KIP-848 member",
               interval=0)
    classic = Consumer({"bootstrap.servers": bs, "group.id": "mixed", "client.id": "classic",
                        "session.timeout.ms": 2000, "heartbeat.interval.ms": 200, "auto.offset.reset": "earliest"})
    classic.subscribe(["in"], **owners.callbacks("classic"))
    errors = []

    def classic_refused():
        modern.poll(0.01)
        m = classic.poll(0.05)
        if m is not None and m.error():
            errors.append(m.error())
        return any("nconsistent" in e.str() or e.code() == 23 for e in errors)
    wait_until(classic_refused, 30, "the classic join refused", interval=0, state=lambda: errors)
    assert owners.of("classic") == [] and not any(_fatal(e) for e in errors), errors
    # The KIP-848 member leaves: the group is empty, and the classic member's retried join
    # converts it.
    modern.close()
    wait_until(lambda: (classic.poll(0.05), len(owners.of("classic")) == PARTITIONS)[1], 30,
               "the classic member to take the emptied group", interval=0, state=lambda: owners.owner)
    assert described(c, "mixed")["group_protocol"] == "classic"
    # Now a KIP-848 member cannot join the classic group with a member: fatal to it.
    late = _member(bs, "late", group="mixed")
    late.subscribe(["in"])
    late_errors = []

    def late_refused():
        classic.poll(0.01)
        m = late.poll(0.05)
        if m is not None and m.error():
            late_errors.append(m.error())
        return any(_fatal(e) for e in late_errors)
    wait_until(late_refused, 30, "the KIP-848 join refused", interval=0, state=lambda: late_errors)
    assert any("group id does not exist" in e.str() for e in late_errors if _fatal(e)), late_errors
    late.close()
    classic.close()


@pytest.mark.timeout(120)
def test_kafka_python_classic_groups_work_beside_kip848_groups(cluster):
    from kafka import KafkaConsumer
    c = cluster()
    c.create_topic("in", partitions=PARTITIONS, replicas=1)
    bs = c.bootstrap()
    _fill(bs, "in")
    modern = _member(bs, "modern", group="kip848")
    modern.subscribe(["in"])
    old = KafkaConsumer(bootstrap_servers=bs.split(","), group_id="classic-kp", auto_offset_reset="earliest",
                        enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500)
    kafka_python_subscribe(old, ["in"])
    seen_modern, seen_old = [], []

    def both_read():
        _poll_all([modern], seen_modern)
        for records in old.poll(timeout_ms=50).values():
            seen_old.extend(int(r.value) for r in records)
        return len(seen_modern) == len(seen_old) == PARTITIONS * PER_PARTITION
    wait_until(both_read, 60, "both groups to read every record", interval=0,
               state=lambda: (len(seen_modern), len(seen_old)))
    assert sorted(seen_modern) == sorted(seen_old) == list(range(PARTITIONS * PER_PARTITION))
    old.commit()
    modern.commit(asynchronous=False)
    groups = {g["group"]: g for g in c.describe()["groups"]}
    assert groups["kip848"]["group_protocol"] == "consumer" and groups["classic-kp"]["group_protocol"] == "classic"
    # kafka-python's admin describes with DescribeGroups (v5 at most here): the classic group as
    # it stands, the KIP-848 one `Dead` with no error and no members, as Kafka 4 answers it.
    from kafka.admin import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=bs.split(","))
    # (It raises any error: GROUP_ID_NOT_FOUND here would fail the whole call.)
    described = admin.describe_groups(["classic-kp", "kip848"])
    assert described["classic-kp"]["group_state"] == "Stable", described
    assert len(described["classic-kp"]["members"]) == 1, described
    assert (described["kip848"]["group_state"], described["kip848"]["members"]) == ("Dead", []), described
    admin.close()
    assert len(groups["kip848"]["committed_offsets"]) == len(groups["classic-kp"]["committed_offsets"]) == PARTITIONS
    old.close()
    modern.close()
