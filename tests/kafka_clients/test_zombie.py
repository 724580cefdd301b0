"""Scenarios 3 and 4, and the negative control: a zombie transactional producer.

Instance A has an open transaction with records in the log; B inits with the same
transactional id (fencing A and aborting A's transaction). A's next write and its commit
must fail as fenced, in each client's own terms; B then commits; read_committed shows all of
B's records and none of A's, and A's late record never reaches the log at all. Against
brokers started with --no-fencing the late write lands, which the negative test asserts.
"""

import pytest

from efcluster import wait_until

TOPIC = "zombie"
A_EARLY = [b"A-early-%d" % i for i in range(5)]
A_LATE = b"A-late"


def _start(client, start_cluster, no_fencing=False):
    cluster = start_cluster(brokers=1, no_fencing=no_fencing)
    cluster.create_topic(TOPIC, partitions=2, replicas=1)
    return cluster, cluster.bootstrap()


def _open_transaction_then_replace(client, bootstrap, tid):
    """A writes A_EARLY to partition 0 in an open transaction (flushed); then B inits."""
    a = client.transactional_producer(bootstrap, tid)
    a.init()
    a.begin()
    for v in A_EARLY:
        a.send(TOPIC, 0, v)
    a.flush(30)
    assert [v for _, _, v in a.acked] == A_EARLY and not a.failed, f"A's first writes: {a.acked} {a.failed}"
    b = client.transactional_producer(bootstrap, tid)
    b.init()
    return a, b


def _assert_confluent_fenced(client, a, partition, commit_reason):
    """librdkafka: A's late write fails, A's state is a fatal _FENCED, and its commit raises it.

    The late record is sent without a Python delivery callback: confluent-kafka 2.16.1 breaks a
    callback that runs after a fatal error was raised in the same poll (clients._confluent_call),
    while without one flush() itself raises the fatal error."""
    ck = client.ck
    a.send(TOPIC, partition, A_LATE, report=False)
    with pytest.raises(ck.KafkaException) as exc:
        a.flush(30)
    err = exc.value.args[0]
    assert err.code() == ck.KafkaError._FENCED and err.fatal(), f"A's flush raised {err}, not a fatal _FENCED"
    assert not [r for r in a.acked if r[2] == A_LATE], f"A's late write was acknowledged: {a.acked}"
    with pytest.raises(ck.KafkaException) as exc:
        a.commit(30)
    err = exc.value.args[0]
    assert err.code() == ck.KafkaError._FENCED, f"A's commit failed with {err}, not _FENCED"
    assert err.code() == -144 and err.fatal(), f"A's commit error is not a fatal _FENCED (-144): {err}"
    # ... and it names the refusal that fenced A
    assert commit_reason in err.str(), f"A's commit error does not say {commit_reason!r}: {err.str()}"


def _assert_kafka_python_fenced(client, a, partition, send_error):
    """kafka-python: the send fails with `send_error`; A ends in FATAL_ERROR with ProducerFencedError."""
    errors = client.errors
    future = a.send(TOPIC, partition, A_LATE)
    with pytest.raises(send_error):
        future.get(timeout=30)
    tm = a.raw._transaction_manager
    # An InvalidProducerEpochError makes A bump its epoch itself (KIP-360); the coordinator's
    # PRODUCER_FENCED answer to that bump is what puts A in its error state.
    wait_until(tm.has_error, 20, "A's transaction manager to reach its error state",
               state=lambda: f"state {tm._current_state.name}, last error {tm._last_error!r}")
    assert tm._current_state.name == "FATAL_ERROR", f"A is in {tm._current_state.name}, not FATAL_ERROR"
    assert isinstance(tm._last_error, errors.ProducerFencedError), f"A's last error: {tm._last_error!r}"
    with pytest.raises(errors.KafkaError) as exc:
        a.commit(30)
    assert "Cannot execute transactional method because we are in an error state: " \
           "[Error 90] ProducerFencedError" in str(exc.value), f"A's commit raised {exc.value!r}"
    assert isinstance(tm._last_error, errors.ProducerFencedError), f"A's last error: {tm._last_error!r}"


def _b_commits(b, partitions):
    b.begin()
    sent = {p: [b"B-p%d-%d" % (p, i) for i in range(5)] for p in partitions}
    for p in partitions:
        for v in sent[p]:
            b.send(TOPIC, p, v)
    b.flush(30)
    b.commit(30)
    assert not b.failed, f"B's deliveries failed: {b.failed}"
    assert sorted(v for _, _, v in b.acked) == sorted(v for vs in sent.values() for v in vs)
    return sent


def _assert_log(client, bootstrap, a_partitions_early, b_sent):
    rc = client.read(bootstrap, TOPIC, [0, 1], "read_committed")
    ru = client.read(bootstrap, TOPIC, [0, 1], "read_uncommitted")
    assert rc.ends == ru.ends, f"a transaction is still open: LSO {rc.ends}, high watermark {ru.ends}"
    for p in (0, 1):
        assert rc.values(p) == b_sent.get(p, []), \
            f"read_committed partition {p}: {rc.values(p)}, expected exactly B's {b_sent.get(p, [])}"
        early = A_EARLY if p in a_partitions_early else []
        # A's first records were written (then aborted by B's init); its late one never lands.
        assert ru.values(p) == early + b_sent.get(p, []), \
            f"read_uncommitted partition {p}: {ru.values(p)}"
    assert A_LATE not in ru.all_values(), "the zombie's late write is in the log"


@pytest.mark.timeout(60)
def test_zombie_late_write_and_commit_fenced(client, start_cluster):
    """Scenario 3: A's late write goes to the partition it already wrote to."""
    cluster, bootstrap = _start(client, start_cluster)
    a, b = _open_transaction_then_replace(client, bootstrap, f"zombie-{client.name}")
    if client.name == "confluent":
        # the partition's leader refused A's old epoch (INVALID_PRODUCER_EPOCH on the produce)
        _assert_confluent_fenced(client, a, 0, "Producer attempted an operation with an old epoch")
    else:
        # The partition's leader refuses A's old epoch: INVALID_PRODUCER_EPOCH on the produce.
        _assert_kafka_python_fenced(client, a, 0, client.errors.InvalidProducerEpochError)
    b_sent = _b_commits(b, [0, 1])
    _assert_log(client, bootstrap, {0}, b_sent)


@pytest.mark.timeout(60)
def test_zombie_write_to_untouched_partition_fenced(client, start_cluster):
    """Scenario 4: A's late write goes to partition 1, which neither A nor B had touched.

    With real clients A first registers the partition (AddPartitionsToTxn), which the
    coordinator refuses as fenced, so the write never reaches the partition."""
    cluster, bootstrap = _start(client, start_cluster)
    a, b = _open_transaction_then_replace(client, bootstrap, f"zombie-new-{client.name}")
    if client.name == "confluent":
        # the coordinator refused A's AddPartitionsToTxn (v0: INVALID_PRODUCER_EPOCH)
        _assert_confluent_fenced(client, a, 1, "Failed to add partitions to transaction")
    else:
        # AddPartitionsToTxn v3 answered PRODUCER_FENCED fails the record with ProducerFencedError.
        _assert_kafka_python_fenced(client, a, 1, client.errors.ProducerFencedError)
    b_sent = _b_commits(b, [0])  # B leaves partition 1 untouched too
    _assert_log(client, bootstrap, {0}, b_sent)


@pytest.mark.timeout(60)
def test_no_fencing_lets_the_zombie_write(client, start_cluster):
    """Negative control: with --no-fencing A's late write is acknowledged and in the log
    (so the fencing tests above would fail against such brokers); the coordinator still
    refuses A's commit."""
    cluster, bootstrap = _start(client, start_cluster, no_fencing=True)
    a, b = _open_transaction_then_replace(client, bootstrap, f"unfenced-{client.name}")
    if client.name == "confluent":
        a.send(TOPIC, 0, A_LATE)
        a.flush(30)
        assert [v for _, _, v in a.acked] == A_EARLY + [A_LATE] and not a.failed, \
            f"A's late write was not acknowledged: acked {a.acked}, failed {a.failed}"
        with pytest.raises(client.ck.KafkaException) as exc:
            a.commit(30)
        err = exc.value.args[0]
        assert err.code() == client.ck.KafkaError._FENCED and err.fatal(), f"A's commit failed with {err}"
    else:
        md = a.send(TOPIC, 0, A_LATE).get(timeout=30)
        assert md.partition == 0 and md.offset >= len(A_EARLY), f"A's late write: {md}"
        with pytest.raises(client.errors.ProducerFencedError):
            a.commit(30)
    late_offset = next(off for p, off, v in a.acked if v == A_LATE)
    ru = client.read(bootstrap, TOPIC, [0], "read_uncommitted")
    assert (late_offset, A_LATE) in ru.records[0], \
        f"A's acknowledged late write is not in the log at offset {late_offset}: {ru.records[0]}"
    assert ru.values(0)[:len(A_EARLY) + 1] == A_EARLY + [A_LATE], f"partition 0: {ru.values(0)}"
