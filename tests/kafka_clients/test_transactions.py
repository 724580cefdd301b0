"""Scenario 2: one transactional producer, several transactions in a row, commits and aborts mixed."""

from collections import Counter

import pytest

# commit/abort of each transaction, in order (TV1: every one at the same producer epoch)
PLAN = ["commit", "abort", "commit", "commit", "abort", "commit", "abort", "abort", "commit"]
PER_PARTITION = 30
PARTITIONS = [0, 1]


@pytest.mark.timeout(60)
def test_transactions_in_a_row_commit_and_abort(client, start_cluster):
    cluster = start_cluster(brokers=1)
    topic = "txns"
    cluster.create_topic(topic, partitions=2, replicas=1)
    bootstrap = cluster.bootstrap()

    producer = client.transactional_producer(bootstrap, f"txns-{client.name}")
    producer.init()
    committed = {p: [] for p in PARTITIONS}
    everything = {p: [] for p in PARTITIONS}
    for t, end in enumerate(PLAN):
        producer.begin()
        sent = {p: [b"t%d-%s-p%d-%d" % (t, end.encode(), p, i) for i in range(PER_PARTITION)] for p in PARTITIONS}
        for i in range(PER_PARTITION):
            for p in PARTITIONS:
                producer.send(topic, p, sent[p][i])
        # librdkafka purges what is unsent at abort: flush first, so aborted records are in the log
        producer.flush(30)
        assert not producer.failed, f"transaction {t}: deliveries failed: {producer.failed[:3]}"
        if end == "commit":
            producer.commit()
        else:
            producer.abort()
        for p in PARTITIONS:
            everything[p] += sent[p]
            if end == "commit":
                committed[p] += sent[p]

    total = sum(len(v) for v in everything.values())
    assert len(producer.acked) == total, f"{len(producer.acked)} of {total} records acknowledged"
    acked_at = {(p, off): v for p, off, v in producer.acked}

    rc = client.read(bootstrap, topic, PARTITIONS, "read_committed")
    ru = client.read(bootstrap, topic, PARTITIONS, "read_uncommitted")
    # No transaction is open any more, so the last stable offset is the high watermark.
    assert rc.ends == ru.ends, f"read_committed end offsets {rc.ends} != read_uncommitted {ru.ends}"

    got_committed = Counter(rc.all_values())
    want_committed = Counter(v for p in PARTITIONS for v in committed[p])
    assert got_committed == want_committed, (
        f"read_committed: missing {sorted((want_committed - got_committed).elements())[:10]}, "
        f"unexpected {sorted((got_committed - want_committed).elements())[:10]}")
    got_all = Counter(ru.all_values())
    want_all = Counter(v for p in PARTITIONS for v in everything[p])
    assert got_all == want_all, (
        f"read_uncommitted: missing {sorted((want_all - got_all).elements())[:10]}, "
        f"unexpected {sorted((got_all - want_all).elements())[:10]}")
    for p in PARTITIONS:
        assert rc.values(p) == committed[p], f"read_committed partition {p}: order differs from the commits"
        assert ru.values(p) == everything[p], f"read_uncommitted partition {p}: order differs from the sends"
        for off, v in ru.records[p]:
            assert acked_at.get((p, off)) == v, f"partition {p} offset {off} holds {v!r}, acknowledged there: " \
                f"{acked_at.get((p, off))!r}"
