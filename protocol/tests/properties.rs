//! Property tests: no input makes a decoder panic or allocate beyond what it was given, and
//! every message survives an encode/decode round trip.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use protocol::batch::{build_batch, decode_records, marker_kind, BatchHeader, BatchIter, ProducerStamp};
use protocol::codec::{ClientCodec, ServerCodec};
use protocol::{
    decode_request, decode_response, encode_request, encode_response, AddPartitionRequest, EndTxnRequest, FetchRequest,
    InitProducerIdRequest, ProduceRequest, Request, Response, Status,
};
use tokio_util::codec::Decoder;

fn request() -> impl Strategy<Value = Request> {
    let name = "[a-z0-9._-]{1,20}";
    prop_oneof![
        (name, any::<i32>(), any::<i32>(), any::<i8>(), proptest::collection::vec(any::<u8>(), 0..200)).prop_map(
            |(topic, partition, leader_epoch, acks, records)| Request::Produce(ProduceRequest {
                transactional_id: None,
                topic,
                partition,
                leader_epoch,
                acks,
                records: Bytes::from(records)
            })
        ),
        (name, any::<i32>(), any::<i32>(), any::<i64>(), any::<i32>(), any::<i8>()).prop_map(
            |(topic, partition, leader_epoch, offset, max_bytes, isolation)| Request::Fetch(FetchRequest {
                topic,
                partition,
                leader_epoch,
                offset,
                max_bytes,
                isolation
            })
        ),
        (proptest::option::of(".{0,40}"), any::<i32>(), any::<i64>(), any::<i16>()).prop_map(
            |(transactional_id, transaction_timeout_ms, producer_id, producer_epoch)| {
                Request::InitProducerId(InitProducerIdRequest {
                    transactional_id,
                    transaction_timeout_ms,
                    producer_id,
                    producer_epoch,
                    principal: String::new(),
                })
            }
        ),
        (any::<i64>(), any::<i16>(), name, any::<i32>(), any::<bool>(), any::<bool>(), any::<u128>(), any::<i16>())
            .prop_map(
                |(producer_id, producer_epoch, topic, partition, transactional, verify_only, topic_id, version)| {
                    Request::AddPartition(AddPartitionRequest {
                        transactional_id: String::new(),
                        producer_id,
                        producer_epoch,
                        topic,
                        partition,
                        transactional,
                        verify_only,
                        topic_id,
                        transaction_version: version,
                    })
                }
            ),
        (name, any::<i64>(), any::<i16>(), any::<bool>(), any::<bool>()).prop_map(
            |(transactional_id, producer_id, producer_epoch, commit, bump_epoch)| {
                Request::EndTxn(EndTxnRequest { transactional_id, producer_id, producer_epoch, commit, bump_epoch })
            }
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn requests_roundtrip(req in request(), correlation_id in any::<i32>()) {
        let (h, back) = decode_request(encode_request(correlation_id, &req)).unwrap();
        prop_assert_eq!(h.correlation_id, correlation_id);
        prop_assert_eq!(back, req);
    }

    #[test]
    fn arbitrary_bytes_never_panic_a_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let b = Bytes::from(bytes);
        let _ = decode_request(b.clone());
        let _ = decode_response(b.clone());
        let _ = BatchHeader::parse(&b);
        let _ = BatchHeader::parse_prefix(&b);
        let _ = BatchIter::new(b.clone()).count();
        let _ = decode_records(&b);
        let _ = marker_kind(&b);
    }

    #[test]
    fn damaged_valid_requests_are_errors_or_other_requests_never_panics(
        req in request(),
        cut in any::<prop::sample::Index>(),
        flip in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let full = encode_request(1, &req);
        let _ = decode_request(full.slice(..cut.index(full.len() + 1)));
        let mut damaged = full.to_vec();
        if !damaged.is_empty() {
            let i = flip.index(damaged.len());
            damaged[i] ^= 1 << bit;
        }
        let _ = decode_request(Bytes::from(damaged));
    }

    #[test]
    fn damaged_batches_never_pass_the_crc_check(
        values in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..50), 1..5),
        flip in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let values: Vec<Bytes> = values.into_iter().map(Bytes::from).collect();
        let b = build_batch(ProducerStamp { producer_id: 1, producer_epoch: 0, base_sequence: 0 }, false, 0, &values);
        let mut damaged = b.to_vec();
        let i = flip.index(damaged.len());
        damaged[i] ^= 1 << bit;
        // Bytes the broker rewrites (base offset, leader epoch) sit outside the CRC; anything
        // else flipped is caught by the length checks or the CRC.
        let outside_crc = i < 8 || (12..16).contains(&i);
        let accepted = BatchHeader::parse(&damaged).and_then(|h| protocol::batch::verify_crc(&damaged, &h)).is_ok();
        prop_assert!(outside_crc || !accepted, "a flip at byte {} went unnoticed", i);
    }

    #[test]
    fn the_codecs_take_any_byte_stream_in_any_chunks(
        stream in proptest::collection::vec(any::<u8>(), 0..600),
        chunk in 1usize..64,
    ) {
        let max = 256;
        let mut server = ServerCodec::new(max);
        let mut client = ClientCodec::new(max);
        let mut a = BytesMut::new();
        let mut b = BytesMut::new();
        let mut server_done = false;
        let mut client_done = false;
        for piece in stream.chunks(chunk) {
            a.extend_from_slice(piece);
            b.extend_from_slice(piece);
            while !server_done {
                match server.decode(&mut a) {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(_) => server_done = true,
                }
            }
            while !client_done {
                match client.decode(&mut b) {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(_) => client_done = true,
                }
            }
            // Never reserve for more than a frame the limit allows.
            prop_assert!(a.capacity() <= 4 * max + stream.len());
        }
    }
}

#[test]
fn responses_roundtrip_for_an_error_frame() {
    let r = Response::Error(Status::new(protocol::ErrorCode::InvalidRequest, "x"));
    assert_eq!(decode_response(encode_response(3, &r)).unwrap(), (3, r));
}
