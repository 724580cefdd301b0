//! Kafka's Produce: each partition's batch becomes an own-protocol produce request and goes
//! through the broker's one produce path (checks, gate, log, replication), under transaction
//! version 1 rules.

use std::sync::Arc;

use futures::future::join_all;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse, ResponseKind, TopicName};
use kafka_protocol::protocol::StrBytes;
use net::Handled;
use protocol::kafka::KafkaAnswer;
use protocol::{ErrorCode, Response, Status, ACKS_ALL, ACKS_LEADER};

use super::super::{produce_under, Shared, TxnRules};
use super::kafka_code;

/// One partition of a Kafka Produce, started or refused outright.
enum Part {
    Started(Handled),
    Refused(Status),
}

/// Start every partition's append in the handler call, in request order. The answer waits for
/// all of them; it is serial (the connection's next request waits) if any partition's batch
/// waits for the coordinator's verification. With acks=0 nothing is answered, and any error
/// closes the connection, as Kafka does.
pub(super) fn produce(shared: &Arc<Shared>, r: ProduceRequest, version: i16) -> Handled<KafkaAnswer> {
    let acks = r.acks;
    let mut parts: Vec<(TopicName, i32, Part)> = Vec::new();
    for topic in r.topic_data {
        for p in topic.partition_data {
            let part = if !matches!(acks, -1..=1) {
                Part::Refused(Status::new(
                    ErrorCode::InvalidRequiredAcks,
                    format!("acks {acks} is not -1 (all), 0 (none) or 1 (leader)"),
                ))
            } else {
                let own = protocol::ProduceRequest {
                    topic: topic.name.to_string(),
                    partition: p.index,
                    // Kafka's Produce carries no leader epoch: whoever leads now takes it.
                    leader_epoch: -1,
                    acks: if acks == -1 { ACKS_ALL } else { ACKS_LEADER },
                    records: p.records.unwrap_or_default(),
                };
                Part::Started(produce_under(shared, own, TxnRules::KafkaTv1))
            };
            parts.push((topic.name.clone(), p.index, part));
        }
    }
    let serial = parts.iter().any(|(.., p)| matches!(p, Part::Started(h) if h.is_serial()));
    let shared = shared.clone();
    let answer = async move {
        let answers = join_all(parts.into_iter().map(|(name, index, part)| async move {
            let status_and_offset = match part {
                Part::Refused(status) => (status, -1),
                Part::Started(h) => match h.into_future().await {
                    Response::Produce(p) => (p.status, p.base_offset),
                    other => (other.status().clone(), -1),
                },
            };
            (name, index, status_and_offset)
        }))
        .await;
        if acks == 0 {
            let failed = answers.iter().find(|(.., (status, _))| !status.is_ok());
            return match failed {
                None => KafkaAnswer::Silent,
                Some((name, index, (status, _))) => {
                    tracing::info!(topic = %name.0, partition = index, %status, "acks=0 produce failed; closing the connection, as Kafka does");
                    KafkaAnswer::Close
                }
            };
        }
        let mut topics: Vec<TopicProduceResponse> = Vec::new();
        for (name, index, (status, base_offset)) in answers {
            let mut p = PartitionProduceResponse::default()
                .with_index(index)
                .with_error_code(kafka_code(status.code, ApiKey::Produce, version))
                .with_base_offset(base_offset);
            if version >= 5 {
                let start = shared
                    .partitions
                    .get(&(name.to_string(), index))
                    .and_then(|part| part.offsets(-1).ok())
                    .map_or(-1, |o| o.log_start_offset);
                p = p.with_log_start_offset(start);
            }
            if version >= 8 && !status.is_ok() {
                p = p.with_error_message(Some(StrBytes::from_string(status.message)));
            }
            match topics.last_mut().filter(|t| t.name == name) {
                Some(t) => t.partition_responses.push(p),
                None => topics.push(TopicProduceResponse::default().with_name(name).with_partition_responses(vec![p])),
            }
        }
        KafkaAnswer::Reply(ResponseKind::Produce(ProduceResponse::default().with_responses(topics)))
    };
    if serial {
        Handled::serial(answer)
    } else {
        Handled::Applied(Box::pin(answer))
    }
}
