//! The Kafka listener over real TCP, driven by the producer crate's Kafka client and by raw
//! Kafka frames: every served api at every served version, what malformed requests get, the
//! broker's own fence against a write its client never announced, transaction version 1 rules
//! (transactions in a row at one epoch, EndTxn retries), librdkafka's own epoch bump, acks=0,
//! long polling and the transaction-timeout limit. The unmodified clients (librdkafka and
//! kafka-python) run in tests/kafka_clients.rs.

mod common;

use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use epochfence::{LocalCluster, LocalOptions};
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_for_leader_epoch_request::{OffsetForLeaderPartition, OffsetForLeaderTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use producer::kafka::{KafkaConnection, KafkaConsumer, KafkaError, KafkaProducer};
use producer::{ClientError, ProducerConfig};
use protocol::batch::{build_batch, ProducerStamp};

use common::kafka::{connect, name, tid, wait_ready};

const T: Duration = Duration::from_secs(10);

async fn cluster(fencing: bool) -> LocalCluster {
    let c = LocalCluster::start(LocalOptions { fencing, kafka: true, ..LocalOptions::default() }).await.unwrap();
    c.create_topic("t", 2).await.unwrap();
    wait_ready(&c.kafka_addrs[0], "t", 2, None).await;
    c
}

fn produce_request(acks: i16, topic: &str, partition: i32, records: Bytes) -> ProduceRequest {
    ProduceRequest::default().with_acks(acks).with_timeout_ms(10_000).with_topic_data(vec![TopicProduceData::default()
        .with_name(name(topic))
        .with_partition_data(vec![PartitionProduceData::default().with_index(partition).with_records(Some(records))])])
}

fn batch(pid: i64, epoch: i16, seq: i32, values: &[&'static str]) -> Bytes {
    let values: Vec<Bytes> = values.iter().map(|v| Bytes::from_static(v.as_bytes())).collect();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    build_batch(ProducerStamp { producer_id: pid, producer_epoch: epoch, base_sequence: seq }, false, now, &values)
}

fn partition_code(r: &ProduceResponse) -> i16 {
    r.responses[0].partition_responses[0].error_code
}

/// Every api the listener advertises answers at every version it advertises, with an answer
/// that decodes (a field set that a version cannot carry would close the connection instead).
#[tokio::test]
async fn every_served_api_answers_at_every_served_version() {
    let c = cluster(true).await;
    let conn = connect(&c).await;
    let served = conn.api_versions().to_vec();
    assert!(served.len() >= 10, "{served:?}");
    let mut checked = 0;
    for (key, min, max) in served {
        let key = ApiKey::try_from(key).expect("a known key");
        for v in min..=max {
            let ok = match key {
                ApiKey::ApiVersions => conn.call(&ApiVersionsRequest::default(), v).await.map(|r| r.error_code),
                ApiKey::Metadata => {
                    let topics = vec![MetadataRequestTopic::default().with_name(Some(name("t")))];
                    let r = conn.call(&MetadataRequest::default().with_topics(Some(topics)), v).await.unwrap();
                    assert_eq!(r.topics[0].partitions.len(), 2, "v{v}");
                    assert_eq!(r.brokers.len(), 1);
                    if v >= 10 {
                        // By topic id: looked up from v12, INVALID_REQUEST before (Kafka's).
                        let id = r.topics[0].topic_id;
                        assert!(!id.is_nil(), "v{v}");
                        let nowhere = uuid::Uuid::from_u128(5 << 90);
                        let by_id = |id, n: Option<&str>| {
                            MetadataRequestTopic::default().with_name(n.map(name)).with_topic_id(id)
                        };
                        let named = if v >= 12 { None } else { Some("t") };
                        let asked = MetadataRequest::default()
                            .with_topics(Some(vec![by_id(id, named), by_id(nowhere, named)]))
                            .with_allow_auto_topic_creation(true);
                        let got = conn.call(&asked, v).await.unwrap();
                        let got: Vec<(Option<String>, uuid::Uuid, i16, usize)> = got
                            .topics
                            .iter()
                            .map(|t| {
                                (t.name.as_ref().map(|n| n.to_string()), t.topic_id, t.error_code, t.partitions.len())
                            })
                            .collect();
                        if v >= 12 {
                            assert_eq!(got, [(Some("t".into()), id, 0, 2), (None, nowhere, 100, 0)], "v{v}");
                        } else {
                            assert!(got.iter().all(|t| t.2 == 42), "v{v}: {got:?}");
                        }
                    }
                    Ok(r.topics[0].error_code)
                }
                ApiKey::Produce => {
                    let b = batch(-1, -1, -1, &["x"]);
                    conn.call(&produce_request(1, "t", 0, b), v).await.map(|r| partition_code(&r))
                }
                ApiKey::Fetch => {
                    let req = FetchRequest::default().with_max_bytes(1 << 20).with_topics(vec![FetchTopic::default()
                        .with_topic(name("t"))
                        .with_partitions(vec![FetchPartition::default().with_partition_max_bytes(1 << 20)])]);
                    conn.call(&req, v).await.map(|r| r.responses[0].partitions[0].error_code)
                }
                ApiKey::ListOffsets => {
                    let req = |timestamp| {
                        ListOffsetsRequest::default().with_timeout_ms(1_000).with_topics(vec![
                            ListOffsetsTopic::default()
                                .with_name(name("t"))
                                .with_partitions(vec![ListOffsetsPartition::default().with_timestamp(timestamp)]),
                        ])
                    };
                    // KIP-405's earliest local offset (v8) is the log start; KIP-1005's latest
                    // tiered one (v9) is none: there is no tiered storage.
                    for (timestamp, since, want) in [(-4, 8, 0), (-5, 9, -1)] {
                        if v >= since {
                            let r = conn.call(&req(timestamp), v).await.unwrap();
                            let p = &r.topics[0].partitions[0];
                            assert_eq!((p.error_code, p.offset), (0, want), "v{v} timestamp {timestamp}");
                        }
                    }
                    conn.call(&req(-1), v).await.map(|r| r.topics[0].partitions[0].error_code)
                }
                ApiKey::OffsetForLeaderEpoch => {
                    let req = OffsetForLeaderEpochRequest::default().with_topics(vec![OffsetForLeaderTopic::default()
                        .with_topic(name("t"))
                        .with_partitions(vec![OffsetForLeaderPartition::default().with_leader_epoch(0)])]);
                    conn.call(&req, v).await.map(|r| r.topics[0].partitions[0].error_code)
                }
                ApiKey::FindCoordinator => {
                    let req = FindCoordinatorRequest::default().with_key_type(if v >= 1 { 1 } else { 0 });
                    let req = if v >= 4 {
                        req.with_coordinator_keys(vec![StrBytes::from_static_str("k")])
                    } else {
                        req.with_key(StrBytes::from_static_str("k"))
                    };
                    conn.call(&req, v).await.map(|r| if v >= 4 { r.coordinators[0].error_code } else { r.error_code })
                }
                ApiKey::InitProducerId => {
                    let req = InitProducerIdRequest::default()
                        .with_transactional_id(None)
                        .with_producer_id((-1).into())
                        .with_producer_epoch(-1);
                    conn.call(&req, v).await.map(|r| r.error_code)
                }
                ApiKey::AddPartitionsToTxn => {
                    let req = AddPartitionsToTxnRequest::default()
                        .with_v3_and_below_transactional_id(tid("nobody"))
                        .with_v3_and_below_producer_id(9_999.into())
                        .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                            .with_name(name("t"))
                            .with_partitions(vec![0])]);
                    let r = conn.call(&req, v).await.unwrap();
                    let code = r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code;
                    assert_eq!(code, 59, "v{v}: an unknown producer id is UNKNOWN_PRODUCER_ID");
                    Ok(0)
                }
                ApiKey::EndTxn => {
                    let req =
                        EndTxnRequest::default().with_transactional_id(tid("nobody")).with_producer_id(9_999.into());
                    let r = conn.call(&req, v).await.unwrap();
                    assert_eq!(r.error_code, 49, "v{v}: INVALID_PRODUCER_ID_MAPPING for an unknown transactional id");
                    Ok(0)
                }
                ApiKey::CreateTopics => {
                    let req =
                        CreateTopicsRequest::default().with_topics(vec![creatable(&format!("sweep-{v}"), 1, &[])]);
                    let code = conn.call(&req, v).await.unwrap().topics[0].error_code;
                    assert_eq!(code, 31, "v{v}: the cluster has a secret");
                    Ok(0)
                }
                ApiKey::DeleteTopics => {
                    let req = if v >= 6 {
                        DeleteTopicsRequest::default().with_topics(vec![
                            delete_topics_request::DeleteTopicState::default().with_name(Some(name("t"))),
                        ])
                    } else {
                        DeleteTopicsRequest::default().with_topic_names(vec![name("t")])
                    };
                    assert_eq!(conn.call(&req, v).await.unwrap().responses[0].error_code, 31, "v{v}");
                    Ok(0)
                }
                ApiKey::CreatePartitions => {
                    let req = CreatePartitionsRequest::default().with_topics(vec![
                        create_partitions_request::CreatePartitionsTopic::default()
                            .with_name(name("t"))
                            .with_count(3)
                            .with_assignments(None),
                    ]);
                    assert_eq!(conn.call(&req, v).await.unwrap().results[0].error_code, 31, "v{v}");
                    Ok(0)
                }
                ApiKey::DescribeConfigs => {
                    let req = DescribeConfigsRequest::default().with_resources(vec![
                        describe_configs_request::DescribeConfigsResource::default()
                            .with_resource_type(2)
                            .with_resource_name(StrBytes::from_static_str("t"))
                            .with_configuration_keys(None),
                    ]);
                    conn.call(&req, v).await.map(|r| r.results[0].error_code)
                }
                ApiKey::AlterConfigs => {
                    let req = AlterConfigsRequest::default().with_resources(vec![
                        alter_configs_request::AlterConfigsResource::default()
                            .with_resource_type(2)
                            .with_resource_name(StrBytes::from_static_str("t"))
                            .with_configs(vec![alter_configs_request::AlterableConfig::default()
                                .with_name(StrBytes::from_static_str("retention.ms"))
                                .with_value(Some(StrBytes::from_static_str("1000")))]),
                    ]);
                    let r = conn.call(&req, v).await.unwrap();
                    assert_eq!(r.responses[0].error_code, 31, "v{v}: the cluster has a secret");
                    Ok(0)
                }
                ApiKey::IncrementalAlterConfigs => {
                    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
                        incremental_alter_configs_request::AlterConfigsResource::default()
                            .with_resource_type(4)
                            .with_resource_name(StrBytes::from_static_str("1"))
                            .with_configs(vec![incremental_alter_configs_request::AlterableConfig::default()
                                .with_name(StrBytes::from_static_str("log.retention.ms"))
                                .with_value(Some(StrBytes::from_static_str("1000")))]),
                    ]);
                    let r = conn.call(&req, v).await.unwrap();
                    assert_eq!(r.responses[0].error_code, 42, "v{v}: a broker's configs are its flags");
                    Ok(0)
                }
                ApiKey::DescribeCluster => {
                    let req = DescribeClusterRequest::default();
                    conn.call(&req, v).await.map(|r| r.error_code)
                }
                ApiKey::DescribeProducers => {
                    let req = DescribeProducersRequest::default().with_topics(vec![
                        describe_producers_request::TopicRequest::default()
                            .with_name(name("t"))
                            .with_partition_indexes(vec![0]),
                    ]);
                    conn.call(&req, v).await.map(|r| r.topics[0].partitions[0].error_code)
                }
                ApiKey::DescribeTransactions => {
                    let req = DescribeTransactionsRequest::default().with_transactional_ids(vec![tid("nobody")]);
                    let r = conn.call(&req, v).await.unwrap();
                    assert_eq!(r.transaction_states[0].error_code, 105, "v{v}");
                    Ok(0)
                }
                ApiKey::ListTransactions => {
                    conn.call(&ListTransactionsRequest::default(), v).await.map(|r| r.error_code)
                }
                ApiKey::JoinGroup => {
                    // A session timeout under the coordinator's minimum: refused at every version.
                    let req = JoinGroupRequest::default()
                        .with_group_id(GroupId(StrBytes::from_static_str("sweep")))
                        .with_session_timeout_ms(1)
                        .with_rebalance_timeout_ms(1)
                        .with_protocol_type(StrBytes::from_static_str("consumer"))
                        .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default()
                            .with_name(StrBytes::from_static_str("range"))]);
                    assert_eq!(conn.call(&req, v).await.unwrap().error_code, 26, "v{v}: INVALID_SESSION_TIMEOUT");
                    Ok(0)
                }
                ApiKey::SyncGroup => {
                    let req = SyncGroupRequest::default()
                        .with_group_id(GroupId(StrBytes::from_static_str("nobody")))
                        .with_member_id(StrBytes::from_static_str("m"));
                    assert_eq!(conn.call(&req, v).await.unwrap().error_code, 25, "v{v}: UNKNOWN_MEMBER_ID");
                    Ok(0)
                }
                ApiKey::Heartbeat => {
                    let req = HeartbeatRequest::default()
                        .with_group_id(GroupId(StrBytes::from_static_str("nobody")))
                        .with_member_id(StrBytes::from_static_str("m"));
                    assert_eq!(conn.call(&req, v).await.unwrap().error_code, 25, "v{v}: UNKNOWN_MEMBER_ID");
                    Ok(0)
                }
                ApiKey::LeaveGroup => {
                    let req = LeaveGroupRequest::default().with_group_id(GroupId(StrBytes::from_static_str("nobody")));
                    let req = if v >= 3 {
                        req.with_members(vec![leave_group_request::MemberIdentity::default()
                            .with_member_id(StrBytes::from_static_str("m"))])
                    } else {
                        req.with_member_id(StrBytes::from_static_str("m"))
                    };
                    let r = conn.call(&req, v).await.unwrap();
                    let code = if v >= 3 { r.members[0].error_code } else { r.error_code };
                    assert_eq!(code, 25, "v{v}: UNKNOWN_MEMBER_ID");
                    Ok(0)
                }
                ApiKey::OffsetCommit => {
                    // A standalone commit (generation -1, no member), as assign() consumers make.
                    let req = OffsetCommitRequest::default()
                        .with_group_id(GroupId(StrBytes::from_static_str("sweep")))
                        .with_generation_id_or_member_epoch(-1)
                        .with_topics(vec![offset_commit_request::OffsetCommitRequestTopic::default()
                            .with_name(name("t"))
                            .with_partitions(vec![offset_commit_request::OffsetCommitRequestPartition::default()
                                .with_committed_offset(i64::from(v))])]);
                    conn.call(&req, v).await.map(|r| r.topics[0].partitions[0].error_code)
                }
                ApiKey::OffsetFetch => {
                    let req = OffsetFetchRequest::default()
                        .with_group_id(GroupId(StrBytes::from_static_str("sweep")))
                        .with_topics(Some(vec![offset_fetch_request::OffsetFetchRequestTopic::default()
                            .with_name(name("t"))
                            .with_partition_indexes(vec![0])]));
                    let r = conn.call(&req, v).await.unwrap();
                    let p = &r.topics[0].partitions[0];
                    assert_eq!(p.committed_offset, 9, "v{v}: the last commit of the OffsetCommit sweep");
                    Ok(p.error_code)
                }
                ApiKey::ListGroups => {
                    let r = conn.call(&ListGroupsRequest::default(), v).await.unwrap();
                    assert!(r.groups.iter().any(|g| g.group_id.0.as_str() == "sweep"), "v{v}: {r:?}");
                    if v >= 5 {
                        // "sweep" is a classic group (KIP-848's types filter).
                        let sweep = |g: &list_groups_response::ListedGroup| g.group_id.0.as_str() == "sweep";
                        assert!(r.groups.iter().filter(|g| sweep(g)).all(|g| g.group_type.as_str() == "classic"));
                        let typed = |t: &'static str| {
                            ListGroupsRequest::default().with_types_filter(vec![StrBytes::from_static_str(t)])
                        };
                        assert!(!conn.call(&typed("consumer"), v).await.unwrap().groups.iter().any(sweep));
                        assert!(conn.call(&typed("Classic"), v).await.unwrap().groups.iter().any(sweep));
                    }
                    Ok(r.error_code)
                }
                ApiKey::DescribeGroups => {
                    let req =
                        DescribeGroupsRequest::default().with_groups(vec![GroupId(StrBytes::from_static_str("sweep"))]);
                    let r = conn.call(&req, v).await.unwrap();
                    assert_eq!(r.groups[0].group_state.as_str(), "Empty", "v{v}");
                    Ok(r.groups[0].error_code)
                }
                ApiKey::ElectLeaders => {
                    let req = ElectLeadersRequest::default().with_topic_partitions(Some(vec![
                        elect_leaders_request::TopicPartitions::default()
                            .with_topic(name("t"))
                            .with_partitions(vec![0]),
                    ]));
                    let r = conn.call(&req, v).await.unwrap();
                    let code = r.replica_election_results[0].partition_result[0].error_code;
                    assert_eq!(code, 31, "v{v}: the cluster has a secret");
                    Ok(0)
                }
                ApiKey::AlterPartitionReassignments => {
                    let req = AlterPartitionReassignmentsRequest::default().with_topics(vec![
                        alter_partition_reassignments_request::ReassignableTopic::default()
                            .with_name(name("t"))
                            .with_partitions(vec![
                                alter_partition_reassignments_request::ReassignablePartition::default()
                                    .with_partition_index(0)
                                    .with_replicas(Some(vec![BrokerId(1)])),
                            ]),
                    ]);
                    let r = conn.call(&req, v).await.unwrap();
                    let code = r.responses[0].partitions[0].error_code;
                    assert_eq!(code, 31, "v{v}: the cluster has a secret");
                    Ok(r.error_code)
                }
                ApiKey::ListPartitionReassignments => {
                    let r =
                        conn.call(&ListPartitionReassignmentsRequest::default().with_topics(None), v).await.unwrap();
                    assert!(r.topics.is_empty(), "v{v}: nothing is being moved: {r:?}");
                    Ok(r.error_code)
                }
                ApiKey::DescribeTopicPartitions => {
                    // Two partitions, one a page: the cursor names the second, which the next
                    // page starts at; a topic that does not exist is named with its error.
                    let page = |cursor: Option<describe_topic_partitions_request::Cursor>| {
                        DescribeTopicPartitionsRequest::default()
                            .with_topics(vec![
                                describe_topic_partitions_request::TopicRequest::default().with_name(name("t")),
                                describe_topic_partitions_request::TopicRequest::default().with_name(name("zz")),
                            ])
                            .with_response_partition_limit(1)
                            .with_cursor(cursor)
                    };
                    let first = conn.call(&page(None), v).await.unwrap();
                    assert_eq!(first.topics.len(), 1, "{first:?}");
                    assert_eq!(first.topics[0].partitions[0].partition_index, 0);
                    assert!(!first.topics[0].topic_id.is_nil());
                    let cursor = first.next_cursor.clone().expect("more to come");
                    assert_eq!((cursor.topic_name.as_str(), cursor.partition_index), ("t", 1));
                    let cursor = describe_topic_partitions_request::Cursor::default()
                        .with_topic_name(cursor.topic_name)
                        .with_partition_index(cursor.partition_index);
                    let second = conn.call(&page(Some(cursor)), v).await.unwrap();
                    assert_eq!(second.topics[0].partitions[0].partition_index, 1, "{second:?}");
                    assert_eq!(second.topics[1].error_code, 3, "zz: UNKNOWN_TOPIC_OR_PARTITION");
                    assert!(second.next_cursor.is_none());
                    Ok(second.topics[0].error_code)
                }
                ApiKey::DeleteGroups => {
                    let req = DeleteGroupsRequest::default()
                        .with_groups_names(vec![GroupId(StrBytes::from_static_str("none"))]);
                    let r = conn.call(&req, v).await.unwrap();
                    assert_eq!(r.results[0].error_code, 31, "v{v}: the cluster has a secret");
                    Ok(0)
                }
                ApiKey::DescribeLogDirs => {
                    let all = conn.call(&DescribeLogDirsRequest::default().with_topics(None), v).await.unwrap();
                    let dir = &all.results[0];
                    assert_eq!((all.error_code, dir.error_code), (0, 0), "v{v}");
                    assert!(std::path::Path::new(dir.log_dir.as_str()).is_absolute(), "{dir:?}");
                    let parts: Vec<i32> = dir.topics[0].partitions.iter().map(|p| p.partition_index).collect();
                    assert_eq!((dir.topics[0].name.as_str(), parts), ("t", vec![0, 1]), "v{v}");
                    if v >= 4 {
                        assert!(dir.total_bytes > 0 && dir.usable_bytes >= 0, "{dir:?}");
                    }
                    let one = DescribeLogDirsRequest::default().with_topics(Some(vec![
                        describe_log_dirs_request::DescribableLogDirTopic::default()
                            .with_topic(name("t"))
                            .with_partitions(vec![1, 7]),
                    ]));
                    let r = conn.call(&one, v).await.unwrap();
                    let parts: Vec<i32> = r.results[0].topics[0].partitions.iter().map(|p| p.partition_index).collect();
                    assert_eq!(parts, vec![1], "v{v}: a partition not hosted is left out");
                    Ok(r.error_code)
                }
                ApiKey::AlterReplicaLogDirs => {
                    let dir =
                        conn.call(&DescribeLogDirsRequest::default(), 1).await.unwrap().results[0].log_dir.clone();
                    let req = |path: StrBytes| {
                        AlterReplicaLogDirsRequest::default().with_dirs(vec![
                            alter_replica_log_dirs_request::AlterReplicaLogDir::default().with_path(path).with_topics(
                                vec![alter_replica_log_dirs_request::AlterReplicaLogDirTopic::default()
                                    .with_name(name("t"))
                                    .with_partitions(vec![0, 9])],
                            ),
                        ])
                    };
                    let codes = |r: AlterReplicaLogDirsResponse| -> Vec<i16> {
                        r.results[0].partitions.iter().map(|p| p.error_code).collect()
                    };
                    assert_eq!(codes(conn.call(&req(dir), v).await.unwrap()), vec![0, 9], "v{v}: already there");
                    let elsewhere = StrBytes::from_static_str("/elsewhere");
                    assert_eq!(codes(conn.call(&req(elsewhere), v).await.unwrap()), vec![57, 9], "v{v}: one directory");
                    Ok(0)
                }
                ApiKey::DeleteRecords => {
                    let req = DeleteRecordsRequest::default().with_timeout_ms(1_000).with_topics(vec![
                        delete_records_request::DeleteRecordsTopic::default().with_name(name("t")).with_partitions(
                            vec![delete_records_request::DeleteRecordsPartition::default().with_offset(0)],
                        ),
                    ]);
                    let r = conn.call(&req, v).await.unwrap();
                    let p = &r.topics[0].partitions[0];
                    assert_eq!((p.error_code, p.low_watermark), (29, -1), "v{v}: the cluster has a secret");
                    Ok(0)
                }
                ApiKey::ConsumerGroupHeartbeat => {
                    // A KIP-848 member joins group "sweep848" (v0: the coordinator names it; v1:
                    // the client does), gets both partitions of "t", and leaves.
                    let member = if v == 0 { String::new() } else { format!("member-v{v}") };
                    let join = ConsumerGroupHeartbeatRequest::default()
                        .with_group_id(GroupId(StrBytes::from_static_str("sweep848")))
                        .with_member_id(StrBytes::from_string(member))
                        .with_member_epoch(0)
                        .with_rebalance_timeout_ms(30_000)
                        .with_subscribed_topic_names(Some(vec![name("t")]))
                        .with_topic_partitions(Some(Vec::new()));
                    let r = conn.call(&join, v).await.unwrap();
                    assert_eq!(r.error_code, 0, "v{v}: {r:?}");
                    let id = r.member_id.clone().expect("a member id");
                    assert!(!id.is_empty() && r.member_epoch >= 1 && r.heartbeat_interval_ms > 0, "v{v}: {r:?}");
                    let parts: usize =
                        r.assignment.iter().flat_map(|a| &a.topic_partitions).map(|t| t.partitions.len()).sum();
                    assert_eq!(parts, 2, "v{v}: the only member gets both partitions: {r:?}");
                    // A zombie's epoch from the future, and an empty member id, are refused.
                    let ahead = join.clone().with_member_id(id.clone()).with_member_epoch(r.member_epoch + 5);
                    assert_eq!(conn.call(&ahead, v).await.unwrap().error_code, 110, "v{v}: FENCED_MEMBER_EPOCH");
                    if v >= 1 {
                        let anonymous = join.clone().with_member_id(StrBytes::from_static_str(""));
                        assert_eq!(conn.call(&anonymous, v).await.unwrap().error_code, 42, "v{v}: INVALID_REQUEST");
                    }
                    let leave = ConsumerGroupHeartbeatRequest::default()
                        .with_group_id(GroupId(StrBytes::from_static_str("sweep848")))
                        .with_member_id(id)
                        .with_member_epoch(-1);
                    let left = conn.call(&leave, v).await.unwrap();
                    assert_eq!((left.error_code, left.member_epoch), (0, -1), "v{v}: {left:?}");
                    Ok(0)
                }
                ApiKey::ConsumerGroupDescribe => {
                    // A member of "sweep848" (joined here), and the classic group "sweep" (not a
                    // consumer group: GROUP_ID_NOT_FOUND).
                    let join = ConsumerGroupHeartbeatRequest::default()
                        .with_group_id(GroupId(StrBytes::from_static_str("sweep848")))
                        .with_member_id(StrBytes::from_string(format!("describe-v{v}")))
                        .with_rebalance_timeout_ms(30_000)
                        .with_subscribed_topic_names(Some(vec![name("t")]))
                        .with_topic_partitions(Some(Vec::new()));
                    let joined = conn.call(&join, 1).await.unwrap();
                    assert_eq!(joined.error_code, 0, "{joined:?}");
                    let req = ConsumerGroupDescribeRequest::default().with_group_ids(vec![
                        GroupId(StrBytes::from_static_str("sweep848")),
                        GroupId(StrBytes::from_static_str("sweep")),
                    ]);
                    let r = conn.call(&req, v).await.unwrap();
                    let (g, classic) = (&r.groups[0], &r.groups[1]);
                    assert_eq!(g.error_code, 0, "v{v}: {g:?}");
                    assert_eq!(g.assignment_epoch, g.group_epoch, "v{v}: assigned");
                    let m =
                        g.members.iter().find(|m| m.member_id.as_str() == format!("describe-v{v}")).expect("member");
                    assert_eq!(m.member_epoch, joined.member_epoch, "v{v}");
                    assert_eq!(m.assignment.topic_partitions[0].topic_name.0.as_str(), "t", "v{v}: {m:?}");
                    assert_eq!(classic.error_code, 69, "v{v}: {classic:?}");
                    let leave =
                        join.with_member_epoch(-1).with_subscribed_topic_names(None).with_topic_partitions(None);
                    assert_eq!(conn.call(&leave, 1).await.unwrap().error_code, 0);
                    Ok(g.error_code)
                }
                ApiKey::OffsetDelete => {
                    let req = OffsetDeleteRequest::default()
                        .with_group_id(GroupId(StrBytes::from_static_str("sweep")))
                        .with_topics(vec![offset_delete_request::OffsetDeleteRequestTopic::default()
                            .with_name(name("t"))
                            .with_partitions(vec![offset_delete_request::OffsetDeleteRequestPartition::default()])]);
                    assert_eq!(conn.call(&req, v).await.unwrap().error_code, 31, "v{v}: the cluster has a secret");
                    Ok(0)
                }
                ApiKey::AddOffsetsToTxn => {
                    let req = AddOffsetsToTxnRequest::default()
                        .with_transactional_id(tid("nobody"))
                        .with_producer_id(9_999.into())
                        .with_group_id(GroupId(StrBytes::from_static_str("sweep")));
                    assert_eq!(conn.call(&req, v).await.unwrap().error_code, 49, "v{v}");
                    Ok(0)
                }
                ApiKey::TxnOffsetCommit => {
                    let req = TxnOffsetCommitRequest::default()
                        .with_transactional_id(tid("nobody"))
                        .with_producer_id(9_999.into())
                        .with_group_id(GroupId(StrBytes::from_static_str("sweep")))
                        .with_topics(vec![txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                            .with_name(name("t"))
                            .with_partitions(vec![
                                txn_offset_commit_request::TxnOffsetCommitRequestPartition::default(),
                            ])]);
                    assert_eq!(conn.call(&req, v).await.unwrap().topics[0].partitions[0].error_code, 49, "v{v}");
                    Ok(0)
                }
                // This listener is PLAINTEXT: both are answered ILLEGAL_SASL_STATE, as Kafka does.
                ApiKey::SaslHandshake => {
                    let req = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN"));
                    assert_eq!(conn.call(&req, v).await.unwrap().error_code, 34, "v{v}");
                    Ok(0)
                }
                ApiKey::SaslAuthenticate => {
                    let req = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from_static(b"\0a\0b"));
                    assert_eq!(conn.call(&req, v).await.unwrap().error_code, 34, "v{v}");
                    Ok(0)
                }
                // No authorizer on this cluster: SECURITY_DISABLED, as Kafka answers without one.
                ApiKey::CreateAcls => {
                    let req =
                        CreateAclsRequest::default().with_creations(vec![create_acls_request::AclCreation::default()
                            .with_resource_type(2)
                            .with_resource_name(StrBytes::from_static_str("t"))
                            .with_resource_pattern_type(3)
                            .with_principal(StrBytes::from_static_str("User:a"))
                            .with_host(StrBytes::from_static_str("*"))
                            .with_operation(4)
                            .with_permission_type(3)]);
                    assert_eq!(conn.call(&req, v).await.unwrap().results[0].error_code, 54, "v{v}");
                    Ok(0)
                }
                ApiKey::DescribeAcls => {
                    let req = DescribeAclsRequest::default()
                        .with_resource_type_filter(1)
                        .with_pattern_type_filter(1)
                        .with_operation(1)
                        .with_permission_type(1);
                    assert_eq!(conn.call(&req, v).await.unwrap().error_code, 54, "v{v}");
                    Ok(0)
                }
                ApiKey::DeleteAcls => {
                    let req = DeleteAclsRequest::default().with_filters(vec![
                        delete_acls_request::DeleteAclsFilter::default()
                            .with_resource_type_filter(1)
                            .with_pattern_type_filter(1)
                            .with_operation(1)
                            .with_permission_type(1),
                    ]);
                    assert_eq!(conn.call(&req, v).await.unwrap().filter_results[0].error_code, 54, "v{v}");
                    Ok(0)
                }
                ApiKey::DescribeUserScramCredentials => {
                    let r = conn.call(&DescribeUserScramCredentialsRequest::default(), v).await.unwrap();
                    assert!(r.results.is_empty(), "v{v}: no users on this cluster: {r:?}");
                    Ok(r.error_code)
                }
                ApiKey::AlterUserScramCredentials => {
                    let req = AlterUserScramCredentialsRequest::default().with_deletions(vec![
                        alter_user_scram_credentials_request::ScramCredentialDeletion::default()
                            .with_name(StrBytes::from_static_str("nobody"))
                            .with_mechanism(2),
                    ]);
                    // A secured cluster without the authorizer: cluster-internal, as CreateTopics.
                    let r = conn.call(&req, v).await.unwrap();
                    assert_eq!(r.results[0].error_code, 31, "v{v}: CLUSTER_AUTHORIZATION_FAILED");
                    Ok(0)
                }
                other => panic!("{other:?} is advertised but this test does not know it"),
            };
            assert_eq!(ok.unwrap_or_else(|e| panic!("{key:?} v{v}: {e}")), 0, "{key:?} v{v}");
            checked += 1;
        }
    }
    assert!(checked > 80, "{checked} api versions");
    c.shutdown().await;
}

/// SASL on the Kafka listener: before a login only ApiVersions and SaslHandshake are served
/// (anything else closes the connection, so no handler sees it), an unoffered mechanism is
/// answered UNSUPPORTED_SASL_MECHANISM with the offered ones and the connection is done, a
/// wrong password or an unknown user gets SASL_AUTHENTICATION_FAILED with one message after the
/// failed-login delay, and each mechanism's login serves requests as that user; after it, a
/// second handshake is ILLEGAL_SASL_STATE. The project's own Kafka client logs in the same way
/// and runs a transaction.
#[tokio::test]
async fn sasl_logins_gate_every_request_of_the_kafka_listener() {
    use producer::SaslLogin;
    use protocol::sasl::{Mechanism, ScramMechanism};
    let users = vec![("alice".to_string(), "alice-pw".to_string()), ("b,o=b".to_string(), "bob-pw".to_string())];
    let c =
        LocalCluster::start(LocalOptions { kafka: true, sasl_users: users, ..LocalOptions::default() }).await.unwrap();
    c.create_topic("t", 1).await.unwrap();
    let addr = c.kafka_addrs[0].clone();
    let login = |m: Mechanism, user: &str, password: &str| SaslLogin {
        mechanism: m,
        user: user.to_string(),
        password: password.to_string(),
    };
    let metadata = MetadataRequest::default().with_topics(None);

    // ApiVersions is served before a login; Metadata closes the connection.
    let conn = KafkaConnection::connect(&addr, None, T).await.unwrap();
    assert!(conn
        .api_versions()
        .iter()
        .any(|(k, min, max)| *k == ApiKey::SaslHandshake as i16 && (*min, *max) == (0, 1)));
    let err = conn.call(&metadata, 12).await.unwrap_err();
    assert!(matches!(err, KafkaError::Closed { .. }), "{err}");

    // An unoffered mechanism: 33 with the offered ones, then the connection is done.
    let conn = KafkaConnection::connect(&addr, None, T).await.unwrap();
    let r = conn
        .call(&SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("GSSAPI")), 1)
        .await
        .unwrap();
    assert_eq!(r.error_code, 33);
    let offered: Vec<&str> = r.mechanisms.iter().map(|m| m.as_str()).collect();
    assert_eq!(offered, ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"]);
    assert!(conn.call(&metadata, 12).await.is_err(), "the connection is done after a refused handshake");

    // Wrong passwords and unknown users, with every mechanism: 58 after the delay (100 ms), and
    // the connection is done.
    for m in Mechanism::ALL {
        for (user, password) in [("alice", "guess"), ("mallory", "alice-pw")] {
            let conn = KafkaConnection::connect(&addr, None, T).await.unwrap();
            let started = Instant::now();
            let err = conn.authenticate(&login(m, user, password), T).await.unwrap_err();
            assert!(
                matches!(&err, KafkaError::Refused { code: 58, message, .. } if message == protocol::sasl::FAILED),
                "{m} {user}: {err}"
            );
            assert!(started.elapsed() >= Duration::from_millis(100), "{m}: answered before the failed-login delay");
            assert!(conn.call(&metadata, 12).await.is_err(), "{m}: the connection is done after a failed login");
        }
    }

    // Each mechanism logs in, and requests are served; a second handshake is refused.
    for m in Mechanism::ALL {
        for (user, password) in [("alice", "alice-pw"), ("b,o=b", "bob-pw")] {
            let conn = KafkaConnection::connect(&addr, None, T).await.unwrap();
            conn.authenticate(&login(m, user, password), T).await.unwrap_or_else(|e| panic!("{m} {user}: {e}"));
            let r = conn.call(&metadata, 12).await.unwrap();
            assert!(r.topics.iter().any(|t| t.name.as_ref().is_some_and(|n| n.as_str() == "t")), "{m}");
            let again = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(m.name()));
            assert_eq!(conn.call(&again, 1).await.unwrap().error_code, 34, "{m}: re-authentication is not served");
        }
    }

    // The broker's configs say so: the mechanisms offered, and re-authentication off (0).
    let conn = KafkaConnection::connect(&addr, None, T).await.unwrap();
    conn.authenticate(&login(Mechanism::Scram(ScramMechanism::Sha256), "alice", "alice-pw"), T).await.unwrap();
    let describe = DescribeConfigsRequest::default().with_resources(vec![
        describe_configs_request::DescribeConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(StrBytes::from_static_str("1"))
            .with_configuration_keys(None),
    ]);
    let r = conn.call(&describe, 4).await.unwrap();
    let config = |key: &str| {
        r.results[0]
            .configs
            .iter()
            .find(|c| c.name.as_str() == key)
            .and_then(|c| c.value.as_ref())
            .map(|v| v.to_string())
    };
    assert_eq!(config("sasl.enabled.mechanisms").as_deref(), Some("SCRAM-SHA-256,SCRAM-SHA-512,PLAIN"));
    assert_eq!(config("connections.max.reauth.ms").as_deref(), Some("0"));

    // The project's Kafka client logs in on every connection it opens.
    let mut config = ProducerConfig::transactional("sasl-txn");
    config.client.sasl = Some(login(Mechanism::Scram(ScramMechanism::Sha512), "alice", "alice-pw"));
    let mut p = KafkaProducer::init(&c.kafka_bootstrap(), config).await.unwrap();
    p.begin().unwrap();
    p.send("t", 0, Bytes::from_static(b"in")).await.unwrap();
    p.commit().await.unwrap();
    // A refused login ends the init at once (it would be refused again).
    let mut config = ProducerConfig::transactional("sasl-txn-2");
    config.client.sasl = Some(login(Mechanism::Plain, "alice", "wrong"));
    let Err(err) = KafkaProducer::init(&c.kafka_bootstrap(), config).await else {
        panic!("a producer with a wrong password was initialised");
    };
    assert!(err.to_string().contains("SASL_AUTHENTICATION_FAILED"), "{err}");
    c.shutdown().await;
}

/// KIP-368 with `connections_max_reauth_ms`: a login's last answer carries the session
/// lifetime (DescribeConfigs shows it); a connection logs in again in place as the same user,
/// and as another user fails and is done; past the lifetime without a new login the next
/// request closes the connection; each outcome is counted in
/// `epochfence_broker_kafka_logins_total`. The project's own Kafka client's transaction spanning
/// several lifetimes commits.
#[tokio::test]
async fn kafka_logins_last_connections_max_reauth_ms() {
    use producer::SaslLogin;
    use protocol::sasl::{Mechanism, ScramMechanism};
    // Long enough for two SCRAM logins and a call in a debug build on a busy machine.
    const LIFETIME_MS: u64 = 2_000;
    let users = vec![("alice".to_string(), "alice-pw".to_string()), ("bob".to_string(), "bob-pw".to_string())];
    let c = LocalCluster::start(LocalOptions {
        kafka: true,
        sasl_users: users,
        connections_max_reauth_ms: LIFETIME_MS,
        ..LocalOptions::default()
    })
    .await
    .unwrap();
    c.create_topic("t", 1).await.unwrap();
    let addr = c.kafka_addrs[0].clone();
    let login =
        |m: Mechanism, user: &str| SaslLogin { mechanism: m, user: user.to_string(), password: format!("{user}-pw") };
    let scram = Mechanism::Scram(ScramMechanism::Sha512);
    let metadata = MetadataRequest::default().with_topics(None);

    let conn = KafkaConnection::connect(&addr, None, T).await.unwrap();
    conn.authenticate(&login(scram, "alice"), T).await.unwrap();
    let describe = DescribeConfigsRequest::default().with_resources(vec![
        describe_configs_request::DescribeConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(StrBytes::from_static_str("1"))
            .with_configuration_keys(Some(vec![StrBytes::from_static_str("connections.max.reauth.ms")])),
    ]);
    let r = conn.call(&describe, 4).await.unwrap();
    assert_eq!(r.results[0].configs[0].value.as_deref(), Some("2000"));
    // Logging in again in place, as the same user: served, and the connection goes on.
    conn.authenticate(&login(scram, "alice"), T).await.unwrap();
    conn.call(&metadata, 12).await.unwrap();
    // Another mechanism, or another user: refused, and the connection is done.
    let err = conn.authenticate(&login(Mechanism::Plain, "alice"), T).await.unwrap_err();
    assert!(err.to_string().contains("SASL_AUTHENTICATION_FAILED"), "{err}");
    assert!(conn.call(&metadata, 12).await.is_err());
    let conn = KafkaConnection::connect(&addr, None, T).await.unwrap();
    conn.authenticate(&login(scram, "alice"), T).await.unwrap();
    let err = conn.authenticate(&login(scram, "bob"), T).await.unwrap_err();
    assert!(err.to_string().contains("SASL_AUTHENTICATION_FAILED"), "{err}");
    assert!(conn.call(&metadata, 12).await.is_err(), "a re-authentication as another user ends the connection");

    // Past the session's end, the next request closes the connection. (What is tested is the
    // clock: the sleep can only be longer on a busy machine, never too short.)
    let conn = KafkaConnection::connect(&addr, None, T).await.unwrap();
    conn.authenticate(&login(scram, "alice"), T).await.unwrap();
    tokio::time::sleep(Duration::from_millis(LIFETIME_MS + 50)).await;
    let err = conn.call(&metadata, 12).await.unwrap_err();
    assert!(matches!(err, KafkaError::Closed { .. }), "{err}");
    let metrics = &c.switches[0].stats.metrics;
    use broker::metrics::LoginOutcome;
    assert_eq!(metrics.login_count(LoginOutcome::Reauthenticated), 1);
    assert_eq!(metrics.login_count(LoginOutcome::Failed), 2);
    assert_eq!(metrics.login_count(LoginOutcome::SessionEnded), 1);
    assert!(metrics.encode().contains("epochfence_broker_kafka_logins_total{outcome=\"session_ended\"} 1"));

    // The project's transactional producer across a session's end (it moves to a new
    // connection at 85% of a session, and retries a call whose connection closed).
    let mut config = ProducerConfig::transactional("reauth-txn");
    config.client.sasl = Some(login(Mechanism::Plain, "alice"));
    let mut p = KafkaProducer::init(&c.kafka_bootstrap(), config).await.unwrap();
    p.begin().unwrap();
    for _ in 0..3 {
        p.send("t", 0, Bytes::from_static(b"across")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(LIFETIME_MS / 2)).await;
    }
    p.commit().await.unwrap();

    // A Produce sent behind a re-authentication's handshake, in the same write: the handshake
    // opens the re-authentication, so the Produce is out of turn and closes the connection;
    // it is not taken as the login before it allowed (as a run of produce requests would be).
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let frame = |key: ApiKey, version: i16, id: i32, body: &dyn Fn(&mut BytesMut)| {
            let mut b = BytesMut::new();
            RequestHeader::default()
                .with_request_api_key(key as i16)
                .with_request_api_version(version)
                .with_correlation_id(id)
                .with_client_id(None)
                .encode(&mut b, key.request_header_version(version))
                .unwrap();
            body(&mut b);
            let mut f = BytesMut::new();
            f.put_u32(b.len() as u32);
            f.extend_from_slice(&b);
            f
        };
        let handshake = |id| {
            frame(ApiKey::SaslHandshake, 1, id, &|b| {
                SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")).encode(b, 1).unwrap()
            })
        };
        let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
        s.write_all(&handshake(1)).await.unwrap();
        let auth = frame(ApiKey::SaslAuthenticate, 2, 2, &|b| {
            SaslAuthenticateRequest::default()
                .with_auth_bytes(Bytes::from_static(b"\0alice\0alice-pw"))
                .encode(b, 2)
                .unwrap()
        });
        s.write_all(&auth).await.unwrap();
        read_frame(&mut s).await.unwrap();
        let mut r = read_frame(&mut s).await.unwrap();
        let _ = ResponseHeader::decode(&mut r, ApiKey::SaslAuthenticate.response_header_version(2)).unwrap();
        let logged_in = SaslAuthenticateResponse::decode(&mut r, 2).unwrap();
        assert_eq!(logged_in.error_code, 0, "{logged_in:?}");
        assert!(logged_in.session_lifetime_ms > 0);
        let mut both = handshake(3);
        both.extend_from_slice(&frame(ApiKey::Produce, 9, 4, &|b| {
            produce_request(1, "t", 0, batch(-1, -1, -1, &["behind a handshake"])).encode(b, 9).unwrap()
        }));
        s.write_all(&both).await.unwrap();
        read_frame(&mut s).await.expect("the handshake is answered");
        let mut rest = Vec::new();
        let n = tokio::time::timeout(T, s.read_to_end(&mut rest))
            .await
            .expect("the Produce closes the connection (a served Produce leaves it open)");
        assert!(n.is_err() || rest.is_empty(), "the Produce is not answered: {rest:?}");
        let mut client = c.client_config();
        client.sasl = Some(login(Mechanism::Plain, "alice"));
        let mut consumer = KafkaConsumer::new(&c.kafka_bootstrap(), client);
        let values: Vec<_> = consumer.read_to_end("t", 0, 0).await.unwrap().into_iter().map(|r| r.value).collect();
        assert!(!values.contains(&Bytes::from_static(b"behind a handshake")), "{values:?}");
    }
    c.shutdown().await;
}

/// The next frame `s` reads, its length prefix aside.
async fn read_frame(s: &mut tokio::net::TcpStream) -> std::io::Result<Bytes> {
    use tokio::io::AsyncReadExt;
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await?;
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).await?;
    Ok(Bytes::from(body))
}

/// Raw frames as a broken or hostile client would send them: Kafka closes the connection over
/// an unknown key, an unsupported version, a body that does not decode and an oversized frame,
/// answers ApiVersions of an unknown version with a version 0 body, and refuses a batch whose
/// counts lie with INVALID_RECORD. The broker serves a new connection afterwards.
#[tokio::test]
async fn malformed_kafka_requests_get_kafkas_answers_and_never_a_crash() {
    let c = cluster(true).await;
    let header = |key: i16, version: i16, id: i32, flexible: bool| {
        let mut b = BytesMut::new();
        b.put_i16(key);
        b.put_i16(version);
        b.put_i32(id);
        b.put_i16(-1); // client id: null
        if flexible {
            b.put_u8(0); // no tagged fields
        }
        b
    };
    let closed = |r: Result<Bytes, KafkaError>, what: &str| {
        assert!(matches!(r, Err(KafkaError::Closed { .. })), "{what}: {r:?}");
    };
    // An unknown api key.
    closed(connect(&c).await.call_raw(header(999, 0, 1, false).freeze(), 1).await, "unknown key");
    // A version outside the served range.
    closed(connect(&c).await.call_raw(header(3, 99, 2, true).freeze(), 2).await, "Metadata v99");
    // A body cut short (Metadata v9 wants a topics array).
    let mut cut = header(3, 9, 3, true);
    cut.put_u8(5);
    closed(connect(&c).await.call_raw(cut.freeze(), 3).await, "a truncated body");
    // A forged array count (what made kafka-protocol 0.18.0 abort the process).
    let mut forged = header(19, 2, 4, false);
    forged.put_i32(i32::MAX);
    forged.put_slice(&[0; 16]);
    closed(connect(&c).await.call_raw(forged.freeze(), 4).await, "a forged array count");
    // ApiVersions at a version the broker does not know: a version 0 body, UNSUPPORTED_VERSION.
    let answer = connect(&c).await.call_raw(header(18, 99, 5, true).freeze(), 5).await.unwrap();
    let mut body = answer.slice(4..);
    let r = ApiVersionsResponse::decode(&mut body, 0).unwrap();
    assert_eq!(r.error_code, 35);
    assert!(r.api_keys.iter().any(|k| k.api_key == 18 && k.max_version >= 3), "{:?}", r.api_keys);
    // A frame over frame_bytes_max: closed from its length prefix.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(&c.kafka_addrs[0]).await.unwrap();
        s.write_all(&(u32::MAX).to_be_bytes()).await.unwrap();
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(T, s.read(&mut buf)).await.expect("closed, not left hanging");
        assert_eq!(n.unwrap_or(0), 0, "no answer, only the close");
    }
    // A batch whose record count lies: INVALID_RECORD (Produce v8+), CORRUPT_MESSAGE before.
    let conn = connect(&c).await;
    let mut lying = batch(-1, -1, -1, &["one", "two"]).to_vec();
    lying[57..61].copy_from_slice(&1i32.to_be_bytes());
    lying[23..27].copy_from_slice(&0i32.to_be_bytes());
    let crc = protocol::batch::crc32c(&lying[21..]);
    lying[17..21].copy_from_slice(&crc.to_be_bytes());
    let lying = Bytes::from(lying);
    let r = conn.call(&produce_request(-1, "t", 0, lying.clone()), 9).await.unwrap();
    assert_eq!(partition_code(&r), 87);
    let msg = r.responses[0].partition_responses[0].error_message.clone().unwrap_or_default();
    assert!(msg.contains("record"), "the message says what is wrong: {msg}");
    let r = conn.call(&produce_request(-1, "t", 0, lying), 7).await.unwrap();
    assert_eq!(partition_code(&r), 2, "v7 knows no INVALID_RECORD");
    // The broker is fine: a new connection is served.
    let conn = connect(&c).await;
    assert_eq!(conn.call(&ApiVersionsRequest::default(), 3).await.unwrap().error_code, 0);
    c.shutdown().await;
}

/// The untouched-partition fence, by the broker alone: zombie A skips AddPartitionsToTxn and
/// writes to a partition neither instance touched; the broker's verification asks the
/// coordinator, which refuses A's epoch. Without fencing the write lands (the negative case).
#[tokio::test]
async fn a_zombie_write_to_an_untouched_partition_is_refused_by_the_broker_itself() {
    for fencing in [true, false] {
        let c = cluster(fencing).await;
        let config = || ProducerConfig::transactional("untouched");
        let mut a = KafkaProducer::init(&c.kafka_bootstrap(), config()).await.unwrap();
        a.begin().unwrap();
        a.send("t", 0, Bytes::from_static(b"A on 0")).await.unwrap();
        let b = KafkaProducer::init(&c.kafka_bootstrap(), config()).await.unwrap();
        assert!(b.epoch() > a.epoch());
        a.set_register_partitions(false);
        let late = a.send("t", 1, Bytes::from_static(b"A on 1")).await;
        let mut consumer = KafkaConsumer::new(&c.kafka_bootstrap(), c.client_config());
        let on_1: Vec<_> = consumer.read_to_end("t", 1, 0).await.unwrap().into_iter().map(|r| r.value).collect();
        if fencing {
            match late {
                Err(ClientError::Fenced { detail, .. }) => {
                    assert!(detail.contains("error 47"), "INVALID_PRODUCER_EPOCH on Produce: {detail}")
                }
                other => panic!("the zombie's write must be refused as fenced: {other:?}"),
            }
            assert!(on_1.is_empty(), "nothing of A's on the untouched partition: {on_1:?}");
        } else {
            late.expect("without fencing the zombie's write lands");
            assert_eq!(on_1, [Bytes::from_static(b"A on 1")]);
        }
        c.shutdown().await;
    }
}

/// Transaction version 1: a Kafka client's transactions end without a bump, one after
/// another at the same epoch, sequences going on; read_committed shows exactly the committed
/// records, read_uncommitted all of them.
#[tokio::test]
async fn transactions_in_a_row_at_one_epoch_show_exactly_the_committed_records() {
    let c = cluster(true).await;
    let mut p = KafkaProducer::init(&c.kafka_bootstrap(), ProducerConfig::transactional("row")).await.unwrap();
    // Transaction version 1, as librdkafka and kafka-python speak it (version 2: tests/kafka_tv2.rs).
    p.set_transaction_version_max(1);
    let epoch = p.epoch();
    let (mut committed, mut all) = (Vec::new(), Vec::new());
    for txn in 0..6 {
        p.begin().unwrap();
        for i in 0..4 {
            let v = format!("{txn}-{i}");
            p.send("t", i % 2, Bytes::from(v.clone())).await.unwrap();
            all.push(v.clone());
            if txn % 3 != 1 {
                committed.push(v);
            }
        }
        if txn % 3 == 1 {
            p.abort().await.unwrap();
        } else {
            p.commit().await.unwrap();
        }
        assert_eq!(p.epoch(), epoch, "no bump between transactions");
    }
    let read = |committed: bool| {
        let bootstrap = c.kafka_bootstrap();
        let config = c.client_config();
        async move {
            let mut consumer = if committed {
                KafkaConsumer::read_committed(&bootstrap, config)
            } else {
                KafkaConsumer::new(&bootstrap, config)
            };
            let mut out = Vec::new();
            for partition in 0..2 {
                let records = consumer.read_to_end("t", partition, 0).await.unwrap();
                out.extend(records.into_iter().map(|r| String::from_utf8(r.value.to_vec()).unwrap()));
            }
            out.sort();
            out
        }
    };
    committed.sort();
    all.sort();
    assert_eq!(read(true).await, committed);
    assert_eq!(read(false).await, all);
    c.shutdown().await;
}

/// Kafka's EndTxn rules at one epoch: the same end again is a lost answer retried (success),
/// the other end with no transaction open is INVALID_TXN_STATE; and a transaction timeout
/// above the maximum is refused at init.
#[tokio::test]
async fn end_txn_retries_and_the_transaction_timeout_limit_follow_kafka() {
    let c = cluster(true).await;
    let p = KafkaProducer::init(&c.kafka_bootstrap(), ProducerConfig::transactional("again")).await;
    let mut p = p.unwrap();
    p.begin().unwrap();
    p.send("t", 0, Bytes::from_static(b"x")).await.unwrap();
    p.commit().await.unwrap();
    let conn = connect(&c).await;
    let end = |commit: bool| {
        EndTxnRequest::default()
            .with_transactional_id(tid("again"))
            .with_producer_id(p.producer_id().into())
            .with_producer_epoch(p.epoch())
            .with_committed(commit)
    };
    assert_eq!(conn.call(&end(true), 3).await.unwrap().error_code, 0, "a retried commit");
    assert_eq!(conn.call(&end(false), 3).await.unwrap().error_code, 48, "an abort of a committed transaction");
    let long = InitProducerIdRequest::default()
        .with_transactional_id(Some(tid("long")))
        .with_transaction_timeout_ms(15 * 60 * 1000 + 1)
        .with_producer_id((-1).into())
        .with_producer_epoch(-1);
    assert_eq!(conn.call(&long, 4).await.unwrap().error_code, 50, "INVALID_TRANSACTION_TIMEOUT");
    c.shutdown().await;
}

/// librdkafka's idempotent producer bumps its own epoch after a sequence gap (same producer id,
/// epoch + 1, sequence 0): accepted; any other sequence at the new epoch is out of order, and
/// the old epoch is refused from then on.
#[tokio::test]
async fn an_idempotent_producer_may_raise_its_own_epoch() {
    let c = cluster(true).await;
    let conn = connect(&c).await;
    let init = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_producer_id((-1).into())
        .with_producer_epoch(-1);
    let pid = conn.call(&init, 4).await.unwrap().producer_id.0;
    assert!(pid >= 0);
    let send = |epoch: i16, seq: i32| {
        let req = produce_request(-1, "t", 0, batch(pid, epoch, seq, &["a", "b"]));
        let conn = conn.clone();
        async move { conn.call(&req, 9).await }
    };
    assert_eq!(partition_code(&send(0, 0).await.unwrap()), 0);
    assert_eq!(partition_code(&send(1, 5).await.unwrap()), 45, "a new epoch starts at sequence 0");
    assert_eq!(partition_code(&send(1, 0).await.unwrap()), 0, "the producer's own bump");
    assert_eq!(partition_code(&send(1, 2).await.unwrap()), 0);
    assert_eq!(partition_code(&send(0, 2).await.unwrap()), 47, "the old epoch is over");
    c.shutdown().await;
}

/// acks=0 gets no answer; an error under acks=0 closes the connection, as Kafka does.
#[tokio::test]
async fn acks_zero_is_not_answered_and_its_errors_close_the_connection() {
    let c = cluster(true).await;
    let conn = connect(&c).await;
    conn.send_only(&produce_request(0, "t", 0, batch(-1, -1, -1, &["quiet"])), 9).await.unwrap();
    // The next answer on the connection is the next request's: none came for the produce.
    let r = conn.call(&ApiVersionsRequest::default(), 3).await.unwrap();
    assert_eq!(r.error_code, 0);
    let mut consumer = KafkaConsumer::new(&c.kafka_bootstrap(), c.client_config());
    let read = consumer.read_to_end("t", 0, 0).await.unwrap();
    assert_eq!(read.iter().map(|r| r.value.clone()).collect::<Vec<_>>(), [Bytes::from_static(b"quiet")]);
    conn.send_only(&produce_request(0, "t", 7, batch(-1, -1, -1, &["nowhere"])), 9).await.unwrap();
    let after = conn.call(&ApiVersionsRequest::default(), 3).await;
    assert!(matches!(after, Err(KafkaError::Closed { .. })), "{after:?}");
    c.shutdown().await;
}

/// A fetch with nothing to read waits for max_wait_ms (long polling, no busy loop), and one
/// waiting when a record arrives answers with it.
#[tokio::test]
async fn a_fetch_waits_for_records_instead_of_answering_empty() {
    let c = cluster(true).await;
    let conn = connect(&c).await;
    let fetch = |wait_ms: i32| {
        FetchRequest::default().with_max_wait_ms(wait_ms).with_min_bytes(1).with_max_bytes(1 << 20).with_topics(vec![
            FetchTopic::default()
                .with_topic(name("t"))
                .with_partitions(vec![FetchPartition::default().with_partition(1).with_partition_max_bytes(1 << 20)]),
        ])
    };
    let started = Instant::now();
    let empty = conn.call(&fetch(300), 12).await.unwrap();
    assert!(empty.responses[0].partitions[0].records.as_ref().is_none_or(|r| r.is_empty()));
    assert!(started.elapsed() >= Duration::from_millis(250), "it waited: {:?}", started.elapsed());
    let waiting = {
        let conn = conn.clone();
        let req = fetch(20_000);
        tokio::spawn(async move { conn.call(&req, 12).await })
    };
    let writer = connect(&c).await;
    let r = writer.call(&produce_request(-1, "t", 1, batch(-1, -1, -1, &["wake"])), 9).await.unwrap();
    assert_eq!(partition_code(&r), 0);
    let woken = tokio::time::timeout(T, waiting).await.expect("woken by the append").unwrap().unwrap();
    let records = woken.responses[0].partitions[0].records.clone().unwrap_or_default();
    assert!(!records.is_empty(), "the waiting fetch answers with the record");
    c.shutdown().await;
}

/// Encoding is the client's half: keep the test's raw frames honest.
#[test]
fn raw_frames_match_the_crates_encoding() {
    let mut ours = BytesMut::new();
    ours.put_i16(18);
    ours.put_i16(0);
    ours.put_i32(7);
    ours.put_i16(-1);
    let mut theirs = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(18)
        .with_correlation_id(7)
        .with_client_id(None)
        .encode(&mut theirs, ApiKey::ApiVersions.request_header_version(0))
        .unwrap();
    assert_eq!(ours, theirs);
}

async fn metadata(
    conn: &KafkaConnection,
    topic: &str,
) -> kafka_protocol::messages::metadata_response::MetadataResponseTopic {
    let req = MetadataRequest::default()
        .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(name(topic)))]))
        .with_allow_auto_topic_creation(false);
    conn.call(&req, 12).await.unwrap().topics.remove(0)
}

fn creatable(topic: &str, partitions: i32, configs: &[(&str, &str)]) -> create_topics_request::CreatableTopic {
    create_topics_request::CreatableTopic::default()
        .with_name(name(topic))
        .with_num_partitions(partitions)
        .with_replication_factor(1)
        .with_configs(
            configs
                .iter()
                .map(|(k, v)| {
                    create_topics_request::CreatableTopicConfig::default()
                        .with_name(StrBytes::from_string(k.to_string()))
                        .with_value(Some(StrBytes::from_string(v.to_string())))
                })
                .collect(),
        )
}

/// Kafka's admin calls: CreateTopics (with min.insync.replicas, validate_only, an unknown
/// config refused), DescribeConfigs, CreatePartitions, DescribeCluster, DeleteTopics by id;
/// a topic created again under the same name has another id.
#[tokio::test]
async fn kafka_admin_creates_describes_grows_and_deletes_topics() {
    let c = LocalCluster::start(LocalOptions { kafka: true, secured: false, ..LocalOptions::default() }).await.unwrap();
    c.create_topic("t", 1).await.unwrap();
    let conn = connect(&c).await;
    let create =
        |topics, validate_only| CreateTopicsRequest::default().with_topics(topics).with_validate_only(validate_only);
    let r = conn.call(&create(vec![creatable("adm", 3, &[("min.insync.replicas", "1")])], false), 7).await.unwrap();
    let made = &r.topics[0];
    assert_eq!((made.error_code, made.num_partitions, made.replication_factor), (0, 3, 1), "{made:?}");
    assert!(!made.topic_id.is_nil());
    let first_id = made.topic_id;
    let r = conn.call(&create(vec![creatable("dry", 2, &[])], true), 7).await.unwrap();
    assert_eq!(r.topics[0].error_code, 0);
    assert_eq!(metadata(&conn, "dry").await.error_code, 3, "validate_only creates nothing");
    let r = conn.call(&create(vec![creatable("cfg", 1, &[("cleanup.policy", "compact")])], false), 7).await.unwrap();
    assert_eq!(r.topics[0].error_code, ErrorCodeNum::INVALID_CONFIG);
    assert!(r.topics[0].error_message.as_deref().unwrap_or_default().contains("only delete"), "{r:?}");
    let r = conn.call(&create(vec![creatable("adm", 1, &[])], false), 7).await.unwrap();
    assert_eq!(r.topics[0].error_code, 36, "TOPIC_ALREADY_EXISTS");
    // DescribeConfigs: the topic's min.insync.replicas, and this broker's settings.
    let describe = DescribeConfigsRequest::default().with_resources(vec![
        describe_configs_request::DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str("adm"))
            .with_configuration_keys(None),
        describe_configs_request::DescribeConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(StrBytes::from_static_str("1"))
            .with_configuration_keys(Some(vec![StrBytes::from_static_str("broker.id")])),
    ]);
    let r = conn.call(&describe, 4).await.unwrap();
    let topic = &r.results[0];
    assert_eq!(topic.error_code, 0);
    let min_isr = topic.configs.iter().find(|c| c.name.as_str() == "min.insync.replicas").unwrap();
    assert_eq!(min_isr.value.as_deref(), Some("1"));
    assert_eq!(min_isr.config_source, 1, "TOPIC_CONFIG");
    // A broker setting no flag gave is the broker's default (DEFAULT_CONFIG, as Kafka reports
    // an unset one); what the flags give is STATIC_BROKER_CONFIG (test_admin.py).
    let segment = topic.configs.iter().find(|c| c.name.as_str() == "segment.bytes").unwrap();
    assert_eq!((segment.value.as_deref(), segment.config_source), (Some("134217728"), 5), "{segment:?}");
    assert_eq!(r.results[1].configs.len(), 1, "only the key asked");
    assert_eq!(r.results[1].configs[0].value.as_deref(), Some("1"));
    let listeners = DescribeConfigsRequest::default().with_resources(vec![
        describe_configs_request::DescribeConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(StrBytes::from_static_str("1"))
            .with_configuration_keys(Some(vec![StrBytes::from_static_str("advertised.listeners")])),
    ]);
    let r = conn.call(&listeners, 4).await.unwrap();
    let want = format!("PLAINTEXT://{}", c.kafka_addrs[0]);
    assert_eq!(r.results[0].configs[0].value.as_deref(), Some(want.as_str()), "{r:?}");
    // CreatePartitions with an empty replica assignment: not one list per new partition.
    let empty = CreatePartitionsRequest::default().with_topics(vec![
        create_partitions_request::CreatePartitionsTopic::default()
            .with_name(name("adm"))
            .with_count(5)
            .with_assignments(Some(vec![])),
    ]);
    assert_eq!(conn.call(&empty, 3).await.unwrap().results[0].error_code, 39, "INVALID_REPLICA_ASSIGNMENT");
    // CreatePartitions: 3 -> 5.
    let grow = CreatePartitionsRequest::default().with_topics(vec![
        create_partitions_request::CreatePartitionsTopic::default()
            .with_name(name("adm"))
            .with_count(5)
            .with_assignments(None),
    ]);
    assert_eq!(conn.call(&grow, 3).await.unwrap().results[0].error_code, 0);
    assert_eq!(metadata(&conn, "adm").await.partitions.len(), 5);
    // DescribeCluster: the live broker at its Kafka address.
    let r = conn.call(&DescribeClusterRequest::default().with_endpoint_type(1), 1).await.unwrap();
    assert_eq!(r.brokers.len(), 1);
    assert_eq!(format!("{}:{}", r.brokers[0].host.as_str(), r.brokers[0].port), c.kafka_addrs[0]);
    // DeleteTopics by id, then the name is free for another topic, with another id.
    let delete = DeleteTopicsRequest::default()
        .with_topics(vec![delete_topics_request::DeleteTopicState::default().with_topic_id(first_id)]);
    assert_eq!(conn.call(&delete, 6).await.unwrap().responses[0].error_code, 0);
    assert_eq!(metadata(&conn, "adm").await.error_code, 3);
    assert_eq!(conn.call(&delete, 6).await.unwrap().responses[0].error_code, 100, "UNKNOWN_TOPIC_ID");
    let r = conn.call(&create(vec![creatable("adm", 1, &[])], false), 7).await.unwrap();
    assert_eq!(r.topics[0].error_code, 0);
    assert_ne!(r.topics[0].topic_id, first_id, "another topic");
    assert_eq!(metadata(&conn, "adm").await.topic_id, r.topics[0].topic_id);
    c.shutdown().await;
}

/// Kafka's error code numbers the tests compare with.
struct ErrorCodeNum;
impl ErrorCodeNum {
    const INVALID_CONFIG: i16 = 40;
}

/// A client that proves no cluster secret cannot create, grow or delete topics on a cluster
/// with one: the Kafka listener's relay lends it no membership.
#[tokio::test]
async fn on_a_secured_cluster_kafka_clients_cannot_create_or_delete_topics() {
    let c = cluster(true).await;
    assert!(c.secret.is_some());
    let conn = connect(&c).await;
    let r = conn.call(&CreateTopicsRequest::default().with_topics(vec![creatable("new", 1, &[])]), 7).await.unwrap();
    assert_eq!(r.topics[0].error_code, 31, "CLUSTER_AUTHORIZATION_FAILED");
    let msg = r.topics[0].error_message.clone().unwrap_or_default();
    assert!(msg.contains("--cluster-secret-file"), "{msg}");
    let delete = DeleteTopicsRequest::default().with_topic_names(vec![name("t")]);
    assert_eq!(conn.call(&delete, 5).await.unwrap().responses[0].error_code, 31);
    let grow = CreatePartitionsRequest::default().with_topics(vec![
        create_partitions_request::CreatePartitionsTopic::default()
            .with_name(name("t"))
            .with_count(4)
            .with_assignments(None),
    ]);
    assert_eq!(conn.call(&grow, 3).await.unwrap().results[0].error_code, 31);
    assert_eq!(metadata(&conn, "t").await.partitions.len(), 2, "nothing changed");
    c.shutdown().await;
}

/// A topic deleted and created again under its name is another topic: zombie A, which wrote to
/// the old one, is fenced by B's init; its write into the new one is refused (the new
/// partition verifies A's epoch with the coordinator) and nothing of A's is in it.
#[tokio::test]
async fn a_zombie_cannot_write_into_a_topic_deleted_and_created_again() {
    let c = LocalCluster::start(LocalOptions { kafka: true, secured: false, ..LocalOptions::default() }).await.unwrap();
    c.create_topic("again", 1).await.unwrap();
    let config = || ProducerConfig::transactional("reborn");
    let mut a = KafkaProducer::init(&c.kafka_bootstrap(), config()).await.unwrap();
    a.begin().unwrap();
    a.send("again", 0, Bytes::from_static(b"A old")).await.unwrap();
    let conn = connect(&c).await;
    let old_id = metadata(&conn, "again").await.topic_id;
    let delete = DeleteTopicsRequest::default().with_topic_names(vec![name("again")]);
    assert_eq!(conn.call(&delete, 5).await.unwrap().responses[0].error_code, 0);
    let _b = KafkaProducer::init(&c.kafka_bootstrap(), config()).await.unwrap();
    let r = conn.call(&CreateTopicsRequest::default().with_topics(vec![creatable("again", 1, &[])]), 7).await.unwrap();
    assert_eq!(r.topics[0].error_code, 0);
    assert_ne!(r.topics[0].topic_id, old_id);
    a.set_register_partitions(false);
    let late = a.send("again", 0, Bytes::from_static(b"A new")).await;
    assert!(matches!(late, Err(ClientError::Fenced { .. })), "{late:?}");
    let mut consumer = KafkaConsumer::new(&c.kafka_bootstrap(), c.client_config());
    assert!(consumer.read_to_end("again", 0, 0).await.unwrap().is_empty(), "the new topic holds nothing of A's");
    c.shutdown().await;
}

/// Kafka's tools for hanging transactions, read-only: DescribeProducers shows the leader's
/// producer state with the open transaction's first offset, DescribeTransactions and
/// ListTransactions the coordinator's view.
#[tokio::test]
async fn hanging_transaction_tools_describe_producers_and_transactions() {
    let c = cluster(true).await;
    let mut p = KafkaProducer::init(&c.kafka_bootstrap(), ProducerConfig::transactional("hang")).await.unwrap();
    p.begin().unwrap();
    let at = p.send("t", 1, Bytes::from_static(b"open")).await.unwrap().base_offset;
    let conn = connect(&c).await;
    let r = conn
        .call(
            &DescribeProducersRequest::default().with_topics(vec![describe_producers_request::TopicRequest::default()
                .with_name(name("t"))
                .with_partition_indexes(vec![1])]),
            0,
        )
        .await
        .unwrap();
    let part = &r.topics[0].partitions[0];
    assert_eq!(part.error_code, 0);
    let me = part.active_producers.iter().find(|s| s.producer_id.0 == p.producer_id()).expect("listed");
    assert_eq!((me.producer_epoch, me.last_sequence, me.current_txn_start_offset), (i32::from(p.epoch()), 0, at));
    let r = conn
        .call(&DescribeTransactionsRequest::default().with_transactional_ids(vec![tid("hang"), tid("nobody")]), 0)
        .await
        .unwrap();
    let hang = &r.transaction_states[0];
    assert_eq!((hang.error_code, hang.transaction_state.as_str()), (0, "Ongoing"));
    assert_eq!(hang.topics[0].partitions, [1]);
    assert!(hang.transaction_start_time_ms > 0);
    assert_eq!(r.transaction_states[1].error_code, 105, "TRANSACTIONAL_ID_NOT_FOUND");
    let listed = conn
        .call(&ListTransactionsRequest::default().with_state_filters(vec![StrBytes::from_static_str("Ongoing")]), 1)
        .await
        .unwrap();
    assert_eq!(listed.transaction_states.iter().map(|t| t.transactional_id.as_str()).collect::<Vec<_>>(), ["hang"]);
    p.commit().await.unwrap();
    let listed = conn
        .call(&ListTransactionsRequest::default().with_state_filters(vec![StrBytes::from_static_str("Ongoing")]), 1)
        .await
        .unwrap();
    assert!(listed.transaction_states.is_empty());
    c.shutdown().await;
}

/// A batch of `values` compressed with `codec` (producer id -1), as a Kafka client builds it.
fn compressed_batch(codec: kafka_protocol::records::Compression, values: &[Bytes]) -> Bytes {
    use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
    use std::io::Write;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder starts a new batch where offset - sequence changes.
            sequence: i as i32,
            timestamp: now,
            key: None,
            value: Some(v.clone()),
            headers: Default::default(),
        })
        .collect();
    let compress = |input: &mut BytesMut, out: &mut BytesMut, c: Compression| -> anyhow::Result<()> {
        let data = input.split().freeze();
        let packed = match c {
            Compression::Gzip => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(&data)?;
                e.finish()?
            }
            Compression::Snappy => snap::raw::Encoder::new().compress_vec(&data)?,
            Compression::Lz4 => {
                let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
                e.write_all(&data)?;
                e.finish()?
            }
            Compression::Zstd => {
                ruzstd::encoding::compress_to_vec(&data[..], ruzstd::encoding::CompressionLevel::Fastest)
            }
            Compression::None => data.to_vec(),
        };
        out.put_slice(&packed);
        Ok(())
    };
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode_with_custom_compression(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions { version: 2, compression: codec },
        Some(compress),
    )
    .unwrap();
    buf.freeze()
}

/// Compressed batches (gzip, snappy, lz4, zstd) are accepted, their records checked, stored as
/// sent (still compressed) and read back; one whose count lies, a decompression bomb and an
/// unknown codec are refused with Kafka's codes.
#[tokio::test]
async fn compressed_batches_are_checked_stored_as_sent_and_read_back() {
    use kafka_protocol::records::Compression;
    let c = cluster(true).await;
    let conn = connect(&c).await;
    let values: Vec<Bytes> = (0..200).map(|i| Bytes::from(format!("compressed record {i} of many alike"))).collect();
    let mut expected = Vec::new();
    for codec in [Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
        let b = compressed_batch(codec, &values);
        assert_ne!(b[22] & 0x7, 0, "{codec:?} sets the compression bits");
        let r = conn.call(&produce_request(-1, "t", 0, b.clone()), 9).await.unwrap();
        assert_eq!(partition_code(&r), 0, "{codec:?}: {r:?}");
        expected.extend(values.iter().cloned());
        // Stored as sent: the fetched batch keeps its compression attribute and bytes.
        let base = r.responses[0].partition_responses[0].base_offset;
        let fetch = FetchRequest::default().with_max_bytes(1 << 20).with_topics(vec![FetchTopic::default()
            .with_topic(name("t"))
            .with_partitions(vec![FetchPartition::default().with_fetch_offset(base).with_partition_max_bytes(1)])]);
        let got = conn.call(&fetch, 12).await.unwrap().responses[0].partitions[0].records.clone().unwrap();
        let stored = protocol::batch::BatchHeader::parse(&got).unwrap();
        assert_eq!(stored.codec(), protocol::batch::BatchHeader::parse(&b).unwrap().codec());
        assert_eq!(&got[61..stored.total_bytes()], &b[61..], "{codec:?}: the records as sent");
    }
    let mut consumer = KafkaConsumer::new(&c.kafka_bootstrap(), c.client_config());
    let read: Vec<Bytes> = consumer.read_to_end("t", 0, 0).await.unwrap().into_iter().map(|r| r.value).collect();
    assert_eq!(read, expected, "every record, decompressed by the consumer");
    // A compressed batch whose record count lies.
    let mut lying = compressed_batch(Compression::Gzip, &values[..3]).to_vec();
    lying[57..61].copy_from_slice(&5i32.to_be_bytes());
    lying[23..27].copy_from_slice(&4i32.to_be_bytes());
    let crc = protocol::batch::crc32c(&lying[21..]);
    lying[17..21].copy_from_slice(&crc.to_be_bytes());
    let r = conn.call(&produce_request(-1, "t", 0, Bytes::from(lying)), 9).await.unwrap();
    assert_eq!(partition_code(&r), 87, "INVALID_RECORD");
    // A decompression bomb: 2 MB of zeros in one record, decompressing past a small limit would
    // be refused; at the default limit (64 MiB) it is a large, honest batch, so take 100 MB.
    let bomb = compressed_batch(Compression::Gzip, &[Bytes::from(vec![0u8; 100 << 20])]);
    assert!(bomb.len() < 1 << 20, "{} bytes on the wire", bomb.len());
    let r = conn.call(&produce_request(-1, "t", 0, bomb), 9).await.unwrap();
    assert_eq!(partition_code(&r), 10, "MESSAGE_TOO_LARGE");
    // Compression type 5 does not exist.
    let mut unknown = batch(-1, -1, -1, &["x"]).to_vec();
    unknown[22] |= 5;
    let crc = protocol::batch::crc32c(&unknown[21..]);
    unknown[17..21].copy_from_slice(&crc.to_be_bytes());
    let r = conn.call(&produce_request(-1, "t", 0, Bytes::from(unknown)), 9).await.unwrap();
    assert_eq!(partition_code(&r), 76, "UNSUPPORTED_COMPRESSION_TYPE");
    c.shutdown().await;
}

/// A pipelining producer's requests read together are appended together, in order; the first
/// batch of a new producer waits for its verification and the ones behind it wait for it (the
/// Kafka listener's grouped produce path).
#[tokio::test]
async fn pipelined_kafka_produce_requests_are_appended_in_order_behind_a_verification() {
    let c = cluster(true).await;
    let conn = connect(&c).await;
    let init = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_producer_id((-1).into())
        .with_producer_epoch(-1);
    let pid = conn.call(&init, 4).await.unwrap().producer_id.0;
    let mut answers = Vec::new();
    for i in 0..20 {
        let req = produce_request(-1, "t", 1, batch(pid, 0, i * 2, &["a", "b"]));
        answers.push(conn.submit(&req, 9).await.unwrap());
    }
    let mut offsets = Vec::new();
    for a in answers {
        let r = a.await.unwrap();
        assert_eq!(partition_code(&r), 0, "{r:?}");
        offsets.push(r.responses[0].partition_responses[0].base_offset);
    }
    assert_eq!(offsets, (0..20).map(|i| i * 2).collect::<Vec<i64>>(), "in the order sent");
    // A resent batch is answered with its original offset (the group path's duplicate).
    let again = conn.call(&produce_request(-1, "t", 1, batch(pid, 0, 38, &["a", "b"])), 9).await.unwrap();
    assert_eq!(again.responses[0].partition_responses[0].base_offset, 38);
    c.shutdown().await;
}

/// Wait until the broker's count of open relay connections to the coordinator is `n`.
async fn relay_connections_become(c: &LocalCluster, n: u64, within: Duration) {
    use std::sync::atomic::Ordering;
    let gauge = &c.switches[0].stats.kafka_relay_connections;
    let deadline = Instant::now() + within;
    while gauge.load(Ordering::Relaxed) != n {
        assert!(
            Instant::now() < deadline,
            "relay connections {} after {within:?}, not {n}",
            gauge.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Each Kafka connection relays to the coordinator over a connection of its own, which closes
/// when the client goes away, or after `kafka_relay_idle_ms` without use while the client stays
/// connected (idle clients would otherwise hold the coordinator's connections_max); the next
/// relayed request dials again.
#[tokio::test]
async fn idle_kafka_clients_do_not_hold_connections_to_the_coordinator() {
    // The default idle time (10 s): the relay lives as long as its Kafka connection.
    let c = cluster(true).await;
    relay_connections_become(&c, 0, T).await;
    let conn = connect(&c).await;
    assert_eq!(metadata(&conn, "t").await.error_code, 0);
    relay_connections_become(&c, 1, T).await;
    drop(conn);
    relay_connections_become(&c, 0, Duration::from_secs(5)).await;
    c.shutdown().await;

    // A short idle time: five connected clients, each relayed once, hold nothing after it.
    let opts = LocalOptions { kafka: true, kafka_relay_idle_ms: 50, ..LocalOptions::default() };
    let c = LocalCluster::start(opts).await.unwrap();
    c.create_topic("t", 1).await.unwrap();
    let mut clients = Vec::new();
    for _ in 0..5 {
        let conn = connect(&c).await;
        assert_eq!(metadata(&conn, "t").await.error_code, 0);
        clients.push(conn);
    }
    relay_connections_become(&c, 0, T).await;
    // Still connected, they are relayed again on demand: a transactional init at the coordinator.
    for (i, conn) in clients.iter().enumerate() {
        assert_eq!(metadata(conn, "t").await.error_code, 0);
        let init = InitProducerIdRequest::default()
            .with_transactional_id(Some(tid(&format!("idle-{i}"))))
            .with_transaction_timeout_ms(60_000)
            .with_producer_id((-1).into())
            .with_producer_epoch(-1);
        assert_eq!(conn.call(&init, 4).await.unwrap().error_code, 0);
    }
    relay_connections_become(&c, 0, T).await;
    c.shutdown().await;
}

/// ElectLeaders under the authorizer, from a principal without ALTER on the cluster: refused
/// per partition at version 0 (which has no top-level code: the answer must still be one, not a
/// closed connection), as a whole from version 1; a request for every partition names no topic.
#[tokio::test]
async fn elect_leaders_without_alter_on_the_cluster_is_refused_and_names_no_topic() {
    let authorizer =
        coordinator::acls::AuthorizerConfig { super_users: Vec::new(), allow_everyone_if_no_acl_found: false };
    let c = LocalCluster::start(LocalOptions { kafka: true, authorizer: Some(authorizer), ..LocalOptions::default() })
        .await
        .unwrap();
    c.create_topic("t", 1).await.unwrap();
    let conn = connect(&c).await;
    let named = ElectLeadersRequest::default().with_topic_partitions(Some(vec![
        elect_leaders_request::TopicPartitions::default().with_topic(name("t")).with_partitions(vec![0]),
    ]));
    // The broker hears of the authorizer in a heartbeat answer: until then the coordinator
    // refuses the relayed election as cluster-internal (the relay is no member).
    let deadline = std::time::Instant::now() + T;
    let r = loop {
        let r = conn.call(&named, 0).await.expect("version 0 answered, not closed");
        let p = &r.replica_election_results[0].partition_result[0];
        if p.error_message.as_deref().is_some_and(|m| m.contains("may not")) {
            break r;
        }
        assert!(std::time::Instant::now() < deadline, "the authorizer never applied: {r:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!((r.error_code, r.replica_election_results[0].partition_result[0].error_code), (0, 31));
    let r = conn.call(&named, 2).await.unwrap();
    assert_eq!(r.error_code, 31, "{r:?}");
    let every = ElectLeadersRequest::default().with_election_type(0).with_topic_partitions(None);
    let r = conn.call(&every, 2).await.unwrap();
    assert_eq!(r.error_code, 31);
    assert!(r.replica_election_results.is_empty(), "no topic named to a caller without ALTER: {r:?}");
    c.shutdown().await;
}

/// SaslHandshake version 0 (listed so that librdkafka before 2.10 logs in at all): after its
/// acceptance the tokens travel as bare frames. PLAIN: an empty bare answer, then requests are
/// served; SCRAM: two rounds, the server's proof checked; a wrong password closes the connection
/// (version 0 carries no error); after the exchange the codec reads requests again.
#[tokio::test]
async fn sasl_handshake_version_0_carries_bare_tokens() {
    use bytes::{Buf, BufMut};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let users = vec![("alice".to_string(), "alice-pw".to_string())];
    let c =
        LocalCluster::start(LocalOptions { kafka: true, sasl_users: users, ..LocalOptions::default() }).await.unwrap();
    c.create_topic("t", 1).await.unwrap();
    async fn frame(s: &mut tokio::net::TcpStream, body: &[u8]) {
        let mut b = BytesMut::new();
        b.put_u32(body.len() as u32);
        b.put_slice(body);
        s.write_all(&b).await.unwrap();
    }
    async fn read_frame(s: &mut tokio::net::TcpStream) -> Option<Bytes> {
        let len = s.read_u32().await.ok()?;
        let mut b = vec![0; len as usize];
        s.read_exact(&mut b).await.ok()?;
        Some(Bytes::from(b))
    }
    async fn request<R: Encodable + kafka_protocol::protocol::Request>(
        s: &mut tokio::net::TcpStream,
        r: &R,
        version: i16,
    ) -> Bytes {
        let mut b = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(7)
            .encode(&mut b, R::header_version(version))
            .unwrap();
        r.encode(&mut b, version).unwrap();
        frame(s, &b).await;
        let mut answer = read_frame(s).await.expect("an answer");
        assert_eq!(answer.get_i32(), 7, "the correlation id");
        answer
    }
    let handshake =
        |mechanism: &'static str| SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism));
    let metadata =
        MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(name("t")))]));
    let served = |mut answer: Bytes| MetadataResponse::decode(&mut answer, 1).unwrap().topics[0].error_code;
    let connect = || tokio::net::TcpStream::connect(c.kafka_addrs[0].clone());

    // PLAIN.
    let mut s = connect().await.unwrap();
    let mut answer = request(&mut s, &handshake("PLAIN"), 0).await;
    assert_eq!(SaslHandshakeResponse::decode(&mut answer, 0).unwrap().error_code, 0);
    frame(&mut s, b"\0alice\0alice-pw").await;
    assert_eq!(read_frame(&mut s).await.expect("a bare answer"), Bytes::new());
    assert_eq!(served(request(&mut s, &metadata, 1).await), 0, "logged in, requests served");

    // A wrong password: the connection closes, with no answer.
    let mut s = connect().await.unwrap();
    request(&mut s, &handshake("PLAIN"), 0).await;
    frame(&mut s, b"\0alice\0wrong").await;
    assert!(read_frame(&mut s).await.is_none(), "closed");

    // SCRAM-SHA-512: two bare rounds, the server's proof checked by the client.
    let mut s = connect().await.unwrap();
    request(&mut s, &handshake("SCRAM-SHA-512"), 0).await;
    let login = producer::SaslLogin {
        mechanism: protocol::sasl::Mechanism::Scram(protocol::sasl::ScramMechanism::Sha512),
        user: "alice".into(),
        password: "alice-pw".into(),
    };
    let stream = std::sync::Arc::new(tokio::sync::Mutex::new(s));
    net::client::scram_login(
        protocol::sasl::ScramMechanism::Sha512,
        &login,
        |token| {
            let stream = stream.clone();
            async move {
                let mut s = stream.lock().await;
                frame(&mut s, &token).await;
                read_frame(&mut s).await.map(|b| (b, ())).ok_or_else(|| "closed".to_string())
            }
        },
        |e| e,
    )
    .await
    .unwrap();
    let mut s = std::sync::Arc::try_unwrap(stream).unwrap().into_inner();
    assert_eq!(served(request(&mut s, &metadata, 1).await), 0, "logged in, requests served");
    c.shutdown().await;
}

/// DescribeTopicPartitions (KIP-966) shows the eligible leader replicas: with both followers
/// frozen the ISR is the leader alone, below min.insync.replicas (2), and they are eligible.
#[tokio::test]
async fn describe_topic_partitions_shows_the_eligible_leader_replicas() {
    let c =
        LocalCluster::start(LocalOptions { brokers: 3, kafka: true, broker_lease_ms: 400, ..LocalOptions::default() })
            .await
            .unwrap();
    c.create_topic_replicated("t", 1, 3).await.unwrap();
    let d = c.admin().describe().await.unwrap();
    let leader = d.partitions[0].leader_id;
    let followers: Vec<i32> = (1..=3).filter(|b| *b != leader).collect();
    // A connection to the leader alone: the frozen brokers answer nothing.
    let conn = KafkaConnection::connect(&c.kafka_addrs[(leader - 1) as usize], None, T).await.unwrap();
    let req = DescribeTopicPartitionsRequest::default()
        .with_topics(vec![describe_topic_partitions_request::TopicRequest::default().with_name(name("t"))])
        .with_response_partition_limit(10);
    let before = conn.call(&req, 0).await.unwrap();
    let p = &before.topics[0].partitions[0];
    assert_eq!((p.leader_id.0, p.replica_nodes.len(), p.isr_nodes.len()), (leader, 3, 3), "{p:?}");
    assert_eq!(p.eligible_leader_replicas.as_deref(), Some(&[][..]), "none eligible while all are in sync");
    for b in &followers {
        c.switches[(b - 1) as usize].freeze();
    }
    let deadline = std::time::Instant::now() + T;
    loop {
        let r = conn.call(&req, 0).await.unwrap();
        let p = &r.topics[0].partitions[0];
        let mut elr: Vec<i32> = p.eligible_leader_replicas.iter().flatten().map(|b| b.0).collect();
        elr.sort();
        if p.isr_nodes.iter().map(|b| b.0).collect::<Vec<_>>() == [leader] && elr == followers {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the frozen followers never eligible: {p:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for b in &followers {
        c.switches[(b - 1) as usize].thaw();
    }
    c.shutdown().await;
}

/// Issue 32, item 2: DeleteRecords on the Kafka wire, without a cluster secret. One request for
/// three partitions gets an answer per partition: the log start moves inside a batch (the low
/// watermark is the offset asked), a partition with nothing committed refuses an offset past its
/// high watermark, one that does not exist is not led here. A fetch below the start is
/// OFFSET_OUT_OF_RANGE, one at it returns the batch holding it, ListOffsets' earliest is it, and
/// -1 deletes up to the high watermark.
#[tokio::test]
async fn delete_records_moves_the_log_start_and_reads_below_it_are_out_of_range() {
    let opts = LocalOptions { secured: false, kafka: true, ..LocalOptions::default() };
    let c = LocalCluster::start(opts).await.unwrap();
    c.create_topic("t", 2).await.unwrap();
    wait_ready(&c.kafka_addrs[0], "t", 2, None).await;
    let conn = connect(&c).await;
    for _ in 0..4 {
        let r = conn.call(&produce_request(-1, "t", 0, batch(-1, -1, -1, &["a", "b"])), 9).await.unwrap();
        assert_eq!(partition_code(&r), 0);
    }
    let delete = |partitions: &[(i32, i64)]| {
        let partitions = partitions
            .iter()
            .map(|(p, offset)| {
                delete_records_request::DeleteRecordsPartition::default().with_partition_index(*p).with_offset(*offset)
            })
            .collect();
        DeleteRecordsRequest::default().with_timeout_ms(5_000).with_topics(vec![
            delete_records_request::DeleteRecordsTopic::default().with_name(name("t")).with_partitions(partitions),
        ])
    };
    let r = conn.call(&delete(&[(0, 5), (1, 1), (7, 0)]), 2).await.unwrap();
    let got: Vec<(i32, i16, i64)> =
        r.topics[0].partitions.iter().map(|p| (p.partition_index, p.error_code, p.low_watermark)).collect();
    assert_eq!(got, vec![(0, 0, 5), (1, 1, -1), (7, 6, -1)]);

    let fetch = |offset: i64| {
        FetchRequest::default().with_max_bytes(1 << 20).with_topics(vec![FetchTopic::default()
            .with_topic(name("t"))
            .with_partitions(vec![FetchPartition::default()
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])])
    };
    let below = conn.call(&fetch(3), 12).await.unwrap();
    assert_eq!(below.responses[0].partitions[0].error_code, 1, "OFFSET_OUT_OF_RANGE below the start");
    let at = conn.call(&fetch(5), 12).await.unwrap();
    let p = &at.responses[0].partitions[0];
    assert_eq!((p.error_code, p.log_start_offset, p.high_watermark), (0, 5, 8));
    let first = protocol::batch::BatchIter::new(p.records.clone().unwrap()).next().unwrap().unwrap().0;
    assert_eq!(first.base_offset, 4, "the batch holding the start, whole");
    let earliest = ListOffsetsRequest::default().with_topics(vec![ListOffsetsTopic::default()
        .with_name(name("t"))
        .with_partitions(vec![ListOffsetsPartition::default().with_timestamp(-2)])]);
    assert_eq!(conn.call(&earliest, 9).await.unwrap().topics[0].partitions[0].offset, 5);
    let r = conn.call(&delete(&[(0, -1)]), 0).await.unwrap();
    assert_eq!((r.topics[0].partitions[0].error_code, r.topics[0].partitions[0].low_watermark), (0, 8));
    assert_eq!(conn.call(&earliest, 9).await.unwrap().topics[0].partitions[0].offset, 8);
}

/// Issue 32, item 1: per-topic configs on the Kafka wire. CreateTopics sets them (the answer
/// lists them as TOPIC_CONFIG) and refuses a config Kafka knows that epochfence does not apply,
/// naming it; they are applied: max.message.bytes (MESSAGE_TOO_LARGE above it, another topic
/// keeps the broker's), LogAppendTime (the batch read back carries the broker's clock), and
/// segment.bytes (the log rolls at it); IncrementalAlterConfigs changes only what it names,
/// AlterConfigs replaces the set; DescribeConfigs shows the sources, the synonyms (the topic's,
/// then the broker's default) and what each does.
#[tokio::test]
async fn topic_configs_are_set_applied_changed_and_described() {
    let c = LocalCluster::start(LocalOptions { kafka: true, secured: false, ..LocalOptions::default() }).await.unwrap();
    c.create_topic("plain", 1).await.unwrap();
    let conn = connect(&c).await;
    let create = |configs: &[(&str, &str)]| {
        CreateTopicsRequest::default().with_topics(vec![creatable("cfg", 1, configs)]).with_validate_only(false)
    };
    let r = conn.call(&create(&[("segment.jitter.ms", "5")]), 7).await.unwrap();
    assert_eq!(r.topics[0].error_code, ErrorCodeNum::INVALID_CONFIG);
    assert!(r.topics[0].error_message.as_deref().unwrap_or_default().contains("'segment.jitter.ms'"), "{r:?}");
    let configs =
        [("max.message.bytes", "300"), ("message.timestamp.type", "LogAppendTime"), ("segment.bytes", "1024")];
    let r = conn.call(&create(&configs), 7).await.unwrap();
    assert_eq!(r.topics[0].error_code, 0, "{r:?}");
    let listed = r.topics[0].configs.as_ref().unwrap();
    for (k, v) in configs {
        let got = listed.iter().find(|c| c.name.as_str() == k).unwrap();
        assert_eq!((got.value.as_deref(), got.config_source), (Some(v), 1), "{got:?}");
    }
    wait_ready(&c.kafka_addrs[0], "cfg", 1, None).await;

    // max.message.bytes: this topic's, not the other's.
    let big = batch(-1, -1, -1, &[std::str::from_utf8(&[b'x'; 400]).unwrap().to_string().leak()]);
    let r = conn.call(&produce_request(-1, "cfg", 0, big.clone()), 9).await.unwrap();
    assert_eq!(partition_code(&r), 10, "MESSAGE_TOO_LARGE");
    assert_eq!(partition_code(&conn.call(&produce_request(-1, "plain", 0, big), 9).await.unwrap()), 0);
    // LogAppendTime: the producer's timestamp (an hour ago) is replaced by the broker's clock.
    let before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let old = build_batch(
        ProducerStamp { producer_id: -1, producer_epoch: -1, base_sequence: -1 },
        false,
        before - 3_600_000,
        &[Bytes::from_static(b"stamped")],
    );
    let r = conn.call(&produce_request(-1, "cfg", 0, old), 9).await.unwrap();
    assert_eq!(partition_code(&r), 0);
    let stamped_at = r.responses[0].partition_responses[0].log_append_time_ms;
    assert!(stamped_at >= before, "the answer carries the broker's time: {stamped_at}");
    let fetch = FetchRequest::default().with_max_bytes(1 << 20).with_topics(vec![FetchTopic::default()
        .with_topic(name("cfg"))
        .with_partitions(vec![FetchPartition::default().with_partition_max_bytes(1 << 20)])]);
    let r = conn.call(&fetch, 12).await.unwrap();
    let records = r.responses[0].partitions[0].records.clone().unwrap();
    let (h, _) = protocol::batch::BatchIter::new(records).next().unwrap().unwrap();
    assert_eq!(h.attributes & 0x08, 0x08, "LogAppendTime");
    assert_eq!(h.max_timestamp, stamped_at, "stored as answered");
    let plain = conn.call(&produce_request(-1, "plain", 0, batch(-1, -1, -1, &["p"])), 9).await.unwrap();
    assert_eq!(plain.responses[0].partition_responses[0].log_append_time_ms, -1, "CreateTime");
    // segment.bytes 1024: fifteen batches of 100-odd bytes roll the log several times.
    for i in 0..15 {
        let v: &'static str = format!("value-{i:03}-{}", "y".repeat(60)).leak();
        assert_eq!(
            partition_code(&conn.call(&produce_request(-1, "cfg", 0, batch(-1, -1, -1, &[v])), 9).await.unwrap()),
            0
        );
    }
    let segments = broker::log::segment_files(&c.replica_dir(1, "cfg", 0)).unwrap().len();
    assert!(segments >= 2, "{segments} segments");
    assert_eq!(broker::log::segment_files(&c.replica_dir(1, "plain", 0)).unwrap().len(), 1);

    // IncrementalAlterConfigs: set one, delete one; an unapplied one refuses the whole change.
    let incremental = |ops: &[(&str, i8, &str)]| {
        IncrementalAlterConfigsRequest::default().with_resources(vec![
            incremental_alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str("cfg"))
                .with_configs(
                    ops.iter()
                        .map(|(k, op, v)| {
                            incremental_alter_configs_request::AlterableConfig::default()
                                .with_name(StrBytes::from_string(k.to_string()))
                                .with_config_operation(*op)
                                .with_value(Some(StrBytes::from_string(v.to_string())))
                        })
                        .collect(),
                ),
        ])
    };
    let r = conn.call(&incremental(&[("max.message.bytes", 0, "100000"), ("flush.ms", 0, "1")]), 1).await.unwrap();
    assert_eq!(r.responses[0].error_code, ErrorCodeNum::INVALID_CONFIG, "{r:?}");
    let r = conn
        .call(&incremental(&[("max.message.bytes", 0, "100000"), ("message.timestamp.type", 1, "")]), 1)
        .await
        .unwrap();
    assert_eq!(r.responses[0].error_code, 0, "{r:?}");
    let describe = |keys: Option<Vec<&'static str>>| {
        DescribeConfigsRequest::default().with_include_synonyms(true).with_include_documentation(true).with_resources(
            vec![describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str("cfg"))
                .with_configuration_keys(keys.map(|k| k.into_iter().map(StrBytes::from_static_str).collect()))],
        )
    };
    let r = conn.call(&describe(None), 4).await.unwrap();
    let get = |k: &str| r.results[0].configs.iter().find(|c| c.name.as_str() == k).unwrap().clone();
    assert_eq!(
        (get("max.message.bytes").value.as_deref(), get("max.message.bytes").config_source),
        (Some("100000"), 1)
    );
    let ts = get("message.timestamp.type");
    assert_eq!((ts.value.as_deref(), ts.config_source), (Some("CreateTime"), 5), "back to the default");
    let seg = get("segment.bytes");
    let synonyms: Vec<(&str, Option<&str>, i8)> =
        seg.synonyms.iter().map(|s| (s.name.as_str(), s.value.as_deref(), s.source)).collect();
    assert_eq!(synonyms, [("segment.bytes", Some("1024"), 1), ("log.segment.bytes", Some("134217728"), 5)]);
    assert!(seg.documentation.as_deref().unwrap_or_default().contains("rolls"), "{seg:?}");
    assert_eq!(seg.config_type, 3, "INT");
    // A bigger batch lands once the broker has the change (its next heartbeat).
    let big = batch(-1, -1, -1, &[std::str::from_utf8(&[b'z'; 400]).unwrap().to_string().leak()]);
    let mut code = -1;
    for _ in 0..250 {
        code = partition_code(&conn.call(&produce_request(-1, "cfg", 0, big.clone()), 9).await.unwrap());
        if code != 10 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(code, 0);

    // message.timestamp.after.max.ms: a minute on this topic, an hour (the default) on the other.
    let alter_after = incremental(&[("message.timestamp.after.max.ms", 0, "60000")]);
    assert_eq!(conn.call(&alter_after, 1).await.unwrap().responses[0].error_code, 0);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let ahead = |minutes: i64| {
        build_batch(
            ProducerStamp { producer_id: -1, producer_epoch: -1, base_sequence: -1 },
            false,
            now + minutes * 60_000,
            &[Bytes::from_static(b"ahead")],
        )
    };
    let mut code = -1;
    for _ in 0..250 {
        code = partition_code(&conn.call(&produce_request(-1, "cfg", 0, ahead(10)), 9).await.unwrap());
        if code != 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(code, 32, "INVALID_TIMESTAMP");
    assert_eq!(partition_code(&conn.call(&produce_request(-1, "plain", 0, ahead(10)), 9).await.unwrap()), 0);

    // AlterConfigs replaces the set: what it does not name goes back to the broker's.
    let replace =
        AlterConfigsRequest::default().with_resources(vec![alter_configs_request::AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str("cfg"))
            .with_configs(vec![alter_configs_request::AlterableConfig::default()
                .with_name(StrBytes::from_static_str("retention.ms"))
                .with_value(Some(StrBytes::from_static_str("86400000")))])]);
    assert_eq!(conn.call(&replace, 2).await.unwrap().responses[0].error_code, 0);
    let r = conn.call(&describe(Some(vec!["retention.ms", "segment.bytes", "max.message.bytes"])), 4).await.unwrap();
    let got: Vec<(&str, Option<&str>, i8)> =
        r.results[0].configs.iter().map(|c| (c.name.as_str(), c.value.as_deref(), c.config_source)).collect();
    assert_eq!(
        got,
        [
            ("retention.ms", Some("86400000"), 1),
            ("segment.bytes", Some("134217728"), 5),
            ("max.message.bytes", Some("1048576"), 5)
        ]
    );
}
