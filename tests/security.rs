//! Outsiders and hostile input over real TCP: internal requests need membership, every bad
//! input gets its error code and a message, and a well-behaved client still works afterwards.

use bytes::Bytes;
use epochfence::{LocalCluster, LocalOptions};
use net::{Connection, NetError};
use producer::{ClientConfig, Consumer, Producer, ProducerConfig};
use protocol::auth::ClusterSecret;
use protocol::batch::{build_batch, ProducerStamp};
use protocol::{
    AlterPartitionRequest, CreateTopicRequest, ElectLeaderRequest, ErrorCode, FetchRequest, HeartbeatRequest,
    InitProducerIdRequest, MetadataRequest, ProduceRequest, ReplicateRequest, Request, Response, WriteMarkerRequest,
    ACKS_ALL, READ_UNCOMMITTED,
};

async fn healthy(c: &LocalCluster, tid: &str) -> i64 {
    let mut p = Producer::init(&c.coordinator_addr, ProducerConfig::transactional(tid)).await.unwrap();
    p.send("t", 0, Bytes::from(tid.to_string())).await.unwrap().base_offset
}

async fn values(c: &LocalCluster) -> Vec<String> {
    let mut consumer = Consumer::new(&c.coordinator_addr, ClientConfig::default());
    consumer
        .read_to_end("t", 0, 0)
        .await
        .unwrap()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.value).into_owned())
        .collect()
}

fn refused(r: Result<Response, NetError>) -> protocol::Status {
    match r {
        Err(NetError::Refused { status, .. }) => status,
        Ok(resp) => resp.status().clone(),
        Err(e) => panic!("expected an answer, got {e}"),
    }
}

#[tokio::test]
async fn an_outsider_cannot_replicate_write_markers_or_pose_as_a_broker() {
    let c = LocalCluster::start(LocalOptions::default()).await.unwrap();
    c.create_topic("t", 1).await.unwrap();
    healthy(&c, "member-traffic-works").await;
    let before = values(&c).await;
    let broker = &c.broker_addrs[0];

    // A client that speaks the protocol but holds no secret.
    let outsider = Connection::connect(broker).await.unwrap();
    let forged = build_batch(
        ProducerStamp { producer_id: 0, producer_epoch: 0, base_sequence: 1 },
        false,
        0,
        &[Bytes::from_static(b"forged")],
    );
    let status = refused(
        outsider
            .call(Request::Replicate(ReplicateRequest {
                topic: "t".into(),
                partition: 0,
                topic_id: 0,
                leader_epoch: 99,
                leader_id: 7,
                from_offset: 0,
                prev_epoch: -1,
                high_watermark: 1,
                log_start_offset: 0,
                low_watermark: 0,
                producer_state: bytes::Bytes::new(),
                records: forged.into(),
            }))
            .await,
    );
    assert_eq!(status.code, ErrorCode::ClusterAuthorizationFailed, "{status}");
    let status = refused(
        outsider
            .call(Request::WriteMarker(WriteMarkerRequest {
                topic: "t".into(),
                partition: 0,
                producer_id: 0,
                producer_epoch: 9,
                marker_sequence: 0,
                commit: true,
                leader_epoch: 0,
                coordinator_epoch: 0,
            }))
            .await,
    );
    assert_eq!(status.code, ErrorCode::ClusterAuthorizationFailed, "{status}");
    assert!(status.message.contains("prove membership"), "{status}");

    // Nor can it register as a broker or shrink an ISR at the coordinator.
    let outsider = Connection::connect(&c.coordinator_addr).await.unwrap();
    let status = refused(
        outsider
            .call(Request::Heartbeat(HeartbeatRequest {
                broker_id: 1,
                addr: "127.0.0.1:1".into(),
                kafka_addr: String::new(),
                incarnation: 1,
                broker_epoch: -1,
                previous_broker_epoch: -1,
                log_dir_id: 1,
                intact: true,
                replicas: vec![],
                credentials_version: 0,
                authorization_version: 0,
            }))
            .await,
    );
    assert_eq!(status.code, ErrorCode::ClusterAuthorizationFailed);
    let status = refused(
        outsider
            .call(Request::AlterPartition(AlterPartitionRequest {
                broker_id: 1,
                topic: "t".into(),
                partition: 0,
                topic_id: 0,
                leader_epoch: 0,
                partition_epoch: 0,
                isr: vec![1],
            }))
            .await,
    );
    assert_eq!(status.code, ErrorCode::ClusterAuthorizationFailed);
    // Nor create topics (each partition costs every replica a log) or elect leaders in a loop
    // (each election bumps a leader epoch and fails the acks=all writes waiting): those need the
    // secret too, as `admin --cluster-secret-file` has it.
    let req = CreateTopicRequest {
        name: "flood".into(),
        partitions: 1000,
        replication_factor: -1,
        min_insync_replicas: -1,
        validate_only: false,
        configs: Vec::new(),
    };
    let status = refused(outsider.call(Request::CreateTopic(req)).await);
    assert_eq!(status.code, ErrorCode::ClusterAuthorizationFailed, "{status}");
    let status = refused(
        outsider
            .call(Request::ElectLeader(ElectLeaderRequest {
                topic: "t".into(),
                partition: 0,
                election: protocol::Election::Again,
            }))
            .await,
    );
    assert_eq!(status.code, ErrorCode::ClusterAuthorizationFailed, "{status}");
    let mut admin = c.admin();
    admin.elect_leader("t", 0).await.expect("an admin with the secret elects");

    // A wrong secret fails the handshake.
    let wrong = ClusterSecret::new(b"not-the-cluster-secret".to_vec()).unwrap();
    match Connection::connect_as(broker, Some(&wrong), "broker-9").await {
        Err(NetError::Refused { status, .. }) => assert_eq!(status.code, ErrorCode::SaslAuthenticationFailed),
        other => panic!("a wrong secret must not authenticate: {other:?}"),
    }
    // The right one does, and then internal requests are served (here: refused on their merits).
    let member = Connection::connect_as(broker, c.secret.as_ref(), "broker-9").await.unwrap();
    let r = member
        .call(Request::WriteMarker(WriteMarkerRequest {
            topic: "nope".into(),
            partition: 0,
            producer_id: 0,
            producer_epoch: 9,
            marker_sequence: 0,
            commit: true,
            leader_epoch: 0,
            coordinator_epoch: 0,
        }))
        .await
        .unwrap();
    assert_eq!(r.status().code, ErrorCode::NotLeaderOrFollower);

    assert_eq!(values(&c).await, before, "the partition is unchanged");
    healthy(&c, "still-works").await;
    c.shutdown().await;
}

/// One bad input and what it must be answered with.
struct Row {
    what: &'static str,
    to_coordinator: bool,
    req: Request,
    code: ErrorCode,
}

#[tokio::test]
async fn every_bad_input_gets_its_error_code_and_a_message_and_nothing_is_lost() {
    let c = LocalCluster::start(LocalOptions::default()).await.unwrap();
    c.create_topic("t", 1).await.unwrap();
    let first = healthy(&c, "before").await;
    let p = Producer::init(&c.coordinator_addr, ProducerConfig::transactional("granted")).await.unwrap();
    let batch = |pid: i64, epoch: i16, seq: i32| {
        build_batch(
            ProducerStamp { producer_id: pid, producer_epoch: epoch, base_sequence: seq },
            false,
            0,
            &[Bytes::from_static(b"x")],
        )
    };
    let produce = |partition: i32, acks: i8, records: Bytes| {
        Request::Produce(ProduceRequest {
            transactional_id: None,
            topic: "t".into(),
            partition,
            leader_epoch: -1,
            acks,
            records,
        })
    };
    // Batches whose CRC is right but whose header or records lie (Kafka's log validator).
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let stamped = |transactional: bool, pid: i64, timestamp: i64| {
        let seq = if pid < 0 { -1 } else { 0 };
        let epoch = if pid < 0 { -1 } else { p.epoch() };
        build_batch(
            ProducerStamp { producer_id: pid, producer_epoch: epoch, base_sequence: seq },
            transactional,
            timestamp,
            &[Bytes::from_static(b"first value"), Bytes::from_static(b"second value")],
        )
    };
    let lie = |at: usize, bytes: &[u8]| {
        let mut b = stamped(false, p.producer_id(), now_ms).to_vec();
        b[at..at + bytes.len()].copy_from_slice(bytes);
        let crc = protocol::batch::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        Bytes::from(b)
    };
    let mut lying_length = batch(p.producer_id(), p.epoch(), 0).to_vec();
    lying_length[8..12].copy_from_slice(&1_000_000i32.to_be_bytes());
    let mut bad_crc = batch(p.producer_id(), p.epoch(), 0).to_vec();
    let n = bad_crc.len();
    bad_crc[n - 1] ^= 1;
    let rows = vec![
        Row {
            what: "empty topic name",
            to_coordinator: true,
            req: Request::CreateTopic(CreateTopicRequest {
                name: "".into(),
                partitions: 1,
                replication_factor: -1,
                min_insync_replicas: -1,
                validate_only: false,
                configs: Vec::new(),
            }),
            code: ErrorCode::InvalidTopicException,
        },
        Row {
            what: "oversized topic name",
            to_coordinator: true,
            req: Request::CreateTopic(CreateTopicRequest {
                name: "x".repeat(300),
                partitions: 1,
                replication_factor: -1,
                min_insync_replicas: -1,
                validate_only: false,
                configs: Vec::new(),
            }),
            code: ErrorCode::InvalidTopicException,
        },
        Row {
            what: "topic name with a slash",
            to_coordinator: true,
            req: Request::CreateTopic(CreateTopicRequest {
                name: "a/b".into(),
                partitions: 1,
                replication_factor: -1,
                min_insync_replicas: -1,
                validate_only: false,
                configs: Vec::new(),
            }),
            code: ErrorCode::InvalidTopicException,
        },
        Row {
            what: "negative partition count",
            to_coordinator: true,
            req: Request::CreateTopic(CreateTopicRequest {
                name: "neg".into(),
                partitions: -3,
                replication_factor: -1,
                min_insync_replicas: -1,
                validate_only: false,
                configs: Vec::new(),
            }),
            code: ErrorCode::InvalidPartitions,
        },
        Row {
            what: "partition count above topic_partitions_max",
            to_coordinator: true,
            req: Request::CreateTopic(CreateTopicRequest {
                name: "wide".into(),
                partitions: 1001,
                replication_factor: -1,
                min_insync_replicas: -1,
                validate_only: false,
                configs: Vec::new(),
            }),
            code: ErrorCode::InvalidPartitions,
        },
        Row {
            what: "min.insync.replicas above the replication factor",
            to_coordinator: true,
            req: Request::CreateTopic(CreateTopicRequest {
                name: "strict".into(),
                partitions: 1,
                replication_factor: 1,
                min_insync_replicas: 2,
                validate_only: false,
                configs: Vec::new(),
            }),
            code: ErrorCode::InvalidConfig,
        },
        Row {
            what: "replication factor above the brokers",
            to_coordinator: true,
            req: Request::CreateTopic(CreateTopicRequest {
                name: "rf".into(),
                partitions: 1,
                replication_factor: 5,
                min_insync_replicas: -1,
                validate_only: false,
                configs: Vec::new(),
            }),
            code: ErrorCode::InvalidReplicationFactor,
        },
        Row {
            what: "unknown topic without auto-create",
            to_coordinator: true,
            req: Request::Metadata(MetadataRequest { topics: vec!["missing".into()], allow_auto_create: false }),
            code: ErrorCode::UnknownTopicOrPartition,
        },
        Row {
            what: "empty transactional id",
            to_coordinator: true,
            req: Request::InitProducerId(InitProducerIdRequest {
                transactional_id: Some("".into()),
                transaction_timeout_ms: 1000,
                producer_id: -1,
                producer_epoch: -1,
                principal: String::new(),
            }),
            code: ErrorCode::InvalidRequest,
        },
        Row {
            what: "oversized transactional id",
            to_coordinator: true,
            req: Request::InitProducerId(InitProducerIdRequest {
                transactional_id: Some("t".repeat(300)),
                transaction_timeout_ms: 1000,
                producer_id: -1,
                producer_epoch: -1,
                principal: String::new(),
            }),
            code: ErrorCode::InvalidRequest,
        },
        Row {
            what: "transaction timeout out of range",
            to_coordinator: true,
            req: Request::InitProducerId(InitProducerIdRequest {
                transactional_id: Some("x".into()),
                transaction_timeout_ms: -5,
                producer_id: -1,
                producer_epoch: -1,
                principal: String::new(),
            }),
            code: ErrorCode::InvalidTransactionTimeout,
        },
        Row {
            what: "negative partition",
            to_coordinator: false,
            req: produce(-1, ACKS_ALL, batch(p.producer_id(), p.epoch(), 0)),
            code: ErrorCode::UnknownTopicOrPartition,
        },
        Row {
            what: "partition out of range",
            to_coordinator: false,
            req: produce(7, ACKS_ALL, batch(p.producer_id(), p.epoch(), 0)),
            code: ErrorCode::NotLeaderOrFollower,
        },
        Row {
            what: "acks neither all nor leader",
            to_coordinator: false,
            req: produce(0, 0, batch(p.producer_id(), p.epoch(), 0)),
            code: ErrorCode::InvalidRequiredAcks,
        },
        Row {
            what: "batch whose length field lies",
            to_coordinator: false,
            req: produce(0, ACKS_ALL, Bytes::from(lying_length)),
            code: ErrorCode::CorruptMessage,
        },
        Row {
            what: "batch whose CRC lies",
            to_coordinator: false,
            req: produce(0, ACKS_ALL, Bytes::from(bad_crc)),
            code: ErrorCode::CorruptMessage,
        },
        Row {
            what: "batch above batch_bytes_max",
            to_coordinator: false,
            req: produce(
                0,
                ACKS_ALL,
                build_batch(
                    ProducerStamp { producer_id: p.producer_id(), producer_epoch: p.epoch(), base_sequence: 0 },
                    false,
                    0,
                    &[Bytes::from(vec![7u8; 2 * 1024 * 1024])],
                ),
            ),
            code: ErrorCode::MessageTooLarge,
        },
        Row {
            what: "batch too small to be one",
            to_coordinator: false,
            req: produce(0, ACKS_ALL, Bytes::from_static(b"tiny")),
            code: ErrorCode::CorruptMessage,
        },
        Row {
            what: "transactional batch without a producer id",
            to_coordinator: false,
            req: produce(0, ACKS_ALL, stamped(true, -1, now_ms)),
            code: ErrorCode::InvalidRecord,
        },
        Row {
            what: "one record claiming 2^31 offsets (last offset delta)",
            to_coordinator: false,
            req: produce(0, ACKS_ALL, lie(23, &i32::MAX.to_be_bytes())),
            code: ErrorCode::InvalidRecord,
        },
        Row {
            what: "a record count of one for two records",
            to_coordinator: false,
            req: produce(0, ACKS_ALL, {
                let one = lie(57, &1i32.to_be_bytes());
                let mut b = one.to_vec();
                b[23..27].copy_from_slice(&0i32.to_be_bytes());
                let crc = protocol::batch::crc32c(&b[21..]);
                b[17..21].copy_from_slice(&crc.to_be_bytes());
                Bytes::from(b)
            }),
            code: ErrorCode::InvalidRecord,
        },
        Row {
            what: "max timestamp i64::MAX over records of now",
            to_coordinator: false,
            req: produce(0, ACKS_ALL, lie(35, &i64::MAX.to_be_bytes())),
            code: ErrorCode::InvalidRecord,
        },
        Row {
            what: "record timestamps two hours ahead",
            to_coordinator: false,
            req: produce(0, ACKS_ALL, stamped(false, p.producer_id(), now_ms + 2 * 3_600_000)),
            code: ErrorCode::InvalidTimestamp,
        },
        Row {
            what: "a batch claiming log-append time",
            to_coordinator: false,
            req: produce(0, ACKS_ALL, lie(22, &[0x08])),
            code: ErrorCode::InvalidTimestamp,
        },
        Row {
            what: "producer id never granted",
            to_coordinator: false,
            req: produce(0, ACKS_ALL, batch(9_999, 0, 0)),
            code: ErrorCode::UnknownProducerId,
        },
        Row {
            // Producer id 1 is the healthy producer's ("before": the first transactional id gets
            // the first odd id), which wrote sequence 0 here.
            what: "sequence gap",
            to_coordinator: false,
            req: produce(0, ACKS_ALL, batch(1, 0, 42)),
            code: ErrorCode::OutOfOrderSequenceNumber,
        },
        Row {
            what: "a sequence continued by a producer id the partition holds nothing of",
            to_coordinator: false,
            req: produce(0, ACKS_ALL, batch(p.producer_id(), p.epoch(), 42)),
            code: ErrorCode::UnknownProducerId,
        },
        Row {
            what: "epoch never granted",
            to_coordinator: false,
            req: produce(0, ACKS_ALL, batch(p.producer_id(), p.epoch() + 5, 0)),
            code: ErrorCode::InvalidProducerEpoch,
        },
        Row {
            what: "fetch offset past the end",
            to_coordinator: false,
            req: Request::Fetch(FetchRequest {
                topic: "t".into(),
                partition: 0,
                leader_epoch: -1,
                offset: 1_000,
                max_bytes: 1024,
                isolation: READ_UNCOMMITTED,
            }),
            code: ErrorCode::OffsetOutOfRange,
        },
        Row {
            what: "negative fetch offset",
            to_coordinator: false,
            req: Request::Fetch(FetchRequest {
                topic: "t".into(),
                partition: 0,
                leader_epoch: -1,
                offset: -4,
                max_bytes: 1024,
                isolation: READ_UNCOMMITTED,
            }),
            code: ErrorCode::OffsetOutOfRange,
        },
    ];
    // An admin that holds the cluster secret (creating topics needs it in a secured cluster).
    let coordinator = Connection::connect_as(&c.coordinator_addr, c.secret.as_ref(), "admin").await.unwrap();
    let broker = Connection::connect(&c.broker_addrs[0]).await.unwrap();
    for row in rows {
        let conn = if row.to_coordinator { &coordinator } else { &broker };
        let resp = conn.call(row.req).await.unwrap_or_else(|e| panic!("{}: {e}", row.what));
        let status = match &resp {
            Response::Metadata(m) => m.topics[0].status.clone(),
            other => other.status().clone(),
        };
        assert_eq!(status.code, row.code, "{}: {status}", row.what);
        assert!(!status.message.is_empty(), "{}: the error says what happened", row.what);
    }
    // Nothing was lost and nothing bad was stored; a well-behaved client still works.
    let next = healthy(&c, "after").await;
    assert_eq!(values(&c).await, ["before", "after"]);
    assert!(next > first);
    c.shutdown().await;
}
