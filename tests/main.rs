//! The integration tests, one binary: each behaviour is a module (`tests/NAME.rs`), and
//! `support` holds the helpers they share (devnodes and gateways on 127.0.0.1:0, real nginx,
//! haproxy, Redis, Prometheus and Chromium, the release binary). One binary links once, where one
//! per file linked the gateway forty times. Run one behaviour with
//! `cargo test --test integration NAME::`.

mod support;

mod alerts;
mod attack_h2_round2;
mod attack_otel_28;
mod attack_pool_round2;
mod attack_quota_27;
mod attack_quota_round2;
mod attack_window;
mod cache;
mod coalescing;
mod config_errors;
mod config_files;
mod cordons;
mod cors;
mod dashboard;
mod dashboard_prometheus;
mod depth;
mod devnode_agree;
mod devnode_faults;
mod devnode_methods;
mod devnode_tls;
mod devnode_versions;
mod devnode_wire;
mod docs_links;
mod fleet;
mod fleet_cluster;
mod fleet_partition;
mod fleet_tls;
mod gateway_policy;
mod gateway_pool;
mod gateway_wire;
mod health_api;
mod hostile_bodies;
mod hostile_clients;
mod http2_stalled_readers;
mod keys;
mod layers;
mod log_forging;
mod logs;
mod metrics;
mod node_events;
mod otel;
mod pool_hardening;
mod private_methods;
mod protect;
mod provider_upstream;
mod providers;
mod proxies;
mod quota_script;
mod quotas;
mod reload;
mod serve_errors;
mod shutdown;
mod status;
mod status_page;
mod systemd_unit;
mod unread_answers;
mod upstream_http;
mod upstream_network;
mod upstream_roles;
mod upstream_tls;
mod upstream_versions;
mod usage;
mod verify;
mod verify_shared;
