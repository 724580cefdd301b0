//! Issue 29, "a producer id belongs to its principal": under the authorizer a write under
//! someone else's producer id is refused, whatever epoch it carries (Kafka authorizes only the
//! transactional id, so with WRITE on a topic anyone can send epoch + 1, sequence 0 under
//! another producer's id and fence it there). The negative case runs the same forged write on
//! a cluster without the authorizer: it lands, and the victim is fenced.

use std::time::{Duration, Instant};

use bytes::Bytes;
use epochfence::{LocalCluster, LocalOptions};
use producer::kafka::{forged_write, KafkaProducer};
use producer::{ClientConfig, ClientError, ProducerConfig, SaslLogin};
use protocol::acl::{AclBinding, Operation, PatternType, Permission, ResourceType, CLUSTER_NAME};
use protocol::sasl::{Mechanism, ScramMechanism};
use protocol::ErrorCode;

fn users() -> Vec<(String, String)> {
    ["admin", "alice", "mallory"].iter().map(|u| (u.to_string(), format!("{u}-pw"))).collect()
}

fn login(user: &str) -> ClientConfig {
    let sasl = SaslLogin {
        mechanism: Mechanism::Scram(ScramMechanism::Sha512),
        user: user.into(),
        password: format!("{user}-pw"),
    };
    ClientConfig { sasl: Some(sasl), ..ClientConfig::default() }
}

fn allow(principal: &str, resource_type: ResourceType, name: &str, operation: Operation) -> AclBinding {
    AclBinding {
        resource_type,
        name: name.into(),
        pattern: PatternType::Literal,
        principal: principal.into(),
        host: "*".into(),
        operation,
        permission: Permission::Allow,
    }
}

async fn cluster(authorizer: bool) -> LocalCluster {
    let authorizer = authorizer.then(|| coordinator::acls::AuthorizerConfig {
        super_users: vec!["User:admin".into()],
        allow_everyone_if_no_acl_found: false,
    });
    let c = LocalCluster::start(LocalOptions {
        kafka: true,
        secured: true,
        sasl_users: users(),
        authorizer: authorizer.clone(),
        ..LocalOptions::default()
    })
    .await
    .unwrap();
    c.create_topic("t", 1).await.unwrap();
    if authorizer.is_some() {
        let create = vec![
            allow("User:alice", ResourceType::Topic, "t", Operation::Write),
            allow("User:alice", ResourceType::TransactionalId, "payments", Operation::Write),
            allow("User:mallory", ResourceType::Topic, "t", Operation::Write),
            allow("User:mallory", ResourceType::Cluster, CLUSTER_NAME, Operation::IdempotentWrite),
        ];
        let r = c.admin().acls(protocol::AclsRequest { create, delete: Vec::new() }).await.unwrap();
        assert!(r.created.iter().all(|s| s.is_ok()), "{r:?}");
    }
    c
}

/// An idempotent producer for `user`, once the brokers hold the ACLs that let it start
/// (they hear of a change within a heartbeat).
async fn idempotent(c: &LocalCluster, user: &str) -> KafkaProducer {
    idempotent_as(c, user, login(user)).await
}

/// [`idempotent`], the client logging in as `client` says.
async fn idempotent_as(c: &LocalCluster, user: &str, client: ClientConfig) -> KafkaProducer {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let config = ProducerConfig { client: client.clone(), ..ProducerConfig::idempotent() };
        match KafkaProducer::init(&c.kafka_bootstrap(), config).await {
            Ok(p) => return p,
            Err(e) if Instant::now() < deadline => {
                assert!(e.to_string().contains("AUTHORIZATION_FAILED"), "{user}: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("{user} never got a producer id: {e}"),
        }
    }
}

fn refused_with(r: Result<i64, ClientError>) -> ErrorCode {
    match r {
        Err(ClientError::Refused { status, .. }) => status.code,
        other => panic!("the forged write was not refused: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_id_belongs_to_its_principal_under_the_authorizer() {
    let c = cluster(true).await;
    let bootstrap = c.kafka_bootstrap();
    let mut alice = idempotent(&c, "alice").await;
    alice.send("t", 0, Bytes::from_static(b"alice-0")).await.unwrap();
    let (pid, epoch) = (alice.producer_id(), alice.epoch());

    // mallory may write to t, but not under alice's producer id: not at her epoch, nor a bump.
    for e in [epoch, epoch + 1] {
        let forged = forged_write(&bootstrap, login("mallory"), "t", 0, (pid, e), Bytes::from_static(b"forged")).await;
        assert_eq!(refused_with(forged), ErrorCode::ClusterAuthorizationFailed, "epoch {e}");
    }
    // alice is not fenced: her next write lands.
    alice.send("t", 0, Bytes::from_static(b"alice-1")).await.unwrap();

    // mallory's own producer id is hers to use (the check refuses others' ids, not writes).
    let mallory = idempotent(&c, "mallory").await;
    let own = (mallory.producer_id(), mallory.epoch() + 1);
    forged_write(&bootstrap, login("mallory"), "t", 0, own, Bytes::from_static(b"own")).await.unwrap();

    // A transactional id's producer id: TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
    let config = ProducerConfig { client: login("alice"), ..ProducerConfig::transactional("payments") };
    let tx = KafkaProducer::init(&bootstrap, config).await.unwrap();
    let forged =
        forged_write(&bootstrap, login("mallory"), "t", 0, (tx.producer_id(), tx.epoch() + 1), Bytes::new()).await;
    assert_eq!(refused_with(forged), ErrorCode::TransactionalIdAuthorizationFailed);
    // A super user may (an operator's tools).
    forged_write(&bootstrap, login("admin"), "t", 0, (pid, epoch + 1), Bytes::from_static(b"admin")).await.unwrap();
    c.shutdown().await;
}

/// The negative case: without the authorizer the same forged bump lands and fences alice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_authorizer_a_forged_bump_fences_its_victim() {
    let c = cluster(false).await;
    let bootstrap = c.kafka_bootstrap();
    let mut alice = idempotent(&c, "alice").await;
    alice.send("t", 0, Bytes::from_static(b"alice-0")).await.unwrap();
    let (pid, epoch) = (alice.producer_id(), alice.epoch());
    forged_write(&bootstrap, login("mallory"), "t", 0, (pid, epoch + 1), Bytes::from_static(b"forged")).await.unwrap();
    let err = alice.send("t", 0, Bytes::from_static(b"alice-1")).await.unwrap_err();
    assert!(err.to_string().contains("INVALID_PRODUCER_EPOCH") || err.is_fenced(), "alice was not fenced: {err}");
    c.shutdown().await;
}

/// Metadata under the authorizer: a named topic the principal may not describe is answered
/// TOPIC_AUTHORIZATION_FAILED and an all-topics answer leaves it out; auto-creation creates the
/// names the principal may create, and answers TOPIC_AUTHORIZATION_FAILED for a missing one it
/// may describe but not create, in the same request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_hides_and_creates_by_the_acls() {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::{MetadataRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let c = cluster(true).await;
    c.create_topic("secret", 1).await.unwrap();
    let mut create = vec![allow("User:alice", ResourceType::Topic, "missing", Operation::Write)];
    create.push(AclBinding {
        pattern: PatternType::Prefixed,
        // ALL: describing it too (CREATE alone does not let a principal see a topic).
        ..allow("User:alice", ResourceType::Topic, "alice-", Operation::All)
    });
    let r = c.admin().acls(protocol::AclsRequest { create, delete: Vec::new() }).await.unwrap();
    assert!(r.created.iter().all(|s| s.is_ok()));
    let conn =
        producer::kafka::KafkaConnection::connect(&c.kafka_addrs[0], None, Duration::from_secs(10)).await.unwrap();
    conn.authenticate(login("alice").sasl.as_ref().unwrap(), Duration::from_secs(10)).await.unwrap();
    let topic =
        |n: &'static str| MetadataRequestTopic::default().with_name(Some(TopicName(StrBytes::from_static_str(n))));
    let named = MetadataRequest::default()
        .with_topics(Some(vec![topic("secret"), topic("missing"), topic("alice-new")]))
        .with_allow_auto_topic_creation(true);
    // The brokers hear of the ACLs within a heartbeat.
    let deadline = Instant::now() + Duration::from_secs(20);
    let codes = loop {
        let r = conn.call(&named, 12).await.unwrap();
        let codes: Vec<(String, i16)> =
            r.topics.iter().map(|t| (t.name.as_ref().unwrap().to_string(), t.error_code)).collect();
        if codes.iter().any(|(n, code)| n == "alice-new" && *code != 29) || Instant::now() > deadline {
            break codes;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let code = |name: &str| codes.iter().find(|(n, _)| n == name).map(|(_, c)| *c);
    assert_eq!(code("secret"), Some(29), "{codes:?}");
    assert_eq!(code("missing"), Some(29), "may describe, may not create: {codes:?}");
    assert!(matches!(code("alice-new"), Some(0) | Some(5)), "created (LEADER_NOT_AVAILABLE at first): {codes:?}");
    let all = conn.call(&MetadataRequest::default().with_topics(None), 12).await.unwrap();
    let listed: Vec<String> = all.topics.iter().map(|t| t.name.as_ref().unwrap().to_string()).collect();
    assert!(listed.contains(&"alice-new".to_string()) && !listed.contains(&"secret".to_string()), "{listed:?}");
    assert!(!listed.contains(&"missing".to_string()), "missing was not created: {listed:?}");

    // By topic id (v12): the id of a topic alice may not describe is answered
    // TOPIC_AUTHORIZATION_FAILED with the id and no name; an id no topic has UNKNOWN_TOPIC_ID.
    let admin =
        producer::kafka::KafkaConnection::connect(&c.kafka_addrs[0], None, Duration::from_secs(10)).await.unwrap();
    admin.authenticate(login("admin").sasl.as_ref().unwrap(), Duration::from_secs(10)).await.unwrap();
    let by_name = MetadataRequest::default().with_topics(Some(vec![topic("secret"), topic("alice-new")]));
    let ids: Vec<_> = admin.call(&by_name, 12).await.unwrap().topics.iter().map(|t| t.topic_id).collect();
    assert!(ids.iter().all(|id| !id.is_nil()), "{ids:?}");
    let nowhere = uuid::Uuid::from_u128(7 << 100);
    let by_id = |id| MetadataRequestTopic::default().with_name(None).with_topic_id(id);
    let asked = MetadataRequest::default().with_topics(Some(vec![by_id(ids[0]), by_id(ids[1]), by_id(nowhere)]));
    let r = conn.call(&asked, 12).await.unwrap();
    let got: Vec<(Option<String>, uuid::Uuid, i16)> =
        r.topics.iter().map(|t| (t.name.as_ref().map(|n| n.to_string()), t.topic_id, t.error_code)).collect();
    assert!(got.contains(&(None, ids[0], 29)), "{got:?}");
    assert!(got.contains(&(Some("alice-new".into()), ids[1], 0)), "{got:?}");
    assert!(got.contains(&(None, nowhere, 100)), "{got:?}");
    assert_eq!(got.len(), 3, "{got:?}");
    c.shutdown().await;
}

/// KIP-848 (ConsumerGroupHeartbeat) as Kafka authorizes it: READ on the group, then DESCRIBE
/// on every subscribed topic; the refusals are codes librdkafka reports (29, 30), never turned
/// into a retriable one, and nothing of the refused member joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kip848_heartbeat_needs_read_on_the_group_and_describe_on_its_topics() {
    use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, GroupId, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let c = cluster(true).await;
    c.create_topic("u", 1).await.unwrap();
    let conn =
        producer::kafka::KafkaConnection::connect(&c.kafka_addrs[0], None, Duration::from_secs(10)).await.unwrap();
    conn.authenticate(login("alice").sasl.as_ref().unwrap(), Duration::from_secs(10)).await.unwrap();
    // Alice may write t (so describe it), not u.
    let topics = ["t", "u"].map(|t| TopicName(StrBytes::from_static_str(t))).to_vec();
    let join = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("readers")))
        .with_member_id(StrBytes::from_static_str("alice-1"))
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(topics))
        .with_topic_partitions(Some(Vec::new()));
    assert_eq!(conn.call(&join, 1).await.unwrap().error_code, 30, "no READ on the group");
    let grant = |acl| async {
        let r = c.admin().acls(protocol::AclsRequest { create: vec![acl], delete: Vec::new() }).await.unwrap();
        assert!(r.created.iter().all(|s| s.is_ok()), "{r:?}");
    };
    grant(allow("User:alice", ResourceType::Group, "readers", Operation::Read)).await;
    // The brokers hear of the ACLs within a heartbeat: READ on the group, not yet DESCRIBE on u.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let code = conn.call(&join, 1).await.unwrap().error_code;
        if code != 30 || Instant::now() > deadline {
            assert_eq!(code, 29, "no DESCRIBE on the subscribed topic");
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    grant(allow("User:alice", ResourceType::Topic, "u", Operation::Describe)).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let joined = loop {
        let r = conn.call(&join, 1).await.unwrap();
        if r.error_code != 29 || Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!((joined.error_code, joined.member_epoch), (0, 1), "{joined:?}");
    c.shutdown().await;
}

/// Mutual TLS (the Kafka listener under SSL requiring client certificates): a certificate's
/// subject, mapped by `--ssl-principal-mapping-rules`, is the principal the ACLs decide by.
/// Alice's certificate may write where her ACLs say; bob's, from the same CA, is refused
/// CLUSTER_AUTHORIZATION_FAILED (he is not alice); a certificate no rule maps, and a client
/// without one, are not served at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_names_the_principal_the_acls_decide_by() {
    use producer::kafka::KafkaConnection;
    let c = LocalCluster::start(LocalOptions {
        kafka: true,
        secured: true,
        tls: true,
        kafka_client_certificates: vec!["alice".into(), "bob".into(), "carol".into()],
        ssl_principal_mapping_rules: Some("RULE:^CN=(alice|bob),OU=clients,O=epochfence$/$1/".into()),
        authorizer: Some(coordinator::acls::AuthorizerConfig {
            super_users: Vec::new(),
            allow_everyone_if_no_acl_found: false,
        }),
        ..LocalOptions::default()
    })
    .await
    .unwrap();
    c.create_topic("t", 1).await.unwrap();
    let create = vec![
        allow("User:alice", ResourceType::Topic, "t", Operation::Write),
        allow("User:alice", ResourceType::Cluster, CLUSTER_NAME, Operation::IdempotentWrite),
    ];
    let r = c.admin().acls(protocol::AclsRequest { create, delete: Vec::new() }).await.unwrap();
    assert!(r.created.iter().all(|s| s.is_ok()), "{r:?}");
    let ca = c.ca_pem.clone().unwrap();
    let tls_of = |name: &str| {
        let (_, cert, key) = c.client_certificates.iter().find(|(n, _, _)| n == name).unwrap();
        net::ClientTls::with_certificate(ca.as_bytes(), cert.as_bytes(), key.as_bytes()).unwrap()
    };
    let as_ = |name: &str| ClientConfig { tls: Some(tls_of(name)), ..ClientConfig::default() };

    let mut alice = idempotent_as(&c, "alice", as_("alice")).await;
    alice.send("t", 0, Bytes::from_static(b"by certificate")).await.unwrap();
    let config = ProducerConfig { client: as_("bob"), ..ProducerConfig::idempotent() };
    let err = KafkaProducer::init(&c.kafka_bootstrap(), config).await.err().expect("bob was given a producer id");
    assert!(err.to_string().contains("CLUSTER_AUTHORIZATION_FAILED"), "{err}");

    // Carol's certificate is the CA's, but no rule names her: nothing is served.
    let t = Duration::from_secs(5);
    let carol = tls_of("carol");
    assert!(KafkaConnection::connect(&c.kafka_addrs[0], Some(&carol), t).await.is_err());
    // Without a certificate the TLS handshake fails.
    let anonymous = net::ClientTls::new(ca.as_bytes()).unwrap();
    assert!(KafkaConnection::connect(&c.kafka_addrs[0], Some(&anonymous), t).await.is_err());
    // The broker's own listener (members, the project's clients) takes no client certificates.
    c.admin().describe().await.unwrap();
    c.shutdown().await;
}

/// The own protocol's clients log in too (SCRAM, SaslLogin) and pass the checks Kafka's pass,
/// the producer-id rule included: without a login nothing is served under the authorizer;
/// alice runs a transaction as `payments`; mallory, logged in with WRITE on `t` and on her own
/// transactional id, can neither initialise `payments` nor write under alice's producer id;
/// the super user administers without the cluster secret, mallory may not. The negative case
/// (no authorizer): mallory's init fences alice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_protocol_clients_log_in_and_the_acls_decide_what_they_may_do() {
    use producer::{Admin, Client, Producer};
    use protocol::batch::{build_batch, ProducerStamp};
    use protocol::{ProduceRequest, Request};
    let code_of = |r: Result<(), ClientError>| match r {
        Err(ClientError::Refused { status, .. }) => status.code,
        other => panic!("not refused: {other:?}"),
    };
    for authorizer in [true, false] {
        let c = cluster(authorizer).await;
        let own = |user: &str| ClientConfig { sasl: login(user).sasl, ..c.client_config() };
        let transactional =
            |user: &str| ProducerConfig { client: own(user), ..ProducerConfig::transactional("payments") };
        if !authorizer {
            // The negative case: any logged-in client may initialise any transactional id.
            let mut alice = Producer::init(&c.coordinator_addr, transactional("alice")).await.unwrap();
            alice.begin().unwrap();
            alice.send("t", 0, Bytes::from_static(b"alice")).await.unwrap();
            Producer::init(&c.coordinator_addr, transactional("mallory")).await.unwrap();
            let err = alice.commit().await.unwrap_err();
            assert!(err.is_fenced(), "without the authorizer mallory fences alice: {err}");
            c.shutdown().await;
            continue;
        }
        let mallory_own = allow("User:mallory", ResourceType::TransactionalId, "mallory-own", Operation::Write);
        let r = c.admin().acls(protocol::AclsRequest { create: vec![mallory_own], delete: Vec::new() }).await.unwrap();
        assert!(r.created.iter().all(|s| s.is_ok()), "{r:?}");

        // No login: refused, saying how to log in.
        let anonymous = ProducerConfig { client: c.client_config(), ..ProducerConfig::idempotent() };
        match Producer::init(&c.coordinator_addr, anonymous).await {
            Err(ClientError::Refused { status, .. }) => {
                assert_eq!(status.code, ErrorCode::ClusterAuthorizationFailed);
                assert!(status.message.contains("logs in first"), "{status}");
            }
            other => panic!("served without a login: {:?}", other.map(|p| p.producer_id())),
        }
        // A wrong password, and PLAIN (a Kafka listener's only): no login.
        let mut wrong = own("alice");
        wrong.sasl.as_mut().unwrap().password = "guess".into();
        assert_eq!(
            code_of(Admin::new(&c.coordinator_addr, wrong).describe().await.map(drop)),
            ErrorCode::SaslAuthenticationFailed
        );
        let mut plain = own("alice");
        plain.sasl.as_mut().unwrap().mechanism = Mechanism::Plain;
        let err = Admin::new(&c.coordinator_addr, plain).describe().await.unwrap_err();
        assert!(err.to_string().contains("SCRAM-SHA-512"), "says what to use: {err}");

        // alice's transaction (the brokers hear of the ACLs within a heartbeat). A send refused
        // before then leaves the transaction unable to commit, as it should: abort, run it again.
        let mut alice = Producer::init(&c.coordinator_addr, transactional("alice")).await.unwrap();
        alice.begin().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while let Err(e) = alice.send("t", 0, Bytes::from_static(b"alice-0")).await {
            assert!(e.to_string().contains("AUTHORIZATION_FAILED") && Instant::now() < deadline, "{e}");
            alice.abort().await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            alice.begin().unwrap();
        }
        let (pid, epoch) = (alice.producer_id(), alice.epoch());

        // mallory may not initialise payments...
        let err = Producer::init(&c.coordinator_addr, transactional("mallory")).await.map(drop);
        assert_eq!(code_of(err), ErrorCode::TransactionalIdAuthorizationFailed);
        // ...nor write under its producer id, whatever transactional id she names.
        let mut client = Client::new(&c.coordinator_addr, own("mallory"));
        let leader = client.leader_or_refresh("t", 0).await.unwrap();
        for (tid, refused) in [
            (Some("payments"), ErrorCode::TransactionalIdAuthorizationFailed),
            (Some("mallory-own"), ErrorCode::TransactionalIdAuthorizationFailed),
            (None, ErrorCode::TransactionalIdAuthorizationFailed),
        ] {
            let stamp = ProducerStamp { producer_id: pid, producer_epoch: epoch + 1, base_sequence: 0 };
            let req = Request::Produce(ProduceRequest {
                topic: "t".into(),
                partition: 0,
                leader_epoch: -1,
                acks: -1,
                transactional_id: tid.map(str::to_string),
                records: build_batch(stamp, tid.is_some(), 0, &[Bytes::from_static(b"forged")]),
            });
            match client.call_broker(&leader.addr, req).await {
                Err(net::NetError::Refused { status, .. }) => assert_eq!(status.code, refused, "{tid:?}: {status}"),
                other => panic!("mallory's write under alice's producer id ({tid:?}) was not refused: {other:?}"),
            }
        }
        // alice is not fenced.
        alice.commit().await.unwrap();
        alice.begin().unwrap();
        alice.send("t", 0, Bytes::from_static(b"alice-1")).await.unwrap();
        alice.commit().await.unwrap();
        // Reading needs READ on the topic, which nobody here holds but the super user.
        let read = producer::Consumer::new(&c.coordinator_addr, own("mallory")).read_to_end("t", 0, 0).await;
        assert_eq!(code_of(read.map(drop)), ErrorCode::TopicAuthorizationFailed);
        let records = producer::Consumer::new(&c.coordinator_addr, own("admin")).read_to_end("t", 0, 0).await.unwrap();
        let values: Vec<&[u8]> = records.iter().map(|r| r.value.as_ref()).collect();
        assert!(values.contains(&&b"alice-1"[..]) && !values.contains(&&b"forged"[..]), "{values:?}");

        // The super user administers without the cluster secret; mallory may not.
        Admin::new(&c.coordinator_addr, own("admin")).create_topic("u", 1).await.unwrap();
        let mut mallory = Admin::new(&c.coordinator_addr, own("mallory"));
        assert_eq!(code_of(mallory.create_topic("v", 1).await), ErrorCode::TopicAuthorizationFailed);
        assert_eq!(code_of(mallory.describe().await.map(drop)), ErrorCode::ClusterAuthorizationFailed);
        c.shutdown().await;
    }
}
