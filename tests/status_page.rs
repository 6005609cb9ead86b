//! The status page (`src/http/status.html`) in a real browser: headless Chromium over WebDriver
//! (`support::browser`).
//!
//! The first tests serve the page and a scripted `status.json` (the contract's shape) from a small
//! loopback server of their own, so each behaviour of the page is tried on its own: rows from the
//! data, names shown as text, the whole data area greyed when the JSON stops coming and cleared
//! when it is back, a phone's narrow screen, and the admin key asked for on a 401 and sent on every
//! call.
//!
//! The last one opens the page on a live gateway (three devnodes, traffic running) and watches it
//! follow what happens: a frozen node turns lagging, a dead one unhealthy, and a node cordoned
//! from the page stops taking calls (counted on the devnode) while the others serve.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use serde_json::{json, Value};

use support::browser::Browser;

/// The page, as the gateway serves it (`include_str!` there too).
const PAGE: &str = include_str!("../src/http/status.html");

/// The page's CSP (the contract's): the page must work under it.
const CSP: &str =
    "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'unsafe-inline'; \
                   connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; \
                   frame-ancestors 'none'";

/// A node name that would create an element (and run script) if the page parsed it as HTML.
const EVIL: &str = "<img src=x onerror=alert(1)>";

/// A name with no break opportunity, to try the layout's wrapping.
const LONG: &str = "an-upstream-with-a-very-long-name-and-no-spaces-in-it-at-all-0123456789abcdef";

/// The admin key the fixture accepts.
const FIXTURE_KEY: &str = "fixture-admin-key-0123456789";

/// What the fixture answers on `status.json`.
mod mode {
    /// The JSON, no key needed.
    pub const OK: u8 = 0;
    /// 503.
    pub const DOWN: u8 = 1;
    /// No answer at all (the request hangs).
    pub const HANG: u8 = 2;
    /// 401 unless `Authorization: Bearer FIXTURE_KEY`.
    pub const NEED_KEY: u8 = 3;
}

/// The loopback server of the page tests: `/snowgate/status` (the page with its CSP),
/// `/snowgate/status.json` (answered as `mode` says) and the cordon endpoints (always need the key;
/// 404 for the `EVIL` node, as if it had just been removed).
struct Fixture {
    addr: SocketAddr,
    mode: Arc<AtomicU8>,
    /// The `Authorization` headers `status.json` requests carried.
    auth_seen: Arc<Mutex<BTreeSet<String>>>,
    /// The nodes cordoned now.
    cordoned: Arc<Mutex<BTreeSet<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The fixture's `status.json`: three upstreams (healthy `node-a`, the lagging `EVIL`, an
/// unhealthy node with a long name), with HTML-looking text in every free-text field.
fn status_json(cordoned: &BTreeSet<String>) -> Value {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let upstream = |name: &str, state: &str, reason: Value, height: u64| {
        let (state, reason) = if cordoned.contains(name) {
            ("cordoned", json!("cordoned by an admin"))
        } else {
            (state, reason)
        };
        json!({
            "name": name, "role": "primary", "state": state, "reason": reason,
            "height": height, "lag": 1234 - height, "version": "v1.14.2<b>x</b>", "networkId": 1,
            "inFlight": 0, "cordoned": cordoned.contains(name), "takesTraffic": state == "healthy",
            "callsPerSecond": 3.2, "errorsPerSecond": 0.0,
            "latencyP50Ms": 1.2, "latencyP99Ms": 8.0,
            "latencyHistoryMs": [1.1, 1.3, null, 2.0, 1.7, 0.9, null, null, 3.5, 1.2],
        })
    };
    json!({
        "version": "0.1.0", "gitCommit": "abc1234", "now": now, "uptimeSeconds": 3725,
        "adminKeyRequired": true,
        "pool": {
            "healthy": true, "draining": false, "bestHeight": 1234, "bestHeightAgeSeconds": 0.8,
            "requestsPerSecond": {"cached": 10.0, "forwarded": 2.0, "error": 0.1}
        },
        "upstreams": [
            upstream("node-a", "healthy", Value::Null, 1234),
            upstream(EVIL, "lagging", json!("<b>12 blocks behind</b>"), 1222),
            upstream(LONG, "unhealthy", json!("timeout"), 1200),
        ],
        "cache": {
            "enabled": true, "entries": 100, "bytes": 123456, "maxBytes": 268435456,
            "hitRatio": {"final": 0.98, "recent": 0.5, "never": null},
            "evictionsPerSecond": 0.0, "coalescedPerSecond": 0.0, "shared": {"redis": "up"}
        },
        "rateLimit": {
            "enabled": true, "clientsTracked": 12, "limitedPerSecond": 0.5,
            "topLimited": [{"client": "<img src=y>", "limited": 42}, {"client": "key:9f86d081884c", "limited": 7}]
        },
        "events": [
            {"at": now - 1000, "kind": "upstream", "subject": EVIL, "state": "lagging",
             "reason": "lag", "message": "<script>window.pwned=1</script> lagging: height 1222, best 1234"},
            {"at": now - 5000, "kind": "reload", "subject": null, "state": "ok", "reason": null,
             "message": "config reloaded"}
        ]
    })
}

impl Fixture {
    async fn start(initial: u8) -> Fixture {
        use http_body_util::BodyExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mode = Arc::new(AtomicU8::new(initial));
        let auth_seen = Arc::new(Mutex::new(BTreeSet::new()));
        let cordoned = Arc::new(Mutex::new(BTreeSet::new()));
        let (m, seen, cord) = (mode.clone(), auth_seen.clone(), cordoned.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (m, seen, cord) = (m.clone(), seen.clone(), cord.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let (m, seen, cord) = (m.clone(), seen.clone(), cord.clone());
                            async move {
                                let path = req.uri().path().to_string();
                                let auth = req
                                    .headers()
                                    .get("authorization")
                                    .and_then(|v| v.to_str().ok())
                                    .map(str::to_string);
                                let post = req.method() == hyper::Method::POST;
                                let _ = req.into_body().collect().await;
                                let keyed =
                                    auth.as_deref() == Some(&format!("Bearer {FIXTURE_KEY}"));
                                let answer = |status: u16, ctype: &str, body: String| {
                                    hyper::Response::builder()
                                        .status(status)
                                        .header("content-type", ctype)
                                        .header("cache-control", "no-store")
                                        .header("content-security-policy", CSP)
                                        .body(Full::new(Bytes::from(body)))
                                        .unwrap()
                                };
                                let r = match path.as_str() {
                                    "/snowgate/status" => {
                                        answer(200, "text/html; charset=utf-8", PAGE.to_string())
                                    }
                                    "/snowgate/status.json" => {
                                        if let Some(a) = &auth {
                                            seen.lock().unwrap().insert(a.clone());
                                        }
                                        match m.load(Ordering::SeqCst) {
                                            mode::DOWN => answer(503, "text/plain", "down".into()),
                                            mode::HANG => {
                                                tokio::time::sleep(Duration::from_secs(30)).await;
                                                answer(503, "text/plain", "late".into())
                                            }
                                            mode::NEED_KEY if !keyed => answer(
                                                401,
                                                "text/plain",
                                                "admin key required".into(),
                                            ),
                                            _ => {
                                                let set = cord.lock().unwrap().clone();
                                                answer(
                                                    200,
                                                    "application/json",
                                                    status_json(&set).to_string(),
                                                )
                                            }
                                        }
                                    }
                                    p if post && p.starts_with("/snowgate/upstreams/") => {
                                        let rest = &p["/snowgate/upstreams/".len()..];
                                        let (name, action) =
                                            rest.rsplit_once('/').unwrap_or(("", ""));
                                        let name = percent_decode(name);
                                        if !keyed {
                                            answer(401, "text/plain", "admin key required".into())
                                        } else if name != "node-a" && name != LONG {
                                            answer(404, "text/plain", "unknown upstream".into())
                                        } else {
                                            let on = action == "cordon";
                                            let mut set = cord.lock().unwrap();
                                            if on {
                                                set.insert(name.clone());
                                            } else {
                                                set.remove(&name);
                                            }
                                            answer(
                                                200,
                                                "application/json",
                                                json!({"upstream": name, "cordoned": on})
                                                    .to_string(),
                                            )
                                        }
                                    }
                                    _ => answer(404, "text/plain", "not found".into()),
                                };
                                Ok::<_, Infallible>(r)
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Fixture {
            addr,
            mode,
            auth_seen,
            cordoned,
            task,
        }
    }

    fn page(&self) -> String {
        format!("http://{}/snowgate/status", self.addr)
    }

    fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
    }
}

/// `%XX` escapes decoded (the page encodes names with `encodeURIComponent`).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("");
            if let Ok(v) = u8::from_str_radix(hex, 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A JS expression: the rows' `data-upstream` names, in order.
const ROW_NAMES: &str =
    "[...document.querySelectorAll('[data-upstream]')].map(r => r.dataset.upstream)";

/// Waits until the page shows the fixture's three rows with their heights.
async fn wait_rows(b: &Browser) {
    b.wait_for(
        Duration::from_secs(10),
        "the fixture's three upstream rows with heights",
        "const rows = document.querySelectorAll('[data-upstream]');
         return rows.length === 3 &&
           [...rows].every(r => /^[0-9,]+$/.test(r.querySelector('.height').textContent));",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_data_is_greyed() {
    let fixture = Fixture::start(mode::OK).await;
    let b = Browser::start(1280, 900).await;
    b.client.goto(&fixture.page()).await.unwrap();
    wait_rows(&b).await;

    // The rows are the JSON's, in its order, with their state and height.
    let names = b.eval(&format!("return {ROW_NAMES};")).await;
    assert_eq!(names, json!(["node-a", EVIL, LONG]));
    let row = |name: &str, sel: &str| {
        format!(
            "return [...document.querySelectorAll('[data-upstream]')]
               .find(r => r.dataset.upstream === {}).querySelector('{sel}').textContent;",
            json!(name)
        )
    };
    assert_eq!(b.eval(&row("node-a", ".height")).await, json!("1,234"));
    assert_eq!(b.eval(&row("node-a", ".state")).await, json!("healthy"));
    assert_eq!(b.eval(&row(EVIL, ".state")).await, json!("lagging"));
    assert_eq!(b.eval(&row(LONG, ".state")).await, json!("unhealthy"));

    // Names, reasons, versions, clients and messages are text: the markup in them is shown, never
    // made into elements (or run).
    assert_eq!(b.eval(&row(EVIL, ".name")).await, json!(EVIL));
    assert_eq!(
        b.eval(&row(EVIL, ".reason")).await,
        json!("<b>12 blocks behind</b>")
    );
    let made = b
        .eval(
            "return {img: document.querySelectorAll('img').length,
                     b: document.querySelectorAll('main b').length,
                     script: document.querySelectorAll('script').length,
                     pwned: window.pwned === 1,
                     shown: document.body.innerText.includes('<script>window.pwned=1</script>')
                        && document.body.innerText.includes('<img src=y>')};",
        )
        .await;
    assert_eq!(
        made,
        json!({"img": 0, "b": 0, "script": 1, "pwned": false, "shown": true})
    );
    // Cordon without a key: no request, a message, and the key field is where the cursor goes.
    b.eval("document.querySelector('[data-upstream=\"node-a\"] .cordon').click(); return true;")
        .await;
    b.wait_for(
        Duration::from_secs(5),
        "the message asking for the key",
        "const m = document.getElementById('msg');
         return !m.hidden && m.textContent.includes('Enter the admin key') &&
           document.activeElement === document.getElementById('admin-key');",
    )
    .await;
    assert!(fixture.cordoned.lock().unwrap().is_empty());
    assert!(b.client.get_alert_text().await.is_err(), "no alert box");

    // Event badges take the colour of what they mean: a reload that went well is green.
    let badges = b
        .eval(
            "return [...document.querySelectorAll('#event-rows .state')]
               .map(e => e.textContent + ' ' + e.className);",
        )
        .await;
    assert_eq!(
        badges,
        json!(["lagging state st-lagging", "ok state st-healthy"])
    );
    b.screenshot(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/target/status-page-fixture.png"
    )))
    .await;
    assert_eq!(
        b.eval("return document.body.classList.contains('stale');")
            .await,
        json!(false)
    );

    // The JSON fails (503): the data is greyed, with the time it went stale; it clears when the
    // JSON is back.
    let stale = "const note = document.getElementById('stale-note');
         return document.body.classList.contains('stale') && !note.hidden &&
           /^stale since \\d\\d:\\d\\d:\\d\\d/.test(note.textContent) &&
           getComputedStyle(document.querySelector('main')).opacity < 0.9;";
    let fresh = "return !document.body.classList.contains('stale') &&
           document.getElementById('stale-note').hidden &&
           getComputedStyle(document.querySelector('main')).opacity === '1';";
    fixture.set(mode::DOWN);
    b.wait_for(Duration::from_secs(5), "stale after 503s", stale)
        .await;
    // The last data stays on screen (greyed), not emptied.
    assert_eq!(
        b.eval(&format!("return {ROW_NAMES}.length;")).await,
        json!(3)
    );
    fixture.set(mode::OK);
    b.wait_for(Duration::from_secs(5), "fresh again after 503s", fresh)
        .await;

    // The JSON hangs (no answer at all, no error either): greyed all the same once the data is
    // older than ~3 s.
    fixture.set(mode::HANG);
    b.wait_for(
        Duration::from_secs(8),
        "stale while status.json hangs",
        stale,
    )
    .await;
    fixture.set(mode::OK);
    b.wait_for(Duration::from_secs(8), "fresh again after the hang", fresh)
        .await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_phone_sees_cards_without_horizontal_scroll() {
    let fixture = Fixture::start(mode::OK).await;
    let b = Browser::phone(390, 844).await;
    b.client.goto(&fixture.page()).await.unwrap();
    wait_rows(&b).await;
    let layout = b
        .eval(
            "const s = document.scrollingElement;
             return {narrow: window.innerWidth <= 400,
                     fits: s.scrollWidth <= window.innerWidth,
                     cards: getComputedStyle(document.querySelector('#upstreams thead')).display === 'none',
                     scrollWidth: s.scrollWidth, innerWidth: window.innerWidth};",
        )
        .await;
    assert_eq!(layout["narrow"], json!(true), "{layout}");
    assert_eq!(layout["cards"], json!(true), "{layout}");
    assert_eq!(layout["fits"], json!(true), "{layout}");
    // No element sticks out on the right either (a clipped one would not widen the scroll).
    let wide = b
        .eval(
            "return [...document.querySelectorAll('main *, header *')]
               .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1)
               .map(e => e.tagName + '.' + e.className).slice(0, 5);",
        )
        .await;
    assert_eq!(wide, json!([]), "elements past the right edge");
    b.screenshot(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/target/status-page-phone.png"
    )))
    .await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_key_is_asked_for_and_sent() {
    let fixture = Fixture::start(mode::NEED_KEY).await;
    let b = Browser::start(1280, 900).await;
    b.client.goto(&fixture.page()).await.unwrap();

    // A 401: the page asks for the key (no rows, nothing to show yet).
    b.wait_for(
        Duration::from_secs(10),
        "the key prompt after a 401",
        "return document.body.classList.contains('needs-key') &&
           !document.getElementById('auth-note').hidden;",
    )
    .await;
    assert_eq!(
        b.eval(&format!("return {ROW_NAMES}.length;")).await,
        json!(0)
    );

    // The key typed in is kept in this tab's sessionStorage and sent as a bearer token.
    b.enter_key(FIXTURE_KEY).await;
    wait_rows(&b).await;
    assert_eq!(
        b.eval("return sessionStorage.getItem('snowgate.adminKey');")
            .await,
        json!(FIXTURE_KEY)
    );
    assert!(fixture
        .auth_seen
        .lock()
        .unwrap()
        .contains(&format!("Bearer {FIXTURE_KEY}")));
    assert_eq!(
        b.eval("return document.body.classList.contains('needs-key');")
            .await,
        json!(false)
    );

    // Cordon from the page: the endpoint is called with the key and the row follows.
    let button = |name: &str| {
        format!(
            "[...document.querySelectorAll('[data-upstream]')]
               .find(r => r.dataset.upstream === {}).querySelector('.cordon')",
            json!(name)
        )
    };
    b.eval(&format!("{}.click(); return true;", button("node-a")))
        .await;
    b.wait_for(
        Duration::from_secs(5),
        "node-a cordoned",
        &format!(
            "const row = [...document.querySelectorAll('[data-upstream]')]
               .find(r => r.dataset.upstream === 'node-a');
             return row.querySelector('.state').textContent === 'cordoned' &&
               {}.textContent === 'Uncordon';",
            button("node-a")
        ),
    )
    .await;
    assert!(fixture.cordoned.lock().unwrap().contains("node-a"));

    // A refused cordon (404 here: the node is gone) is a message on the page, never an alert.
    b.eval(&format!("{}.click(); return true;", button(EVIL)))
        .await;
    b.wait_for(
        Duration::from_secs(5),
        "the 404 message",
        "const m = document.getElementById('msg');
         return !m.hidden && m.textContent.includes('404');",
    )
    .await;
    assert!(
        b.client.get_alert_text().await.is_err(),
        "no alert box is open"
    );

    // A wrong key: status.json answers 401 again, the page greys and asks for the key.
    b.enter_key("a-wrong-key-0123456789").await;
    b.wait_for(
        Duration::from_secs(8),
        "stale and asking for the key after a wrong one",
        "return document.body.classList.contains('needs-key') &&
           document.body.classList.contains('stale');",
    )
    .await;
    b.close().await;
}

/// The page's row of `name`: a JS expression.
fn live_row(name: &str) -> String {
    format!("document.querySelector('[data-upstream=\"{name}\"]')")
}

/// A JS expression: whether `name`'s row shows `state`.
fn state_is(name: &str, state: &str) -> String {
    format!(
        "({}?.querySelector('.state').textContent === '{state}')",
        live_row(name)
    )
}

/// A JS function body: whether `name`'s row shows `state`.
fn shows_state(name: &str, state: &str) -> String {
    format!("return {};", state_is(name, state))
}

/// `GET url` as JSON.
async fn get_json(url: &str) -> Value {
    support::client()
        .get(url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The `platform.getTimestamp` calls a devnode has served (the health checks never make one).
async fn timestamp_calls(node: &snowgate::devnode::DevNode) -> u64 {
    let calls = get_json(&format!("{}/_devnode/calls", node.url())).await;
    calls["calls"]["platform.getTimestamp"]
        .as_u64()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_follows_a_live_gateway_and_cordons_a_node() {
    use std::sync::atomic::{AtomicBool, AtomicU64};
    use support::{call, Cluster, ADMIN_KEY};

    // Blocks every 100 ms and checks every 200 ms (test_gateway): a frozen node is 2 blocks behind
    // (max_lag_blocks) within a few checks. No cache: every call reaches a node.
    let c = Cluster::start(3, Duration::from_millis(100), |config| {
        config.admin.listen = Some("127.0.0.1:0".parse().unwrap());
        config.cache.enabled = false;
    })
    .await;
    let admin = c.gateway.admin_url().unwrap();

    // Traffic: uncached calls in a bounded loop (stopped below, or after 3 minutes at most).
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let traffic = {
        let (stop, served) = (stop.clone(), served.clone());
        let url = format!("{}/ext/bc/P", c.url());
        tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .timeout(Duration::from_secs(2))
                .no_proxy()
                .build()
                .unwrap();
            let deadline = std::time::Instant::now() + Duration::from_secs(180);
            while !stop.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
                let r = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(call("platform.getTimestamp", "{}"))
                    .send()
                    .await;
                if let Ok(r) = r {
                    if r.status() == 200 && r.text().await.is_ok_and(|t| t.contains("\"result\"")) {
                        served.fetch_add(1, Ordering::SeqCst);
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };

    let b = Browser::start(1280, 900).await;
    b.client
        .goto(&format!("{admin}/snowgate/status"))
        .await
        .unwrap();

    // Every upstream's row, healthy, with its height.
    b.wait_for(
        Duration::from_secs(15),
        "three healthy rows with heights and calls",
        "const rows = [...document.querySelectorAll('[data-upstream]')];
         return rows.length === 3 && rows.every(r =>
           r.querySelector('.state').textContent === 'healthy' &&
           /^[0-9,]+$/.test(r.querySelector('.height').textContent) &&
           r.querySelector('.calls').textContent !== '0.0');",
    )
    .await;
    for (i, node) in c.nodes.iter().enumerate() {
        let shown = b
            .eval(&format!(
                "return {}.querySelector('.height').textContent;",
                live_row(&format!("node-{i}"))
            ))
            .await;
        let shown: u64 = shown.as_str().unwrap().replace(',', "").parse().unwrap();
        let now = get_json(&format!("{}/_devnode", node.url())).await["height"]
            .as_u64()
            .unwrap();
        assert!(
            shown > 0 && shown <= now,
            "node-{i}'s row shows height {shown}, the node is at {now}"
        );
    }

    // Cordon node-2 from the page, with the admin key typed in: its row says so, and it takes no
    // more calls while the two others keep serving.
    b.enter_key(ADMIN_KEY).await;
    b.click("[data-upstream=\"node-2\"] .cordon").await;
    b.wait_for(
        Duration::from_secs(5),
        "node-2 cordoned",
        &shows_state("node-2", "cordoned"),
    )
    .await;
    assert_eq!(
        b.eval(&format!(
            "return {}.querySelector('.cordon').textContent;",
            live_row("node-2")
        ))
        .await,
        json!("Uncordon")
    );
    // Calls that were in flight when the cordon landed finish first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cordoned_before = timestamp_calls(&c.nodes[2]).await;
    let others_before = timestamp_calls(&c.nodes[0]).await + timestamp_calls(&c.nodes[1]).await;
    let served_before = served.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cordoned_after = timestamp_calls(&c.nodes[2]).await;
    let others_after = timestamp_calls(&c.nodes[0]).await + timestamp_calls(&c.nodes[1]).await;
    assert_eq!(
        cordoned_after, cordoned_before,
        "node-2 took calls while cordoned"
    );
    assert!(
        others_after >= others_before + 10,
        "the others stopped serving: {others_before} -> {others_after}"
    );
    assert!(served.load(Ordering::SeqCst) >= served_before + 10);

    // node-0 frozen through its fault control: lagging within three seconds.
    let faults = support::client()
        .put(format!("{}/_devnode/faults", c.nodes[0].url()))
        .header("content-type", "application/json")
        .body(r#"{"frozen":true}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(faults.status(), 200);
    b.wait_for(
        Duration::from_secs(3),
        "node-0 lagging",
        &shows_state("node-0", "lagging"),
    )
    .await;

    // node-1 down: unhealthy (after failed checks).
    let down = support::client()
        .post(format!("{}/_devnode/down?for=120s", c.nodes[1].url()))
        .send()
        .await
        .unwrap();
    assert_eq!(down.status(), 202);
    b.wait_for(
        Duration::from_secs(10),
        "node-1 unhealthy",
        &shows_state("node-1", "unhealthy"),
    )
    .await;
    // The three states at once, and the events that led there (newest first).
    b.wait_for(
        Duration::from_secs(3),
        "lagging, unhealthy and cordoned rows and their events",
        &format!(
            "const ev = [...document.querySelectorAll('#event-rows tr')].map(t => t.textContent);
             return {} && {} && {} && ev.some(t => t.includes('node-1')) &&
               ev.some(t => t.includes('node-0'));",
            state_is("node-0", "lagging"),
            state_is("node-1", "unhealthy"),
            state_is("node-2", "cordoned"),
        ),
    )
    .await;
    // Wait for a sparkline with points, for the screenshot.
    b.wait_for(
        Duration::from_secs(5),
        "a latency sparkline",
        "return document.querySelectorAll('svg.spark polyline').length > 0;",
    )
    .await;
    b.screenshot(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/target/status-page.png"
    )))
    .await;

    // Uncordoned from the page: node-2 is back, and the only node left serving.
    b.click("[data-upstream=\"node-2\"] .cordon").await;
    b.wait_for(
        Duration::from_secs(5),
        "node-2 healthy again",
        &shows_state("node-2", "healthy"),
    )
    .await;
    let before = timestamp_calls(&c.nodes[2]).await;
    let grew = async {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            if timestamp_calls(&c.nodes[2]).await > before {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    };
    assert!(grew.await, "node-2 took no call after the uncordon");

    stop.store(true, Ordering::SeqCst);
    traffic.await.unwrap();
    b.close().await;
    c.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_public_port_the_page_asks_for_the_key() {
    use support::{Cluster, ADMIN_KEY};

    // No admin listener: the page is on the public port, its JSON needs the admin key.
    let c = Cluster::start(2, Duration::from_secs(60), |_| {}).await;
    let b = Browser::start(1280, 900).await;
    b.client
        .goto(&format!("{}/snowgate/status", c.url()))
        .await
        .unwrap();
    b.wait_for(
        Duration::from_secs(10),
        "the key prompt after the gateway's 401",
        "return document.body.classList.contains('needs-key') &&
           !document.getElementById('auth-note').hidden &&
           document.querySelectorAll('[data-upstream]').length === 0;",
    )
    .await;
    b.enter_key(ADMIN_KEY).await;
    b.wait_for(
        Duration::from_secs(10),
        "both rows with the key",
        &format!(
            "return !document.body.classList.contains('needs-key') &&
               !document.body.classList.contains('stale') && {} && {};",
            state_is("node-0", "healthy"),
            state_is("node-1", "healthy"),
        ),
    )
    .await;
    // Kept for this tab: a reload of the page needs no typing.
    b.client.refresh().await.unwrap();
    b.wait_for(
        Duration::from_secs(10),
        "the rows again after a reload",
        &format!("return {};", state_is("node-1", "healthy")),
    )
    .await;
    b.close().await;
    c.gateway.shutdown().await;
}
