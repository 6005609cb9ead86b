//! `[methods."NAME"]`: per-method additions and overrides of the built-in registry
//! ([`crate::methods`], which owns the override type); read by the registry.

use std::collections::BTreeMap;

use super::{invalid, ConfigError};
use crate::methods::{is_secret, Access, CacheClass, Family, MethodOverride, Registry};

/// Checks every override: a method name a node serves, a family matching its service, and no
/// override that would make a keystore method public or a node's or keystore's answer cacheable.
pub fn validate(methods: &BTreeMap<String, MethodOverride>) -> Result<(), ConfigError> {
    let builtin = Registry::builtin();
    let effective = Registry::with_overrides(methods);
    for (name, o) in methods {
        let key = format!("methods.\"{name}\"");
        let Some((service, rest)) = name.split_once('.') else {
            return invalid(key, "a method name is `service.method`");
        };
        if rest.is_empty() || rest.contains('.') || rest.starts_with(char::is_uppercase) {
            return invalid(key, "not a method name a node serves");
        }
        let family = o.family.or_else(|| Family::for_service(service));
        match family {
            None => return invalid(format!("{key}.family"), "unknown service: set family"),
            Some(f) if Family::for_service(service) != Some(f) => {
                return invalid(
                    format!("{key}.family"),
                    "does not match the method's service",
                )
            }
            Some(_) => {}
        }
        if o.access == Some(Access::Public) && is_secret(name) {
            return invalid(
                format!("{key}.access"),
                "keystore methods carry passwords and cannot be public",
            );
        }
        if o.timeout.is_some_and(|t| t.is_zero()) {
            return invalid(format!("{key}.timeout"), "must be greater than zero");
        }
        // One node's answer (its ID, IP, VMs) or a keystore's must never be served to
        // another caller, whoever the override lets call the method.
        let private = |access: Option<Access>| {
            matches!(access, Some(Access::NodeSpecific | Access::Keystore))
        };
        let cache = effective.get(name).map(|m| m.cache);
        if (private(builtin.get(name).map(|m| m.access))
            || private(effective.get(name).map(|m| m.access))
            || is_secret(name))
            && cache.is_some_and(|c| c != CacheClass::Never)
        {
            return invalid(
                format!("{key}.cache"),
                "node-specific and keystore methods are never cached: cache must be \"never\"",
            );
        }
    }
    Ok(())
}
