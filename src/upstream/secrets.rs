//! An upstream's own secrets (its header values, the user and password of its URL and their Basic
//! form, the key-carrying segments of its paths, the values of their queries), and scrubbing them
//! from what the node answers before any of it leaves snowgate.
//!
//! Why: a provider's JSON-RPC error may echo the request it refused (its URL with the key in the
//! path, its `Authorization` header), and such an error is data passed through to a public
//! client. Each secret found in a node's error answer is replaced by [`MARKER`]; the answer stays
//! valid JSON with the node's layout wherever nothing was found.
//!
//! What is scanned: the **error** answers of upstreams that have secrets, and nothing else.
//! Echoes come from errors ("forbidden: POST /v1/KEY/ext/bc/P"); a result is typed data a node
//! computed (a height, a block, validators), never its request line or headers, and results are
//! the large answers (megabytes of blocks) that every call and the cache carry, so scanning them
//! would cost every call of such an upstream for an echo no provider makes. The version string a
//! node reports (shown on `/ext/health` and in a metric label) is scrubbed too: it is short.
//!
//! The cost where it matters: an upstream without secrets (a node of one's own) costs one
//! `is_empty`; an error answer with none of them present costs one `memmem` pass per form over
//! the answer, plus, when the answer holds a backslash, one parse of it (a secret can hide
//! behind JSON escapes, `\/` or `\u0070`): error answers are a few hundred bytes.
//!
//! Each secret is looked for in several forms: as configured, percent-encoded (upper- and
//! lower-case hex), percent-decoded and in unpadded base64 (standard and URL-safe: a Basic
//! header echoed without its `=`), each replaced where it stands. Then, since a secret can be
//! echoed in encodings no list of forms covers (a partial percent-encoding such as JavaScript's
//! `encodeURIComponent` or Go's `url.PathEscape` make, a double one, `%50` for `P`, an HTML
//! character reference, a zero-width space inside it, another letter case), each string is also
//! compared once its disguises are undone ([`unmasked`]); a string that holds a secret only that
//! way is replaced whole. Inside JSON the text of each string is compared after its escapes are
//! read, so no escaping hides a secret.
//! Values shorter than [`MIN_LEN`] bytes are not secrets worth the name and would garble ordinary
//! text (`x-region: eu`); path segments count only when they look like a key ([`key_like`]), so
//! `v1` or `avalanche-mainnet` stay.

use std::borrow::Cow;

use memchr::memmem;

use crate::config::upstream::BaseUrl;
use crate::config::UpstreamConfig;
use crate::jsonrpc::Json;

/// What replaces each secret.
pub(crate) const MARKER: &str = "[redacted]";

/// The shortest value treated as a secret.
pub(crate) const MIN_LEN: usize = 4;

/// The error object put in place of an error answer that holds a secret but cannot be rewritten
/// (nested deeper than snowgate builds trees): the node's usual application error code.
const UNREADABLE: &[u8] = br#"{"code":-32000,"message":"[redacted]","data":null}"#;

/// One upstream's secrets, in every form they are looked for.
#[derive(Default)]
pub(crate) struct Secrets {
    /// Longest first: a form containing a shorter one is replaced whole.
    forms: Vec<memmem::Finder<'static>>,
    /// Each secret as [`unmasked`] reads it, to find in text read the same way.
    unmasked: Vec<memmem::Finder<'static>>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} forms, not shown)", self.forms.len())
    }
}

impl Secrets {
    /// The secrets `values` (each at least [`MIN_LEN`] bytes; shorter ones are dropped), in their
    /// configured, percent-encoded and percent-decoded forms.
    pub(crate) fn new(values: impl IntoIterator<Item = String>) -> Secrets {
        use base64::Engine as _;
        let mut forms: Vec<String> = Vec::new();
        let mut unmasked_forms: Vec<String> = Vec::new();
        for value in values {
            if value.len() < MIN_LEN {
                continue;
            }
            let mut add = |form: String| {
                if form.len() >= MIN_LEN && !forms.contains(&form) {
                    forms.push(form);
                }
            };
            add(percent_encode(&value, false));
            add(percent_encode(&value, true));
            add(base64::engine::general_purpose::STANDARD_NO_PAD.encode(&value));
            add(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&value));
            let decoded = percent_decode(&value);
            for plain in decoded.iter().chain([&value]) {
                let form = unmasked(plain);
                if form.len() >= MIN_LEN && !unmasked_forms.contains(&form) {
                    unmasked_forms.push(form);
                }
            }
            if let Some(decoded) = decoded {
                add(decoded);
            }
            add(value);
        }
        forms.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        let finders = |forms: Vec<String>| {
            forms
                .into_iter()
                .map(|f| memmem::Finder::new(f.as_bytes()).into_owned())
                .collect()
        };
        Secrets {
            forms: finders(forms),
            unmasked: finders(unmasked_forms),
        }
    }

    /// The secrets of the upstream configured by `config` (its URL read as `base`, its headers
    /// expanded as `headers`): every header value (and each key-like word of one, the token of
    /// `Bearer TOKEN`), the URL's user, password, both joined and their Basic form, the key-like
    /// segments of its path prefix and of its own API paths, and the values of those paths'
    /// queries.
    pub(crate) fn of_upstream(
        config: &UpstreamConfig,
        base: &BaseUrl,
        headers: &[(http::HeaderName, http::HeaderValue)],
    ) -> Secrets {
        let mut values = Vec::new();
        for (_, value) in headers {
            let text = String::from_utf8_lossy(value.as_bytes()).into_owned();
            values.extend(
                text.split_whitespace()
                    .filter(|w| key_like(w))
                    .map(String::from),
            );
            values.push(text);
        }
        if let Some(credentials) = &base.credentials {
            use base64::Engine as _;
            values.push(base64::engine::general_purpose::STANDARD.encode(credentials));
            let (user, password) = credentials.split_once(':').unwrap_or((credentials, ""));
            values.extend([user, password, credentials].map(String::from));
            // As typed in the URL (its own escapes).
            if let Some(raw) = config
                .url
                .parse::<http::Uri>()
                .ok()
                .and_then(|u| Some(u.authority()?.as_str().rsplit_once('@')?.0.to_string()))
            {
                let (user, password) = raw.split_once(':').unwrap_or((&raw, ""));
                values.extend([user, password, &raw].map(String::from));
            }
        }
        let paths = [
            Some(base.prefix.as_str()),
            config.info_path.as_deref(),
            config.platform_path.as_deref(),
        ];
        for path in paths.into_iter().flatten() {
            let (path, query) = path.split_once('?').unwrap_or((path, ""));
            values.extend(path.split('/').filter(|s| key_like(s)).map(String::from));
            for pair in query.split('&') {
                let value = pair.split_once('=').map_or(pair, |(_, v)| v);
                values.push(value.to_string());
            }
        }
        Secrets::new(values)
    }

    /// No secret to look for: the upstream's answers are passed as they are.
    pub(crate) fn is_empty(&self) -> bool {
        self.forms.is_empty()
    }

    /// Whether any form occurs in `bytes` as they are.
    fn found_in(&self, bytes: &[u8]) -> bool {
        self.forms.iter().any(|f| f.find(bytes).is_some())
    }

    /// Whether any secret occurs in `text` once its disguises are undone ([`unmasked`]).
    fn found_unmasked(&self, text: &str) -> bool {
        let text = unmasked(text);
        self.unmasked
            .iter()
            .any(|f| f.find(text.as_bytes()).is_some())
    }

    /// `text` with every secret replaced by [`MARKER`] (borrowed when none occurs); just
    /// [`MARKER`] when a secret is still there in a disguise (see the module doc).
    pub(crate) fn scrub_text<'t>(&self, text: &'t str) -> Cow<'t, str> {
        if !self.found_in(text.as_bytes()) {
            if self.found_unmasked(text) {
                return Cow::Owned(MARKER.to_string());
            }
            return Cow::Borrowed(text);
        }
        let mut out = text.to_string();
        for form in &self.forms {
            // The forms are UTF-8 (built from `String`s).
            let needle = String::from_utf8_lossy(form.needle()).into_owned();
            if out.contains(&needle) {
                out = out.replace(&needle, MARKER);
            }
        }
        if self.found_unmasked(&out) {
            return Cow::Owned(MARKER.to_string());
        }
        Cow::Owned(out)
    }

    /// A node's JSON-RPC error object (`payload`, one whole JSON value) with every secret in its
    /// strings, its member names and its numbers replaced by [`MARKER`] (a number holding one
    /// becomes the string `"[redacted]"`), re-encoded as a node encodes JSON; `None` when nothing
    /// needed changing (the node's bytes stand). See the module doc for the cost.
    pub(crate) fn scrub_error(&self, payload: &[u8]) -> Option<Vec<u8>> {
        if self.is_empty()
            || (memchr::memchr(b'\\', payload).is_none()
                && !self.found_in(payload)
                && !self.found_unmasked(&String::from_utf8_lossy(payload)))
        {
            return None;
        }
        let Ok(mut value) = Json::parse(payload) else {
            return Some(UNREADABLE.to_vec());
        };
        if !self.scrub_value(&mut value) {
            return None;
        }
        let mut out = String::with_capacity(payload.len());
        value.encode_into(&mut out);
        Some(out.into_bytes())
    }

    /// Scrubs every string, member name and number of `value` in place; whether any changed.
    fn scrub_value(&self, value: &mut Json) -> bool {
        match value {
            Json::Null | Json::Bool(_) => false,
            Json::Number(n) => {
                let found = self.found_in(n.as_bytes());
                if found {
                    *value = Json::String(MARKER.to_string());
                }
                found
            }
            Json::String(s) => self.scrub_string(s),
            Json::Array(items) => items
                .iter_mut()
                .fold(false, |changed, item| self.scrub_value(item) | changed),
            Json::Object(members) => members.iter_mut().fold(false, |changed, (k, v)| {
                let key = self.scrub_string(k);
                self.scrub_value(v) | key | changed
            }),
        }
    }

    fn scrub_string(&self, s: &mut String) -> bool {
        match self.scrub_text(s) {
            Cow::Borrowed(_) => false,
            Cow::Owned(clean) => {
                *s = clean;
                true
            }
        }
    }
}

/// Whether a path segment or a header word looks like a key rather than a word: at least 8 bytes,
/// and a digit or an upper-case letter in it, or at least 20 bytes (`pk-7Gx…`, a UUID, 32 hex
/// digits; not `v1`, `rpc`, `mainnet` or `avalanche-mainnet`).
pub(crate) fn key_like(s: &str) -> bool {
    s.len() >= 20
        || (s.len() >= 8
            && s.bytes()
                .any(|b| b.is_ascii_digit() || b.is_ascii_uppercase()))
}

/// `s` with every byte outside RFC 3986's unreserved set as `%XX` (`lower`: lower-case hex).
fn percent_encode(s: &str, lower: bool) -> String {
    let hex: &[u8; 16] = if lower {
        b"0123456789abcdef"
    } else {
        b"0123456789ABCDEF"
    };
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(hex[usize::from(b >> 4)]));
            out.push(char::from(hex[usize::from(b & 15)]));
        }
    }
    out
}

/// `text` as a secret hidden in it reads once its disguises are undone: `%XX` escapes read, again
/// and again (a double encoding; at most four rounds), HTML character references read (`&#x2F;`,
/// `&#47;`, `&sol;` and the like), invisible characters dropped (zero-width spaces and joiners,
/// the word joiner, the byte-order mark, the soft hyphen), ASCII letters lower-cased.
fn unmasked(text: &str) -> String {
    let mut text = text.to_string();
    for _ in 0..4 {
        match percent_decode_lossy(&text) {
            Some(decoded) if decoded != text => text = decoded,
            _ => break,
        }
    }
    let text = html_unescape(&text);
    text.chars()
        .filter(|c| {
            !matches!(
                c,
                '\u{200B}' | '\u{200C}' | '\u{200D}' | '\u{2060}' | '\u{FEFF}' | '\u{00AD}'
            )
        })
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// `s` with its `%XX` escapes read (bytes that make no UTF-8 replaced), when it has any.
fn percent_decode_lossy(s: &str) -> Option<String> {
    if !s.contains('%') {
        return None;
    }
    Some(String::from_utf8_lossy(&percent_bytes(s)).into_owned())
}

/// `s` with its HTML character references read: numeric ones (`&#47;`, `&#x2F;`) and the named
/// ones a URL or a header value would need (`&amp;` `&lt;` `&gt;` `&quot;` `&apos;` `&sol;`
/// `&colon;` `&equals;` `&plus;` `&commat;` `&percnt;` `&quest;` `&num;`).
fn html_unescape(s: &str) -> String {
    if !s.contains('&') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let read = rest[1..]
            .find(';')
            .filter(|&end| end <= 10)
            .and_then(|end| {
                let name = &rest[1..=end];
                let c = match name {
                    "amp" => Some('&'),
                    "lt" => Some('<'),
                    "gt" => Some('>'),
                    "quot" => Some('"'),
                    "apos" => Some('\''),
                    "sol" => Some('/'),
                    "colon" => Some(':'),
                    "equals" => Some('='),
                    "plus" => Some('+'),
                    "commat" => Some('@'),
                    "percnt" => Some('%'),
                    "quest" => Some('?'),
                    "num" => Some('#'),
                    _ => {
                        let number = name.strip_prefix('#')?;
                        let code = match number.strip_prefix(['x', 'X']) {
                            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                            None => number.parse().ok()?,
                        };
                        char::from_u32(code)
                    }
                }?;
                Some((c, end + 2))
            });
        match read {
            Some((c, len)) => {
                out.push(c);
                rest = &rest[len..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The bytes of `s` with its `%XX` escapes read.
fn percent_bytes(s: &str) -> Vec<u8> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let digit = |j: usize| bytes.get(j).and_then(|&b| char::from(b).to_digit(16));
        match (bytes[i], digit(i + 1), digit(i + 2)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// `s` with its `%XX` escapes read, when it has any and they make UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    if !s.contains('%') {
        return None;
    }
    String::from_utf8(percent_bytes(s)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "pk-SECRET-key-7731";

    fn secrets() -> Secrets {
        Secrets::new([KEY.to_string(), "pw@SECRET:9/x".to_string()])
    }

    fn scrub(payload: &str) -> String {
        let out = secrets().scrub_error(payload.as_bytes());
        let out = out.map_or(payload.to_string(), |b| String::from_utf8(b).unwrap());
        // Always one whole JSON value.
        assert!(
            serde_json::from_str::<serde_json::Value>(&out).is_ok(),
            "{out}"
        );
        out
    }

    #[test]
    fn an_answer_without_secrets_is_left_as_the_node_wrote_it() {
        let s = secrets();
        for payload in [
            r#"{"code":-32000,"message":"not found","data":null}"#,
            r#"{"code":-32000,"message":"rpc: can't find method \"platform.Nope\"","data":null}"#,
            r#"{"code":-32000,"message":"a \u003c b","data":{"x":[1,2.5,true]}}"#,
        ] {
            assert_eq!(s.scrub_error(payload.as_bytes()), None, "{payload}");
        }
        assert_eq!(Secrets::default().scrub_error(KEY.as_bytes()), None);
    }

    #[test]
    fn every_occurrence_in_every_form_is_replaced_and_the_json_stays_valid() {
        for (payload, kept) in [
            // Raw, in a message.
            (
                r#"{"code":-32000,"message":"denied /v1/pk-SECRET-key-7731/ext/bc/P","data":null}"#,
                "denied /v1/[redacted]/ext/bc/P",
            ),
            // `/` escaped as `\/`, and a letter as `\u0070`.
            (
                r#"{"code":1,"message":"pw@SECRET:9\/x and \u0070k-SECRET-key-7731","data":null}"#,
                "[redacted] and [redacted]",
            ),
            // Percent-encoded, both cases of hex.
            (
                r#"{"code":1,"message":"u:pw%40SECRET%3A9%2Fx@h pw%40SECRET%3a9%2fx","data":null}"#,
                "u:[redacted]@h [redacted]",
            ),
        ] {
            let out = scrub(payload);
            let v: serde_json::Value = serde_json::from_str(&out).unwrap();
            assert_eq!(v["message"], kept, "{out}");
            assert!(!out.contains("SECRET"), "{out}");
        }
        // In member names, nested values and twice in one string.
        let out = scrub(
            r#"{"code":-32000,"message":"x","data":{"pk-SECRET-key-7731":["a pk-SECRET-key-7731 b pk-SECRET-key-7731",{"k":"pw@SECRET:9/x"}]}}"#,
        );
        assert_eq!(
            out,
            r#"{"code":-32000,"message":"x","data":{"[redacted]":["a [redacted] b [redacted]",{"k":"[redacted]"}]}}"#
        );
    }

    #[test]
    fn a_secret_in_a_number_makes_it_a_string_and_the_code_survives() {
        let s = Secrets::new(["98765432".to_string()]);
        let out = s
            .scrub_error(br#"{"code":-32000,"message":"m","data":1987654321}"#)
            .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"code":-32000,"message":"m","data":"[redacted]"}"#
        );
    }

    #[test]
    fn short_values_are_not_secrets_and_paths_keep_their_words() {
        assert!(Secrets::new(["eu".to_string(), "abc".to_string()]).is_empty());
        assert!(key_like(KEY) && key_like("0123456789abcdef0123456789abcdef"));
        assert!(key_like("c0ffee12") && key_like("a-long-lowercase-token-xyz"));
        for word in ["v1", "rpc", "ext", "mainnet", "avalanche-mainnet", "Bearer"] {
            assert!(!key_like(word), "{word}");
        }
    }

    #[test]
    fn an_upstreams_secrets_are_its_headers_credentials_path_keys_and_query_values() {
        use base64::Engine as _;
        let config = UpstreamConfig {
            name: "p".into(),
            url: format!("https://acct-user:pa%3Ass@host.example/v1/{KEY}"),
            platform_path: Some("/rpc/p?apikey=qv-SECRET-44&x=1".into()),
            ..Default::default()
        };
        let base = crate::config::parse_base_url(&config.url).unwrap();
        let headers = vec![(
            http::HeaderName::from_static("authorization"),
            http::HeaderValue::from_static("Bearer tok-SECRET-9981"),
        )];
        let s = Secrets::of_upstream(&config, &base, &headers);
        let basic = base64::engine::general_purpose::STANDARD.encode("acct-user:pa:ss");
        let text = format!(
            "{KEY} tok-SECRET-9981 acct-user pa:ss pa%3Ass {basic} qv-SECRET-44 v1 rpc host.example"
        );
        assert_eq!(
            s.scrub_text(&text),
            "[redacted] [redacted] [redacted] [redacted] [redacted] [redacted] [redacted] v1 rpc host.example"
        );
        // A node of one's own has none.
        let own = UpstreamConfig {
            name: "n".into(),
            url: "http://10.0.0.5:9650".into(),
            ..Default::default()
        };
        let base = crate::config::parse_base_url(&own.url).unwrap();
        assert!(Secrets::of_upstream(&own, &base, &[]).is_empty());
    }

    #[test]
    fn a_secret_in_disguise_is_found_and_its_string_replaced_whole() {
        let s = secrets();
        for disguise in [
            "pw%40SECRET:9%2Fx",
            "pw@SECRET:9%2Fx",
            "pw%2540SECRET%253A9%252Fx",
            "%70k-SECRET-key-7731",
            "PK-secret-KEY-7731",
            "pk-SEC\u{200b}RET-key-7731",
            "pw@SECRET:9&#x2F;x",
            "pw&commat;SECRET&colon;9&#47;x",
        ] {
            assert_eq!(
                s.scrub_text(&format!("denied {disguise}")),
                MARKER,
                "{disguise}"
            );
        }
        // Unpadded base64 is a form of its own, replaced where it stands.
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD_NO_PAD.encode(KEY);
        assert_eq!(s.scrub_text(&format!("auth {b64}")), "auth [redacted]");
        // Text with no secret in any disguise stands.
        let plain = "not found: 100% of 50 &amp; pk-other-key";
        assert_eq!(s.scrub_text(plain), plain);
    }

    #[test]
    fn unmasking_reads_percent_escapes_entities_and_drops_invisible_characters() {
        assert_eq!(unmasked("A%252Fb"), "a/b");
        assert_eq!(unmasked("a&#x2F;b&#47;c&sol;d&amp;"), "a/b/c/d&");
        assert_eq!(unmasked("a\u{200b}b\u{feff}c\u{ad}d"), "abcd");
        assert_eq!(
            unmasked("100% & 50%zz &bogus; &#xZZ;"),
            "100% & 50%zz &bogus; &#xzz;"
        );
    }

    #[test]
    fn a_tree_too_deep_to_rewrite_is_replaced_whole() {
        let deep = format!(
            r#"{{"code":1,"message":"{KEY}","data":{}{}}}"#,
            "[".repeat(600),
            "]".repeat(600)
        );
        let out = secrets().scrub_error(deep.as_bytes()).unwrap();
        assert_eq!(out, UNREADABLE);
    }
}
