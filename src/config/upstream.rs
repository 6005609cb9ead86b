//! The nodes and how they are reached: `[[upstreams]]`, `[health]` and `[upstream]`; read by the
//! upstream pool. [`parse_base_url`] lives here so that validating a file and building the pool
//! read a node's URL the same way.

use std::time::Duration;

use http::Uri;
use serde::Deserialize;

use super::{invalid, ConfigError};

/// One `[[upstreams]]` table: a node behind the gateway, or an RPC provider's endpoint.
#[derive(Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// A short name used in metrics, logs, `/ext/health` and `X-Snowgate-Upstream`.
    pub name: String,
    /// The base URL: `http://10.0.0.5:9650`, `https://node.example` (TLS, port 443 unless
    /// given), or a provider's `https://user:pass@host/v1/KEY` (a path prefix before `/ext/...`,
    /// and Basic auth from the credentials). Never shown with its credentials or path.
    pub url: String,
    /// A PEM file of CA certificates trusted for this `https://` upstream besides the webpki
    /// roots (a private CA). Verification is never off.
    #[serde(default)]
    pub tls_ca_file: Option<std::path::PathBuf>,
    /// Extra request headers (`{ "x-api-key" = "${PROVIDER_KEY}" }`); `${VAR}` is read from the
    /// environment. Values are never shown.
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    /// The `Host` header to send instead of the URL's host and port.
    #[serde(default)]
    pub host_header: Option<String>,
    /// The info API's path instead of `{prefix}/ext/info`.
    #[serde(default)]
    pub info_path: Option<String>,
    /// The P-chain API's path instead of `{prefix}/ext/bc/P`.
    #[serde(default)]
    pub platform_path: Option<String>,
    /// `"primary"` (the default) or `"fallback"`: a fallback takes traffic only while no primary
    /// can.
    #[serde(default)]
    pub role: Role,
    /// Biases the balancer: a node of weight 2 is chosen as if it were half as loaded.
    #[serde(default = "one")]
    pub weight: u32,
    /// How often it is checked instead of `[health] interval` (`None`: that interval for a
    /// primary, [`FALLBACK_INTERVAL`] for a fallback while a primary can serve).
    #[serde(default, with = "crate::duration::option")]
    pub health_interval: Option<Duration>,
    /// The APIs it serves: both (the default), or `["platform"]` for a provider that exposes only
    /// the P-chain (checked with `platform.getHeight` alone, never sent an `info.*` call).
    #[serde(default = "both_apis")]
    pub apis: Vec<Api>,
    /// The file cordons the node: it takes no new calls until the file says otherwise (a reload
    /// applies it in place). An admin's uncordon does not lift it (see `upstream::cordons`).
    #[serde(default)]
    pub cordoned: bool,
}

fn one() -> u32 {
    1
}

fn both_apis() -> Vec<Api> {
    vec![Api::Info, Api::Platform]
}

/// A fallback's check interval while a primary can serve, when its table gives none: each
/// instance sends it two check calls a minute.
pub const FALLBACK_INTERVAL: Duration = Duration::from_secs(30);

/// `[[upstreams]] apis`: an API a node serves (the P-chain's ProposerVM service with `platform`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    Info,
    Platform,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            name: String::new(),
            url: String::new(),
            tls_ca_file: None,
            headers: Default::default(),
            host_header: None,
            info_path: None,
            platform_path: None,
            role: Role::Primary,
            weight: 1,
            health_interval: None,
            apis: both_apis(),
            cordoned: false,
        }
    }
}

impl UpstreamConfig {
    /// Whether it serves the info API (`apis` names it).
    pub fn serves_info(&self) -> bool {
        self.apis.contains(&Api::Info)
    }
}

/// `[network]`: the network every upstream must be on.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkConfig {
    /// The expected network ID (1 mainnet, 5 fuji); unset: the network most nodes report at
    /// start. A node on another network never takes traffic.
    pub id: Option<u32>,
}

/// `[[upstreams]] role`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Takes traffic whenever it can.
    #[default]
    Primary,
    /// Takes traffic only while no primary can (an RPC provider paid per call, say).
    Fallback,
}

impl std::fmt::Debug for UpstreamConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamConfig")
            .field("name", &self.name)
            .field("url", &"[not shown: may hold a key or a password]")
            .field("tls_ca_file", &self.tls_ca_file)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("host_header", &self.host_header)
            .field("info_path", &self.info_path.as_ref().map(|_| "[not shown]"))
            .field(
                "platform_path",
                &self.platform_path.as_ref().map(|_| "[not shown]"),
            )
            .field("role", &self.role)
            .field("weight", &self.weight)
            .field("health_interval", &self.health_interval)
            .field("apis", &self.apis)
            .field("cordoned", &self.cordoned)
            .finish()
    }
}

/// A node's base URL, read: where to connect, what to prefix paths with, and Basic auth.
#[derive(Clone)]
pub struct BaseUrl {
    /// `host:port` (no credentials); for `https://`, the port may be left out (443).
    pub authority: http::uri::Authority,
    /// `https://`: TLS, verified against the webpki roots and the upstream's `tls_ca_file`.
    pub tls: bool,
    /// The path before `/ext/...`, without a trailing slash (`""` for none).
    pub prefix: String,
    /// `user:password` from the URL, percent-decoded, for `Authorization: Basic`.
    pub credentials: Option<String>,
}

impl std::fmt::Debug for BaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BaseUrl")
            .field("authority", &self.authority)
            .field("tls", &self.tls)
            .field("prefix", &"[not shown]")
            .field(
                "credentials",
                &self.credentials.as_ref().map(|_| "[not shown]"),
            )
            .finish()
    }
}

/// Headers snowgate writes itself: an upstream's `headers` may not set them.
const OWN_HEADERS: &[&str] = &[
    "host",
    "content-type",
    "content-length",
    "transfer-encoding",
    "connection",
    // The trace context of each attempt (`[tracing]`): a second one would void both.
    "traceparent",
    "tracestate",
];

/// What to do instead of setting a header snowgate sets itself.
fn own_hint(name: &str) -> &'static str {
    match name.to_ascii_lowercase().as_str() {
        "host" => " (use host_header for Host)",
        "traceparent" | "tracestate" => " (each attempt carries its trace context: see [tracing])",
        _ => "",
    }
}

/// Checks a node base URL: `http://[user:pass@]host:port[/prefix]` or `https://...`, no query
/// or fragment. An `http://` port is required: an avalanchego node listens on 9650, not on HTTP's
/// 80, so a URL without one is almost surely a mistake; an `https://` URL without one means 443,
/// where a node behind a TLS proxy or a provider answers. Errors never quote the URL (it may hold
/// a key).
pub fn parse_base_url(url: &str) -> Result<BaseUrl, UrlError> {
    let uri: Uri = url.parse().map_err(|_| UrlError::NotAUrl)?;
    let tls = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        Some(other) => return Err(UrlError::Scheme(other.to_string())),
        None => return Err(UrlError::NoScheme),
    };
    let full = uri.authority().cloned().ok_or(UrlError::NoHost)?;
    let (credentials, hostport) = match full.as_str().rsplit_once('@') {
        Some((userinfo, hostport)) => (Some(percent_decode(userinfo)?), hostport),
        None => (None, full.as_str()),
    };
    let authority: http::uri::Authority = hostport.parse().map_err(|_| UrlError::BadHost)?;
    // What the pool's connections send as the Host header.
    if authority.as_str().bytes().any(|b| !b.is_ascii_graphic()) {
        return Err(UrlError::HostNotAscii);
    }
    if uri.query().is_some() {
        return Err(UrlError::Query);
    }
    let prefix = uri.path().trim_end_matches('/').to_string();
    // Every avalanchego API lives under /ext/: a base URL naming one is a mistake that would send
    // `/ext/bc/P/ext/info`.
    if prefix.split('/').any(|segment| segment == "ext") {
        return Err(UrlError::ApiPath);
    }
    match authority.port_u16() {
        None if tls => {}
        None => {
            let host = authority.host().to_string();
            return Err(UrlError::NoPort { host });
        }
        Some(0) => return Err(UrlError::PortZero),
        Some(_) => {}
    }
    Ok(BaseUrl {
        authority,
        tls,
        prefix,
        credentials,
    })
}

/// Why a node base URL cannot be used ([`parse_base_url`]); never quoting the URL (it may hold a
/// key).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("not a URL")]
    NotAUrl,
    #[error("scheme {0:?} is not supported (use http or https)")]
    Scheme(String),
    #[error("missing scheme (use http://host:port or https://host)")]
    NoScheme,
    #[error("missing host")]
    NoHost,
    #[error("invalid %-escape in the URL's credentials")]
    BadEscape,
    #[error("the URL's credentials are not UTF-8")]
    CredentialsNotUtf8,
    #[error("the host is not valid")]
    BadHost,
    #[error("the host must be printable ASCII")]
    HostNotAscii,
    #[error("a base URL takes no query (put keys in the path or in headers)")]
    Query,
    #[error("give the node's base URL, without /ext/... (snowgate adds the API paths)")]
    ApiPath,
    /// An `http://` URL without a port (the host is said, to suggest the node's).
    #[error("missing port (say http://{host}:9650)")]
    NoPort { host: String },
    #[error("port 0 is not a port a node listens on")]
    PortZero,
}

/// `%XX` escapes of a URL's user information, decoded.
fn percent_decode(s: &str) -> Result<String, UrlError> {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        if b == b'%' {
            let hex = [bytes.next(), bytes.next()];
            let digit = |d: Option<u8>| (d? as char).to_digit(16);
            match (digit(hex[0]), digit(hex[1])) {
                (Some(h), Some(l)) => out.push((h * 16 + l) as u8),
                _ => return Err(UrlError::BadEscape),
            }
        } else {
            out.push(b);
        }
    }
    String::from_utf8(out).map_err(|_| UrlError::CredentialsNotUtf8)
}

/// `${NAME}` in `value` replaced by the environment's `NAME`; the error names the variable, never
/// the value.
pub fn expand_env(value: &str) -> Result<String, EnvError> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or(EnvError::Unclosed)?;
        let name = &after[..end];
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(EnvError::BadName);
        }
        let var = std::env::var(name).map_err(|_| EnvError::Unset(name.to_string()))?;
        out.push_str(&var);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Why `${...}` in a value cannot be expanded ([`expand_env`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvError {
    #[error("an unclosed ${{ in a header value")]
    Unclosed,
    #[error("${{...}} must name an environment variable (letters, digits, _)")]
    BadName,
    /// The variable named is not set.
    #[error("environment variable {0} is not set")]
    Unset(String),
}

/// Why an upstream's extra header cannot be sent ([`UpstreamConfig::request_headers`]); names
/// the header, never its value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("{0:?} is not a header name")]
    Name(String),
    /// A header snowgate sets itself.
    #[error("{0:?} is set by snowgate{hint}", hint = own_hint(.0))]
    Own(String),
    /// Its value's `${...}` cannot be expanded.
    #[error("header {name:?}: {error}")]
    Env { name: String, error: EnvError },
    #[error("header {0:?}: not a valid header value")]
    Value(String),
}

impl UpstreamConfig {
    /// The extra headers to send, `${VAR}`s expanded, checked; the error names the header, never
    /// its value.
    pub fn request_headers(
        &self,
    ) -> Result<Vec<(http::HeaderName, http::HeaderValue)>, HeaderError> {
        self.headers
            .iter()
            .map(|(name, value)| {
                let header = http::HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| HeaderError::Name(name.clone()))?;
                if OWN_HEADERS.contains(&header.as_str()) {
                    return Err(HeaderError::Own(name.clone()));
                }
                let value = expand_env(value).map_err(|error| HeaderError::Env {
                    name: name.clone(),
                    error,
                })?;
                let value = http::HeaderValue::from_str(&value)
                    .map_err(|_| HeaderError::Value(name.clone()))?;
                Ok((header, value))
            })
            .collect()
    }

    /// The paths of the info and P-chain APIs on this upstream.
    pub fn api_paths(&self, base: &BaseUrl) -> (String, String) {
        (
            self.info_path
                .clone()
                .unwrap_or_else(|| format!("{}/ext/info", base.prefix)),
            self.platform_path
                .clone()
                .unwrap_or_else(|| format!("{}/ext/bc/P", base.prefix)),
        )
    }

    fn validate(&self, key: &str) -> Result<(), ConfigError> {
        let base = match parse_base_url(&self.url) {
            Ok(b) => b,
            Err(e) => return invalid(format!("{key}.url"), e.to_string()),
        };
        if let Err(e) = self.request_headers() {
            return invalid(format!("{key}.headers"), e.to_string());
        }
        if let Some(h) = &self.host_header {
            if h.is_empty() || h.bytes().any(|b| !b.is_ascii_graphic()) {
                return invalid(format!("{key}.host_header"), "must be printable ASCII");
            }
        }
        for (which, path) in [
            ("info_path", &self.info_path),
            ("platform_path", &self.platform_path),
        ] {
            if let Some(p) = path {
                if !p.starts_with('/') || p.bytes().any(|b| !b.is_ascii_graphic()) {
                    return invalid(
                        format!("{key}.{which}"),
                        "must be an absolute path of printable ASCII",
                    );
                }
            }
        }
        let _ = self.api_paths(&base);
        if base.tls {
            // What the certificate is verified against (and SNI): a DNS name or an IP address.
            let host = base.authority.host();
            let bare = host.trim_start_matches('[').trim_end_matches(']');
            if rustls::pki_types::ServerName::try_from(bare).is_err() {
                return invalid(
                    format!("{key}.url"),
                    "the host is not a name a TLS certificate can carry",
                );
            }
        }
        if let Some(path) = &self.tls_ca_file {
            if !base.tls {
                return invalid(
                    format!("{key}.tls_ca_file"),
                    "only for an https:// upstream (this url is http://)",
                );
            }
            if let Err(e) = read_ca_file(path) {
                return invalid(format!("{key}.tls_ca_file"), e.to_string());
            }
        }
        if !(1..=1000).contains(&self.weight) {
            return invalid(format!("{key}.weight"), "must be between 1 and 1000");
        }
        if !self.apis.contains(&Api::Platform) {
            return invalid(
                format!("{key}.apis"),
                "must include \"platform\": a node is checked and judged by its P-chain height",
            );
        }
        if self.health_interval.is_some_and(|i| i.is_zero()) {
            return invalid(
                format!("{key}.health_interval"),
                "must be greater than zero",
            );
        }
        if self.info_path.is_some() && !self.serves_info() {
            return invalid(
                format!("{key}.info_path"),
                "this upstream serves no info API (apis = [\"platform\"])",
            );
        }
        Ok(())
    }
}

/// The CA certificates of a `tls_ca_file`: every certificate of the PEM file, each checked as a
/// trust anchor. A file that cannot be read, holds no certificate or a malformed one is an error
/// (naming the file, not quoting it), so `snowgate check` refuses what the pool could not use.
pub fn read_ca_file(
    path: &std::path::Path,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, CaFileError> {
    use rustls::pki_types::pem::PemObject;
    let shown = || path.display().to_string();
    let pem = std::fs::read(path).map_err(|error| CaFileError::Read {
        shown: shown(),
        error,
    })?;
    let certs = rustls::pki_types::CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| CaFileError::NotPem {
            shown: shown(),
            error,
        })?;
    if certs.is_empty() {
        return Err(CaFileError::Empty(shown()));
    }
    let mut roots = rustls::RootCertStore::empty();
    for cert in &certs {
        roots
            .add(cert.clone())
            .map_err(|error| CaFileError::NotCa {
                shown: shown(),
                error,
            })?;
    }
    Ok(certs)
}

/// Why a `tls_ca_file` cannot be used ([`read_ca_file`]); names the file, never quotes it.
#[derive(Debug, thiserror::Error)]
pub enum CaFileError {
    #[error("cannot read {shown}: {error}")]
    Read {
        shown: String,
        error: std::io::Error,
    },
    #[error("{shown} is not a PEM file of certificates: {error}")]
    NotPem {
        shown: String,
        error: rustls::pki_types::pem::Error,
    },
    #[error("{0} holds no PEM certificate")]
    Empty(String),
    #[error("{shown}: a certificate is not a usable CA: {error}")]
    NotCa { shown: String, error: rustls::Error },
}

/// Names an upstream may not take: the node health API's checks of the gateway itself
/// (`POST /ext/health` lists one check per upstream by name beside these).
pub const RESERVED_UPSTREAM_NAMES: &[&str] = &["snowgate", "shared"];

/// Checks the `[[upstreams]]` list: names usable as labels and unique, URLs a node base URL.
pub fn validate_upstreams(upstreams: &[UpstreamConfig]) -> Result<(), ConfigError> {
    let mut names = std::collections::HashSet::new();
    for (i, up) in upstreams.iter().enumerate() {
        let key = format!("upstreams[{i}]");
        // `.` and `..` are path segments a browser resolves away (the status page's cordon URL).
        if up.name.is_empty()
            || up.name.chars().all(|c| c == '.')
            || !up
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return invalid(
                format!("{key}.name"),
                "must be non-empty, not only dots, and use only letters, digits, '-', '_' or '.'",
            );
        }
        if !names.insert(up.name.as_str()) {
            return invalid(format!("{key}.name"), "duplicate upstream name");
        }
        if RESERVED_UPSTREAM_NAMES.contains(&up.name.as_str()) {
            return invalid(
                format!("{key}.name"),
                "reserved for /ext/health's own checks (snowgate, shared)",
            );
        }
        up.validate(&key)?;
    }
    Ok(())
}

/// `[health]`: active health checks and the hysteresis that turns them into a verdict.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(from = "HealthFile")]
pub struct HealthConfig {
    /// Time between two checks of one upstream.
    pub interval: Duration,
    /// How long a check may take; when the file does not say, 500 ms or the interval if that is
    /// shorter (so `interval = "200ms"` alone is a valid section).
    pub timeout: Duration,
    /// An upstream further behind the best height in the pool than this takes no traffic.
    pub max_lag_blocks: u64,
    /// Consecutive failed checks before a healthy upstream is taken out.
    pub failure_threshold: u32,
    /// Consecutive good checks before an unhealthy upstream is taken back.
    pub recovery_threshold: u32,
    /// Real requests failing in a row (connect errors, dropped connections, non-200 statuses,
    /// invalid answers; never timeouts) before an upstream is taken out between two checks, as
    /// Envoy's consecutive-errors outlier detection. One valid answer starts the count again.
    pub passive_failures: u32,
    /// The longest a node that throttles (HTTP 429, or 503 with `Retry-After`) is left alone for:
    /// its `Retry-After`, at most this (1 s when it gives none).
    pub max_hold_off: Duration,
    /// Failures of one method in a row on one node (timeouts, 5xx, invalid answers; never the
    /// method's own JSON-RPC errors) before the node stops getting that method for
    /// `method_cooldown`, while it keeps getting the others.
    pub method_failures: u32,
    /// How long a node is not sent a method it kept failing.
    pub method_cooldown: Duration,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig::from(HealthFile::default())
    }
}

/// The check timeout when the file gives none (or the interval, if shorter).
const DEFAULT_CHECK_TIMEOUT: Duration = Duration::from_millis(500);

/// `[health]` as written: `timeout` may be left out, and then follows the interval.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct HealthFile {
    #[serde(with = "crate::duration")]
    interval: Duration,
    #[serde(with = "crate::duration::option")]
    timeout: Option<Duration>,
    max_lag_blocks: u64,
    failure_threshold: u32,
    recovery_threshold: u32,
    passive_failures: u32,
    #[serde(with = "crate::duration")]
    max_hold_off: Duration,
    method_failures: u32,
    #[serde(with = "crate::duration")]
    method_cooldown: Duration,
}

impl Default for HealthFile {
    fn default() -> Self {
        HealthFile {
            interval: Duration::from_secs(1),
            timeout: None,
            max_lag_blocks: 2,
            failure_threshold: 2,
            recovery_threshold: 2,
            passive_failures: 5,
            max_hold_off: Duration::from_secs(60),
            method_failures: 5,
            method_cooldown: Duration::from_secs(30),
        }
    }
}

impl From<HealthFile> for HealthConfig {
    fn from(file: HealthFile) -> HealthConfig {
        HealthConfig {
            interval: file.interval,
            timeout: file
                .timeout
                .unwrap_or(DEFAULT_CHECK_TIMEOUT.min(file.interval)),
            max_lag_blocks: file.max_lag_blocks,
            failure_threshold: file.failure_threshold,
            recovery_threshold: file.recovery_threshold,
            passive_failures: file.passive_failures,
            max_hold_off: file.max_hold_off,
            method_failures: file.method_failures,
            method_cooldown: file.method_cooldown,
        }
    }
}

impl HealthConfig {
    /// Checks `[health]`; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.interval.is_zero() {
            return invalid("health.interval", "must be greater than zero");
        }
        if self.timeout.is_zero() {
            return invalid("health.timeout", "must be greater than zero");
        }
        // A node's checks run one after another: a check allowed to outlast the interval would
        // stretch it, and a dead node would be judged later than `interval` promises.
        if self.timeout > self.interval {
            return invalid("health.timeout", "must be at most health.interval");
        }
        if self.failure_threshold == 0 {
            return invalid("health.failure_threshold", "must be at least 1");
        }
        if self.recovery_threshold == 0 {
            return invalid("health.recovery_threshold", "must be at least 1");
        }
        if self.passive_failures == 0 {
            return invalid("health.passive_failures", "must be at least 1");
        }
        if self.max_hold_off < Duration::from_secs(1) {
            return invalid("health.max_hold_off", "must be at least 1s");
        }
        if self.method_failures == 0 {
            return invalid("health.method_failures", "must be at least 1");
        }
        if self.method_cooldown.is_zero() {
            return invalid("health.method_cooldown", "must be greater than zero");
        }
        Ok(())
    }
}

/// `[upstream]`: how requests are forwarded.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ForwardConfig {
    /// Time allowed to open a TCP connection to a node.
    #[serde(with = "crate::duration")]
    pub connect_timeout: Duration,
    /// Time allowed for one attempt on one node.
    #[serde(with = "crate::duration")]
    pub request_timeout: Duration,
    /// Attempts per request (the first one included).
    pub max_attempts: u32,
    /// Idle keep-alive connections kept per node.
    pub pool_max_idle: usize,
    /// Requests in flight to one node; more wait (within the request deadline, then 503).
    pub max_concurrency: usize,
    /// Hedged reads: when the first attempt of a read (not a side-effect method) has not
    /// answered after this long, a second goes to another node and the first answer wins (the
    /// other attempt is cancelled). `None`: off.
    #[serde(with = "crate::duration::option")]
    pub hedge_after: Option<Duration>,
    /// The most hedges may be, as a share of calls (a budget refilled by each call).
    pub hedge_max_ratio: f64,
}

impl Default for ForwardConfig {
    fn default() -> Self {
        ForwardConfig {
            connect_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(5),
            max_attempts: 3,
            pool_max_idle: 256,
            max_concurrency: 512,
            hedge_after: None,
            hedge_max_ratio: 0.1,
        }
    }
}

impl ForwardConfig {
    /// Checks `[upstream]`; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_attempts == 0 {
            return invalid("upstream.max_attempts", "must be at least 1");
        }
        if self.request_timeout.is_zero() {
            return invalid("upstream.request_timeout", "must be greater than zero");
        }
        if self.connect_timeout.is_zero() {
            return invalid("upstream.connect_timeout", "must be greater than zero");
        }
        if self.max_concurrency == 0 {
            return invalid("upstream.max_concurrency", "must be at least 1");
        }
        if let Some(after) = self.hedge_after {
            if after.is_zero() || after >= self.request_timeout {
                return invalid(
                    "upstream.hedge_after",
                    "must be greater than zero and less than upstream.request_timeout",
                );
            }
        }
        if !(0.0..=1.0).contains(&self.hedge_max_ratio) {
            return invalid("upstream.hedge_max_ratio", "must be between 0 and 1");
        }
        // Each node's slots are a semaphore, which holds at most this many.
        if self.max_concurrency > tokio::sync::Semaphore::MAX_PERMITS {
            return invalid(
                "upstream.max_concurrency",
                format!("must be at most {}", tokio::sync::Semaphore::MAX_PERMITS),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls() {
        assert!(parse_base_url("http://10.0.0.5:9650").is_ok());
        assert!(parse_base_url("http://10.0.0.5:9650/").is_ok());
        // TLS: the port defaults to 443 (kept out of the authority, so Host is the bare name).
        let b = parse_base_url("https://node.example/v1/KEY").unwrap();
        assert!(b.tls && b.authority.port_u16().is_none());
        assert!(parse_base_url("https://x:1").unwrap().tls);
        assert!(!parse_base_url("http://x:1").unwrap().tls);
        assert!(parse_base_url("ftp://x:1").is_err());
        assert!(parse_base_url("https://x:0").is_err());
        assert!(parse_base_url("http://x:1/ext/bc/P").is_err());
        assert!(parse_base_url("10.0.0.5:9650").is_err());
        assert!(parse_base_url("http://x:1/ext").is_err());
        // A provider's URL: credentials and a path prefix.
        let b = parse_base_url("http://u:p%40ss@x:1/v1/KEY/").unwrap();
        assert_eq!(b.authority.as_str(), "x:1");
        assert_eq!(b.prefix, "/v1/KEY");
        assert_eq!(b.credentials.as_deref(), Some("u:p@ss"));
        assert!(!format!("{b:?}").contains("KEY") && !format!("{b:?}").contains("p@ss"));
        assert!(parse_base_url("http://x:1/v1?key=1").is_err());
        assert!(parse_base_url("http://[::1]:9650").is_ok());
        for no_port in [
            "http://10.0.0.5",
            "http://10.0.0.5/",
            "http://node-a:",
            "http://[::1]",
        ] {
            let e = parse_base_url(no_port).unwrap_err();
            assert!(matches!(e, UrlError::NoPort { .. }), "{no_port}: {e}");
            assert!(e.to_string().contains("missing port"), "{no_port}: {e}");
        }
        assert!(parse_base_url("http://x:0").is_err());
    }
}
