"""SASL on the Kafka listener (issue 29): unmodified clients log in with PLAIN, SCRAM-SHA-256 and
SCRAM-SHA-512 against users of the coordinator's --scram-users-file, over SASL_PLAINTEXT and
SASL_SSL, and then produce, consume, commit a transaction and join a consumer group; a wrong
password fails with each client's own authentication error and reaches no request handler.

kafka-python's own SASL integration tests (test/integration/test_sasl_integration.py) skip
themselves against an outside broker; their scenarios (CreateTopics, 100 records produced and read
back without a group, an all-topics Metadata listing the topic) are covered here for both clients.
"""

import os
import subprocess
import time
import uuid

import pytest

import efcluster
from clients import kafka_python_subscribe
from efcluster import wait_until

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
USERS = {"alice": "alice-secret", "bob": "b0b=with,odd chars"}


def sasl_cluster(start_cluster, tmp_path, protocol="SASL_PLAINTEXT", brokers=1, tls=None, secret=True, reauth_ms=0):
    """A cluster whose Kafka listeners take USERS' logins. With `secret`, a cluster secret too (then
    only members read the credentials, and without the authorizer a Kafka client's CreateTopics is
    refused: test_acls.py runs the authorizer). `reauth_ms`: the brokers'
    --connections-max-reauth-ms (KIP-368)."""
    users = tmp_path / "users"
    users.write_text("".join(f"{u}={p}\n" for u, p in USERS.items()))
    secret_file = None
    if secret:
        secret_file = tmp_path / "secret"
        secret_file.write_text(uuid.uuid4().hex + uuid.uuid4().hex)
        secret_file = str(secret_file)
    broker_args = ["--kafka-security-protocol", protocol, "--sasl-mechanisms", ",".join(MECHANISMS),
                   "--connections-max-reauth-ms", str(reauth_ms)]
    if tls:
        broker_args += ["--tls-cert", tls["cert"], "--tls-key", tls["key"], "--tls-ca", tls["ca"]]
    coordinator_args = ["--scram-users-file", str(users)]
    admin_args = []
    if tls:
        # Every listener is TLS then (the brokers' --tls-cert serves their own listener too).
        coordinator_args += ["--tls-cert", tls["cert"], "--tls-key", tls["key"], "--tls-ca", tls["ca"]]
        admin_args = ["--tls-ca", tls["ca"]]
    return start_cluster(brokers=brokers, broker_args=broker_args, coordinator_args=coordinator_args,
                         secret_file=secret_file, admin_args=admin_args)


def certificates(tmp_path):
    """A test CA and a localhost certificate, made by the project's own `cluster certificates`."""
    d = tmp_path / "certs"
    subprocess.run([os.path.join(efcluster.bin_dir(), "cluster"), "certificates", str(d)], check=True,
                   capture_output=True, timeout=30)
    return {"ca": str(d / "ca.pem"), "cert": str(d / "server.pem"), "key": str(d / "server.key")}


def group_read(client, bootstrap, topic, n, conf, timeout=30):
    """Read n records of `topic` as a member of a new consumer group, committing them."""
    group = f"g-{uuid.uuid4()}"
    got = []
    deadline = time.monotonic() + timeout
    if client.name == "confluent":
        c = client.ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                                "enable.auto.commit": False, **conf})
        try:
            c.subscribe([topic])
            while len(got) < n and time.monotonic() < deadline:
                m = c.poll(0.2)
                if m is not None and m.error() is None:
                    got.append(m.value())
            c.commit(asynchronous=False)
        finally:
            c.close()
    else:
        kafka = client.kafka
        c = kafka.KafkaConsumer(bootstrap_servers=bootstrap.split(","), group_id=group,
                                auto_offset_reset="earliest", enable_auto_commit=False, **conf)
        try:
            kafka_python_subscribe(c, [topic])
            while len(got) < n and time.monotonic() < deadline:
                for recs in c.poll(timeout_ms=200).values():
                    got.extend(r.value for r in recs)
            c.commit()
        finally:
            c.close()
    assert len(got) >= n, f"the group member read {len(got)} of {n} records within {timeout} s"
    return got


def produce_read_transact(client, cluster, topic, conf, tag):
    bootstrap = cluster.bootstrap()
    producer = client.idempotent_producer(bootstrap, **conf)
    for i in range(100):
        producer.send(topic, 0, f"{tag}-{i}".encode())
    producer.flush(30)
    assert not producer.failed, f"{tag}: {producer.failed[:3]}"
    assert len(producer.acked) == 100, f"{tag}: {len(producer.acked)} of 100 acknowledged"
    tx = client.transactional_producer(bootstrap, f"tx-{tag}", **conf)
    tx.init()
    tx.begin()
    for i in range(10):
        tx.send(topic, 0, f"{tag}-tx-{i}".encode())
    tx.commit()
    read = client.read(bootstrap, topic, [0], "read_committed", **conf)
    values = set(read.values(0))
    want = {f"{tag}-{i}".encode() for i in range(100)} | {f"{tag}-tx-{i}".encode() for i in range(10)}
    assert want <= values, f"{tag}: {len(want - values)} records missing from the read_committed read"


@pytest.mark.timeout(150)
def test_every_mechanism_logs_in_and_produces_consumes_and_transacts(client, start_cluster, tmp_path):
    cluster = sasl_cluster(start_cluster, tmp_path, secret=False)
    topic = "sasl"
    cluster.create_topic(topic, partitions=1, replicas=1)
    for mechanism in MECHANISMS:
        for user, password in USERS.items():
            conf = client.security("SASL_PLAINTEXT", mechanism, user, password)
            produce_read_transact(client, cluster, topic, conf, f"{mechanism}-{user}")
    conf = client.security("SASL_PLAINTEXT", "SCRAM-SHA-512", "alice", USERS["alice"])
    got = group_read(client, cluster.bootstrap(), topic, 10, conf)
    assert all(v for v in got)
    # kafka-python's own SASL suite, mirrored: CreateTopics and an all-topics Metadata.
    created = f"created-{client.name}"
    if client.name == "confluent":
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap(), **conf})
        for f in admin.create_topics([NewTopic(created, 1, 1)]).values():
            f.result(20)
        listed = wait_until(lambda: created in admin.list_topics(timeout=5).topics, 20, "the topic in Metadata")
    else:
        kafka = client.kafka
        admin = kafka.KafkaAdminClient(bootstrap_servers=cluster.bootstrap().split(","), **conf)
        try:
            admin.create_topics([kafka.admin.NewTopic(created, 1, 1)])
            listed = wait_until(lambda: created in admin.list_topics(), 20, "the topic in Metadata")
        finally:
            admin.close()
    assert listed


def failed_login(client, cluster, conf, caplog):
    """Try to produce with `conf`; the client's own authentication error, as a string (kafka-python's
    producer raises only "Unable to bootstrap" to its caller: its authentication error is in its log)."""
    bootstrap = cluster.bootstrap()
    if client.name == "confluent":
        ck = client.ck
        errors = []
        p = ck.Producer({"bootstrap.servers": bootstrap, "error_cb": errors.append, "message.timeout.ms": 5000,
                         **conf})
        try:
            p.produce("never-created", b"x")
            wait_until(lambda: (p.poll(0.1), any(e.code() == ck.KafkaError._AUTHENTICATION for e in errors))[1],
                       20, "librdkafka's _AUTHENTICATION error", state=lambda: errors)
        finally:
            p.purge()
            p.flush(5)
        return next(str(e) for e in errors if e.code() == ck.KafkaError._AUTHENTICATION)
    kafka = client.kafka
    caplog.clear()
    with pytest.raises(kafka.errors.KafkaError):
        # api_version given: the producer's constructor does not wait to bootstrap (its
        # version probe retries with growing backoff), send() fails after max_block_ms.
        p = kafka.KafkaProducer(bootstrap_servers=bootstrap.split(","), max_block_ms=2000, api_version=(3, 8),
                                **conf)
        try:
            p.send("never-created", b"x").get(timeout=10)
        finally:
            p.close(timeout=5)
    return "\n".join(r.getMessage() for r in caplog.records if "SaslAuthenticationFailed" in r.getMessage())


def reauthentications(cluster):
    log = open(cluster.brokers[1].process.stderr_path, encoding="utf-8", errors="replace").read()
    return log.count("Kafka client re-authenticated")


@pytest.mark.timeout(120)
def test_a_transaction_goes_on_across_reauthentication_and_a_deleted_user_is_logged_out(
        client, start_cluster, tmp_path):
    """KIP-368: with connections.max.reauth.ms the clients log in again on their open connections
    in the middle of a transaction, which commits; a user deleted meanwhile is logged out at its
    session's end (without re-authentication a deleted user's open connections would go on)."""
    reauth_ms = 2000
    cluster = sasl_cluster(start_cluster, tmp_path, secret=False, reauth_ms=reauth_ms)
    topic = "reauth"
    cluster.create_topic(topic, partitions=1, replicas=1)
    bootstrap = cluster.bootstrap()
    for mechanism in ("SCRAM-SHA-512", "PLAIN"):
        conf = client.security("SASL_PLAINTEXT", mechanism, "alice", USERS["alice"])
        tx = client.transactional_producer(bootstrap, f"reauth-{mechanism}", **conf)
        tx.init()
        tx.begin()
        for i in range(5):
            tx.send(topic, 0, f"{mechanism}-before-{i}".encode())
        tx.flush(30)
        before = reauthentications(cluster)
        # Both clients log in again at 85-95% of the session lifetime the login's answer gave.
        wait_until(lambda: reauthentications(cluster) >= before + 1, 15, "a re-authentication on the broker",
                   state=lambda: reauthentications(cluster))
        for i in range(5):
            tx.send(topic, 0, f"{mechanism}-after-{i}".encode())
        tx.commit()
        assert not tx.failed, tx.failed[:3]
        read = client.read(bootstrap, topic, [0], "read_committed", **conf)
        want = {f"{mechanism}-{when}-{i}".encode() for when in ("before", "after") for i in range(5)}
        assert want <= set(read.values(0)), f"{mechanism}: {len(want - set(read.values(0)))} records missing"
        tx.close()
    if client.name != "confluent":
        return  # the logout's error surface: librdkafka's error callback
    # Bob logs in; his user is deleted; his open connections end within a session lifetime.
    ck = client.ck
    errors = []
    conf = client.security("SASL_PLAINTEXT", "SCRAM-SHA-256", "bob", USERS["bob"])
    p = ck.Producer({"bootstrap.servers": bootstrap, "error_cb": errors.append, **conf})
    try:
        p.produce(topic, b"bob-logged-in", partition=0)
        assert p.flush(20) == 0, "bob's first record was not acknowledged"
        cluster.admin("users", "delete", "bob")
        wait_until(lambda: (p.poll(0.1), any(e.code() == ck.KafkaError._AUTHENTICATION for e in errors))[1],
                   reauth_ms / 1000 + 15, "bob's re-authentication refused", state=lambda: errors)
    finally:
        p.purge()
        p.flush(5)
    log = open(cluster.brokers[1].process.stderr_path, encoding="utf-8", errors="replace").read()
    assert "failed SASL authentication" in log


@pytest.mark.timeout(90)
def test_a_wrong_password_fails_with_the_clients_authentication_error_and_reaches_no_handler(
        client, start_cluster, tmp_path, caplog):
    cluster = sasl_cluster(start_cluster, tmp_path)
    for mechanism in MECHANISMS:
        conf = client.security("SASL_PLAINTEXT", mechanism, "alice", "not-alice-secret")
        error = failed_login(client, cluster, conf, caplog)
        assert "Authentication failed" in error or "SaslAuthenticationFailed" in error, f"{mechanism}: {error}"
        conf = client.security("SASL_PLAINTEXT", mechanism, "mallory", "anything")
        error = failed_login(client, cluster, conf, caplog)
        assert "Authentication failed" in error or "SaslAuthenticationFailed" in error, f"{mechanism}: {error}"
    # No request got past the gate: the produce's Metadata would have created the topic.
    topics = {p["topic"] for p in cluster.describe()["partitions"]}
    assert "never-created" not in topics, "a client that failed to log in reached the Metadata handler"
    log = open(cluster.brokers[1].process.stderr_path, encoding="utf-8", errors="replace").read()
    assert "failed SASL authentication" in log or "failed PLAIN authentication" in log
    # And without SASL at all, the listener answers nothing but ApiVersions.
    conf = client.security("PLAINTEXT")
    if client.name == "confluent":
        p = client.ck.Producer({"bootstrap.servers": cluster.bootstrap(), "message.timeout.ms": 3000, **conf})
        p.produce("never-created", b"x")
        assert p.flush(10) == 0
    else:
        kafka = client.kafka
        with pytest.raises(kafka.errors.KafkaError):
            p = kafka.KafkaProducer(bootstrap_servers=cluster.bootstrap().split(","), max_block_ms=2000,
                                    api_version=(3, 8), **conf)
            try:
                p.send("never-created", b"x").get(timeout=5)
            finally:
                p.close(timeout=5)
    topics = {p["topic"] for p in cluster.describe()["partitions"]}
    assert "never-created" not in topics, "a client that never logged in reached the Metadata handler"


@pytest.mark.timeout(120)
def test_sasl_ssl_logins_with_a_ca_the_project_makes(client, start_cluster, tmp_path):
    tls = certificates(tmp_path)
    cluster = sasl_cluster(start_cluster, tmp_path, protocol="SASL_SSL", tls=tls)
    topic = "sasl-ssl"
    cluster.create_topic(topic, partitions=1, replicas=1)
    mechanisms = MECHANISMS if client.name == "confluent" else ("SCRAM-SHA-512",)
    for mechanism in mechanisms:
        conf = client.security("SASL_SSL", mechanism, "alice", USERS["alice"], ca=tls["ca"])
        produce_read_transact(client, cluster, topic, conf, f"ssl-{mechanism}")
    # The same listener refuses a client that speaks TLS but does not log in.
    conf = client.security("SSL", ca=tls["ca"])
    if client.name == "confluent":
        p = client.ck.Producer({"bootstrap.servers": cluster.bootstrap(), "message.timeout.ms": 3000, **conf})
        p.produce("never-created", b"x")
        assert p.flush(10) == 0
    topics = {p["topic"] for p in cluster.describe()["partitions"]}
    assert "never-created" not in topics


@pytest.mark.timeout(60)
def test_the_projects_producer_and_consumer_log_in_with_their_sasl_flags(client, start_cluster, tmp_path):
    if client.name != "confluent":
        return  # the project's own binaries: once is enough
    cluster = sasl_cluster(start_cluster, tmp_path, secret=False)
    cluster.create_topic("cli", partitions=1, replicas=1)
    password = tmp_path / "alice.password"
    password.write_text(USERS["alice"] + "\n")
    login = ["--kafka", "--bootstrap", cluster.bootstrap(), "--sasl-username", "alice",
             "--sasl-password-file", str(password)]
    bin_dir = efcluster.bin_dir()
    for mechanism in MECHANISMS:
        r = subprocess.run([os.path.join(bin_dir, "producer"), *login, "--sasl-mechanism", mechanism, "--topic", "cli",
                            "--transactional-id", f"cli-{mechanism}", "--count", "3", "--value", mechanism],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, f"{mechanism}: {r.stderr}"
    r = subprocess.run([os.path.join(bin_dir, "consumer"), *login, "--topic", "cli", "--partition", "0", "--json"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    for mechanism in MECHANISMS:
        assert f"{mechanism}-2" in r.stdout, r.stdout
    # Without --kafka the same flags log in on the own protocol (SCRAM); PLAIN is refused there,
    # saying what to use.
    own = ["--bootstrap", cluster.coord_addr, *login[3:]]
    r = subprocess.run([os.path.join(bin_dir, "producer"), *own, "--topic", "cli", "--transactional-id", "own",
                        "--count", "1", "--value", "own"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "acked partition=0" in r.stdout, r.stderr
    r = subprocess.run([os.path.join(bin_dir, "producer"), *own, "--sasl-mechanism", "PLAIN", "--topic", "cli",
                        "--transactional-id", "own", "--count", "1"], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "SCRAM-SHA-512" in r.stderr, r.stderr
