//! Cluster membership proofs: pure functions, no I/O, no randomness (callers bring nonces).
//!
//! Members share a secret. To prove membership on a connection, the dialler asks for a
//! challenge (`AuthBegin`), gets a fresh 32-byte server nonce, and answers (`AuthProve`) with its
//! own nonce and `HMAC-SHA256(secret, "epochfence-client-v1" | server_nonce | client_nonce |
//! member)`. The server answers with `HMAC-SHA256(secret, "epochfence-server-v1" | client_nonce |
//! server_nonce | member)`, so the dialler knows it reached a member too. The secret never
//! crosses the wire, and a recorded exchange cannot be replayed: the server's nonce is new.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Bytes of a nonce and of a proof.
pub const NONCE_BYTES: usize = 32;
/// Shortest secret accepted, in bytes.
pub const SECRET_BYTES_MIN: usize = 16;

const CLIENT_LABEL: &[u8] = b"epochfence-client-v1";
const SERVER_LABEL: &[u8] = b"epochfence-server-v1";

/// The shared cluster secret.
#[derive(Clone)]
pub struct ClusterSecret(std::sync::Arc<Vec<u8>>);

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClusterSecret({} bytes)", self.0.len())
    }
}

impl ClusterSecret {
    /// A secret of at least [`SECRET_BYTES_MIN`] bytes.
    pub fn new(bytes: Vec<u8>) -> Result<ClusterSecret, String> {
        if bytes.len() < SECRET_BYTES_MIN {
            return Err(format!("cluster secret is {} bytes; use at least {SECRET_BYTES_MIN}", bytes.len()));
        }
        Ok(ClusterSecret(std::sync::Arc::new(bytes)))
    }

    fn mac(&self, label: &[u8], a: &[u8], b: &[u8], member: &str) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        mac.update(label);
        mac.update(a);
        mac.update(b);
        mac.update(member.as_bytes());
        mac
    }

    /// The dialler's proof.
    pub fn client_proof(&self, server_nonce: &[u8], client_nonce: &[u8], member: &str) -> Vec<u8> {
        self.mac(CLIENT_LABEL, server_nonce, client_nonce, member).finalize().into_bytes().to_vec()
    }

    /// Check a dialler's proof (constant time).
    pub fn verify_client(&self, server_nonce: &[u8], client_nonce: &[u8], member: &str, proof: &[u8]) -> bool {
        self.mac(CLIENT_LABEL, server_nonce, client_nonce, member).verify_slice(proof).is_ok()
    }

    /// The server's proof.
    pub fn server_proof(&self, client_nonce: &[u8], server_nonce: &[u8], member: &str) -> Vec<u8> {
        self.mac(SERVER_LABEL, client_nonce, server_nonce, member).finalize().into_bytes().to_vec()
    }

    /// Check the server's proof (constant time).
    pub fn verify_server(&self, client_nonce: &[u8], server_nonce: &[u8], member: &str, proof: &[u8]) -> bool {
        self.mac(SERVER_LABEL, client_nonce, server_nonce, member).verify_slice(proof).is_ok()
    }
}

/// What a producer id is bound to (see [`ProducerIdBinder`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PidOwner<'a> {
    /// A transactional id's producer id: whoever may write as that transactional id.
    TransactionalId(&'a str),
    /// An idempotent producer's: the principal it was granted to (`User:alice`).
    Principal(&'a str),
}

/// Producer ids that name their owner (issue 29, "a producer id belongs to its principal").
///
/// Under the authorizer, the coordinator hands out producer ids whose low 36 bits are its
/// counter and whose next 27 bits are a MAC, under a key derived from the cluster secret, of the
/// counter and the owner: a transactional id, or (for an idempotent producer) the principal
/// that asked. A broker holding the secret checks a write's producer id against the
/// transactional id the request names, or against the writer's principal, without asking
/// anyone and without any state: a producer id of someone else's fails the check, whatever
/// epoch and sequence it carries. A forger must guess 27 bits (one in 134 million) for each
/// producer id it tries, each guess a refused, logged request.
#[derive(Clone)]
pub struct ProducerIdBinder {
    key: [u8; 32],
}

impl std::fmt::Debug for ProducerIdBinder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProducerIdBinder")
    }
}

/// Bits of a bound producer id that hold the coordinator's counter (2^36 producer ids, two
/// years of 1,000 inits a second); the next 27 hold the owner's MAC.
pub const PID_COUNTER_BITS: u32 = 36;
/// The counters a bound producer id can hold: the coordinator refuses an init past them.
pub const PID_COUNTER_MAX: i64 = (1i64 << PID_COUNTER_BITS) - 1;
const PID_LABEL: &[u8] = b"epochfence-producer-id-v1";

impl ProducerIdBinder {
    /// The binder of the cluster whose secret is `secret`.
    pub fn new(secret: &ClusterSecret) -> ProducerIdBinder {
        let mut mac = Hmac::<Sha256>::new_from_slice(&secret.0).expect("HMAC takes keys of any length");
        mac.update(PID_LABEL);
        ProducerIdBinder { key: mac.finalize().into_bytes().into() }
    }

    /// The counter part of a producer id (all of an unbound one).
    pub fn counter(producer_id: i64) -> i64 {
        producer_id & PID_COUNTER_MAX
    }

    fn tag(&self, counter: i64, owner: PidOwner) -> i64 {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes keys of any length");
        mac.update(&counter.to_be_bytes());
        match owner {
            PidOwner::TransactionalId(t) => {
                mac.update(b"t");
                mac.update(t.as_bytes());
            }
            PidOwner::Principal(p) => {
                mac.update(b"p");
                mac.update(p.as_bytes());
            }
        }
        let out = mac.finalize().into_bytes();
        i64::from(u32::from_be_bytes([out[0], out[1], out[2], out[3]]) & ((1 << (63 - PID_COUNTER_BITS)) - 1))
    }

    /// The producer id of `counter` (at most [`PID_COUNTER_MAX`]) bound to `owner`.
    pub fn bind(&self, counter: i64, owner: PidOwner) -> i64 {
        (self.tag(counter, owner) << PID_COUNTER_BITS) | Self::counter(counter)
    }

    /// Whether `producer_id` is bound to `owner`.
    pub fn bound_to(&self, producer_id: i64, owner: PidOwner) -> bool {
        producer_id >= 0 && self.bind(Self::counter(producer_id), owner) == producer_id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_verify_only_with_the_same_secret_nonces_and_member() {
        let s = ClusterSecret::new(b"0123456789abcdef".to_vec()).unwrap();
        let other = ClusterSecret::new(b"fedcba9876543210".to_vec()).unwrap();
        let (sn, cn) = ([1u8; 32], [2u8; 32]);
        let p = s.client_proof(&sn, &cn, "broker-1");
        assert!(s.verify_client(&sn, &cn, "broker-1", &p));
        assert!(!other.verify_client(&sn, &cn, "broker-1", &p));
        assert!(!s.verify_client(&[3u8; 32], &cn, "broker-1", &p), "a new server nonce defeats replay");
        assert!(!s.verify_client(&sn, &cn, "broker-2", &p));
        let sp = s.server_proof(&cn, &sn, "broker-1");
        assert!(s.verify_server(&cn, &sn, "broker-1", &sp));
        assert!(!s.verify_client(&sn, &cn, "broker-1", &sp), "client and server proofs differ");
        assert!(ClusterSecret::new(b"short".to_vec()).is_err());
    }

    #[test]
    fn producer_ids_name_their_owner_and_no_other() {
        let secret = ClusterSecret::new(vec![7; 32]).unwrap();
        let b = ProducerIdBinder::new(&secret);
        let alice = b.bind(42, PidOwner::Principal("User:alice"));
        assert!(alice > 0 && ProducerIdBinder::counter(alice) == 42);
        assert!(b.bound_to(alice, PidOwner::Principal("User:alice")));
        assert!(!b.bound_to(alice, PidOwner::Principal("User:mallory")));
        assert!(!b.bound_to(alice, PidOwner::TransactionalId("User:alice")), "kinds do not mix");
        assert!(!b.bound_to(42, PidOwner::Principal("User:alice")), "an unbound id is bound to nobody");
        assert!(!b.bound_to(alice + (1 << PID_COUNTER_BITS), PidOwner::Principal("User:alice")));
        let payments = b.bind(43, PidOwner::TransactionalId("payments"));
        assert!(b.bound_to(payments, PidOwner::TransactionalId("payments")));
        assert!(!b.bound_to(payments, PidOwner::TransactionalId("payments2")));
        // Another cluster's secret binds differently.
        let other = ProducerIdBinder::new(&ClusterSecret::new(vec![8; 32]).unwrap());
        assert!(!other.bound_to(payments, PidOwner::TransactionalId("payments")));
        // Parity (odd for transactional ids) lives in the counter and survives binding.
        assert_eq!(payments % 2, 1);
    }
}
