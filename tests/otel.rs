//! OpenTelemetry traces from the real binary to a collector in process (`support::otlp`): the
//! spans of a miss that is retried on another node, of a hit, of a batch and of a client's
//! unsampled request, their parent links, the `traceparent` each node received, what the spans
//! never carry, and a collector that is slow or down costing dropped spans and nothing else.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use snowgate::devnode::{DevNode, DevNodeConfig, Faults};

use crate::support::binary::Served;
use crate::support::otlp::{answering, spans_counted, Mode, Receiver, Span};
use crate::support::{call, get_metrics, post, post_with, ADMIN_KEY};

/// A method node `a` fails (HTTP 500) and node `b` serves: a call of it goes to `a` (the one
/// primary) first, then to `b` (the fallback).
const FAILING: &str = "platform.getCurrentSupply";

/// A generous deadline for what happens in the background (health checks, exports).
const WAIT: Duration = Duration::from_secs(60);

async fn nodes() -> (DevNode, DevNode) {
    let config = |faults| DevNodeConfig {
        // No new block during the test: head-class answers stay cached.
        block_interval: Duration::from_secs(3600),
        faults,
        ..Default::default()
    };
    let failing = Faults {
        failing_methods: vec![FAILING.to_string()],
        ..Default::default()
    };
    let a = DevNode::spawn(config(failing)).await.unwrap();
    let b = DevNode::spawn(config(Faults::default())).await.unwrap();
    (a, b)
}

fn config(a: &DevNode, b: &DevNode, tracing: &str) -> String {
    format!(
        "[health]\ninterval = \"500ms\"\ntimeout = \"500ms\"\n\
         [cache]\nhead_ttl = \"10m\"\n\
         [admin]\napi_keys = [\"{ADMIN_KEY}\"]\n\
         [rate_limit]\nrequests_per_second = 1000\nburst = 1000\ntrusted_proxies = [\"127.0.0.1/32\"]\n\
         [tracing]\n{tracing}\n\
         [[upstreams]]\nname = \"a\"\nurl = \"{}\"\n\
         [[upstreams]]\nname = \"b\"\nurl = \"{}\"\nrole = \"fallback\"\n",
        a.url(),
        b.url()
    )
}

/// The real binary in front of `a` and `b`, exporting to `receiver` with `[tracing]` keys `more`
/// (and the config's other sections `sections`), once it answers; and its RPC URL.
async fn serve(
    receiver: &Receiver,
    (a, b): (&DevNode, &DevNode),
    more: &str,
    sections: &str,
    rust_log: &str,
) -> (Served, String) {
    // Every request traced unless the test says otherwise (the shipped default samples 1 %).
    let ratio = if more.contains("sample_ratio") {
        ""
    } else {
        "sample_ratio = 1.0\n"
    };
    let tracing = format!("otlp_endpoint = \"{}\"\n{ratio}{more}", receiver.url);
    let text = config(a, b, &tracing) + sections;
    let served = Served::start(&text, rust_log);
    let rpc = format!("{}/ext/bc/P", served.url);
    answering(&served.url).await;
    (served, rpc)
}

/// Waits until `receiver` holds at least `n` spans of `trace`, and returns them.
async fn spans_of(receiver: &Receiver, trace: &str, n: usize) -> Vec<Span> {
    let start = std::time::Instant::now();
    loop {
        let spans = receiver.trace(trace);
        if spans.len() >= n {
            return spans;
        }
        assert!(
            start.elapsed() < WAIT,
            "{} of {n} spans of {trace}: {spans:#?}",
            spans.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn one<'a>(spans: &'a [Span], what: &str, pick: impl Fn(&Span) -> bool) -> &'a Span {
    let found: Vec<&Span> = spans.iter().filter(|s| pick(s)).collect();
    assert_eq!(found.len(), 1, "one {what} in {spans:#?}");
    found[0]
}

/// No span of `spans` carries a node's address, the client's params or a method it made up.
fn nothing_secret(spans: &[Span], nodes: &[&DevNode]) {
    for span in spans {
        let mut texts = vec![span.name.clone()];
        texts.extend(span.attrs.iter().map(|(k, v)| format!("{k}={v}")));
        for text in texts {
            for node in nodes {
                let port = node.addr().port().to_string();
                assert!(!text.contains(&port), "a node's port in {text:?}");
            }
            assert!(!text.contains("madeUp"), "a client's method in {text:?}");
            assert!(
                !text.contains("secretParam"),
                "a client's params in {text:?}"
            );
        }
    }
}

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_is_one_trace_across_the_cache_and_every_node_attempt() {
    let receiver = Receiver::start().await;
    let (a, b) = nodes().await;
    let name = "service_name = \"snowgate-test\"";
    let (_served, rpc) = serve(&receiver, (&a, &b), name, "", "warn").await;

    // A miss, retried: `a` fails it, `b` answers. The client's trace goes on.
    let traceparent = format!("00-{TRACE}-{CLIENT_SPAN}-01");
    let body = r#"{"jsonrpc":"2.0","id":7,"method":"platform.getCurrentSupply","params":{"secretParam":1}}"#;
    let r = post_with(&rpc, body, &[("traceparent", &traceparent)]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("\"result\""), "{}", r.body);
    let spans = spans_of(&receiver, TRACE, 4).await;
    let root = one(&spans, "request span", |s| s.name == FAILING);
    assert_eq!(root.parent, CLIENT_SPAN, "the client's span is the parent");
    assert_eq!(root.kind, 2, "a server span");
    assert_eq!(root.service, "snowgate-test");
    assert_eq!(root.attr("rpc.method"), Some(FAILING));
    assert_eq!(root.attr("http.response.status_code"), Some("200"));
    assert_eq!(root.attr("snowgate.cache"), Some("MISS"));
    assert_eq!(root.attr("snowgate.outcome"), Some("ok"));
    assert_eq!(root.attr("snowgate.client"), Some("127.0.0.1"));
    assert!(!root.error);
    let lookup = one(&spans, "cache span", |s| s.name == "cache");
    assert_eq!(lookup.parent, root.span_id);
    assert_eq!(lookup.attr("snowgate.cache"), Some("miss"));
    let first = one(&spans, "first attempt", |s| s.name == "upstream a");
    let second = one(&spans, "second attempt", |s| s.name == "upstream b");
    for (attempt, nth) in [(first, "1"), (second, "2")] {
        assert_eq!(attempt.parent, root.span_id, "{attempt:?}");
        assert_eq!(attempt.kind, 3, "a client span");
        assert_eq!(attempt.attr("snowgate.attempt"), Some(nth));
        assert_eq!(attempt.attr("snowgate.hedge"), Some("false"));
    }
    assert_eq!(first.attr("snowgate.outcome"), Some("http_5xx"));
    assert!(first.error);
    assert_eq!(second.attr("snowgate.outcome"), Some("ok"));
    assert!(!second.error);
    // Each node saw the trace, with the span of its own attempt as the parent.
    let sent = |node: &DevNode, span: &Span| {
        let expected = format!("00-{}-{}-01", span.trace_id, span.span_id);
        node.control().traceparents().contains(&expected)
    };
    assert!(sent(&a, first), "{:?}", a.control().traceparents());
    assert!(sent(&b, second), "{:?}", b.control().traceparents());

    // The same call again: a hit, with no node asked.
    let hit_trace = "0af7651916cd43dd8448eb211c80319c";
    let traceparent = format!("00-{hit_trace}-b7ad6b7169203331-01");
    let r = post_with(&rpc, body, &[("traceparent", &traceparent)]).await;
    assert_eq!(r.header("x-cache"), Some("HIT"));
    let spans = spans_of(&receiver, hit_trace, 2).await;
    let root = one(&spans, "request span", |s| s.name == FAILING);
    assert_eq!(root.attr("snowgate.cache"), Some("HIT"));
    let lookup = one(&spans, "cache span", |s| s.name == "cache");
    assert_eq!(lookup.parent, root.span_id);
    assert_eq!(lookup.attr("snowgate.cache"), Some("hit"));
    assert!(spans.iter().all(|s| !s.name.starts_with("upstream")));
    for node in [&a, &b] {
        let seen = node.control().traceparents();
        assert!(seen.iter().all(|t| !t.contains(hit_trace)), "{seen:?}");
    }

    // A batch, no traceparent: a new trace, one span per call under the request's.
    let batch = format!(
        "[{},{},{}]",
        call("platform.getTimestamp", "{}"),
        body,
        call("platform.madeUp", "{}")
    );
    let r = post(&rpc, &batch).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let root = receiver
        .wait_for(WAIT, |s| s.name == "batch")
        .await
        .expect("a batch span");
    assert_eq!(root.parent, "", "a new trace");
    assert_eq!(root.attr("snowgate.batch.size"), Some("3"));
    let spans = spans_of(&receiver, &root.trace_id, 7).await;
    let timestamp = one(&spans, "getTimestamp", |s| {
        s.name == "platform.getTimestamp"
    });
    let supply = one(&spans, "getCurrentSupply", |s| s.name == FAILING);
    let unknown = one(&spans, "unknown method", |s| s.name == "call");
    for call in [timestamp, supply, unknown] {
        assert_eq!(call.parent, root.span_id, "{call:?}");
    }
    assert_eq!(timestamp.attr("snowgate.cache"), Some("MISS"));
    assert_eq!(supply.attr("snowgate.cache"), Some("HIT"));
    assert_eq!(unknown.attr("snowgate.outcome"), Some("unknown_method"));
    assert_eq!(unknown.attr("rpc.jsonrpc.error_code"), Some("-32601"));
    let attempt = one(&spans, "the miss's attempt", |s| {
        s.name.starts_with("upstream")
    });
    assert_eq!(attempt.parent, timestamp.span_id);
    let name = attempt.attr("snowgate.upstream").unwrap();
    let node = if name == "a" { &a } else { &b };
    assert!(sent(node, attempt), "{:?}", node.control().traceparents());

    // A client's unsampled request: nothing recorded, its context passed on as it came.
    let quiet = "11111111111111111111111111111111";
    let traceparent = format!("00-{quiet}-2222222222222222-00");
    let r = post_with(
        &rpc,
        &call("platform.getBlockchains", "{}"),
        &[("traceparent", &traceparent)],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        a.control().traceparents().contains(&traceparent)
            || b.control().traceparents().contains(&traceparent),
        "the client's traceparent reached a node"
    );

    // Everything exported by now (the batch came after), and none of it secret.
    let all = receiver.spans();
    assert!(
        all.iter().all(|s| s.trace_id != quiet),
        "unsampled: {all:#?}"
    );
    nothing_secret(&all, &[&a, &b]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_or_down_collector_costs_spans_never_answers() {
    let receiver = Receiver::start().await;
    // Every export is held for a minute: the exporter gives up on it after a second.
    receiver.set_mode(Mode::Slow(Duration::from_secs(60)));
    let (a, b) = nodes().await;
    let small = "max_queued_spans = 8\nexport_timeout = \"1s\"\nclient_trace = \"link\"";
    let log = "warn,snowgate::otel=info";
    let (served, rpc) = serve(&receiver, (&a, &b), small, "", log).await;
    // While the collector holds an export, every call is answered: far more spans than the
    // queue holds are made.
    let traceparent = format!("00-{TRACE}-{CLIENT_SPAN}-01");
    for i in 0..200 {
        let body = call("platform.getHeight", "{}").replace("\"id\":1", &format!("\"id\":{i}"));
        let r = post_with(&rpc, &body, &[("traceparent", &traceparent)]).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(r.body.contains(&format!("\"id\":{i}")), "{}", r.body);
    }
    let start = std::time::Instant::now();
    loop {
        let text = get_metrics(&served.url).await;
        if spans_counted(&text, "dropped") > 0 && spans_counted(&text, "failed") > 0 {
            break;
        }
        assert!(start.elapsed() < WAIT, "no spans counted lost: {text}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(served.logged("spans could not be exported", WAIT));

    // The collector comes back: spans reach it again, each request a trace of its own linked to
    // the client's span (`client_trace = "link"`), never joining the client's trace.
    receiver.set_mode(Mode::Accept);
    let r = post_with(
        &rpc,
        &call("platform.getHeight", "{}"),
        &[("traceparent", &traceparent)],
    )
    .await;
    assert_eq!(r.status, 200);
    let root = receiver
        .wait_for(WAIT, |s| s.name == "platform.getHeight")
        .await
        .expect("spans reach the collector again");
    assert_ne!(root.trace_id, TRACE);
    assert_eq!(root.parent, "");
    assert_eq!(root.links, [(TRACE.to_string(), CLIENT_SPAN.to_string())]);
    assert!(served.logged("traces reach the collector again", WAIT));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_round_trips_and_a_hedge_have_spans_of_their_own() {
    let receiver = Receiver::start().await;
    let redis = crate::support::redis::RedisServer::start();
    let (a, b) = nodes().await;
    // `a` holds this method's calls: the hedge on `b` answers them.
    let held = "platform.getSubnets";
    a.control()
        .update_faults(|f| f.hanging_methods = vec![held.to_string()]);
    let sections = format!(
        "[redis]\nurl = \"{}\"\ntimeout = \"2s\"\n\
         [upstream]\nhedge_after = \"100ms\"\nhedge_max_ratio = 1.0\n",
        redis.url()
    );
    let (_served, rpc) = serve(&receiver, (&a, &b), "", &sections, "warn").await;
    let trace = "5bf92f3577b34da6a3ce929d0e0e4737";
    let traceparent = format!("00-{trace}-{CLIENT_SPAN}-01");
    // A client the quota has never seen (its proxy says who): Redis decides its first call.
    let headers = [
        ("traceparent", traceparent.as_str()),
        ("x-forwarded-for", "203.0.113.9"),
    ];
    let r = post_with(&rpc, &call(held, "{}"), &headers).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("\"result\""), "{}", r.body);
    let spans = spans_of(&receiver, trace, 6).await;
    let root = one(&spans, "request span", |s| s.name == held);
    assert_eq!(root.attr("snowgate.client"), Some("203.0.113.9"));
    let quota = one(&spans, "quota", |s| s.name == "redis quota");
    let lookup = one(&spans, "shared cache", |s| s.name == "redis cache lookup");
    for span in [quota, lookup] {
        assert_eq!(span.parent, root.span_id, "{span:?}");
        assert_eq!(span.kind, 3, "a client span");
        assert_eq!(span.attr("db.system.name"), Some("redis"));
    }
    assert_eq!(lookup.attr("snowgate.found"), Some("false"));
    let first = one(&spans, "held attempt", |s| s.name == "upstream a");
    let hedge = one(&spans, "hedge", |s| s.name == "upstream b");
    assert_eq!(first.attr("snowgate.hedge"), Some("false"));
    assert_eq!(first.attr("snowgate.outcome"), Some("cancelled"));
    assert_eq!(hedge.attr("snowgate.hedge"), Some("true"));
    assert_eq!(hedge.attr("snowgate.attempt"), Some("2"));
    assert_eq!(hedge.attr("snowgate.outcome"), Some("ok"));
    assert_eq!(hedge.parent, root.span_id);
    nothing_secret(&receiver.spans(), &[&a, &b]);
    // Nor Redis's address.
    let port = redis.port().map(|p| p.to_string());
    for span in receiver.spans() {
        for value in span.attrs.values() {
            assert!(port.as_ref().is_none_or(|p| !value.contains(p.as_str())));
            assert!(!value.contains(&redis.url()), "{value}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_force_at_most_client_sampled_per_second_traces() {
    let receiver = Receiver::start().await;
    let (a, b) = nodes().await;
    // Nothing sampled by the ratio: only clients' flags make traces, one a second at most.
    let more = "sample_ratio = 0.0\nclient_sampled_per_second = 1";
    let (served, rpc) = serve(&receiver, (&a, &b), more, "", "warn").await;
    let traceparent = format!("00-{TRACE}-{CLIENT_SPAN}-01");
    let sent = 100;
    let started = std::time::Instant::now();
    for i in 0..sent {
        let body = call("platform.getHeight", "{}").replace("\"id\":1", &format!("\"id\":{i}"));
        let r = post_with(&rpc, &body, &[("traceparent", &traceparent)]).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let elapsed = started.elapsed().as_secs_f64();
    // Every span made is exported (the metric and the receiver agree), then counted.
    let exported = |text: &str| spans_counted(text, "exported") as usize;
    let start = std::time::Instant::now();
    loop {
        let text = get_metrics(&served.url).await;
        let made = exported(&text);
        if made > 0 && made == receiver.spans().len() {
            tokio::time::sleep(Duration::from_millis(2500)).await;
            if exported(&get_metrics(&served.url).await) == made {
                break;
            }
        }
        assert!(start.elapsed() < WAIT, "spans never settled: {text}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let traced = (receiver.spans().iter())
        .filter(|s| s.trace_id == TRACE && s.parent == CLIENT_SPAN)
        .count();
    // A burst of one, then one a second: however slow the machine, far fewer than were sent.
    let bound = 1 + elapsed.ceil() as usize;
    assert!(traced >= 1, "the first was traced");
    assert!(
        traced <= bound,
        "{traced} traced in {elapsed:.1} s (at most {bound})"
    );
    assert!(traced < sent, "{traced} of {sent}");
}

/// A client over its quota is refused before its body is read: counted, never traced. A flood of
/// refusals costs a client nothing to send and must not cost a span each (nor crowd the honest
/// requests' spans out of the export queue), even with every request sampled.
#[tokio::test]
async fn a_request_refused_before_its_body_is_counted_never_traced() {
    let receiver = Receiver::start().await;
    let (a, b) = nodes().await;
    let text = format!(
        "[health]\ninterval = \"500ms\"\ntimeout = \"500ms\"\n\
         [cache]\nhead_ttl = \"10m\"\n\
         [admin]\napi_keys = [\"{ADMIN_KEY}\"]\n\
         [limits]\nbody_bytes = 4096\n\
         [rate_limit]\nrequests_per_second = 1\nburst = 10\n\
         [tracing]\notlp_endpoint = \"{}\"\nsample_ratio = 1.0\n\
         [[upstreams]]\nname = \"a\"\nurl = \"{}\"\n\
         [[upstreams]]\nname = \"b\"\nurl = \"{}\"\nrole = \"fallback\"\n",
        receiver.url,
        a.url(),
        b.url()
    );
    let served = Served::start(&text, "warn");
    let rpc = format!("{}/ext/bc/P", served.url);
    let admin = format!("Bearer {ADMIN_KEY}");
    let admin = [("authorization", admin.as_str())];
    // Waits for the gateway with the admin's calls, which no quota charges.
    let start = std::time::Instant::now();
    while post_with(&rpc, &call("platform.getHeight", "{}"), &admin)
        .await
        .json()["result"]
        .is_null()
    {
        assert!(start.elapsed() < WAIT, "the gateway never answered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The burst passes, then every call is refused before its body (sequential: each is known to
    // be over quota when it arrives).
    // Each refusal makes the client known to be over its quota until it can afford a call again:
    // the calls sent at once after it are refused before their bodies.
    let mut statuses = Vec::new();
    let body = call("platform.getHeight", "{}");
    while statuses.len() < 400 && statuses.iter().filter(|s| **s == 429).count() < 8 {
        let status = post(&rpc, &body).await.status;
        statuses.push(status);
        if status == 429 {
            let at_once = (0..6).map(|_| post(&rpc, &body));
            let replies = futures_util::future::join_all(at_once).await;
            statuses.extend(replies.iter().map(|r| r.status));
        }
    }
    let refused = statuses.iter().filter(|s| **s == 429).count();
    let served_ok = statuses.iter().filter(|s| **s == 200).count();
    assert!(refused >= 8 && served_ok >= 1, "{statuses:?}");
    // Bodies over `body_bytes` are refused instead of read (413, the admin's: no quota): counted,
    // never traced either.
    let big = call(
        "platform.getHeight",
        &format!(r#"{{"pad":"{}"}}"#, "x".repeat(8192)),
    );
    for _ in 0..5 {
        assert_eq!(post_with(&rpc, &big, &admin).await.status, 413);
    }
    // The admin's last call, of a method of its own: once its span is exported, every span that
    // ended before it has been (the queue exports in order).
    let marker = call("platform.getTimestamp", "{}");
    post_with(&rpc, &marker, &admin).await;
    let last = receiver
        .wait_for(WAIT, |s| s.name == "platform.getTimestamp")
        .await;
    assert!(last.is_some(), "the marker's span was never exported");
    let roots: Vec<Span> = receiver
        .spans()
        .into_iter()
        .filter(|s| s.parent.is_empty() && s.name == "platform.getHeight")
        .collect();
    let traced_refusals = roots
        .iter()
        .filter(|s| s.attr("http.response.status_code") == Some("429"))
        .count();
    // A call refused by its charge, after its body, is traced as any answered call is; the ones
    // known to be over before their bodies are not (before the fix: every refusal was traced).
    assert!(
        traced_refusals * 2 <= refused,
        "{traced_refusals} of {refused} refusals traced"
    );
    let too_large = receiver
        .spans()
        .into_iter()
        .filter(|s| s.attr("http.response.status_code") == Some("413"))
        .count();
    assert_eq!(too_large, 0, "bodies refused as too large were traced");
    // The client's calls that were served are traced (and the admin's waiting calls).
    let client_roots = roots
        .iter()
        .filter(|s| s.attr("snowgate.client") == Some("127.0.0.1"))
        .filter(|s| s.attr("http.response.status_code") == Some("200"))
        .count();
    assert!(client_roots >= served_ok, "{client_roots} < {served_ok}");
    // Counted all the same.
    let m = get_metrics(&served.url).await;
    let series = "snowgate_rate_limited_total{client=\"ip\"}";
    let counted = m
        .lines()
        .find_map(|l| l.strip_prefix(series))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    assert_eq!(counted, refused as f64, "{series}:\n{m}");
}
