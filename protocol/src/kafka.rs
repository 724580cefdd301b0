//! Kafka's wire format on the broker side, through the kafka-protocol crate: a frame codec that
//! decodes requests (refusing what Kafka refuses, before decoding it) and encodes responses.
//!
//! A request frame is a 4-byte length, then api key i16, api version i16, correlation id i32,
//! the rest of the request header (its version follows from key and version), and the body. A
//! response frame is a length, a response header (correlation id, and tagged fields from the
//! first flexible version, except for ApiVersions, whose response header is always version 0),
//! and the body at the request's version.
//!
//! What Kafka does with what it cannot serve, and so this codec: an unknown api key, a key this
//! listener does not serve, a version outside the served range (except for ApiVersions), and a
//! header or body that does not decode all close the connection without an answer. An
//! ApiVersions request of a version above the served range is answered (by the handler) with a
//! version 0 body carrying UNSUPPORTED_VERSION, so the client can retry lower.

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio_util::codec::{Decoder, Encoder, LengthDelimitedCodec};

use crate::codec::CodecError;

/// What an answer needs from its request: the correlation id it echoes, and the key and version
/// its body is encoded at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KafkaHeader {
    /// Echoed in the response header.
    pub correlation_id: i32,
    /// The request's api key.
    pub api_key: i16,
    /// The request's api version (the response is encoded at it).
    pub api_version: i16,
}

impl KafkaHeader {
    /// The context of an answer that belongs to no request (the connection closes).
    pub const NONE: KafkaHeader = KafkaHeader { correlation_id: -1, api_key: -1, api_version: 0 };
}

/// A decoded request body.
#[derive(Debug, Clone, PartialEq)]
pub enum KafkaBody {
    /// A request of a served key and version.
    Request(Box<RequestKind>),
    /// An ApiVersions request of a version above the served range: answered with a version 0
    /// body and UNSUPPORTED_VERSION, as Kafka answers it.
    UnsupportedApiVersions,
    /// A SASL token sent as a bare frame (no header), as a client does after a version 0
    /// SaslHandshake was accepted (KIP-43's framing; version 1 carries tokens in
    /// SaslAuthenticate). Answered with [`KafkaAnswer::SaslToken`], or the connection closes.
    SaslToken(Bytes),
}

/// One decoded request.
#[derive(Debug, Clone, PartialEq)]
pub struct KafkaRequest {
    /// Correlation id, key and version.
    pub header: KafkaHeader,
    /// The client id from the request header.
    pub client_id: Option<StrBytes>,
    /// The body.
    pub body: KafkaBody,
}

/// What the codec made of one frame.
#[derive(Debug, Clone, PartialEq)]
pub enum KafkaFrame {
    /// A request to serve.
    Request(KafkaRequest),
    /// A frame Kafka closes the connection over (without an answer), and why.
    Close(String),
}

/// An answer to write.
#[derive(Debug, Clone, PartialEq)]
pub enum KafkaAnswer {
    /// A response body, encoded at the request's version.
    Reply(ResponseKind),
    /// A response body encoded at `version` (ApiVersions' answer to a version it does not serve).
    ReplyAt(i16, ResponseKind),
    /// No response: a produce request with acks=0 that was served.
    Silent,
    /// No response, and the connection closes (an error under acks=0, a request that cannot be
    /// served).
    Close,
    /// A SASL token as a bare frame: the answer to a [`KafkaBody::SaslToken`].
    SaslToken(Bytes),
}

/// The api versions a listener serves: `(api key, min, max)`.
pub type Served = &'static [(ApiKey, i16, i16)];

const LENGTH_PREFIX_BYTES: usize = 4;
/// Api key, api version and correlation id: what every request header starts with.
const HEADER_PREFIX_BYTES: usize = 8;

/// The served version range of `key`, if it is served.
pub fn served_range(served: Served, key: ApiKey) -> Option<(i16, i16)> {
    served.iter().find(|(k, ..)| *k == key).map(|(_, min, max)| (*min, *max))
}

/// Decode one request frame body (without its length prefix).
pub fn decode_request(frame: Bytes, served: Served) -> KafkaFrame {
    if frame.len() < HEADER_PREFIX_BYTES {
        return KafkaFrame::Close(format!("a request of {} bytes is shorter than a request header", frame.len()));
    }
    let raw_key = (&frame[0..2]).get_i16();
    let version = (&frame[2..4]).get_i16();
    let Ok(key) = ApiKey::try_from(raw_key) else {
        return KafkaFrame::Close(format!("unknown api key {raw_key}"));
    };
    let Some((min, max)) = served_range(served, key) else {
        return KafkaFrame::Close(format!("api key {raw_key} ({key:?}) is not served by this listener"));
    };
    let unsupported_api_versions = key == ApiKey::ApiVersions && version > max;
    if !unsupported_api_versions && !(min..=max).contains(&version) {
        return KafkaFrame::Close(format!("{key:?} version {version} is not served (versions {min} to {max} are)"));
    }
    let mut buf = frame;
    let header = match RequestHeader::decode(&mut buf, key.request_header_version(version)) {
        Ok(h) => h,
        Err(e) => return KafkaFrame::Close(format!("{key:?} v{version}: the request header does not decode: {e}")),
    };
    let ctx = KafkaHeader { correlation_id: header.correlation_id, api_key: raw_key, api_version: version };
    let body = if unsupported_api_versions {
        KafkaBody::UnsupportedApiVersions
    } else {
        match RequestKind::decode(key, &mut buf, version) {
            Ok(body) => KafkaBody::Request(Box::new(body)),
            Err(e) => {
                return KafkaFrame::Close(format!(
                    "{key:?} v{version} (correlation id {}): the body does not decode: {e:#}",
                    header.correlation_id
                ))
            }
        }
    };
    KafkaFrame::Request(KafkaRequest { header: ctx, client_id: header.client_id, body })
}

/// Append one response frame for the request `ctx` to `dst`.
pub fn encode_response(ctx: KafkaHeader, answer: &KafkaAnswer, dst: &mut BytesMut) -> Result<(), String> {
    let (version, body) = match answer {
        KafkaAnswer::Reply(body) => (ctx.api_version, body),
        KafkaAnswer::ReplyAt(version, body) => (*version, body),
        KafkaAnswer::Silent | KafkaAnswer::Close => return Ok(()),
        KafkaAnswer::SaslToken(token) => {
            let len = u32::try_from(token.len()).map_err(|_| "a SASL token over 4 GiB".to_string())?;
            dst.extend_from_slice(&len.to_be_bytes());
            dst.extend_from_slice(token);
            return Ok(());
        }
    };
    let key = ApiKey::try_from(ctx.api_key).map_err(|_| format!("no response for api key {}", ctx.api_key))?;
    let start = dst.len();
    dst.extend_from_slice(&[0; LENGTH_PREFIX_BYTES]);
    let encoded = ResponseHeader::default()
        .with_correlation_id(ctx.correlation_id)
        .encode(dst, key.response_header_version(version))
        .and_then(|()| body.encode(dst, version));
    if let Err(e) = encoded {
        dst.truncate(start);
        return Err(format!("{key:?} v{version} response does not encode: {e:#}"));
    }
    let len = u32::try_from(dst.len() - start - LENGTH_PREFIX_BYTES).map_err(|_| "response over 4 GiB".to_string())?;
    dst[start..start + LENGTH_PREFIX_BYTES].copy_from_slice(&len.to_be_bytes());
    Ok(())
}

/// The broker side of a Kafka connection: decodes [`KafkaFrame`]s (frames over `frame_bytes_max`
/// are refused from their length prefix), encodes `(context, answer)`.
///
/// After it has encoded the acceptance of a version 0 SaslHandshake, the client's next frames
/// are bare SASL tokens (no header): one for PLAIN, two for SCRAM; it decodes them as
/// [`KafkaBody::SaslToken`], then Kafka requests again. (A client sends its first token only
/// once the handshake's answer arrived; one that sends it earlier has it decoded as a request,
/// and it closes the connection.)
pub struct KafkaServerCodec {
    inner: LengthDelimitedCodec,
    frame_bytes_max: usize,
    served: Served,
    /// The tokens a version 0 SaslHandshake decoded last would be followed by, if accepted.
    v0_handshake_tokens: u8,
    /// Bare SASL tokens the client sends next.
    tokens_next: u8,
}

/// The bare SASL tokens a client sends after a version 0 SaslHandshake for `mechanism`.
fn v0_tokens(mechanism: &str) -> u8 {
    match mechanism {
        "PLAIN" => 1,
        "SCRAM-SHA-256" | "SCRAM-SHA-512" => 2,
        _ => 0,
    }
}

impl KafkaServerCodec {
    /// A codec for a listener serving `served`, refusing frames above `frame_bytes_max` bytes.
    pub fn new(frame_bytes_max: usize, served: Served) -> Self {
        let inner =
            LengthDelimitedCodec::builder().length_field_type::<u32>().max_frame_length(frame_bytes_max).new_codec();
        KafkaServerCodec { inner, frame_bytes_max, served, v0_handshake_tokens: 0, tokens_next: 0 }
    }
}

impl Decoder for KafkaServerCodec {
    type Item = KafkaFrame;
    type Error = CodecError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<KafkaFrame>, CodecError> {
        let frame = match self.inner.decode(src) {
            Ok(Some(f)) => f.freeze(),
            Ok(None) => return Ok(None),
            Err(e) => return Err(crate::codec::map_frame_error(e, src, self.frame_bytes_max)),
        };
        if self.tokens_next > 0 {
            self.tokens_next -= 1;
            let header = KafkaHeader { correlation_id: -1, api_key: ApiKey::SaslAuthenticate as i16, api_version: -1 };
            return Ok(Some(KafkaFrame::Request(KafkaRequest {
                header,
                client_id: None,
                body: KafkaBody::SaslToken(frame),
            })));
        }
        let decoded = decode_request(frame, self.served);
        if let KafkaFrame::Request(r) = &decoded {
            if let KafkaBody::Request(body) = &r.body {
                if let RequestKind::SaslHandshake(h) = body.as_ref() {
                    self.v0_handshake_tokens = if r.header.api_version == 0 { v0_tokens(&h.mechanism) } else { 0 };
                }
            }
        }
        Ok(Some(decoded))
    }
}

impl Encoder<(KafkaHeader, KafkaAnswer)> for KafkaServerCodec {
    type Error = CodecError;

    fn encode(&mut self, (ctx, answer): (KafkaHeader, KafkaAnswer), dst: &mut BytesMut) -> Result<(), CodecError> {
        if ctx.api_key == ApiKey::SaslHandshake as i16 && ctx.api_version == 0 {
            if let KafkaAnswer::Reply(ResponseKind::SaslHandshake(r)) = &answer {
                if r.error_code == 0 {
                    self.tokens_next = std::mem::take(&mut self.v0_handshake_tokens);
                }
            }
        }
        encode_response(ctx, &answer, dst).map_err(CodecError::Encode)
    }
}

/// The topics a classic `consumer` group member's metadata subscribes to (the consumer
/// protocol's Subscription, any version: its topics lead every version), or `None` if the
/// metadata is not one.
pub fn subscribed_topics(metadata: &[u8]) -> Option<Vec<String>> {
    let mut b = Bytes::copy_from_slice(metadata);
    if b.remaining() < 2 || b.get_i16() < 0 {
        return None;
    }
    // Version 0's fields (topics, user data) start every later version.
    let s = kafka_protocol::messages::ConsumerProtocolSubscription::decode(&mut b, 0).ok()?;
    Some(s.topics.iter().map(|t| t.to_string()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{ApiVersionsRequest, CreateTopicsRequest, MetadataRequest, MetadataResponse};

    const SERVED: Served = &[(ApiKey::ApiVersions, 0, 4), (ApiKey::Metadata, 0, 12), (ApiKey::CreateTopics, 2, 7)];

    fn frame(key: ApiKey, version: i16, correlation_id: i32, body: &RequestKind) -> Bytes {
        let mut b = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("t")))
            .encode(&mut b, key.request_header_version(version))
            .unwrap();
        body.encode(&mut b, version).unwrap();
        b.freeze()
    }

    #[test]
    fn a_members_subscription_is_read_at_any_version() {
        use kafka_protocol::messages::ConsumerProtocolSubscription;
        let s = ConsumerProtocolSubscription::default()
            .with_topics(vec![StrBytes::from_static_str("a"), StrBytes::from_static_str("b")])
            .with_user_data(Some(Bytes::from_static(b"u")))
            .with_generation_id(7);
        for version in 0..=3 {
            let mut b = BytesMut::new();
            bytes::BufMut::put_i16(&mut b, version);
            s.encode(&mut b, version).unwrap();
            assert_eq!(subscribed_topics(&b), Some(vec!["a".to_string(), "b".to_string()]), "version {version}");
        }
        assert_eq!(subscribed_topics(b"\x00\x00\x7f\xff\xff\xff"), None, "a count past the end");
        assert_eq!(subscribed_topics(b"x"), None);
    }

    #[test]
    fn a_served_request_decodes_with_its_header() {
        let body = RequestKind::Metadata(MetadataRequest::default());
        for version in [0, 9, 12] {
            let KafkaFrame::Request(r) = decode_request(frame(ApiKey::Metadata, version, 7, &body), SERVED) else {
                panic!("decodes")
            };
            assert_eq!(r.header, KafkaHeader { correlation_id: 7, api_key: 3, api_version: version });
            assert_eq!(r.client_id.as_deref(), Some("t"));
            assert!(matches!(r.body, KafkaBody::Request(b) if matches!(*b, RequestKind::Metadata(_))));
        }
    }

    #[test]
    fn what_kafka_closes_over_is_refused_before_the_body_is_read() {
        let body = RequestKind::Metadata(MetadataRequest::default());
        let close = |f: Bytes| matches!(decode_request(f, SERVED), KafkaFrame::Close(_));
        assert!(close(frame(ApiKey::Metadata, 13, 1, &body)), "a version above the served range");
        assert!(close(Bytes::from_static(&[0x7f, 0x7f, 0, 0, 0, 0, 0, 1])), "an unknown key");
        assert!(close(frame(ApiKey::Fetch, 4, 1, &RequestKind::Fetch(Default::default()))), "a key not served");
        assert!(close(Bytes::from_static(&[0, 3, 0])), "shorter than a header");
        let mut truncated = frame(ApiKey::Metadata, 9, 1, &body);
        truncated.truncate(truncated.len() - 1);
        assert!(close(truncated), "a body cut short");
    }

    #[test]
    fn an_api_versions_request_above_the_range_is_kept_to_be_answered() {
        let body = RequestKind::ApiVersions(ApiVersionsRequest::default());
        let mut f = BytesMut::from(&frame(ApiKey::ApiVersions, 4, 5, &body)[..]);
        f[2..4].copy_from_slice(&9i16.to_be_bytes());
        let KafkaFrame::Request(r) = decode_request(f.freeze(), SERVED) else { panic!("kept") };
        assert_eq!((r.header.correlation_id, r.body), (5, KafkaBody::UnsupportedApiVersions));
    }

    /// The release of kafka-protocol reserved room for an array from its count before reading
    /// it: this 24-byte request made the process allocate 240 GB and abort
    /// (vendor/kafka-protocol/EPOCHFENCE.md).
    #[test]
    fn a_forged_array_count_is_an_error_not_an_abort() {
        let mut f = BytesMut::from(
            &frame(ApiKey::CreateTopics, 2, 1, &RequestKind::CreateTopics(CreateTopicsRequest::default()))[..],
        );
        let body_at = f.len() - 4 - 4 - 1; // topics count i32, timeout_ms i32, validate_only bool
        f[body_at..body_at + 4].copy_from_slice(&0x7fff_ffffi32.to_be_bytes());
        f.truncate(body_at + 4);
        f.extend_from_slice(&[0; 16]);
        assert!(
            matches!(decode_request(f.freeze(), SERVED), KafkaFrame::Close(why) if why.contains("does not decode"))
        );
    }

    #[test]
    fn responses_carry_the_correlation_id_and_the_right_header_version() {
        let mut out = BytesMut::new();
        let ctx = KafkaHeader { correlation_id: 42, api_key: ApiKey::Metadata as i16, api_version: 12 };
        encode_response(ctx, &KafkaAnswer::Reply(ResponseKind::Metadata(MetadataResponse::default())), &mut out)
            .unwrap();
        let len = (&out[..4]).get_u32() as usize;
        assert_eq!(len, out.len() - 4);
        assert_eq!((&out[4..8]).get_i32(), 42);
        assert_eq!(out[8], 0, "header v1: an empty tagged-field section");
        let mut body = out.freeze().slice(9..);
        assert_eq!(MetadataResponse::decode(&mut body, 12).unwrap(), MetadataResponse::default());
        let mut none = BytesMut::new();
        encode_response(ctx, &KafkaAnswer::Silent, &mut none).unwrap();
        assert!(none.is_empty(), "acks=0: nothing is written");
    }
}
