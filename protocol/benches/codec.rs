//! Frame encode and decode of a produce request carrying one 500-record batch, the batch
//! header parse plus CRC check the broker does, and its check of the records against the header
//! (Kafka's log validator), in ns per batch: `cargo bench -p protocol --bench codec`.

use bytes::{Bytes, BytesMut};
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use protocol::batch::{build_batch, validate_batch, verify_crc, BatchHeader, ProducerStamp, TimestampLimits};
use protocol::codec::{ClientCodec, ServerCodec};
use protocol::{ProduceRequest, Request, ACKS_LEADER};
use tokio_util::codec::{Decoder, Encoder};

fn codec(c: &mut Criterion) {
    let values: Vec<Bytes> = (0..500).map(|_| Bytes::from(vec![b'x'; 100])).collect();
    let batch = build_batch(ProducerStamp { producer_id: 1, producer_epoch: 0, base_sequence: 0 }, false, 0, &values);
    let req = Request::Produce(ProduceRequest {
        transactional_id: None,
        topic: "t".into(),
        partition: 0,
        leader_epoch: 0,
        acks: ACKS_LEADER,
        records: batch.clone(),
    });
    c.bench_function("encode a produce frame (500 x 100 B)", |b| {
        let mut codec = ClientCodec::new(1 << 24);
        b.iter(|| {
            let mut buf = BytesMut::new();
            codec.encode((1, black_box(req.clone())), &mut buf).unwrap();
            buf
        })
    });
    let mut frame = BytesMut::new();
    ClientCodec::new(1 << 24).encode((1, req.clone()), &mut frame).unwrap();
    let frame = frame.freeze();
    c.bench_function("decode a produce frame (500 x 100 B)", |b| {
        let mut codec = ServerCodec::new(1 << 24);
        b.iter(|| {
            let mut buf = BytesMut::from(&frame[..]);
            codec.decode(black_box(&mut buf)).unwrap().unwrap().unwrap()
        })
    });
    c.bench_function("parse a batch header and check its CRC (50 KB)", |b| {
        b.iter(|| {
            let h = BatchHeader::parse(black_box(&batch)).unwrap();
            verify_crc(&batch, &h).unwrap();
            h
        })
    });
    let h = BatchHeader::parse(&batch).unwrap();
    let limits = TimestampLimits { now_ms: 0, after_max_ms: Some(3_600_000), before_max_ms: None };
    c.bench_function("validate a batch's records against its header (500 x 100 B)", |b| {
        b.iter(|| {
            validate_batch(black_box(&batch), &h, Some(limits), protocol::batch::DECOMPRESSED_BATCH_BYTES_MAX_DEFAULT)
                .unwrap()
        })
    });
}

criterion_group!(benches, codec);
criterion_main!(benches);
