//! The checks. Each returns its verdict and evidence; a step that cannot be taken ends the
//! check early with a verdict of its own (`Err`): fail, or unsupported when the broker does
//! not serve what the step needs.

use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{EndTxnRequest, ProduceRequest, TopicName, TransactionalId};
use kafka_protocol::protocol::StrBytes;
use producer::kafka::KafkaProducer;
use producer::{ClientError, RecordMetadata};
use protocol::batch::{build_batch, ProducerStamp};

use crate::{Ctx, Verdict};

/// A verdict and its evidence.
pub(crate) type Found = (Verdict, String);

/// A check's end: `Ok` when it got to its verdict, `Err` when a step before it could not be taken.
pub(crate) type Outcome = Result<Found, Found>;

/// Run the check named `name` (one of [`crate::CHECKS`]).
pub(crate) async fn run(name: &str, cx: &Ctx) -> Outcome {
    match name {
        "zombie-produce" => zombie_produce(cx).await,
        "zombie-commit" => zombie_commit(cx).await,
        "zombie-untouched-partition" => zombie_untouched_partition(cx).await,
        "aborted-invisible" => aborted_invisible(cx).await,
        "txn-in-a-row" => txn_in_a_row(cx).await,
        "idempotent-retry" => idempotent_retry(cx).await,
        "epoch-never-regresses" => epoch_never_regresses(cx).await,
        "txn-delayed-write" => txn_delayed_write(cx).await,
        "txn-delayed-end" => txn_delayed_end(cx).await,
        other => Err((Verdict::Unsupported, format!("no check named '{other}'"))),
    }
}

/// A step's error as the check's end: unsupported if the broker does not serve the api, a
/// failure otherwise ("timeout" first when retries ran out).
fn step<T>(what: &str, r: Result<T, ClientError>) -> Result<T, Found> {
    r.map_err(|e| match e {
        ClientError::Unsupported(m) => (Verdict::Unsupported, format!("{what}: {m}")),
        ClientError::Timeout { .. } => (Verdict::Fail, format!("timeout: {what}: {e}")),
        e => (Verdict::Fail, format!("{what}: {e}")),
    })
}

fn holder(name: &str, p: &KafkaProducer) -> String {
    format!("{name} (producer id {}, epoch {})", p.producer_id(), p.epoch())
}

/// The verdict on a zombie's write: refused as fenced passes; acknowledged fails.
fn zombie_write(fence: &str, what: &str, sent: Result<RecordMetadata, ClientError>) -> Found {
    match sent {
        Err(e) if e.is_fenced() => (Verdict::Pass, format!("{fence}; {what} was refused: {e}")),
        Ok(m) => (Verdict::Fail, format!("{fence}; {what} was ACKNOWLEDGED at offset {}", m.base_offset)),
        Err(e @ ClientError::Timeout { .. }) => (Verdict::Fail, format!("timeout: {fence}; {what}: {e}")),
        Err(e) => (Verdict::Fail, format!("{fence}; {what} was refused, but not as fenced: {e}")),
    }
}

/// A in a transaction with one write on partition 0, and B initialised with the same
/// transactional id: returns (A, B, the evidence of the fence).
async fn zombie_and_successor(cx: &Ctx, check: &str) -> Result<(KafkaProducer, KafkaProducer, String), Found> {
    let tid = cx.tid(check);
    let mut a = step("A's InitProducerId", cx.init(Some(&tid)).await)?;
    step("A's begin", a.begin())?;
    let first = step("A's first write", a.send(&cx.topic, 0, cx.value("A first")).await)?;
    let b = step("B's InitProducerId", cx.init(Some(&tid)).await)?;
    let fence = format!(
        "{} wrote {}-0 at offset {}; {} then initialised '{tid}'",
        holder("A", &a),
        cx.topic,
        first.base_offset,
        holder("B", &b)
    );
    Ok((a, b, fence))
}

/// A zombie's write that landed opened a transaction on `partition` that its coordinator
/// will never end, which would hold the partition's last stable offset (and every later
/// check's read_committed reads) there. B ends it: its abort marker closes every transaction
/// of the producer id on the partition.
async fn end_zombie_transaction(cx: &Ctx, b: &mut KafkaProducer, partition: i32) {
    if b.begin().is_ok() && b.send(&cx.topic, partition, cx.value("B ends the zombie's transaction")).await.is_ok() {
        let _ = b.abort().await;
    }
}

/// Check 1: A's next produce after B's init is refused with a fencing error.
async fn zombie_produce(cx: &Ctx) -> Outcome {
    let (mut a, mut b, fence) = zombie_and_successor(cx, "zombie-produce").await?;
    let sent = a.send(&cx.topic, 0, cx.value("A late")).await;
    if sent.is_ok() {
        end_zombie_transaction(cx, &mut b, 0).await;
    }
    Ok(zombie_write(&fence, &format!("A's next write to {}-0", cx.topic), sent))
}

/// Check 2: A's commit after B's init is refused as fenced, promptly.
async fn zombie_commit(cx: &Ctx) -> Outcome {
    let (mut a, _b, fence) = zombie_and_successor(cx, "zombie-commit").await?;
    let started = Instant::now();
    let ended = a.commit().await;
    let ms = started.elapsed().as_millis();
    Ok(match ended {
        Err(e) if e.is_fenced() => {
            (Verdict::Pass, format!("{fence}; A's commit was refused as fenced in {ms} ms: {e}"))
        }
        Ok(()) => (Verdict::Fail, format!("{fence}; A's commit SUCCEEDED ({ms} ms)")),
        Err(e @ ClientError::Timeout { .. }) => (Verdict::Fail, format!("timeout: {fence}; A's commit: {e}")),
        Err(e) => (Verdict::Fail, format!("{fence}; A's commit was refused, but not as fenced ({ms} ms): {e}")),
    })
}

/// Check 3: A's write to a partition only A would write, sent without AddPartitionsToTxn, is refused.
async fn zombie_untouched_partition(cx: &Ctx) -> Outcome {
    if cx.partitions < 2 {
        return Ok((
            Verdict::Unsupported,
            format!(
                "topic '{}' has {} partition; this check needs 2 (one that only the zombie writes to)",
                cx.topic, cx.partitions
            ),
        ));
    }
    let (mut a, mut b, fence) = zombie_and_successor(cx, "zombie-untouched-partition").await?;
    // As a buggy client or a zombie holding a stale registration would: the coordinator is not
    // asked, so only the broker's own fence can refuse the write.
    a.set_register_partitions(false);
    let sent = a.send(&cx.topic, 1, cx.value("A untouched")).await;
    if sent.is_ok() {
        end_zombie_transaction(cx, &mut b, 1).await;
    }
    let what = format!("A's write to {}-1 (never added to a transaction, never written by B)", cx.topic);
    Ok(zombie_write(&fence, &what, sent))
}

/// What a read found.
struct View {
    /// This run's records read: (offset, value).
    records: Vec<(i64, Bytes)>,
    /// Where the reading stopped: the last stable offset (read_committed) or the high watermark.
    readable_end: i64,
    /// Whether the condition held.
    done: bool,
}

/// Fetch size of one read, in bytes.
const READ_BYTES_MAX: i32 = 1 << 20;

/// Read `topic-partition` from `from` until `done` holds of what was read (the last stable
/// offset may trail an EndTxn's answer: Kafka writes markers after it) or half the check's
/// time passes.
async fn read_until(
    cx: &Ctx,
    read_committed: bool,
    partition: i32,
    from: i64,
    done: impl Fn(&[(i64, Bytes)]) -> bool,
) -> Result<View, Found> {
    let mut consumer = cx.consumer(read_committed);
    let deadline = Instant::now() + Duration::from_millis(cx.timeout_ms / 2);
    let isolation = if read_committed { "read_committed" } else { "read_uncommitted" };
    let what = format!("reading {}-{partition} {isolation} from offset {from}", cx.topic);
    loop {
        let mut records = Vec::new();
        let mut offset = from;
        let readable_end = loop {
            let f = step(&what, consumer.fetch(&cx.topic, partition, offset, READ_BYTES_MAX).await)?;
            records.extend(
                f.records.into_iter().filter(|r| r.value.ends_with(cx.nonce.as_bytes())).map(|r| (r.offset, r.value)),
            );
            if f.next_offset >= f.readable_end || f.next_offset == offset {
                break f.readable_end;
            }
            offset = f.next_offset;
        };
        let held = done(&records);
        if held || Instant::now() >= deadline {
            return Ok(View { records, readable_end, done: held });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn shown(records: &[(i64, Bytes)]) -> String {
    let items: Vec<String> = records
        .iter()
        .map(|(o, v)| format!("{o}:{}", String::from_utf8_lossy(v).split(' ').next().unwrap_or("")))
        .collect();
    format!("[{}]", items.join(", "))
}

/// Check 4: read_committed never returns the records of an aborted transaction, before or after the
/// last stable offset passes them.
async fn aborted_invisible(cx: &Ctx) -> Outcome {
    let topic = &cx.topic;
    let mut writer = step("the idempotent writer's InitProducerId", cx.init(None).await)?;
    let before = step("the write before", writer.send(topic, 0, cx.value("before")).await)?.base_offset;
    let tid = cx.tid("aborted-invisible");
    let mut a = step("A's InitProducerId", cx.init(Some(&tid)).await)?;
    step("A's begin", a.begin())?;
    let aborted = [cx.value("aborted-1"), cx.value("aborted-2")];
    let at = step("A's write", a.send_batch(topic, 0, &aborted).await)?.base_offset;
    let is_aborted = |v: &Bytes| aborted.contains(v);
    let open_view = read_until(cx, true, 0, before, |_| true).await?.records;
    let after = step("the write after", writer.send(topic, 0, cx.value("after")).await)?.base_offset;
    step("A's abort", a.abort().await)?;
    let committed = read_until(cx, true, 0, before, |got| got.iter().any(|(o, _)| *o == after)).await?;
    let (view, passed, lso) = (committed.records, committed.done, committed.readable_end);
    let all = read_until(cx, false, 0, before, |got| got.iter().any(|(o, _)| *o == after)).await?.records;
    let setting = format!(
        "{} wrote offsets {at}-{} in a transaction it aborted, between offsets {before} and {after} (not transactional)",
        holder("A", &a),
        at + 1
    );
    if open_view.iter().any(|(_, v)| is_aborted(v)) {
        return Ok((
            Verdict::Fail,
            format!("{setting}; read_committed returned them while the transaction was open: {}", shown(&open_view)),
        ));
    }
    if view.iter().any(|(_, v)| is_aborted(v)) {
        return Ok((
            Verdict::Fail,
            format!(
                "{setting}; read_committed returned them after the abort (is the aborted-transactions list served?): {}",
                shown(&view)
            ),
        ));
    }
    if !passed {
        return Ok((
            Verdict::Fail,
            format!(
                "timeout: {setting}; read_committed never got past offset {after}: the last stable offset stays at {lso} \
                 (a transaction left open there?): {}",
                shown(&view)
            ),
        ));
    }
    if !all.iter().any(|(_, v)| is_aborted(v)) {
        return Ok((
            Verdict::Fail,
            format!("{setting}; they are not in the log at all, read_uncommitted: {}", shown(&all)),
        ));
    }
    Ok((
        Verdict::Pass,
        format!(
            "{setting}; read_committed: {} while open, {} after the abort; read_uncommitted: {}",
            shown(&open_view),
            shown(&view),
            shown(&all)
        ),
    ))
}

/// Commit (true) or abort each transaction in turn.
const TXN_PLAN: [bool; 6] = [true, false, true, true, false, true];

/// Check 5: One producer commits and aborts several transactions in a row (transaction version 1:
/// the epoch stays, sequences go on), across two partitions.
async fn txn_in_a_row(cx: &Ctx) -> Outcome {
    let tid = cx.tid("txn-in-a-row");
    let mut p = step("InitProducerId", cx.init(Some(&tid)).await)?;
    let first_epoch = p.epoch();
    let partitions = cx.partitions.min(2);
    let mut from = vec![None; partitions];
    let mut committed: Vec<Vec<Bytes>> = vec![Vec::new(); partitions];
    let mut written: Vec<Vec<Bytes>> = vec![Vec::new(); partitions];
    for (i, commit) in TXN_PLAN.iter().copied().enumerate() {
        step(&format!("begin of transaction {i}"), p.begin())?;
        for part in 0..partitions {
            let v = cx.value(&format!("txn{i}-{}", if commit { "commit" } else { "abort" }));
            let partition = i32::try_from(part).unwrap_or(0);
            let what = format!("transaction {i}'s write to {}-{part} at epoch {}", cx.topic, p.epoch());
            let m = step(&what, p.send(&cx.topic, partition, v.clone()).await)?;
            from[part].get_or_insert(m.base_offset);
            written[part].push(v.clone());
            if commit {
                committed[part].push(v);
            }
        }
        let what = format!("{} of transaction {i} at epoch {}", if commit { "commit" } else { "abort" }, p.epoch());
        if commit {
            step(&what, p.commit().await)?;
        } else {
            step(&what, p.abort().await)?;
        }
    }
    let mut seen = Vec::new();
    for part in 0..partitions {
        let partition = i32::try_from(part).unwrap_or(0);
        let start = from[part].unwrap_or(0);
        let values = |got: &[(i64, Bytes)]| got.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>();
        let want = committed[part].clone();
        let found = read_until(cx, true, partition, start, |got| values(got) == want).await?;
        let (view, lso) = (found.records, found.readable_end);
        if values(&view) != committed[part] {
            return Ok((
                Verdict::Fail,
                format!(
                    "{} transactions ({}) by {}: read_committed on {}-{part} from offset {start} returned {}, not the {} \
                     committed records (its last stable offset: {lso})",
                    TXN_PLAN.len(),
                    plan(),
                    holder("the producer", &p),
                    cx.topic,
                    shown(&view),
                    committed[part].len()
                ),
            ));
        }
        let want = written[part].clone();
        let all = read_until(cx, false, partition, start, |got| values(got) == want).await?.records;
        if values(&all) != written[part] {
            return Ok((
                Verdict::Fail,
                format!(
                    "read_uncommitted on {}-{part} returned {}, not the {} records written",
                    cx.topic,
                    shown(&all),
                    written[part].len()
                ),
            ));
        }
        seen.push(format!("{}-{part}: {} committed of {}", cx.topic, view.len(), all.len()));
    }
    Ok((
        Verdict::Pass,
        format!(
            "{} transactions ({}) by producer id {}, epoch {first_epoch} to {}; read_committed shows exactly the committed records ({})",
            TXN_PLAN.len(),
            plan(),
            p.producer_id(),
            p.epoch(),
            seen.join("; ")
        ),
    ))
}

fn plan() -> String {
    TXN_PLAN.iter().map(|c| if *c { "commit" } else { "abort" }).collect::<Vec<_>>().join(", ")
}

/// Check 6: A resent batch (same producer id, epoch and sequence) is answered with its original
/// offset and not appended twice.
async fn idempotent_retry(cx: &Ctx) -> Outcome {
    let topic = &cx.topic;
    let mut p = step("InitProducerId", cx.init(None).await)?;
    let batch = [cx.value("retry-1"), cx.value("retry-2")];
    let first = step("the batch", p.send_batch(topic, 0, &batch).await)?.base_offset;
    // The batch again with its sequence, as a producer that lost the answer resends it.
    p.set_next_sequence(topic, 0, 0);
    let resent = p.send_batch(topic, 0, &batch).await;
    let next = step("the batch after it", p.send(topic, 0, cx.value("retry-next")).await)?.base_offset;
    let all = read_until(cx, false, 0, first, |got| got.iter().any(|(o, _)| *o == next)).await?.records;
    let copies = all.iter().filter(|(_, v)| *v == batch[0]).count();
    let setting = format!(
        "{} sent a batch of 2 at sequence 0 (offset {first}) and sent it again",
        holder("an idempotent producer", &p)
    );
    let answer = match &resent {
        Ok(m) if m.base_offset == first => format!("the resend was answered with offset {first}"),
        Ok(m) => format!("the resend was answered with offset {}, not {first}", m.base_offset),
        Err(e) => format!("the resend was refused: {e}"),
    };
    let log = format!("the partition from offset {first} holds {}", shown(&all));
    if let Err(e @ ClientError::Timeout { .. }) = &resent {
        return Ok((Verdict::Fail, format!("timeout: {setting}; {e}")));
    }
    let original = matches!(&resent, Ok(m) if m.base_offset == first);
    let verdict = if original && copies == 1 { Verdict::Pass } else { Verdict::Fail };
    let twice = if copies > 1 { format!("; APPENDED {copies} TIMES") } else { String::new() };
    Ok((verdict, format!("{setting}; {answer}; {log}{twice}")))
}

/// Inits of one transactional id in [`epoch_never_regresses`].
const INITS: usize = 5;

/// Check 7: Repeated inits of one transactional id get strictly increasing epochs (or a new producer
/// id once the epoch is exhausted).
async fn epoch_never_regresses(cx: &Ctx) -> Outcome {
    let tid = cx.tid("epoch-never-regresses");
    let mut grants: Vec<(i64, i16)> = Vec::new();
    for i in 0..INITS {
        let p = step(&format!("InitProducerId {}", i + 1), cx.init(Some(&tid)).await)?;
        grants.push((p.producer_id(), p.epoch()));
    }
    let listed = grants.iter().map(|(pid, e)| format!("({pid}, {e})")).collect::<Vec<_>>().join(", ");
    let setting = format!("{INITS} inits of '{tid}' got (producer id, epoch) {listed}");
    for w in grants.windows(2) {
        let ((pid0, e0), (pid1, e1)) = (w[0], w[1]);
        let exhausted = e0 >= i16::MAX - 1;
        if pid1 == pid0 && e1 <= e0 {
            return Ok((Verdict::Fail, format!("{setting}: epoch {e1} after {e0} of producer id {pid0}")));
        }
        if pid1 != pid0 && !exhausted {
            return Ok((
                Verdict::Fail,
                format!("{setting}: a new producer id {pid1} after epoch {e0} of {pid0}, before the epoch ran out"),
            ));
        }
    }
    Ok((Verdict::Pass, format!("{setting}: strictly increasing")))
}

/// What a transaction version 1 broker allows, as information (KAFKA-17754).
fn version_1_hole(p: &KafkaProducer, what: &str) -> Found {
    (
        Verdict::Info,
        format!(
            "the broker finalizes transaction.version {} (not 2): transactions of one producer share its epoch, so {what} \
             of one transaction delayed until the next began can land in that one (KAFKA-17754, known for version 1; \
             not checked)",
            p.transaction_version()
        ),
    )
}

/// A producer of transaction version 2 with one committed transaction N (one record, "n", on
/// partition 0) and the next one, N+1, open with one record ("n+1"): the producer, N's
/// (producer id, epoch), and where N's record is.
async fn two_transactions(cx: &Ctx, check: &str) -> Result<(KafkaProducer, (i64, i16), i64), Found> {
    let tid = cx.tid(check);
    let mut p = step("InitProducerId", cx.init_latest(Some(&tid)).await)?;
    if p.transaction_version() < 2 {
        return Err(version_1_hole(&p, if check == "txn-delayed-write" { "a write" } else { "an EndTxn" }));
    }
    let n = (p.producer_id(), p.epoch());
    step("begin of transaction N", p.begin())?;
    let what = format!("transaction N's write to {}-0 at epoch {}", cx.topic, n.1);
    let first = step(&what, p.send(&cx.topic, 0, cx.value("n")).await)?.base_offset;
    step(&format!("commit of transaction N at epoch {}", n.1), p.commit().await)?;
    step("begin of transaction N+1", p.begin())?;
    let what = format!("transaction N+1's write to {}-0 at epoch {}", cx.topic, p.epoch());
    step(&what, p.send(&cx.topic, 0, cx.value("n+1")).await)?;
    Ok((p, n, first))
}

/// Commit N+1 and read partition 0 read_committed from N's record: exactly N's and N+1's.
async fn only_n_and_next(cx: &Ctx, p: &mut KafkaProducer, first: i64) -> Result<String, Found> {
    step(&format!("commit of transaction N+1 at epoch {}", p.epoch()), p.commit().await)?;
    let want = vec![cx.value("n"), cx.value("n+1")];
    let values = |got: &[(i64, Bytes)]| got.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>();
    let found = read_until(cx, true, 0, first, |got| values(got) == want).await?;
    if values(&found.records) != want {
        return Err((
            Verdict::Fail,
            format!(
                "read_committed on {}-0 from offset {first} returned {}, not N's and N+1's records only",
                cx.topic,
                shown(&found.records)
            ),
        ));
    }
    Ok(format!("read_committed shows N's and N+1's records only ({})", shown(&found.records)))
}

/// Check 8 (transaction version 2): a write of transaction N that the network delayed until
/// N+1 began (this check holds it: N's next batch, sequence 1 at N's epoch) must not land in
/// N+1. Under version 2 it carries an epoch older than N+1's and is refused; under version 1 the
/// hole is reported as information.
async fn txn_delayed_write(cx: &Ctx) -> Outcome {
    let check = "txn-delayed-write";
    let (mut p, (pid, epoch), first) = two_transactions(cx, check).await?;
    let next_epoch = p.epoch();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    let stamp = ProducerStamp { producer_id: pid, producer_epoch: epoch, base_sequence: 1 };
    let batch = build_batch(stamp, true, now, &[cx.value("late")]);
    let held = ProduceRequest::default()
        .with_transactional_id(p.transactional_id().map(|t| TransactionalId(StrBytes::from_string(t.to_string()))))
        .with_acks(-1)
        .with_timeout_ms(i32::try_from(cx.timeout_ms / 4).unwrap_or(i32::MAX))
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(cx.topic.clone())))
            .with_partition_data(vec![PartitionProduceData::default().with_index(0).with_records(Some(batch))])]);
    let mut client = cx.kafka_client();
    let (conn, _) = step(&format!("the leader of {}-0", cx.topic), client.leader(&cx.topic, 0).await)?;
    let held_what =
        format!("transaction version 2: transaction N's delayed write (producer id {pid}, epoch {epoch}, sequence 1)");
    let answer = conn.call(&held, 12).await.map_err(|e| (Verdict::Fail, format!("{held_what}: {e}")))?;
    let resp = answer.responses.first().and_then(|t| t.partition_responses.first());
    let (code, offset) = resp.map_or((-1, -1), |r| (r.error_code, r.base_offset));
    if code == 0 {
        // N+1 is not left open (it would hold back read_committed for the checks after this).
        let _ = p.abort().await;
        return Ok((
            Verdict::Fail,
            format!(
                "{held_what}, released after N+1 began at epoch {next_epoch}, was ACKNOWLEDGED at offset {offset}: it \
                 lands in N+1"
            ),
        ));
    }
    let read = only_n_and_next(cx, &mut p, first).await?;
    Ok((
        Verdict::Pass,
        format!("{held_what}, released after N+1 began at epoch {next_epoch}, was refused with error {code}; {read}"),
    ))
}

/// Check 9 (transaction version 2): an EndTxn (abort) of transaction N delayed until N+1 began
/// (this check holds it) must not end N+1. Under version 2 it carries N's epoch, older than
/// N+1's, and is refused; N+1 then commits. Under version 1 the hole is information.
async fn txn_delayed_end(cx: &Ctx) -> Outcome {
    let check = "txn-delayed-end";
    let (mut p, (pid, epoch), first) = two_transactions(cx, check).await?;
    let next_epoch = p.epoch();
    let tid = p.transactional_id().unwrap_or_default().to_string();
    let held = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_string(tid.clone())))
        .with_producer_id(pid.into())
        .with_producer_epoch(epoch)
        .with_committed(false);
    let mut client = cx.kafka_client();
    let conn = step("the transaction coordinator", client.transaction_coordinator(&tid).await)?;
    let held_what =
        format!("transaction version 2: transaction N's delayed abort (EndTxn v5, producer id {pid}, epoch {epoch})");
    let answer = conn.call(&held, 5).await.map_err(|e| (Verdict::Fail, format!("{held_what}: {e}")))?;
    if answer.error_code == 0 {
        let _ = p.abort().await;
        return Ok((
            Verdict::Fail,
            format!("{held_what}, released after N+1 began at epoch {next_epoch}, SUCCEEDED: it ended N+1"),
        ));
    }
    let code = answer.error_code;
    let read = only_n_and_next(cx, &mut p, first).await?;
    Ok((
        Verdict::Pass,
        format!("{held_what}, released after N+1 began at epoch {next_epoch}, was refused with error {code}; {read}"),
    ))
}
