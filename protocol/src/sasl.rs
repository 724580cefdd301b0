//! SASL as Kafka's broker runs it on its listeners: PLAIN (RFC 4616) and SCRAM-SHA-256 /
//! SCRAM-SHA-512 (RFC 5802, RFC 7677), with Kafka's choices (no SASLprep; no channel binding;
//! `tokenauth` delegation tokens refused; every failure one generic error). Pure functions and
//! types: no I/O and no randomness (callers bring salts and nonces), so the broker's connection
//! task, its fuzz target and the project's own Kafka client share them.
//!
//! A SCRAM exchange on the server: [`ClientFirst::parse`] the client's first message, look the
//! user's [`ScramCredential`] up, [`ScramExchange::start`] it (the server-first message), then
//! [`ScramExchange::finish`] with the client's final message: it checks the proof and gives the
//! server-final message. The client's side is [`ScramClient`].

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

/// Fewest PBKDF2 iterations a SCRAM credential may have (Kafka's `ScramMechanism.minIterations`).
pub const ITERATIONS_MIN: u32 = 4096;
/// Most PBKDF2 iterations a SCRAM credential may have (Kafka's limit; clients refuse more than 1e6).
pub const ITERATIONS_MAX: u32 = 16384;
/// Longest SASL message the broker reads before the connection is authenticated, in bytes
/// (Kafka's `SaslServerAuthenticator.MAX_RECEIVE_SIZE`).
pub const SASL_MESSAGE_BYTES_MAX: usize = 524_288;
/// The one message every failed authentication gets: which part failed is not told.
pub const FAILED: &str = "Authentication failed: invalid credentials";

/// A SASL mechanism the broker offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    /// `PLAIN`: the password in the clear (use it over TLS only).
    Plain,
    /// `SCRAM-SHA-256` / `SCRAM-SHA-512`.
    Scram(ScramMechanism),
}

impl Mechanism {
    /// Every mechanism, in the order a broker lists them.
    pub const ALL: [Mechanism; 3] =
        [Mechanism::Scram(ScramMechanism::Sha256), Mechanism::Scram(ScramMechanism::Sha512), Mechanism::Plain];

    /// The name SaslHandshake carries.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::Scram(m) => m.name(),
        }
    }

    /// The mechanism of a SaslHandshake name (exact, as Kafka compares).
    pub fn parse(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name)
    }
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A SCRAM hash function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScramMechanism {
    /// SHA-256 (Kafka's mechanism type 1).
    Sha256,
    /// SHA-512 (Kafka's mechanism type 2).
    Sha512,
}

impl ScramMechanism {
    /// Both, in Kafka's order.
    pub const ALL: [ScramMechanism; 2] = [ScramMechanism::Sha256, ScramMechanism::Sha512];

    /// `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// The mechanism of its name.
    pub fn parse(name: &str) -> Option<ScramMechanism> {
        ScramMechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The number KIP-554's requests carry (1, 2).
    pub fn kafka_type(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    /// The mechanism of a KIP-554 number.
    pub fn from_kafka_type(t: i8) -> Option<ScramMechanism> {
        ScramMechanism::ALL.into_iter().find(|m| m.kafka_type() == t)
    }

    fn hmac(self, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        fn run<M: Mac + hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
            let mut mac = <M as Mac>::new_from_slice(key).expect("HMAC takes keys of any length");
            for p in parts {
                mac.update(p);
            }
            mac.finalize().into_bytes().to_vec()
        }
        match self {
            ScramMechanism::Sha256 => run::<Hmac<Sha256>>(key, parts),
            ScramMechanism::Sha512 => run::<Hmac<Sha512>>(key, parts),
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramMechanism::Sha256 => Sha256::digest(data).to_vec(),
            ScramMechanism::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// PBKDF2-HMAC of `password` (Hi() of RFC 5802): the salted password. Costs `iterations`
    /// HMACs: run it off any task that serves connections.
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            ScramMechanism::Sha256 => pbkdf2::pbkdf2_hmac_array::<Sha256, 32>(password, salt, iterations).to_vec(),
            ScramMechanism::Sha512 => pbkdf2::pbkdf2_hmac_array::<Sha512, 64>(password, salt, iterations).to_vec(),
        }
    }
}

impl std::fmt::Display for ScramMechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a broker keeps of one user's password for one mechanism: never the password, nor
/// anything a client could log in with (RFC 5802's stored and server keys).
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    /// The hash function.
    pub mechanism: ScramMechanism,
    /// The salt.
    pub salt: Vec<u8>,
    /// PBKDF2 iterations.
    pub iterations: u32,
    /// H(HMAC(salted password, "Client Key")).
    pub stored_key: Vec<u8>,
    /// HMAC(salted password, "Server Key").
    pub server_key: Vec<u8>,
}

impl std::fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ScramCredential({}, {} iterations)", self.mechanism, self.iterations)
    }
}

impl ScramCredential {
    /// The credential of a salted password (what KIP-554's AlterUserScramCredentials carries).
    pub fn from_salted_password(
        mechanism: ScramMechanism,
        salted_password: &[u8],
        salt: Vec<u8>,
        iterations: u32,
    ) -> ScramCredential {
        let client_key = mechanism.hmac(salted_password, &[b"Client Key"]);
        ScramCredential {
            mechanism,
            salt,
            iterations,
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(salted_password, &[b"Server Key"]),
        }
    }

    /// The credential of a password (PBKDF2: costly, see [`ScramMechanism::salted_password`]).
    pub fn from_password(
        mechanism: ScramMechanism,
        password: &[u8],
        salt: Vec<u8>,
        iterations: u32,
    ) -> ScramCredential {
        let salted = mechanism.salted_password(password, &salt, iterations);
        ScramCredential::from_salted_password(mechanism, &salted, salt, iterations)
    }

    /// Whether `password` is this credential's (a PLAIN login; PBKDF2, so costly). Constant time
    /// in the comparison.
    pub fn matches_password(&self, password: &[u8]) -> bool {
        let other = ScramCredential::from_password(self.mechanism, password, self.salt.clone(), self.iterations);
        bool::from(other.stored_key.ct_eq(&self.stored_key))
    }
}

/// Why an exchange failed. The client is only ever told [`FAILED`]; this is for the log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SaslError {
    /// A message that is not what the mechanism's step expects.
    #[error("malformed {step}: {why}")]
    Malformed {
        /// Which message.
        step: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// A feature Kafka refuses too (channel binding, delegation tokens, another authzid).
    #[error("{0}")]
    Unsupported(String),
    /// No credential for this user and mechanism.
    #[error("no {mechanism} credential for user {user:?}")]
    UnknownUser {
        /// The user named.
        user: String,
        /// The mechanism asked.
        mechanism: Mechanism,
    },
    /// The password or proof is wrong.
    #[error("wrong password for user {0:?}")]
    BadCredentials(String),
    /// The client-final message names another nonce than the exchange's: a message replayed
    /// from another exchange, or a client that repeats its own nonce in it (librdkafka before
    /// 2.6.1), which Kafka 4 refuses as strictly (RFC 5802).
    #[error(
        "user {0:?}'s SCRAM client-final message names another nonce than the exchange's (a replayed message, \
         or librdkafka before 2.6.1, which repeats its own nonce: Kafka 4 refuses it too; upgrade the client)"
    )]
    NonceMismatch(String),
}

fn malformed(step: &'static str, why: impl Into<String>) -> SaslError {
    SaslError::Malformed { step, why: why.into() }
}

/// A PLAIN login: `[authzid] NUL authcid NUL password`.
#[derive(Clone, PartialEq, Eq)]
pub struct PlainLogin {
    /// The user (authcid).
    pub user: String,
    /// The password.
    pub password: Vec<u8>,
}

impl std::fmt::Debug for PlainLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PlainLogin({:?})", self.user)
    }
}

impl PlainLogin {
    /// Parse a PLAIN message. As Kafka's `PlainSaslServer`: the authzid must be empty or the
    /// user's, user and password non-empty.
    pub fn parse(msg: &[u8]) -> Result<PlainLogin, SaslError> {
        let parts: Vec<&[u8]> = msg.split(|b| *b == 0).collect();
        let [authzid, user, password] = parts[..] else {
            return Err(malformed("PLAIN message", format!("{} NUL-separated parts, not 3", parts.len())));
        };
        let user = std::str::from_utf8(user).map_err(|_| malformed("PLAIN message", "the user is not UTF-8"))?;
        if user.is_empty() || password.is_empty() {
            return Err(malformed("PLAIN message", "an empty user or password"));
        }
        if !authzid.is_empty() && authzid != user.as_bytes() {
            return Err(SaslError::Unsupported("PLAIN: the authorization id differs from the user".into()));
        }
        Ok(PlainLogin { user: user.to_string(), password: password.to_vec() })
    }

    /// The message librdkafka sends (`\0user\0password`).
    pub fn encode(user: &str, password: &[u8]) -> Vec<u8> {
        let mut m = vec![0];
        m.extend_from_slice(user.as_bytes());
        m.push(0);
        m.extend_from_slice(password);
        m
    }
}

/// A SCRAM user name as the wire carries it: `=2C` for `,` and `=3D` for `=`.
fn unescape_name(s: &str) -> Result<String, SaslError> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(malformed("client-first message", "an '=' in the user name that is not =2C or =3D")),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

fn escape_name(s: &str) -> String {
    s.replace('=', "=3D").replace(',', "=2C")
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

fn b64_encode(bytes: &[u8]) -> String {
    base64::Engine::encode(&b64(), bytes)
}

fn b64_decode(step: &'static str, what: &str, s: &str) -> Result<Vec<u8>, SaslError> {
    base64::Engine::decode(&b64(), s).map_err(|_| malformed(step, format!("{what} is not base64")))
}

/// A printable SCRAM nonce: no ',' and only ASCII 0x21..=0x7e.
fn valid_nonce(n: &str) -> bool {
    !n.is_empty() && n.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

/// The client's first SCRAM message, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFirst {
    /// The user, unescaped.
    pub user: String,
    /// The client's nonce.
    pub nonce: String,
    /// The message without its GS2 header (part of what both sides sign).
    bare: String,
    /// The GS2 header (`n,,` or `n,a=NAME,`): the final message's channel binding repeats it.
    gs2_header: String,
}

impl ClientFirst {
    /// Parse `n,[a=authzid],n=name,r=nonce[,extensions]` as Kafka's `ScramSaslServer` does.
    pub fn parse(msg: &[u8]) -> Result<ClientFirst, SaslError> {
        const STEP: &str = "client-first message";
        let msg = std::str::from_utf8(msg).map_err(|_| malformed(STEP, "not UTF-8"))?;
        let rest = match msg.split_once(',') {
            Some(("n", rest)) => rest,
            Some(("y" | "p", _)) => {
                return Err(SaslError::Unsupported("SCRAM channel binding is not supported".into()))
            }
            Some(_) | None => return Err(malformed(STEP, "no GS2 header 'n,'")),
        };
        let (authzid, bare) = rest.split_once(',').ok_or_else(|| malformed(STEP, "no authorization id field"))?;
        let mut fields = bare.split(',');
        let name =
            fields.next().and_then(|f| f.strip_prefix("n=")).ok_or_else(|| malformed(STEP, "no 'n=' user name"))?;
        let nonce = fields.next().and_then(|f| f.strip_prefix("r=")).ok_or_else(|| malformed(STEP, "no 'r=' nonce"))?;
        let user = unescape_name(name)?;
        if user.is_empty() {
            return Err(malformed(STEP, "an empty user name"));
        }
        if !valid_nonce(nonce) {
            return Err(malformed(STEP, "a nonce with characters SCRAM does not allow"));
        }
        for ext in fields {
            if ext == "tokenauth=true" {
                return Err(SaslError::Unsupported("delegation tokens are not supported".into()));
            }
        }
        if !authzid.is_empty() {
            let a = authzid.strip_prefix("a=").ok_or_else(|| malformed(STEP, "a malformed authorization id"))?;
            if unescape_name(a)? != user {
                return Err(SaslError::Unsupported("SCRAM: the authorization id differs from the user".into()));
            }
        }
        let gs2_header = format!("n,{authzid},");
        Ok(ClientFirst { user, nonce: nonce.to_string(), bare: bare.to_string(), gs2_header })
    }
}

/// A SCRAM exchange on the server, between its first and its final message.
#[derive(Debug)]
pub struct ScramExchange {
    user: String,
    credential: ScramCredential,
    nonce: String,
    client_first_bare: String,
    gs2_header: String,
    server_first: String,
}

impl ScramExchange {
    /// Answer `first` with the user's credential: returns the exchange and the server-first
    /// message (`r=nonce,s=salt,i=iterations`). `server_nonce` must be printable (base64 of
    /// random bytes, say).
    pub fn start(first: ClientFirst, credential: ScramCredential, server_nonce: &str) -> (ScramExchange, Vec<u8>) {
        debug_assert!(valid_nonce(server_nonce));
        let nonce = format!("{}{server_nonce}", first.nonce);
        let server_first = format!("r={nonce},s={},i={}", b64_encode(&credential.salt), credential.iterations);
        let out = server_first.clone().into_bytes();
        let exchange = ScramExchange {
            user: first.user,
            credential,
            nonce,
            client_first_bare: first.bare,
            gs2_header: first.gs2_header,
            server_first,
        };
        (exchange, out)
    }

    /// The server's answer to a SCRAM login's first message `msg` under `mechanism`: the
    /// user's credential found by `lookup`, refused if it is missing or has fewer than
    /// [`ITERATIONS_MIN`] iterations; the exchange and the server-first message.
    pub fn first_round(
        mechanism: ScramMechanism,
        msg: &[u8],
        lookup: impl FnOnce(&str) -> Option<ScramCredential>,
        server_nonce: &str,
    ) -> Result<(ScramExchange, Vec<u8>), SaslError> {
        let first = ClientFirst::parse(msg)?;
        let credential = lookup(&first.user).filter(|c| c.mechanism == mechanism).ok_or_else(|| {
            SaslError::UnknownUser { user: first.user.clone(), mechanism: Mechanism::Scram(mechanism) }
        })?;
        if credential.iterations < ITERATIONS_MIN {
            return Err(SaslError::Unsupported("a credential with too few iterations".into()));
        }
        Ok(ScramExchange::start(first, credential, server_nonce))
    }

    /// The user the exchange logs in.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The hash function of the exchange.
    pub fn mechanism(&self) -> ScramMechanism {
        self.credential.mechanism
    }

    /// Check the client-final message (`c=biws,r=nonce,p=proof`): the authenticated user and
    /// the server-final message (`v=signature`).
    pub fn finish(self, msg: &[u8]) -> Result<(String, Vec<u8>), SaslError> {
        const STEP: &str = "client-final message";
        let msg = std::str::from_utf8(msg).map_err(|_| malformed(STEP, "not UTF-8"))?;
        let (without_proof, proof) = msg.rsplit_once(",p=").ok_or_else(|| malformed(STEP, "no 'p=' proof"))?;
        let mut fields = without_proof.split(',');
        let binding = fields
            .next()
            .and_then(|f| f.strip_prefix("c="))
            .ok_or_else(|| malformed(STEP, "no 'c=' channel binding"))?;
        let nonce = fields.next().and_then(|f| f.strip_prefix("r=")).ok_or_else(|| malformed(STEP, "no 'r=' nonce"))?;
        if b64_decode(STEP, "the channel binding", binding)? != self.gs2_header.as_bytes() {
            return Err(malformed(STEP, "a channel binding other than the client-first message's GS2 header"));
        }
        if nonce != self.nonce {
            return Err(SaslError::NonceMismatch(self.user));
        }
        let proof = b64_decode(STEP, "the proof", proof)?;
        let m = self.credential.mechanism;
        let auth_message = format!("{},{},{}", self.client_first_bare, self.server_first, without_proof);
        let signature = m.hmac(&self.credential.stored_key, &[auth_message.as_bytes()]);
        if proof.len() != signature.len() {
            return Err(SaslError::BadCredentials(self.user));
        }
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
        if !bool::from(m.hash(&client_key).ct_eq(&self.credential.stored_key)) {
            return Err(SaslError::BadCredentials(self.user));
        }
        let server_signature = m.hmac(&self.credential.server_key, &[auth_message.as_bytes()]);
        Ok((self.user, format!("v={}", b64_encode(&server_signature)).into_bytes()))
    }
}

/// The client's side of a SCRAM exchange (the project's own Kafka client and tests).
#[derive(Debug)]
pub struct ScramClient {
    mechanism: ScramMechanism,
    password: Vec<u8>,
    client_first_bare: String,
    nonce: String,
    /// Set by [`ScramClient::server_first`]: the server key and auth message to check the
    /// server-final message against.
    expect: Option<(Vec<u8>, String)>,
    /// A salted password computed before: (salt, iterations, SaltedPassword), used when the
    /// server names that salt and count ([`ScramClient::with_salted_password`]).
    salted: Option<(Vec<u8>, u32, Vec<u8>)>,
}

impl ScramClient {
    /// Most iterations a client accepts (librdkafka and kafka-python refuse more).
    pub const ITERATIONS_ACCEPTED_MAX: u32 = 1_000_000;

    /// Begin: the client-first message.
    pub fn new(mechanism: ScramMechanism, user: &str, password: &[u8], nonce: &str) -> (ScramClient, Vec<u8>) {
        let client_first_bare = format!("n={},r={nonce}", escape_name(user));
        let msg = format!("n,,{client_first_bare}").into_bytes();
        let client = ScramClient {
            mechanism,
            password: password.to_vec(),
            client_first_bare,
            nonce: nonce.to_string(),
            expect: None,
            salted: None,
        };
        (client, msg)
    }

    /// Use `salted_password`, the password's PBKDF2 under `salt` and `iterations` computed
    /// before, if the server names those (a load generator's clients skip the PBKDF2 a real
    /// client pays per login, so the server's cost is what is measured).
    pub fn with_salted_password(mut self, salt: Vec<u8>, iterations: u32, salted_password: Vec<u8>) -> ScramClient {
        self.salted = Some((salt, iterations, salted_password));
        self
    }

    /// Answer the server-first message: the client-final message (PBKDF2: costly).
    pub fn server_first(&mut self, msg: &[u8]) -> Result<Vec<u8>, SaslError> {
        const STEP: &str = "server-first message";
        let text = std::str::from_utf8(msg).map_err(|_| malformed(STEP, "not UTF-8"))?;
        let mut fields = text.split(',');
        let nonce = fields.next().and_then(|f| f.strip_prefix("r=")).ok_or_else(|| malformed(STEP, "no 'r=' nonce"))?;
        let salt = fields.next().and_then(|f| f.strip_prefix("s=")).ok_or_else(|| malformed(STEP, "no 's=' salt"))?;
        let iterations: u32 = fields
            .next()
            .and_then(|f| f.strip_prefix("i="))
            .and_then(|i| i.parse().ok())
            .ok_or_else(|| malformed(STEP, "no 'i=' iteration count"))?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err(malformed(STEP, "the nonce does not extend the client's"));
        }
        if iterations == 0 || iterations > Self::ITERATIONS_ACCEPTED_MAX {
            return Err(malformed(STEP, format!("{iterations} iterations")));
        }
        let salt = b64_decode(STEP, "the salt", salt)?;
        let m = self.mechanism;
        let salted = match &self.salted {
            Some((s, i, salted)) if *s == salt && *i == iterations => salted.clone(),
            _ => {
                let salted = m.salted_password(&self.password, &salt, iterations);
                self.salted = Some((salt, iterations, salted.clone()));
                salted
            }
        };
        let client_key = m.hmac(&salted, &[b"Client Key"]);
        let stored_key = m.hash(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{text},{without_proof}", self.client_first_bare);
        let signature = m.hmac(&stored_key, &[auth_message.as_bytes()]);
        let proof: Vec<u8> = client_key.iter().zip(&signature).map(|(k, s)| k ^ s).collect();
        self.expect = Some((m.hmac(&salted, &[b"Server Key"]), auth_message));
        Ok(format!("{without_proof},p={}", b64_encode(&proof)).into_bytes())
    }

    /// The salted password used, once [`ScramClient::server_first`] has run: (salt, iterations,
    /// SaltedPassword), for [`ScramClient::with_salted_password`].
    pub fn salted_password(&self) -> Option<(Vec<u8>, u32, Vec<u8>)> {
        self.salted.clone()
    }

    /// Check the server-final message: did we reach a server that knows the credential?
    pub fn server_final(&self, msg: &[u8]) -> Result<(), SaslError> {
        const STEP: &str = "server-final message";
        let (server_key, auth_message) = self.expect.as_ref().ok_or_else(|| malformed(STEP, "before server-first"))?;
        let text = std::str::from_utf8(msg).map_err(|_| malformed(STEP, "not UTF-8"))?;
        let v = text.strip_prefix("v=").ok_or_else(|| malformed(STEP, "no 'v=' signature"))?;
        let expected = self.mechanism.hmac(server_key, &[auth_message.as_bytes()]);
        if bool::from(b64_decode(STEP, "the signature", v)?.ct_eq(&expected)) {
            Ok(())
        } else {
            Err(malformed(STEP, "the server's signature is wrong: it does not know the credential"))
        }
    }
}

/// Default of a broker's PLAIN password checks per second (`--sasl-plain-checks-per-s-max`).
pub const PLAIN_CHECKS_PER_S_MAX_DEFAULT: u32 = 50;

/// A broker's PLAIN logins (rules without I/O). A PLAIN password is checked against the user's
/// SCRAM credential with PBKDF2 (about a millisecond of CPU each at 4,096 iterations), which a
/// client that sends wrong passwords costs the broker and not itself. So the checks run under a
/// budget of `checks_per_s_max` a second (a token bucket holding one second's worth), and a
/// password that passed is remembered (a keyed HMAC of it, per user and credential): a user
/// logging in again costs an HMAC, not PBKDF2, and is not held up by a storm of wrong ones.
#[derive(Debug)]
pub struct PlainChecks {
    checks_per_s_max: u32,
    tokens: f64,
    last: Option<std::time::Instant>,
    /// A random key of this process for the HMACs of passwords that passed.
    key: [u8; 32],
    /// Per user: the credential's stored key and the HMAC of the password that passed.
    passed: std::collections::HashMap<String, (Vec<u8>, Vec<u8>)>,
}

/// What a PLAIN login needs, per [`PlainChecks::decide`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlainCheck {
    /// The password passed before against this credential: logged in, no PBKDF2.
    Passed,
    /// Check it with PBKDF2 (a token was taken).
    Check,
    /// Over the budget: refuse without a check.
    OverBudget,
}

impl PlainChecks {
    /// Checks under a budget of `checks_per_s_max` a second; `key` is random per process.
    pub fn new(checks_per_s_max: u32, key: [u8; 32]) -> PlainChecks {
        PlainChecks {
            checks_per_s_max,
            tokens: f64::from(checks_per_s_max),
            last: None,
            key,
            passed: std::collections::HashMap::new(),
        }
    }

    fn digest(&self, password: &[u8]) -> Vec<u8> {
        ScramMechanism::Sha256.hmac(&self.key, &[password])
    }

    /// What `user`'s PLAIN login with `password` needs at `now`, its credential being
    /// `credential` (`None`: an unknown user, checked against a made-up one all the same).
    pub fn decide(
        &mut self,
        user: &str,
        credential: Option<&ScramCredential>,
        password: &[u8],
        now: std::time::Instant,
    ) -> PlainCheck {
        if let (Some(c), Some((stored, digest))) = (credential, self.passed.get(user)) {
            if *stored == c.stored_key && bool::from(self.digest(password).ct_eq(digest)) {
                return PlainCheck::Passed;
            }
        }
        let per_s = f64::from(self.checks_per_s_max);
        let elapsed = self.last.map_or(0.0, |l| now.saturating_duration_since(l).as_secs_f64());
        self.tokens = (self.tokens + elapsed * per_s).min(per_s);
        // An earlier `now` (callers race to the lock) neither refills nor moves the clock back.
        self.last = Some(self.last.map_or(now, |l| l.max(now)));
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            PlainCheck::Check
        } else {
            PlainCheck::OverBudget
        }
    }

    /// `user`'s `password` passed a PBKDF2 check against `credential`: remember it (one entry
    /// per user, so at most one per user with a credential).
    pub fn passed(&mut self, user: &str, credential: &ScramCredential, password: &[u8]) {
        let digest = self.digest(password);
        self.passed.insert(user.to_string(), (credential.stored_key.clone(), digest));
    }
}

/// Parse a `--scram-users-file`: one `NAME=PASSWORD` per line; blank lines and lines starting
/// with `#` are skipped. The password is everything after the first `=` (names cannot hold one).
pub fn parse_users_file(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut users = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let Some((name, password)) = line.split_once('=') else {
            return Err(format!("line {}: expected NAME=PASSWORD", n + 1));
        };
        let name = name.trim();
        if name.is_empty() || password.is_empty() {
            return Err(format!("line {}: an empty name or password", n + 1));
        }
        if users.iter().any(|(u, _): &(String, String)| u == name) {
            return Err(format!("line {}: user {name:?} is listed twice", n + 1));
        }
        users.push((name.to_string(), password.to_string()));
    }
    Ok(users)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's SCRAM-SHA-256 example, byte for byte.
    #[test]
    fn rfc7677_example_verifies_and_signs() {
        let cred = ScramCredential::from_password(
            ScramMechanism::Sha256,
            b"pencil",
            b64_decode("t", "salt", "W22ZaJ0SNY7soEsUEjb6gQ==").unwrap(),
            4096,
        );
        let first = ClientFirst::parse(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO").unwrap();
        let (ex, server_first) = ScramExchange::start(first, cred, "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0");
        assert_eq!(
            server_first,
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096".to_vec()
        );
        let (user, server_final) = ex
            .finish(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
            .unwrap();
        assert_eq!(user, "user");
        assert_eq!(server_final, b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=".to_vec());
    }

    fn round_trip(m: ScramMechanism, stored_pw: &[u8], login_pw: &[u8]) -> Result<String, SaslError> {
        let cred = ScramCredential::from_password(m, stored_pw, b"salty".to_vec(), ITERATIONS_MIN);
        let (mut client, first) = ScramClient::new(m, "al=i,ce", login_pw, "cnonce");
        let (ex, server_first) = ScramExchange::start(ClientFirst::parse(&first)?, cred, "snonce");
        let fin = client.server_first(&server_first)?;
        let (user, server_final) = ex.finish(&fin)?;
        client.server_final(&server_final)?;
        Ok(user)
    }

    #[test]
    fn both_hashes_accept_the_password_and_refuse_another() {
        for m in ScramMechanism::ALL {
            assert_eq!(round_trip(m, b"secret", b"secret").unwrap(), "al=i,ce", "{m}: escaped name comes back");
            assert!(matches!(round_trip(m, b"secret", b"guess"), Err(SaslError::BadCredentials(_))), "{m}");
        }
    }

    #[test]
    fn a_replayed_final_message_fails_against_a_new_server_nonce() {
        let m = ScramMechanism::Sha512;
        let cred = ScramCredential::from_password(m, b"pw", b"s".to_vec(), ITERATIONS_MIN);
        let (mut client, first) = ScramClient::new(m, "bob", b"pw", "c1");
        let (_, server_first) = ScramExchange::start(ClientFirst::parse(&first).unwrap(), cred.clone(), "n1");
        let recorded = client.server_first(&server_first).unwrap();
        let (second, _) = ScramExchange::start(ClientFirst::parse(&first).unwrap(), cred, "n2");
        assert!(matches!(second.finish(&recorded), Err(SaslError::NonceMismatch(_))));
    }

    #[test]
    fn client_first_messages_kafka_refuses_are_refused() {
        for (msg, what) in [
            (&b"y,,n=u,r=x"[..], "channel binding"),
            (b"p=tls-unique,,n=u,r=x", "channel binding"),
            (b"n,a=other,n=u,r=x", "another authzid"),
            (b"n,,n=u,r=x,tokenauth=true", "a delegation token"),
            (b"n,,n=,r=x", "an empty name"),
            (b"n,,n=a=2Xb,r=x", "a bad escape"),
            (b"n,,r=x", "no name"),
            (b"n,,n=u", "no nonce"),
            (b"n,,n=u,r=a,b", "fine: extensions ignored"),
            (b"", "empty"),
            (b"\xff\xfe", "not UTF-8"),
        ] {
            let r = ClientFirst::parse(msg);
            assert_eq!(r.is_ok(), what.starts_with("fine"), "{what}: {r:?}");
        }
        assert_eq!(ClientFirst::parse(b"n,a=u,n=u,r=x").unwrap().user, "u", "an authzid equal to the user");
    }

    #[test]
    fn plain_messages_of_both_clients_parse_and_others_do_not() {
        let librdkafka = PlainLogin::parse(b"\0alice\0pw").unwrap();
        let kafka_python = PlainLogin::parse(b"alice\0alice\0pw").unwrap();
        assert_eq!(librdkafka, kafka_python);
        assert_eq!(librdkafka.password, b"pw");
        assert!(PlainLogin::parse(b"bob\0alice\0pw").is_err(), "another authzid");
        assert!(PlainLogin::parse(b"\0alice\0").is_err(), "empty password");
        assert!(PlainLogin::parse(b"\0\0pw").is_err(), "empty user");
        assert!(PlainLogin::parse(b"alice").is_err());
        assert!(PlainLogin::parse(b"\0a\0b\0c").is_err());
        let cred = ScramCredential::from_password(ScramMechanism::Sha256, b"pw", b"s".to_vec(), ITERATIONS_MIN);
        assert!(cred.matches_password(b"pw"));
        assert!(!cred.matches_password(b"pW"));
    }

    #[test]
    fn users_files_parse_with_their_errors_named() {
        let users = parse_users_file("# admins\nalice=a=b\n\nbob=pw\r\n").unwrap();
        assert_eq!(users, vec![("alice".into(), "a=b".into()), ("bob".into(), "pw".into())]);
        assert!(parse_users_file("alice").unwrap_err().contains("line 1"));
        assert!(parse_users_file("a=1\na=2").unwrap_err().contains("twice"));
        assert!(parse_users_file("=pw").is_err());
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_client_messages_never_panic(first: Vec<u8>, last: Vec<u8>) {
            let _ = PlainLogin::parse(&first);
            if let Ok(f) = ClientFirst::parse(&first) {
                let cred = ScramCredential::from_salted_password(ScramMechanism::Sha256, b"x", b"s".to_vec(), 4096);
                let (ex, _) = ScramExchange::start(f, cred, "n");
                let _ = ex.finish(&last);
            }
        }
    }

    #[test]
    fn plain_checks_run_under_a_budget_and_a_password_that_passed_needs_none() {
        use std::time::{Duration, Instant};
        let c = ScramCredential::from_password(ScramMechanism::Sha256, b"pw", vec![1; 16], 4096);
        let mut checks = PlainChecks::new(2, [7; 32]);
        let t0 = Instant::now();
        assert_eq!(checks.decide("alice", Some(&c), b"pw", t0), PlainCheck::Check);
        checks.passed("alice", &c, b"pw");
        assert_eq!(checks.decide("mallory", None, b"guess", t0), PlainCheck::Check);
        assert_eq!(checks.decide("alice", Some(&c), b"guess", t0), PlainCheck::OverBudget, "two a second");
        assert_eq!(checks.decide("alice", Some(&c), b"pw", t0), PlainCheck::Passed, "no budget needed");
        // Half a second later one more check; a second later the bucket is full (2), not more.
        assert_eq!(checks.decide("alice", Some(&c), b"guess", t0 + Duration::from_millis(500)), PlainCheck::Check);
        let later = t0 + Duration::from_secs(60);
        assert_eq!(checks.decide("x", None, b"1", later), PlainCheck::Check);
        assert_eq!(checks.decide("x", None, b"2", later), PlainCheck::Check);
        assert_eq!(checks.decide("x", None, b"3", later), PlainCheck::OverBudget);
        // A changed credential (a new password) forgets the one that passed.
        let changed = ScramCredential::from_password(ScramMechanism::Sha256, b"new", vec![2; 16], 4096);
        assert_eq!(checks.decide("alice", Some(&changed), b"pw", later), PlainCheck::OverBudget);
    }
}
