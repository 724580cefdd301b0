"""Scenarios 5 and 6: acks=all idempotent streams across a leader's death and a leader's freeze.

Three brokers, a topic of one partition and three replicas, a 1 s broker lease and 100 ms
heartbeats. The producer's delivery timeout outlives the failover; its request timeout is
short so that requests stuck on a frozen leader are given up and retried on the new one.
"""

import pytest

from efcluster import wait_until

TOPIC = "ledger"


def _failover_cluster(start_cluster):
    cluster = start_cluster(brokers=3, lease_ms=1000, heartbeat_ms=100)
    (part,) = cluster.create_topic(TOPIC, partitions=1, replicas=3)
    return cluster, part


def _producer(client, bootstrap):
    if client.name == "confluent":
        return client.idempotent_producer(bootstrap, **{
            "delivery.timeout.ms": 60000, "request.timeout.ms": 2000, "socket.timeout.ms": 2000,
            "topic.metadata.refresh.interval.ms": 500, "retry.backoff.ms": 50, "retry.backoff.max.ms": 200})
    return client.idempotent_producer(bootstrap, delivery_timeout_ms=60000, request_timeout_ms=2000,
                                      metadata_max_age_ms=500, retry_backoff_ms=50)


def _assert_exactly_once_in_order(values, n, where):
    got = [int(v) for v in values]
    counts = {}
    for v in got:
        counts[v] = counts.get(v, 0) + 1
    missing = [i for i in range(n) if i not in counts]
    dups = sorted(v for v, c in counts.items() if c > 1)
    alien = sorted(v for v in counts if not 0 <= v < n)
    assert not missing and not dups and not alien, (
        f"{where}: {len(got)} records for {n} acknowledged; {len(missing)} missing (first {missing[:10]}), "
        f"{len(dups)} duplicated (first {dups[:10]}), unknown {alien[:10]}")
    assert got == list(range(n)), f"{where}: records out of order at index " \
        f"{next(i for i, v in enumerate(got) if v != i)}"


def _assert_all_acked(producer, n):
    assert not producer.failed, f"{len(producer.failed)} deliveries failed, first: {producer.failed[:3]}"
    acked = sorted(int(v) for _, _, v in producer.acked)
    assert acked == list(range(n)), f"{len(acked)} of {n} records acknowledged (distinct: {len(set(acked))})"
    offsets = sorted(off for _, off, _ in producer.acked)
    assert offsets == list(range(n)), "acknowledged offsets are not 0..n-1, each once"


N_KILL = 20_000


@pytest.mark.timeout(60)
def test_leader_killed_mid_stream(client, start_cluster):
    """Scenario 5: SIGKILL the leader while records are in flight; nothing lost, nothing doubled."""
    cluster, part = _failover_cluster(start_cluster)
    leader, epoch = part["leader"], part["leader_epoch"]
    producer = _producer(client, cluster.bootstrap())

    n = 0
    for _ in range(5_000):
        producer.send(TOPIC, 0, b"%d" % n)
        n += 1
    producer.wait_reported(1_000)  # the stream is flowing through the leader
    for _ in range(5_000):  # queued and in flight when the leader dies
        producer.send(TOPIC, 0, b"%d" % n)
        n += 1
    unacked_at_kill = n - len(producer.acked)
    cluster.brokers[leader].kill9()
    while n < N_KILL:
        producer.send(TOPIC, 0, b"%d" % n)
        n += 1
    producer.flush(50)
    _assert_all_acked(producer, N_KILL)

    new = cluster.partition(TOPIC, 0)
    assert new["leader"] != leader and new["leader_epoch"] > epoch, \
        f"the killed leader {leader} (epoch {epoch}) was not replaced: {new}"
    survivors = [b for b in cluster.brokers if b != leader]
    read = client.read(cluster.bootstrap(survivors), TOPIC, [0], "read_uncommitted")
    assert read.ends[0] == N_KILL, f"high watermark {read.ends[0]} after {N_KILL} acknowledged records " \
        f"({unacked_at_kill} were unacknowledged when the leader died)"
    _assert_exactly_once_in_order(read.values(0), N_KILL, "after the leader's SIGKILL")


PHASE = 3_000


@pytest.mark.timeout(90)
def test_frozen_leader_woken_after_replacement(client, start_cluster):
    """Scenario 6: SIGSTOP the leader, produce on, wait for a new leader at a higher epoch, SIGCONT.

    The woken leader must not keep anything only it wrote: once back in the ISR its log is the
    new leader's, which is checked by making it lead again (the others are killed) and reading
    the partition from it alone."""
    cluster, part = _failover_cluster(start_cluster)
    old, epoch = part["leader"], part["leader_epoch"]
    producer = _producer(client, cluster.bootstrap())
    n = 0

    def send_phase():
        nonlocal n
        for _ in range(PHASE):
            producer.send(TOPIC, 0, b"%d" % n)
            n += 1

    send_phase()  # before
    producer.flush(30)
    assert len(producer.acked) == PHASE and not producer.failed, "records before the freeze not all acknowledged"

    cluster.brokers[old].stop()
    send_phase()  # during: sent to the frozen leader first
    new = cluster.wait_leader_change(TOPIC, 0, old, epoch)
    send_phase()  # after the election, before the wake-up
    producer.wait_reported(3 * PHASE, timeout=45)

    cluster.brokers[old].cont()
    cluster.wait_in_isr(TOPIC, 0, old)
    send_phase()  # after the wake-up
    producer.flush(45)
    _assert_all_acked(producer, n)

    read = client.read(cluster.bootstrap(), TOPIC, [0], "read_uncommitted")
    assert read.ends[0] == n, f"high watermark {read.ends[0]} after {n} acknowledged records"
    _assert_exactly_once_in_order(read.values(0), n, f"from the new leader {new['leader']}")

    def replicas_agree():
        p = cluster.partition(TOPIC, 0)
        ends = {r["broker"]: r["log_end_offset"] for r in p["replica_progress"]}
        return p if ends.get(old) == n and ends.get(p["leader"]) == n else None

    wait_until(replicas_agree, 20, f"the woken broker {old} to report the leader's log end {n}",
               state=lambda: cluster._seen(TOPIC))

    # Make the woken broker the only live replica, so that it leads, and read its log.
    for b in cluster.brokers:
        if b != old:
            cluster.brokers[b].kill9()
    wait_until(lambda: cluster.partition(TOPIC, 0)["leader"] == old, 20,
               f"broker {old} to lead again", state=lambda: cluster._seen(TOPIC))
    own = client.read(cluster.bootstrap([old]), TOPIC, [0], "read_uncommitted")
    assert own.ends[0] == n, f"the woken broker's log ends at {own.ends[0]}, the new leader's at {n}"
    _assert_exactly_once_in_order(own.values(0), n, f"from the woken broker {old}")
    assert own.records[0] == read.records[0], "the woken broker's log differs from the new leader's"
    # The own CLI shows each record's leader epoch: what the frozen leader appended at its old
    # epoch after waking must be gone; past the records acknowledged before the freeze, every
    # record was written by a later leader.
    log = cluster.read_log(TOPIC, 0, "read_uncommitted")
    assert [(r["offset"], r["value"]) for r in log] == [(off, v.decode()) for off, v in own.records[0]], \
        "the own consumer and the Kafka client disagree on the woken broker's log"
    stale = [(r["offset"], r["leader_epoch"]) for r in log if r["offset"] >= PHASE and r["leader_epoch"] <= epoch]
    assert not stale, f"records of the old leader epoch {epoch} after offset {PHASE} survived: {stale[:10]}"
    assert all(r["leader_epoch"] == epoch for r in log[:PHASE]), "records before the freeze changed epoch"
