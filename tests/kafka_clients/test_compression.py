"""Compressed batches from real clients: the broker decompresses them to check their records,
stores them as sent, and consumers read every record back.

librdkafka compresses with all four codecs itself; kafka-python needs extra packages for all
but gzip (the suite pins none), so it writes gzip.
"""

import glob
import os
import struct

import pytest

N = 2_000
ATTRIBUTES_AT = 21  # a v2 batch: base offset 8, length 4, leader epoch 4, magic 1, crc 4
CODEC_BITS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def stored_codecs(cluster, topic):
    """The compression bits of every batch in the partition's log files, as the broker stored them."""
    codecs = set()
    for path in sorted(glob.glob(os.path.join(cluster.base_dir, "broker-1", f"{topic}-0", "*.log"))):
        data = open(path, "rb").read()
        at = 0
        while at + 61 <= len(data):
            (length,) = struct.unpack(">i", data[at + 8:at + 12])
            if length <= 0:
                break
            (attributes,) = struct.unpack(">h", data[at + ATTRIBUTES_AT:at + ATTRIBUTES_AT + 2])
            codecs.add(attributes & 0x7)
            at += 12 + length
    return codecs
CODECS = {"confluent": ["gzip", "snappy", "lz4", "zstd"], "kafka-python": ["gzip"]}


@pytest.mark.timeout(60)
def test_compressed_batches_are_accepted_and_read_back(client, start_cluster):
    cluster = start_cluster(brokers=1)
    bootstrap = cluster.bootstrap()
    for codec in CODECS[client.name]:
        topic = f"packed-{codec}"
        cluster.create_topic(topic, partitions=1, replicas=1)
        key = "compression.type" if client.name == "confluent" else "compression_type"
        producer = client.idempotent_producer(bootstrap, **{key: codec})
        values = [b"%s record %d, much like the others" % (codec.encode(), i) for i in range(N)]
        for v in values:
            producer.send(topic, 0, v)
        producer.flush(30)
        assert not producer.failed, f"{codec}: {len(producer.failed)} failed, first: {producer.failed[:3]}"
        assert len(producer.acked) == N, f"{codec}: {len(producer.acked)} of {N} acknowledged"
        # Stored as the client sent them: compressed.
        assert stored_codecs(cluster, topic) == {CODEC_BITS[codec]}, f"{codec}: {stored_codecs(cluster, topic)}"
        for isolation in ("read_uncommitted", "read_committed"):
            read = client.read(bootstrap, topic, [0], isolation)
            assert read.values(0) == values, f"{codec} ({isolation}): {len(read.values(0))} records read back"
