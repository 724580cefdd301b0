//! Kafka-wire helpers for the tests of the Kafka listener (tests/kafka.rs, tests/kafka_tv2.rs).

use std::time::{Duration, Instant};

use epochfence::LocalCluster;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{ListOffsetsRequest, TopicName, TransactionalId};
use kafka_protocol::protocol::StrBytes;
use producer::kafka::KafkaConnection;

/// How long the helpers wait.
const T: Duration = Duration::from_secs(10);

/// A connection to the cluster's first Kafka listener.
pub async fn connect(c: &LocalCluster) -> KafkaConnection {
    KafkaConnection::connect(&c.kafka_addrs[0], None, T).await.unwrap()
}

pub fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

pub fn tid(s: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(s.to_string()))
}

/// Wait until the broker whose Kafka listener is `addr` leads partitions 0 to `partitions - 1`
/// of `topic` (it learns so from its heartbeat) and, with `transaction_version`, its listener
/// offers that version (ApiVersions is answered before the first heartbeat answer tells the
/// broker the coordinator's, and offers version 1 until then).
pub async fn wait_ready(addr: &str, topic: &str, partitions: i32, transaction_version: Option<i16>) {
    let deadline = Instant::now() + T;
    loop {
        let conn = KafkaConnection::connect(addr, None, T).await.unwrap();
        let req = ListOffsetsRequest::default().with_topics(vec![ListOffsetsTopic::default()
            .with_name(name(topic))
            .with_partitions(
                (0..partitions)
                    .map(|p| ListOffsetsPartition::default().with_partition_index(p).with_timestamp(-1))
                    .collect(),
            )]);
        let r = conn.call(&req, 7).await.unwrap();
        let led = r.topics[0].partitions.iter().all(|p| p.error_code == 0);
        if led && transaction_version.is_none_or(|v| conn.transaction_version() == v) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the broker does not lead {topic} (at transaction version {transaction_version:?}) after {T:?}: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
