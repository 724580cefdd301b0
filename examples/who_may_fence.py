#!/usr/bin/env python3
"""Who may fence whom: SASL logins and Kafka ACLs decide it (issue 29), told with an unmodified
Kafka client (confluent-kafka, librdkafka) and the project's own lying client.

Starts a coordinator (with --authorizer, SCRAM users admin, alice and mallory, a cluster secret)
and a broker whose Kafka listener takes SASL logins (the binaries of `cargo build --release`, or
of EPOCHFENCE_BIN), a topic `ledger`, and ACLs: alice may WRITE transactional id `payments` and
topic `ledger`; mallory may WRITE topic `ledger` only. Then:

1. alice initialises `payments` and writes "alice: pay 100" in a transaction;
2. mallory, logged in as herself, calls init_transactions for `payments` to fence alice: it
   fails fatally with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, and alice's epoch stays hers;
3. alice commits;
4. mallory writes under alice's producer id at alice's epoch + 1 (the write that fences a
   producer at a partition; no stock client sends one, so `producer --forge-producer-id` does):
   Kafka would take it, since it authorizes the transactional id and not the producer id;
   epochfence refuses it (TRANSACTIONAL_ID_AUTHORIZATION_FAILED): a producer id belongs to
   its owner.

Then the same without --authorizer: mallory's init_transactions succeeds, and alice's commit
fails fenced. Exits 0 only if both outcomes were seen.

    cargo build --release
    py="$(scripts/kafka-clients-venv | tail -n1)"     # confluent-kafka 2.16.1, pinned
    "$py" examples/who_may_fence.py
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, AdminClient
from confluent_kafka.admin import ResourcePatternType, ResourceType

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("EPOCHFENCE_BIN", os.path.join(ROOT, "target", "release"))
USERS = {"admin": "admin-secret", "alice": "alice-secret", "mallory": "mallory-secret"}
ACLS = [  # (principal, resource flag, name, operation)
    ("User:alice", "--transactional-id", "payments", "WRITE"),
    ("User:alice", "--topic", "ledger", "WRITE"),
    ("User:mallory", "--topic", "ledger", "WRITE"),
]


def login(user):
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user, "sasl.password": USERS[user]}


def start(argv, log, pattern):
    """Start a process, return it and the address its stdout line matching `pattern` names."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True)
    for line in proc.stdout:
        m = re.match(pattern, line)
        if m:
            return proc, m.group(1)
    raise SystemExit(f"{argv[0]} exited before printing its address (see {log.name})")


def admin(tmp, coord, *args):
    return subprocess.run([os.path.join(BIN, "admin"), "--bootstrap", coord, "--cluster-secret-file",
                           os.path.join(tmp, "secret"), *args], capture_output=True, text=True, timeout=30)


def cluster(tmp, authorizer):
    """A coordinator and one SASL broker; returns (processes, coordinator address, Kafka bootstrap)."""
    with open(os.path.join(tmp, "users"), "w") as f:
        f.write("".join(f"{u}={p}\n" for u, p in USERS.items()))
    with open(os.path.join(tmp, "secret"), "w") as f:
        f.write(uuid.uuid4().hex + uuid.uuid4().hex)
    log = open(os.path.join(tmp, "log"), "a")
    secret = ["--cluster-secret-file", os.path.join(tmp, "secret")]
    argv = [os.path.join(BIN, "coordinator"), "--listen", "127.0.0.1:0", "--data-dir", os.path.join(tmp, "coordinator"),
            "--scram-users-file", os.path.join(tmp, "users"), *secret]
    if authorizer:
        argv += ["--authorizer", "--super-users", "User:admin"]
    coordinator, coord = start(argv, log, r"coordinator listening on (\S+)")
    broker, _ = start([os.path.join(BIN, "broker"), "--id", "1", "--listen", "127.0.0.1:0", "--kafka-listen",
                       "127.0.0.1:0", "--kafka-security-protocol", "SASL_PLAINTEXT", "--coordinator", coord,
                       "--data-dir", os.path.join(tmp, "broker-1"), *secret],
                      log, r"broker 1 listening on (\S+)")
    kafka = re.match(r"broker 1 kafka listening on (\S+)", broker.stdout.readline()).group(1)
    for _ in range(100):  # retried while the broker registers
        made = admin(tmp, coord, "create-topic", "ledger", "--partitions", "1")
        if made.returncode == 0:
            break
        time.sleep(0.1)
    else:
        raise SystemExit(f"cannot create topic ledger: {made.stderr}")
    if authorizer:
        for principal, kind, name, operation in ACLS:
            added = admin(tmp, coord, "acls", "add", "--principal", principal, kind, name, "--operation", operation)
            if added.returncode != 0:
                raise SystemExit(f"admin acls add failed: {added.stderr}")
            print(f"  {added.stdout.strip()}")
        # The broker hears of ACLs in its next heartbeat: wait until its DescribeAcls shows them.
        everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                      AclOperation.ANY, AclPermissionType.ANY)
        watcher = AdminClient({"bootstrap.servers": kafka, **login("admin")})
        for _ in range(200):
            if len(watcher.describe_acls(everything).result(10)) == len(ACLS):
                break
            time.sleep(0.05)
        else:
            raise SystemExit("the broker never held the ACLs")
    return [coordinator, broker], coord, kafka


def committed(kafka):
    """Every value a read_committed consumer sees in `ledger`, read to its end."""
    c = Consumer({"bootstrap.servers": kafka, "group.id": f"reader-{uuid.uuid4()}", "isolation.level": "read_committed",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, **login("admin")})
    tp = TopicPartition("ledger", 0, 0)
    _, end = c.get_watermark_offsets(tp, 10, False)
    c.assign([tp])
    got, deadline = [], time.monotonic() + 30
    while end > 0 and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and not m.error():
            got.append(m.value().decode())
        if c.position([TopicPartition("ledger", 0)])[0].offset >= end:
            break
    c.close()
    return got


def story(authorizer):
    tmp = tempfile.mkdtemp(prefix="who-may-fence-")
    procs, coord, kafka = cluster(tmp, authorizer)
    seen = {}
    try:
        alice = Producer({"bootstrap.servers": kafka, "transactional.id": "payments", **login("alice")})
        alice.init_transactions(30)
        alice.begin_transaction()
        alice.produce("ledger", b"alice: pay 100", partition=0)
        alice.flush(30)
        print("alice: initialised transactional id 'payments', wrote 'alice: pay 100' in a transaction")

        mallory = Producer({"bootstrap.servers": kafka, "transactional.id": "payments", **login("mallory")})
        try:
            mallory.init_transactions(30)
            print("mallory: init_transactions for 'payments' SUCCEEDED: she holds alice's transactional id now")
            seen["mallory initialised"] = True
        except KafkaException as e:
            err = e.args[0]
            print(f"mallory: init_transactions for 'payments' failed, fatal={err.fatal()}: {err.name()}")
            seen["mallory refused"] = err.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED and err.fatal()

        try:
            alice.commit_transaction(30)
            print("alice: transaction committed")
            seen["alice committed"] = True
        except KafkaException as e:
            print(f"alice: commit failed: {e.args[0].name()} (fenced: {e.args[0].code() == KafkaError._FENCED})")
            seen["alice fenced"] = e.args[0].code() == KafkaError._FENCED

        if authorizer:
            d = json.loads(admin(tmp, coord, "describe", "--json").stdout)
            t = next(t for t in d["transactional_ids"] if t["transactional_id"] == "payments")
            pid, epoch = t["producer_id"], t["producer_epoch"]
            password = os.path.join(tmp, "mallory.password")
            with open(password, "w") as f:
                f.write(USERS["mallory"])
            forged = subprocess.run([os.path.join(BIN, "producer"), "--kafka", "--bootstrap", kafka, "--topic", "ledger",
                                     "--partition", "0", "--forge-producer-id", str(pid), "--forge-epoch",
                                     str(epoch + 1), "--value", "mallory: pay 1000", "--sasl-username", "mallory",
                                     "--sasl-password-file", password], capture_output=True, text=True, timeout=60)
            print(f"mallory: a write under alice's producer id {pid} at epoch {epoch + 1}: {forged.stdout.strip()}")
            seen["forged refused"] = forged.returncode == 3 and "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in forged.stdout
        view = committed(kafka)
        print(f"read_committed view of 'ledger': {view}")
        seen["view"] = view
    finally:
        for p in procs:
            p.kill()
            p.wait()
    return seen


def main():
    print("== with --authorizer: alice may use 'payments', mallory may not")
    on = story(authorizer=True)
    print("\n== the same without --authorizer (negative case)")
    off = story(authorizer=False)
    held = (on.get("mallory refused") and on.get("alice committed") and on.get("forged refused")
            and on.get("view") == ["alice: pay 100"])
    fenced = off.get("mallory initialised") and off.get("alice fenced")
    print(f"\nwith the authorizer: mallory could not fence alice: {bool(held)}")
    print(f"without it: mallory fenced alice: {bool(fenced)}")
    sys.exit(0 if held and fenced else 1)


if __name__ == "__main__":
    main()
