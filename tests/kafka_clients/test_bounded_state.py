"""Issue 27, item 4: the coordinator's caps (--transactional-ids-max, --groups-max) are answered
POLICY_VIOLATION, which both clients raise to the application instead of retrying for good.

librdkafka retries an InitProducerId refused POLICY_VIOLATION in the background until
init_transactions' timeout, then raises it (a retriable KafkaError the application sees); its
offset commit raises it at once. kafka-python raises both at once (a fatal KafkaError naming
PolicyViolationError on init, PolicyViolationError on commit).
"""

import pytest


@pytest.mark.timeout(90)
def test_caps_are_answered_with_an_error_the_application_sees(client, start_cluster):
    cluster = start_cluster(brokers=1, coordinator_args=["--transactional-ids-max", "1", "--groups-max", "1"])
    cluster.create_topic("capped", partitions=1, replicas=1)

    first = client.transactional_producer(cluster.bootstrap(), f"first-{client.name}")
    first.init()
    second = client.transactional_producer(cluster.bootstrap(), f"second-{client.name}")
    if client.name == "confluent":
        ck = client.ck
        with pytest.raises(ck.KafkaException) as exc:
            second.raw.init_transactions(5)
        err = exc.value.args[0]
        assert "Policy violation" in err.str(), f"the second transactional id's init raised {err}"
        assert not err.fatal(), err
    else:
        with pytest.raises(client.errors.KafkaError) as exc:
            second.init(timeout=20)
        assert "PolicyViolation" in repr(exc.value) or "PolicyViolation" in str(exc.value), repr(exc.value)
    # The first id goes on.
    first.begin()
    first.send("capped", 0, b"still served")
    first.commit(30)

    if client.name == "confluent":
        ck = client.ck
        for group, want in ((f"one-{client.name}", None), (f"two-{client.name}", ck.KafkaError.POLICY_VIOLATION)):
            c = ck.Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": group, "enable.auto.commit": False})
            try:
                if want is None:
                    c.commit(offsets=[ck.TopicPartition("capped", 0, 1)], asynchronous=False)
                else:
                    with pytest.raises(ck.KafkaException) as exc:
                        c.commit(offsets=[ck.TopicPartition("capped", 0, 1)], asynchronous=False)
                    assert exc.value.args[0].code() == want, exc.value
            finally:
                c.close()
    else:
        from kafka import KafkaConsumer
        from kafka.structs import OffsetAndMetadata, TopicPartition
        for group, refused in ((f"one-{client.name}", False), (f"two-{client.name}", True)):
            c = KafkaConsumer(bootstrap_servers=cluster.bootstrap().split(","), group_id=group,
                              enable_auto_commit=False)
            try:
                offsets = {TopicPartition("capped", 0): OffsetAndMetadata(1, "", -1)}
                if refused:
                    with pytest.raises(client.errors.PolicyViolationError):
                        c.commit(offsets, timeout_ms=10000)
                else:
                    c.commit(offsets, timeout_ms=10000)
            finally:
                c.close()

    held = {h["kind"]: (h["count"], h["max"]) for h in cluster.describe()["held"]}
    assert held["transactional_ids"] == (1, 1) and held["groups"] == (1, 1), held
