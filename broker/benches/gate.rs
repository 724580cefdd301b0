//! The per-batch producer gate (epoch, duplicate and sequence checks, then the bookkeeping of
//! an append), in ns per batch: `cargo bench -p broker --bench gate`.

use broker::producer_state::{Admit, ProducerStates};
use bytes::Bytes;
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use protocol::batch::{build_batch, BatchHeader, ProducerStamp};

fn header(pid: i64, seq: i32, offset: i64) -> BatchHeader {
    let b = build_batch(
        ProducerStamp { producer_id: pid, producer_epoch: 0, base_sequence: seq },
        false,
        0,
        &[Bytes::from_static(b"v")],
    );
    let mut h = BatchHeader::parse(&b).unwrap();
    h.base_offset = offset;
    h
}

fn gate(c: &mut Criterion) {
    // 10,000 producers already known to the partition, as a busy partition would have.
    let mut states = ProducerStates::new(true);
    for pid in 0..10_000 {
        let guard = states.guard(pid);
        states.mark_verified(pid, 0, false, guard);
        states.record(&header(pid, 0, pid));
    }
    let mut seq = 1;
    let mut offset = 10_000;
    c.bench_function("gate: check and record one batch (10k producers)", |b| {
        b.iter(|| {
            let h = header_fast(4_242, seq, offset);
            assert_eq!(states.check(black_box(&h)), Ok(Admit::Append));
            states.record(&h);
            seq += 1;
            offset += 1;
        })
    });
    let dup = header(4_242, seq - 1, 0);
    c.bench_function("gate: recognise a duplicate", |b| b.iter(|| states.check(black_box(&dup))));
}

/// A header without building a batch (the gate only reads header fields).
fn header_fast(pid: i64, seq: i32, offset: i64) -> BatchHeader {
    BatchHeader {
        base_offset: offset,
        batch_length: 61,
        partition_leader_epoch: 0,
        crc: 0,
        attributes: 0,
        last_offset_delta: 0,
        max_timestamp: 0,
        producer_id: pid,
        producer_epoch: 0,
        base_sequence: seq,
        record_count: 1,
    }
}

criterion_group!(benches, gate);
criterion_main!(benches);
