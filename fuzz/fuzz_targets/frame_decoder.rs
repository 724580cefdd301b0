//! The server's frame decoder on an arbitrary byte stream, fed in arbitrary chunks: it must
//! never panic, and never reserve much more than a frame the limit allows.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use protocol::codec::ServerCodec;
use tokio_util::codec::Decoder;

const FRAME_BYTES_MAX: usize = 4096;

fuzz_target!(|data: &[u8]| {
    let Some((&chunk, stream)) = data.split_first() else { return };
    let chunk = usize::from(chunk).max(1);
    let mut codec = ServerCodec::new(FRAME_BYTES_MAX);
    let mut buf = BytesMut::new();
    for piece in stream.chunks(chunk) {
        buf.extend_from_slice(piece);
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => return,
            }
        }
        assert!(buf.capacity() <= 4 * FRAME_BYTES_MAX + stream.len(), "over-allocation");
    }
});
