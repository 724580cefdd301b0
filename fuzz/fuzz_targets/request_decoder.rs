//! Every request decoder on arbitrary bytes: never a panic, and whatever decodes re-encodes to
//! something that decodes to the same request.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use protocol::{decode_request, decode_response, encode_request};

fuzz_target!(|data: &[u8]| {
    let bytes = Bytes::copy_from_slice(data);
    let _ = decode_response(bytes.clone());
    if let Ok((header, req)) = decode_request(bytes) {
        let again = decode_request(encode_request(header.correlation_id, &req)).expect("re-encoded request decodes");
        assert_eq!(again.1, req);
    }
});
