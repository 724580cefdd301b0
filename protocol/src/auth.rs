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
}
