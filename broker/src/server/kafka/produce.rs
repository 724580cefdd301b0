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

use std::collections::VecDeque;

use protocol::kafka::{KafkaBody, KafkaRequest};

use super::super::{produce_group_under, produce_under, Shared, TxnRules};
use super::authz::Caller;
use super::kafka_code;
use protocol::acl::{Operation, ResourceType};

/// One partition of a Kafka Produce, started or refused outright.
enum Part {
    Started(Handled),
    Refused(Status),
}

/// A partition's batch as the own protocol's produce request (Kafka's Produce carries no leader
/// epoch: whoever leads now takes it).
fn own_request(topic: &TopicName, index: i32, acks: i16, records: Option<bytes::Bytes>) -> protocol::ProduceRequest {
    protocol::ProduceRequest {
        transactional_id: None,
        topic: topic.to_string(),
        partition: index,
        leader_epoch: -1,
        acks: if acks == -1 { ACKS_ALL } else { ACKS_LEADER },
        records: records.unwrap_or_default(),
    }
}

/// Start every partition's append in the handler call, in request order. The answer waits for
/// all of them; it is serial (the connection's next request waits) if any partition's batch
/// waits for the coordinator's verification. With acks=0 nothing is answered, and any error
/// closes the connection, as Kafka does.
pub(super) fn produce(shared: &Arc<Shared>, caller: &Caller, r: ProduceRequest, version: i16) -> Handled<KafkaAnswer> {
    let acks = r.acks;
    let mut parts: Vec<(TopicName, i32, Part)> = Vec::new();
    let tid = r.transactional_id.as_ref().map(|t| t.to_string());
    for topic in r.topic_data {
        let refused = refusal(caller, tid.as_deref(), &topic.name);
        for p in topic.partition_data {
            let refused = refused.clone().or_else(|| pid_refusal(shared, caller, tid.as_deref(), p.records.as_ref()));
            let part = if let Some(status) = refused {
                Part::Refused(status)
            } else if !matches!(acks, -1..=1) {
                Part::Refused(Status::new(
                    ErrorCode::InvalidRequiredAcks,
                    format!("acks {acks} is not -1 (all), 0 (none) or 1 (leader)"),
                ))
            } else {
                Part::Started(produce_under(
                    shared,
                    own_request(&topic.name, p.index, acks, p.records),
                    TxnRules::for_kafka_produce(version),
                ))
            };
            parts.push((topic.name.clone(), p.index, part));
        }
    }
    answer(shared, parts, acks, version)
}

/// Why `caller` may not write to `topic` under transactional id `tid`, if it may not: a
/// transactional write needs WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED
/// on every partition), then any write needs WRITE on the topic (TOPIC_AUTHORIZATION_FAILED).
fn refusal(caller: &Caller, tid: Option<&str>, topic: &TopicName) -> Option<Status> {
    if !caller.enabled() {
        return None;
    }
    if let Some(tid) = tid {
        if !caller.may(Operation::Write, ResourceType::TransactionalId, tid) {
            let code = ErrorCode::TransactionalIdAuthorizationFailed;
            return Some(caller.refusal(code, Operation::Write, ResourceType::TransactionalId, tid));
        }
    }
    (!caller.may(Operation::Write, ResourceType::Topic, topic))
        .then(|| caller.refusal(ErrorCode::TopicAuthorizationFailed, Operation::Write, ResourceType::Topic, topic))
}

/// Why `caller` may not write `records` under their producer id, if it may not (see
/// [`Caller::producer_id_refusal`]); a batch that does not parse is left to the produce path.
fn pid_refusal(shared: &Shared, caller: &Caller, tid: Option<&str>, records: Option<&bytes::Bytes>) -> Option<Status> {
    let binder = shared.pid_binder.as_ref().filter(|_| caller.enabled())?;
    let header = protocol::batch::BatchHeader::parse(records?).ok()?;
    caller.producer_id_refusal(Some(binder), tid, header.producer_id)
}

/// The one partition of a Produce request that writes to one (with valid acks): its topic,
/// index, acks, transaction rules and transactional id.
fn single_partition(req: &KafkaRequest) -> Option<(&TopicName, i32, i16, TxnRules, Option<&str>)> {
    let KafkaBody::Request(body) = &req.body else { return None };
    let kafka_protocol::messages::RequestKind::Produce(p) = body.as_ref() else { return None };
    let [topic] = p.topic_data.as_slice() else { return None };
    let [part] = topic.partition_data.as_slice() else { return None };
    let rules = TxnRules::for_kafka_produce(req.header.api_version);
    let tid = p.transactional_id.as_ref().map(|t| t.as_str());
    matches!(p.acks, -1..=1).then_some((&topic.name, part.index, p.acks, rules, tid))
}

/// The records of a one-partition Produce request.
fn first_records(req: &KafkaRequest) -> Option<&bytes::Bytes> {
    let KafkaBody::Request(body) = &req.body else { return None };
    let kafka_protocol::messages::RequestKind::Produce(p) = body.as_ref() else { return None };
    p.topic_data.first()?.partition_data.first()?.records.as_ref()
}

/// Start the requests one read brought in, in arrival order (see [`net::GroupHandler`]): a run of
/// Produce requests that each write one batch to the same partition, with the same acks, is
/// appended together, as the own listener appends a pipelining producer's batches (one gate,
/// one write); anything else is started alone by `start`, as is a run `caller` may not write
/// (which `start` refuses). Stops after a request that must finish before the next starts (a
/// batch waiting for its verification).
pub(super) fn produce_group(
    shared: &Arc<Shared>,
    caller: &Caller,
    requests: &mut VecDeque<KafkaRequest>,
    start: impl Fn(KafkaRequest) -> Handled<KafkaAnswer>,
) -> Vec<Handled<KafkaAnswer>> {
    let mut out = Vec::new();
    while let Some(first) = requests.pop_front() {
        let run_of = single_partition(&first)
            .filter(|(n, .., tid)| refusal(caller, *tid, n).is_none())
            .filter(|(.., tid)| {
                first_records(&first).is_none_or(|r| pid_refusal(shared, caller, *tid, Some(r)).is_none())
            })
            .map(|(n, i, a, r, tid)| (n.clone(), i, a, r, tid.map(str::to_string)));
        let Some((name, index, acks, rules, tid)) = run_of else {
            let h = start(first);
            let serial = h.is_serial();
            out.push(h);
            if serial {
                break;
            }
            continue;
        };
        let mut run = vec![first];
        // Each one's producer id is checked too: a run shares a partition, not a producer.
        let joins = |req: &KafkaRequest| {
            single_partition(req).is_some_and(|(n, i, a, r, t)| {
                *n == name && i == index && a == acks && r == rules && t == tid.as_deref()
            }) && first_records(req).is_none_or(|r| pid_refusal(shared, caller, tid.as_deref(), Some(r)).is_none())
        };
        while requests.front().is_some_and(joins) {
            run.extend(requests.pop_front());
        }
        let owns: Vec<protocol::ProduceRequest> = run
            .iter()
            .map(|r| match &r.body {
                KafkaBody::Request(b) => match b.as_ref() {
                    kafka_protocol::messages::RequestKind::Produce(p) => {
                        own_request(&name, index, acks, p.topic_data[0].partition_data[0].records.clone())
                    }
                    _ => unreachable!("a run holds produce requests only"),
                },
                KafkaBody::UnsupportedApiVersions | KafkaBody::SaslToken(_) => {
                    unreachable!("a run holds produce requests only")
                }
            })
            .collect();
        let (started, _) = produce_group_under(shared, owns, rules);
        let mut run = run.into_iter();
        let mut waiting = false;
        for h in started {
            let Some(req) = run.next() else { break };
            waiting = h.is_serial();
            out.push(answer(shared, vec![(name.clone(), index, Part::Started(h))], acks, req.header.api_version));
        }
        // Not started (behind a batch waiting for its verification): they wait for it.
        let behind: Vec<KafkaRequest> = run.collect();
        for r in behind.into_iter().rev() {
            requests.push_front(r);
        }
        if waiting {
            break;
        }
    }
    out
}

/// The answer to a Produce whose partitions were started as `parts`: serial if any of them is.
fn answer(shared: &Arc<Shared>, parts: Vec<(TopicName, i32, Part)>, acks: i16, version: i16) -> Handled<KafkaAnswer> {
    let serial = parts.iter().any(|(.., p)| matches!(p, Part::Started(h) if h.is_serial()));
    let shared = shared.clone();
    let answer = async move {
        let answers = join_all(parts.into_iter().map(|(name, index, part)| async move {
            let status_and_offset = match part {
                Part::Refused(status) => (status, (-1, -1)),
                Part::Started(h) => match h.into_future().await {
                    Response::Produce(p) => (p.status, (p.base_offset, p.log_append_time_ms)),
                    other => (other.status().clone(), (-1, -1)),
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
        for (name, index, (status, (base_offset, log_append_time_ms))) in answers {
            let mut p = PartitionProduceResponse::default()
                .with_index(index)
                .with_error_code(kafka_code(status.code, ApiKey::Produce, version))
                .with_base_offset(base_offset);
            if version >= 2 {
                // The broker's time on a LogAppendTime topic, -1 otherwise (as Kafka).
                p = p.with_log_append_time_ms(log_append_time_ms);
            }
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
