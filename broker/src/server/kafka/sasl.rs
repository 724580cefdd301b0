//! SASL authentication on the Kafka listener, as Kafka's `SaslServerAuthenticator` runs it:
//! before a connection has authenticated, only ApiVersions and SaslHandshake (v1) are served,
//! then SaslAuthenticate (v0-2) carries the mechanism's messages (PLAIN, SCRAM-SHA-256,
//! SCRAM-SHA-512; [`protocol::sasl`] does the checking). Any other request before the exchange
//! has succeeded closes the connection, and so does anything after a failed exchange. A failed
//! exchange is answered SASL_AUTHENTICATION_FAILED with one generic message after
//! `failed_authentication_delay_ms` (Kafka's `connection.failed.authentication.delay.ms`).
//!
//! The credentials are the coordinator's (`--scram-users-file`), handed to the broker in its
//! heartbeat answers ([`CredentialCache`]); PLAIN logins are checked against them too, with
//! PBKDF2 on tokio's blocking threads, never on a connection's task.
//!
//! SaslHandshake v0 (raw tokens after the handshake) is not served: Kafka 4 removed it
//! (KIP-896), and librdkafka and kafka-python use v1.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{ResponseKind, SaslAuthenticateResponse, SaslHandshakeResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use net::Handled;
use protocol::kafka::KafkaAnswer;
use protocol::sasl::{
    ClientFirst, Mechanism, PlainLogin, SaslError, ScramCredential, ScramExchange, ScramMechanism, FAILED,
    SASL_MESSAGE_BYTES_MAX,
};
use protocol::Credentials;

/// How a Kafka listener secures its connections (Kafka's `security.protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    /// No TLS, no authentication: every client is `User:ANONYMOUS`.
    Plaintext,
    /// TLS, no SASL.
    Ssl,
    /// SASL without TLS (PLAIN then sends passwords in the clear).
    SaslPlaintext,
    /// SASL over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    /// Whether connections are TLS.
    pub fn tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Whether clients authenticate with SASL.
    pub fn sasl(self) -> bool {
        matches!(self, SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl)
    }

    /// Kafka's name.
    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }
}

impl std::str::FromStr for SecurityProtocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        [SecurityProtocol::Plaintext, SecurityProtocol::Ssl, SecurityProtocol::SaslPlaintext, SecurityProtocol::SaslSsl]
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("{s:?} is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"))
    }
}

impl std::fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The Kafka listener's SASL settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaslConfig {
    /// The mechanisms offered (Kafka's `sasl.enabled.mechanisms`), in SaslHandshake's order.
    pub mechanisms: Vec<Mechanism>,
    /// How long a failed authentication's answer waits, in milliseconds (Kafka's
    /// `connection.failed.authentication.delay.ms`).
    pub failed_authentication_delay_ms: u64,
}

/// Default of [`SaslConfig::failed_authentication_delay_ms`], Kafka's.
pub const FAILED_AUTHENTICATION_DELAY_MS_DEFAULT: u64 = 100;

impl Default for SaslConfig {
    fn default() -> Self {
        SaslConfig {
            mechanisms: vec![Mechanism::Scram(ScramMechanism::Sha256), Mechanism::Scram(ScramMechanism::Sha512)],
            failed_authentication_delay_ms: FAILED_AUTHENTICATION_DELAY_MS_DEFAULT,
        }
    }
}

/// Parse `--sasl-mechanisms` (comma-separated Kafka names).
pub fn parse_mechanisms(s: &str) -> Result<Vec<Mechanism>, String> {
    let mut out = Vec::new();
    for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let m = Mechanism::parse(name)
            .ok_or_else(|| format!("{name:?} is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"))?;
        if !out.contains(&m) {
            out.push(m);
        }
    }
    if out.is_empty() {
        return Err("no mechanism named".into());
    }
    Ok(out)
}

/// The coordinator's SCRAM credentials, as its last heartbeat answer carrying them said.
#[derive(Debug, Default)]
pub(crate) struct CredentialCache(RwLock<Arc<Credentials>>);

impl CredentialCache {
    /// The version held (0 before any).
    pub(crate) fn version(&self) -> i64 {
        self.0.read().unwrap_or_else(|p| p.into_inner()).version
    }

    /// Every credential held.
    pub(crate) fn all(&self) -> Arc<Credentials> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Hold `credentials` from now on if they are newer than what is held
    /// ([`super::authz::newer_version`]).
    pub(crate) fn replace_if_newer(&self, credentials: Credentials) {
        if super::authz::newer_version(self.version(), credentials.version) {
            self.replace(credentials);
        }
    }

    /// Hold `credentials` from now on.
    fn replace(&self, credentials: Credentials) {
        tracing::info!(
            users = credentials.users.len(),
            version = credentials.version,
            "SASL credentials received from the coordinator"
        );
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(credentials);
    }

    /// `user`'s credential for `mechanism`.
    pub(crate) fn lookup(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
        let all = self.0.read().unwrap_or_else(|p| p.into_inner()).clone();
        all.users.iter().find(|u| u.user == user && u.credential.mechanism == mechanism).map(|u| u.credential.clone())
    }
}

/// Where one connection is in its authentication.
#[derive(Debug)]
pub(super) enum SaslState {
    /// The listener does not use SASL: the client is `User:ANONYMOUS`.
    Off,
    /// Waiting for SaslHandshake.
    Handshake,
    /// The handshake chose this mechanism: waiting for its first SaslAuthenticate.
    Authenticate(Mechanism),
    /// A password check (PLAIN) is under way; the connection's later requests wait for it.
    Checking,
    /// SCRAM: waiting for the client's final message.
    ScramFinal(ScramExchange),
    /// Authenticated as `User:<user>`.
    Authenticated {
        /// The SASL user.
        user: String,
    },
    /// The exchange failed or went out of order: every later request closes the connection.
    Failed,
}

impl SaslState {
    /// The state a new connection of a listener starts in.
    pub(super) fn new(sasl: Option<&SaslConfig>) -> SaslState {
        if sasl.is_some() {
            SaslState::Handshake
        } else {
            SaslState::Off
        }
    }

    /// Whether the connection's ordinary requests are served: SASL is off or succeeded.
    pub(super) fn open(&self) -> bool {
        matches!(self, SaslState::Off | SaslState::Authenticated { .. })
    }

    /// The principal's name (`User:` aside): `ANONYMOUS` without SASL, empty before it succeeded.
    pub(super) fn user(&self) -> &str {
        match self {
            SaslState::Off => "ANONYMOUS",
            SaslState::Authenticated { user, .. } => user,
            _ => "",
        }
    }
}

/// What the gate decided about a request.
pub(super) enum Gate {
    /// Serve it as usual.
    Pass,
    /// Answer it with this (a SASL request, or a close).
    Answer(Handled<KafkaAnswer>),
}

/// A request's kind, as far as the SASL gate cares.
pub(super) enum Asked<'a> {
    /// ApiVersions (any version).
    ApiVersions,
    /// SaslHandshake with its mechanism.
    Handshake(&'a str),
    /// SaslAuthenticate with its bytes.
    Authenticate(&'a Bytes),
    /// Anything else.
    Other,
}

fn handshake_answer(code: i16, config: &SaslConfig) -> Handled<KafkaAnswer> {
    let mechanisms = config.mechanisms.iter().map(|m| StrBytes::from_static_str(m.name())).collect();
    Handled::answer(KafkaAnswer::Reply(ResponseKind::SaslHandshake(
        SaslHandshakeResponse::default().with_error_code(code).with_mechanisms(mechanisms),
    )))
}

fn authenticate_answer(bytes: Vec<u8>) -> KafkaAnswer {
    KafkaAnswer::Reply(ResponseKind::SaslAuthenticate(
        SaslAuthenticateResponse::default().with_auth_bytes(Bytes::from(bytes)),
    ))
}

fn illegal_state(why: &str) -> KafkaAnswer {
    KafkaAnswer::Reply(ResponseKind::SaslAuthenticate(
        SaslAuthenticateResponse::default()
            .with_error_code(ResponseError::IllegalSaslState.code())
            .with_error_message(Some(StrBytes::from_string(why.to_string()))),
    ))
}

/// A SaslHandshake answered ILLEGAL_SASL_STATE (SASL is off, or the connection already
/// authenticated: re-authentication is not served).
fn illegal_handshake() -> Handled<KafkaAnswer> {
    Handled::answer(KafkaAnswer::Reply(ResponseKind::SaslHandshake(
        SaslHandshakeResponse::default().with_error_code(ResponseError::IllegalSaslState.code()),
    )))
}

/// The answer to a failed exchange, after the delay: SASL_AUTHENTICATION_FAILED.
fn failed(delay_ms: u64) -> Handled<KafkaAnswer> {
    Handled::serial(async move {
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        KafkaAnswer::Reply(ResponseKind::SaslAuthenticate(
            SaslAuthenticateResponse::default()
                .with_error_code(ResponseError::SaslAuthenticationFailed.code())
                .with_error_message(Some(StrBytes::from_static_str(FAILED))),
        ))
    })
}

/// A fresh printable server nonce.
fn server_nonce() -> String {
    let mut b = [0u8; 24];
    getrandom::fill(&mut b).expect("the operating system's random source works");
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The gate of a listener without SASL: the SASL requests are answered ILLEGAL_SASL_STATE, as
/// Kafka answers them; everything else passes.
pub(super) fn gate_off(asked: Asked<'_>) -> Gate {
    match asked {
        Asked::Handshake(_) => Gate::Answer(illegal_handshake()),
        Asked::Authenticate(_) => {
            Gate::Answer(Handled::answer(illegal_state("this listener does not use SASL (PLAINTEXT or SSL)")))
        }
        Asked::ApiVersions | Asked::Other => Gate::Pass,
    }
}

/// The SASL gate of one connection of a listener with SASL: decides `asked` in the state
/// `state` (the connection's, locked by the caller, in the order requests arrived; `cell` is
/// where it lives, to set the outcome of a PLAIN password check, which runs after this
/// returns). `credentials` are the broker's, `peer` the client's address (for the log).
pub(super) fn gate(
    state: &mut SaslState,
    cell: &Arc<Mutex<SaslState>>,
    config: &SaslConfig,
    credentials: &CredentialCache,
    asked: Asked<'_>,
    peer: std::net::SocketAddr,
) -> Gate {
    let delay = config.failed_authentication_delay_ms;
    match (std::mem::replace(state, SaslState::Failed), asked) {
        (SaslState::Failed, _) => Gate::Answer(Handled::answer(KafkaAnswer::Close)),
        // Served before and after authentication alike.
        (s @ (SaslState::Handshake | SaslState::Authenticated { .. }), Asked::ApiVersions) => {
            *state = s;
            Gate::Pass
        }
        (SaslState::Handshake, Asked::Handshake(name)) => match Mechanism::parse(name) {
            Some(m) if config.mechanisms.contains(&m) => {
                *state = SaslState::Authenticate(m);
                Gate::Answer(handshake_answer(0, config))
            }
            // Kafka answers with its mechanisms and closes: the next request closes it here.
            _ => {
                tracing::info!(%peer, mechanism = name, "Kafka client asked for a SASL mechanism this listener does not offer");
                Gate::Answer(handshake_answer(ResponseError::UnsupportedSaslMechanism.code(), config))
            }
        },
        (SaslState::Authenticate(_) | SaslState::ScramFinal(_), Asked::Authenticate(bytes))
            if bytes.len() > SASL_MESSAGE_BYTES_MAX =>
        {
            tracing::info!(%peer, bytes = bytes.len(), "SASL message over {SASL_MESSAGE_BYTES_MAX} bytes; authentication failed");
            Gate::Answer(failed(delay))
        }
        (SaslState::Authenticate(Mechanism::Plain), Asked::Authenticate(bytes)) => {
            let login = match PlainLogin::parse(bytes) {
                Ok(l) => l,
                Err(e) => return refuse(&e, peer, delay),
            };
            // A user without a credential is checked against a made-up one, so the time taken
            // does not tell which users exist.
            let known = credentials.lookup(&login.user, ScramMechanism::Sha256);
            *state = SaslState::Checking;
            let cell = cell.clone();
            let finish = move |s| *cell.lock().unwrap_or_else(|p| p.into_inner()) = s;
            Gate::Answer(Handled::serial(async move {
                let user = login.user.clone();
                let checked = tokio::task::spawn_blocking(move || match known {
                    Some(c) => c.matches_password(&login.password),
                    None => {
                        let dummy = ScramCredential::from_salted_password(
                            ScramMechanism::Sha256,
                            &[0; 32],
                            vec![0; 32],
                            protocol::sasl::ITERATIONS_MIN,
                        );
                        let _ = dummy.matches_password(&login.password);
                        false
                    }
                })
                .await
                .unwrap_or(false);
                if checked {
                    tracing::debug!(%peer, %user, "Kafka client authenticated with PLAIN");
                    finish(SaslState::Authenticated { user });
                    authenticate_answer(Vec::new())
                } else {
                    tracing::info!(%peer, %user, "Kafka client failed PLAIN authentication");
                    finish(SaslState::Failed);
                    failed(delay).into_future().await
                }
            }))
        }
        (SaslState::Authenticate(Mechanism::Scram(m)), Asked::Authenticate(bytes)) => {
            let first = match ClientFirst::parse(bytes) {
                Ok(f) => f,
                Err(e) => return refuse(&e, peer, delay),
            };
            let Some(credential) = credentials.lookup(&first.user, m) else {
                let e = SaslError::UnknownUser { user: first.user, mechanism: Mechanism::Scram(m) };
                return refuse(&e, peer, delay);
            };
            if credential.iterations < protocol::sasl::ITERATIONS_MIN {
                return refuse(&SaslError::Unsupported("a credential with too few iterations".into()), peer, delay);
            }
            let (exchange, server_first) = ScramExchange::start(first, credential, &server_nonce());
            *state = SaslState::ScramFinal(exchange);
            Gate::Answer(Handled::answer(authenticate_answer(server_first)))
        }
        (SaslState::ScramFinal(exchange), Asked::Authenticate(bytes)) => {
            let mechanism = Mechanism::Scram(exchange.mechanism());
            match exchange.finish(bytes) {
                Ok((user, server_final)) => {
                    tracing::debug!(%peer, %user, %mechanism, "Kafka client authenticated");
                    *state = SaslState::Authenticated { user };
                    Gate::Answer(Handled::answer(authenticate_answer(server_final)))
                }
                Err(e) => refuse(&e, peer, delay),
            }
        }
        (s @ SaslState::Authenticated { .. }, Asked::Handshake(_)) => {
            *state = s;
            Gate::Answer(illegal_handshake())
        }
        (s @ SaslState::Authenticated { .. }, Asked::Authenticate(_)) => {
            *state = s;
            Gate::Answer(Handled::answer(illegal_state("this connection has authenticated already")))
        }
        (s @ SaslState::Authenticated { .. }, Asked::Other) => {
            *state = s;
            Gate::Pass
        }
        (s, _) => {
            tracing::info!(%peer, state = ?s, "a Kafka request out of turn in SASL authentication; closing the connection");
            Gate::Answer(Handled::answer(KafkaAnswer::Close))
        }
    }
}

/// A failed exchange: logged with why, answered with [`FAILED`] only; the state stays Failed.
fn refuse(e: &SaslError, peer: std::net::SocketAddr, delay_ms: u64) -> Gate {
    tracing::info!(%peer, error = %e, "Kafka client failed SASL authentication");
    Gate::Answer(failed(delay_ms))
}
