//! The record-batch parser, CRC check, batch splitter, record decoder and marker reader on
//! arbitrary bytes: never a panic.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use protocol::batch::{decode_records, marker_kind, verify_crc, BatchHeader, BatchIter};

fuzz_target!(|data: &[u8]| {
    let bytes = Bytes::copy_from_slice(data);
    if let Ok(h) = BatchHeader::parse(&bytes) {
        let _ = verify_crc(&bytes, &h);
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
