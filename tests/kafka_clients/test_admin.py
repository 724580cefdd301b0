"""The Kafka admin surface (issue 32) through the pinned clients' admin APIs: what DescribeConfigs
reports of a topic and a broker, with Kafka's sources (a broker flag given is STATIC_BROKER_CONFIG,
one left at its default DEFAULT_CONFIG, a topic's own setting TOPIC_CONFIG). Groups' deletion is in
test_groups.py, its authorization in test_acls.py.
"""

import pytest

import efcluster


@pytest.fixture
def cluster(tmp_path):
    made = []

    def start(**kwargs):
        c = efcluster.Cluster(str(tmp_path / f"cluster-{len(made)}"), **kwargs)
        made.append(c)
        return c

    yield start
    for c in made:
        c.close()


@pytest.mark.timeout(60)
def test_describe_configs_reports_where_each_value_comes_from(cluster):
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType
    c = cluster(broker_args=["--segment-bytes", "1048576", "--retention-ms", "3600000"])
    c.create_topic("t", partitions=1, replicas=1)
    admin = AdminClient({"bootstrap.servers": c.bootstrap()})
    topic = ConfigResource(ResourceType.TOPIC, "t")
    broker = ConfigResource(ResourceType.BROKER, "1")
    got = {r: f.result(10) for r, f in admin.describe_configs([topic, broker], request_timeout=10).items()}
    t = got[topic]
    assert (t["segment.bytes"].value, t["segment.bytes"].source) == \
        ("1048576", ConfigSource.STATIC_BROKER_CONFIG.value), t["segment.bytes"]
    assert (t["retention.ms"].value, t["retention.ms"].source) == \
        ("3600000", ConfigSource.STATIC_BROKER_CONFIG.value), t["retention.ms"]
    assert t["retention.bytes"].source == ConfigSource.DEFAULT_CONFIG.value, t["retention.bytes"]
    assert t["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value, t["max.message.bytes"]
    assert t["min.insync.replicas"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, t["min.insync.replicas"]
    b = got[broker]
    assert b["log.segment.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG.value, b["log.segment.bytes"]
    assert b["message.max.bytes"].source == ConfigSource.DEFAULT_CONFIG.value, b["message.max.bytes"]
    kafka_addr = c.brokers[1].kafka_addr
    assert b["advertised.listeners"].value == f"PLAINTEXT://{kafka_addr}", b["advertised.listeners"]


@pytest.mark.timeout(60)
def test_kafka_python_infers_kafka_4_0_from_the_versions_offered(cluster):
    """Issue 32, item 5: kafka-python infers a broker's version from the api versions it offers
    (ListOffsets v10 is Kafka 4.0's); ListOffsets' KIP-405 and KIP-1005 timestamps answer as a
    broker without tiered storage does."""
    import kafka
    c = cluster()
    c.create_topic("t", partitions=1, replicas=1)
    admin = kafka.KafkaAdminClient(bootstrap_servers=c.bootstrap().split(","), request_timeout_ms=10000)
    try:
        data = admin.get_broker_version_data(1)
        assert data.broker_version[:2] == (4, 0), data.broker_version
        tp = kafka.TopicPartition("t", 0)
        assert admin.list_partition_offsets({tp: kafka.admin.OffsetSpec.EARLIEST_LOCAL})[tp].offset == 0
        assert admin.list_partition_offsets({tp: kafka.admin.OffsetSpec.LATEST_TIERED})[tp].offset == -1
    finally:
        admin.close()


@pytest.mark.timeout(120)
def test_elect_leaders_moves_the_leadership_back_to_the_preferred_replica(cluster):
    """Issue 32, item 4: ElectLeaders through confluent-kafka's AdminClient. PREFERRED: not needed
    while the first replica leads; not available while it is down or out of sync; once it is back
    in the ISR, it leads again under a new leader epoch, and `admin elect-leader --preferred` says
    it is not needed. UNCLEAN: not needed while the leader lives. Every acknowledged record is
    read back after the moves."""
    from confluent_kafka import ElectionType, KafkaError, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient
    c = cluster(brokers=3, lease_ms=1000, heartbeat_ms=100)
    c.create_topic("t", partitions=1, replicas=3)
    bs = c.bootstrap()
    p = c.partition("t", 0)
    preferred = p["replicas"][0]
    assert p["leader"] == preferred, p
    # Every broker answers as the controller (each relays to the coordinator), so an admin
    # client sends ElectLeaders to the broker whose metadata it heard last. Once it has learned
    # the brokers, librdkafka may ask any of them for metadata: a client that asked the preferred
    # broker before the pause below sent its next ElectLeaders there and waited out its timeout
    # (failed once under load, as at a frozen Kafka controller). So each call is made by a new
    # client bootstrapped at the others: its first metadata, and so its controller, comes from
    # one of them, and the paused broker cannot answer a later metadata request.
    others = [b for b in c.brokers if b != preferred]
    tp = TopicPartition("t", 0)

    def elect(kind):
        admin = AdminClient({"bootstrap.servers": c.bootstrap(others)})
        # (confluent-kafka 2.16.1 fails this call when given a timeout keyword: SystemError)
        return admin.elect_leaders(kind, [tp]).result(15)[tp]

    def code(kind):
        err = elect(kind)
        return err.code() if err is not None else None

    acked = []

    def produce(n, start):
        prod = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "acks": "all"})
        for i in range(start, start + n):
            prod.produce("t", value=str(i).encode(), partition=0,
                         on_delivery=lambda e, m: e is None and acked.append(int(m.value())))
        assert prod.flush(30) == 0

    produce(10, 0)
    assert code(ElectionType.PREFERRED) == KafkaError.ELECTION_NOT_NEEDED
    assert code(ElectionType.UNCLEAN) == KafkaError.ELECTION_NOT_NEEDED
    c.brokers[preferred].stop()
    moved = c.wait_leader_change("t", 0, preferred, p["leader_epoch"])
    assert code(ElectionType.PREFERRED) == KafkaError.PREFERRED_LEADER_NOT_AVAILABLE
    produce(10, 10)
    c.brokers[preferred].cont()
    c.wait_in_isr("t", 0, preferred)
    assert elect(ElectionType.PREFERRED) is None
    back = c.partition("t", 0)
    assert back["leader"] == preferred and back["leader_epoch"] > moved["leader_epoch"], back
    again = c.admin("elect-leader", "t", "--preferred", check=False)
    assert again.returncode == 1 and "ELECTION_NOT_NEEDED" in again.stderr, again.stderr
    produce(10, 20)
    values = sorted(int(r["value"]) for r in c.read_log("t", 0))
    assert sorted(acked) == list(range(30)) and values == list(range(30)), (acked, values)


@pytest.mark.timeout(60)
def test_create_partitions_places_them_on_the_replicas_assigned(cluster):
    """Issue 32, item 5: CreatePartitions with a replica assignment through confluent-kafka's
    AdminClient: each new partition on the brokers given, the first leading, and writable; an
    assignment that cannot be followed is refused INVALID_REPLICA_ASSIGNMENT, adding nothing."""
    from confluent_kafka import KafkaError, KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewPartitions
    c = cluster(brokers=3)
    c.create_topic("t", partitions=1, replicas=2)
    bs = c.bootstrap()
    admin = AdminClient({"bootstrap.servers": bs})
    bad = NewPartitions("t", 3, replica_assignment=[[3, 1], [2, 2]])
    with pytest.raises(KafkaException) as refused:
        admin.create_partitions([bad], request_timeout=10)["t"].result(15)
    assert refused.value.args[0].code() == KafkaError.INVALID_REPLICA_ASSIGNMENT, refused.value
    assert "names broker 2 twice" in refused.value.args[0].str(), refused.value
    assert len([p for p in c.describe()["partitions"] if p["topic"] == "t"]) == 1, "nothing added"
    good = NewPartitions("t", 3, replica_assignment=[[3, 1], [2, 3]])
    admin.create_partitions([good], request_timeout=10)["t"].result(15)
    for index, replicas in ((1, [3, 1]), (2, [2, 3])):
        p = c.partition("t", index)
        assert (p["replicas"], p["leader"]) == (replicas, replicas[0]), p
    prod = Producer({"bootstrap.servers": bs, "acks": "all"})
    delivered = []
    for index in (1, 2):
        prod.produce("t", value=b"x", partition=index, on_delivery=lambda e, m: delivered.append((e, m.partition())))
    assert prod.flush(30) == 0
    assert sorted(part for e, part in delivered if e is None) == [1, 2], delivered
    # Without an assignment both clients send none (null), and the coordinator places them.
    admin.create_partitions([NewPartitions("t", 4)], request_timeout=10)["t"].result(15)
    import kafka
    from kafka.admin import NewPartitions as KafkaNewPartitions
    kadmin = kafka.KafkaAdminClient(bootstrap_servers=bs.split(","), request_timeout_ms=10000)
    try:
        kadmin.create_partitions({"t": KafkaNewPartitions(5)})
    finally:
        kadmin.close()
    assert len([p for p in c.describe()["partitions"] if p["topic"] == "t"]) == 5


@pytest.mark.timeout(90)
def test_describe_topic_partitions_through_kafka_python(cluster):
    """Issue 32, item 5: DescribeTopicPartitions (KIP-966) through kafka-python's admin client:
    each partition's leader, epoch, replicas and ISR as the coordinator holds them; a page of one
    partition names where the next starts. (The eligible leader replicas of frozen followers:
    tests/kafka.rs, on a connection to the leader alone, which a client here cannot be held to.)"""
    import kafka
    c = cluster(brokers=3)
    c.create_topic("t", partitions=2, replicas=3)
    kadmin = kafka.KafkaAdminClient(bootstrap_servers=c.bootstrap().split(","), request_timeout_ms=10000)
    try:
        got = kadmin.describe_topic_partitions(["t"])
        (topic,) = got["topics"]
        assert topic["error_code"] == 0 and got["next_cursor"] is None, got
        for p in topic["partitions"]:
            want = c.partition("t", p["partition_index"])
            assert (p["leader_id"], p["leader_epoch"], p["replica_nodes"], p["isr_nodes"]) == \
                (want["leader"], want["leader_epoch"], want["replicas"], want["isr"]), (p, want)
        page = kadmin.describe_topic_partitions(["t"], response_partition_limit=1)
        assert [p["partition_index"] for p in page["topics"][0]["partitions"]] == [0]
        assert page["next_cursor"] == {"topic_name": "t", "partition_index": 1}, page
    finally:
        kadmin.close()


@pytest.mark.timeout(180)
def test_delete_records_moves_the_log_start_on_every_replica(cluster):
    """Issue 32, item 2: DeleteRecords (KIP-107) through confluent-kafka's AdminClient, on a
    three-replica partition written by a transactional producer (a committed transaction, then an
    aborted one) and an idempotent one. The log start moves into the aborted transaction: the low
    watermark is the offset asked, a fetch below it is OFFSET_OUT_OF_RANGE, read_committed still
    skips the aborted records left above it (the aborted-transaction index follows) and reads the
    rest exactly once. Past the high watermark, refused.
    The leader is killed: the new one (a follower that was in sync) has the same log start, and
    both producers carry on (their state is kept, KAFKA-7190), every acknowledged record there."""
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient
    c = cluster(brokers=3, lease_ms=1000, heartbeat_ms=100)
    c.create_topic("t", partitions=1, replicas=3)
    bs = c.bootstrap()
    txp = Producer({"bootstrap.servers": bs, "transactional.id": "deleter", "acks": "all"})
    txp.init_transactions(15)
    txp.begin_transaction()
    for i in range(5):
        txp.produce("t", value=f"c{i}".encode(), partition=0)
    txp.commit_transaction(15)          # offsets 0-4, the commit marker at 5
    txp.begin_transaction()
    for i in range(3):
        txp.produce("t", value=f"a{i}".encode(), partition=0)
    assert txp.flush(15) == 0           # written before the abort (which purges what is unsent)
    txp.abort_transaction(15)           # offsets 6-8, the abort marker at 9
    idem = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "acks": "all"})
    for i in range(5):
        idem.produce("t", value=f"i{i}".encode(), partition=0)   # offsets 10-14
    assert idem.flush(30) == 0

    admin = AdminClient({"bootstrap.servers": bs})

    def delete(tp):
        return list(admin.delete_records([tp], request_timeout=15, operation_timeout=15).values())[0].result(20)

    assert delete(TopicPartition("t", 0, 7)).low_watermark == 7
    # (librdkafka refuses a partition that does not exist itself, with no request: the broker's
    # answer to one is checked in tests/kafka.rs.)
    with pytest.raises(Exception) as refused:
        delete(TopicPartition("t", 0, 99))
    assert refused.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE, refused.value

    def values(isolation, expect):
        cons = Consumer({"bootstrap.servers": bs, "group.id": f"g-{isolation}-{expect}",
                         "auto.offset.reset": "earliest", "isolation.level": isolation,
                         "enable.auto.commit": False})
        cons.assign([TopicPartition("t", 0, -2)])  # from the log start
        got = []
        for _ in range(300):
            m = cons.poll(0.1)
            if m is not None and m.error() is None:
                got.append(m.value().decode())
            if len(got) >= expect:
                break
        low, high = cons.get_watermark_offsets(TopicPartition("t", 0), timeout=10)
        cons.close()
        return got, low, high

    got, low, high = values("read_committed", 5)
    assert (got, low, high) == ([f"i{i}" for i in range(5)], 7, 15), (got, low, high)
    got, _, _ = values("read_uncommitted", 7)
    assert got == ["a1", "a2"] + [f"i{i}" for i in range(5)], got

    below = Consumer({"bootstrap.servers": bs, "group.id": "below", "auto.offset.reset": "error"})
    below.assign([TopicPartition("t", 0, 3)])
    errors = []
    for _ in range(300):
        m = below.poll(0.1)
        if m is not None and m.error() is not None:
            errors.append(m.error())
            break
    below.close()
    assert errors and errors[0].code() == KafkaError._AUTO_OFFSET_RESET and "out of range" in errors[0].str().lower(), \
        errors

    # The leader dies: an in-sync follower leads, with the same log start.
    p = c.partition("t", 0)
    c.brokers[p["leader"]].kill9()
    c.wait_leader_change("t", 0, p["leader"], p["leader_epoch"])
    live = c.bootstrap([b for b in c.brokers if b != p["leader"]])
    for i in range(5, 10):
        idem.produce("t", value=f"i{i}".encode(), partition=0)
    assert idem.flush(60) == 0
    txp.begin_transaction()
    txp.produce("t", value=b"c-after", partition=0)
    txp.commit_transaction(30)
    bs = live
    got, low, _ = values("read_committed", 11)
    assert low == 7, low
    assert got == [f"i{i}" for i in range(10)] + ["c-after"], got


@pytest.mark.timeout(90)
def test_describe_and_alter_replica_log_dirs_through_kafka_python(cluster):
    """Issue 32, item 4: kafka-python's describe_log_dirs asks every broker for its one log
    directory (its --data-dir, as an absolute path) and the replicas in it, each with its log's
    real size in bytes (the segment files') and an offset lag of 0 once in sync; a partition can be
    asked alone. alter_replica_log_dirs is honest with one directory: a replica asked into the
    directory it is in is already there (NoError), another path is LogDirNotFound, a partition the
    broker hosts no replica of is ReplicaNotAvailable."""
    import os
    import time

    import kafka
    from kafka import TopicPartitionReplica
    c = cluster(brokers=2)
    c.create_topic("t", partitions=2, replicas=2)
    prod = kafka.KafkaProducer(bootstrap_servers=c.bootstrap().split(","), acks="all")
    for i in range(20):
        prod.send("t", value=b"x" * 100, partition=i % 2)
    prod.flush(30)
    prod.close()
    c.wait_in_isr("t", 0, 1)
    c.wait_in_isr("t", 1, 2)
    admin = kafka.KafkaAdminClient(bootstrap_servers=c.bootstrap().split(","), request_timeout_ms=10000)
    try:
        def on_disk(broker_id, partition):
            d = os.path.join(c.base_dir, f"broker-{broker_id}", f"t-{partition}")
            return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".log"))

        def sizes():
            got = {}
            for answer in admin.describe_log_dirs():
                [log_dir] = answer["log_dirs"]
                assert log_dir["error_code"] == 0, log_dir
                assert log_dir["log_dir"] == os.path.realpath(os.path.join(c.base_dir, f"broker-{answer['broker']}"))
                for topic in log_dir["topics"]:
                    for p in topic["partitions"]:
                        got[(answer["broker"], topic["name"], p["partition_index"])] = \
                            (p["partition_size"], p["offset_lag"])
            return got

        def want():
            return {(b, "t", p): (on_disk(b, p), 0) for b in (1, 2) for p in (0, 1)}

        deadline = time.time() + 20
        while (got := sizes()) != want() and time.time() < deadline:
            time.sleep(0.2)   # the followers' last batches and high watermark
        assert got == want(), (got, want())
        assert all(size > 0 for size, _ in want().values())
        [one] = admin.describe_log_dirs(topic_partitions={"t": [1]}, brokers=[1])
        assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in one["log_dirs"][0]["topics"]] \
            == [("t", [1])], one

        here = os.path.realpath(os.path.join(c.base_dir, "broker-1"))
        result = admin.alter_replica_log_dirs({
            TopicPartitionReplica("t", 0, 1): here,
            TopicPartitionReplica("t", 7, 1): here,
        })
        assert result[TopicPartitionReplica("t", 0, 1)] is kafka.errors.NoError, result
        assert result[TopicPartitionReplica("t", 7, 1)] is kafka.errors.ReplicaNotAvailableError, result
        result = admin.alter_replica_log_dirs({TopicPartitionReplica("t", 1, 2): "/elsewhere"})
        assert result[TopicPartitionReplica("t", 1, 2)] is kafka.errors.LogDirNotFoundError, result
    finally:
        admin.close()


@pytest.mark.timeout(120)
def test_partition_reassignments_through_kafka_python(cluster):
    """Issue 32, item 4: AlterPartitionReassignments and ListPartitionReassignments through
    kafka-python's admin client, on a two-replica partition of a four-broker cluster. Refused:
    a broker that does not exist (INVALID_REPLICA_ASSIGNMENT), a cancel with no move
    (NO_REASSIGNMENT_IN_PROGRESS), a partition that does not exist (UNKNOWN_TOPIC_OR_PARTITION).
    A move to a paused broker cannot complete: it is listed (the target's replicas then the
    removed one, adding and removing), and cancelling it puts the original replicas back at once
    and lists nothing. A move to the two other brokers completes (so the leadership moves): the
    metadata names them, the removed replicas' directories go, and every acknowledged record,
    before the move and after it, is read once."""
    import os
    import time

    import kafka
    from kafka import TopicPartition
    from kafka.errors import (InvalidReplicationAssignmentError, NoReassignmentInProgressError,
                              UnknownTopicOrPartitionError)
    c = cluster(brokers=4, lease_ms=3000)
    c.create_topic("t", partitions=1, replicas=2)
    p = c.partition("t", 0)
    original, leader, epoch = p["replicas"], p["leader"], p["leader_epoch"]
    others = [b for b in sorted(c.brokers) if b not in original]
    assert len(original) == 2 and leader in original and len(others) == 2, p
    tp = TopicPartition("t", 0)

    prod = kafka.KafkaProducer(bootstrap_servers=c.bootstrap().split(","), acks="all")
    values = [f"before-{i:03}-".encode() + b"x" * 200 for i in range(50)]
    offsets = [prod.send("t", value=v, partition=0).get(timeout=30).offset for v in values]
    prod.close()
    assert offsets == list(range(50)), offsets

    def dir_of(broker_id):
        return os.path.join(c.base_dir, f"broker-{broker_id}", "t-0")

    def wait_gone(broker_ids):
        efcluster.wait_until(lambda: not any(os.path.exists(dir_of(b)) for b in broker_ids), 30,
                             f"the directories of t-0 on brokers {broker_ids} to be removed",
                             state=lambda: [(b, os.path.exists(dir_of(b))) for b in broker_ids])

    # Every broker answers as the controller (each relays to the coordinator), but kafka-python
    # asks any broker it knows of which one that is, and keeps the first answer: the broker
    # paused below is one the admin client did not settle on, so none of its requests goes there
    # (one would wait out its request timeout, as at a frozen Kafka controller).
    admin = kafka.KafkaAdminClient(bootstrap_servers=c.bootstrap(original).split(","), request_timeout_ms=10000)
    try:
        assert admin.alter_partition_reassignments({tp: [original[0], 99]}) == \
            {tp: InvalidReplicationAssignmentError}
        assert admin.alter_partition_reassignments({tp: None}) == {tp: NoReassignmentInProgressError}
        assert admin.alter_partition_reassignments({TopicPartition("t", 7): others}) == \
            {TopicPartition("t", 7): UnknownTopicOrPartitionError}
        assert admin.list_partition_reassignments() == {}
        assert c.partition("t", 0)["replicas"] == original

        # A move that cannot complete: its new replica's broker is paused (still live for its
        # lease), so it never catches up. Listed, then cancelled back to the original replicas.
        controller = admin._controller_id   # (kafka-python's: no public accessor)
        assert controller in c.brokers, controller
        paused = next(b for b in others if b != controller)
        kept, removed = original
        c.brokers[paused].stop()
        try:
            assert admin.alter_partition_reassignments({tp: [paused, kept]}) == {tp: None}
            assert admin.list_partition_reassignments() == {tp: {
                "replicas": [paused, kept, removed], "adding_replicas": [paused], "removing_replicas": [removed]}}
            assert admin.list_partition_reassignments([tp]) == admin.list_partition_reassignments({"t": [0]})
            moving = c.partition("t", 0)
            assert moving["replicas"] == [paused, kept, removed] and moving["leader_epoch"] > epoch, moving
            # epochfence's own admin shows the move too.
            assert (moving["adding"], moving["removing"]) == ([paused], [removed]), moving
            assert admin.alter_partition_reassignments({tp: None}) == {tp: None}
            assert admin.list_partition_reassignments() == {}
            back = c.partition("t", 0)
            assert back["replicas"] == original and back["leader_epoch"] > moving["leader_epoch"], back
            assert (back["adding"], back["removing"]) == ([], []), back
        finally:
            c.brokers[paused].cont()
        wait_gone([paused])
        c.wait_brokers_alive(list(c.brokers))

        # The real move: to the two other brokers, so the leader is removed too.
        assert admin.alter_partition_reassignments({tp: others}) == {tp: None}
        efcluster.wait_until(lambda: admin.list_partition_reassignments() == {}, 30,
                             "the move of t-0 to complete", state=lambda: c.partition("t", 0))
        moved = c.partition("t", 0)
        assert moved["replicas"] == others and moved["leader"] in others, moved
        assert moved["leader_epoch"] > back["leader_epoch"], moved

        def kafka_metadata():
            [topic] = admin.describe_topics(["t"])
            [part] = topic["partitions"]
            ok = part["replica_nodes"] == others and part["leader_id"] == moved["leader"]
            return part if ok else None

        efcluster.wait_until(kafka_metadata, 30, f"Kafka metadata of t-0 to name replicas {others}",
                             state=lambda: admin.describe_topics(["t"]))
        wait_gone(original)
        for b in others:
            assert os.path.isdir(dir_of(b)), b
    finally:
        admin.close()

    live = c.bootstrap().split(",")
    prod = kafka.KafkaProducer(bootstrap_servers=live, acks="all")
    after = prod.send("t", value=b"after", partition=0).get(timeout=30)
    prod.close()
    assert after.offset == 50, after

    cons = kafka.KafkaConsumer(bootstrap_servers=live, enable_auto_commit=False)
    try:
        cons.assign([tp])
        cons.seek_to_beginning(tp)
        end = cons.end_offsets([tp])[tp]
        assert end == 51, end
        read = []
        deadline = time.monotonic() + 30
        while cons.position(tp) < end:
            assert time.monotonic() < deadline, f"read {len(read)} of {end} records"
            for records in cons.poll(timeout_ms=500).values():
                read.extend((r.offset, r.value) for r in records)
    finally:
        cons.close()
    assert read == list(enumerate(values + [b"after"])), [(o, v[:12]) for o, v in read]


@pytest.mark.timeout(120)
def test_topic_configs_through_confluent_kafka(cluster):
    """Issue 32, item 1: per-topic configs through confluent-kafka's AdminClient. create_topics
    with configs (a Kafka config epochfence does not apply refused, INVALID_CONFIG naming it);
    describe_configs shows them as the topic's (DYNAMIC_TOPIC_CONFIG) and the rest as the
    broker's, with synonyms; they are applied: max.message.bytes refuses a bigger message
    (MSG_SIZE_TOO_LARGE) while another topic takes it, retention.bytes with segment.bytes moves
    this topic's log start while the other keeps everything. incremental_alter_configs changes only
    what it names, alter_configs replaces the set."""
    import time

    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                       ConfigSource, NewTopic, ResourceType)
    c = cluster(broker_args=["--retention-check-ms", "100"])
    c.create_topic("plain", partitions=1, replicas=1)
    bs = c.bootstrap()
    admin = AdminClient({"bootstrap.servers": bs})

    refused = admin.create_topics([NewTopic("bad", 1, 1, config={"unclean.leader.election.enable": "true"})],
                                  request_timeout=15)["bad"]
    with pytest.raises(KafkaException) as e:
        refused.result(20)
    assert e.value.args[0].code() == KafkaError.INVALID_CONFIG, e.value
    assert "unclean.leader.election.enable" in e.value.args[0].str(), e.value
    configs = {"max.message.bytes": "2000", "segment.bytes": "1024", "retention.bytes": "2048"}
    admin.create_topics([NewTopic("cfg", 1, 1, config=configs)], request_timeout=15)["cfg"].result(20)

    topic = ConfigResource(ResourceType.TOPIC, "cfg")

    def described():
        return admin.describe_configs([topic], request_timeout=15)[topic].result(20)

    got = described()
    for k, v in configs.items():
        assert (got[k].value, got[k].source) == (v, ConfigSource.DYNAMIC_TOPIC_CONFIG.value), got[k]
        assert got[k].synonyms[k].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, got[k].synonyms
    assert got["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value, got["retention.ms"]

    # max.message.bytes: refused here, taken by the other topic.
    prod = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 0})
    errors = {}
    for t in ("cfg", "plain"):
        prod.produce(t, value=b"x" * 3000, partition=0,
                     on_delivery=lambda err, m, t=t: errors.__setitem__(t, err))
        prod.flush(30)
    assert errors["cfg"] is not None and errors["cfg"].code() == KafkaError.MSG_SIZE_TOO_LARGE, errors
    assert errors["plain"] is None, errors

    # retention.bytes 2048 over segments of 1024 (a topic of its own: librdkafka's batches here
    # are bigger than cfg's max.message.bytes): its log start moves, the other's not.
    ret = {"segment.bytes": "1024", "retention.bytes": "2048"}
    admin.create_topics([NewTopic("ret", 1, 1, config=ret)], request_timeout=15)["ret"].result(20)
    failed = []
    # Batches of a few messages: retention deletes whole segments, and keeps at least 2048 bytes.
    small = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "batch.size": 400})
    for i in range(60):
        for t in ("ret", "plain"):
            small.produce(t, value=f"{t}-{i:03}-".encode() + b"r" * 80, partition=0,
                          on_delivery=lambda err, m: err is not None and failed.append(err))
        small.poll(0)
    assert small.flush(30) == 0 and not failed, failed
    cons = Consumer({"bootstrap.servers": bs, "group.id": "watch"})
    deadline = time.time() + 30
    while cons.get_watermark_offsets(TopicPartition("ret", 0), timeout=10)[0] == 0:
        assert time.time() < deadline, "retention never moved the log start of ret"
        time.sleep(0.2)
    assert cons.get_watermark_offsets(TopicPartition("plain", 0), timeout=10)[0] == 0
    cons.close()

    # incremental_alter_configs: set one, delete one; the rest stays.
    change = ConfigResource(ResourceType.TOPIC, "cfg", incremental_configs=[
        ConfigEntry("max.message.bytes", "100000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.bytes", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    admin.incremental_alter_configs([change], request_timeout=15)[change].result(20)
    got = described()
    assert (got["max.message.bytes"].value, got["segment.bytes"].value) == ("100000", "1024")
    assert got["retention.bytes"].source == ConfigSource.DEFAULT_CONFIG.value, got["retention.bytes"]
    bad = ConfigResource(ResourceType.TOPIC, "cfg", incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as e:
        admin.incremental_alter_configs([bad], request_timeout=15)[bad].result(20)
    assert e.value.args[0].code() == KafkaError.INVALID_CONFIG, e.value

    # alter_configs: the set becomes exactly what is named.
    replace = ConfigResource(ResourceType.TOPIC, "cfg", set_config={"retention.ms": "86400000"})
    admin.alter_configs([replace], request_timeout=15)[replace].result(20)
    got = described()
    assert (got["retention.ms"].value, got["retention.ms"].source) == \
        ("86400000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert got["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value, got["segment.bytes"]
    assert got["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value, got["max.message.bytes"]


@pytest.mark.timeout(60)
def test_topic_configs_through_kafka_python(cluster):
    """Issue 32, item 1: kafka-python creates a topic with configs, changes them with
    alter_configs (IncrementalAlterConfigs, as it uses by default with a 4.0 broker) and reads
    them back with describe_configs."""
    import kafka
    from kafka.admin import ConfigResource, ConfigResourceType
    c = cluster()
    admin = kafka.KafkaAdminClient(bootstrap_servers=c.bootstrap().split(","), request_timeout_ms=10000)
    try:
        admin.create_topics({"kp": {"num_partitions": 1, "replication_factor": 1,
                                    "configs": {"segment.bytes": "4096", "message.timestamp.type": "LogAppendTime"}}})
        res = ConfigResource(ConfigResourceType.TOPIC, "kp", configs={"retention.ms": "3600000"})
        admin.alter_configs([res], raise_on_unknown=False)
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kp")], config_filter="all")
        text = repr(described)
        for want in ("4096", "LogAppendTime", "3600000"):
            assert want in text, described
    finally:
        admin.close()


@pytest.mark.timeout(60)
def test_log_append_time_is_what_both_clients_see(cluster):
    """Issue 32, item 1: on a topic with message.timestamp.type LogAppendTime, both clients see
    the broker's time, not the hour-old one they sent: in the delivery report (the Produce
    answer's log_append_time_ms) and in the consumed record, typed as log-append time; on a
    CreateTime topic, their own."""
    import time

    import kafka
    from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    c = cluster()
    bs = c.bootstrap()
    admin = AdminClient({"bootstrap.servers": bs})
    futures = admin.create_topics([NewTopic("lat", 1, 1, config={"message.timestamp.type": "LogAppendTime"}),
                                   NewTopic("ct", 1, 1)], request_timeout=15)
    for f in futures.values():
        f.result(20)
    sent = int(time.time() * 1000) - 3_600_000
    before = int(time.time() * 1000)
    reports = {}
    prod = Producer({"bootstrap.servers": bs})
    for t in ("lat", "ct"):
        prod.produce(t, value=b"x", partition=0, timestamp=sent,
                     on_delivery=lambda err, m, t=t: reports.__setitem__(t, (err, m.timestamp())))
    assert prod.flush(30) == 0
    assert reports["lat"][0] is None and reports["lat"][1][0] == TIMESTAMP_LOG_APPEND_TIME, reports
    assert reports["lat"][1][1] >= before, reports
    assert reports["ct"][1] == (TIMESTAMP_CREATE_TIME, sent), reports
    kp = kafka.KafkaProducer(bootstrap_servers=bs.split(","))
    meta = kp.send("lat", value=b"y", partition=0, timestamp_ms=sent).get(timeout=30)
    kp.close()
    assert meta.timestamp >= before, meta
    cons = Consumer({"bootstrap.servers": bs, "group.id": "lat"})
    cons.assign([TopicPartition("lat", 0, 0)])
    seen = []
    for _ in range(100):
        m = cons.poll(0.2)
        if m is not None and m.error() is None:
            seen.append(m.timestamp())
        if len(seen) == 2:
            break
    cons.close()
    assert len(seen) == 2 and all(kind == TIMESTAMP_LOG_APPEND_TIME and ts >= before for kind, ts in seen), seen
    kc = kafka.KafkaConsumer(bootstrap_servers=bs.split(","), auto_offset_reset="earliest", consumer_timeout_ms=10000)
    kc.assign([kafka.TopicPartition("lat", 0)])
    records = [next(kc) for _ in range(2)]
    kc.close()
    assert all(r.timestamp_type == 1 and r.timestamp >= before for r in records), records
