//! The epochfence root package: [`LocalCluster`], a coordinator and brokers started inside
//! one process on ephemeral loopback ports (real TCP), for the examples and network tests.
//! The same servers run as the `coordinator` and `broker` binaries.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use broker::server::{run_listeners, BrokerSwitch};
use broker::BrokerConfig;
use coordinator::CoordinatorConfig;
use producer::{Admin, ClientConfig, ClientError};
use protocol::auth::ClusterSecret;
use protocol::{DescribeResponse, ErrorCode};
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Why a local cluster could not start or act.
#[derive(Debug, Error)]
pub enum LocalError {
    /// Binding or temp-dir creation failed.
    #[error("local cluster: {0}")]
    Io(#[from] std::io::Error),
    /// A client call failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// TLS material could not be made or loaded.
    #[error(transparent)]
    Tls(#[from] net::TlsError),
    /// A certificate could not be generated.
    #[error("certificate generation: {0}")]
    Certificate(String),
    /// A condition did not come true in time.
    #[error("timed out waiting for {0}")]
    Timeout(String),
}

/// Options for [`LocalCluster::start`].
#[derive(Debug, Clone)]
pub struct LocalOptions {
    /// Number of brokers.
    pub brokers: usize,
    /// Producer fencing on the brokers (off only to show what it prevents).
    pub fencing: bool,
    /// Followers refuse replication from stale leader epochs (off only to show what it prevents).
    pub leader_epoch_checks: bool,
    /// Broker heartbeat interval, in milliseconds.
    pub heartbeat_ms: u64,
    /// How long a heartbeat keeps a broker's lease, in milliseconds.
    pub broker_lease_ms: u64,
    /// A follower not caught up for this long leaves the ISR, in milliseconds.
    pub replica_lag_ms: u64,
    /// Give the cluster a fresh random secret, so internal requests need membership proofs.
    pub secured: bool,
    /// Serve TLS everywhere, with a fresh CA and a certificate for localhost and 127.0.0.1.
    pub tls: bool,
    /// The brokers' fsync policy.
    pub fsync: broker::server::FsyncPolicy,
    /// The brokers' segment size and retention.
    pub log: broker::log::LogConfig,
    /// How often the brokers run retention, in milliseconds.
    pub retention_check_ms: u64,
    /// Replicate requests in flight to one follower for one partition.
    pub replication_inflight_max: usize,
    /// Where the brokers keep their logs (default: the operating system's files). Tests wrap it
    /// to make a disk slow or failing.
    pub storage: Option<Arc<dyn broker::storage::Storage>>,
    /// Give every broker a Kafka-protocol listener too ([`LocalCluster::kafka_addrs`]).
    pub kafka: bool,
    /// How long the brokers keep an idle Kafka connection's relay to the coordinator, in ms.
    pub kafka_relay_idle_ms: u64,
    /// How long the coordinator waits for one marker write's answer before it dials again, in ms.
    pub marker_timeout_ms: u64,
    /// The transaction version the Kafka listeners offer (the coordinator's
    /// `--transaction-version`: 2, or 1).
    pub transaction_version: i16,
    /// SASL users `(name, password)`: when any, the Kafka listeners take SASL logins only
    /// (SASL_PLAINTEXT, or SASL_SSL with `tls`; PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512)
    /// against these users' credentials, which the coordinator hands the brokers.
    pub sasl_users: Vec<(String, String)>,
    /// How long a Kafka login lasts before the client must log in again, in ms (the brokers'
    /// `--connections-max-reauth-ms`, KIP-368; 0: the connection's life).
    pub connections_max_reauth_ms: u64,
    /// The brokers' `--sasl-plain-checks-per-s-max`.
    pub sasl_plain_checks_per_s_max: u32,
    /// Mutual TLS on the Kafka listeners (needs `tls`): client certificates are made for these
    /// names ([`LocalCluster::client_certificates`]) and required of every Kafka client.
    pub kafka_client_certificates: Vec<String>,
    /// The brokers' `--ssl-principal-mapping-rules` under mutual TLS (`None`: DEFAULT).
    pub ssl_principal_mapping_rules: Option<String>,
    /// Run the coordinator with `--authorizer` (needs `secured`): Kafka ACLs decide every Kafka
    /// request, and producer ids are bound to their owners.
    pub authorizer: Option<coordinator::acls::AuthorizerConfig>,
    /// KIP-848 consumer groups' session timeout, heartbeat interval and size (the coordinator's
    /// `--group-consumer-*` flags).
    pub group_consumer: coordinator::consumer_group::ConsumerGroupConfig,
}

impl Default for LocalOptions {
    fn default() -> Self {
        LocalOptions {
            brokers: 1,
            fencing: true,
            leader_epoch_checks: true,
            heartbeat_ms: 50,
            broker_lease_ms: 3_000,
            replica_lag_ms: 10_000,
            secured: true,
            tls: false,
            fsync: broker::server::FsyncPolicy::Always,
            log: broker::log::LogConfig::default(),
            retention_check_ms: 60_000,
            replication_inflight_max: broker::server::REPLICATION_INFLIGHT_MAX_DEFAULT,
            storage: None,
            kafka: false,
            kafka_relay_idle_ms: broker::server::KAFKA_RELAY_IDLE_MS_DEFAULT,
            marker_timeout_ms: CoordinatorConfig::new("").marker_timeout_ms,
            transaction_version: coordinator::cluster::TRANSACTION_VERSION_DEFAULT,
            sasl_users: Vec::new(),
            connections_max_reauth_ms: 0,
            sasl_plain_checks_per_s_max: protocol::sasl::PLAIN_CHECKS_PER_S_MAX_DEFAULT,
            kafka_client_certificates: Vec::new(),
            ssl_principal_mapping_rules: None,
            authorizer: None,
            group_consumer: coordinator::consumer_group::ConsumerGroupConfig::default(),
        }
    }
}

/// A running in-process cluster; dropping it stops the servers' accept loops.
pub struct LocalCluster {
    /// The coordinator's address (the `--bootstrap` of clients).
    pub coordinator_addr: String,
    /// Each broker's address, by broker id - 1.
    pub broker_addrs: Vec<String>,
    /// Each broker's Kafka listener address, by broker id - 1 (empty without
    /// [`LocalOptions::kafka`]).
    pub kafka_addrs: Vec<String>,
    /// The data directory (coordinator journal and broker logs).
    pub dir: tempfile::TempDir,
    /// Pause switches, by broker id - 1.
    pub switches: Vec<BrokerSwitch>,
    /// The cluster secret, if secured.
    pub secret: Option<ClusterSecret>,
    /// The CA's PEM certificate, if TLS is on (clients trust it).
    pub ca_pem: Option<String>,
    /// Client certificates for mutual TLS ([`LocalOptions::kafka_client_certificates`]):
    /// (name, certificate PEM, key PEM).
    pub client_certificates: Vec<(String, String, String)>,
    stops: Vec<oneshot::Sender<()>>,
    tasks: Vec<JoinHandle<()>>,
}

impl LocalCluster {
    /// Start a coordinator and `opts.brokers` brokers on 127.0.0.1 with ephemeral ports.
    pub async fn start(opts: LocalOptions) -> Result<LocalCluster, LocalError> {
        let dir = tempfile::tempdir()?;
        let secret = opts.secured.then(|| {
            let mut bytes = vec![0u8; 32];
            getrandom::fill(&mut bytes).expect("the operating system's random source works");
            ClusterSecret::new(bytes).expect("32 bytes is long enough")
        });
        let mut stops = Vec::new();
        let mut tasks = Vec::new();
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let coordinator_addr = listener.local_addr()?.to_string();
        let (stop, stopped) = oneshot::channel::<()>();
        stops.push(stop);
        let names: Vec<&str> = opts.kafka_client_certificates.iter().map(String::as_str).collect();
        let (acceptor, peer_tls, ca_pem, mtls, client_certificates) = if opts.tls {
            let c = local_certificates_with_clients(&names)?;
            let acceptor = net::tls::acceptor(c.server_cert.as_bytes(), c.server_key.as_bytes())?;
            let mtls = if names.is_empty() {
                None
            } else {
                Some(net::tls::MutualTls(net::tls::acceptor_requiring_client_certificates(
                    c.server_cert.as_bytes(),
                    c.server_key.as_bytes(),
                    c.ca.as_bytes(),
                )?))
            };
            (Some(acceptor), Some(net::ClientTls::new(c.ca.as_bytes())?), Some(c.ca), mtls, c.clients)
        } else {
            (None, None, None, None, Vec::new())
        };
        let mapping = match &opts.ssl_principal_mapping_rules {
            Some(rules) => protocol::principal::PrincipalMapper::parse(rules).map_err(LocalError::Certificate)?,
            None => protocol::principal::PrincipalMapper::default(),
        };
        let mut config = CoordinatorConfig::new(dir.path().join("coordinator"));
        config.limits.tls = acceptor.clone();
        config.peer_tls = peer_tls.clone();
        config.cluster.broker_lease_ms = opts.broker_lease_ms;
        config.cluster.transaction_version = opts.transaction_version;
        config.marker_timeout_ms = opts.marker_timeout_ms;
        config.limits.cluster_secret = secret.clone();
        config.authorizer = opts.authorizer.clone();
        config.scram_users = opts.sasl_users.clone();
        config.groups.consumer = opts.group_consumer.clone();
        tasks.push(tokio::spawn(async move {
            if let Err(e) = coordinator::run(listener, config, async {
                let _ = stopped.await;
            })
            .await
            {
                eprintln!("coordinator stopped: {e}");
            }
        }));
        let mut broker_addrs = Vec::new();
        let mut kafka_addrs = Vec::new();
        let mut switches = Vec::new();
        for id in 1..=opts.brokers as i32 {
            let listener = TcpListener::bind("127.0.0.1:0").await?;
            broker_addrs.push(listener.local_addr()?.to_string());
            let kafka_listener = match opts.kafka {
                true => {
                    let l = TcpListener::bind("127.0.0.1:0").await?;
                    kafka_addrs.push(l.local_addr()?.to_string());
                    Some(l)
                }
                false => None,
            };
            let mut config = BrokerConfig::new(id, dir.path().join(format!("broker-{id}")), coordinator_addr.clone());
            config.fencing = opts.fencing;
            config.leader_epoch_checks = opts.leader_epoch_checks;
            config.heartbeat_ms = opts.heartbeat_ms;
            config.replica_lag_ms = opts.replica_lag_ms;
            config.fsync = opts.fsync;
            config.log = opts.log;
            config.retention_check_ms = opts.retention_check_ms;
            config.replication_inflight_max = opts.replication_inflight_max;
            config.kafka_relay_idle_ms = opts.kafka_relay_idle_ms;
            if !opts.sasl_users.is_empty() {
                config.kafka_security_protocol = Some(if opts.tls {
                    broker::server::SecurityProtocol::SaslSsl
                } else {
                    broker::server::SecurityProtocol::SaslPlaintext
                });
                config.kafka_sasl.mechanisms = protocol::sasl::Mechanism::ALL.to_vec();
                config.kafka_sasl.max_reauth_ms = opts.connections_max_reauth_ms;
                config.kafka_sasl.plain_checks_per_s_max = opts.sasl_plain_checks_per_s_max;
            }
            config.kafka_mtls = mtls.clone();
            config.ssl_principal_mapping = mapping.clone();
            if let Some(storage) = &opts.storage {
                config.storage = storage.clone();
            }
            config.limits.cluster_secret = secret.clone();
            config.limits.tls = acceptor.clone();
            config.peer_tls = peer_tls.clone();
            let (switch, control) = BrokerSwitch::new();
            switches.push(switch);
            let (stop, stopped) = oneshot::channel::<()>();
            stops.push(stop);
            tasks.push(tokio::spawn(async move {
                if let Err(e) = run_listeners(listener, kafka_listener, config, control, async {
                    let _ = stopped.await;
                })
                .await
                {
                    eprintln!("broker stopped: {e}");
                }
            }));
        }
        Ok(LocalCluster {
            coordinator_addr,
            broker_addrs,
            kafka_addrs,
            dir,
            switches,
            secret,
            ca_pem,
            client_certificates,
            stops,
            tasks,
        })
    }

    /// Every broker's Kafka address, comma separated: a Kafka client's `bootstrap.servers`.
    pub fn kafka_bootstrap(&self) -> String {
        self.kafka_addrs.join(",")
    }

    /// Client settings for this cluster (TLS trusting its CA when TLS is on).
    pub fn client_config(&self) -> ClientConfig {
        let tls =
            self.ca_pem.as_ref().map(|ca| net::ClientTls::new(ca.as_bytes()).expect("the cluster's own CA parses"));
        ClientConfig { tls, ..ClientConfig::default() }
    }

    /// An admin client for this cluster (proving it holds the cluster secret, if secured).
    pub fn admin(&self) -> Admin {
        Admin::new(&self.coordinator_addr, ClientConfig { secret: self.secret.clone(), ..self.client_config() })
    }

    /// Create a topic, waiting (up to 10 s) for the brokers to register first.
    pub async fn create_topic(&self, name: &str, partitions: i32) -> Result<(), LocalError> {
        self.create_topic_replicated(name, partitions, -1).await
    }

    /// Create a topic with `replicas` replicas per partition (-1: default), waiting (up to
    /// 10 s) for enough brokers to register first.
    pub async fn create_topic_replicated(&self, name: &str, partitions: i32, replicas: i32) -> Result<(), LocalError> {
        let mut admin = self.admin();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match admin.create_topic_replicated(name, partitions, replicas).await {
                Err(ClientError::Refused { status, .. })
                    if matches!(status.code, ErrorCode::BrokerNotAvailable | ErrorCode::InvalidReplicationFactor)
                        && Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(10)).await
                }
                other => return Ok(other?),
            }
        }
    }

    /// Poll `admin describe` (every 20 ms, at most `timeout`) until `ok` holds; the cluster
    /// reports leaderships and replica progress through heartbeats.
    pub async fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        ok: impl Fn(&DescribeResponse) -> bool,
    ) -> Result<DescribeResponse, LocalError> {
        let mut admin = self.admin();
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(d) = admin.describe().await {
                if ok(&d) {
                    return Ok(d);
                }
            }
            if Instant::now() > deadline {
                return Err(LocalError::Timeout(what.to_string()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Broker `id`'s directory for `topic-partition`.
    pub fn replica_dir(&self, id: i32, topic: &str, partition: i32) -> PathBuf {
        self.dir.path().join(format!("broker-{id}")).join(format!("{topic}-{partition}"))
    }

    /// Every byte of a replica's log: its segment files, in offset order.
    pub fn replica_log_bytes(&self, id: i32, topic: &str, partition: i32) -> bytes::Bytes {
        let dir = self.replica_dir(id, topic, partition);
        let files = broker::log::segment_files(&dir).unwrap_or_default();
        files.iter().flat_map(|(_, path)| std::fs::read(path).unwrap_or_default()).collect::<Vec<u8>>().into()
    }

    /// The batches of a replica's log below `end_offset`, as raw bytes (empty if none).
    pub fn replica_bytes(&self, id: i32, topic: &str, partition: i32, end_offset: i64) -> Vec<u8> {
        let raw = self.replica_log_bytes(id, topic, partition);
        let mut out = Vec::new();
        for item in protocol::batch::BatchIter::new(raw) {
            let Ok((h, b)) = item else { break };
            if h.last_offset() < end_offset {
                out.extend_from_slice(&b);
            }
        }
        out
    }

    /// The data records of a replica's log, read from its file: (offset, value).
    pub fn replica_records(&self, id: i32, topic: &str, partition: i32) -> Vec<(i64, String)> {
        let raw = self.replica_log_bytes(id, topic, partition);
        protocol::batch::BatchIter::new(raw)
            .map_while(Result::ok)
            .flat_map(|(_, b)| protocol::batch::decode_records(&b).unwrap_or_default())
            .map(|r| (r.offset, String::from_utf8_lossy(&r.value).into_owned()))
            .collect()
    }

    /// Stop every server and wait for them.
    pub async fn shutdown(mut self) {
        for s in self.stops.drain(..) {
            let _ = s.send(());
        }
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
    }
}

/// A fresh CA and a certificate it signed for `localhost` and `127.0.0.1`:
/// (CA certificate PEM, server certificate PEM, server key PEM).
pub fn local_certificates() -> Result<(String, String, String), LocalError> {
    let c = local_certificates_with_clients(&[])?;
    Ok((c.ca, c.server_cert, c.server_key))
}

/// A test CA's certificates ([`local_certificates_with_clients`]), all PEM.
#[derive(Debug, Clone)]
pub struct LocalCertificates {
    /// The CA's certificate (its key is not kept).
    pub ca: String,
    /// A certificate for `localhost` and `127.0.0.1`.
    pub server_cert: String,
    /// Its key.
    pub server_key: String,
    /// Client certificates (mutual TLS), one per name asked for: (name, certificate, key), the
    /// subject `CN=<name>,OU=clients,O=epochfence` as RFC 2253 writes it.
    pub clients: Vec<(String, String, String)>,
}

/// A fresh CA, a server certificate and a client certificate for each of `clients`.
pub fn local_certificates_with_clients(clients: &[&str]) -> Result<LocalCertificates, LocalError> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let err = |e: rcgen::Error| LocalError::Certificate(e.to_string());
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    // Names of their own: OpenSSL (librdkafka, Python's ssl) takes a certificate whose subject
    // is its issuer's for self-issued, and fails to verify it.
    ca_params.distinguished_name.push(DnType::CommonName, "epochfence test CA");
    let ca_key = KeyPair::generate().map_err(err)?;
    let ca = ca_params.self_signed(&ca_key).map_err(err)?;
    let mut params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).map_err(err)?;
    params.distinguished_name.push(DnType::CommonName, "localhost");
    let key = KeyPair::generate().map_err(err)?;
    let cert = params.signed_by(&key, &ca, &ca_key).map_err(err)?;
    let mut made = Vec::new();
    for name in clients {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        // The least specific first, as encoded: RFC 2253 writes them the other way round.
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::OrganizationName, "epochfence");
        params.distinguished_name.push(DnType::OrganizationalUnitName, "clients");
        params.distinguished_name.push(DnType::CommonName, *name);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let client_key = KeyPair::generate().map_err(err)?;
        let client = params.signed_by(&client_key, &ca, &ca_key).map_err(err)?;
        made.push((name.to_string(), client.pem(), client_key.serialize_pem()));
    }
    Ok(LocalCertificates { ca: ca.pem(), server_cert: cert.pem(), server_key: key.serialize_pem(), clients: made })
}

/// An example's command line: `--timeline FILE.html` (the only option the examples take), if
/// given. An unknown argument or a missing file name is an error to print (exit 2).
pub fn timeline_flag() -> Result<Option<String>, String> {
    let mut args = std::env::args().skip(1);
    let mut path = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--timeline" => path = Some(args.next().ok_or("--timeline needs a file name: --timeline FILE.html")?),
            other => return Err(format!("unknown argument '{other}'; the only option is --timeline FILE.html")),
        }
    }
    Ok(path)
}
