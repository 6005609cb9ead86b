//! HTTPS for a devnode (`--tls-cert` / `--tls-key`): operators run nodes behind TLS, so the
//! gateway's `https://` upstreams need a node that speaks it in tests. rustls with ring (the
//! crate's one crypto provider), ALPN `h2` and `http/1.1` as Go's TLS server offers them; the
//! node's HTTP behaviour behind the handshake is unchanged.

use std::io;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// A certificate chain and its private key, PEM-encoded (the leaf first, as in a `fullchain.pem`).
#[derive(Clone)]
pub struct TlsIdentity {
    /// The certificate chain, PEM.
    pub cert_pem: Vec<u8>,
    /// The private key (PKCS#8, PKCS#1 or SEC1), PEM.
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for TlsIdentity {
    // The key never reaches a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsIdentity")
            .field("cert_pem", &format_args!("{} bytes", self.cert_pem.len()))
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

impl TlsIdentity {
    /// Reads the two PEM files.
    pub fn from_files(cert: &Path, key: &Path) -> io::Result<TlsIdentity> {
        let read = |p: &Path| {
            std::fs::read(p).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))
        };
        Ok(TlsIdentity {
            cert_pem: read(cert)?,
            key_pem: read(key)?,
        })
    }

    /// The acceptor that serves this identity.
    pub(super) fn acceptor(&self) -> io::Result<TlsAcceptor> {
        let invalid = |what: &str, e: &dyn std::fmt::Display| {
            io::Error::new(io::ErrorKind::InvalidData, format!("{what}: {e}"))
        };
        let certs = CertificateDer::pem_slice_iter(&self.cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid("tls certificate", &e))?;
        if certs.is_empty() {
            return Err(invalid("tls certificate", &"no certificate in the PEM"));
        }
        let key =
            PrivateKeyDer::from_pem_slice(&self.key_pem).map_err(|e| invalid("tls key", &e))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid("tls", &e))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| invalid("tls certificate and key", &e))?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}
