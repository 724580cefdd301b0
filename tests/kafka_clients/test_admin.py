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
