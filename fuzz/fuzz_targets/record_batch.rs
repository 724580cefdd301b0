//! The record-batch parser, CRC check, the validator a broker runs on a client's batch
//! (decompressing gzip, snappy, lz4 and zstd records within a bound), the batch splitter, the
//! record decoder and the marker reader on arbitrary bytes: never a panic.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use protocol::batch::{decode_records, marker_kind, validate_batch, verify_crc, BatchHeader, BatchIter};

fuzz_target!(|data: &[u8]| {
    let bytes = Bytes::copy_from_slice(data);
    if let Ok(h) = BatchHeader::parse(&bytes) {
        let _ = verify_crc(&bytes, &h);
        if bytes.len() >= h.total_bytes() {
            let _ = validate_batch(&bytes, &h, None, 1 << 20);
        }
        let _ = h.last_sequence();
        let _ = h.last_offset();
    }
    for item in BatchIter::new(bytes.clone()) {
        if let Ok((_, b)) = item {
            let _ = decode_records(&b);
            let _ = marker_kind(&b);
        }
    }
});
