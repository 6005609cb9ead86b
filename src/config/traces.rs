//! `[tracing]`: OpenTelemetry traces, read by `crate::otel` once at start (a change applies at the
//! next restart, as `[log] format` does). Without `otlp_endpoint` nothing is traced and the request
//! path pays nothing for it.

use std::time::Duration;

use serde::Deserialize;

use super::{invalid, ConfigError};

/// `[tracing]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TracingConfig {
    /// The collector's OTLP/HTTP endpoint (`"http://127.0.0.1:4318"`): spans are posted as
    /// protobuf to its `/v1/traces`, or to the URL as written when it has a path. Plain HTTP, to a
    /// collector or agent beside the gateway (which forwards to a vendor over TLS). `None`: off.
    pub otlp_endpoint: Option<String>,
    /// `service.name` of every span.
    pub service_name: String,
    /// The share of requests traced (0.0 to 1.0) when the client's own `traceparent` does not say:
    /// 0.01 by default, what a public endpoint can afford (every span costs CPU and a place in the
    /// export queue; 1.0 is for a private gateway or a debugging session).
    pub sample_ratio: f64,
    /// What a client's `traceparent` does: `"follow"` continues its trace, and its sampled flag
    /// decides whether the request is traced (OpenTelemetry's parent-based sampling); `"link"`
    /// starts a new trace, sampled at `sample_ratio`, linked to the client's (clients then cannot
    /// choose what is traced, nor join a trace of their choosing).
    pub client_trace: ClientTrace,
    /// With `client_trace = "follow"`: the most requests a second (all clients together) that a
    /// client's sampled flag alone has traced; beyond, `sample_ratio` decides for them too, so
    /// that clients cannot choose how many spans the collector gets. `0`: the flag never forces a
    /// trace (a trace that is sampled still continues the client's).
    pub client_sampled_per_second: u32,
    /// Finished spans waiting for the exporter; beyond, spans are dropped and counted
    /// (`snowgate_trace_spans_dropped_total`), never waited for.
    pub max_queued_spans: usize,
    /// The longest one export to the collector may take; a slower collector loses that batch.
    #[serde(with = "crate::duration")]
    pub export_timeout: Duration,
}

impl Default for TracingConfig {
    fn default() -> Self {
        TracingConfig {
            otlp_endpoint: None,
            service_name: "snowgate".to_string(),
            sample_ratio: 0.01,
            client_trace: ClientTrace::Follow,
            client_sampled_per_second: 100,
            max_queued_spans: 2048,
            export_timeout: Duration::from_secs(5),
        }
    }
}

/// What a client's `traceparent` does (`[tracing] client_trace`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientTrace {
    /// Continue the client's trace, sampled as its flag says.
    #[default]
    Follow,
    /// A new trace at `sample_ratio`, with a link to the client's.
    Link,
}

/// Most spans `max_queued_spans` may hold (each a few hundred bytes, up to about 3 KB with a long
/// client `tracestate`).
pub const MAX_QUEUED_SPANS: usize = 1 << 20;

impl TracingConfig {
    /// What `crate::otel::install` sets up; `None` when off (no `otlp_endpoint`) or invalid (see
    /// [`TracingConfig::validate`]).
    pub fn settings(&self) -> Option<crate::otel::Settings> {
        let url = traces_url(self.otlp_endpoint.as_deref()?).ok()?;
        self.validate().ok()?;
        Some(crate::otel::Settings {
            url,
            service_name: self.service_name.clone(),
            sample_ratio: self.sample_ratio,
            follow_client: self.client_trace == ClientTrace::Follow,
            client_sampled_per_second: self.client_sampled_per_second,
            max_queued_spans: self.max_queued_spans,
            export_timeout: self.export_timeout,
        })
    }

    /// Checks `[tracing]`; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(endpoint) = &self.otlp_endpoint {
            traces_url(endpoint).map_err(|why| ConfigError::Invalid {
                path: None,
                key: "tracing.otlp_endpoint".into(),
                message: why.into(),
            })?;
        }
        let name = &self.service_name;
        if name.is_empty() || name.len() > 255 || name.chars().any(char::is_control) {
            return invalid(
                "tracing.service_name",
                "must be 1 to 255 characters, none a control character",
            );
        }
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            return invalid("tracing.sample_ratio", "must be from 0.0 to 1.0");
        }
        if !(1..=MAX_QUEUED_SPANS).contains(&self.max_queued_spans) {
            return invalid(
                "tracing.max_queued_spans",
                format!("must be from 1 to {MAX_QUEUED_SPANS}"),
            );
        }
        if self.export_timeout.is_zero() || self.export_timeout > Duration::from_secs(60) {
            return invalid("tracing.export_timeout", "must be above 0 and at most 60s");
        }
        Ok(())
    }
}

/// Where spans are posted: `endpoint` with `/v1/traces` when it names no path (as OpenTelemetry's
/// `OTEL_EXPORTER_OTLP_ENDPOINT` is read), else as written. The error never quotes the URL (its
/// query may hold a token).
pub fn traces_url(endpoint: &str) -> Result<http::Uri, &'static str> {
    let uri: http::Uri = endpoint
        .parse()
        .map_err(|_| "is not a URL (\"http://127.0.0.1:4318\")")?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(
                "https is not supported: send to a collector or agent on plain HTTP beside the \
                 gateway (it forwards to the vendor over TLS)",
            )
        }
        _ => return Err("must be an http:// URL (\"http://127.0.0.1:4318\")"),
    }
    let Some(authority) = uri.authority() else {
        return Err("names no host");
    };
    if authority.as_str().contains('@') {
        return Err("must not carry credentials");
    }
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    if path == "/" {
        return format!("http://{authority}/v1/traces")
            .parse()
            .map_err(|_| "is not a URL");
    }
    Ok(uri)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_gets_the_traces_path_unless_it_has_one() {
        let url = |s: &str| traces_url(s).map(|u| u.to_string());
        assert_eq!(
            url("http://127.0.0.1:4318").as_deref(),
            Ok("http://127.0.0.1:4318/v1/traces")
        );
        assert_eq!(
            url("http://collector:4318/").as_deref(),
            Ok("http://collector:4318/v1/traces")
        );
        assert_eq!(
            url("http://collector:4318/otlp/v1/traces").as_deref(),
            Ok("http://collector:4318/otlp/v1/traces")
        );
        assert!(url("https://collector:4318").is_err());
        assert!(url("collector:4318").is_err());
        assert!(url("http://user:secret@collector:4318").is_err());
        assert!(url("not a url").is_err());
    }

    #[test]
    fn bad_values_name_their_key() {
        let check = |change: fn(&mut TracingConfig)| {
            let mut c = TracingConfig::default();
            change(&mut c);
            match c.validate() {
                Err(ConfigError::Invalid { key, .. }) => key,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(check(|c| c.sample_ratio = 1.5), "tracing.sample_ratio");
        assert_eq!(check(|c| c.sample_ratio = f64::NAN), "tracing.sample_ratio");
        assert_eq!(
            check(|c| c.max_queued_spans = 0),
            "tracing.max_queued_spans"
        );
        assert_eq!(check(|c| c.service_name.clear()), "tracing.service_name");
        assert_eq!(
            check(|c| c.export_timeout = Duration::ZERO),
            "tracing.export_timeout"
        );
        assert_eq!(
            check(|c| c.otlp_endpoint = Some("ftp://x".into())),
            "tracing.otlp_endpoint"
        );
        assert!(TracingConfig::default().validate().is_ok());
    }
}
