//! `https://` upstreams (issue 15): snowgate's own client over rustls. Certificates are made here
//! with rcgen (a private CA, leaves for `127.0.0.1` / `localhost`, an expired one, one for another
//! name). A TLS devnode trusted through `tls_ca_file` serves the public methods as over HTTP; a
//! certificate snowgate cannot verify makes the node unhealthy, with rustls's reason in the log
//! and nowhere public; kept-alive TLS connections are reused although the node sends records of
//! its own between answers, and an unsolicited answer is never read as the next one; a
//! provider-style `https://user:pass@host/prefix` URL sends its path and Basic auth over TLS.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::io::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use snowgate::config::{Config, UpstreamConfig};
use snowgate::devnode::{DevNode, DevNodeConfig, TlsIdentity};
use snowgate::Gateway;
use support::logs::capture_logs;
use support::{call, eventually, post, temp_dir, test_gateway};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A private CA that signs leaves.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, PEM.
struct Leaf {
    cert: String,
    key: String,
}

impl Ca {
    fn new() -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        Ca {
            issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A leaf for `names`; `expired`: valid only during 2020.
    fn leaf(&self, names: &[&str], expired: bool) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2020, 12, 31);
        }
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    /// The CA's PEM in a file of its own.
    fn file(&self) -> std::path::PathBuf {
        let path = temp_dir("tls-ca").join("ca.pem");
        std::fs::write(&path, self.pem()).unwrap();
        path
    }
}

async fn tls_devnode(leaf: &Leaf) -> DevNode {
    DevNode::spawn(DevNodeConfig {
        block_interval: Duration::from_secs(60),
        tls: Some(TlsIdentity {
            cert_pem: leaf.cert.as_bytes().to_vec(),
            key_pem: leaf.key.as_bytes().to_vec(),
        }),
        ..Default::default()
    })
    .await
    .unwrap()
}

/// A gateway in front of `url` (upstream `name`), trusting `ca_file` besides the webpki roots.
async fn gateway(
    name: &str,
    url: String,
    ca_file: Option<std::path::PathBuf>,
    tweak: impl FnOnce(&mut Config),
) -> Gateway {
    let mut config = Config::default();
    test_gateway(&mut config, &[]);
    config.upstreams = vec![UpstreamConfig {
        name: name.to_string(),
        url,
        tls_ca_file: ca_file,
        ..Default::default()
    }];
    tweak(&mut config);
    config.validate().unwrap();
    Gateway::start(config).await.unwrap()
}

/// Whether the gateway's one upstream is healthy, within 10 s.
async fn becomes_healthy(gw: &Gateway) -> bool {
    eventually(Duration::from_secs(60), || {
        gw.pool().status().upstreams.iter().all(|u| u.healthy)
    })
    .await
}

/// A TLS client trusting only `ca`.
fn connector(ca: &Ca) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.pem().as_bytes()).unwrap())
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// One call straight to a TLS node (`Connection: close`): the answer's body as JSON.
async fn direct(addr: std::net::SocketAddr, ca: &Ca, path: &str, body: &str) -> serde_json::Value {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let mut tls = connector(ca)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    let (_, body) = text.split_once("\r\n\r\n").unwrap();
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[tokio::test]
async fn a_tls_devnode_with_a_private_ca_serves_the_public_methods_through_snowgate() {
    let ca = Ca::new();
    let node = tls_devnode(&ca.leaf(&["127.0.0.1", "localhost"], false)).await;
    assert!(node.url().starts_with("https://"), "{}", node.url());
    let gw = gateway("tls-node", node.url(), Some(ca.file()), |c| {
        // Each answer from the node, not from a cache.
        c.cache.enabled = false;
    })
    .await;
    assert!(becomes_healthy(&gw).await, "{:?}", gw.pool().status());
    let registry = snowgate::methods::Registry::builtin();
    let mut compared = 0;
    for spec in registry.all() {
        // The health API is snowgate's own answer, never a node's.
        if spec.access != snowgate::methods::Access::Public
            || spec.side_effect
            || spec.family.is_local()
        {
            continue;
        }
        let path = spec.family.canonical_path();
        let body = call(&spec.name, "{}");
        let through = post(&format!("{}{path}", gw.url()), &body).await;
        assert_eq!(through.status, 200, "{}: {}", spec.name, through.body);
        let answer = through.json();
        let own = direct(node.addr(), &ca, path, &body).await;
        assert_eq!(answer, own, "{}", spec.name);
        compared += 1;
    }
    assert!(compared >= 20, "only {compared} public methods");
    // A batch (snowgate sends its calls one by one: a node takes no batch): each answer is the
    // node's own to that call.
    let calls = [
        call("platform.getHeight", "{}").replace(r#""id":1"#, r#""id":7"#),
        call("platform.getCurrentSupply", "{}").replace(r#""id":1"#, r#""id":8"#),
        call("platform.getTimestamp", "{}").replace(r#""id":1"#, r#""id":9"#),
    ];
    let through = post(
        &format!("{}/ext/bc/P", gw.url()),
        &format!("[{}]", calls.join(",")),
    )
    .await;
    assert_eq!(through.status, 200, "{}", through.body);
    let mut own = Vec::new();
    for c in &calls {
        own.push(direct(node.addr(), &ca, "/ext/bc/P", c).await);
    }
    assert_eq!(through.json(), serde_json::Value::Array(own));
    gw.shutdown().await;
}

#[tokio::test]
async fn certificates_snowgate_cannot_verify_make_the_node_unhealthy_with_the_reason_only_in_the_log(
) {
    let logs = capture_logs();
    let ca = Ca::new();
    let other = Ca::new();
    let good = ca.leaf(&["127.0.0.1", "localhost"], false);
    let cases = [
        // Not trusted: the webpki roots alone.
        (
            "no-ca-file",
            ca.leaf(&["127.0.0.1"], false),
            None,
            "UnknownIssuer",
        ),
        // Trusting another private CA (of the same name: rcgen's default, so the chain is
        // built and its signature refused).
        ("other-ca", good, Some(other.file()), "BadSignature"),
        (
            "old-cert",
            ca.leaf(&["127.0.0.1"], true),
            Some(ca.file()),
            "expired",
        ),
        (
            "wrong-name",
            ca.leaf(&["node.example"], false),
            Some(ca.file()),
            "not valid for name",
        ),
    ];
    for (name, leaf, ca_file, reason) in cases {
        let node = tls_devnode(&leaf).await;
        let address = node.addr().to_string();
        let gw = gateway(name, node.url(), ca_file, |_| {}).await;
        // Several rounds of checks: the node never becomes healthy.
        tokio::time::sleep(Duration::from_millis(600)).await;
        let status = gw.pool().status();
        assert!(!status.upstreams[0].healthy, "{name}: {status:?}");
        assert_eq!(
            node.control().total_calls(),
            0,
            "{name}: a call got through"
        );
        let answer = post(
            &format!("{}/ext/bc/P", gw.url()),
            &call("platform.getHeight", "{}"),
        )
        .await;
        assert!(
            answer.body.contains("no healthy upstream"),
            "{name}: {}",
            answer.body
        );
        let health = support::get_text(&format!("{}/ext/health", gw.url())).await;
        // The category is shown, the reason is not.
        assert!(
            health.contains("\"lastError\":\"tls handshake failed\""),
            "{name}: {health}"
        );
        for public in [&answer.body, &health] {
            for secret in [reason, "invalid peer certificate", address.as_str()] {
                assert!(
                    !public.to_lowercase().contains(&secret.to_lowercase()),
                    "{name}: {secret:?} in {public}"
                );
            }
        }
        // The log has the reason, at warn, once per reason (not once per check).
        let warned: Vec<String> = logs
            .warnings_of(name)
            .into_iter()
            .filter(|l| l.contains("TLS handshake"))
            .collect();
        assert_eq!(warned.len(), 1, "{name}: {warned:#?}");
        assert!(
            warned[0].contains(reason) && warned[0].contains(&address),
            "{name}: {warned:#?}"
        );
        gw.shutdown().await;
    }
}

/// What a scripted TLS node saw of one request.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    host: Option<String>,
    authorization: Option<String>,
}

/// A scripted TLS node: it passes the health and identity checks and answers `info.getNodeID`
/// with `NodeID-<n>` (n counting its answers), counting TCP connections and recording requests.
#[derive(Clone)]
struct TlsNode {
    addr: std::net::SocketAddr,
    connections: Arc<AtomicUsize>,
    key_updates: Arc<AtomicUsize>,
    /// Requests that came on a connection after the node sent a stray answer on it.
    after_stray: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

/// What the scripted node does besides answering.
#[derive(Clone, Copy, PartialEq)]
enum Quirk {
    None,
    /// Some time after each answer, a TLS 1.3 KeyUpdate: a record of its own on an idle
    /// connection, which carries no plaintext.
    KeyUpdateWhileIdle,
    /// After each `info.getNodeID` answer, a second, unsolicited answer.
    ExtraAnswer,
}

async fn tls_node(leaf: &Leaf, quirk: Quirk) -> TlsNode {
    let certs = CertificateDer::pem_slice_iter(leaf.cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(leaf.key.as_bytes()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let node = TlsNode {
        addr: listener.local_addr().unwrap(),
        connections: Arc::default(),
        key_updates: Arc::default(),
        after_stray: Arc::default(),
        seen: Arc::default(),
    };
    let shared = node.clone();
    tokio::spawn(async move {
        let answered = Arc::new(AtomicUsize::new(0));
        while let Ok((tcp, _)) = listener.accept().await {
            shared.connections.fetch_add(1, Ordering::SeqCst);
            let (acceptor, node, answered) = (acceptor.clone(), shared.clone(), answered.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                serve_tls(tls, node, quirk, answered).await;
            });
        }
    });
    node
}

/// Answers requests on one connection until it closes (or 1,000 of them).
async fn serve_tls(
    mut tls: tokio_rustls::server::TlsStream<TcpStream>,
    node: TlsNode,
    quirk: Quirk,
    answered: Arc<AtomicUsize>,
) {
    let mut buf = Vec::new();
    let mut stray_sent = false;
    for _ in 0..1000 {
        // The head, then the body by Content-Length.
        let end = loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break end;
            }
            let mut chunk = [0u8; 4096];
            match tls.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            if buf.len() > 64 * 1024 {
                return;
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        let header = |name: &str| {
            head.lines().skip(1).find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
            })
        };
        let length: usize = header("content-length").unwrap().parse().unwrap();
        while buf.len() < end + 4 + length {
            let mut chunk = [0u8; 4096];
            match tls.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let body: serde_json::Value =
            serde_json::from_slice(&buf[end + 4..end + 4 + length]).unwrap();
        buf.drain(..end + 4 + length);
        if stray_sent {
            node.after_stray.fetch_add(1, Ordering::SeqCst);
        }
        let method = body["method"].as_str().unwrap_or_default().to_string();
        let id = body["id"].clone();
        node.seen.lock().unwrap().push(Seen {
            method: method.clone(),
            path: head.split(' ').nth(1).unwrap_or_default().to_string(),
            host: header("host"),
            authorization: header("authorization"),
        });
        let result = match method.as_str() {
            "info.isBootstrapped" => r#"{"isBootstrapped":true}"#.to_string(),
            "platform.getHeight" => r#"{"height":"100"}"#.to_string(),
            "info.getNetworkID" => r#"{"networkID":"12345"}"#.to_string(),
            "info.getNodeVersion" => r#"{"version":"avalanchego/1.14.2"}"#.to_string(),
            "info.getNodeID" => {
                let n = answered.fetch_add(1, Ordering::SeqCst);
                format!(r#"{{"nodeID":"NodeID-{n}"}}"#)
            }
            _ => r#"{}"#.to_string(),
        };
        let answer = |result: &str, id: &serde_json::Value| {
            let body = format!(r#"{{"jsonrpc":"2.0","result":{result},"id":{id}}}"#);
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
        };
        if tls
            .write_all(answer(&result, &id).as_bytes())
            .await
            .is_err()
            || tls.flush().await.is_err()
        {
            return;
        }
        if quirk == Quirk::ExtraAnswer && method == "info.getNodeID" {
            tokio::time::sleep(Duration::from_millis(10)).await;
            let forged = answer(r#"{"nodeID":"NodeID-FORGED"}"#, &id);
            if tls.write_all(forged.as_bytes()).await.is_err() || tls.flush().await.is_err() {
                return;
            }
            stray_sent = true;
        }
        if quirk == Quirk::KeyUpdateWhileIdle {
            // Once the client has read the answer and gone idle.
            tokio::time::sleep(Duration::from_millis(10)).await;
            if tls.get_mut().1.refresh_traffic_keys().is_err() || tls.flush().await.is_err() {
                return;
            }
            node.key_updates.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// A gateway in front of a scripted TLS node, checked once at start and then rarely, without a
/// cache: what the node sees are the test's calls.
async fn gateway_for(node: &TlsNode, ca: &Ca, url: String) -> Gateway {
    let _ = node;
    let gw = gateway("scripted", url, Some(ca.file()), |c| {
        c.cache.enabled = false;
        c.health.interval = Duration::from_secs(60);
        c.health.timeout = Duration::from_secs(5);
    })
    .await;
    assert!(becomes_healthy(&gw).await, "{:?}", gw.pool().status());
    gw
}

async fn node_id(gw: &Gateway) -> serde_json::Value {
    let r = support::post_with(
        &format!("{}/ext/info", gw.url()),
        &call("info.getNodeID", "{}"),
        &[("authorization", &format!("Bearer {}", support::ADMIN_KEY))],
    )
    .await;
    r.json()
}

#[tokio::test]
async fn kept_alive_tls_connections_are_reused_although_the_node_sends_records_between_answers() {
    let ca = Ca::new();
    let node = tls_node(
        &ca.leaf(&["127.0.0.1", "localhost"], false),
        Quirk::KeyUpdateWhileIdle,
    )
    .await;
    let gw = gateway_for(&node, &ca, format!("https://{}", node.addr)).await;
    let before = node.connections.load(Ordering::SeqCst);
    let updates = node.key_updates.load(Ordering::SeqCst);
    for i in 0..10 {
        let answer = node_id(&gw).await;
        assert!(
            answer["result"]["nodeID"]
                .as_str()
                .unwrap()
                .starts_with("NodeID-"),
            "{i}: {answer}"
        );
        // Idle long enough for the node's KeyUpdate to arrive before the next call.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        node.key_updates.load(Ordering::SeqCst) >= updates + 10,
        "the node sent no records between answers"
    );
    assert_eq!(
        node.connections.load(Ordering::SeqCst),
        before,
        "ten sequential calls opened new TLS connections"
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn an_unsolicited_answer_over_tls_is_never_read_as_the_next_one() {
    let ca = Ca::new();
    let node = tls_node(&ca.leaf(&["127.0.0.1"], false), Quirk::ExtraAnswer).await;
    let gw = gateway_for(&node, &ca, format!("https://{}", node.addr)).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let answer = node_id(&gw).await;
        let id = answer["result"]["nodeID"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(id.starts_with("NodeID-"), "{i}: {answer}");
        assert_ne!(id, "NodeID-FORGED", "{i}: the stray answer was read");
        ids.push(id);
        // The stray answer arrives while the connection is idle.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Each answer is the node's own for that call, in order.
    assert_eq!(
        ids,
        (0..5).map(|n| format!("NodeID-{n}")).collect::<Vec<_>>()
    );
    // No connection that carried a stray answer took another request.
    assert_eq!(node.after_stray.load(Ordering::SeqCst), 0);
    gw.shutdown().await;
}

#[tokio::test]
async fn a_provider_url_over_tls_sends_its_prefix_and_basic_auth() {
    let ca = Ca::new();
    let node = tls_node(&ca.leaf(&["localhost"], false), Quirk::None).await;
    let url = format!(
        "https://us%65r:p%40ss@localhost:{}/v1/KEY/",
        node.addr.port()
    );
    let gw = gateway_for(&node, &ca, url).await;
    node.seen.lock().unwrap().clear();
    let answer = node_id(&gw).await;
    assert_eq!(answer["result"]["nodeID"], "NodeID-0", "{answer}");
    let answer = post(
        &format!("{}/ext/bc/P", gw.url()),
        &call("platform.getTimestamp", "{}"),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let seen = node.seen.lock().unwrap().clone();
    let expected_auth = format!(
        "Basic {}",
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, "user:p@ss")
    );
    for (method, path) in [
        ("info.getNodeID", "/v1/KEY/ext/info"),
        ("platform.getTimestamp", "/v1/KEY/ext/bc/P"),
    ] {
        let s = seen
            .iter()
            .find(|s| s.method == method)
            .unwrap_or_else(|| panic!("{method} not seen: {seen:?}"));
        assert_eq!(s.path, path);
        assert_eq!(s.authorization.as_deref(), Some(expected_auth.as_str()));
        assert_eq!(
            s.host.as_deref(),
            Some(format!("localhost:{}", node.addr.port()).as_str())
        );
    }
    gw.shutdown().await;
}

#[test]
fn tls_ca_file_is_checked_with_the_config() {
    let dir = temp_dir("tls-config");
    let ca = Ca::new();
    let good = dir.join("ca.pem");
    std::fs::write(&good, ca.pem()).unwrap();
    let empty = dir.join("empty.pem");
    std::fs::File::create(&empty).unwrap().flush().unwrap();
    let missing = dir.join("missing.pem");
    let file = |url: &str, ca: &std::path::Path| {
        format!(
            "[[upstreams]]\nname = \"a\"\nurl = \"{url}\"\ntls_ca_file = {:?}\n",
            ca.display().to_string()
        )
    };
    // https, with or without a port, and a readable CA file: accepted.
    for url in ["https://node.example", "https://127.0.0.1:9650/prefix"] {
        Config::parse(&file(url, &good), "test.toml").unwrap();
    }
    // Refused, naming the key.
    for (url, ca) in [
        ("http://127.0.0.1:9650", good.as_path()),
        ("https://node.example", empty.as_path()),
        ("https://node.example", missing.as_path()),
    ] {
        let err = Config::parse(&file(url, ca), "test.toml").unwrap_err();
        assert_eq!(err.key(), Some("upstreams[0].tls_ca_file"), "{url}: {err}");
    }
}

/// The client alone: `Connections::https` to `addr`, trusting `ca`.
fn https_connections(addr: std::net::SocketAddr, ca: &Ca) -> snowgate::upstream::conn::Connections {
    use snowgate::upstream::conn::{Connections, TlsClient};
    let authority: http::uri::Authority = addr.to_string().parse().unwrap();
    let ca = CertificateDer::from_pem_slice(ca.pem().as_bytes()).unwrap();
    let tls = TlsClient::new("direct", authority.host(), vec![ca]).unwrap();
    Connections::https(
        &authority,
        tls,
        Duration::from_secs(1),
        4,
        Duration::from_secs(60),
    )
    .unwrap()
}

/// A refused certificate is a connect error (the request never left, so even a side-effecting
/// call may go to another node), and a node that takes the TCP connection but never speaks TLS
/// costs at most the connect timeout, not the request's whole deadline.
#[tokio::test]
async fn a_failed_handshake_is_a_connect_error_within_the_connect_timeout() {
    use snowgate::upstream::conn::SendError;
    use snowgate::upstream::Fault;
    let ca = Ca::new();
    let other = Ca::new();
    let node = tls_node(&other.leaf(&["127.0.0.1"], false), Quirk::None).await;
    let connections = https_connections(node.addr, &ca);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let body = call("platform.issueTx", r#"{"tx":"0x00"}"#);
    let err = connections
        .post("/ext/bc/P", body.as_bytes(), 1 << 20, deadline)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, SendError::Connect(Fault::TlsHandshake, d) if d.contains("invalid peer certificate")),
        "{err:?}"
    );
    assert!(node.seen.lock().unwrap().is_empty());
    // Silent after the TCP handshake.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = silent.accept().await {
            held.push(tcp);
        }
    });
    let connections = https_connections(addr, &ca);
    let started = std::time::Instant::now();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let err = connections
        .post("/ext/bc/P", body.as_bytes(), 1 << 20, deadline)
        .await
        .unwrap_err();
    assert!(
        matches!(err, SendError::Connect(Fault::ConnectTimeout, _)),
        "{err:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // The request's own deadline, when it comes first.
    let deadline = tokio::time::Instant::now() + Duration::from_millis(200);
    let err = connections
        .post("/ext/bc/P", body.as_bytes(), 1 << 20, deadline)
        .await
        .unwrap_err();
    assert!(matches!(err, SendError::Timeout), "{err:?}");
    held.abort();
}
