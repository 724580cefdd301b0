//! Optional TLS: a cluster serving TLS everywhere works end to end (clients, replication,
//! markers and the membership handshake inside TLS), and refuses plaintext and strangers.

use bytes::Bytes;
use epochfence::{local_certificates, LocalCluster, LocalOptions};
use net::{ClientTls, Connection, Dialer};
use producer::{ClientConfig, Consumer, Producer, ProducerConfig};
use protocol::{MetadataRequest, Request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn a_tls_cluster_serves_tls_clients_and_refuses_plaintext_and_strangers() {
    let c = LocalCluster::start(LocalOptions { brokers: 3, tls: true, ..Default::default() }).await.unwrap();
    c.create_topic_replicated("t", 1, 3).await.unwrap();

    // Producers, consumers, replication (acks=all over three brokers) and fencing, all in TLS.
    let mut config = ProducerConfig::transactional("tls");
    config.client = c.client_config();
    let mut a = Producer::init(&c.coordinator_addr, config.clone()).await.unwrap();
    a.send("t", 0, Bytes::from_static(b"A-0")).await.unwrap();
    let mut b = Producer::init(&c.coordinator_addr, config).await.unwrap();
    assert!(a.send("t", 0, Bytes::from_static(b"A-1")).await.unwrap_err().is_fenced(), "fence markers went over TLS");
    b.send("t", 0, Bytes::from_static(b"B-0")).await.unwrap();
    // A batch big enough to go out by a vectored write of its pieces, in the Produce request and
    // in the Replicate requests sent from the leader's memory.
    let big = Bytes::from(vec![b'x'; 64 * 1024]);
    b.send("t", 0, big.clone()).await.unwrap();
    let mut consumer = Consumer::new(&c.coordinator_addr, c.client_config());
    let values: Vec<_> = consumer.read_to_end("t", 0, 0).await.unwrap().into_iter().map(|r| r.value).collect();
    assert_eq!(values, [Bytes::from_static(b"A-0"), Bytes::from_static(b"B-0"), big]);

    // A plaintext client gets no protocol answer from a TLS listener.
    let mut plain = tokio::net::TcpStream::connect(&c.coordinator_addr).await.unwrap();
    let frame =
        protocol::encode_request(1, &Request::Metadata(MetadataRequest { topics: vec![], allow_auto_create: false }));
    plain.write_all(&(frame.len() as u32).to_be_bytes()).await.unwrap();
    plain.write_all(&frame).await.unwrap();
    let mut buf = vec![0u8; 64];
    let n = tokio::time::timeout(std::time::Duration::from_secs(10), plain.read(&mut buf)).await.unwrap().unwrap_or(0);
    assert!(
        n == 0 || protocol::decode_response(Bytes::copy_from_slice(&buf[4.min(n)..n])).is_err(),
        "plaintext was served"
    );

    // A client that trusts another CA refuses the cluster's certificate.
    let (other_ca, _, _) = local_certificates().unwrap();
    let stranger = Dialer { tls: Some(ClientTls::new(other_ca.as_bytes()).unwrap()), ..Dialer::plain() };
    assert!(stranger.dial(&c.coordinator_addr).await.is_err());
    // And a plain `Connection` to the TLS port cannot get an answer either.
    let plain = Connection::connect(&c.coordinator_addr).await.unwrap();
    assert!(plain.call_timeout(Request::Describe, std::time::Duration::from_secs(5)).await.is_err());

    // The cluster still serves TLS clients after all that.
    let mut admin = producer::Admin::new(&c.coordinator_addr, ClientConfig { ..c.client_config() });
    assert_eq!(admin.describe().await.unwrap().brokers.len(), 3);
    c.shutdown().await;
}

/// The Kafka listener serves TLS as the own one does: a Kafka client trusting the cluster's CA
/// produces, is fenced and reads back over TLS (the relays to the coordinator and the markers
/// are TLS too), and a plaintext Kafka client gets no answer.
#[tokio::test]
async fn the_kafka_listener_serves_tls_and_refuses_plaintext() {
    use kafka_protocol::messages::ApiVersionsRequest;
    use producer::kafka::{KafkaConnection, KafkaConsumer, KafkaProducer};
    let c =
        LocalCluster::start(LocalOptions { brokers: 2, tls: true, kafka: true, ..Default::default() }).await.unwrap();
    c.create_topic_replicated("t", 1, 2).await.unwrap();
    let mut config = ProducerConfig::transactional("kafka-tls");
    config.client = c.client_config();
    let mut a = KafkaProducer::init(&c.kafka_bootstrap(), config.clone()).await.unwrap();
    a.begin().unwrap();
    a.send("t", 0, Bytes::from_static(b"A-0")).await.unwrap();
    let mut b = KafkaProducer::init(&c.kafka_bootstrap(), config).await.unwrap();
    assert!(b.epoch() > a.epoch(), "the relayed init went over TLS");
    assert!(a.send("t", 0, Bytes::from_static(b"A-1")).await.unwrap_err().is_fenced(), "the fence went over TLS");
    b.begin().unwrap();
    b.send("t", 0, Bytes::from_static(b"B-0")).await.unwrap();
    b.commit().await.unwrap();
    let mut consumer = KafkaConsumer::read_committed(&c.kafka_bootstrap(), c.client_config());
    let values: Vec<_> = consumer.read_to_end("t", 0, 0).await.unwrap().into_iter().map(|r| r.value).collect();
    assert_eq!(values, [Bytes::from_static(b"B-0")], "read_committed: A's aborted write is not shown");

    // A plaintext Kafka client gets no answer from the TLS listener.
    let t = std::time::Duration::from_secs(5);
    match KafkaConnection::connect(&c.kafka_addrs[0], None, t).await {
        Err(_) => {}
        Ok(plain) => assert!(plain.call(&ApiVersionsRequest::default(), 3).await.is_err(), "plaintext was served"),
    }
    // A TLS client that trusts another CA refuses the listener's certificate.
    let (other_ca, _, _) = local_certificates().unwrap();
    let stranger = ClientTls::new(other_ca.as_bytes()).unwrap();
    assert!(KafkaConnection::connect(&c.kafka_addrs[0], Some(&stranger), t).await.is_err());
    c.shutdown().await;
}

/// The subject of a client certificate as RFC 2253 writes it (Kafka's principal for SSL).
#[test]
fn a_client_certificates_subject_reads_as_rfc_2253() {
    use rustls::pki_types::pem::PemObject;
    let c = epochfence::local_certificates_with_clients(&["alice", "o'b,r+i\\an ", "  a=b#c  "]).unwrap();
    let subject = |pem: &str| {
        let der = rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
        net::tls::subject_rfc2253(&der).unwrap()
    };
    assert_eq!(subject(&c.clients[0].1), "CN=alice,OU=clients,O=epochfence");
    assert_eq!(subject(&c.clients[1].1), "CN=o'b\\,r\\+i\\\\an\\ ,OU=clients,O=epochfence");
    // As Java writes it: `=` and `#` escaped anywhere, every leading and trailing space.
    assert_eq!(subject(&c.clients[2].1), "CN=\\ \\ a\\=b\\#c\\ \\ ,OU=clients,O=epochfence");
    assert_eq!(subject(&c.server_cert), "CN=localhost");
}
