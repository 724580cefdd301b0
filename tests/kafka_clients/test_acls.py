"""Authorization (issue 29): with the coordinator's --authorizer, Kafka's ACLs decide who may use a
transactional id, a topic, a group and the cluster, with Kafka's errors and each client's own reaction
to them (kafka-security.md, section 4): a principal without WRITE on a transactional id cannot
initialise it (fatal TRANSACTIONAL_ID_AUTHORIZATION_FAILED), so it cannot fence its holder; without
WRITE on a topic a transaction touching it is abortable; Metadata hides the topics a principal may
not describe; ACLs are made and removed through confluent-kafka's AdminClient and `admin acls`, and
a removed ACL takes effect within a heartbeat. The negative case: without the authorizer, the same
principal fences the holder.
"""

import os
import subprocess
import uuid

import pytest

import efcluster
from efcluster import wait_until

USERS = {"admin": "admin-secret", "alice": "alice-secret", "mallory": "mallory-secret"}


def acl_cluster(start_cluster, tmp_path, authorizer=True, heartbeat_ms=None):
    users = tmp_path / f"users-{uuid.uuid4().hex[:6]}"
    users.write_text("".join(f"{u}={p}\n" for u, p in USERS.items()))
    secret = tmp_path / f"secret-{uuid.uuid4().hex[:6]}"
    secret.write_text(uuid.uuid4().hex + uuid.uuid4().hex)
    coordinator_args = ["--scram-users-file", str(users)]
    if authorizer:
        coordinator_args += ["--authorizer", "--super-users", "User:admin"]
    kwargs = {"heartbeat_ms": heartbeat_ms} if heartbeat_ms else {}
    return start_cluster(brokers=1, broker_args=["--kafka-security-protocol", "SASL_PLAINTEXT"],
                         coordinator_args=coordinator_args, secret_file=str(secret), **kwargs)


def login(client, user):
    return client.security("SASL_PLAINTEXT", "SCRAM-SHA-512", user, USERS[user])


def allow(cluster, principal, *resource, operation):
    r = cluster.admin("acls", "add", "--principal", principal, *resource, "--operation", operation)
    assert r.stdout.startswith("added: ALLOW"), r.stdout


def wait_acls(cluster, n):
    """Wait until the broker holds n ACLs: it hears of a change in its next heartbeat answer (its log
    says `authorization received ... acls=N`)."""
    path = cluster.brokers[1].process.stderr_path

    def held():
        with open(path, encoding="utf-8", errors="replace") as f:
            return f"authorization received from the coordinator enabled=true acls={n} " in f.read() or None
    wait_until(held, 20, f"the broker to hold {n} ACLs")


def grant_alice(cluster, topic):
    """What a transactional producer and a read_committed reader need, as Kafka documents it."""
    allow(cluster, "User:alice", "--transactional-id", "payments", operation="WRITE")
    allow(cluster, "User:alice", "--topic", topic, operation="WRITE")
    allow(cluster, "User:alice", "--topic", topic, operation="READ")
    allow(cluster, "User:alice", "--group", "*", operation="READ")


def superuser(bootstrap):
    """confluent-kafka settings of the super user `admin`."""
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "admin", "sasl.password": USERS["admin"]}


def error_of(client, e):
    """(code, fatal, abortable) of a client's transactional error."""
    if client.name == "confluent":
        err = e.args[0]
        return err.code(), err.fatal(), err.txn_requires_abort()
    return getattr(e, "errno", None), None, None


@pytest.mark.timeout(150)
def test_acls_decide_who_may_fence_whom(client, start_cluster, tmp_path):
    cluster = acl_cluster(start_cluster, tmp_path)
    bootstrap = cluster.bootstrap()
    for topic in ("orders", "hidden", "audit"):
        cluster.create_topic(topic, partitions=1, replicas=1)
    grant_alice(cluster, "orders")
    allow(cluster, "User:mallory", "--topic", "orders", operation="WRITE")
    # alice sees audit (else the clients fail her record before the transaction ever names it).
    allow(cluster, "User:alice", "--topic", "audit", operation="DESCRIBE")
    wait_acls(cluster, 6)

    alice = client.transactional_producer(bootstrap, "payments", **login(client, "alice"))
    alice.init()
    alice.begin()
    alice.send("orders", 0, b"alice-1")

    # mallory may write to the topic, but not use alice's transactional id: her init fails fatally
    # (librdkafka: at FindCoordinator; kafka-python: the same), and alice's epoch stays hers.
    mallory = client.transactional_producer(bootstrap, "payments", **login(client, "mallory"))
    with pytest.raises(Exception) as refused:
        mallory.init(timeout=20)
    code, fatal, _ = error_of(client, refused.value)
    if client.name == "confluent":
        assert code == client.ck.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED and fatal, refused.value
    else:
        assert isinstance(refused.value, client.errors.TransactionalIdAuthorizationFailedError), repr(refused.value)
    alice.commit()
    read = client.read(bootstrap, "orders", [0], "read_committed", **login(client, "alice"))
    assert read.values(0) == [b"alice-1"], "alice's transaction committed after mallory's attempt"

    # A transaction touching a topic alice may not write is abortable, not fatal (AddPartitionsToTxn
    # answers TOPIC_AUTHORIZATION_FAILED): she aborts and goes on. (Her transaction already holds a
    # partition: aborting one that holds none is INVALID_TXN_STATE under transaction version 1, as
    # Kafka answers it, which librdkafka takes as fatal.)
    alice.begin()
    alice.send("orders", 0, b"alice-2")
    alice.flush(20)
    alice.send("audit", 0, b"not-allowed")
    if client.name != "confluent":
        # kafka-python's commit waits for every batch, and audit's is never sent: commit once the
        # refusal has made the transaction abortable (it then raises at once).
        manager = alice.raw._transaction_manager
        wait_until(lambda: manager.has_abortable_error() or None, 20, "kafka-python's abortable error")
    with pytest.raises(Exception) as aborted:
        alice.commit(timeout=20)
    code, fatal, abortable = error_of(client, aborted.value)
    if client.name == "confluent":
        assert abortable and not fatal, f"{aborted.value}"
    else:
        assert "TopicAuthorizationFailedError" in str(aborted.value), repr(aborted.value)
        assert manager.has_abortable_error() and not manager.has_fatal_error()
    alice.abort()
    alice.begin()
    alice.send("orders", 0, b"alice-3")
    alice.commit()
    read = client.read(bootstrap, "orders", [0], "read_committed", **login(client, "alice"))
    assert read.values(0) == [b"alice-1", b"alice-3"], "the aborted transaction is not read"

    # Metadata hides the topics mallory may not describe.
    if client.name == "confluent":
        from confluent_kafka.admin import AdminClient
        seen = set(AdminClient({"bootstrap.servers": bootstrap, **login(client, "mallory")})
                   .list_topics(timeout=10).topics)
        everything = set(AdminClient({"bootstrap.servers": bootstrap, **login(client, "admin")})
                         .list_topics(timeout=10).topics)
    else:
        kafka = client.kafka
        admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap.split(","), **login(client, "mallory"))
        try:
            seen = set(admin.list_topics())
        finally:
            admin.close()
        admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap.split(","), **login(client, "admin"))
        try:
            everything = set(admin.list_topics())
        finally:
            admin.close()
    assert "orders" in seen and "hidden" not in seen and "audit" not in seen, seen
    assert {"orders", "hidden", "audit"} <= everything, everything

    # A removed ACL takes effect within a heartbeat: mallory's writes to orders are then refused.
    r = cluster.admin("acls", "remove", "--principal", "User:mallory", "--topic", "orders", "--operation", "WRITE")
    assert "removed: ALLOW User:mallory WRITE on TOPIC" in r.stdout, r.stdout
    listed = cluster.admin("acls", "list").stdout
    assert "User:mallory" not in listed and "ALLOW User:alice WRITE on TRANSACTIONAL_ID LITERAL:payments" in listed, listed
    wait_acls(cluster, 5)

    def refused_write():
        p = client.idempotent_producer(bootstrap, **login(client, "mallory"),
                                       **({"message.timeout.ms": 3000} if client.name == "confluent"
                                          else {"max_block_ms": 3000}))
        try:
            p.send("orders", 0, b"mallory")
            p.flush(10)
        except Exception:  # noqa: BLE001 - kafka-python raises the refusal from send/flush
            return True
        return bool(p.failed) or None
    wait_until(refused_write, 20, "mallory's write to be refused once her ACL is gone")
    read = client.read(bootstrap, "orders", [0], "read_uncommitted", **login(client, "alice"))
    assert b"mallory" not in read.values(0)


@pytest.mark.timeout(90)
def test_without_the_authorizer_mallory_fences_alice(client, start_cluster, tmp_path):
    """The negative case: the same logins, no --authorizer: mallory's init fences alice."""
    cluster = acl_cluster(start_cluster, tmp_path, authorizer=False)
    bootstrap = cluster.bootstrap()
    cluster.create_topic("orders", partitions=1, replicas=1)
    alice = client.transactional_producer(bootstrap, "payments", **login(client, "alice"))
    alice.init()
    alice.begin()
    alice.send("orders", 0, b"alice-1")
    mallory = client.transactional_producer(bootstrap, "payments", **login(client, "mallory"))
    mallory.init()
    with pytest.raises(Exception) as fenced:
        alice.commit(timeout=20)
    if client.name == "confluent":
        assert fenced.value.args[0].code() == client.ck.KafkaError._FENCED, fenced.value
    else:
        assert isinstance(fenced.value, (client.errors.ProducerFencedError,
                                         client.errors.InvalidProducerEpochError)), repr(fenced.value)


@pytest.mark.timeout(90)
def test_acls_through_confluent_kafkas_admin_client(client, start_cluster, tmp_path):
    if client.name != "confluent":
        return  # kafka-python's admin client has no ACL calls of its own worth a second run
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                       AdminClient, ResourcePatternType, ResourceType)
    ck = client.ck
    cluster = acl_cluster(start_cluster, tmp_path)
    bootstrap = cluster.bootstrap()
    admin = AdminClient({"bootstrap.servers": bootstrap, **login(client, "admin")})
    prefixed = AclBinding(ResourceType.TOPIC, "team-", ResourcePatternType.PREFIXED, "User:alice", "*",
                          AclOperation.ALL, AclPermissionType.ALLOW)
    tid = AclBinding(ResourceType.TRANSACTIONAL_ID, "team-tx", ResourcePatternType.LITERAL, "User:alice", "*",
                     AclOperation.WRITE, AclPermissionType.ALLOW)
    for f in admin.create_acls([prefixed, tid]).values():
        f.result(20)
    # A cluster resource must be named kafka-cluster: INVALID_REQUEST.
    bad = AclBinding(ResourceType.BROKER, "other", ResourcePatternType.LITERAL, "User:alice", "*",
                     AclOperation.ALTER, AclPermissionType.ALLOW)
    with pytest.raises(ck.KafkaException) as invalid:
        admin.create_acls([bad])[bad].result(20)
    assert invalid.value.args[0].code() == ck.KafkaError.INVALID_REQUEST, invalid.value

    any_filter = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                  AclPermissionType.ANY)
    described = admin.describe_acls(any_filter).result(20)
    assert set(described) == {prefixed, tid}, described
    # MATCH: what applies to topic team-payments (the prefixed ACL).
    match = AclBindingFilter(ResourceType.TOPIC, "team-payments", ResourcePatternType.MATCH, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    assert admin.describe_acls(match).result(20) == [prefixed]

    # alice may now create and use team-* topics (ALL on the prefix), and nothing else.
    alice = AdminClient({"bootstrap.servers": bootstrap, **login(client, "alice")})
    from confluent_kafka.admin import NewTopic
    alice.create_topics([NewTopic("team-payments", 1, 1)])["team-payments"].result(20)
    with pytest.raises(ck.KafkaException) as denied:
        alice.create_topics([NewTopic("elsewhere", 1, 1)])["elsewhere"].result(20)
    assert denied.value.args[0].code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED, denied.value
    # ... and may not change ACLs (ALTER on the cluster).
    with pytest.raises(ck.KafkaException) as not_admin:
        alice.create_acls([tid])[tid].result(20)
    assert not_admin.value.args[0].code() == ck.KafkaError.CLUSTER_AUTHORIZATION_FAILED, not_admin.value
    wait_until(lambda: "team-payments" in alice.list_topics(timeout=5).topics or None, 20, "team-payments listed")
    tx = client.transactional_producer(bootstrap, "team-tx", **login(client, "alice"))
    tx.init()
    tx.begin()
    tx.send("team-payments", 0, b"ok")
    tx.commit()

    deleted = admin.delete_acls([any_filter])[any_filter].result(20)
    assert set(deleted) == {prefixed, tid}, deleted
    listed = cluster.admin("acls", "list", "--json").stdout
    assert listed.strip() == "[]", listed


@pytest.mark.timeout(90)
def test_deleting_a_group_or_its_offsets_needs_delete_on_the_group(client, start_cluster, tmp_path):
    """DeleteGroups and OffsetDelete (issue 32, item 6) ask what Kafka asks: DELETE on the group
    (GROUP_AUTHORIZATION_FAILED), then, for OffsetDelete, READ on each topic
    (TOPIC_AUTHORIZATION_FAILED for that partition alone)."""
    from confluent_kafka import Consumer, TopicPartition
    cluster = acl_cluster(start_cluster, tmp_path)
    bootstrap = cluster.bootstrap()
    for topic in ("orders", "secret"):
        cluster.create_topic(topic, partitions=1, replicas=1)
    su = superuser(bootstrap)
    for group in ("g", "h"):
        c = Consumer({**su, "group.id": group, "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition("orders", 0, 4), TopicPartition("secret", 0, 4)], asynchronous=False)
        c.close()
    allow(cluster, "User:alice", "--topic", "orders", operation="READ")
    allow(cluster, "User:alice", "--group", "g", operation="DELETE")
    # DESCRIBE on h lets the clients find its coordinator (FindCoordinator asks it), so the refusal
    # below is DeleteGroups' and OffsetDelete's own.
    allow(cluster, "User:alice", "--group", "h", operation="DESCRIBE")
    wait_acls(cluster, 3)
    if client.name == "confluent":
        ck = client.ck
        from confluent_kafka.admin import AdminClient
        alice = AdminClient({"bootstrap.servers": bootstrap, **login(client, "alice")})
        futures = alice.delete_consumer_groups(["g", "h"], request_timeout=10)
        futures["g"].result(10)
        with pytest.raises(ck.KafkaException) as denied:
            futures["h"].result(10)
        assert denied.value.args[0].code() == ck.KafkaError.GROUP_AUTHORIZATION_FAILED, denied.value
    else:
        kafka = client.kafka
        import kafka.errors as kerrors
        alice = kafka.KafkaAdminClient(bootstrap_servers=bootstrap.split(","), **login(client, "alice"))
        try:
            with pytest.raises(kerrors.GroupAuthorizationFailedError):
                alice.delete_group_offsets("h", [kafka.TopicPartition("orders", 0)])
            got = alice.delete_group_offsets("g", [kafka.TopicPartition("orders", 0), kafka.TopicPartition("secret", 0)])
            assert got == {kafka.TopicPartition("orders", 0): kerrors.NoError,
                           kafka.TopicPartition("secret", 0): kerrors.TopicAuthorizationFailedError}, got
            assert alice.delete_groups(["h", "g"]) == {"h": "GroupAuthorizationFailedError", "g": "OK"}
        finally:
            alice.close()
    # The super user sees what is left: h whole, g gone.
    probe = Consumer({**su, "group.id": "h"})
    try:
        assert [tp.offset for tp in probe.committed([TopicPartition("orders", 0)], timeout=10)] == [4]
    finally:
        probe.close()
    r = cluster.admin("delete-group", "g", check=False)
    assert r.returncode == 1 and "GROUP_ID_NOT_FOUND" in r.stderr, r.stderr


@pytest.mark.timeout(90)
def test_deleting_records_and_altering_configs_need_their_acls(client, start_cluster, tmp_path):
    """DeleteRecords asks DELETE on the topic, IncrementalAlterConfigs ALTER_CONFIGS on it
    (issue 32, item 6): TOPIC_AUTHORIZATION_FAILED for the topic not granted, nothing changed
    there; the granted one changes."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    cluster = acl_cluster(start_cluster, tmp_path)
    bootstrap = cluster.bootstrap()
    su = superuser(bootstrap)
    prod = Producer(su)
    for topic in ("orders", "secret"):
        cluster.create_topic(topic, partitions=1, replicas=1)
        for i in range(3):
            prod.produce(topic, value=f"{topic}-{i}".encode(), partition=0)
    assert prod.flush(30) == 0
    for topic in ("orders", "secret"):
        # DESCRIBE on both lets the clients find the leaders, so the refusal below is the api's own.
        allow(cluster, "User:alice", "--topic", topic, operation="DESCRIBE")
    allow(cluster, "User:alice", "--topic", "orders", operation="DELETE")
    allow(cluster, "User:alice", "--topic", "orders", operation="ALTER_CONFIGS")
    wait_acls(cluster, 4)
    if client.name == "confluent":
        ck = client.ck
        from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
        alice = AdminClient({"bootstrap.servers": bootstrap, **login(client, "alice")})
        for topic, allowed in (("orders", True), ("secret", False)):
            tp = TopicPartition(topic, 0, 2)
            deleted = list(alice.delete_records([tp], request_timeout=10).values())[0]
            res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
                ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
            altered = alice.incremental_alter_configs([res], request_timeout=10)[res]
            if allowed:
                assert deleted.result(10).low_watermark == 2
                altered.result(10)
            else:
                for f in (deleted, altered):
                    with pytest.raises(ck.KafkaException) as denied:
                        f.result(10)
                    assert denied.value.args[0].code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED, denied.value
    else:
        kafka = client.kafka
        import kafka.errors as kerrors
        from kafka.admin import ConfigResource, ConfigResourceType
        alice = kafka.KafkaAdminClient(bootstrap_servers=bootstrap.split(","), **login(client, "alice"))
        try:
            got = alice.delete_records({kafka.TopicPartition("orders", 0): 2})
            assert got[kafka.TopicPartition("orders", 0)]["low_watermark"] == 2, got
            with pytest.raises(kerrors.TopicAuthorizationFailedError):
                alice.delete_records({kafka.TopicPartition("secret", 0): 2})
            changed = alice.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "orders",
                                                          configs={"retention.ms": "3600000"})],
                                          raise_on_unknown=False)
            refused = alice.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "secret",
                                                          configs={"retention.ms": "3600000"})],
                                          raise_on_unknown=False)
            assert "TopicAuthorization" in repr(refused) and "TopicAuthorization" not in repr(changed), \
                (changed, refused)
        finally:
            alice.close()
    # The super user sees what changed: orders starts at 2, secret at 0.
    probe = Consumer({**su, "group.id": "probe"})
    try:
        starts = [probe.get_watermark_offsets(TopicPartition(t, 0), timeout=10)[0] for t in ("orders", "secret")]
        assert starts == [2, 0], starts
    finally:
        probe.close()


@pytest.mark.timeout(150)
def test_reassignments_need_alter_and_listing_them_describe_on_the_cluster(tmp_path):
    """AlterPartitionReassignments asks ALTER on the cluster, ListPartitionReassignments DESCRIBE
    (issue 32, item 6), through kafka-python's KafkaAdminClient (librdkafka has no API for them):
    CLUSTER_AUTHORIZATION_FAILED for each until granted, and the partition unchanged."""
    import kafka
    import kafka.errors as kerrors
    made = []

    def start(**kwargs):
        c = efcluster.Cluster(str(tmp_path / f"cluster-{len(made)}"), **kwargs)
        made.append(c)
        return c

    try:
        cluster = acl_cluster(start, tmp_path)
        cluster.create_topic("orders", partitions=1, replicas=1)
        tp = kafka.TopicPartition("orders", 0)
        creds = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512",
                     sasl_plain_username="alice", sasl_plain_password=USERS["alice"])
        alice = kafka.KafkaAdminClient(bootstrap_servers=cluster.bootstrap().split(","), **creds)
        try:
            with pytest.raises(kerrors.ClusterAuthorizationFailedError):
                alice.list_partition_reassignments()
            with pytest.raises(kerrors.ClusterAuthorizationFailedError):
                alice.alter_partition_reassignments({tp: [1]})
            allow(cluster, "User:alice", "--cluster", operation="DESCRIBE")
            wait_acls(cluster, 1)
            assert alice.list_partition_reassignments() == {}
            with pytest.raises(kerrors.ClusterAuthorizationFailedError):
                alice.alter_partition_reassignments({tp: [1]})
            allow(cluster, "User:alice", "--cluster", operation="ALTER")
            wait_acls(cluster, 2)
            # Granted: the one broker is the replica already (nothing to move), and a move to a
            # broker that does not exist is the coordinator's refusal, no longer the authorizer's.
            assert alice.alter_partition_reassignments({tp: [1]}) == {tp: None}
            refused = alice.alter_partition_reassignments({tp: [7]})
            assert refused == {tp: kerrors.InvalidReplicationAssignmentError}, refused
        finally:
            alice.close()
        assert cluster.partition("orders", 0)["replicas"] == [1]
    finally:
        for c in made:
            c.close()


@pytest.mark.timeout(150)
def test_the_own_protocols_binaries_log_in_and_the_acls_decide(client, start_cluster, tmp_path):
    """The own protocol under the authorizer: no login, no service; `--sasl-username` logs the
    binaries in (SCRAM) and the ACLs decide, as on the Kafka listener."""
    if client.name != "confluent":
        return  # the project's own binaries: once is enough
    cluster = acl_cluster(start_cluster, tmp_path)
    cluster.create_topic("own", partitions=1, replicas=1)
    allow(cluster, "User:alice", "--transactional-id", "payments", operation="WRITE")
    allow(cluster, "User:alice", "--topic", "own", operation="WRITE")
    allow(cluster, "User:alice", "--topic", "own", operation="READ")
    allow(cluster, "User:mallory", "--topic", "own", operation="WRITE")
    wait_acls(cluster, 4)
    bin_dir = efcluster.bin_dir()
    passwords = {"wrong": tmp_path / "wrong.password"}
    passwords["wrong"].write_text("guess\n")
    for user, password in USERS.items():
        passwords[user] = tmp_path / f"{user}.password"
        passwords[user].write_text(password + "\n")

    def run(binary, *args, user=None, password=None, mechanism=None):
        login = [] if user is None else ["--sasl-username", user,
                                         "--sasl-password-file", str(passwords[password or user])]
        login += [] if mechanism is None else ["--sasl-mechanism", mechanism]
        return subprocess.run([os.path.join(bin_dir, binary), "--bootstrap", cluster.coord_addr, *login, *args],
                              capture_output=True, text=True, timeout=60)

    produce = ["--topic", "own", "--transactional-id", "payments", "--count", "1", "--value", "own"]
    # No login: refused, saying how to log in.
    r = run("producer", *produce)
    assert r.returncode != 0 and "--sasl-username" in r.stderr, r.stderr
    r = run("admin", "acls", "list")
    assert r.returncode != 0 and "CLUSTER_AUTHORIZATION_FAILED" in r.stderr, r.stderr
    # A wrong password, and PLAIN (a Kafka listener's only).
    r = run("admin", "acls", "list", user="alice", password="wrong")
    assert r.returncode == 1 and "SASL_AUTHENTICATION_FAILED" in r.stderr, r.stderr
    r = run("admin", "describe", user="alice", mechanism="PLAIN")
    assert r.returncode != 0 and "SCRAM-SHA-512" in r.stderr, r.stderr
    # alice writes as payments and reads it back; mallory may not initialise payments.
    r = run("producer", *produce, user="alice")
    assert r.returncode == 0 and "acked partition=0" in r.stdout, r.stderr
    r = run("consumer", "--topic", "own", "--partition", "0", user="alice")
    assert r.returncode == 0 and "own-0" in r.stdout, r.stdout + r.stderr
    r = run("producer", *produce, user="mallory")
    assert r.returncode != 0 and "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in r.stderr, r.stderr
    # The super user administers without the cluster secret; mallory may not; a member may.
    r = run("admin", "acls", "list", user="admin")
    assert r.returncode == 0 and "User:alice" in r.stdout, r.stdout + r.stderr
    r = run("admin", "create-topic", "mallorys", user="mallory")
    assert r.returncode != 0 and "TOPIC_AUTHORIZATION_FAILED" in r.stderr, r.stderr
    assert cluster.admin("acls", "list").returncode == 0
    # Without --cluster-secret-file the coordinator refuses to start with --authorizer.
    r = subprocess.run([os.path.join(bin_dir, "coordinator"), "--listen", "127.0.0.1:0", "--data-dir",
                        str(tmp_path / "nosecret"), "--authorizer"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--cluster-secret-file" in r.stderr, r.stderr


@pytest.mark.timeout(120)
def test_mutual_tls_names_the_principal_the_acls_decide_by(client, start_cluster, tmp_path):
    """mTLS (KIP-371): the Kafka listener under SSL requires client certificates of the CA the
    project's `cluster certificates --client NAME` makes, and --ssl-principal-mapping-rules turns a
    certificate's subject (CN=alice,OU=clients,O=epochfence) into User:alice, whom the ACLs let
    produce and read; mallory's certificate, of the same CA, is refused by the same ACLs, and a
    client without a certificate is not served."""
    d = tmp_path / "certs"
    subprocess.run([os.path.join(efcluster.bin_dir(), "cluster"), "certificates", str(d), "--client", "alice",
                    "--client", "mallory"], check=True, capture_output=True, timeout=30)
    ca, cert, key = str(d / "ca.pem"), str(d / "server.pem"), str(d / "server.key")
    tls = ["--tls-cert", cert, "--tls-key", key, "--tls-ca", ca]
    secret = tmp_path / "secret"
    secret.write_text(uuid.uuid4().hex + uuid.uuid4().hex)
    cluster = start_cluster(
        brokers=1, secret_file=str(secret), admin_args=["--tls-ca", ca],
        broker_args=[*tls, "--kafka-security-protocol", "SSL", "--tls-client-ca", ca,
                     "--ssl-principal-mapping-rules", "RULE:^CN=([^,]*),OU=clients,O=epochfence$/$1/L,DEFAULT"],
        coordinator_args=[*tls, "--authorizer"])
    topic = "mtls"
    cluster.create_topic(topic, partitions=1, replicas=1)
    allow(cluster, "User:alice", "--topic", topic, operation="WRITE")
    allow(cluster, "User:alice", "--topic", topic, operation="READ")
    allow(cluster, "User:alice", "--cluster", operation="IDEMPOTENT_WRITE")
    allow(cluster, "User:alice", "--group", "*", operation="READ")  # the reader's offset lookups
    wait_acls(cluster, 4)
    bootstrap = cluster.bootstrap()

    def as_(name):
        return client.security("SSL", ca=ca, cert=str(d / f"client-{name}.pem"), key=str(d / f"client-{name}.key"))

    alice = client.idempotent_producer(bootstrap, **as_("alice"))
    for i in range(10):
        alice.send(topic, 0, f"alice-{i}".encode())
    alice.flush(30)
    assert not alice.failed, alice.failed[:3]
    read = client.read(bootstrap, topic, [0], "read_committed", **as_("alice"))
    assert {f"alice-{i}".encode() for i in range(10)} <= set(read.values(0))

    # Mallory's certificate is good, but the ACLs are alice's: she cannot produce.
    if client.name == "confluent":
        ck = client.ck
        errors = []
        p = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "error_cb": errors.append,
                         "message.timeout.ms": 5000, **as_("mallory")})
        try:
            # librdkafka logs its idempotent init's refusal as fatal ("Failed to acquire idempotence
            # PID ...: Cluster authorization failed") and fails the record: Metadata hides the topic
            # from mallory, so with TOPIC_AUTHORIZATION_FAILED.
            p.produce(topic, b"mallory", partition=0, on_delivery=lambda err, msg: errors.append(err))
            refused = {ck.KafkaError.TOPIC_AUTHORIZATION_FAILED, ck.KafkaError.CLUSTER_AUTHORIZATION_FAILED}
            wait_until(lambda: (p.poll(0.1), any(e is not None and e.code() in refused for e in errors))[1],
                       20, "mallory's record refused by the ACLs", state=lambda: errors)
        finally:
            p.purge()
            p.flush(5)
    else:
        kafka = client.kafka
        p = kafka.KafkaProducer(bootstrap_servers=bootstrap.split(","), enable_idempotence=True, max_block_ms=5000,
                                **as_("mallory"))
        try:
            with pytest.raises(kafka.errors.KafkaError) as refused:
                p.send(topic, b"mallory", partition=0).get(timeout=20)
            assert "Authorization" in type(refused.value).__name__ or "AUTHORIZATION" in str(refused.value), \
                repr(refused.value)
        finally:
            p.close(timeout=5)
    # Without a client certificate the TLS handshake fails: nothing is served.
    if client.name == "confluent":
        p = client.ck.Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 3000,
                                **client.security("SSL", ca=ca)})
        p.produce(topic, b"anonymous", partition=0)
        assert p.flush(10) == 0
        cluster_read = client.read(bootstrap, topic, [0], "read_uncommitted", **as_("alice"))
        assert b"anonymous" not in set(cluster_read.values(0)) and b"mallory" not in set(cluster_read.values(0))
