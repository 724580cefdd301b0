"""An unmodified client's transactions across a coordinator replica takeover, for
tests/coordinator_ha.rs (which starts etcd, the replicas and a broker, and freezes the active
replica): `python takeover.py CLIENT BOOTSTRAP TOPIC`, with CLIENT confluent or kafka-python.

It commits a transaction, prints `committed before`, and waits for a line on stdin (sent once
the active replica is frozen, before a standby has taken over). A second instance of the same
transactional id then initialises while the takeover is under way (the brokers answer
COORDINATOR_NOT_AVAILABLE until it is done, which the client retries), commits, and prints
`committed after`; the first instance, a zombie now, tries one more transaction and the script
prints `ZOMBIE REFUSED: <error>` or `ZOMBIE COMMITTED`.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from clients import make_client  # noqa: E402


def main():
    name, bootstrap, topic = sys.argv[1:4]
    client = make_client(name)
    tid = f"takeover-{name}"
    try:
        old = client.transactional_producer(bootstrap, tid)
        old.init(60)
        old.begin()
        old.send(topic, 0, b"before")
        old.commit(60)
        print("committed before", flush=True)
        sys.stdin.readline()
        new = client.transactional_producer(bootstrap, tid)
        new.init(60)
        new.begin()
        new.send(topic, 0, b"after")
        new.commit(60)
        print("committed after", flush=True)
        try:
            old.begin()
            old.send(topic, 0, b"zombie")
            old.commit(30)
            print("ZOMBIE COMMITTED", flush=True)
        except Exception as e:  # noqa: BLE001 - each client names the fence its own way
            print(f"ZOMBIE REFUSED: {type(e).__name__}: {e}", flush=True)
    finally:
        client.close_all()


if __name__ == "__main__":
    main()
