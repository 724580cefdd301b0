//! Connections and metadata shared by producers, consumers and admins.

use std::collections::HashMap;
use std::time::Duration;

use net::{ClientTls, Connection, Dialer, NetError};
use protocol::auth::ClusterSecret;
use protocol::{MetadataRequest, PartitionInfo, Request, Response};

use crate::error::ClientError;

/// Client settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Deadline of one request, in milliseconds.
    pub request_timeout_ms: u64,
    /// First pause between retries, in milliseconds (doubles up to `retry_backoff_max_ms`).
    pub retry_backoff_ms: u64,
    /// Longest pause between retries, in milliseconds.
    pub retry_backoff_max_ms: u64,
    /// Connect over TLS, trusting these CAs.
    pub tls: Option<ClientTls>,
    /// Prove to the coordinator that this client holds the cluster secret (as `admin`): with a
    /// secret set, creating topics and electing leaders need it.
    pub secret: Option<ClusterSecret>,
    /// Log in as this user on every connection: SASL on a Kafka listener (SASL_PLAINTEXT or
    /// SASL_SSL), SCRAM (SaslLogin) on the own protocol.
    pub sasl: Option<SaslLogin>,
}

pub use net::SaslLogin;

/// The command line's SASL login flags (`producer`, `consumer`, `admin`, `fencecheck`).
#[derive(clap::Args, Debug, Clone)]
pub struct SaslArgs {
    /// Log in as this user on every connection: with SASL on a Kafka listener (SASL_PLAINTEXT
    /// or SASL_SSL), with SCRAM on the own protocol (under the coordinator's --authorizer the
    /// ACLs then decide what the user may do). Needs --sasl-password-file.
    #[arg(long, requires = "sasl_password_file")]
    pub sasl_username: Option<String>,
    /// The file whose first line is `--sasl-username`'s password.
    #[arg(long, requires = "sasl_username")]
    pub sasl_password_file: Option<std::path::PathBuf>,
    /// The SASL mechanism: PLAIN (Kafka listeners only), SCRAM-SHA-256 or SCRAM-SHA-512.
    #[arg(long, default_value = "SCRAM-SHA-512")]
    pub sasl_mechanism: String,
}

impl SaslArgs {
    /// The login the flags name, if any (`None` without `--sasl-username`); `kafka` tells
    /// whether the client speaks the Kafka protocol: the own protocol logs in with SCRAM only.
    pub fn login(&self, kafka: bool) -> Result<Option<SaslLogin>, String> {
        let Some(user) = self.sasl_username.as_deref() else {
            return match self.sasl_password_file {
                Some(_) => Err("--sasl-password-file needs --sasl-username".into()),
                None => Ok(None),
            };
        };
        let mechanism = protocol::sasl::Mechanism::parse(&self.sasl_mechanism).ok_or_else(|| {
            format!("--sasl-mechanism {:?} is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512", self.sasl_mechanism)
        })?;
        if mechanism == protocol::sasl::Mechanism::Plain && !kafka {
            return Err("--sasl-mechanism PLAIN logs in on a Kafka listener only (add --kafka); epochfence's own \
                        protocol logs in with SCRAM-SHA-256 or SCRAM-SHA-512, the same user and password"
                .into());
        }
        let path = self.sasl_password_file.as_deref().ok_or("--sasl-username needs --sasl-password-file")?;
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read --sasl-password-file {}: {e}", path.display()))?;
        let password = text.lines().next().unwrap_or("").to_string();
        if password.is_empty() {
            return Err(format!("--sasl-password-file {} holds no password on its first line", path.display()));
        }
        Ok(Some(SaslLogin { mechanism, user: user.to_string(), password }))
    }
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            request_timeout_ms: 30_000,
            retry_backoff_ms: 20,
            retry_backoff_max_ms: 1_000,
            tls: None,
            secret: None,
            sasl: None,
        }
    }
}

impl ClientConfig {
    /// Defaults, with TLS trusting the CA certificates in `ca` if given.
    pub fn with_tls_ca(ca: Option<&std::path::Path>) -> Result<ClientConfig, ClientError> {
        let tls = ca.map(ClientTls::from_file).transpose().map_err(|e| ClientError::Protocol(e.to_string()))?;
        Ok(ClientConfig { tls, ..ClientConfig::default() })
    }
}

/// Coordinator and broker connections plus cached metadata.
pub struct Client {
    /// The coordinator replicas (`--bootstrap A1,A2`), following the active one.
    coordinators: net::Coordinators,
    config: ClientConfig,
    brokers: HashMap<String, Connection>,
    broker_addrs: HashMap<i32, String>,
    topics: HashMap<String, Vec<PartitionInfo>>,
}

/// A partition's leader as last seen in metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderInfo {
    /// Broker id.
    pub broker_id: i32,
    /// Broker address.
    pub addr: String,
    /// Leader epoch.
    pub leader_epoch: i32,
}

impl Client {
    /// A client bootstrapping from the coordinator at `bootstrap` (one address, or several
    /// replicas' comma-separated); connects lazily.
    pub fn new(bootstrap: impl Into<String>, config: ClientConfig) -> Client {
        Client {
            coordinators: net::Coordinators::new(&bootstrap.into()),
            config,
            brokers: HashMap::new(),
            broker_addrs: HashMap::new(),
            topics: HashMap::new(),
        }
    }

    fn dialer(&self) -> Dialer {
        Dialer {
            tls: self.config.tls.clone(),
            secret: self.config.secret.clone(),
            member: "admin".into(),
            login: self.config.sasl.clone(),
        }
    }

    /// Settings.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(self.config.request_timeout_ms)
    }

    /// Call the coordinator, reconnecting if needed: with several replicas, the active one
    /// (a standby's NOT_COORDINATOR is followed to it within the request timeout).
    pub async fn call_coordinator(&mut self, req: Request) -> Result<Response, NetError> {
        self.coordinators.call(&self.dialer(), req, self.timeout()).await
    }

    /// [`Client::call_coordinator`], a failure told as a [`ClientError`] about `what`: a
    /// refusal keeps its status (its code tells what to do: an authorization one, say),
    /// anything else is a timeout.
    pub async fn ask_coordinator(&mut self, what: &str, req: Request) -> Result<Response, ClientError> {
        self.call_coordinator(req).await.map_err(|e| match e {
            NetError::Refused { status, .. } if !status.code.is_retriable() => {
                ClientError::Refused { what: what.to_string(), status }
            }
            e => ClientError::Timeout {
                what: what.to_string(),
                timeout_ms: self.config.request_timeout_ms,
                last_error: e.to_string(),
            },
        })
    }

    /// Call a broker by address, reconnecting if needed.
    pub async fn call_broker(&mut self, addr: &str, req: Request) -> Result<Response, NetError> {
        let conn = match self.brokers.get(addr).filter(|c| !c.is_closed()).cloned() {
            Some(c) => c,
            None => {
                let c = self.dialer().dial(addr).await?;
                self.brokers.insert(addr.to_string(), c.clone());
                c
            }
        };
        let r = conn.call_timeout(req, self.timeout()).await;
        if r.is_err() {
            self.brokers.remove(addr);
        }
        r
    }

    /// Fetch metadata for `topic` (creating it with the coordinator's defaults if allowed).
    /// A logged-in client asks without creating first: under the authorizer, asking to create
    /// needs CREATE, which a client that only writes to a topic that exists does not hold.
    pub async fn refresh_metadata(&mut self, topic: &str, allow_auto_create: bool) -> Result<(), ClientError> {
        if allow_auto_create && self.config.sasl.is_some() {
            match self.metadata(topic, false).await {
                Err(ClientError::Refused { status, .. })
                    if status.code == protocol::ErrorCode::UnknownTopicOrPartition => {}
                done => return done,
            }
        }
        self.metadata(topic, allow_auto_create).await
    }

    async fn metadata(&mut self, topic: &str, allow_auto_create: bool) -> Result<(), ClientError> {
        let req = Request::Metadata(MetadataRequest { topics: vec![topic.to_string()], allow_auto_create });
        let resp = self.ask_coordinator(&format!("metadata for '{topic}'"), req).await?;
        let Response::Metadata(m) = resp else {
            return Err(ClientError::Protocol(format!("metadata answered with {}", resp.status())));
        };
        for b in m.brokers {
            self.broker_addrs.insert(b.id, b.addr);
        }
        for t in m.topics {
            if t.status.is_ok() {
                self.topics.insert(t.name, t.partitions);
            } else {
                self.topics.remove(&t.name);
                return Err(ClientError::Refused { what: format!("metadata for '{}'", t.name), status: t.status });
            }
        }
        Ok(())
    }

    /// Number of partitions of `topic`, fetching metadata if not cached.
    pub async fn partition_count(&mut self, topic: &str) -> Result<usize, ClientError> {
        if !self.topics.contains_key(topic) {
            self.refresh_metadata(topic, true).await?;
        }
        Ok(self.topics.get(topic).map_or(0, |p| p.len()))
    }

    /// The cached leader of a partition.
    pub fn leader(&self, topic: &str, partition: i32) -> Option<LeaderInfo> {
        let p = self.topics.get(topic)?.iter().find(|p| p.partition == partition)?;
        // leader_id -1 (no leader now) has no address: callers refresh and retry.
        let addr = self.broker_addrs.get(&p.leader_id)?.clone();
        Some(LeaderInfo { broker_id: p.leader_id, addr, leader_epoch: p.leader_epoch })
    }

    /// The leader of a partition, refreshing metadata when it is not cached.
    pub async fn leader_or_refresh(&mut self, topic: &str, partition: i32) -> Result<LeaderInfo, ClientError> {
        if let Some(l) = self.leader(topic, partition) {
            return Ok(l);
        }
        self.refresh_metadata(topic, true).await?;
        self.leader(topic, partition).ok_or_else(|| ClientError::Refused {
            what: format!("leader of {topic}-{partition}"),
            status: protocol::Status::new(
                protocol::ErrorCode::UnknownTopicOrPartition,
                format!("{topic}-{partition} has no known leader"),
            ),
        })
    }

    /// Forget cached metadata for `topic` (after a leadership error).
    pub fn invalidate(&mut self, topic: &str) {
        self.topics.remove(topic);
    }

    /// The next pause for retry number `attempt` (0-based).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let ms = self.config.retry_backoff_ms.saturating_mul(1u64 << attempt.min(16));
        Duration::from_millis(ms.min(self.config.retry_backoff_max_ms))
    }
}
