//! Cluster-membership authentication: a challenge, then a proof each way (the proofs
//! themselves are computed in [`crate::auth`]).
//!
//! Each request's `encode_body` and `decode_body` write and read the fields after the request
//! header; each response's, the fields after its [`Status`].

use bytes::{Bytes, BytesMut};

use super::Status;
use crate::wire::{Reader, WriteExt};
use crate::DecodeError;

/// Ask for a membership challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthBeginRequest {
    /// Who is proving membership (`broker-3`, `coordinator`).
    pub member: String,
}

impl AuthBeginRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_string(&self.member);
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(AuthBeginRequest { member: r.string("member")? })
    }
}

/// The challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthBeginResponse {
    /// NONE, or SASL_AUTHENTICATION_FAILED if this process has no cluster secret.
    pub status: Status,
    /// A fresh nonce to prove against.
    pub server_nonce: Bytes,
}

impl AuthBeginResponse {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_blob(&self.server_nonce);
    }

    pub(crate) fn decode_body(status: Status, r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(AuthBeginResponse { status, server_nonce: r.bytes("server_nonce")? })
    }
}

/// Prove membership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthProveRequest {
    /// Who is proving membership.
    pub member: String,
    /// The dialler's nonce.
    pub client_nonce: Bytes,
    /// HMAC-SHA256 over the nonces and the member name (see `protocol::auth`).
    pub proof: Bytes,
}

impl AuthProveRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_string(&self.member);
        b.put_blob(&self.client_nonce);
        b.put_blob(&self.proof);
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(AuthProveRequest {
            member: r.string("member")?,
            client_nonce: r.bytes("client_nonce")?,
            proof: r.bytes("proof")?,
        })
    }
}

/// The verdict, and the server's own proof.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthProveResponse {
    /// NONE, or SASL_AUTHENTICATION_FAILED (then the connection is closed).
    pub status: Status,
    /// The server's proof that it knows the secret too.
    pub server_proof: Bytes,
}

impl AuthProveResponse {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_blob(&self.server_proof);
    }

    pub(crate) fn decode_body(status: Status, r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(AuthProveResponse { status, server_proof: r.bytes("server_proof")? })
    }
}

/// A client's SCRAM login on the own protocol (RFC 5802, as on the Kafka listener): the
/// client's first message, then its final one, each answered with the server's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaslLoginRequest {
    /// `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    pub mechanism: String,
    /// The client's message of this round.
    pub auth_bytes: Bytes,
}

impl SaslLoginRequest {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_string(&self.mechanism);
        b.put_blob(&self.auth_bytes);
    }

    pub(crate) fn decode_body(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(SaslLoginRequest { mechanism: r.string("mechanism")?, auth_bytes: r.bytes("auth_bytes")? })
    }
}

/// The server's message of the round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaslLoginResponse {
    /// NONE, or SASL_AUTHENTICATION_FAILED (then the connection is closed).
    pub status: Status,
    /// The server-first message, then the server-final one.
    pub auth_bytes: Bytes,
}

impl SaslLoginResponse {
    pub(crate) fn encode_body(&self, b: &mut BytesMut) {
        b.put_blob(&self.auth_bytes);
    }

    pub(crate) fn decode_body(status: Status, r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(SaslLoginResponse { status, auth_bytes: r.bytes("auth_bytes")? })
    }
}
