//! A scripted fake Kafka peer for the checks' unit tests: one broker (node 0) that is also the
//! controller and every transactional id's coordinator, keeping the rules a correct broker
//! keeps unless a [`Faults`] knob breaks one of them.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use futures::{SinkExt, StreamExt};
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::fetch_response::{AbortedTransaction, FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use protocol::batch::{build_marker, set_base_offset, BatchHeader, MarkerKind};
use protocol::kafka::{KafkaAnswer, KafkaBody, KafkaFrame, KafkaServerCodec, Served};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::codec::Framed;

/// Rules the fake breaks, one knob each; all off is a correct broker.
#[derive(Debug, Default, Clone, Copy)]
pub struct Faults {
    /// Produce ignores producer epochs.
    pub no_epoch_check: bool,
    /// A transactional write to a partition not in its producer's open transaction lands.
    pub no_verification: bool,
    /// EndTxn at a stale epoch succeeds.
    pub stale_commit_accepted: bool,
    /// EndTxn is never answered.
    pub end_txn_silent: bool,
    /// Fetch serves no aborted-transactions list.
    pub no_aborted_list: bool,
    /// A resent batch is appended again.
    pub no_dedup: bool,
    /// Every InitProducerId of a transactional id grants epoch 0.
    pub epoch_reset: bool,
    /// InitProducerId is not served.
    pub no_init_producer_id: bool,
    /// A commit writes an abort marker.
    pub commit_as_abort: bool,
    /// Transaction version 1 only: no `transaction.version` 2 finalized, no Produce v12 or
    /// EndTxn v5 (the healthy fake serves version 2).
    pub version_1: bool,
    /// EndTxn v5 ends the transaction without bumping the epoch (and answers the same one).
    pub no_bump: bool,
}

const SERVED: Served = &[
    (ApiKey::Produce, 3, 12),
    (ApiKey::Fetch, 4, 12),
    (ApiKey::Metadata, 1, 12),
    (ApiKey::FindCoordinator, 1, 3),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::InitProducerId, 0, 4),
    (ApiKey::AddPartitionsToTxn, 0, 3),
    (ApiKey::EndTxn, 0, 5),
    (ApiKey::CreateTopics, 2, 7),
];

/// What the fake offers of `key` (served up to `max`): Produce v12 and EndTxn v5 only with
/// transaction version 2.
fn offered(key: ApiKey, max: i16, f: Faults) -> i16 {
    match key {
        ApiKey::Produce if f.version_1 => max.min(10),
        ApiKey::EndTxn if f.version_1 => max.min(3),
        _ => max,
    }
}

const INVALID_PRODUCER_EPOCH: i16 = 47;
const INVALID_TXN_STATE: i16 = 48;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

type Tp = (String, i32);

#[derive(Default)]
struct Log {
    /// (base offset, records, bytes).
    batches: Vec<(i64, i64, Bytes)>,
    end: i64,
    /// Highest epoch seen per producer id.
    epochs: HashMap<i64, i16>,
    /// Producer id -> first offset of its open transaction.
    open: HashMap<i64, i64>,
    /// (producer id, first offset) of aborted transactions.
    aborted: Vec<(i64, i64)>,
    /// (producer id, epoch, base sequence) -> base offset.
    written: HashMap<(i64, i16, i32), i64>,
}

impl Log {
    fn append(&mut self, bytes: &[u8], records: i64) -> i64 {
        let base = self.end;
        let mut b = BytesMut::from(bytes);
        set_base_offset(&mut b, base);
        self.batches.push((base, records, b.freeze()));
        self.end += records;
        base
    }

    fn marker(&mut self, pid: i64, epoch: i16, kind: MarkerKind) {
        self.append(&build_marker(pid, epoch, -1, kind, 0, 0), 1);
        if let Some(first) = self.open.remove(&pid) {
            if kind == MarkerKind::Abort {
                self.aborted.push((pid, first));
            }
        }
        let e = self.epochs.entry(pid).or_insert(epoch);
        *e = (*e).max(epoch);
    }

    fn stable(&self) -> i64 {
        self.open.values().copied().min().unwrap_or(self.end)
    }
}

struct Holder {
    pid: i64,
    epoch: i16,
    /// The open transaction's partitions.
    txn: Option<HashSet<Tp>>,
}

#[derive(Default)]
struct State {
    faults: Faults,
    host: String,
    port: i32,
    topics: HashMap<String, i32>,
    holders: HashMap<String, Holder>,
    next_pid: i64,
    logs: HashMap<Tp, Log>,
}

impl State {
    fn end_txn(&mut self, tid: &str, kind: MarkerKind) {
        let Some(h) = self.holders.get_mut(tid) else { return };
        let (pid, epoch) = (h.pid, h.epoch);
        for tp in h.txn.take().unwrap_or_default() {
            self.logs.entry(tp).or_default().marker(pid, epoch, kind);
        }
    }
}

/// A running fake peer.
pub struct Fake {
    /// Its address.
    pub addr: String,
    state: Arc<Mutex<State>>,
    server: JoinHandle<()>,
}

impl Fake {
    /// Start a fake peer with `faults` on an ephemeral port.
    pub async fn start(faults: Faults) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let local = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State {
            faults,
            host: local.ip().to_string(),
            port: i32::from(local.port()),
            ..State::default()
        }));
        let shared = state.clone();
        let server = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                let state = shared.clone();
                conns.spawn(async move {
                    let mut framed = Framed::new(stream, KafkaServerCodec::new(1 << 24, SERVED));
                    while let Some(Ok(KafkaFrame::Request(req))) = framed.next().await {
                        let KafkaBody::Request(body) = &req.body else { return };
                        let answer = answer(&mut state.lock().unwrap(), body, req.header.api_version);
                        if let Some(resp) = answer {
                            if framed.send((req.header, KafkaAnswer::Reply(resp))).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        Fake { addr: local.to_string(), state, server }
    }

    /// Make `topic` with `partitions`, as an operator would before the run.
    pub fn create(&self, topic: &str, partitions: i32) {
        self.state.lock().unwrap().topics.insert(topic.to_string(), partitions);
    }

    /// Stop: the listener and every connection close.
    pub fn stop(&self) {
        self.server.abort();
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// The answer to one request; `None` leaves it unanswered.
fn answer(st: &mut State, body: &RequestKind, version: i16) -> Option<ResponseKind> {
    use kafka_protocol::messages::api_versions_response::FinalizedFeatureKey;
    let f = st.faults;
    Some(match body {
        RequestKind::ApiVersions(_) => {
            let keys = SERVED
                .iter()
                .filter(|(k, ..)| !(f.no_init_producer_id && *k == ApiKey::InitProducerId))
                .map(|(k, min, max)| {
                    ApiVersion::default()
                        .with_api_key(*k as i16)
                        .with_min_version(*min)
                        .with_max_version(offered(*k, *max, f))
                })
                .collect();
            let mut resp = ApiVersionsResponse::default().with_api_keys(keys);
            if !f.version_1 {
                resp =
                    resp.with_finalized_features_epoch(1).with_finalized_features(vec![FinalizedFeatureKey::default()
                        .with_name(StrBytes::from_static_str("transaction.version"))
                        .with_min_version_level(2)
                        .with_max_version_level(2)]);
            }
            ResponseKind::ApiVersions(resp)
        }
        RequestKind::Metadata(r) => {
            let names: Vec<String> = match &r.topics {
                Some(ts) => ts.iter().filter_map(|t| t.name.as_ref().map(|n| n.to_string())).collect(),
                None => st.topics.keys().cloned().collect(),
            };
            let topics = names
                .into_iter()
                .map(|n| match st.topics.get(&n) {
                    Some(count) => MetadataResponseTopic::default().with_name(Some(name(&n))).with_partitions(
                        (0..*count)
                            .map(|p| {
                                MetadataResponsePartition::default()
                                    .with_partition_index(p)
                                    .with_leader_id(0.into())
                                    .with_replica_nodes(vec![0.into()])
                                    .with_isr_nodes(vec![0.into()])
                            })
                            .collect(),
                    ),
                    None => MetadataResponseTopic::default()
                        .with_name(Some(name(&n)))
                        .with_error_code(UNKNOWN_TOPIC_OR_PARTITION),
                })
                .collect();
            let me = MetadataResponseBroker::default()
                .with_node_id(0.into())
                .with_host(StrBytes::from_string(st.host.clone()))
                .with_port(st.port);
            ResponseKind::Metadata(
                MetadataResponse::default().with_brokers(vec![me]).with_controller_id(0.into()).with_topics(topics),
            )
        }
        RequestKind::CreateTopics(r) => {
            let results = r
                .topics
                .iter()
                .map(|t| {
                    let code = if st.topics.contains_key(t.name.as_str()) { 36 } else { 0 };
                    st.topics.entry(t.name.to_string()).or_insert(t.num_partitions);
                    CreatableTopicResult::default().with_name(t.name.clone()).with_error_code(code)
                })
                .collect();
            ResponseKind::CreateTopics(CreateTopicsResponse::default().with_topics(results))
        }
        RequestKind::FindCoordinator(_) => ResponseKind::FindCoordinator(
            FindCoordinatorResponse::default()
                .with_node_id(0.into())
                .with_host(StrBytes::from_string(st.host.clone()))
                .with_port(st.port),
        ),
        RequestKind::InitProducerId(r) => {
            let (pid, epoch) = match r.transactional_id.as_ref().map(|t| t.to_string()) {
                None => {
                    st.next_pid += 1;
                    (st.next_pid, 0)
                }
                Some(tid) => {
                    let known = st.holders.get(&tid).map(|h| (h.pid, h.epoch));
                    let granted = match known {
                        None => {
                            st.next_pid += 1;
                            (st.next_pid, 0)
                        }
                        Some((pid, epoch)) => (pid, if f.epoch_reset { 0 } else { epoch + 1 }),
                    };
                    // The new epoch fences the old: its open transaction is aborted at it.
                    if let Some(h) = st.holders.get_mut(&tid) {
                        h.epoch = granted.1;
                    }
                    st.end_txn(&tid, MarkerKind::Abort);
                    st.holders.insert(tid, Holder { pid: granted.0, epoch: granted.1, txn: None });
                    granted
                }
            };
            ResponseKind::InitProducerId(
                InitProducerIdResponse::default().with_producer_id(pid.into()).with_producer_epoch(epoch),
            )
        }
        RequestKind::AddPartitionsToTxn(r) => {
            let tid = r.v3_and_below_transactional_id.to_string();
            let current = st.holders.get(&tid).map(|h| h.epoch);
            let fenced = current != Some(r.v3_and_below_producer_epoch);
            let results = r
                .v3_and_below_topics
                .iter()
                .map(|t| {
                    let parts = t
                        .partitions
                        .iter()
                        .map(|p| {
                            if !fenced {
                                if let Some(h) = st.holders.get_mut(&tid) {
                                    h.txn.get_or_insert_with(HashSet::new).insert((t.name.to_string(), *p));
                                }
                            }
                            AddPartitionsToTxnPartitionResult::default()
                                .with_partition_index(*p)
                                .with_partition_error_code(if fenced { INVALID_PRODUCER_EPOCH } else { 0 })
                        })
                        .collect();
                    AddPartitionsToTxnTopicResult::default().with_name(t.name.clone()).with_results_by_partition(parts)
                })
                .collect();
            ResponseKind::AddPartitionsToTxn(
                AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results),
            )
        }
        RequestKind::EndTxn(r) => {
            if f.end_txn_silent {
                return None;
            }
            let tid = r.transactional_id.to_string();
            let current = st.holders.get(&tid).map(|h| h.epoch);
            let code = if current == Some(r.producer_epoch) {
                let kind = if r.committed && !f.commit_as_abort { MarkerKind::Commit } else { MarkerKind::Abort };
                // Transaction version 2: the markers and the next transaction at the next epoch.
                if version >= 5 && !f.no_bump {
                    if let Some(h) = st.holders.get_mut(&tid) {
                        h.epoch += 1;
                    }
                }
                st.end_txn(&tid, kind);
                0
            } else if f.stale_commit_accepted {
                0
            } else {
                INVALID_PRODUCER_EPOCH
            };
            let mut resp = EndTxnResponse::default().with_error_code(code);
            if version >= 5 && code == 0 {
                let (pid, epoch) = st.holders.get(&tid).map_or((-1, -1), |h| (h.pid, h.epoch));
                resp = resp.with_producer_id(pid.into()).with_producer_epoch(epoch);
            }
            ResponseKind::EndTxn(resp)
        }
        RequestKind::Produce(r) => {
            let mut responses = Vec::new();
            for t in &r.topic_data {
                let mut parts = Vec::new();
                for p in &t.partition_data {
                    let tp = (t.name.to_string(), p.index);
                    let records = p.records.clone().unwrap_or_default();
                    if version >= 12 {
                        add_implicitly(st, &tp, &records);
                    }
                    let (code, offset) = produce(st, &tp, &records);
                    parts.push(
                        PartitionProduceResponse::default()
                            .with_index(p.index)
                            .with_error_code(code)
                            .with_base_offset(offset),
                    );
                }
                responses
                    .push(TopicProduceResponse::default().with_name(t.name.clone()).with_partition_responses(parts));
            }
            ResponseKind::Produce(ProduceResponse::default().with_responses(responses))
        }
        RequestKind::Fetch(r) => {
            let mut topics = Vec::new();
            for t in &r.topics {
                let mut parts = Vec::new();
                for p in &t.partitions {
                    let log = st.logs.entry((t.topic.to_string(), p.partition)).or_default();
                    let stable = log.stable();
                    let limit = if r.isolation_level == 1 { stable } else { log.end };
                    let mut bytes = BytesMut::new();
                    for (base, count, b) in &log.batches {
                        if base + count > p.fetch_offset && *base < limit {
                            bytes.extend_from_slice(b);
                        }
                    }
                    let aborted = (r.isolation_level == 1 && !f.no_aborted_list).then(|| {
                        log.aborted
                            .iter()
                            .map(|(pid, first)| {
                                AbortedTransaction::default().with_producer_id((*pid).into()).with_first_offset(*first)
                            })
                            .collect()
                    });
                    parts.push(
                        PartitionData::default()
                            .with_partition_index(p.partition)
                            .with_high_watermark(log.end)
                            .with_last_stable_offset(stable)
                            .with_aborted_transactions(aborted)
                            .with_records(Some(bytes.freeze())),
                    );
                }
                topics.push(FetchableTopicResponse::default().with_topic(t.topic.clone()).with_partitions(parts));
            }
            ResponseKind::Fetch(FetchResponse::default().with_responses(topics))
        }
        _ => return None,
    })
}

/// Transaction version 2 (Produce v12): a transactional write at its producer's current epoch
/// adds `tp` to its transaction (opening one if none is open).
fn add_implicitly(st: &mut State, tp: &Tp, records: &Bytes) {
    let Ok(h) = BatchHeader::parse(records) else { return };
    if !h.is_transactional() {
        return;
    }
    if let Some(holder) = st.holders.values_mut().find(|x| x.pid == h.producer_id && x.epoch == h.producer_epoch) {
        holder.txn.get_or_insert_with(HashSet::new).insert(tp.clone());
    }
}

/// A produce to `tp`: (error code, base offset).
fn produce(st: &mut State, tp: &Tp, records: &Bytes) -> (i16, i64) {
    let f = st.faults;
    let Ok(h) = BatchHeader::parse(records) else { return (87, -1) };
    let count = i64::from(h.last_offset_delta) + 1;
    let holder = st.holders.values().find(|x| x.pid == h.producer_id).map(|x| (x.epoch, x.txn.clone()));
    let log = st.logs.entry(tp.clone()).or_default();
    if h.producer_id >= 0 {
        let known = log.epochs.get(&h.producer_id).copied();
        if !f.no_epoch_check && known.is_some_and(|e| h.producer_epoch < e) {
            return (INVALID_PRODUCER_EPOCH, -1);
        }
        if h.is_transactional() && !f.no_verification {
            match holder {
                Some((epoch, _)) if epoch > h.producer_epoch => return (INVALID_PRODUCER_EPOCH, -1),
                Some((_, Some(txn))) if txn.contains(tp) => {}
                _ => return (INVALID_TXN_STATE, -1),
            }
        }
        let key = (h.producer_id, h.producer_epoch, h.base_sequence);
        if !f.no_dedup {
            if let Some(offset) = log.written.get(&key) {
                return (0, *offset);
            }
        }
        let base = log.append(records, count);
        log.written.insert(key, base);
        let e = log.epochs.entry(h.producer_id).or_insert(h.producer_epoch);
        *e = (*e).max(h.producer_epoch);
        if h.is_transactional() {
            log.open.entry(h.producer_id).or_insert(base);
        }
        return (0, base);
    }
    (0, log.append(records, count))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{run, Options, Report, RunError, Verdict};

    fn opts(fake: &Fake) -> Options {
        Options { timeout_ms: 2_000, ..Options::new(fake.addr.clone()) }
    }

    async fn verdicts(faults: Faults) -> Vec<Report> {
        let fake = Fake::start(faults).await;
        run(&opts(&fake), |_| {}).await.unwrap()
    }

    fn verdict_of<'a>(reports: &'a [Report], name: &str) -> &'a Report {
        reports.iter().find(|r| r.name == name).unwrap()
    }

    /// The one check that `faults` breaks fails (with `evidence` in its evidence); the others pass.
    async fn only_fails(faults: Faults, name: &str, evidence: &str) {
        only_these_fail(faults, &[(name, evidence)]).await;
    }

    /// The checks that `faults` breaks fail (each with its evidence); the others pass.
    async fn only_these_fail(faults: Faults, failing: &[(&str, &str)]) {
        let reports = verdicts(faults).await;
        for r in &reports {
            match failing.iter().find(|(name, _)| *name == r.name) {
                Some((_, evidence)) => {
                    assert_eq!(r.verdict, Verdict::Fail, "{r:?}");
                    assert!(r.evidence.contains(evidence), "{r:?}");
                }
                None => assert_eq!(r.verdict, Verdict::Pass, "{r:?}"),
            }
        }
    }

    /// A peer of transaction version 1: the checks of version 2 report the known hole as
    /// information, not as a failure; the others pass.
    #[tokio::test]
    async fn a_version_1_peer_gets_information_not_a_failure() {
        let reports = verdicts(Faults { version_1: true, ..Faults::default() }).await;
        for r in &reports {
            if r.name.starts_with("txn-delayed-") {
                assert_eq!(r.verdict, Verdict::Info, "{r:?}");
                assert!(r.evidence.contains("KAFKA-17754"), "{r:?}");
            } else {
                assert_eq!(r.verdict, Verdict::Pass, "{r:?}");
            }
        }
    }

    /// A peer that finalizes version 2 but does not bump the epoch at EndTxn v5: the delayed
    /// write lands in the next transaction, and the delayed abort ends it.
    #[tokio::test]
    async fn a_version_2_peer_that_does_not_bump_fails_the_delayed_checks() {
        let failing = [("txn-delayed-write", "ACKNOWLEDGED"), ("txn-delayed-end", "SUCCEEDED")];
        only_these_fail(Faults { no_bump: true, ..Faults::default() }, &failing).await;
    }

    #[tokio::test]
    async fn every_check_passes_against_a_peer_that_keeps_the_rules() {
        let reports = verdicts(Faults::default()).await;
        assert_eq!(reports.len(), crate::CHECKS.len());
        for r in &reports {
            assert_eq!(r.verdict, Verdict::Pass, "{r:?}");
        }
        let zombie = verdict_of(&reports, "zombie-produce");
        assert!(zombie.evidence.contains("error 47"), "{zombie:?}");
    }

    #[tokio::test]
    async fn a_peer_that_ignores_epochs_fails_the_zombie_checks() {
        let faults = Faults { no_epoch_check: true, no_verification: true, ..Faults::default() };
        let reports = verdicts(faults).await;
        for name in ["zombie-produce", "zombie-untouched-partition"] {
            let r = verdict_of(&reports, name);
            assert_eq!(r.verdict, Verdict::Fail, "{r:?}");
            assert!(r.evidence.contains("ACKNOWLEDGED"), "{r:?}");
        }
        // The zombie's landed writes were ended, so the reads of later checks are not stuck.
        assert_eq!(verdict_of(&reports, "aborted-invisible").verdict, Verdict::Pass);
        assert_eq!(verdict_of(&reports, "txn-in-a-row").verdict, Verdict::Pass);
    }

    #[tokio::test]
    async fn a_peer_that_only_checks_epochs_fails_the_untouched_partition() {
        let faults = Faults { no_verification: true, ..Faults::default() };
        only_fails(faults, "zombie-untouched-partition", "ACKNOWLEDGED").await;
    }

    #[tokio::test]
    async fn a_stale_commit_that_succeeds_fails() {
        // A stale EndTxn taken is also a delayed one taken.
        let failing = [("zombie-commit", "SUCCEEDED"), ("txn-delayed-end", "SUCCEEDED")];
        only_these_fail(Faults { stale_commit_accepted: true, ..Faults::default() }, &failing).await;
    }

    #[tokio::test]
    async fn a_commit_never_answered_fails_with_timeout() {
        let fake = Fake::start(Faults { end_txn_silent: true, ..Faults::default() }).await;
        let o = Options { only: Some("zombie-commit"), ..opts(&fake) };
        let reports = run(&o, |_| {}).await.unwrap();
        assert_eq!(reports[0].verdict, Verdict::Fail);
        assert!(reports[0].evidence.starts_with("timeout"), "{:?}", reports[0]);
    }

    #[tokio::test]
    async fn a_topic_of_one_partition_cannot_check_the_untouched_partition() {
        let fake = Fake::start(Faults::default()).await;
        fake.create("single", 1);
        let o = Options { topic: Some("single".into()), ..opts(&fake) };
        let reports = run(&o, |_| {}).await.unwrap();
        for r in &reports {
            let want = if r.name == "zombie-untouched-partition" { Verdict::Unsupported } else { Verdict::Pass };
            assert_eq!(r.verdict, want, "{r:?}");
        }
    }

    #[tokio::test]
    async fn aborted_records_shown_read_committed_fail() {
        let faults = Faults { no_aborted_list: true, ..Faults::default() };
        let reports = verdicts(faults).await;
        let r = verdict_of(&reports, "aborted-invisible");
        assert_eq!(r.verdict, Verdict::Fail, "{r:?}");
        assert!(r.evidence.contains("after the abort"), "{r:?}");
        // txn-in-a-row sees the aborted transactions too.
        assert_eq!(verdict_of(&reports, "txn-in-a-row").verdict, Verdict::Fail);
    }

    #[tokio::test]
    async fn commits_that_abort_fail_the_transactions_in_a_row() {
        let reports = verdicts(Faults { commit_as_abort: true, ..Faults::default() }).await;
        let r = verdict_of(&reports, "txn-in-a-row");
        assert_eq!(r.verdict, Verdict::Fail, "{r:?}");
        assert!(r.evidence.contains("not the 4 committed records"), "{r:?}");
    }

    #[tokio::test]
    async fn a_resent_batch_appended_twice_fails() {
        only_fails(Faults { no_dedup: true, ..Faults::default() }, "idempotent-retry", "APPENDED 2 TIMES").await;
    }

    #[tokio::test]
    async fn an_epoch_that_goes_back_fails() {
        let reports = verdicts(Faults { epoch_reset: true, ..Faults::default() }).await;
        let r = verdict_of(&reports, "epoch-never-regresses");
        assert_eq!(r.verdict, Verdict::Fail, "{r:?}");
        assert!(r.evidence.contains("epoch 0 after 0"), "{r:?}");
    }

    #[tokio::test]
    async fn a_peer_without_init_producer_id_is_not_supported() {
        let reports = verdicts(Faults { no_init_producer_id: true, ..Faults::default() }).await;
        for r in &reports {
            assert_eq!(r.verdict, Verdict::Unsupported, "{r:?}");
            assert!(r.evidence.contains("InitProducerId"), "{r:?}");
        }
    }

    #[tokio::test]
    async fn a_peer_lost_mid_run_ends_the_run_incomplete() {
        let fake = Fake::start(Faults::default()).await;
        let mut seen = 0;
        let ended = run(&opts(&fake), |_| {
            seen += 1;
            fake.stop();
        })
        .await;
        assert_eq!(seen, 1, "nothing is reported after the peer is gone");
        match ended {
            Err(RunError::Lost { check, .. }) => assert_eq!(check, "zombie-commit"),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_topic_that_does_not_exist_is_an_error_and_is_not_made() {
        let fake = Fake::start(Faults::default()).await;
        let o = Options { topic: Some("missing".into()), ..opts(&fake) };
        assert!(matches!(run(&o, |_| {}).await, Err(RunError::Topic(m)) if m.contains("'missing' does not exist")));
        assert!(fake.state.lock().unwrap().topics.is_empty());
    }

    #[tokio::test]
    async fn an_unreachable_peer_is_an_error_not_a_verdict() {
        let fake = Fake::start(Faults::default()).await;
        let o = opts(&fake);
        drop(fake);
        tokio::task::yield_now().await;
        assert!(matches!(run(&o, |_| {}).await, Err(RunError::Unreachable { .. })));
    }
}
