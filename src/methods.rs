//! The method registry: every method of the node API spec, with the facts the request path needs
//! about it — which path family serves it, who may call it, how its answers may be cached, what it
//! costs against a rate quota, and which param names a block height.
//!
//! This is data, not code spread over the layers: the policy, cache and rate-limit layers all read
//! one [`MethodSpec`]. Operators add methods and change access, cache class, cost, how far back
//! a height may be (`max_depth`) or the node releases that serve a method under
//! `[methods."name"]` in the config.
//!
//! Each method also carries the avalanchego releases that serve it ([`Served`], the [`VERSIONS`]
//! table): the pool sends a call only to nodes whose release serves its method.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Deserialize;

pub use crate::jsonrpc::release::{BadVersion, NodeVersion, Served};

/// Which API a method belongs to, and so which paths serve it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// `POST /ext/info`.
    Info,
    /// `POST /ext/bc/P` and its four aliases.
    Platform,
    /// `POST /ext/bc/P/proposervm`: the P-chain's ProposerVM service (avalanchego v1.14.0+).
    #[serde(rename = "proposervm")]
    ProposerVm,
    /// `POST /ext/health`: the node's health API, which the gateway answers itself
    /// ([`crate::health`]).
    Health,
}

impl Family {
    /// The family of a JSON-RPC service name (`info`, `platform`).
    pub fn for_service(service: &str) -> Option<Family> {
        match service {
            "info" => Some(Family::Info),
            "platform" => Some(Family::Platform),
            "proposervm" => Some(Family::ProposerVm),
            "health" => Some(Family::Health),
            _ => None,
        }
    }

    /// The path a node serves this family at (the canonical one forwarded to).
    pub fn canonical_path(self) -> &'static str {
        match self {
            Family::Info => "/ext/info",
            Family::Platform => "/ext/bc/P",
            Family::ProposerVm => PROPOSERVM_PATH,
            Family::Health => HEALTH_PATH,
        }
    }

    /// The JSON-RPC service name of its methods (`info`, `platform`, ...).
    pub fn service(self) -> &'static str {
        match self {
            Family::Info => "info",
            Family::Platform => "platform",
            Family::ProposerVm => "proposervm",
            Family::Health => "health",
        }
    }

    /// Whether the gateway answers this API itself, as a node's own service would (the health
    /// API): its calls are never sent to a node, so a body holds one call (a batch is the node's
    /// -32700), a method it lacks gets the node's words, and no re-encoding bound applies.
    pub fn is_local(self) -> bool {
        self == Family::Health
    }
}

pub use crate::jsonrpc::http::{HEALTH_PATH, INFO_PATH, PROPOSERVM_PATH, P_CHAIN_PATHS};

/// Who may call a method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    /// Anyone.
    Public,
    /// Answers describe one node (its ID, IP, VMs): admin callers only, usually pinned.
    NodeSpecific,
    /// Keystore methods carrying a username and password: admin callers only, params never logged.
    Keystore,
    /// Refused to everyone.
    Disabled,
}

impl Access {
    /// Why a public caller is refused, for the error message.
    pub fn refusal(self) -> Option<&'static str> {
        match self {
            Access::Public => None,
            Access::NodeSpecific => Some("node-specific methods need an admin key"),
            Access::Keystore => Some("keystore methods need an admin key"),
            Access::Disabled => Some("the method is disabled on this gateway"),
        }
    }
}

/// How answers of a method may be cached (used by the cache layer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheClass {
    /// Final once observed: kept until evicted (some only under a condition on the answer).
    Immutable,
    /// Valid while the pool's best height stays the same (with a short time cap).
    Head,
    /// Constant for a network and node version: long TTL.
    Network,
    /// Node-local or time-based: very short TTL.
    Volatile,
    /// Never cached.
    Never,
}

/// Everything the request path knows about one method.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MethodSpec {
    /// The exact wire name, e.g. `platform.getHeight`.
    pub name: String,
    pub family: Family,
    pub access: Access,
    pub cache: CacheClass,
    /// Rate-limit cost in quota units.
    pub cost: u32,
    /// The param that names a block height, for height-aware routing.
    pub height_param: Option<String>,
    /// How many blocks behind the pool's best height a call's height may be (`None`: any);
    /// deeper calls are refused by the policy layer. Only with a `height_param`.
    pub max_depth: Option<u64>,
    /// Has a side effect: sent again to another node only when the first attempt never left.
    pub side_effect: bool,
    /// Its answer depends on the node's release, not only on the network (`info.upgrades`: a
    /// release schedules the upgrades it knows of): cached per release, never across releases.
    pub by_release: bool,
    /// Time one attempt on one node may take, instead of `upstream.request_timeout` (still
    /// within `limits.request_deadline`): for methods known to be slow.
    pub timeout: Option<std::time::Duration>,
    /// The node releases that serve it: a call goes only to a node whose release does.
    pub served: Served,
    /// Position in the registry (sorted by name): indexes per-method tables such as metrics.
    pub index: usize,
}

/// A `[methods."name"]` table: adds a method or overrides fields of a built-in one.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MethodOverride {
    pub family: Option<Family>,
    pub access: Option<Access>,
    pub cache: Option<CacheClass>,
    pub cost: Option<u32>,
    pub height_param: Option<String>,
    /// `max_depth = 1000`: calls whose height is more than this many blocks behind the pool's
    /// best height are refused (only on a method with a `height_param`).
    pub max_depth: Option<u64>,
    pub side_effect: Option<bool>,
    /// `timeout = "30s"`: this method's attempts may take this long instead of
    /// `upstream.request_timeout`.
    #[serde(default, with = "crate::duration::option")]
    pub timeout: Option<std::time::Duration>,
    /// `since = "1.14.0"`: the first node release that serves the method (`"v1.14.0"` too).
    pub since: Option<String>,
    /// `removed_in = "1.15.0"`: the first node release that no longer serves it.
    pub removed_in: Option<String>,
}

impl MethodOverride {
    /// The `since` and `removed_in` settings, each parsed (`None` when not set); the error
    /// names the field.
    pub fn versions(&self) -> Result<Served, (&'static str, BadVersion)> {
        let parse = |field: &'static str, v: &Option<String>| {
            v.as_deref()
                .map(str::parse::<NodeVersion>)
                .transpose()
                .map_err(|e| (field, e))
        };
        Ok(Served {
            since: parse("since", &self.since)?,
            removed_in: parse("removed_in", &self.removed_in)?,
        })
    }
}

/// Methods whose params carry secrets: never public, never logged.
pub fn is_secret(name: &str) -> bool {
    matches!(name, "platform.exportKey" | "platform.listAddresses")
}

use Access::{Keystore, NodeSpecific, Public};
use CacheClass::{Head, Immutable, Network, Never, Volatile};

/// (name, access, cache class, cost, height param)
type Row = (&'static str, Access, CacheClass, u32, Option<&'static str>);

/// The built-in table: every `info.*` and `platform.*` method a node serves, and the node's
/// health API (answered by the gateway itself, never cached).
const BUILTIN: &[Row] = &[
    ("health.health", Public, Never, 1, None),
    ("health.liveness", Public, Never, 1, None),
    ("health.readiness", Public, Never, 1, None),
    ("info.acps", Public, Volatile, 1, None),
    ("info.isBootstrapped", Public, Volatile, 1, None),
    ("info.getBlockchainID", Public, Network, 1, None),
    ("info.getNetworkID", Public, Immutable, 1, None),
    ("info.getNetworkName", Public, Immutable, 1, None),
    ("info.getNodeID", NodeSpecific, Never, 1, None),
    ("info.getNodeIP", NodeSpecific, Never, 1, None),
    ("info.getNodeVersion", Public, Volatile, 1, None),
    ("info.getTxFee", Public, Network, 1, None),
    ("info.getVMs", NodeSpecific, Never, 1, None),
    ("info.peers", Public, Volatile, 2, None),
    ("info.uptime", Public, Volatile, 1, None),
    ("info.upgrades", Public, Network, 1, None),
    ("platform.exportKey", Keystore, Never, 1, None),
    ("platform.listAddresses", Keystore, Never, 1, None),
    ("platform.getBalance", Public, Head, 5, None),
    ("platform.getBlock", Public, Immutable, 2, None),
    (
        "platform.getBlockByHeight",
        Public,
        Immutable,
        2,
        Some("height"),
    ),
    ("platform.getBlockchains", Public, Head, 2, None),
    ("platform.getBlockchainStatus", Public, Volatile, 1, None),
    ("platform.getCurrentSupply", Public, Head, 1, None),
    ("platform.getCurrentValidators", Public, Head, 10, None),
    ("platform.getFeeConfig", Public, Network, 1, None),
    ("platform.getFeeState", Public, Head, 1, None),
    ("platform.getHeight", Public, Head, 1, None),
    ("platform.getL1Validator", Public, Head, 1, None),
    ("platform.getProposedHeight", Public, Volatile, 1, None),
    (
        "platform.getAllValidatorsAt",
        Public,
        Immutable,
        10,
        Some("height"),
    ),
    ("platform.getMaxStakeAmount", Public, Head, 2, None),
    ("platform.getMinStake", Public, Head, 1, None),
    ("platform.getPendingValidators", Public, Head, 5, None),
    ("platform.getRewardUTXOs", Public, Immutable, 2, None),
    ("platform.getStake", Public, Head, 5, None),
    ("platform.getStakingAssetID", Public, Immutable, 1, None),
    ("platform.getSubnet", Public, Head, 1, None),
    ("platform.getSubnets", Public, Head, 2, None),
    ("platform.getTimestamp", Public, Head, 1, None),
    ("platform.getTotalStake", Public, Head, 1, None),
    ("platform.getTx", Public, Immutable, 2, None),
    ("platform.getTxStatus", Public, Immutable, 1, None),
    ("platform.getUTXOs", Public, Head, 10, None),
    (
        "platform.getValidatorsAt",
        Public,
        Immutable,
        5,
        Some("height"),
    ),
    ("platform.getValidatorFeeConfig", Public, Network, 1, None),
    ("platform.getValidatorFeeState", Public, Head, 1, None),
    ("platform.issueTx", Public, Never, 5, None),
    ("platform.sampleValidators", Public, Never, 2, None),
    ("platform.validatedBy", Public, Immutable, 1, None),
    ("platform.validates", Public, Head, 1, None),
    ("proposervm.getCurrentEpoch", Public, Volatile, 1, None),
    ("proposervm.getProposedHeight", Public, Volatile, 1, None),
];

const V1_11_0: Option<NodeVersion> = Some(NodeVersion::new(1, 11, 0));
const V1_11_3: Option<NodeVersion> = Some(NodeVersion::new(1, 11, 3));
const V1_11_11: Option<NodeVersion> = Some(NodeVersion::new(1, 11, 11));
const V1_11_13: Option<NodeVersion> = Some(NodeVersion::new(1, 11, 13));
const V1_12_2: Option<NodeVersion> = Some(NodeVersion::new(1, 12, 2));
const V1_14_0: Option<NodeVersion> = Some(NodeVersion::new(1, 14, 0));

/// The methods some node releases do not serve: (name, since, removed in). Every other built-in
/// method is served by every release. From avalanchego's release notes (reference §5, "Version
/// history" and "Other version markers").
pub const VERSIONS: &[(&str, Option<NodeVersion>, Option<NodeVersion>)] = &[
    ("info.upgrades", V1_11_11, None),
    // The keystore API was removed in v1.12.2.
    ("platform.exportKey", None, V1_12_2),
    ("platform.listAddresses", None, V1_12_2),
    ("platform.getAllValidatorsAt", V1_14_0, None),
    ("platform.getFeeConfig", V1_11_11, None),
    ("platform.getFeeState", V1_11_11, None),
    ("platform.getL1Validator", V1_11_13, None),
    // Removed with ACP-41 (no more pending stakers).
    ("platform.getMaxStakeAmount", None, V1_11_3),
    ("platform.getPendingValidators", None, V1_11_3),
    ("platform.getProposedHeight", V1_11_13, None),
    ("platform.getSubnet", V1_11_0, None),
    ("platform.getValidatorFeeConfig", V1_12_2, None),
    ("platform.getValidatorFeeState", V1_12_2, None),
    ("proposervm.getCurrentEpoch", V1_14_0, None),
    ("proposervm.getProposedHeight", V1_14_0, None),
];

/// The releases that serve a built-in method.
fn builtin_served(name: &str) -> Served {
    VERSIONS.iter().find(|(n, _, _)| *n == name).map_or(
        Served::ALWAYS,
        |&(_, since, removed_in)| Served { since, removed_in },
    )
}

/// The registry: method name -> spec. Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct Registry {
    methods: Arc<HashMap<String, Arc<MethodSpec>>>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::builtin()
    }
}

/// Who may call a built-in method (`None`: not built in), read from the table without building a
/// registry (the config's validation asks it of each override).
pub fn builtin_access(name: &str) -> Option<Access> {
    BUILTIN.iter().find(|row| row.0 == name).map(|row| row.1)
}

/// The names of the built-in methods.
pub fn builtin_names() -> impl Iterator<Item = &'static str> {
    BUILTIN.iter().map(|row| row.0)
}

impl Registry {
    /// The built-in table with no overrides.
    pub fn builtin() -> Registry {
        Registry::indexed(Registry::builtin_specs())
    }

    /// The built-in table's specs, before they are numbered.
    fn builtin_specs() -> HashMap<String, MethodSpec> {
        BUILTIN
            .iter()
            .filter_map(|&(name, access, cache, cost, height)| {
                let family = Family::for_service(name.split('.').next()?)?;
                Some((
                    name.to_string(),
                    MethodSpec {
                        name: name.to_string(),
                        family,
                        access,
                        cache,
                        cost,
                        height_param: height.map(str::to_string),
                        max_depth: None,
                        side_effect: name == "platform.issueTx",
                        by_release: name == "info.upgrades",
                        timeout: None,
                        served: builtin_served(name),
                        index: 0,
                    },
                ))
            })
            .collect()
    }

    /// Numbers the methods in name order and freezes the table.
    fn indexed(mut methods: HashMap<String, MethodSpec>) -> Registry {
        let mut names: Vec<String> = methods.keys().cloned().collect();
        names.sort();
        for (i, name) in names.iter().enumerate() {
            if let Some(m) = methods.get_mut(name) {
                m.index = i;
            }
        }
        Registry {
            methods: Arc::new(methods.into_iter().map(|(k, v)| (k, Arc::new(v))).collect()),
        }
    }

    /// How many methods there are (indices run from 0 to `len() - 1`).
    pub fn len(&self) -> usize {
        self.methods.len()
    }

    /// Never true: the built-in table is not empty.
    pub fn is_empty(&self) -> bool {
        self.methods.is_empty()
    }

    /// The built-in table with the config's `[methods]` applied (validated by `Config::validate`).
    /// A gateway builds it once per config, in `Config::check`, and passes it down.
    pub fn with_overrides<'a>(
        overrides: impl IntoIterator<Item = (&'a String, &'a MethodOverride)>,
    ) -> Registry {
        let mut methods = Registry::builtin_specs();
        for (name, o) in overrides {
            let service = name.split('.').next().unwrap_or_default();
            let Some(family) = o.family.or_else(|| Family::for_service(service)) else {
                continue;
            };
            let base = methods.get(name).cloned().unwrap_or(MethodSpec {
                name: name.clone(),
                family,
                access: Access::Public,
                cache: CacheClass::Never,
                cost: 1,
                height_param: None,
                max_depth: None,
                side_effect: false,
                by_release: false,
                timeout: None,
                served: Served::ALWAYS,
                index: 0,
            });
            // A bad version is refused by validation; here it leaves the release unchanged.
            let set = o.versions().unwrap_or_default();
            let spec = MethodSpec {
                family,
                access: o.access.unwrap_or(base.access),
                cache: o.cache.unwrap_or(base.cache),
                cost: o.cost.unwrap_or(base.cost),
                height_param: o.height_param.clone().or(base.height_param),
                max_depth: o.max_depth.or(base.max_depth),
                side_effect: o.side_effect.unwrap_or(base.side_effect),
                by_release: base.by_release,
                timeout: o.timeout.or(base.timeout),
                served: Served {
                    since: set.since.or(base.served.since),
                    removed_in: set.removed_in.or(base.served.removed_in),
                },
                name: name.clone(),
                index: 0,
            };
            methods.insert(name.clone(), spec);
        }
        Registry::indexed(methods)
    }

    /// The spec of a method, by its exact wire name.
    pub fn get(&self, name: &str) -> Option<&Arc<MethodSpec>> {
        self.methods.get(name)
    }

    /// Every method, sorted by name.
    pub fn all(&self) -> Vec<Arc<MethodSpec>> {
        let mut v: Vec<_> = self.methods.values().cloned().collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spec_method_is_registered_once() {
        let r = Registry::builtin();
        assert_eq!(r.all().len(), BUILTIN.len());
        assert_eq!(r.all().len(), 13 + 35 + 2 + 3);
        for name in ["info.getNodeID", "info.getNodeIP", "info.getVMs"] {
            assert_eq!(r.get(name).unwrap().access, Access::NodeSpecific);
        }
        for name in ["platform.exportKey", "platform.listAddresses"] {
            assert_eq!(r.get(name).unwrap().access, Access::Keystore);
        }
        assert_eq!(
            r.get("platform.getValidatorsAt")
                .unwrap()
                .height_param
                .as_deref(),
            Some("height")
        );
        assert!(r.get("platform.issueTx").unwrap().side_effect);
        let all = r.get("platform.getAllValidatorsAt").unwrap();
        assert_eq!(all.height_param.as_deref(), Some("height"));
        assert_eq!(
            (all.access, all.cache),
            (Access::Public, CacheClass::Immutable)
        );
        for name in ["proposervm.getProposedHeight", "proposervm.getCurrentEpoch"] {
            let m = r.get(name).unwrap();
            assert_eq!(m.family, Family::ProposerVm, "{name}");
            assert_eq!((m.access, m.cache), (Access::Public, CacheClass::Volatile));
        }
    }

    #[test]
    fn methods_carry_the_releases_that_serve_them() {
        let r = Registry::builtin();
        let served = |name: &str| r.get(name).unwrap().served;
        let v = |s: &str| Some(s.parse::<NodeVersion>().unwrap());
        assert_eq!(served("platform.getAllValidatorsAt").since, v("1.14.0"));
        assert_eq!(served("proposervm.getCurrentEpoch").since, v("1.14.0"));
        assert_eq!(served("proposervm.getProposedHeight").since, v("1.14.0"));
        for keystore in ["platform.exportKey", "platform.listAddresses"] {
            assert_eq!(served(keystore).removed_in, v("1.12.2"), "{keystore}");
        }
        for gone in [
            "platform.getPendingValidators",
            "platform.getMaxStakeAmount",
        ] {
            assert_eq!(served(gone).removed_in, v("1.11.3"), "{gone}");
        }
        assert_eq!(served("platform.getHeight"), Served::ALWAYS);
        // Every keystore method of the table is marked gone, and every row names a method.
        for m in r.all() {
            if m.access == Access::Keystore {
                assert!(m.served.removed_in.is_some(), "{}", m.name);
            }
        }
        for (name, _, _) in VERSIONS {
            assert!(r.get(name).is_some(), "{name}");
        }
        let mid = v("1.13.0");
        assert!(!served("platform.getAllValidatorsAt").serves(mid));
        assert!(served("platform.getAllValidatorsAt").serves(v("1.14.2")));
        assert!(!served("platform.exportKey").serves(mid));
    }

    #[test]
    fn overrides_change_the_releases() {
        let mut o = std::collections::BTreeMap::new();
        o.insert(
            "platform.getAllValidatorsAt".to_string(),
            MethodOverride {
                since: Some("v1.15.0".into()),
                ..Default::default()
            },
        );
        o.insert(
            "platform.getHeight".to_string(),
            MethodOverride {
                removed_in: Some("avalanchego/2.0.0".into()),
                ..Default::default()
            },
        );
        let r = Registry::with_overrides(&o);
        let all = r.get("platform.getAllValidatorsAt").unwrap().served;
        assert_eq!(all.since, Some(NodeVersion::new(1, 15, 0)));
        assert_eq!(all.removed_in, None);
        let height = r.get("platform.getHeight").unwrap().served;
        assert_eq!(height.removed_in, Some(NodeVersion::new(2, 0, 0)));
        let bad = MethodOverride {
            removed_in: Some("soon".into()),
            ..Default::default()
        };
        assert_eq!(
            bad.versions().map_err(|(field, _)| field),
            Err("removed_in")
        );
    }

    #[test]
    fn overrides_add_and_change_methods() {
        let mut o = std::collections::BTreeMap::new();
        o.insert(
            "platform.getAllValidatorsAt".to_string(),
            MethodOverride {
                height_param: Some("height".into()),
                ..Default::default()
            },
        );
        o.insert(
            "info.getVMs".to_string(),
            MethodOverride {
                access: Some(Access::Public),
                ..Default::default()
            },
        );
        let r = Registry::with_overrides(&o);
        let added = r.get("platform.getAllValidatorsAt").unwrap();
        assert_eq!(added.family, Family::Platform);
        assert_eq!(added.access, Access::Public);
        assert_eq!(r.get("info.getVMs").unwrap().access, Access::Public);
    }

    #[test]
    fn indices_are_dense_and_in_name_order() {
        let r = Registry::builtin();
        let all = r.all();
        for (i, m) in all.iter().enumerate() {
            assert_eq!(m.index, i, "{}", m.name);
        }
        assert_eq!(r.len(), all.len());
    }

    #[test]
    fn services_map_to_families_served_at_their_paths() {
        assert_eq!(Family::for_service("info"), Some(Family::Info));
        assert_eq!(Family::for_service("platform"), Some(Family::Platform));
        assert_eq!(Family::for_service("proposervm"), Some(Family::ProposerVm));
        assert_eq!(Family::for_service("avm"), None);
        assert_eq!(Family::Info.canonical_path(), INFO_PATH);
        assert!(P_CHAIN_PATHS.contains(&Family::Platform.canonical_path()));
        assert_eq!(Family::ProposerVm.canonical_path(), "/ext/bc/P/proposervm");
    }
}
