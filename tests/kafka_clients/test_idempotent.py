"""Scenario 1: an idempotent producer's 100,000 records, each read back exactly once, in order."""

import pytest

N = 100_000


@pytest.mark.timeout(90)
def test_idempotent_100k_exactly_once_in_order(client, start_cluster):
    cluster = start_cluster(brokers=1)
    topic = "idem"
    cluster.create_topic(topic, partitions=1, replicas=1)
    bootstrap = cluster.bootstrap()

    producer = client.idempotent_producer(bootstrap)
    for i in range(N):
        producer.send(topic, 0, b"%d" % i)
    producer.flush(60)

    assert not producer.failed, f"{len(producer.failed)} deliveries failed, first: {producer.failed[:3]}"
    assert len(producer.acked) == N, f"{len(producer.acked)} of {N} records acknowledged"
    # One producer, one partition, nothing failed: record i must sit at offset i.
    misplaced = [(p, off, v) for p, off, v in producer.acked if p != 0 or off != int(v)]
    assert not misplaced, f"{len(misplaced)} acknowledged at an unexpected offset, first: {misplaced[:5]}"

    read = client.read(bootstrap, topic, [0], "read_uncommitted")
    assert read.ends[0] == N, f"end offset {read.ends[0]}, expected {N}"
    records = read.records[0]
    assert len(records) == N, f"read {len(records)} records, expected {N}"
    offsets = [off for off, _ in records]
    values = [int(v) for _, v in records]
    assert offsets == list(range(N)), "offsets are not 0..N-1 in order"
    dups = len(values) - len(set(values))
    assert dups == 0, f"{dups} records read more than once"
    assert values == list(range(N)), f"records out of order; first mismatch at index " \
        f"{next(i for i, v in enumerate(values) if v != i)}"
