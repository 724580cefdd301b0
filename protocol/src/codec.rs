//! tokio-util codecs: a u32 length prefix (checked against `frame_bytes_max` before anything is
//! allocated) around the pure message encoding of [`crate::messages`].

use bytes::{Buf, BytesMut};
use thiserror::Error;
use tokio_util::codec::{Decoder, Encoder, LengthDelimitedCodec, LengthDelimitedCodecError};

use crate::messages::{
    decode_request, decode_response, encode_request_head, encode_request_into, encode_response_into, request_payload,
    request_size_hint, response_size_hint, BadRequest, Request, RequestHeader, Response,
};
use crate::DecodeError;

/// Default largest frame, in bytes: 8 MiB.
pub const FRAME_BYTES_MAX_DEFAULT: usize = 8 * 1024 * 1024;
const LENGTH_PREFIX_BYTES: usize = 4;

/// Errors that end a connection.
#[derive(Debug, Error)]
pub enum CodecError {
    /// A length prefix announced more than the limit; nothing was allocated for it.
    #[error("frame of {len} bytes exceeds frame_bytes_max {max}")]
    FrameTooLarge {
        /// Announced length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A response could not be decoded (client side).
    #[error("undecodable response: {0}")]
    Decode(#[from] DecodeError),
    /// An answer could not be encoded (a field its version cannot carry); the connection closes.
    #[error("answer not encodable: {0}")]
    Encode(String),
    /// The socket failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

fn length_codec(frame_bytes_max: usize) -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder().length_field_type::<u32>().max_frame_length(frame_bytes_max).new_codec()
}

/// Whether `src` (a connection's read buffer, between frames) starts with a whole frame, so
/// that decoding the next one needs no read from the socket.
pub fn frame_buffered(src: &[u8]) -> bool {
    src.len() >= LENGTH_PREFIX_BYTES
        && src.len() - LENGTH_PREFIX_BYTES >= (&src[..LENGTH_PREFIX_BYTES]).get_u32() as usize
}

/// Map the length codec's error: its "frame too big" (raised before it consumes or reserves
/// anything, so the prefix is still in `src`) becomes [`CodecError::FrameTooLarge`].
pub(crate) fn map_frame_error(e: std::io::Error, src: &BytesMut, max: usize) -> CodecError {
    let too_big = e.get_ref().is_some_and(|inner| inner.is::<LengthDelimitedCodecError>());
    if too_big {
        let len =
            if src.len() >= LENGTH_PREFIX_BYTES { (&src[..LENGTH_PREFIX_BYTES]).get_u32() as usize } else { max + 1 };
        CodecError::FrameTooLarge { len, max }
    } else {
        CodecError::Io(e)
    }
}

/// Write a length prefix and the body `body` writes after it, straight into `dst`.
fn framed(dst: &mut BytesMut, body: impl FnOnce(&mut BytesMut)) {
    let start = dst.len();
    dst.extend_from_slice(&[0; LENGTH_PREFIX_BYTES]);
    body(dst);
    let len = (dst.len() - start - LENGTH_PREFIX_BYTES) as u32;
    dst[start..start + LENGTH_PREFIX_BYTES].copy_from_slice(&len.to_be_bytes());
}

/// Append a request frame to `dst` without its [`request_payload`]: the length prefix (which
/// counts the payload) and the head. Writing the payload's pieces right after it completes
/// the frame [`ClientCodec`] would encode, without copying them.
pub fn encode_request_frame_head(correlation_id: i32, req: &Request, dst: &mut BytesMut) {
    let payload: usize = request_payload(req).iter().map(|p| p.len()).sum();
    let start = dst.len();
    dst.extend_from_slice(&[0; LENGTH_PREFIX_BYTES]);
    encode_request_head(correlation_id, req, dst);
    let len = (dst.len() - start - LENGTH_PREFIX_BYTES + payload) as u32;
    dst[start..start + LENGTH_PREFIX_BYTES].copy_from_slice(&len.to_be_bytes());
}

/// A request frame as the server sees it.
pub type ServerItem = Result<(RequestHeader, Request), BadRequest>;

/// Server side: decodes requests (an undecodable one is an item, so it can be answered),
/// encodes `(correlation_id, response)`.
pub struct ServerCodec {
    inner: LengthDelimitedCodec,
    frame_bytes_max: usize,
}

impl ServerCodec {
    /// A codec refusing frames above `frame_bytes_max` bytes.
    pub fn new(frame_bytes_max: usize) -> Self {
        ServerCodec { inner: length_codec(frame_bytes_max), frame_bytes_max }
    }
}

impl Decoder for ServerCodec {
    type Item = ServerItem;
    type Error = CodecError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<ServerItem>, CodecError> {
        match self.inner.decode(src) {
            Ok(frame) => Ok(frame.map(|frame| decode_request(frame.freeze()))),
            Err(e) => Err(map_frame_error(e, src, self.frame_bytes_max)),
        }
    }
}

impl Encoder<(i32, Response)> for ServerCodec {
    type Error = CodecError;

    fn encode(&mut self, (correlation_id, resp): (i32, Response), dst: &mut BytesMut) -> Result<(), CodecError> {
        // Responses may exceed the request limit (a large fetch); the length field is u32.
        dst.reserve(LENGTH_PREFIX_BYTES + response_size_hint(&resp));
        framed(dst, |b| encode_response_into(correlation_id, &resp, b));
        Ok(())
    }
}

/// Client side: encodes `(correlation_id, request)`, decodes `(correlation_id, response)`.
pub struct ClientCodec {
    inner: LengthDelimitedCodec,
    frame_bytes_max: usize,
}

impl ClientCodec {
    /// A codec refusing response frames above `frame_bytes_max` bytes.
    pub fn new(frame_bytes_max: usize) -> Self {
        ClientCodec { inner: length_codec(frame_bytes_max), frame_bytes_max }
    }
}

impl Decoder for ClientCodec {
    type Item = (i32, Response);
    type Error = CodecError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<(i32, Response)>, CodecError> {
        let frame = self.inner.decode(src).map_err(|e| map_frame_error(e, src, self.frame_bytes_max))?;
        match frame {
            None => Ok(None),
            Some(frame) => Ok(Some(decode_response(frame.freeze())?)),
        }
    }
}

impl Encoder<(i32, Request)> for ClientCodec {
    type Error = CodecError;

    fn encode(&mut self, (correlation_id, req): (i32, Request), dst: &mut BytesMut) -> Result<(), CodecError> {
        dst.reserve(LENGTH_PREFIX_BYTES + request_size_hint(&req));
        framed(dst, |b| encode_request_into(correlation_id, &req, b));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::{FetchRequest, Status};
    use crate::ErrorCode;

    #[test]
    fn frames_roundtrip_through_both_codecs() {
        let req = Request::Fetch(FetchRequest {
            topic: "t".into(),
            partition: 0,
            leader_epoch: 0,
            offset: 0,
            max_bytes: 10,
            isolation: 0,
        });
        let mut buf = BytesMut::new();
        ClientCodec::new(1024).encode((9, req.clone()), &mut buf).unwrap();
        // Feed it byte by byte: "need more bytes" is Ok(None) until the frame is whole.
        let mut server = ServerCodec::new(1024);
        let mut partial = BytesMut::new();
        let mut got = None;
        for byte in buf.iter() {
            partial.extend_from_slice(&[*byte]);
            if let Some(item) = server.decode(&mut partial).unwrap() {
                got = Some(item);
            }
        }
        let (h, back) = got.unwrap().unwrap();
        assert_eq!((h.correlation_id, back), (9, req));

        let mut out = BytesMut::new();
        server.encode((9, Response::Error(Status::new(ErrorCode::InvalidRequest, "x"))), &mut out).unwrap();
        let (c, resp) = ClientCodec::new(1024).decode(&mut out).unwrap().unwrap();
        assert_eq!(c, 9);
        assert_eq!(resp.status().code, ErrorCode::InvalidRequest);
    }

    /// A frame head followed by the payload's pieces is the frame the codec writes, whatever
    /// the pieces' cut, and decodes to the same request.
    #[test]
    fn frame_head_and_payload_pieces_make_the_whole_frame() {
        use crate::messages::{ProduceRequest, Records, ReplicateRequest};
        use bytes::Bytes;
        let replicate = |records: Records| {
            Request::Replicate(ReplicateRequest {
                topic: "t".into(),
                partition: 3,
                topic_id: 0,
                leader_epoch: 4,
                leader_id: 1,
                from_offset: 10,
                prev_epoch: 2,
                high_watermark: 8,
                log_start_offset: 0,
                low_watermark: 0,
                producer_state: Bytes::new(),
                records,
            })
        };
        let all: Vec<u8> = (0..200u8).collect();
        let cuts = Records::from_pieces(vec![
            Bytes::copy_from_slice(&all[..16]),
            Bytes::new(),
            Bytes::copy_from_slice(&all[16..150]),
            Bytes::copy_from_slice(&all[150..]),
        ]);
        assert_eq!(cuts.pieces().len(), 3, "empty pieces are dropped");
        let produce = Request::Produce(ProduceRequest {
            transactional_id: None,
            topic: "t".into(),
            partition: 0,
            leader_epoch: -1,
            acks: 1,
            records: Bytes::copy_from_slice(&all),
        });
        for req in [replicate(cuts.clone()), replicate(Records::default()), produce] {
            let mut whole = BytesMut::new();
            ClientCodec::new(1024).encode((5, req.clone()), &mut whole).unwrap();
            let mut split = BytesMut::new();
            encode_request_frame_head(5, &req, &mut split);
            for piece in request_payload(&req) {
                split.extend_from_slice(piece);
            }
            assert_eq!(split, whole);
            let (h, back) = ServerCodec::new(1024).decode(&mut split).unwrap().unwrap().unwrap();
            assert_eq!((h.correlation_id, &back), (5, &req));
            if let Request::Replicate(r) = back {
                assert!(r.records.pieces().len() <= 1, "decoding gives one piece");
            }
        }
        assert_eq!(cuts, Records::from(Bytes::copy_from_slice(&all)), "equal by bytes, not by cut");
        assert_ne!(cuts, Records::from(Bytes::copy_from_slice(&all[1..])));
        assert_eq!(cuts.contiguous(), Bytes::copy_from_slice(&all));
    }

    /// Frames are written straight into the write buffer, after whatever it already holds.
    #[test]
    fn frames_written_one_after_another_decode_one_by_one() {
        use crate::messages::{FetchResponse, ProduceRequest};
        let produce = |n: u8| {
            Request::Produce(ProduceRequest {
                transactional_id: None,
                topic: "t".into(),
                partition: 1,
                leader_epoch: 2,
                acks: -1,
                records: bytes::Bytes::from(vec![n; 300 * n as usize]),
            })
        };
        let mut buf = BytesMut::new();
        let mut client = ClientCodec::new(1 << 20);
        for n in 1..=3 {
            client.encode((n as i32, produce(n)), &mut buf).unwrap();
        }
        let mut server = ServerCodec::new(1 << 20);
        for n in 1..=3 {
            let (h, back) = server.decode(&mut buf).unwrap().unwrap().unwrap();
            assert_eq!((h.correlation_id, back), (n as i32, produce(n)));
        }
        assert!(buf.is_empty());
        let fetched = |n: u8| {
            Response::Fetch(FetchResponse {
                status: Status::ok(),
                high_watermark: 7,
                last_stable_offset: 7,
                current_leader_epoch: 2,
                aborted: Vec::new(),
                records: bytes::Bytes::from(vec![n; 500]),
            })
        };
        let mut out = BytesMut::new();
        server.encode((1, fetched(1)), &mut out).unwrap();
        server.encode((2, fetched(2)), &mut out).unwrap();
        assert_eq!(client.decode(&mut out).unwrap().unwrap(), (1, fetched(1)));
        assert_eq!(client.decode(&mut out).unwrap().unwrap(), (2, fetched(2)));
    }

    #[test]
    fn oversized_prefix_is_refused_before_the_body_arrives() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&(u32::MAX).to_be_bytes());
        let err = ServerCodec::new(1024).decode(&mut buf).unwrap_err();
        assert!(matches!(err, CodecError::FrameTooLarge { len, max: 1024 } if len == u32::MAX as usize));
        assert!(buf.capacity() < 1024, "nothing was reserved for the announced body");
    }

    #[test]
    fn garbage_body_is_an_item_not_a_stream_error() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&3u32.to_be_bytes());
        buf.extend_from_slice(&[1, 2, 3]);
        let item = ServerCodec::new(1024).decode(&mut buf).unwrap().unwrap();
        assert!(item.unwrap_err().header.is_none());
    }
}
