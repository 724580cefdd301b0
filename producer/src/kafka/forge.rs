//! A lying client's write, for demonstrations and tests of the fence: one record under a
//! producer id and epoch the caller names, with no InitProducerId (no stock client sends one).

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use protocol::batch::{build_batch, ProducerStamp};
use protocol::{ErrorCode, Status};

use super::KafkaClient;
use crate::client::ClientConfig;
use crate::error::ClientError;

/// Write `value` to `topic`-`partition` as an idempotent (not transactional) batch at sequence
/// 0 under `producer_id` and `producer_epoch`, acks=all: the write that would fence that
/// producer's epoch there. Returns the offset it landed at, or the broker's refusal
/// ([`ClientError::Refused`]).
pub async fn forged_write(
    bootstrap: &str,
    config: ClientConfig,
    topic: &str,
    partition: i32,
    (producer_id, producer_epoch): (i64, i16),
    value: Bytes,
) -> Result<i64, ClientError> {
    let mut client = KafkaClient::new(bootstrap, config);
    let (conn, _) = client.leader(topic, partition).await?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    let stamp = ProducerStamp { producer_id, producer_epoch, base_sequence: 0 };
    let records = build_batch(stamp, false, now, &[value]);
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(i32::try_from(client.config().request_timeout_ms).unwrap_or(i32::MAX))
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records))])]);
    let version = conn.version(ApiKey::Produce, (3, 10))?;
    let r = conn.call(&req, version).await?;
    let p = r
        .responses
        .first()
        .and_then(|t| t.partition_responses.first())
        .ok_or_else(|| ClientError::Protocol(format!("{topic}-{partition}: an answer without the partition")))?;
    if p.error_code == 0 {
        return Ok(p.base_offset);
    }
    let code = ErrorCode::from_code(p.error_code);
    let message = p.error_message.as_ref().map(|m| m.to_string()).unwrap_or_default();
    Err(ClientError::Refused {
        what: format!("forged write to {topic}-{partition} under producer id {producer_id} epoch {producer_epoch}"),
        status: Status::new(code, message),
    })
}
