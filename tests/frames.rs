//! Hostile frames over real TCP: an undecodable frame and an oversized frame are answered with
//! an error and the connection closed; the broker and its other clients carry on.

use bytes::{BufMut, BytesMut};
use epochfence::{LocalCluster, LocalOptions};
use futures::StreamExt;
use producer::{ClientConfig, Consumer, Producer, ProducerConfig};
use protocol::codec::ClientCodec;
use protocol::{ErrorCode, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::codec::FramedRead;

/// Send raw bytes, return the error answer and whether the server then closed the socket.
async fn send_raw(addr: &str, bytes: &[u8]) -> (Response, i32, bool) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    let (read, _write) = stream.into_split();
    let mut frames = FramedRead::new(read, ClientCodec::new(1 << 20));
    let (correlation_id, resp) = frames.next().await.expect("an answer before closing").unwrap();
    let mut read = frames.into_inner();
    let mut rest = Vec::new();
    let closed = read.read_to_end(&mut rest).await.map(|n| n == 0).unwrap_or(true);
    (resp, correlation_id, closed)
}

async fn healthy_round_trip(c: &LocalCluster, tid: &str) {
    let mut p = Producer::init(&c.coordinator_addr, ProducerConfig::transactional(tid)).await.unwrap();
    p.send("t", 0, bytes::Bytes::from(tid.to_string())).await.unwrap();
}

#[tokio::test]
async fn malformed_and_oversized_frames_do_not_crash_the_servers() {
    let c = LocalCluster::start(LocalOptions::default()).await.unwrap();
    c.create_topic("t", 1).await.unwrap();
    healthy_round_trip(&c, "before").await;
    // A second, well-behaved client keeps its connection open through all of it.
    let mut bystander = Consumer::new(&c.coordinator_addr, ClientConfig::default());
    assert_eq!(bystander.read_to_end("t", 0, 0).await.unwrap().len(), 1);

    for addr in [c.broker_addrs[0].clone(), c.coordinator_addr.clone()] {
        // 1. A readable header with a body that lies about a string length.
        let mut frame = BytesMut::new();
        frame.put_i16(0); // Produce
        frame.put_i16(0);
        frame.put_i32(77); // correlation id
        frame.put_i16(500); // topic length far beyond the frame
        frame.put_slice(b"abc");
        let mut raw = BytesMut::new();
        raw.put_u32(frame.len() as u32);
        raw.extend_from_slice(&frame);
        let (resp, cid, closed) = send_raw(&addr, &raw).await;
        assert_eq!(cid, 77, "the answer carries the request's correlation id");
        assert_eq!(resp.status().code, ErrorCode::InvalidRequest, "{}", resp.status());
        assert!(resp.status().message.contains("truncated"), "{}", resp.status());
        assert!(closed);

        // 2. An unknown api key.
        let mut raw = BytesMut::new();
        raw.put_u32(8);
        raw.put_i16(31_000);
        raw.put_i16(0);
        raw.put_i32(5);
        let (resp, cid, closed) = send_raw(&addr, &raw).await;
        assert_eq!((cid, resp.status().code, closed), (5, ErrorCode::InvalidRequest, true));

        // 3. A length prefix of 4 GiB: refused from the prefix alone.
        let (resp, cid, closed) = send_raw(&addr, &u32::MAX.to_be_bytes()).await;
        assert_eq!(resp.status().code, ErrorCode::MessageTooLarge, "{}", resp.status());
        assert!(resp.status().message.contains("frame_bytes_max"));
        assert_eq!(cid, -1);
        assert!(closed);

        // 4. Pure garbage shorter than a header.
        let (resp, _, closed) = send_raw(&addr, &[0, 0, 0, 2, 0xde, 0xad]).await;
        assert_eq!(resp.status().code, ErrorCode::InvalidRequest);
        assert!(closed);
    }

    // Everyone else carries on: the bystander's old connection and brand new clients.
    assert_eq!(bystander.read_to_end("t", 0, 0).await.unwrap().len(), 1);
    healthy_round_trip(&c, "after").await;
    assert_eq!(bystander.read_to_end("t", 0, 0).await.unwrap().len(), 2);
    c.shutdown().await;
}
