//! SASL authentication on the Kafka listener, as Kafka's `SaslServerAuthenticator` runs it:
//! before a connection has authenticated, only ApiVersions and SaslHandshake (v0 and v1) are served,
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
//! KIP-368 re-authentication: with `max_reauth_ms` set (Kafka's `connections.max.reauth.ms`),
//! a login's final answer tells the client its session lifetime; before it ends the client
//! sends SaslHandshake and SaslAuthenticate again on the same connection, with the same
//! mechanism and as the same user (else SASL_AUTHENTICATION_FAILED, and the connection closes).
//! Once a session has ended without a new login, any other request closes the connection, so a
//! deleted credential or a changed password ends its sessions within `max_reauth_ms`.
//!
//! SaslHandshake v0 is served too (librdkafka before 2.10 logs in only with a broker that lists
//! it, though it then uses v1): after its acceptance the client sends its tokens as bare frames
//! (the codec decodes them as [`protocol::kafka::KafkaBody::SaslToken`]), and the gate's answers
//! go back as bare frames ([`bare_token`]); a refusal closes the connection, as version 0 has
//! no error to carry it.

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::{ResponseKind, SaslAuthenticateResponse, SaslHandshakeResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use net::Handled;
use protocol::kafka::KafkaAnswer;
use protocol::sasl::{
    Mechanism, PlainCheck, PlainChecks, PlainLogin, SaslError, ScramCredential, ScramExchange, ScramMechanism, FAILED,
    SASL_MESSAGE_BYTES_MAX,
};
use protocol::Credentials;

use crate::metrics::LoginOutcome;
use crate::server::BrokerStats;

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
    /// How long a login lasts before the client must log in again on the same connection, in
    /// milliseconds (Kafka's `connections.max.reauth.ms`, KIP-368); 0: for the connection's
    /// life.
    pub max_reauth_ms: u64,
    /// Most PLAIN password checks (PBKDF2) a second; beyond, a PLAIN login whose password has not
    /// passed before is refused unchecked ([`PlainChecks`]).
    pub plain_checks_per_s_max: u32,
}

/// Default of [`SaslConfig::failed_authentication_delay_ms`], Kafka's.
pub const FAILED_AUTHENTICATION_DELAY_MS_DEFAULT: u64 = 100;

impl Default for SaslConfig {
    fn default() -> Self {
        SaslConfig {
            mechanisms: vec![Mechanism::Scram(ScramMechanism::Sha256), Mechanism::Scram(ScramMechanism::Sha512)],
            failed_authentication_delay_ms: FAILED_AUTHENTICATION_DELAY_MS_DEFAULT,
            max_reauth_ms: 0,
            plain_checks_per_s_max: protocol::sasl::PLAIN_CHECKS_PER_S_MAX_DEFAULT,
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

/// The coordinator's SCRAM credentials, as its last heartbeat answer carrying them said, and
/// the broker's PLAIN checks of passwords against them ([`PlainChecks`]: a budget of PBKDF2 runs
/// a second, and the passwords that passed).
#[derive(Debug)]
pub(crate) struct CredentialCache(RwLock<Arc<Credentials>>, Arc<Mutex<PlainChecks>>);

impl Default for CredentialCache {
    fn default() -> Self {
        CredentialCache::new(protocol::sasl::PLAIN_CHECKS_PER_S_MAX_DEFAULT)
    }
}

impl CredentialCache {
    /// No credentials yet; PLAIN checks under a budget of `plain_checks_per_s_max` a second.
    pub(crate) fn new(plain_checks_per_s_max: u32) -> CredentialCache {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).expect("the operating system's random source works");
        CredentialCache(RwLock::default(), Arc::new(Mutex::new(PlainChecks::new(plain_checks_per_s_max, key))))
    }

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

/// A connection's login: who, how, and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Session {
    /// The SASL user (the principal is `User:<user>`).
    pub(super) user: String,
    /// The mechanism it logged in with; a re-authentication must use the same.
    pub(super) mechanism: Mechanism,
    /// When the session ends unless the client logs in again (KIP-368); `None`: never.
    pub(super) expires: Option<Instant>,
}

impl Session {
    fn open_at(&self, now: Instant) -> bool {
        self.expires.is_none_or(|e| now < e)
    }
}

/// Where one connection is in its authentication.
#[derive(Debug)]
pub(super) enum SaslState {
    /// The listener does not use SASL: the client is `User:<user>`, `ANONYMOUS` or (mutual TLS)
    /// named by its certificate.
    Off { user: String },
    /// Waiting for SaslHandshake.
    Handshake,
    /// The handshake chose `mechanism`: waiting for its first SaslAuthenticate. `prior` is the
    /// session being renewed, in a re-authentication.
    Authenticate { mechanism: Mechanism, prior: Option<Session> },
    /// A password check (PLAIN) is under way; the connection's later requests wait for it.
    Checking,
    /// SCRAM: waiting for the client's final message.
    ScramFinal { exchange: ScramExchange, prior: Option<Session> },
    /// Logged in.
    Authenticated(Session),
    /// The exchange failed or went out of order: every later request closes the connection.
    Failed,
}

impl SaslState {
    /// The state a new connection of a listener starts in; `tls_user` is the principal name its
    /// client certificate gives (mutual TLS), which SASL, when on, overrides.
    pub(super) fn new(sasl: Option<&SaslConfig>, tls_user: Option<String>) -> SaslState {
        if sasl.is_some() {
            SaslState::Handshake
        } else {
            SaslState::Off { user: tls_user.unwrap_or_else(|| "ANONYMOUS".into()) }
        }
    }

    /// Whether the connection's ordinary requests are served at `now`: SASL is off, or a login
    /// succeeded and its session has not ended.
    pub(super) fn open_at(&self, now: Instant) -> bool {
        match self {
            SaslState::Off { .. } => true,
            SaslState::Authenticated(s) => s.open_at(now),
            _ => false,
        }
    }

    /// Whether the connection's principal is settled: SASL is off, or it logged in (a
    /// re-authentication keeps the user).
    pub(super) fn settled(&self) -> bool {
        matches!(self, SaslState::Off { .. } | SaslState::Authenticated(_))
    }

    /// The principal's name (`User:` aside): without SASL `ANONYMOUS` or the certificate's,
    /// empty before a login succeeded (a re-authentication under way keeps the session's).
    pub(super) fn user(&self) -> &str {
        match self {
            SaslState::Off { user } => user,
            SaslState::Authenticated(s)
            | SaslState::Authenticate { prior: Some(s), .. }
            | SaslState::ScramFinal { prior: Some(s), .. } => &s.user,
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

/// A SaslAuthenticate answer carrying `bytes`; `session_lifetime_ms` is the login's lifetime
/// on the exchange's last answer (KIP-368; 0 before, and when logins last the connection's life).
fn authenticate_answer(bytes: Vec<u8>, session_lifetime_ms: u64) -> KafkaAnswer {
    KafkaAnswer::Reply(ResponseKind::SaslAuthenticate(
        SaslAuthenticateResponse::default()
            .with_auth_bytes(Bytes::from(bytes))
            .with_session_lifetime_ms(i64::try_from(session_lifetime_ms).unwrap_or(i64::MAX)),
    ))
}

fn illegal_state(why: &str) -> KafkaAnswer {
    KafkaAnswer::Reply(ResponseKind::SaslAuthenticate(
        SaslAuthenticateResponse::default()
            .with_error_code(ResponseError::IllegalSaslState.code())
            .with_error_message(Some(StrBytes::from_string(why.to_string()))),
    ))
}

/// The answer to a bare SASL token (after a version 0 SaslHandshake): the gate's
/// SaslAuthenticate answer's bytes as a bare frame, or, for a refusal (which version 0 cannot
/// carry), the connection closes (after the failed-login delay, if the answer waits for it).
pub(super) fn bare_token(answer: Handled<KafkaAnswer>) -> Handled<KafkaAnswer> {
    fn bare(answer: KafkaAnswer) -> KafkaAnswer {
        match answer {
            KafkaAnswer::Reply(ResponseKind::SaslAuthenticate(r)) if r.error_code == 0 => {
                KafkaAnswer::SaslToken(r.auth_bytes)
            }
            _ => KafkaAnswer::Close,
        }
    }
    match answer {
        Handled::Applied(f) => Handled::Applied(Box::pin(async move { bare(f.await) })),
        Handled::Serial(f) => Handled::Serial(Box::pin(async move { bare(f.await) })),
    }
}

/// A SaslHandshake answered ILLEGAL_SASL_STATE (SASL is off, or the connection logged in for
/// its life: re-authentication is served only with `max_reauth_ms`).
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

/// The SASL gate of one connection of a listener with SASL: decides `asked`, arriving at `now`,
/// in the state `state` (the connection's, locked by the caller, in the order requests arrived;
/// `cell` is where it lives, to set the outcome of a PLAIN password check, which runs after
/// this returns). `credentials` are the broker's, `peer` the client's address (for the log);
/// each login's outcome is counted in `stats`.
#[allow(clippy::too_many_arguments)]
pub(super) fn gate(
    state: &mut SaslState,
    cell: &Arc<Mutex<SaslState>>,
    config: &SaslConfig,
    credentials: &CredentialCache,
    asked: Asked<'_>,
    peer: std::net::SocketAddr,
    now: Instant,
    stats: &Arc<BrokerStats>,
) -> Gate {
    let delay = config.failed_authentication_delay_ms;
    let refuse = |e: &SaslError, peer, delay| {
        stats.metrics.login(LoginOutcome::Failed);
        refuse(e, peer, delay)
    };
    // `user` proved its password with `mechanism`: the connection logs in (a new session, or
    // `prior` renewed) and is answered `bytes` with the session's lifetime; a re-authentication
    // as another user is refused.
    let log_in = |state: &mut SaslState, user: String, mechanism, prior: Option<Session>, bytes| match logged_in(
        user,
        mechanism,
        prior.as_ref(),
        config.max_reauth_ms,
        now,
    ) {
        Some(s) => {
            logged(peer, &s, prior.is_some(), stats);
            *state = SaslState::Authenticated(s);
            Gate::Answer(Handled::answer(authenticate_answer(bytes, config.max_reauth_ms)))
        }
        None => refuse(&SaslError::Unsupported("re-authentication as another user".into()), peer, delay),
    };
    match (std::mem::replace(state, SaslState::Failed), asked) {
        (SaslState::Failed, _) => Gate::Answer(Handled::answer(KafkaAnswer::Close)),
        (SaslState::Authenticated(s), Asked::ApiVersions | Asked::Other) if !s.open_at(now) => {
            tracing::info!(%peer, user = %s.user, "a Kafka client's SASL session ended without re-authentication (connections.max.reauth.ms); closing the connection");
            stats.metrics.login(LoginOutcome::SessionEnded);
            Gate::Answer(Handled::answer(KafkaAnswer::Close))
        }
        // Served before and after authentication alike.
        (s @ (SaslState::Handshake | SaslState::Authenticated(_)), Asked::ApiVersions) => {
            *state = s;
            Gate::Pass
        }
        (SaslState::Handshake, Asked::Handshake(name)) => match Mechanism::parse(name) {
            Some(m) if config.mechanisms.contains(&m) => {
                *state = SaslState::Authenticate { mechanism: m, prior: None };
                Gate::Answer(handshake_answer(0, config))
            }
            // Kafka answers with its mechanisms and closes: the next request closes it here.
            _ => {
                tracing::info!(%peer, mechanism = name, "Kafka client asked for a SASL mechanism this listener does not offer");
                Gate::Answer(handshake_answer(ResponseError::UnsupportedSaslMechanism.code(), config))
            }
        },
        // KIP-368: a handshake on a logged-in connection whose session has a lifetime starts a
        // re-authentication, with the same mechanism.
        (SaslState::Authenticated(s), Asked::Handshake(name)) if s.expires.is_some() => {
            if Mechanism::parse(name) == Some(s.mechanism) {
                *state = SaslState::Authenticate { mechanism: s.mechanism, prior: Some(s) };
                Gate::Answer(handshake_answer(0, config))
            } else {
                tracing::info!(%peer, user = %s.user, mechanism = name, was = %s.mechanism, "Kafka client re-authenticating with another mechanism; authentication failed");
                stats.metrics.login(LoginOutcome::Failed);
                Gate::Answer(handshake_answer(ResponseError::SaslAuthenticationFailed.code(), config))
            }
        }
        (SaslState::Authenticate { .. } | SaslState::ScramFinal { .. }, Asked::Authenticate(bytes))
            if bytes.len() > SASL_MESSAGE_BYTES_MAX =>
        {
            tracing::info!(%peer, bytes = bytes.len(), "SASL message over {SASL_MESSAGE_BYTES_MAX} bytes; authentication failed");
            stats.metrics.login(LoginOutcome::Failed);
            Gate::Answer(failed(delay))
        }
        (SaslState::Authenticate { mechanism: Mechanism::Plain, prior }, Asked::Authenticate(bytes)) => {
            let login = match PlainLogin::parse(bytes) {
                Ok(l) => l,
                Err(e) => return refuse(&e, peer, delay),
            };
            // A user without a credential is checked against a made-up one, so the time taken
            // does not tell which users exist.
            let known = credentials.lookup(&login.user, ScramMechanism::Sha256);
            let checks = credentials.1.clone();
            let decided = checks.lock().unwrap_or_else(|p| p.into_inner()).decide(
                &login.user,
                known.as_ref(),
                &login.password,
                now,
            );
            match decided {
                PlainCheck::Passed => {
                    // This password passed PBKDF2 before: no check, no blocking thread.
                    return log_in(state, login.user, Mechanism::Plain, prior, Vec::new());
                }
                PlainCheck::OverBudget => {
                    tracing::info!(%peer, user = %login.user, "PLAIN password checks over --sasl-plain-checks-per-s-max this second; login refused without a check (SCRAM logins cost the broker no PBKDF2)");
                    return refuse(&SaslError::Unsupported("over the PLAIN check budget".into()), peer, delay);
                }
                PlainCheck::Check => {}
            }
            *state = SaslState::Checking;
            let cell = cell.clone();
            let finish = move |s| *cell.lock().unwrap_or_else(|p| p.into_inner()) = s;
            let max_reauth_ms = config.max_reauth_ms;
            let stats = stats.clone();
            Gate::Answer(Handled::serial(async move {
                let user = login.user.clone();
                let checked = tokio::task::spawn_blocking(move || match known {
                    Some(c) => {
                        let ok = c.matches_password(&login.password);
                        if ok {
                            checks.lock().unwrap_or_else(|p| p.into_inner()).passed(&login.user, &c, &login.password);
                        }
                        ok
                    }
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
                let session = checked
                    .then(|| logged_in(user.clone(), Mechanism::Plain, prior.as_ref(), max_reauth_ms, Instant::now()))
                    .flatten();
                match session {
                    Some(s) => {
                        logged(peer, &s, prior.is_some(), &stats);
                        finish(SaslState::Authenticated(s));
                        authenticate_answer(Vec::new(), max_reauth_ms)
                    }
                    None => {
                        tracing::info!(%peer, %user, reauthentication = prior.is_some(), "Kafka client failed PLAIN authentication");
                        stats.metrics.login(LoginOutcome::Failed);
                        finish(SaslState::Failed);
                        failed(delay).into_future().await
                    }
                }
            }))
        }
        (SaslState::Authenticate { mechanism: Mechanism::Scram(m), prior }, Asked::Authenticate(bytes)) => {
            let lookup = |user: &str| credentials.lookup(user, m);
            let (exchange, server_first) =
                match ScramExchange::first_round(m, bytes, lookup, &net::client::scram_nonce()) {
                    Ok(started) => started,
                    Err(e) => return refuse(&e, peer, delay),
                };
            if let Some(p) = prior.as_ref().filter(|p| p.user != exchange.user()) {
                let e = SaslError::Unsupported(format!("re-authentication as {:?}, not {:?}", exchange.user(), p.user));
                return refuse(&e, peer, delay);
            }
            *state = SaslState::ScramFinal { exchange, prior };
            Gate::Answer(Handled::answer(authenticate_answer(server_first, 0)))
        }
        (SaslState::ScramFinal { exchange, prior }, Asked::Authenticate(bytes)) => {
            let mechanism = Mechanism::Scram(exchange.mechanism());
            match exchange.finish(bytes) {
                Ok((user, server_final)) => log_in(state, user, mechanism, prior, server_final),
                Err(e) => refuse(&e, peer, delay),
            }
        }
        (s @ SaslState::Authenticated(_), Asked::Handshake(_)) => {
            *state = s;
            Gate::Answer(illegal_handshake())
        }
        (s @ SaslState::Authenticated(_), Asked::Authenticate(_)) => {
            *state = s;
            Gate::Answer(Handled::answer(illegal_state("this connection has authenticated already")))
        }
        (s @ SaslState::Authenticated(_), Asked::Other) => {
            *state = s;
            Gate::Pass
        }
        (s, _) => {
            tracing::info!(%peer, state = ?s, "a Kafka request out of turn in SASL authentication; closing the connection");
            Gate::Answer(Handled::answer(KafkaAnswer::Close))
        }
    }
}

/// The session of `user`, who has just proved its password with `mechanism` at `now`: `None`
/// if this renews `prior` as another user (a re-authentication keeps the principal, KIP-368).
fn logged_in(
    user: String,
    mechanism: Mechanism,
    prior: Option<&Session>,
    max_reauth_ms: u64,
    now: Instant,
) -> Option<Session> {
    if prior.is_some_and(|p| p.user != user) {
        return None;
    }
    // A lifetime past what the clock can count is no end.
    let expires = (max_reauth_ms > 0).then(|| now.checked_add(Duration::from_millis(max_reauth_ms))).flatten();
    Some(Session { user, mechanism, expires })
}

/// A login succeeded: logged at debug, a re-authentication (once a session lifetime) at info.
fn logged(peer: std::net::SocketAddr, s: &Session, reauthentication: bool, stats: &BrokerStats) {
    stats.metrics.login(if reauthentication { LoginOutcome::Reauthenticated } else { LoginOutcome::Authenticated });
    if reauthentication {
        tracing::info!(%peer, user = %s.user, mechanism = %s.mechanism, "Kafka client re-authenticated (KIP-368)");
    } else {
        tracing::debug!(%peer, user = %s.user, mechanism = %s.mechanism, "Kafka client authenticated");
    }
}

/// A failed exchange: logged with why, answered with [`FAILED`] only; the state stays Failed.
fn refuse(e: &SaslError, peer: std::net::SocketAddr, delay_ms: u64) -> Gate {
    tracing::info!(%peer, error = %e, "Kafka client failed SASL authentication");
    Gate::Answer(failed(delay_ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::sasl::ScramClient;
    use protocol::UserCredential;

    const PEER: std::net::SocketAddr =
        std::net::SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9);

    /// Alice and bob with SCRAM-SHA-512 credentials ("a-pw", "b-pw").
    fn credentials() -> CredentialCache {
        let cache = CredentialCache::default();
        let users = [("alice", "a-pw"), ("bob", "b-pw")]
            .into_iter()
            .map(|(user, pw)| UserCredential {
                user: user.into(),
                credential: ScramCredential::from_password(ScramMechanism::Sha512, pw.as_bytes(), vec![7; 16], 4096),
            })
            .collect();
        cache.replace(Credentials { version: 1, users });
        cache
    }

    /// One connection's gate at a clock the test moves.
    struct Conn {
        cell: Arc<Mutex<SaslState>>,
        config: SaslConfig,
        credentials: CredentialCache,
        now: Instant,
        stats: Arc<BrokerStats>,
    }

    /// What the gate did with a request.
    #[derive(Debug, PartialEq)]
    enum Did {
        Pass,
        Close,
        /// An answer with this error code (0: none).
        Code(i16),
    }

    impl Conn {
        fn new(max_reauth_ms: u64) -> Conn {
            let config = SaslConfig { max_reauth_ms, failed_authentication_delay_ms: 0, ..SaslConfig::default() };
            let cell = Arc::new(Mutex::new(SaslState::new(Some(&config), None)));
            Conn { cell, config, credentials: credentials(), now: Instant::now(), stats: Arc::default() }
        }

        fn ask(&self, asked: Asked<'_>) -> (Did, Option<SaslAuthenticateResponse>) {
            let mut state = std::mem::replace(&mut *self.cell.lock().unwrap(), SaslState::Failed);
            let gate =
                gate(&mut state, &self.cell, &self.config, &self.credentials, asked, PEER, self.now, &self.stats);
            *self.cell.lock().unwrap() = state;
            let answer = match gate {
                Gate::Pass => return (Did::Pass, None),
                Gate::Answer(h) => h.into_future(),
            };
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            match rt.block_on(answer) {
                KafkaAnswer::Close => (Did::Close, None),
                KafkaAnswer::Reply(ResponseKind::SaslHandshake(r)) => (Did::Code(r.error_code), None),
                KafkaAnswer::Reply(ResponseKind::SaslAuthenticate(r)) => (Did::Code(r.error_code), Some(r)),
                other => panic!("unexpected answer {other:?}"),
            }
        }

        /// A SCRAM-SHA-512 login as `user` with `password`: the last answer's code and session
        /// lifetime.
        fn login(&self, mechanism: &str, user: &str, password: &str) -> (i16, i64) {
            assert_eq!(self.ask(Asked::Handshake(mechanism)).0, Did::Code(0));
            let (mut client, first) = ScramClient::new(ScramMechanism::Sha512, user, password.as_bytes(), "cnonce");
            let (did, r) = self.ask(Asked::Authenticate(&Bytes::from(first)));
            let Some(r) = r.filter(|_| did == Did::Code(0)) else {
                return (
                    match did {
                        Did::Code(c) => c,
                        d => panic!("{d:?}"),
                    },
                    0,
                );
            };
            let last = client.server_first(&r.auth_bytes).unwrap();
            let (did, r) = self.ask(Asked::Authenticate(&Bytes::from(last)));
            let r = r.unwrap();
            let Did::Code(code) = did else { panic!("{did:?}") };
            (code, r.session_lifetime_ms)
        }

        fn user(&self) -> String {
            self.cell.lock().unwrap().user().to_string()
        }
    }

    #[test]
    fn without_a_lifetime_a_login_lasts_and_a_second_handshake_is_refused() {
        let mut c = Conn::new(0);
        assert_eq!(c.login("SCRAM-SHA-512", "alice", "a-pw"), (0, 0));
        c.now += Duration::from_secs(86_400);
        assert_eq!(c.ask(Asked::Other).0, Did::Pass);
        assert_eq!(c.ask(Asked::Handshake("SCRAM-SHA-512")).0, Did::Code(ResponseError::IllegalSaslState.code()));
        assert_eq!(c.ask(Asked::Other).0, Did::Pass, "the refused handshake leaves the login as it was");
    }

    #[test]
    fn a_lifetime_past_what_the_clock_counts_is_no_end() {
        let mut c = Conn::new(u64::MAX);
        assert_eq!(c.login("SCRAM-SHA-512", "alice", "a-pw"), (0, i64::MAX));
        c.now += Duration::from_secs(86_400);
        assert_eq!(c.ask(Asked::Other).0, Did::Pass);
    }

    #[test]
    fn a_session_ends_at_its_lifetime_unless_the_client_logs_in_again_as_itself() {
        let mut c = Conn::new(1_000);
        assert_eq!(c.login("SCRAM-SHA-512", "alice", "a-pw"), (0, 1_000), "the final answer tells the lifetime");
        c.now += Duration::from_millis(900);
        assert_eq!(c.ask(Asked::Other).0, Did::Pass);
        assert_eq!(c.login("SCRAM-SHA-512", "alice", "a-pw"), (0, 1_000), "re-authenticated");
        assert_eq!(c.user(), "alice");
        c.now += Duration::from_millis(900);
        assert_eq!(c.ask(Asked::Other).0, Did::Pass, "the new session counts from the re-authentication");
        c.now += Duration::from_millis(100);
        assert_eq!(c.ask(Asked::Other).0, Did::Close, "a request after the session ended closes the connection");
        assert_eq!(c.ask(Asked::ApiVersions).0, Did::Close);
    }

    #[test]
    fn an_ended_session_closes_on_apiversions_too() {
        let mut c = Conn::new(1_000);
        c.login("SCRAM-SHA-512", "alice", "a-pw");
        c.now += Duration::from_millis(1_000);
        assert_eq!(c.ask(Asked::ApiVersions).0, Did::Close);
    }

    #[test]
    fn a_reauthentication_as_another_user_or_with_another_mechanism_fails_and_closes() {
        let c = Conn::new(1_000);
        c.login("SCRAM-SHA-512", "alice", "a-pw");
        assert_eq!(c.login("SCRAM-SHA-512", "bob", "b-pw").0, ResponseError::SaslAuthenticationFailed.code());
        assert_eq!(c.ask(Asked::Other).0, Did::Close, "a failed re-authentication ends the connection");

        let c = Conn::new(1_000);
        c.login("SCRAM-SHA-512", "alice", "a-pw");
        let code = ResponseError::SaslAuthenticationFailed.code();
        assert_eq!(c.ask(Asked::Handshake("SCRAM-SHA-256")).0, Did::Code(code));
        assert_eq!(c.ask(Asked::Other).0, Did::Close);
    }

    #[test]
    fn a_deleted_credential_or_a_wrong_password_ends_the_session_at_its_renewal() {
        let c = Conn::new(1_000);
        c.login("SCRAM-SHA-512", "alice", "a-pw");
        assert_eq!(c.login("SCRAM-SHA-512", "alice", "wrong").0, ResponseError::SaslAuthenticationFailed.code());
        assert_eq!(c.ask(Asked::Other).0, Did::Close);

        let c = Conn::new(1_000);
        c.login("SCRAM-SHA-512", "alice", "a-pw");
        c.credentials.replace(Credentials { version: 2, users: Vec::new() });
        assert_eq!(c.ask(Asked::Other).0, Did::Pass, "the session lasts until its renewal");
        assert_eq!(c.login("SCRAM-SHA-512", "alice", "a-pw").0, ResponseError::SaslAuthenticationFailed.code());
        assert_eq!(c.ask(Asked::Other).0, Did::Close);
    }

    #[test]
    fn during_a_reauthentication_other_requests_close_the_connection() {
        let c = Conn::new(1_000);
        c.login("SCRAM-SHA-512", "alice", "a-pw");
        assert_eq!(c.ask(Asked::Handshake("SCRAM-SHA-512")).0, Did::Code(0));
        assert_eq!(c.ask(Asked::Other).0, Did::Close);
    }

    #[test]
    fn plain_reauthenticates_as_itself_only() {
        let mut c = Conn::new(1_000);
        c.config.mechanisms = vec![Mechanism::Plain];
        c.credentials.replace(Credentials {
            version: 2,
            users: vec![UserCredential {
                user: "alice".into(),
                credential: ScramCredential::from_password(ScramMechanism::Sha256, b"a-pw", vec![1; 16], 4096),
            }],
        });
        let plain = |c: &Conn, user: &str, pw: &str| {
            assert_eq!(c.ask(Asked::Handshake("PLAIN")).0, Did::Code(0));
            let msg = Bytes::from(PlainLogin::encode(user, pw.as_bytes()));
            let (did, r) = c.ask(Asked::Authenticate(&msg));
            (did, r.map(|r| r.session_lifetime_ms))
        };
        assert_eq!(plain(&c, "alice", "a-pw"), (Did::Code(0), Some(1_000)));
        assert_eq!(plain(&c, "alice", "a-pw"), (Did::Code(0), Some(1_000)));
        assert_eq!(c.user(), "alice");
        assert_eq!(plain(&c, "alice", "nope").0, Did::Code(ResponseError::SaslAuthenticationFailed.code()));
        assert_eq!(c.ask(Asked::Other).0, Did::Close);
    }

    #[test]
    fn past_the_plain_budget_wrong_passwords_are_refused_unchecked_and_a_known_one_still_logs_in() {
        let mut c = Conn::new(0);
        c.config.mechanisms = vec![Mechanism::Plain];
        c.credentials = CredentialCache::new(1);
        let user = |name: &str, pw: &[u8]| UserCredential {
            user: name.into(),
            credential: ScramCredential::from_password(ScramMechanism::Sha256, pw, vec![1; 16], 4096),
        };
        c.credentials.replace(Credentials { version: 1, users: vec![user("alice", b"a-pw"), user("bob", b"b-pw")] });
        let login = |c: &mut Conn, name: &str, pw: &str| {
            c.cell = Arc::new(Mutex::new(SaslState::new(Some(&c.config), None))); // a new connection
            assert_eq!(c.ask(Asked::Handshake("PLAIN")).0, Did::Code(0));
            c.ask(Asked::Authenticate(&Bytes::from(PlainLogin::encode(name, pw.as_bytes())))).0
        };
        let failed = Did::Code(ResponseError::SaslAuthenticationFailed.code());
        assert_eq!(login(&mut c, "alice", "a-pw"), Did::Code(0), "checked: the second's one check");
        for _ in 0..5 {
            assert_eq!(login(&mut c, "alice", "guess"), failed, "over the budget: refused unchecked");
        }
        assert_eq!(login(&mut c, "alice", "a-pw"), Did::Code(0), "a password that passed needs no check");
        assert_eq!(
            login(&mut c, "bob", "b-pw"),
            failed,
            "the budget is the broker's: over it, a password not checked before is refused too"
        );
        assert_eq!(c.stats.metrics.login_count(LoginOutcome::Failed), 6);
        c.now += Duration::from_secs(1);
        assert_eq!(login(&mut c, "bob", "b-pw"), Did::Code(0), "checked a second later, and right");
    }
}
