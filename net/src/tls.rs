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
    server(cert_chain_pem, key_pem, None)
}

/// A server presenting `cert_chain_pem` with `key_pem`, requiring client certificates of the
/// CAs in `client_ca_pem` if given.
fn server(cert_chain_pem: &[u8], key_pem: &[u8], client_ca_pem: Option<&[u8]>) -> Result<TlsAcceptor, TlsError> {
    let certs = certificates(cert_chain_pem, "certificate chain")?;
    let key = private_key(key_pem, "private key")?;
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match client_ca_pem {
        None => builder.with_no_client_auth(),
        Some(ca) => builder.with_client_cert_verifier(
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots(ca)?), provider())
                .build()
                .map_err(|e| TlsError::Config(e.to_string()))?,
        ),
    };
    let config = builder.with_single_cert(certs, key).map_err(|e| TlsError::Config(e.to_string()))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn private_key(pem: &[u8], what: &str) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| TlsError::Pem { what: what.into(), detail: e.to_string() })
}

/// The server side from PEM files.
pub fn acceptor_from_files(cert_chain: &std::path::Path, key: &std::path::Path) -> Result<TlsAcceptor, TlsError> {
    acceptor(&read(cert_chain)?, &read(key)?)
}

fn read(p: &std::path::Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(p).map_err(|e| TlsError::Pem { what: p.display().to_string(), detail: e.to_string() })
}

fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Pem { what: what.into(), detail: e.to_string() })?;
    if certs.is_empty() {
        return Err(TlsError::Pem { what: what.into(), detail: "no certificate found".into() });
    }
    Ok(certs)
}

fn roots(ca_pem: &[u8]) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in certificates(ca_pem, "CA certificates")? {
        roots.add(cert).map_err(|e| TlsError::Config(e.to_string()))?;
    }
    Ok(roots)
}

/// The server side of mutual TLS: present `cert_chain_pem` with `key_pem`, and require of every
/// client a certificate signed by one of the CAs in `client_ca_pem` (Kafka's
/// `ssl.client.auth=required`); [`subject_rfc2253`] names its subject.
pub fn acceptor_requiring_client_certificates(
    cert_chain_pem: &[u8],
    key_pem: &[u8],
    client_ca_pem: &[u8],
) -> Result<TlsAcceptor, TlsError> {
    server(cert_chain_pem, key_pem, Some(client_ca_pem))
}

/// A listener's TLS that requires client certificates ([`acceptor_requiring_client_certificates`]).
#[derive(Clone)]
pub struct MutualTls(pub TlsAcceptor);

impl std::fmt::Debug for MutualTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MutualTls")
    }
}

impl MutualTls {
    /// [`acceptor_requiring_client_certificates`] from PEM files.
    pub fn from_files(
        cert_chain: &std::path::Path,
        key: &std::path::Path,
        client_ca: &std::path::Path,
    ) -> Result<MutualTls, TlsError> {
        acceptor_requiring_client_certificates(&read(cert_chain)?, &read(key)?, &read(client_ca)?).map(MutualTls)
    }
}

/// The subject of the certificate `cert_der` as RFC 2253 writes a distinguished name, the way
/// Kafka names an SSL client (Java's `X500Principal.getName()`): the most specific RDN first,
/// `,` between RDNs and `+` inside one, the keywords CN, C, L, ST, O, OU, STREET, DC and UID,
/// `\` before `,=+<>#;"\` and each leading and trailing space, NUL as `\00`, and any other
/// attribute as its dotted OID with `#` and the hex of its value's DER encoding.
pub fn subject_rfc2253(cert_der: &[u8]) -> Result<String, TlsError> {
    use x509_parser::prelude::FromDer;
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(cert_der)
        .map_err(|e| TlsError::Config(format!("cannot parse the client certificate: {e}")))?;
    let rdns: Vec<String> =
        cert.subject().iter_rdn().map(|rdn| rdn.iter().map(rfc2253_attribute).collect::<Vec<_>>().join("+")).collect();
    Ok(rdns.into_iter().rev().collect::<Vec<_>>().join(","))
}

fn rfc2253_attribute(attribute: &x509_parser::x509::AttributeTypeAndValue<'_>) -> String {
    use x509_parser::der_parser::asn1_rs::Tag;
    let oid = attribute.attr_type().to_id_string();
    let keyword = match oid.as_str() {
        "2.5.4.3" => Some("CN"),
        "2.5.4.6" => Some("C"),
        "2.5.4.7" => Some("L"),
        "2.5.4.8" => Some("ST"),
        "2.5.4.10" => Some("O"),
        "2.5.4.11" => Some("OU"),
        "2.5.4.9" => Some("STREET"),
        "0.9.2342.19200300.100.1.25" => Some("DC"),
        "0.9.2342.19200300.100.1.1" => Some("UID"),
        _ => None,
    };
    let value = attribute.attr_value();
    let text = match value.tag() {
        Tag::BmpString => {
            let units: Vec<u16> = value.data.chunks_exact(2).map(|c| u16::from_be_bytes([c[0], c[1]])).collect();
            String::from_utf16(&units).ok()
        }
        _ => attribute.as_str().ok().map(str::to_string),
    };
    match (keyword, text) {
        (Some(k), Some(t)) => format!("{k}={}", escape_rfc2253(&t)),
        _ => {
            // The value's DER encoding: its tag, its length, its contents.
            let mut der =
                vec![u8::try_from(value.tag().0).unwrap_or(0) | if value.header.is_constructed() { 0x20 } else { 0 }];
            let len = value.data.len();
            if len < 0x80 {
                der.push(len as u8);
            } else {
                let bytes: Vec<u8> = len.to_be_bytes().into_iter().skip_while(|b| *b == 0).collect();
                der.push(0x80 | bytes.len() as u8);
                der.extend(bytes);
            }
            der.extend_from_slice(value.data);
            let hex: String = der.iter().map(|b| format!("{b:02x}")).collect();
            format!("{}=#{hex}", keyword.map_or(oid.clone(), str::to_string))
        }
    }
}

/// A value escaped as Java's `X500Principal.getName()` escapes it: `\` before each of
/// `,=+<>#;"\`, NUL as `\00`, and `\` before each leading and trailing space or CR.
fn escape_rfc2253(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            ',' | '=' | '+' | '<' | '>' | '#' | ';' | '"' | '\\' => {
                escaped.push('\\');
                escaped.push(c);
            }
            '\0' => escaped.push_str("\\00"),
            c => escaped.push(c),
        }
    }
    let edge = |c: &char| *c == ' ' || *c == '\r';
    let chars: Vec<char> = escaped.chars().collect();
    let lead = chars.iter().take_while(|c| edge(c)).count();
    let trail = chars.len() - chars.iter().rev().take_while(|c| edge(c)).count().min(chars.len() - lead);
    let mut out = String::with_capacity(escaped.len() + 4);
    for (i, c) in chars.into_iter().enumerate() {
        if i < lead || i >= trail {
            out.push('\\');
        }
        out.push(c);
    }
    out
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
        let roots = roots(ca_pem)?;
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(ClientTls { connector: TlsConnector::from(Arc::new(config)) })
    }

    /// Trust the CA certificates in `ca_pem`, and present `cert_pem` with `key_pem` to servers
    /// that ask for a client certificate (mutual TLS).
    pub fn with_certificate(ca_pem: &[u8], cert_pem: &[u8], key_pem: &[u8]) -> Result<ClientTls, TlsError> {
        let certs = certificates(cert_pem, "client certificate")?;
        let key = private_key(key_pem, "client private key")?;
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_root_certificates(roots(ca_pem)?)
            .with_client_auth_cert(certs, key)
            .map_err(|e| TlsError::Config(e.to_string()))?;
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
