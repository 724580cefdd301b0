//! `--mode logins`: what SASL logins cost a broker, and how fast an ACL's removal reaches it
//! (issue 29's measurements; docs/BENCHMARKS.md, "Logins").
//!
//! - **Logins per second**: `--clients` concurrent clients each open a connection to a broker's
//!   Kafka listener (SASL_PLAINTEXT), send ApiVersions, SaslHandshake and SCRAM-SHA-512's two
//!   SaslAuthenticate rounds, and close it, for `--duration-ms`. The clients reuse their salted
//!   password (a real client pays PBKDF2 per login, on its own machine), so what is measured is
//!   the broker's side on this machine.
//! - **A storm of failing logins**: idempotent producers through the Kafka listener (as `--mode
//!   authorizer` runs them, the authorizer off) while `--storm` clients fail logins on other
//!   connections as fast as the broker answers them, PLAIN with a wrong password (the broker
//!   runs PBKDF2 for each) and SCRAM with a wrong proof, against the same producers without a
//!   storm; paired runs, alternating which goes first, as ratios.
//! - **An ACL's removal**: with the authorizer on, a producer writes under an ACL; the ACL is
//!   deleted (DeleteAcls answered: it is journaled) and the producer writes until a write is
//!   refused; the time from the answer to the first refusal, `--repeat` times (at least 10), the
//!   removal at a random point of the broker's heartbeat cycle.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use epochfence::{LocalCluster, LocalOptions};
use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
use kafka_protocol::protocol::StrBytes;
use producer::kafka::KafkaConnection;
use protocol::sasl::{PlainLogin, ScramClient, ScramMechanism};

use super::{Args, BatchTemplate, Figures};

const USER: &str = "bench";
const PASSWORD: &str = "bench-pw";
const T: Duration = Duration::from_secs(10);
/// The broker's default `--heartbeat-ms`.
const HEARTBEAT_MS: u64 = 300;

/// A salted password learnt at the first login, reused by the next ones.
type SaltedCache = Mutex<Option<(Vec<u8>, u32, Vec<u8>)>>;

/// How a storm client fails its logins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Storm {
    /// PLAIN with a wrong password: the broker checks it with PBKDF2.
    Plain,
    /// SCRAM-SHA-512 with a wrong proof.
    Scram,
}

impl Storm {
    fn name(self) -> &'static str {
        match self {
            Storm::Plain => "PLAIN, wrong password",
            Storm::Scram => "SCRAM-SHA-512, wrong proof",
        }
    }
}

async fn authenticate_round(conn: &KafkaConnection, bytes: Vec<u8>) -> Result<(i16, Bytes), String> {
    let req = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(bytes));
    let r = tokio::time::timeout(T, conn.call(&req, 1)).await.map_err(|_| "timed out".to_string())?;
    let r = r.map_err(|e| e.to_string())?;
    Ok((r.error_code, r.auth_bytes))
}

async fn handshake(conn: &KafkaConnection, mechanism: &'static str) -> Result<(), String> {
    let req = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism));
    let r = tokio::time::timeout(T, conn.call(&req, 1)).await.map_err(|_| "timed out".to_string())?;
    match r.map_err(|e| e.to_string())?.error_code {
        0 => Ok(()),
        code => Err(format!("SaslHandshake refused with {code}")),
    }
}

/// One SCRAM-SHA-512 login on a new connection to `addr`: `Ok(true)` if it succeeded.
/// `wrong_proof`: send a proof made from another password.
async fn scram_login(addr: &str, cache: &SaltedCache, wrong_proof: bool) -> Result<bool, String> {
    let conn = KafkaConnection::connect(addr, None, T).await.map_err(|e| e.to_string())?;
    handshake(&conn, "SCRAM-SHA-512").await?;
    let nonce = net::client::scram_nonce();
    // A storm client's cache holds the wrong password's salted form: its proofs are as wrong as
    // any, and it pays PBKDF2 once, not per attempt.
    let password = if wrong_proof { "not-the-password" } else { PASSWORD };
    let (client, first) = ScramClient::new(ScramMechanism::Sha512, USER, password.as_bytes(), &nonce);
    let mut client = match cache.lock().unwrap_or_else(|p| p.into_inner()).clone() {
        Some((salt, iterations, salted)) => client.with_salted_password(salt, iterations, salted),
        None => client,
    };
    let (code, server_first) = authenticate_round(&conn, first).await?;
    if code != 0 {
        return Ok(false);
    }
    let last = client.server_first(&server_first).map_err(|e| e.to_string())?;
    {
        let mut cached = cache.lock().unwrap_or_else(|p| p.into_inner());
        if cached.is_none() {
            *cached = client.salted_password();
        }
    }
    let (code, server_final) = authenticate_round(&conn, last).await?;
    Ok(code == 0 && client.server_final(&server_final).is_ok())
}

/// One PLAIN login with a wrong password on a new connection: `Ok(true)` if it (wrongly)
/// succeeded.
async fn plain_wrong_login(addr: &str) -> Result<bool, String> {
    let conn = KafkaConnection::connect(addr, None, T).await.map_err(|e| e.to_string())?;
    handshake(&conn, "PLAIN").await?;
    let (code, _) = authenticate_round(&conn, PlainLogin::encode(USER, b"not-the-password")).await?;
    Ok(code == 0)
}

/// Clients failing logins against `addr` until `stop`: how many attempts were answered.
pub(super) fn start_storm(addr: String, kind: Storm, clients: usize, stop: Arc<AtomicBool>) -> Arc<AtomicU64> {
    let attempts = Arc::new(AtomicU64::new(0));
    let cache = Arc::new(SaltedCache::default());
    for _ in 0..clients {
        let (addr, stop, attempts, cache) = (addr.clone(), stop.clone(), attempts.clone(), cache.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let r = match kind {
                    Storm::Plain => plain_wrong_login(&addr).await,
                    Storm::Scram => scram_login(&addr, &cache, true).await,
                };
                match r {
                    Ok(false) => {
                        attempts.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(true) => panic!("a wrong login succeeded"),
                    // The listener's connection limit or a closing runtime: try again.
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                }
            }
        });
    }
    attempts
}

fn sasl_cluster_options(authorizer: bool) -> LocalOptions {
    // (The storms' clusters are `--mode authorizer`'s, with `--plain-checks-per-s-max`.)
    LocalOptions {
        kafka: true,
        secured: true,
        sasl_users: vec![(USER.into(), PASSWORD.into())],
        authorizer: authorizer.then(coordinator::acls::AuthorizerConfig::default),
        ..LocalOptions::default()
    }
}

/// SCRAM-SHA-512 logins per second from `--clients` clients for `--duration-ms`.
async fn logins_per_second(args: &Args) -> Result<serde_json::Value, String> {
    let c = LocalCluster::start(sasl_cluster_options(false)).await.map_err(|e| e.to_string())?;
    let addr = c.kafka_addrs[0].clone();
    let cache = Arc::new(SaltedCache::default());
    // The first login learns the salted password (and waits for the broker to hold the
    // credentials, which come with its first heartbeat answer).
    let deadline = Instant::now() + Duration::from_secs(20);
    while !scram_login(&addr, &cache, false).await.unwrap_or(false) {
        if Instant::now() > deadline {
            return Err("the broker never took a login".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let duration = Duration::from_millis(if args.duration_ms > 0 { args.duration_ms } else { 10_000 });
    let done = Arc::new(AtomicU64::new(0));
    let cpu_before = super::CpuTimes::now();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.clients {
        let (addr, cache, done) = (addr.clone(), cache.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            while started.elapsed() < duration {
                match scram_login(&addr, &cache, false).await {
                    Ok(true) => {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(false) => return Err("a login was refused".to_string()),
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu = cpu_before.zip(super::CpuTimes::now()).and_then(|(before, after)| before.busy_pct(after));
    c.shutdown().await;
    let logins = done.load(Ordering::Relaxed);
    Ok(serde_json::json!({
        "clients": args.clients, "logins": logins, "seconds": seconds,
        "logins_per_s": logins as f64 / seconds, "cpu_busy_pct": cpu,
    }))
}

/// The time from a DeleteAcls answer to the first write refused, `repeat` times, in ms.
async fn acl_removal(args: &Args) -> Result<Vec<f64>, String> {
    use producer::kafka::KafkaProducer;
    use producer::{ClientConfig, ProducerConfig};
    use protocol::acl::{AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType, CLUSTER_NAME};
    // The broker's default --heartbeat-ms: a removal reaches it with a heartbeat answer.
    let opts = LocalOptions { heartbeat_ms: HEARTBEAT_MS, ..sasl_cluster_options(true) };
    let c = LocalCluster::start(opts).await.map_err(|e| e.to_string())?;
    c.create_topic("bench", 1).await.map_err(|e| e.to_string())?;
    let binding = |resource_type, name: &str, operation| AclBinding {
        resource_type,
        name: name.into(),
        pattern: PatternType::Literal,
        principal: format!("User:{USER}"),
        host: "*".into(),
        operation,
        permission: Permission::Allow,
    };
    let write = binding(ResourceType::Topic, "bench", Operation::Write);
    let idempotent = binding(ResourceType::Cluster, CLUSTER_NAME, Operation::IdempotentWrite);
    let acls = |create: Vec<AclBinding>, delete: Vec<AclFilter>| protocol::AclsRequest { create, delete };
    c.admin().acls(acls(vec![idempotent, write.clone()], Vec::new())).await.map_err(|e| e.to_string())?;
    let login = producer::SaslLogin {
        mechanism: protocol::sasl::Mechanism::Scram(ScramMechanism::Sha512),
        user: USER.into(),
        password: PASSWORD.into(),
    };
    let client = ClientConfig { sasl: Some(login), ..c.client_config() };
    let mut producer = None;
    for _ in 0..1000 {
        let pc = ProducerConfig { client: client.clone(), ..ProducerConfig::idempotent() };
        if let Ok(p) = KafkaProducer::init(&c.kafka_bootstrap(), pc).await {
            producer = Some(p);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut p = producer.ok_or("the producer never started")?;
    let mut took = Vec::new();
    for _ in 0..args.repeat.max(10) {
        // The ACL back, and taken by the broker: a write goes through.
        c.admin().acls(acls(vec![write.clone()], Vec::new())).await.map_err(|e| e.to_string())?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while p.send("bench", 0, Bytes::from_static(b"allowed")).await.is_err() {
            if Instant::now() > deadline {
                return Err("the ACL never took effect".into());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // At a random point of the heartbeat cycle (the write just went through after one).
        let mut r = [0u8; 8];
        getrandom::fill(&mut r).map_err(|e| e.to_string())?;
        tokio::time::sleep(Duration::from_millis(u64::from_le_bytes(r) % HEARTBEAT_MS)).await;
        let filter = AclFilter {
            resource_type: Some(write.resource_type),
            name: Some(write.name.clone()),
            pattern: protocol::acl::PatternFilter::Exactly(write.pattern),
            principal: Some(write.principal.clone()),
            host: Some(write.host.clone()),
            operation: Some(write.operation),
            permission: Some(write.permission),
        };
        c.admin().acls(acls(Vec::new(), vec![filter])).await.map_err(|e| e.to_string())?;
        let removed = Instant::now();
        loop {
            // A refused write is not retried (TOPIC_AUTHORIZATION_FAILED is not retriable).
            if p.send("bench", 0, Bytes::from_static(b"after removal")).await.is_err() {
                break;
            }
            if removed.elapsed() > Duration::from_secs(20) {
                return Err("the ACL's removal never took effect".into());
            }
        }
        took.push(removed.elapsed().as_secs_f64() * 1000.0);
        // A refused idempotent producer is in an unknown sequence state: start a new one.
        let pc = ProducerConfig { client: client.clone(), ..ProducerConfig::idempotent() };
        p = KafkaProducer::init(&c.kafka_bootstrap(), pc).await.map_err(|e| e.to_string())?;
    }
    c.shutdown().await;
    Ok(took)
}

/// `--mode logins`: the three measurements, printed.
pub(super) async fn logins(args: &Args) -> Result<(), String> {
    let rate = logins_per_second(args).await?;
    let template = Arc::new(BatchTemplate::new(args.record_bytes, args.batch_records, false));
    let mut storms = Vec::new();
    for kind in [Storm::Plain, Storm::Scram] {
        let mut ratios = Vec::new();
        let mut attempts_per_s = Vec::new();
        let mut calm_runs = Vec::new();
        let mut storm_runs = Vec::new();
        for rep in 0..args.repeat.max(1) {
            let order = if rep % 2 == 0 { [false, true] } else { [true, false] };
            let mut pair: [Option<Figures>; 2] = [None, None];
            for storm in order {
                let (f, attempts) =
                    super::authorizer_cluster(args, template.clone(), false, storm.then_some(kind)).await?;
                if storm {
                    attempts_per_s.push(attempts as f64 / f.seconds);
                }
                pair[usize::from(storm)] = Some(f);
            }
            let [Some(calm), Some(stormy)] = pair else { unreachable!("both ran") };
            ratios.push(stormy.records_per_s / calm.records_per_s);
            calm_runs.push(calm);
            storm_runs.push(stormy);
        }
        let ratio = super::median_ratio(&mut ratios.clone());
        let attempts = super::median_ratio(&mut attempts_per_s.clone());
        storms.push(serde_json::json!({
            "storm": kind.name(), "storm_clients": args.storm,
            "without_storm": super::median_run(calm_runs), "with_storm": super::median_run(storm_runs),
            "with_over_without": ratio, "each_repeat": ratios, "failed_logins_per_s": attempts,
        }));
    }
    let mut removal = acl_removal(args).await?;
    removal.sort_by(f64::total_cmp);
    let median = removal[removal.len() / 2];
    let max = removal.last().copied().unwrap_or(0.0);
    if args.json {
        let v = serde_json::json!({
            "logins": rate, "storms": storms,
            "acl_removal_ms": {"median": median, "max": max, "each": removal,
                               "heartbeat_ms": HEARTBEAT_MS},
        });
        println!("{}", serde_json::to_string_pretty(&v).expect("json serialises"));
        return Ok(());
    }
    println!(
        "SCRAM-SHA-512 logins: {:.0}/s from {} clients (connect, ApiVersions, handshake, two rounds; machine CPU {}%)",
        rate["logins_per_s"].as_f64().unwrap_or(0.0),
        args.clients,
        rate["cpu_busy_pct"].as_f64().map_or("-".into(), |c| format!("{c:.0}")),
    );
    for s in &storms {
        println!(
            "storm of failing logins ({}, {} clients, {:.0} failed logins/s): producers at {:.1}% of their throughput without it (median of paired runs {})",
            s["storm"].as_str().unwrap_or(""),
            args.storm,
            s["failed_logins_per_s"].as_f64().unwrap_or(0.0),
            s["with_over_without"].as_f64().unwrap_or(0.0) * 100.0,
            s["each_repeat"],
        );
    }
    println!(
        "a removed ACL refuses writes after {median:.0} ms (median of {}; max {max:.0} ms; broker heartbeat {} ms)",
        removal.len(),
        HEARTBEAT_MS
    );
    Ok(())
}
