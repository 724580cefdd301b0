//! The group requests' shell: decide under the state lock with [`GroupTable`], journal what the
//! decision produced, and answer (the waiting joins and syncs too) once that is durable.

use std::sync::Arc;
use std::time::Duration;

use protocol::{
    AddOffsetsRequest, ConsumerHeartbeatResponse, DeleteGroupsResponse, DescribeGroupsResponse, ErrorCode, GroupMember,
    JoinGroupResponse, LeaveGroupResponse, OffsetCommitRequest, OffsetDeleteResponse, OffsetsResponse, Request,
    Response, Status, SyncGroupResponse, TxnOwner,
};
use tokio::sync::oneshot;

use super::{durable, Shared, State, WaiterKey};
use crate::groups::{JoinDecision, SyncDecision, Wake, OFFSETS_TOPIC};
use crate::table::{RegisterDecision, Registration};

/// How often member sessions and rebalance deadlines are checked, in milliseconds.
pub const GROUP_TICK_MS: u64 = 100;

/// Journal the group table's entries and deliver its wakes once they are durable. Call under
/// the state lock, after registering the caller's own waiter. The receiver says whether the
/// entries became durable.
fn flush_groups(shared: &Arc<Shared>, st: &mut State) -> oneshot::Receiver<Result<(), Status>> {
    let (wakes, entries) = st.groups.take_effects();
    let rx = shared.persist(&entries);
    let sends: Vec<(oneshot::Sender<Response>, Response, Response)> = {
        let mut waiters = shared.group_waiters.lock().unwrap_or_else(|p| p.into_inner());
        wakes
            .into_iter()
            .filter_map(|w| {
                let (key, ok, failed): (WaiterKey, Response, Response) = match w {
                    Wake::Join { group, member_id, response } => {
                        let failed = |s| Response::JoinGroup(JoinGroupResponse::error(s, &member_id));
                        let f = failed(Status::new(ErrorCode::CoordinatorNotAvailable, "coordinator cannot persist"));
                        ((group, member_id.clone(), false), Response::JoinGroup(response), f)
                    }
                    Wake::Sync { group, member_id, response } => {
                        let f = Response::SyncGroup(SyncGroupResponse::error(Status::new(
                            ErrorCode::CoordinatorNotAvailable,
                            "coordinator cannot persist",
                        )));
                        ((group, member_id, true), Response::SyncGroup(response), f)
                    }
                };
                waiters.remove(&key).map(|tx| (tx, ok, failed))
            })
            .collect()
    };
    let (done_tx, done_rx) = oneshot::channel();
    tokio::spawn(async move {
        let outcome = durable(rx).await;
        for (tx, ok, failed) in sends {
            let _ = tx.send(if outcome.is_ok() { ok } else { failed });
        }
        let _ = done_tx.send(outcome);
    });
    done_rx
}

async fn settled(rx: oneshot::Receiver<Result<(), Status>>) -> Result<(), Status> {
    rx.await.unwrap_or_else(|_| Err(Status::new(ErrorCode::CoordinatorNotAvailable, "coordinator stopping")))
}

/// Wait for the answer registered under `key`.
async fn waited(rx: oneshot::Receiver<Response>, superseded: Response) -> Response {
    rx.await.unwrap_or(superseded)
}

fn register_waiter(shared: &Shared, key: WaiterKey) -> oneshot::Receiver<Response> {
    let (tx, rx) = oneshot::channel();
    // A member's earlier request still waiting is superseded (its sender dropped: answered
    // with an error).
    shared.group_waiters.lock().unwrap_or_else(|p| p.into_inner()).insert(key, tx);
    rx
}

fn group_refusal(request: &str, who: &GroupMember, status: &Status) {
    tracing::info!(
        target: "epochfence::fencing",
        request,
        reason = status.code.name(),
        group = %who.group,
        generation = who.generation,
        member_id = %who.member_id,
        instance_id = who.instance_id.as_deref().unwrap_or(""),
        detail = %status.message,
        "refused by the group coordinator"
    );
}

/// The producer side of AddOffsetsToTxn and TxnOffsetCommit: the transactional id owns the
/// producer id, and (`verify_only`) its open transaction carries offsets, or (otherwise) will.
fn check_txn(
    st: &mut State,
    txn: &TxnOwner,
    verify_only: bool,
    now_ms: u64,
) -> Result<Vec<crate::entry::Entry>, Status> {
    match st.table.current(&txn.transactional_id) {
        Some((pid, _)) if pid == txn.producer_id => {}
        Some((pid, _)) => {
            return Err(Status::new(
                ErrorCode::InvalidProducerIdMapping,
                format!("transactional id '{}' uses producer id {pid}, not {}", txn.transactional_id, txn.producer_id),
            ))
        }
        None => {
            return Err(Status::new(
                ErrorCode::InvalidProducerIdMapping,
                format!("transactional id '{}' is unknown; call InitProducerId first", txn.transactional_id),
            ))
        }
    }
    let reg = Registration {
        producer_id: txn.producer_id,
        epoch: txn.producer_epoch,
        topic: OFFSETS_TOPIC,
        topic_id: crate::cluster::OFFSETS_PARTITION_ID,
        partition: 0,
        transactional: true,
        verify_only,
        // AddOffsetsToTxn and TxnOffsetCommit v5 come the same way: the offsets tell nothing of
        // the version (its partitions' adds and its EndTxn do).
        transaction_version: 0,
    };
    match st.table.handle_register(&reg, now_ms) {
        RegisterDecision::Accept { entries, .. } => Ok(entries),
        RegisterDecision::Refuse { status, .. } => {
            if verify_only && status.code == ErrorCode::InvalidTxnState {
                return Err(Status::new(
                    ErrorCode::InvalidTxnState,
                    format!(
                        "transactional id '{}' has no open transaction carrying offsets: call AddOffsetsToTxn first",
                        txn.transactional_id
                    ),
                ));
            }
            Err(status)
        }
    }
}

/// Serve one group request.
pub(super) async fn handle_group(shared: Arc<Shared>, req: Request) -> Response {
    let now = shared.now_ms();
    tracing::debug!(request = ?req, "group request");
    match req {
        Request::JoinGroup(r) => {
            let (answer, done) = {
                let mut st = shared.lock();
                let answer = match st.groups.handle_join(now, &r) {
                    JoinDecision::Answer(a) => Err(a),
                    JoinDecision::Wait { member_id } => {
                        Ok((register_waiter(&shared, (r.group.clone(), member_id.clone(), false)), member_id))
                    }
                };
                (answer, flush_groups(&shared, &mut st))
            };
            match answer {
                Err(a) => {
                    let status = settled(done).await.err();
                    Response::JoinGroup(match status {
                        Some(s) => JoinGroupResponse::error(s, &a.member_id),
                        None => a,
                    })
                }
                Ok((rx, member_id)) => {
                    let superseded = Response::JoinGroup(JoinGroupResponse::error(
                        Status::new(
                            ErrorCode::RebalanceInProgress,
                            "a later JoinGroup of this member replaced this one",
                        ),
                        &member_id,
                    ));
                    waited(rx, superseded).await
                }
            }
        }
        Request::SyncGroup(r) => {
            let (answer, done) = {
                let mut st = shared.lock();
                let key = (r.member.group.clone(), r.member.member_id.clone(), true);
                let rx = register_waiter(&shared, key.clone());
                let answer = match st.groups.handle_sync(now, &r) {
                    SyncDecision::Answer(a) => {
                        shared.group_waiters.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
                        Err(a)
                    }
                    SyncDecision::Wait => Ok(rx),
                };
                (answer, flush_groups(&shared, &mut st))
            };
            match answer {
                Err(a) => {
                    if !a.status.is_ok() {
                        group_refusal("sync_group", &r.member, &a.status);
                    }
                    Response::SyncGroup(match settled(done).await {
                        Ok(()) => a,
                        Err(s) => SyncGroupResponse::error(s),
                    })
                }
                Ok(rx) => {
                    let superseded = Response::SyncGroup(SyncGroupResponse::error(Status::new(
                        ErrorCode::RebalanceInProgress,
                        "a later SyncGroup of this member replaced this one",
                    )));
                    waited(rx, superseded).await
                }
            }
        }
        Request::GroupHeartbeat(r) => {
            let status = shared.lock().groups.handle_heartbeat(now, &r.member);
            Response::GroupHeartbeat(status)
        }
        Request::ConsumerHeartbeat(h) => {
            // Decided under the lock; answered once what it changed (an epoch, an assignment) is
            // durable: no member learns an epoch the journal does not hold.
            let (answer, done) = {
                let mut st = shared.lock();
                let topics = st.cluster.topic_ids();
                let answer = st.groups.handle_consumer_heartbeat(now, &h, &topics);
                (answer, flush_groups(&shared, &mut st))
            };
            let answer = match (answer, settled(done).await) {
                (Ok(a), Ok(())) => ConsumerHeartbeatResponse {
                    status: Status::ok(),
                    member_id: a.member_id,
                    member_epoch: a.member_epoch,
                    heartbeat_interval_ms: a.heartbeat_interval_ms,
                    assignment: a.assignment.map(|set| set.into_iter().collect()),
                },
                (Err(status), _) | (Ok(_), Err(status)) => ConsumerHeartbeatResponse::error(status, &h.member_id),
            };
            if !answer.status.is_ok() {
                let who = GroupMember {
                    group: h.group.clone(),
                    generation: h.member_epoch,
                    member_id: h.member_id.clone(),
                    instance_id: h.instance_id.clone(),
                };
                group_refusal("consumer_group_heartbeat", &who, &answer.status);
            }
            Response::ConsumerHeartbeat(answer)
        }
        Request::LeaveGroup(r) => {
            let (members, done) = {
                let mut st = shared.lock();
                let members = st.groups.handle_leave(now, &r.group, &r.members);
                (members, flush_groups(&shared, &mut st))
            };
            let status = settled(done).await.err().unwrap_or_else(Status::ok);
            Response::LeaveGroup(LeaveGroupResponse { status, members })
        }
        Request::OffsetCommit(r) => Response::OffsetCommit(commit(&shared, r, now).await),
        Request::OffsetFetch(r) => {
            let (partitions, done) = {
                let mut st = shared.lock();
                let partitions = st.groups.handle_fetch(&r.group, r.partitions.as_deref(), r.require_stable);
                // Only what is durable is answered: wait for every commit queued before.
                (partitions, flush_groups(&shared, &mut st))
            };
            match settled(done).await {
                Ok(()) => Response::OffsetFetch(OffsetsResponse { status: Status::ok(), partitions }),
                Err(status) => Response::OffsetFetch(OffsetsResponse { status, partitions: Vec::new() }),
            }
        }
        Request::AddOffsets(AddOffsetsRequest { txn, group }) => {
            let done = {
                let mut st = shared.lock();
                if group.is_empty() {
                    return Response::AddOffsets(Status::new(ErrorCode::InvalidGroupId, "the group id is empty"));
                }
                match check_txn(&mut st, &txn, false, now) {
                    Ok(entries) => shared.persist(&entries),
                    Err(status) => {
                        super::fencing_event(
                            "add_offsets_to_txn",
                            Some(&txn.transactional_id),
                            txn.producer_id,
                            txn.producer_epoch,
                            -1,
                            None,
                            &status,
                        );
                        return Response::AddOffsets(status);
                    }
                }
            };
            Response::AddOffsets(durable(done).await.err().unwrap_or_else(Status::ok))
        }
        Request::DescribeGroups(r) => {
            let (groups, done) = {
                let mut st = shared.lock();
                let names = st.cluster.topic_names();
                (st.groups.describe(&r.groups, &names), flush_groups(&shared, &mut st))
            };
            let status = settled(done).await.err().unwrap_or_else(Status::ok);
            Response::DescribeGroups(DescribeGroupsResponse { status, groups })
        }
        Request::DeleteGroups(r) => {
            let (groups, done) = {
                let mut st = shared.lock();
                let groups = st.groups.handle_delete_groups(&r.groups);
                (groups, flush_groups(&shared, &mut st))
            };
            match settled(done).await {
                Ok(()) => {
                    for (name, s) in r.groups.iter().zip(&groups) {
                        if s.is_ok() {
                            tracing::info!(group = %name, "group deleted with its offsets");
                        }
                    }
                    Response::DeleteGroups(DeleteGroupsResponse { status: Status::ok(), groups })
                }
                Err(status) => Response::DeleteGroups(DeleteGroupsResponse { status, groups: Vec::new() }),
            }
        }
        Request::OffsetDelete(r) => {
            let (outcome, done) = {
                let mut st = shared.lock();
                let exists: Vec<bool> =
                    r.partitions.iter().map(|(t, p)| st.cluster.leader_of(t, *p).is_some()).collect();
                let outcome = st.groups.handle_offset_delete(&r.group, &r.partitions, &exists);
                (outcome, flush_groups(&shared, &mut st))
            };
            let (status, partitions) = match (outcome, settled(done).await) {
                (Ok(partitions), Ok(())) => (Status::ok(), partitions),
                (Err(status), _) | (Ok(_), Err(status)) => (status, Vec::new()),
            };
            Response::OffsetDelete(OffsetDeleteResponse { status, partitions })
        }
        other => Response::Error(Status::new(
            ErrorCode::InvalidRequest,
            format!("not a group request: {:?}", other.api_key()),
        )),
    }
}

/// OffsetCommit and TxnOffsetCommit. Offsets of partitions that do not exist are refused
/// UNKNOWN_TOPIC_OR_PARTITION, each, as Kafka refuses them (a group's offsets are kept only for
/// real partitions, so no client can grow them with names); the others are committed.
async fn commit(shared: &Arc<Shared>, r: OffsetCommitRequest, now: u64) -> OffsetsResponse {
    let (outcome, exists) = {
        let mut st = shared.lock();
        let exists: Vec<bool> =
            r.offsets.iter().map(|o| st.cluster.leader_of(&o.topic, o.partition).is_some()).collect();
        // Copied only when some partition is missing (an offset may carry 4 KiB of metadata).
        let known: std::borrow::Cow<'_, [protocol::PartitionOffset]> = if exists.iter().all(|e| *e) {
            std::borrow::Cow::Borrowed(&r.offsets)
        } else {
            r.offsets.iter().zip(&exists).filter(|(_, e)| **e).map(|(o, _)| o.clone()).collect()
        };
        let decided = if known.is_empty() && !r.offsets.is_empty() {
            Err(unknown_partitions(&r.offsets, &exists))
        } else {
            match &r.txn {
                None => st.groups.handle_commit(&r.member, &known),
                Some(txn) => check_txn(&mut st, txn, true, now)
                    .and_then(|_| st.groups.handle_txn_commit(&txn.transactional_id, &r.member, &known)),
            }
        };
        (decided.map(|()| flush_groups(shared, &mut st)), exists)
    };
    let status = match outcome {
        Ok(done) => settled(done).await.err().unwrap_or_else(Status::ok),
        Err(status) => {
            shared.metrics.offset_commit_refused(status.code);
            match &r.txn {
                Some(t)
                    if !matches!(
                        status.code,
                        ErrorCode::IllegalGeneration | ErrorCode::UnknownMemberId | ErrorCode::FencedInstanceId
                    ) =>
                {
                    super::fencing_event(
                        "txn_offset_commit",
                        Some(&t.transactional_id),
                        t.producer_id,
                        t.producer_epoch,
                        -1,
                        None,
                        &status,
                    )
                }
                Some(_) => group_refusal("txn_offset_commit", &r.member, &status),
                None => group_refusal("offset_commit", &r.member, &status),
            }
            status
        }
    };
    let unknown = exists.contains(&false).then(|| unknown_partitions(&r.offsets, &exists));
    let partitions = r
        .offsets
        .into_iter()
        .zip(exists)
        .map(|(o, e)| {
            let s = match (e, &unknown) {
                (false, Some(unknown)) => unknown.clone(),
                _ => status.clone(),
            };
            (o, s)
        })
        .collect();
    OffsetsResponse { status, partitions }
}

/// The refusal of the offsets for partitions that do not exist (`exists` false), naming a few.
fn unknown_partitions(offsets: &[protocol::PartitionOffset], exists: &[bool]) -> Status {
    let missing: Vec<String> = offsets
        .iter()
        .zip(exists)
        .filter(|(_, e)| !**e)
        .take(3)
        .map(|(o, _)| format!("{}-{}", o.topic, o.partition))
        .collect();
    Status::new(
        ErrorCode::UnknownTopicOrPartition,
        format!(
            "no such partition: {}; offsets are kept only for partitions that exist: create the topic first, or \
             commit for its real partitions",
            missing.join(", ")
        ),
    )
}

/// Expire members whose session lapsed and complete rebalances past their deadline. Runs for
/// the life of the process.
pub(super) async fn group_tick_loop(shared: Arc<Shared>) {
    loop {
        tokio::time::sleep(Duration::from_millis(GROUP_TICK_MS)).await;
        let mut st = shared.lock();
        let now = shared.now_ms();
        st.groups.handle_tick(now);
        if st.groups.has_effects() {
            drop(flush_groups(&shared, &mut st));
        }
    }
}
