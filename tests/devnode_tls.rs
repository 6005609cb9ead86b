//! A devnode with a certificate (`DevNodeConfig::tls`, `--tls-cert` / `--tls-key`) serves HTTPS
//! instead of HTTP, with the node's behaviour unchanged behind the handshake: a client trusting
//! the private CA (made here with rcgen) gets the node's answers; a client that does not trust it,
//! and a plain-HTTP client, get no answer at all.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use snowgate::devnode::{DevNode, DevNodeConfig, TlsIdentity};
use support::private_ca;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

async fn tls_node(cert: &str, key: &str) -> DevNode {
    DevNode::spawn(DevNodeConfig {
        block_interval: Duration::from_secs(60),
        tls: Some(TlsIdentity {
            cert_pem: cert.as_bytes().to_vec(),
            key_pem: key.as_bytes().to_vec(),
        }),
        ..Default::default()
    })
    .await
    .unwrap()
}

/// A TLS client trusting `ca_pem` (none: trusting nothing), offering `alpn`.
fn connector(ca_pem: Option<&str>, alpn: &[&[u8]]) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    if let Some(ca) = ca_pem {
        roots
            .add(CertificateDer::from_pem_slice(ca.as_bytes()).unwrap())
            .unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    TlsConnector::from(Arc::new(config))
}

const CALL: &str = r#"{"jsonrpc":"2.0","id":1,"method":"info.getNodeVersion"}"#;

/// One HTTP/1.1 call over TLS (`Connection: close`): the whole answer, head and body.
async fn https_call(node: &DevNode, ca_pem: &str, host: &str) -> std::io::Result<String> {
    let tcp = TcpStream::connect(node.addr()).await?;
    let name = ServerName::try_from(host.to_string()).unwrap();
    let mut tls = connector(Some(ca_pem), &[b"http/1.1"])
        .connect(name, tcp)
        .await?;
    let req = format!(
        "POST /ext/info HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{CALL}",
        CALL.len()
    );
    tls.write_all(req.as_bytes()).await?;
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut out))
        .await
        .map_err(|_| std::io::Error::other("no answer within 10 s"))??;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

#[tokio::test]
async fn a_client_trusting_the_private_ca_gets_the_node_over_https() {
    let (ca, cert, key) = private_ca();
    let node = tls_node(&cert, &key).await;
    assert!(
        node.url().starts_with("https://127.0.0.1:"),
        "{}",
        node.url()
    );
    for host in ["localhost", "127.0.0.1"] {
        let answer = https_call(&node, &ca, host).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.contains("\r\nnode-id: NodeID-"), "{answer}");
        assert!(
            answer.contains(r#"{"jsonrpc":"2.0","result":{"version":"avalanchego/1.14.2""#),
            "{answer}"
        );
    }
    assert_eq!(node.control().call_count("info.getNodeVersion"), 2);
    // HTTP/2 is offered through ALPN, as Go's TLS server does.
    let tcp = TcpStream::connect(node.addr()).await.unwrap();
    let tls = connector(Some(&ca), &[b"h2", b"http/1.1"])
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    // Going down and coming back up keeps TLS.
    node.control().go_down().await;
    node.control().come_up().await.unwrap();
    let answer = https_call(&node, &ca, "localhost").await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
}

#[tokio::test]
async fn untrusting_and_plain_http_clients_get_no_answer() {
    let (_, cert, key) = private_ca();
    let node = tls_node(&cert, &key).await;
    // Another CA: the handshake fails on the client's side.
    let (other_ca, _, _) = private_ca();
    let refused = https_call(&node, &other_ca, "localhost").await;
    assert!(refused.is_err(), "{refused:?}");
    // A name the certificate does not carry, with the right CA.
    let (ca, cert, key) = private_ca();
    let node_b = tls_node(&cert, &key).await;
    let wrong = https_call(&node_b, &ca, "node.example").await;
    assert!(wrong.is_err(), "{wrong:?}");
    assert!(https_call(&node_b, &ca, "localhost").await.is_ok());
    // Plain HTTP to the TLS port: no HTTP answer, the connection is closed.
    let mut tcp = TcpStream::connect(node.addr()).await.unwrap();
    let req = format!(
        "POST /ext/info HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{CALL}",
        CALL.len()
    );
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut out))
        .await
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&out).contains("HTTP/1.1 200"),
        "{out:?}"
    );
    assert_eq!(node.control().total_calls(), 0);
}

#[tokio::test]
async fn a_bad_certificate_or_key_fails_at_start() {
    let (_, cert, key) = private_ca();
    for (c, k) in [("not a pem", key.as_str()), (cert.as_str(), "nope")] {
        let err = DevNode::spawn(DevNodeConfig {
            tls: Some(TlsIdentity {
                cert_pem: c.as_bytes().to_vec(),
                key_pem: k.as_bytes().to_vec(),
            }),
            ..Default::default()
        })
        .await
        .err()
        .unwrap();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
        assert!(!err.to_string().contains("PRIVATE KEY"), "{err}");
    }
}
