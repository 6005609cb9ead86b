//! Cordons that hold (issue 26): a node cordoned by the file (`[[upstreams]] cordoned = true`)
//! gets no call until a reload says otherwise, whatever an admin does; a cordon set on one
//! instance of a fleet is the fleet's (one real `redis-server`), followed by the other instances
//! within a health interval, lifted from any of them, and still there after every instance
//! restarts; with Redis down (or someone else's value under the cordons' key) an instance keeps
//! what it knew, and its admin's cordon reaches the fleet once Redis is back. `/ext/health` says who cordons a node. What the devnodes saw proves
//! where calls went; every wait is for a state, with a generous deadline.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use snowgate::devnode::DevNode;
use snowgate::gateway::ConfigSource;
use snowgate::Gateway;
use support::fleet::{Fleet, SLOW_CHAIN};
use support::redis::{RedisServer, Resp, SharedRedis};
use support::{call, client, devnodes, post, temp_dir, ADMIN_KEY};

/// A method the health checks never call: its count on a devnode is the clients' calls.
const COUNTED: &str = "platform.getTimestamp";

/// Generous: a loaded machine is slow, never this slow.
const DEADLINE: Duration = Duration::from_secs(60);

/// Polls `cond` every 50 ms for at most `limit`.
async fn wait_until<F, Fut>(limit: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cond().await
}

/// One counted call through the gateway at `base`; it must succeed.
async fn counted_call(base: &str) {
    let r = post(&format!("{base}/ext/bc/P"), &call(COUNTED, "{}")).await;
    assert_eq!(r.status, 200, "{}", r.body);
}

/// `n` counted calls through `base`: how many reached `node`.
async fn calls_reaching(base: &str, node: &DevNode, n: usize) -> u64 {
    let before = node.control().call_count(COUNTED);
    for _ in 0..n {
        counted_call(base).await;
    }
    node.control().call_count(COUNTED) - before
}

/// Whether calls through `base` reach `node` (sent until one does, for at most [`DEADLINE`]).
async fn reaches(base: &str, node: &DevNode) -> bool {
    let before = node.control().call_count(COUNTED);
    wait_until(DEADLINE, || async {
        counted_call(base).await;
        node.control().call_count(COUNTED) > before
    })
    .await
}

/// `POST {base}/snowgate/upstreams/{name}/{verb}` with the admin key: 200, and its JSON.
async fn admin(base: &str, name: &str, verb: &str) -> Value {
    let r = client()
        .post(format!("{base}/snowgate/upstreams/{name}/{verb}"))
        .header("authorization", format!("Bearer {ADMIN_KEY}"))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let body = r.text().await.unwrap();
    assert_eq!(status, 200, "{verb} {name}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// The row of `name` in `{base}/ext/health`.
async fn health_row(base: &str, name: &str) -> Value {
    let text = support::get_text(&format!("{base}/ext/health")).await;
    let health: Value = serde_json::from_str(&text).unwrap();
    health["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

/// Who cordons `name` as `{base}/ext/health` says it (`[]`: nobody), and whether it is cordoned.
async fn cordoned_by(base: &str, name: &str) -> (Value, bool) {
    let row = health_row(base, name).await;
    let by = row.get("cordonedBy").cloned().unwrap_or(json!([]));
    (by, row["cordoned"] == true)
}

/// The row of `name` in `{base}/snowgate/status.json` (asked with the admin key).
async fn status_row(base: &str, name: &str) -> Value {
    let r = client()
        .get(format!("{base}/snowgate/status.json"))
        .header("authorization", format!("Bearer {ADMIN_KEY}"))
        .send()
        .await
        .unwrap();
    let status: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    status["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == name)
        .cloned()
        .unwrap()
}

/// Waits until every instance of `fleet` uses its Redis (a slow start may leave the breaker open
/// for a while): what they answer then is the fleet's, not a fallback's.
async fn redis_in_use(fleet: &Fleet) {
    let up = wait_until(DEADLINE, || async {
        for i in 0..fleet.gateways.len() {
            if fleet.metric(i, "snowgate_redis_up").await != 1.0 {
                return false;
            }
        }
        true
    })
    .await;
    assert!(up, "the instances never reached Redis");
}

/// Whether the fleet's Redis holds a cordon of `name` (under the default `key_prefix`).
fn in_redis(redis: &RedisServer, name: &str) -> bool {
    redis.command(&[b"HEXISTS", b"snowgate:12345:cordons", name.as_bytes()]) == Resp::Int(1)
}

/// A config file over `nodes` (`node-0`, ...), the cache and rate limits off, health checked
/// every 200 ms; `node-1` cordoned by the file when `cordoned`.
fn file_text(nodes: &[DevNode], cordoned: bool) -> String {
    let mut text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n\n[admin]\napi_keys = [\"{ADMIN_KEY}\"]\n\n\
         [health]\ninterval = \"200ms\"\ntimeout = \"200ms\"\n\n\
         [limits]\nmax_connections_per_ip = 10000\n\n\
         [rate_limit]\nenabled = false\n\n[cache]\nenabled = false\n\n"
    );
    for (i, node) in nodes.iter().enumerate() {
        text.push_str(&format!(
            "[[upstreams]]\nname = \"node-{i}\"\nurl = \"{}\"\n",
            node.url()
        ));
        if i == 1 {
            text.push_str(&format!("cordoned = {cordoned}\n"));
        }
        text.push('\n');
    }
    text
}

/// Written whole then renamed, as editors do: a reload never reads half a file.
fn write(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_the_file_cordons_gets_no_call_until_a_reload_uncordons_it() {
    let (_network, nodes) = devnodes(12345, 2, SLOW_CHAIN).await;
    let path = temp_dir("cordon-file").join("snowgate.toml");
    write(&path, &file_text(&nodes, true));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gw = Gateway::start_from(ConfigSource::file(&path), Some(listener))
        .await
        .unwrap();
    let base = gw.url();

    // Cordoned from the first call: none of them reaches node-1, and /ext/health says why.
    assert_eq!(calls_reaching(&base, &nodes[1], 20).await, 0);
    let row = health_row(&base, "node-1").await;
    assert_eq!(row["cordoned"], true, "{row}");
    assert_eq!(row["cordonedBy"], json!(["file"]), "{row}");
    assert_eq!(row["takesTraffic"], false, "{row}");
    assert_eq!(status_row(&base, "node-1").await["reason"], "by the file");
    let (by, _) = cordoned_by(&base, "node-0").await;
    assert_eq!(by, json!([]), "node-0 is cordoned by nobody");

    // An admin's uncordon does not lift the file's cordon, and the answer says so.
    let answer = admin(&base, "node-1", "uncordon").await;
    assert_eq!(answer["cordoned"], true, "{answer}");
    assert_eq!(answer["cordonedBy"], json!(["file"]), "{answer}");
    assert!(
        answer["note"]
            .as_str()
            .is_some_and(|n| n.contains("the file still cordons it")),
        "{answer}"
    );
    assert_eq!(calls_reaching(&base, &nodes[1], 20).await, 0);

    // The file says otherwise: the reload uncordons the node in place (not a new node).
    write(&path, &file_text(&nodes, false));
    let report = gw.reload().await.expect("the reload is applied");
    assert!(
        report
            .changed
            .contains(&"upstream uncordoned by the file: node-1".to_string()),
        "{report:?}"
    );
    assert!(
        !report.changed.iter().any(|c| c.contains("changed: node-1")),
        "{report:?}"
    );
    assert_eq!(cordoned_by(&base, "node-1").await, (json!([]), false));
    assert!(
        reaches(&base, &nodes[1]).await,
        "uncordoned, it got no call"
    );

    // And cordoned by the file again, with an admin's cordon on top: the file alone no longer
    // decides, the admin's holds when the file lets go.
    write(&path, &file_text(&nodes, true));
    let report = gw.reload().await.expect("the reload is applied");
    assert!(
        report
            .changed
            .contains(&"upstream cordoned by the file: node-1".to_string()),
        "{report:?}"
    );
    let answer = admin(&base, "node-1", "cordon").await;
    assert_eq!(
        answer["cordonedBy"],
        json!(["file", "instance"]),
        "{answer}"
    );
    write(&path, &file_text(&nodes, false));
    gw.reload().await.expect("the reload is applied");
    assert_eq!(
        cordoned_by(&base, "node-1").await,
        (json!(["instance"]), true)
    );
    assert_eq!(calls_reaching(&base, &nodes[1], 20).await, 0);
    let answer = admin(&base, "node-1", "uncordon").await;
    assert_eq!(
        answer,
        json!({"upstream": "node-1", "cordoned": false, "cordonedBy": []})
    );
    assert!(
        reaches(&base, &nodes[1]).await,
        "uncordoned, it got no call"
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cordon_set_on_one_instance_stops_the_others_calls_and_outlives_restarts() {
    let redis = RedisServer::start();
    let mut fleet = Fleet::start(2, 2, SLOW_CHAIN, &redis.redis_toml(), |_, c| {
        c.cache.enabled = false;
    })
    .await;
    redis_in_use(&fleet).await;
    let (a, b) = (fleet.url(0), fleet.url(1));
    // B's calls reach node-1 before: none reaching it later means something.
    assert!(reaches(&b, &fleet.nodes[1]).await);

    // Cordoned on A: it is the fleet's, in Redis, and B follows within a health interval.
    let answer = admin(&a, "node-1", "cordon").await;
    assert_eq!(
        answer,
        json!({"upstream": "node-1", "cordoned": true, "cordonedBy": ["fleet"]})
    );
    assert!(in_redis(&redis, "node-1"));
    let followed = wait_until(DEADLINE, || async {
        cordoned_by(&b, "node-1").await == (json!(["fleet"]), true)
    })
    .await;
    assert!(followed, "B did not follow A's cordon");
    assert_eq!(
        calls_reaching(&b, &fleet.nodes[1], 20).await,
        0,
        "B's calls reached the node A cordoned"
    );
    assert_eq!(status_row(&b, "node-1").await["reason"], "by the fleet");

    // Uncordoned on B: gone from Redis, and A follows.
    let answer = admin(&b, "node-1", "uncordon").await;
    assert_eq!(answer["cordoned"], false, "{answer}");
    assert!(!in_redis(&redis, "node-1"));
    let followed = wait_until(DEADLINE, || async {
        cordoned_by(&a, "node-1").await == (json!([]), false)
    })
    .await;
    assert!(followed, "A did not follow B's uncordon");
    assert!(
        reaches(&a, &fleet.nodes[1]).await,
        "uncordoned, A sent it nothing"
    );

    // Cordoned again, then every instance restarted: the new ones read it from Redis.
    admin(&a, "node-1", "cordon").await;
    fleet.restart().await;
    redis_in_use(&fleet).await;
    for i in 0..2 {
        let url = fleet.url(i);
        let held = wait_until(DEADLINE, || async {
            cordoned_by(&url, "node-1").await == (json!(["fleet"]), true)
        })
        .await;
        assert!(held, "instance {i} lost the cordon across its restart");
        assert_eq!(calls_reaching(&url, &fleet.nodes[1], 20).await, 0);
    }
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_cordons_stay_as_known_and_an_admins_reaches_the_fleet_when_it_is_back() {
    let mut redis = RedisServer::start();
    let fleet = Fleet::start(2, 2, SLOW_CHAIN, &redis.redis_toml(), |_, c| {
        c.cache.enabled = false;
    })
    .await;
    redis_in_use(&fleet).await;
    let (a, b) = (fleet.url(0), fleet.url(1));
    admin(&a, "node-1", "cordon").await;
    let followed = wait_until(DEADLINE, || async {
        cordoned_by(&b, "node-1").await == (json!(["fleet"]), true)
    })
    .await;
    assert!(followed, "B did not follow A's cordon");

    // Redis dies: both instances say so, and keep the fleet's cordon as they last read it.
    redis.kill();
    let down = wait_until(DEADLINE, || async {
        fleet.metric(0, "snowgate_redis_up").await == 0.0
            && fleet.metric(1, "snowgate_redis_up").await == 0.0
    })
    .await;
    assert!(down, "the instances did not see Redis die");
    for url in [&a, &b] {
        assert_eq!(
            cordoned_by(url, "node-1").await,
            (json!(["fleet"]), true),
            "{url}"
        );
    }
    assert_eq!(calls_reaching(&b, &fleet.nodes[1], 10).await, 0);

    // An admin's cordon meanwhile holds on A only, and the answer says it is not shared yet.
    let answer = admin(&a, "node-0", "cordon").await;
    assert_eq!(answer["cordonedBy"], json!(["instance"]), "{answer}");
    assert!(
        answer["note"]
            .as_str()
            .is_some_and(|n| n.contains("not shared with the fleet yet")),
        "{answer}"
    );
    assert_eq!(cordoned_by(&b, "node-0").await, (json!([]), false));

    // Redis back, empty (no persistence): A writes its cordon, B follows it, and the cordon of
    // node-1 that Redis no longer holds is lifted on both.
    redis.restart();
    let settled = wait_until(DEADLINE, || async {
        cordoned_by(&a, "node-0").await == (json!(["fleet"]), true)
            && cordoned_by(&b, "node-0").await == (json!(["fleet"]), true)
            && cordoned_by(&a, "node-1").await == (json!([]), false)
            && cordoned_by(&b, "node-1").await == (json!([]), false)
    })
    .await;
    assert!(
        settled,
        "A: {:?} {:?}, B: {:?} {:?}",
        cordoned_by(&a, "node-0").await,
        cordoned_by(&a, "node-1").await,
        cordoned_by(&b, "node-0").await,
        cordoned_by(&b, "node-1").await
    );
    assert!(in_redis(&redis, "node-0"));
    assert_eq!(calls_reaching(&b, &fleet.nodes[0], 20).await, 0);
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_value_under_the_cordons_key_is_neither_read_nor_overwritten() {
    let redis = RedisServer::start();
    let fleet = Fleet::start(1, 2, SLOW_CHAIN, &redis.redis_toml(), |_, c| {
        c.cache.enabled = false;
    })
    .await;
    redis_in_use(&fleet).await;
    let a = fleet.url(0);
    admin(&a, "node-1", "cordon").await;
    // Someone else's string where the cordons' hash was.
    redis.set_raw(b"snowgate:12345:cordons", b"not cordons");
    let answer = admin(&a, "node-0", "cordon").await;
    assert_eq!(answer["cordonedBy"], json!(["instance"]), "{answer}");
    assert!(
        answer["note"]
            .as_str()
            .is_some_and(|n| n.contains("something else than a hash")),
        "{answer}"
    );
    assert_eq!(
        redis.get_raw(b"snowgate:12345:cordons").as_deref(),
        Some(&b"not cordons"[..]),
        "overwritten"
    );
    // Redis itself is fine (a foreign value is no outage), and the cordon known stays.
    assert_eq!(fleet.metric(0, "snowgate_redis_up").await, 1.0);
    assert_eq!(cordoned_by(&a, "node-1").await, (json!(["fleet"]), true));
    // The key gone, the instance's cordon is written and the fleet's is what Redis says.
    redis.command(&[b"DEL", b"snowgate:12345:cordons"]);
    let settled = wait_until(DEADLINE, || async {
        cordoned_by(&a, "node-0").await == (json!(["fleet"]), true)
            && cordoned_by(&a, "node-1").await == (json!([]), false)
    })
    .await;
    assert!(settled, "{:?}", cordoned_by(&a, "node-0").await);
    assert!(in_redis(&redis, "node-0"));
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cordon_on_one_network_leaves_the_same_named_node_of_another_network_alone() {
    // Two fleets of one instance each, a local network's and Fuji's, on one Redis and one
    // `key_prefix`: both name their nodes `node-0` and `node-1`.
    let redis = RedisServer::start();
    let local = Fleet::start(1, 2, SLOW_CHAIN, &redis.redis_toml(), |_, c| {
        c.cache.enabled = false;
    })
    .await;
    let fuji = Fleet::start_on_network(5, 1, 2, SLOW_CHAIN, &redis.redis_toml(), |_, c| {
        c.cache.enabled = false;
    })
    .await;
    redis_in_use(&local).await;
    redis_in_use(&fuji).await;
    let v = admin(&fuji.url(0), "node-0", "cordon").await;
    assert_eq!(v["cordonedBy"], json!(["fleet"]), "{v}");
    assert!(!reaches_within(&fuji.url(0), &fuji.nodes[0], 20).await);
    // Fuji's cordon is in Redis, under Fuji's network.
    let keys = redis.keys("snowgate:*cordons");
    assert_eq!(keys.len(), 1, "{keys:?}");
    // Ten health intervals later, the local network's node-0 still takes calls.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        cordoned_by(&local.url(0), "node-0").await,
        (json!([]), false)
    );
    assert!(reaches(&local.url(0), &local.nodes[0]).await);
    // A cordon of the local network's node-1 leaves Fuji's alone too.
    admin(&local.url(0), "node-1", "cordon").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        cordoned_by(&fuji.url(0), "node-1").await,
        (json!([]), false)
    );
    assert!(cordoned_by(&fuji.url(0), "node-0").await.1);
    local.shutdown().await;
    fuji.shutdown().await;
}

/// Whether any of `n` counted calls through `base` reaches `node`.
async fn reaches_within(base: &str, node: &DevNode, n: usize) -> bool {
    calls_reaching(base, node, n).await > 0
}
