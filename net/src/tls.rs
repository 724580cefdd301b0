//! Optional TLS (rustls, with the ring provider) for any listener and any dialler.
//!
//! A server configured with a certificate chain and key serves TLS only; clients and peers
//! that dial it trust the CA certificates they are given. The cluster-membership handshake runs
//! inside TLS when both are configured.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use thiserror::Error;
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// Why a TLS configuration could not be built.
#[derive(Debug, Error)]
pub enum TlsError {
    /// A PEM file could not be read or parsed.
    #[error("TLS: cannot read {what}: {detail}")]
    Pem {
        /// What was being read.
        what: String,
        /// Why not.
        detail: String,
    },
    /// rustls refused the configuration.
    #[error("TLS: {0}")]
    Config(String),
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The server side: present `cert_chain_pem` with `key_pem`.
pub fn acceptor(cert_chain_pem: &[u8], key_pem: &[u8]) -> Result<TlsAcceptor, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_chain_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Pem { what: "certificate chain".into(), detail: e.to_string() })?;
    if certs.is_empty() {
        return Err(TlsError::Pem { what: "certificate chain".into(), detail: "no certificate found".into() });
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| TlsError::Pem { what: "private key".into(), detail: e.to_string() })?;
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The server side from PEM files.
pub fn acceptor_from_files(cert_chain: &std::path::Path, key: &std::path::Path) -> Result<TlsAcceptor, TlsError> {
    let read = |p: &std::path::Path| {
        std::fs::read(p).map_err(|e| TlsError::Pem { what: p.display().to_string(), detail: e.to_string() })
    };
    acceptor(&read(cert_chain)?, &read(key)?)
}

/// The dialling side: trust the CA certificates in `ca_pem`.
#[derive(Clone)]
pub struct ClientTls {
    connector: TlsConnector,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientTls")
    }
}

impl ClientTls {
    /// Trust the CA certificates in `ca_pem`.
    pub fn new(ca_pem: &[u8]) -> Result<ClientTls, TlsError> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem) {
            let cert = cert.map_err(|e| TlsError::Pem { what: "CA certificates".into(), detail: e.to_string() })?;
            roots.add(cert).map_err(|e| TlsError::Config(e.to_string()))?;
        }
        if roots.is_empty() {
            return Err(TlsError::Pem { what: "CA certificates".into(), detail: "no certificate found".into() });
        }
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(ClientTls { connector: TlsConnector::from(Arc::new(config)) })
    }

    /// Trust the CA certificates in a PEM file.
    pub fn from_file(ca: &std::path::Path) -> Result<ClientTls, TlsError> {
        let pem =
            std::fs::read(ca).map_err(|e| TlsError::Pem { what: ca.display().to_string(), detail: e.to_string() })?;
        ClientTls::new(&pem)
    }

    pub(crate) fn connector(&self) -> &TlsConnector {
        &self.connector
    }

    /// Run the TLS handshake on `stream`, a connection to `addr` (`host:port`; the host is the
    /// name the server's certificate must carry): for clients of other protocols (Kafka's).
    pub async fn handshake(
        &self,
        addr: &str,
        stream: tokio::net::TcpStream,
    ) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
        let name = server_name(addr)?;
        self.connector.connect(name, stream).await.map_err(|e| format!("TLS handshake failed: {e}"))
    }
}

/// The name to check the server's certificate against: the host part of `host:port`.
pub(crate) fn server_name(addr: &str) -> Result<ServerName<'static>, String> {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h).trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string()).map_err(|e| format!("{host} is not a valid server name: {e}"))
}
