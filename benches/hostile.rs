//! Criterion benchmarks of the worst request bodies an anonymous client can send: 1 MiB (the
//! default `limits.body_bytes`) of each shape that once made a pass over the request super-linear,
//! through what every request pays before the cache: the envelope decoded with a node's rules
//! (`jsonrpc::decode`, duplicate-key checks included) and the canonical cache key
//! (`cache::key::canonical_params`). Each should take a few milliseconds, linear in the size.
//!
//! * `top_keys`: ~95,000 distinct keys at the top level (an unknown method: refused);
//! * `params_keys`: the same keys inside `params` of a cacheable method;
//! * `params_long_prefix`: ~9,000 keys sharing a 100-byte prefix (each compare reads it);
//! * `params_kelvin`: keys with the Kelvin sign, which folds to `K` (the non-ASCII fold path);
//! * `nested_wide`: objects in objects down to the depth limit (32), each level wide;
//! * `escapes_u0000` / `escapes_backslash`: one string of 1 MiB of `\u0000` or `\\` escapes;
//! * `html`: one string of `<`, `>`, `&` (six bytes each in Go's HTML-safe encoding), with the
//!   re-encoding for the node (`RpcCall::upstream_body`) measured too.
//!
//! `cargo bench --bench hostile`.

use std::sync::Arc;

use bytes::Bytes;
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};

use snowgate::cache::key::canonical_params;
use snowgate::call::{Caller, RpcCall};
use snowgate::methods::Registry;

// The allocator of the snowgate binary (`src/main.rs`): these bodies allocate per key.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The default `limits.body_bytes`.
const MIB: usize = 1024 * 1024;

/// The gateway's default `limits.depth`.
const DEPTH: usize = 32;

/// A request for `method` whose body ends with `tail`, cut to fit in [`MIB`] by `fill`.
fn envelope(method: &str, fill: impl FnOnce(&mut String, usize)) -> String {
    let mut body = format!("{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"{method}\"");
    let budget = MIB - body.len() - 64;
    fill(&mut body, budget);
    body.push('}');
    assert!(body.len() <= MIB, "{} bytes", body.len());
    body
}

/// `"<prefix><n>":0` members, comma-separated, until `budget` bytes are used.
fn keys(out: &mut String, prefix: &str, budget: usize) {
    let end = out.len() + budget;
    let mut n = 0u64;
    loop {
        let member = format!("\"{prefix}{n}\":0");
        if out.len() + member.len() + 1 > end {
            break;
        }
        if n > 0 {
            out.push(',');
        }
        out.push_str(&member);
        n += 1;
    }
}

/// The hostile bodies, by name.
pub fn bodies() -> Vec<(&'static str, String)> {
    let top = envelope("platform.noSuchMethod", |b, budget| {
        b.push(',');
        keys(b, "k", budget);
    });
    let in_params = |prefix: &'static str| {
        envelope("platform.getTx", move |b, budget| {
            b.push_str(",\"params\":{");
            keys(b, prefix, budget);
            b.push('}');
        })
    };
    let long_prefix: &'static str = Box::leak("p".repeat(100).into_boxed_str());
    let nested = envelope("platform.getTx", |b, budget| {
        // Levels 2..=32: params, then an object in each; every level as wide as the budget allows.
        let levels = DEPTH - 1;
        let per_level = budget / levels - 8;
        b.push_str(",\"params\":");
        for level in 0..levels {
            b.push('{');
            keys(b, &format!("l{level}k"), per_level);
            if level + 1 < levels {
                b.push_str(",\"n\":");
            }
        }
        b.push_str(&"}".repeat(levels));
    });
    let string_of = |unit: &str| {
        let unit = unit.to_string();
        envelope("platform.getTx", move |b, budget| {
            b.push_str(",\"params\":{\"txID\":\"");
            b.push_str(&unit.repeat(budget / unit.len()));
            b.push_str("\"}");
        })
    };
    vec![
        ("top_keys", top),
        ("params_keys", in_params("k")),
        ("params_long_prefix", in_params(long_prefix)),
        ("params_kelvin", in_params("\u{212a}")),
        ("nested_wide", nested),
        ("escapes_u0000", string_of("\\u0000")),
        ("escapes_backslash", string_of("\\\\")),
        ("html", string_of("<>&")),
    ]
}

fn hostile(c: &mut Criterion) {
    let registry = Registry::builtin();
    let mut g = c.benchmark_group("hostile_1MiB");
    g.sample_size(20);
    for (name, body) in bodies() {
        // Sanity: the shape decodes as intended (a call, refused only for the duplicate-free
        // reasons it should be), so the bench measures the full path.
        let decoded = snowgate::jsonrpc::decode(body.as_bytes());
        assert_eq!(decoded.parse_error, None, "{name}");
        assert_eq!(decoded.ambiguity, None, "{name}");
        g.throughput(Throughput::Bytes(body.len() as u64));
        g.bench_function(format!("decode+key {name}"), |b| {
            b.iter(|| {
                let decoded = snowgate::jsonrpc::decode(black_box(body.as_bytes()));
                let key = canonical_params(decoded.envelope.params.as_ref());
                black_box((decoded, key))
            });
        });
        if name == "html" {
            let call = RpcCall {
                spec: registry
                    .get("platform.getTx")
                    .map(Arc::clone)
                    .expect("the registry has getTx"),
                params: decoded.envelope.params,
                id: Some(Bytes::from_static(b"1")),
                caller: Caller {
                    admin: false,
                    pin: None,
                    ip: [127, 0, 0, 1].into(),
                    client: snowgate::call::ClientId::Ip([127, 0, 0, 1].into()),
                    request_id: None,
                    trace: Default::default(),
                },
                lookup: None,
            };
            g.bench_function(format!("upstream_body {name}"), |b| {
                b.iter(|| black_box(call.upstream_body(black_box(42))));
            });
        }
    }
    g.finish();
}

criterion_group!(benches, hostile);
criterion_main!(benches);
