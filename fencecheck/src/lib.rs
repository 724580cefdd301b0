//! A fencing conformance check for any Kafka-compatible broker: nine checks, each with a
//! verdict (pass, fail, not supported by this broker, or information) and the evidence seen
//! (epochs, offsets, error codes). It speaks the Kafka protocol through `producer::kafka`, needs only a
//! bootstrap address, and makes its own topic (or takes one that exists).
//!
//! [`run`] runs the checks in order; the `fencecheck` binary prints them.

use std::time::{Duration, Instant};

use bytes::Bytes;
use producer::kafka::{KafkaClient, KafkaConnection, KafkaConsumer, KafkaProducer};
use producer::{ClientConfig, ClientError, ProducerConfig};

mod checks;

#[cfg(test)]
mod fake;

/// The checks, in the order they run.
pub const CHECKS: [&str; 9] = [
    "zombie-produce",
    "zombie-commit",
    "zombie-untouched-partition",
    "aborted-invisible",
    "txn-in-a-row",
    "idempotent-retry",
    "epoch-never-regresses",
    "txn-delayed-write",
    "txn-delayed-end",
];

/// Default [`Options::timeout_ms`].
pub const CHECK_TIMEOUT_MS_DEFAULT: u64 = 20_000;

/// Partitions of the topic fencecheck makes (one only the zombie writes to).
pub const TOPIC_PARTITIONS: i32 = 2;

/// What a check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The broker did what a correct one must.
    Pass,
    /// It did not (or did not answer in time).
    Fail,
    /// The broker lacks what the check needs (an api, a second partition).
    Unsupported,
    /// Not a failure: what the broker does is known and allowed (a transaction version 1
    /// broker, where a delayed write or EndTxn of one transaction can land in the next).
    Info,
}

impl Verdict {
    /// `pass`, `fail` or `unsupported`, as `--json` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Unsupported => "unsupported",
            Verdict::Info => "info",
        }
    }
}

/// One check's verdict and evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The check's name (one of [`CHECKS`]).
    pub name: &'static str,
    /// The verdict.
    pub verdict: Verdict,
    /// What was seen: epochs, offsets, error codes.
    pub evidence: String,
}

impl Report {
    /// The line a person reads: `pass`, `FAIL` or `unsupported`, the name, the evidence.
    pub fn line(&self) -> String {
        let verdict = match self.verdict {
            Verdict::Pass => "pass",
            Verdict::Fail => "FAIL",
            Verdict::Unsupported => "unsupported",
            Verdict::Info => "info",
        };
        format!("{verdict:<11} {:<26} {}", self.name, self.evidence)
    }

    /// One JSON object: `name`, `verdict`, `evidence`.
    pub fn json(&self) -> String {
        serde_json::json!({ "name": self.name, "verdict": self.verdict.as_str(), "evidence": self.evidence })
            .to_string()
    }
}

/// What to check, where.
#[derive(Debug, Clone)]
pub struct Options {
    /// Kafka addresses, comma separated.
    pub bootstrap: String,
    /// Prefix of the topic and transactional ids fencecheck makes.
    pub topic_prefix: String,
    /// A topic that exists, instead of one fencecheck makes.
    pub topic: Option<String>,
    /// Run only this check.
    pub only: Option<&'static str>,
    /// How long one check may take before it fails with "timeout", in milliseconds.
    pub timeout_ms: u64,
    /// Log in with SASL on every connection (a listener under SASL_PLAINTEXT or SASL_SSL).
    pub sasl: Option<producer::SaslLogin>,
}

impl Options {
    /// Defaults for `bootstrap`.
    pub fn new(bootstrap: impl Into<String>) -> Options {
        Options {
            bootstrap: bootstrap.into(),
            topic_prefix: "fencecheck".into(),
            topic: None,
            only: None,
            timeout_ms: CHECK_TIMEOUT_MS_DEFAULT,
            sasl: None,
        }
    }
}

/// Why a run could not finish.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum RunError {
    /// No bootstrap address answered.
    #[error("cannot reach a broker at {bootstrap}: {detail}; is it running, and is that its Kafka listener?")]
    Unreachable {
        /// The addresses tried.
        bootstrap: String,
        /// The last error.
        detail: String,
    },
    /// The topic could not be made or found.
    #[error("{0}")]
    Topic(String),
    /// The brokers stopped answering during a check: the run is incomplete.
    #[error("lost the broker during {check}: {detail}; the run is incomplete")]
    Lost {
        /// The check under way.
        check: &'static str,
        /// What the check last saw.
        detail: String,
    },
}

/// The name in [`CHECKS`] equal to `name`.
pub fn check_named(name: &str) -> Option<&'static str> {
    CHECKS.iter().copied().find(|c| *c == name)
}

/// Run the checks (all, or [`Options::only`]) against the cluster at [`Options::bootstrap`],
/// handing each report to `each` as it is made. A check that fails is followed by a probe of
/// the bootstrap addresses: if none answers, the run stops with [`RunError::Lost`].
pub async fn run(opts: &Options, mut each: impl FnMut(&Report)) -> Result<Vec<Report>, RunError> {
    let probe_ms = opts.timeout_ms.min(5_000);
    reachable(&opts.bootstrap, probe_ms)
        .await
        .map_err(|detail| RunError::Unreachable { bootstrap: opts.bootstrap.clone(), detail })?;
    let cx = Ctx::prepare(opts).await?;
    let mut reports = Vec::new();
    for name in CHECKS.iter().copied().filter(|c| opts.only.is_none_or(|o| o == *c)) {
        let limit = Duration::from_millis(opts.timeout_ms);
        let (verdict, evidence) = match tokio::time::timeout(limit, checks::run(name, &cx)).await {
            Ok(Ok(found) | Err(found)) => found,
            Err(_) => (Verdict::Fail, format!("timeout: no verdict within {} ms", opts.timeout_ms)),
        };
        if verdict == Verdict::Fail {
            if let Err(probe) = reachable(&opts.bootstrap, probe_ms).await {
                return Err(RunError::Lost { check: name, detail: format!("{evidence}; then {probe}") });
            }
        }
        let report = Report { name, verdict, evidence };
        each(&report);
        reports.push(report);
    }
    Ok(reports)
}

/// Whether any bootstrap address accepts a Kafka connection (and answers ApiVersions).
async fn reachable(bootstrap: &str, timeout_ms: u64) -> Result<(), String> {
    let mut last = "no address given".to_string();
    for addr in bootstrap.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        match KafkaConnection::connect(addr, None, Duration::from_millis(timeout_ms)).await {
            Ok(_) => return Ok(()),
            Err(e) => last = e.to_string(),
        }
    }
    Err(last)
}

/// What every check uses: where, on which topic, with which names and deadlines.
pub(crate) struct Ctx {
    pub bootstrap: String,
    pub topic: String,
    pub partitions: usize,
    /// Tells this run's transactional ids and records from every other run's.
    pub nonce: String,
    pub prefix: String,
    pub timeout_ms: u64,
    pub sasl: Option<producer::SaslLogin>,
}

impl Ctx {
    async fn prepare(opts: &Options) -> Result<Ctx, RunError> {
        let mut n = [0u8; 4];
        getrandom::fill(&mut n).map_err(|e| RunError::Topic(format!("no random source for names: {e}")))?;
        let nonce = n.iter().map(|b| format!("{b:02x}")).collect::<String>();
        let mut cx = Ctx {
            bootstrap: opts.bootstrap.clone(),
            topic: String::new(),
            partitions: 0,
            nonce,
            prefix: opts.topic_prefix.clone(),
            timeout_ms: opts.timeout_ms,
            sasl: opts.sasl.clone(),
        };
        let mut client = KafkaClient::new(&cx.bootstrap, cx.client());
        cx.topic = match &opts.topic {
            Some(t) => {
                // Asked without auto-creation: a mistyped name is an error, not a new topic.
                client.refresh_metadata(&[t], false).await.map_err(|e| RunError::Topic(format!("Metadata: {e}")))?;
                if client.known_partitions(t).is_none_or(|n| n == 0) {
                    return Err(RunError::Topic(format!(
                        "topic '{t}' does not exist (or has no partitions yet); give one that exists, or no --topic \
                         to let fencecheck make its own"
                    )));
                }
                t.clone()
            }
            None => {
                let topic = format!("{}-{}", cx.prefix, cx.nonce);
                client.refresh_metadata(&[], false).await.map_err(|e| RunError::Topic(format!("Metadata: {e}")))?;
                let replicas = i16::try_from(client.brokers().len().clamp(1, 3)).unwrap_or(1);
                client.create_topic(&topic, TOPIC_PARTITIONS, replicas).await.map_err(|e| {
                    RunError::Topic(format!(
                        "cannot create the topic '{topic}': {e}; give one that exists with --topic"
                    ))
                })?;
                topic
            }
        };
        let deadline = Instant::now() + Duration::from_millis(cx.timeout_ms);
        let count = client
            .partition_count(&cx.topic)
            .await
            .map_err(|e| RunError::Topic(format!("topic '{}': {e}", cx.topic)))?;
        // Every partition has a leader before the first check writes.
        for p in 0..count {
            let partition = i32::try_from(p).unwrap_or(i32::MAX);
            let mut attempt = 0;
            while let Err(e) = client.leader(&cx.topic, partition).await {
                if Instant::now() >= deadline {
                    return Err(RunError::Topic(format!(
                        "{}-{p} has no leader after {} ms: {e}",
                        cx.topic, cx.timeout_ms
                    )));
                }
                client.invalidate(&cx.topic);
                tokio::time::sleep(client.backoff(attempt)).await;
                attempt += 1;
            }
        }
        cx.partitions = count;
        Ok(cx)
    }

    /// Connection settings: a request may take a quarter of a check.
    pub fn client(&self) -> ClientConfig {
        ClientConfig {
            request_timeout_ms: (self.timeout_ms / 4).max(100),
            sasl: self.sasl.clone(),
            ..ClientConfig::default()
        }
    }

    /// A producer's settings: retries give up at half a check, so a check that meets a broker
    /// that never answers still gets to say so.
    pub fn producer(&self, transactional_id: Option<&str>) -> ProducerConfig {
        ProducerConfig {
            transactional_id: transactional_id.map(str::to_string),
            delivery_timeout_ms: (self.timeout_ms / 2).max(100),
            client: self.client(),
            ..ProducerConfig::idempotent()
        }
    }

    /// This run's transactional id for `check`.
    pub fn tid(&self, check: &str) -> String {
        format!("{}-{}-{check}", self.prefix, self.nonce)
    }

    /// A record value unique to this run.
    pub fn value(&self, what: &str) -> Bytes {
        Bytes::from(format!("{what} {}", self.nonce))
    }

    /// A producer that speaks transaction version 1 (AddPartitionsToTxn, no bump at EndTxn),
    /// whatever the broker offers: what every client speaks, and what the first seven checks
    /// were written for.
    pub async fn init(&self, transactional_id: Option<&str>) -> Result<KafkaProducer, ClientError> {
        let mut p = KafkaProducer::init(&self.bootstrap, self.producer(transactional_id)).await?;
        p.set_transaction_version_max(1);
        Ok(p)
    }

    /// A producer that speaks the highest transaction version the broker finalizes (2: an epoch
    /// bump at every EndTxn v5, Produce v12 adding partitions), for the checks of version 2.
    pub async fn init_latest(&self, transactional_id: Option<&str>) -> Result<KafkaProducer, ClientError> {
        KafkaProducer::init(&self.bootstrap, self.producer(transactional_id)).await
    }

    /// A Kafka client of this run's settings.
    pub fn kafka_client(&self) -> KafkaClient {
        KafkaClient::new(&self.bootstrap, self.client())
    }

    pub fn consumer(&self, read_committed: bool) -> KafkaConsumer {
        let mut c = if read_committed {
            KafkaConsumer::read_committed(&self.bootstrap, self.client())
        } else {
            KafkaConsumer::new(&self.bootstrap, self.client())
        };
        c.set_max_wait_ms(0);
        c
    }
}
