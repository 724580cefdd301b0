//! The Kafka listener's request decoder (kafka-protocol, with the vendored fix for forged
//! array counts) on arbitrary frames, serving every version of every api the crate knows:
//! never a panic, never an abort, and a request that decodes is answerable.
#![no_main]

use std::sync::OnceLock;

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use libfuzzer_sys::fuzz_target;
use protocol::kafka::{decode_request, KafkaFrame, Served};

fn everything() -> Served {
    static ALL: OnceLock<Vec<(ApiKey, i16, i16)>> = OnceLock::new();
    ALL.get_or_init(|| {
        (0..i16::MAX)
            .filter_map(|k| ApiKey::try_from(k).ok())
            .map(|k| {
                let v = k.valid_versions();
                (k, v.min, v.max)
            })
            .collect()
    })
}

fuzz_target!(|data: &[u8]| {
    if let KafkaFrame::Request(r) = decode_request(Bytes::copy_from_slice(data), everything()) {
        assert!(ApiKey::try_from(r.header.api_key).is_ok(), "a decoded request has a known key");
    }
});
