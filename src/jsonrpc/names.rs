//! avalanchego's method-name rules (`utils/json/codec.go` over gorilla/rpc's service map).
//!
//! The wire name is split at the first dot; if the first character after it is upper-case the call
//! fails with `method must start with a non-uppercase letter`; otherwise that character is
//! upper-cased and the result is looked up case-sensitively as `Service.Method`. So only
//! `getHeight` -> `GetHeight` is forgiven; `getheight` becomes `Getheight` and is not found.

use super::gojson::go_quote;

/// Why a method name does not resolve, with the node's exact message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupError(pub String);

/// Maps a wire method name to the Go method name a node looks up, checking it against the one
/// service registered at the path (`"info"` or `"platform"`). `has_method` answers whether the
/// service has a Go method of that (case-sensitive) name.
pub fn resolve(
    wire: &str,
    service: &str,
    has_method: impl Fn(&str) -> bool,
) -> Result<String, LookupError> {
    let mapped = map_name(wire)?;
    let parts: Vec<&str> = mapped.split('.').collect();
    if parts.len() != 2 {
        return Err(LookupError(format!(
            "rpc: service/method request ill-formed: {}",
            go_quote(&mapped)
        )));
    }
    if parts[0] != service {
        return Err(LookupError(format!(
            "rpc: can't find service {}",
            go_quote(&mapped)
        )));
    }
    if !has_method(parts[1]) {
        return Err(LookupError(format!(
            "rpc: can't find method {}",
            go_quote(&mapped)
        )));
    }
    Ok(parts[1].to_string())
}

/// avalanchego's `request.Method()`: upper-cases the first rune after the first dot.
fn map_name(wire: &str) -> Result<String, LookupError> {
    let Some((class, function)) = wire.split_once('.') else {
        return Ok(wire.to_string());
    };
    let mut chars = function.chars();
    let Some(first) = chars.next() else {
        return Ok(wire.to_string());
    };
    if first.is_uppercase() {
        return Err(LookupError(
            "method must start with a non-uppercase letter".into(),
        ));
    }
    let upper: String = first.to_uppercase().collect();
    Ok(format!("{class}.{upper}{}", chars.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(wire: &str) -> Result<String, String> {
        resolve(wire, "platform", |m| m == "GetHeight").map_err(|e| e.0)
    }

    #[test]
    fn catalog_rows() {
        assert_eq!(lookup("platform.getHeight"), Ok("GetHeight".into()));
        assert_eq!(
            lookup("platform.nope"),
            Err("rpc: can't find method \"platform.Nope\"".into())
        );
        assert_eq!(
            lookup("platform.getheight"),
            Err("rpc: can't find method \"platform.Getheight\"".into())
        );
        assert_eq!(
            lookup("platform.GetHeight"),
            Err("method must start with a non-uppercase letter".into())
        );
        assert_eq!(
            lookup("Platform.getHeight"),
            Err("rpc: can't find service \"Platform.GetHeight\"".into())
        );
        assert_eq!(
            lookup("getHeight"),
            Err("rpc: service/method request ill-formed: \"getHeight\"".into())
        );
        assert_eq!(
            lookup(""),
            Err("rpc: service/method request ill-formed: \"\"".into())
        );
        assert_eq!(
            lookup("platform.a.b"),
            Err("rpc: service/method request ill-formed: \"platform.A.b\"".into())
        );
        assert_eq!(
            lookup("platform."),
            Err("rpc: can't find method \"platform.\"".into())
        );
    }
}
