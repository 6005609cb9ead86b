//! The TLS side of an `https://` upstream: its client config, made once when the pool is built,
//! and the handshake that opens each connection.
//!
//! rustls through tokio-rustls: the webpki roots plus the upstream's own CAs (`tls_ca_file`),
//! ALPN `http/1.1`, SNI and verification from the URL's host; verification is never off. A failed
//! handshake is a reason worth one warning, not one per health check: it is logged at warn the
//! first time it is seen and at debug after that, until a handshake succeeds or the reason
//! changes. What a TLS connection changes for the exchange and the idle check is in `io.rs`.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::client::TlsStream;

use super::ConnError;
use crate::upstream::health::Fault;

/// The TLS side of an `https://` upstream, made once when the pool is built: the rustls client
/// config (the webpki roots plus the upstream's own CAs, ALPN `http/1.1`) and the name its
/// certificate must carry (the URL's host, sent as SNI when it is a DNS name).
pub struct TlsClient {
    connector: tokio_rustls::TlsConnector,
    server_name: rustls::pki_types::ServerName<'static>,
    /// The upstream's configured name, for the log line of a failed handshake.
    upstream: String,
    /// The reason of the last failed handshake, logged at warn once and then at debug until a
    /// handshake succeeds or the reason changes: a node with a bad certificate fails every
    /// health check, and one warning per reason is enough.
    last_failure: Mutex<Option<String>>,
}

impl TlsClient {
    /// The client for `upstream` at `host` (a DNS name or an IP address, `[v6]` bracketed or
    /// not), trusting the webpki roots and `extra_roots`.
    pub fn new(
        upstream: &str,
        host: &str,
        extra_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    ) -> Result<TlsClient, ConnError> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let server_name = rustls::pki_types::ServerName::try_from(bare.to_string())
            .map_err(|_| ConnError::TlsName(host.to_string()))?;
        let mut roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        for cert in extra_roots {
            roots.add(cert).map_err(ConnError::TlsCa)?;
        }
        // The crate's one provider, passed explicitly: nothing process-wide needs installing.
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(ConnError::TlsConfig)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsClient {
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
            server_name,
            upstream: upstream.to_string(),
            last_failure: Mutex::new(None),
        })
    }

    /// Makes the handshake over `io`, a connection just opened to `address`. A failure is a
    /// [`Fault::TlsHandshake`] with its reason (the request never left), and is logged.
    pub(super) async fn handshake<IO>(
        &self,
        io: IO,
        address: &str,
    ) -> Result<TlsStream<IO>, (Fault, String)>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        match self.connector.connect(self.server_name.clone(), io).await {
            Ok(stream) => {
                self.succeeded();
                Ok(stream)
            }
            Err(e) => {
                self.failed(address, &e.to_string());
                Err((Fault::TlsHandshake, format!("TLS handshake failed: {e}")))
            }
        }
    }

    /// Logs a failed handshake: at warn the first time a reason is seen, then at debug.
    fn failed(&self, address: &str, reason: &str) {
        // Reasons compared without their digits: an expired certificate's text carries the
        // time of each check.
        let kind: String = reason.chars().filter(|c| !c.is_ascii_digit()).collect();
        let mut last = self.last_failure.lock();
        if last.as_deref() == Some(kind.as_str()) {
            tracing::debug!(upstream = %self.upstream, address, error = reason, "TLS handshake with the upstream failed");
        } else {
            tracing::warn!(upstream = %self.upstream, address, error = reason, "TLS handshake with the upstream failed");
            *last = Some(kind);
        }
    }

    fn succeeded(&self) {
        let mut last = self.last_failure.lock();
        if last.take().is_some() {
            tracing::info!(upstream = %self.upstream, "TLS handshake with the upstream succeeded again");
        }
    }
}
