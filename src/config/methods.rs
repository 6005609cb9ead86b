//! `[methods."NAME"]`: per-method additions and overrides of the built-in registry
//! ([`crate::methods`], which owns the override type); read by the registry.

use std::collections::BTreeMap;

use super::{invalid, ConfigError};
use crate::methods::{
    builtin_access, builtin_names, is_secret, Access, CacheClass, Family, MethodOverride, Registry,
};

/// Checks every override: a method name a node serves, a family matching its service, node
/// releases written as versions with `since` before `removed_in`, a `max_depth` only where a
/// height param names a height, and no override that would make a keystore method public or a
/// node's or keystore's answer cacheable. `effective` is the
/// registry the overrides make (`Registry::with_overrides(methods)`, built once by the caller).
pub fn validate(
    methods: &BTreeMap<String, MethodOverride>,
    effective: &Registry,
) -> Result<(), ConfigError> {
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
            Some(f) if f.is_local() => {
                // The gateway answers the health API itself: it has the node's three methods
                // and no other, and what it says is live.
                if builtin_access(name).is_none() {
                    return invalid(
                        key,
                        "the health API is answered by snowgate itself: it has no other methods",
                    );
                }
                if o.cache.is_some_and(|c| c != CacheClass::Never) {
                    return invalid(
                        format!("{key}.cache"),
                        "health is never cached: cache must be \"never\"",
                    );
                }
            }
            Some(_) => {}
        }
        if o.access == Some(Access::Public) && is_secret(name) {
            return invalid(
                format!("{key}.access"),
                "keystore methods carry passwords and cannot be public",
            );
        }
        if let Err((field, e)) = o.versions() {
            return invalid(format!("{key}.{field}"), e.to_string());
        }
        if effective.get(name).is_some_and(|m| !m.served.possible()) {
            let field = if o.removed_in.is_some() {
                "removed_in"
            } else {
                "since"
            };
            return invalid(
                format!("{key}.{field}"),
                "no node release would serve the method: since must be before removed_in",
            );
        }
        if o.timeout.is_some_and(|t| t.is_zero()) {
            return invalid(format!("{key}.timeout"), "must be greater than zero");
        }
        // A depth is counted from a height the call names: without a height param there is
        // nothing to count, and the setting would silently never apply.
        if o.max_depth.is_some()
            && !effective
                .get(name)
                .is_some_and(|m| m.height_param.is_some())
        {
            return invalid(
                format!("{key}.max_depth"),
                "only a method with a height parameter (height_param) can have a max_depth",
            );
        }
        // One node's answer (its ID, IP, VMs) or a keystore's must never be served to
        // another caller, whoever the override lets call the method.
        let private = |access: Option<Access>| {
            matches!(access, Some(Access::NodeSpecific | Access::Keystore))
        };
        let cache = effective.get(name).map(|m| m.cache);
        if (private(builtin_access(name))
            || private(effective.get(name).map(|m| m.access))
            || is_secret(name))
            && cache.is_some_and(|c| c != CacheClass::Never)
        {
            return invalid(
                format!("{key}.cache"),
                "node-specific and keystore methods are never cached: cache must be \"never\"",
            );
        }
        // A name the registry does not know is a typo far more often than a new method: the
        // override would silently never apply. A new method is declared on purpose, with its
        // family and who may call it.
        if builtin_access(name).is_none() && (o.family.is_none() || o.access.is_none()) {
            let hint = match nearest(name, builtin_names()) {
                Some(known) => format!("did you mean `{known}`? "),
                None => String::new(),
            };
            return invalid(
                key,
                format!(
                    "not a method snowgate knows: {hint}(to add a new method on purpose, give \
                     both its `family` and its `access`)"
                ),
            );
        }
    }
    Ok(())
}

/// The known name closest to `name` (edit distance, case ignored), if one is close enough to be
/// what was meant: at most a third of the name's length away.
fn nearest<'a>(name: &str, known: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let wanted = name.to_ascii_lowercase();
    known
        .map(|k| (edit_distance(&wanted, &k.to_ascii_lowercase()), k))
        .filter(|(d, _)| *d <= wanted.len() / 3)
        .min()
        .map(|(_, k)| k)
}

/// Levenshtein distance over bytes (method names are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != cb))
                .min(above + 1)
                .min(row[j] + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelt_method_is_refused_with_the_name_it_meant() {
        let one = |name: &str, table: &str| {
            let o: MethodOverride = toml::from_str(table).unwrap();
            let methods = BTreeMap::from([(name.to_string(), o)]);
            validate(&methods, &Registry::with_overrides(&methods))
        };
        let e = one("platform.getHeigth", "cost = 3")
            .unwrap_err()
            .to_string();
        assert!(e.contains("methods.\"platform.getHeigth\""), "{e}");
        assert!(e.contains("did you mean `platform.getHeight`"), "{e}");
        let e = one("platform.getCurrentValidatorz", "timeout = \"3s\"").unwrap_err();
        assert!(
            e.to_string().contains("`platform.getCurrentValidators`"),
            "{e}"
        );
        // Nothing near: no guess.
        let e = one("info.somethingElseEntirely", "cost = 2").unwrap_err();
        assert!(!e.to_string().contains("did you mean"), "{e}");
        // Declared on purpose: a new method.
        one(
            "info.somethingElseEntirely",
            "family = \"info\"\naccess = \"public\"",
        )
        .unwrap();
        // Known names are overridden as before.
        one("platform.getHeight", "cost = 3").unwrap();
    }

    fn refused(name: &str, o: MethodOverride) -> String {
        let mut m = BTreeMap::new();
        m.insert(name.to_string(), o);
        match validate(&m, &Registry::with_overrides(&m)) {
            Err(ConfigError::Invalid { key, message, .. }) => format!("{key}: {message}"),
            other => panic!("{name}: {other:?}"),
        }
    }

    #[test]
    fn max_depth_needs_a_height_param() {
        let depth = |height_param: Option<&str>| MethodOverride {
            max_depth: Some(1000),
            height_param: height_param.map(str::to_string),
            ..Default::default()
        };
        let e = refused("platform.getHeight", depth(None));
        assert!(
            e.starts_with("methods.\"platform.getHeight\".max_depth: "),
            "{e}"
        );
        assert!(e.contains("height parameter"), "{e}");
        // Built in, or given by the same table.
        for (name, o) in [
            ("platform.getAllValidatorsAt", depth(None)),
            ("platform.getValidatorsAt", depth(None)),
            ("platform.getBlockByHeight", depth(None)),
            ("platform.getHeight", depth(Some("height"))),
        ] {
            let m = BTreeMap::from([(name.to_string(), o)]);
            assert!(
                validate(&m, &Registry::with_overrides(&m)).is_ok(),
                "{name}"
            );
        }
    }

    #[test]
    fn releases_must_be_versions_and_leave_some_release_serving() {
        let e = refused(
            "platform.getAllValidatorsAt",
            MethodOverride {
                since: Some("fourteen".into()),
                ..Default::default()
            },
        );
        assert!(
            e.starts_with("methods.\"platform.getAllValidatorsAt\".since: "),
            "{e}"
        );
        // The built-in removal (v1.11.3) comes before an override's `since`.
        let e = refused(
            "platform.getPendingValidators",
            MethodOverride {
                since: Some("1.12.0".into()),
                ..Default::default()
            },
        );
        assert!(
            e.starts_with("methods.\"platform.getPendingValidators\".since: "),
            "{e}"
        );
        let mut ok = BTreeMap::new();
        ok.insert(
            "proposervm.getCurrentEpoch".to_string(),
            MethodOverride {
                since: Some("v1.14.0".into()),
                removed_in: Some("1.15.0".into()),
                ..Default::default()
            },
        );
        assert!(validate(&ok, &Registry::with_overrides(&ok)).is_ok());
    }
}
