"""SCRAM credentials managed through Kafka's apis (issue 29, KIP-554): with confluent-kafka's
AdminClient a super user creates a user (the client salts the password; it never travels), the
user logs in, DescribeUserScramCredentials lists mechanisms and iterations, Kafka's refusals come
back per user (too few iterations, a principal without ALTER on the cluster), a deleted credential
no longer logs in; the credentials survive a coordinator restart (journaled). `admin users set`,
`list` and `delete` do the same from the command line. kafka-python 3.0.12's admin client has no
SCRAM calls: its run checks its own login with a credential made through the coordinator.
"""

import json
import time
import uuid

import pytest

from efcluster import wait_until

USERS = {"admin": "admin-secret", "alice": "alice-secret"}


def users_cluster(start_cluster, tmp_path):
    users = tmp_path / "users"
    users.write_text("".join(f"{u}={p}\n" for u, p in USERS.items()))
    secret = tmp_path / "secret"
    secret.write_text(uuid.uuid4().hex + uuid.uuid4().hex)
    return start_cluster(brokers=1, broker_args=["--kafka-security-protocol", "SASL_PLAINTEXT"],
                         coordinator_args=["--scram-users-file", str(users), "--authorizer",
                                           "--super-users", "User:admin"],
                         secret_file=str(secret))


def logs_in(client, bootstrap, user, password, mechanism="SCRAM-SHA-512", timeout=15):
    """Whether `user` logs in: a Metadata call answered (every principal may make one), or the
    client's own authentication error (librdkafka's `_AUTHENTICATION`, kafka-python's
    `SaslAuthenticationFailedError`), whichever comes first."""
    conf = client.security("SASL_PLAINTEXT", mechanism, user, password)
    deadline = time.monotonic() + timeout
    if client.name == "confluent":
        from confluent_kafka.admin import AdminClient
        errors = []
        a = AdminClient({"bootstrap.servers": bootstrap, "error_cb": errors.append, **conf})
        while time.monotonic() < deadline:
            try:
                a.list_topics(timeout=0.3)
                return True
            except client.ck.KafkaException:
                a.poll(0)  # serves error_cb
                if any(e.code() == client.ck.KafkaError._AUTHENTICATION for e in errors):
                    return False
        raise AssertionError(f"{user}: neither a login nor an authentication error within {timeout} s: {errors}")
    # kafka-python retries a refused login until its caller gives up: only a login is asked of it.
    kafka = client.kafka
    c = kafka.KafkaConsumer(bootstrap_servers=bootstrap.split(","), api_version=(3, 8), **conf)
    try:
        c.topics()
        return True
    finally:
        c.close()


@pytest.mark.timeout(120)
def test_credentials_through_the_admin_apis_and_the_cli(client, start_cluster, tmp_path):
    cluster = users_cluster(start_cluster, tmp_path)
    bootstrap = cluster.bootstrap()
    # The command line: set, list, a login, delete.
    password = tmp_path / "dave.password"
    password.write_text("dave-secret\n")
    r = cluster.admin("users", "set", "dave", "--password-file", str(password))
    assert "set dave SCRAM-SHA-256 iterations=4096" in r.stdout and "set dave SCRAM-SHA-512" in r.stdout, r.stdout
    listed = json.loads(cluster.admin("users", "list", "--json").stdout)
    assert {"user": "dave", "mechanism": "SCRAM-SHA-256", "iterations": 4096} in listed, listed
    assert {u["user"] for u in listed} == {"admin", "alice", "dave"}
    # The broker hears of dave in its next heartbeat.
    wait_until(lambda: logs_in(client, bootstrap, "dave", "dave-secret") or None, 20, "dave's login")
    if client.name != "confluent":
        # kafka-python's KafkaAdminClient (KIP-554): frank made, described, logged in as, deleted.
        kafka = client.kafka
        from kafka.admin import ScramMechanism, UserScramCredentialDeletion, UserScramCredentialUpsertion
        admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap.split(","), api_version=(3, 8),
                                       **client.security("SASL_PLAINTEXT", "SCRAM-SHA-512", "admin", USERS["admin"]))
        try:
            frank = UserScramCredentialUpsertion("frank", ScramMechanism.SCRAM_SHA_512, b"frank-secret",
                                                 iterations=8192)
            assert admin.alter_user_scram_credentials([frank]) == {"frank": None}
            described = admin.describe_user_scram_credentials(["frank"])["frank"]
            assert described["error"] is None, described
            assert [(i["mechanism"], i["iterations"]) for i in described["credential_infos"]] == \
                [(ScramMechanism.SCRAM_SHA_512, 8192)], described
            wait_until(lambda: logs_in(client, bootstrap, "frank", "frank-secret") or None, 20, "frank's login")
            gone = UserScramCredentialDeletion("frank", ScramMechanism.SCRAM_SHA_512)
            assert admin.alter_user_scram_credentials([gone]) == {"frank": None}
            assert admin.describe_user_scram_credentials(["frank"])["frank"]["error"] is not None
        finally:
            admin.close()
        return
    assert not logs_in(client, bootstrap, "dave", "not-dave-secret")
    r = cluster.admin("users", "delete", "dave")
    assert "deleted dave SCRAM-SHA-256" in r.stdout and "deleted dave SCRAM-SHA-512" in r.stdout, r.stdout
    wait_until(lambda: not logs_in(client, bootstrap, "dave", "dave-secret") or None, 20, "dave's login refused")
    r = cluster.admin("users", "set", "eve", "--password-file", str(password), "--iterations", "1000", check=False)
    assert r.returncode != 0 and "UNACCEPTABLE_CREDENTIAL" in r.stderr, r.stderr

    from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialDeletion, UserScramCredentialUpsertion)
    ck = client.ck
    admin = AdminClient({"bootstrap.servers": bootstrap, **client.security("SASL_PLAINTEXT", "SCRAM-SHA-512", "admin",
                                                                          USERS["admin"])})
    carol = UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                         b"carol-secret", b"some-salt-bytes-for-carol")
    few = UserScramCredentialUpsertion("frank", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000), b"pw")
    done = admin.alter_user_scram_credentials([carol, few])
    done["carol"].result(20)
    with pytest.raises(ck.KafkaException) as refused:
        done["frank"].result(20)
    assert refused.value.args[0].code() == ck.KafkaError.UNACCEPTABLE_CREDENTIAL, refused.value
    # The broker that relayed it holds it at once.
    assert logs_in(client, bootstrap, "carol", "carol-secret")
    described = admin.describe_user_scram_credentials(["carol", "nobody"])
    infos = described["carol"].result(20).scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in infos] == [(ScramMechanism.SCRAM_SHA_512, 8192)], infos
    with pytest.raises(ck.KafkaException) as missing:
        described["nobody"].result(20)
    assert missing.value.args[0].code() == ck.KafkaError.RESOURCE_NOT_FOUND, missing.value
    # alice is no super user and holds no ALTER on the cluster.
    alice = AdminClient({"bootstrap.servers": bootstrap, **client.security("SASL_PLAINTEXT", "SCRAM-SHA-512", "alice",
                                                                          USERS["alice"])})
    mallory = UserScramCredentialUpsertion("mallory", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"m")
    with pytest.raises(ck.KafkaException) as denied:
        alice.alter_user_scram_credentials([mallory])["mallory"].result(20)
    assert denied.value.args[0].code() == ck.KafkaError.CLUSTER_AUTHORIZATION_FAILED, denied.value
    # Journaled: carol survives a coordinator restart; then her credential is deleted.
    cluster.coordinator.kill9()
    cluster.restart_coordinator()
    wait_until(lambda: logs_in(client, bootstrap, "carol", "carol-secret") or None, 30, "carol's login after a restart")
    admin = AdminClient({"bootstrap.servers": bootstrap, **client.security("SASL_PLAINTEXT", "SCRAM-SHA-512", "admin",
                                                                          USERS["admin"])})
    deletion = UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_512)
    wait_until(lambda: admin.alter_user_scram_credentials([deletion])["carol"].result(20) is None or None, 30,
               "carol's deletion")
    assert not logs_in(client, bootstrap, "carol", "carol-secret")
