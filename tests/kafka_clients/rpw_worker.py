"""A read-process-write worker (confluent-kafka): consume from `in` in group `workers`, write
each record to `out` and commit the consumed offsets in the same transaction
(send_offsets_to_transaction, KIP-447: one transactional id per worker, fenced by the group's
generation).

    python rpw_worker.py BOOTSTRAP NAME [--freeze]

With `--freeze`, the worker stops after writing its first batch, before committing it: it
prints `FROZEN` and waits for a line on stdin (the test SIGSTOPs it meanwhile, so that it
misses its session and its partitions move), then tries to commit that batch with the group
generation it held and prints `ZOMBIE COMMITTED` or `ZOMBIE REFUSED <error>`. Without it, the
worker prints `COMMITTED <n>` after every transaction and runs until killed.
"""

import sys

from confluent_kafka import Consumer, KafkaException, Producer


def main():
    bootstrap, name = sys.argv[1], sys.argv[2]
    freeze = "--freeze" in sys.argv[3:]
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "workers", "client.id": name,
        "auto.offset.reset": "earliest", "enable.auto.commit": False, "isolation.level": "read_committed",
        "session.timeout.ms": 2000, "heartbeat.interval.ms": 200,
    })
    producer = Producer({
        "bootstrap.servers": bootstrap, "transactional.id": f"worker-{name}", "transaction.timeout.ms": 60000,
    })
    producer.init_transactions(30)
    consumer.subscribe(["in"])
    while True:
        batch = [m for m in consumer.consume(num_messages=100, timeout=0.2) if not m.error()]
        if not batch:
            continue
        # What the worker holds while it processes: its positions and its generation.
        positions = consumer.position(consumer.assignment())
        metadata = consumer.consumer_group_metadata()
        producer.begin_transaction()
        for m in batch:
            producer.produce("out", key=m.key(), value=m.value())
        producer.flush(30)
        if freeze:
            print("FROZEN", flush=True)
            sys.stdin.readline()
            try:
                producer.send_offsets_to_transaction(positions, metadata, 30)
                producer.commit_transaction(30)
                print("ZOMBIE COMMITTED", flush=True)
            except KafkaException as e:
                # An abortable error, as librdkafka raises it: abort, as an application must.
                producer.abort_transaction(30)
                print(f"ZOMBIE REFUSED {e.args[0].name()}", flush=True)
            return
        producer.send_offsets_to_transaction(positions, metadata, 30)
        producer.commit_transaction(30)
        print(f"COMMITTED {len(batch)}", flush=True)


if __name__ == "__main__":
    main()
