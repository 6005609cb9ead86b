//! The simulated chain and every `info.*` / `platform.*` method over it.
//!
//! One [`Chain`] is shared by the devnodes of a simulated network (behind an `RwLock`): the
//! server calls [`Chain::call`] with a [`View`] (the calling node's identity, whether it is
//! bootstrapped, and an optional height cap for a lagging node) and writes the compact `result`
//! JSON it returns; a ticker (and a call that finds a block due) calls [`Chain::catch_up`] to produce blocks.
//!
//! * [`codec`]: CB58, bech32 addresses, hex with checksum, RFC 3339.
//! * [`args`]: params decoded with Go's rules (typed getters; mismatches are [`CallError::BadArgs`]).
//! * [`tx`]: tx, block and UTXO bytes, and their `json` renderings.
//! * [`state`]: the deterministic genesis and block production.
//! * [`version`]: the release a node plays and the methods each release serves.
//! * `methods`: each method as a function of the state and a view.

pub mod args;
pub mod codec;
mod methods;
pub mod state;
pub mod tx;
pub mod version;

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use self::codec::{hash_parts, hex_checksum, hex_plain, node_id_str, Id, EMPTY_ID};
use self::state::{identity_node_id, Signer, State};
use self::tx::{BaseTx, TransferIn, TransferOut, Tx, Unsigned};
pub use self::version::NodeVersion;
use self::version::Served;
use crate::jsonrpc::Json;

/// The fixed message avalanchego substitutes for any params decoding failure.
pub const BAD_ARGS: &str = "couldn't unmarshal an argument. Ensure arguments are valid and properly formatted. See documentation for example calls";

/// Username of the demo keystore user (for the removed keystore methods exportKey/listAddresses).
pub const DEMO_USERNAME: &str = "demo";
/// Password of the demo keystore user.
pub const DEMO_PASSWORD: &str = "Sn0wg4te-demo!";

/// Settings of the simulated network's chain.
#[derive(Debug, Clone)]
pub struct ChainConfig {
    /// Network ID (1 mainnet, 5 fuji, 12345 local, others `network-<id>`).
    pub network_id: u32,
    /// Seed of all deterministic state.
    pub seed: u64,
    /// Time between blocks after the built-in history.
    pub block_interval: Duration,
    /// When height [`state::GENESIS_TIP`] (the end of the built-in history) was accepted: the
    /// height then follows the wall clock, one block per `block_interval`, and every block's time
    /// is a function of its height. Devnodes given the same genesis, seed and interval are nodes
    /// of one chain whenever they start (the same height within a block, the same block and tx
    /// IDs at every height). `None`: the moment the chain is built.
    pub genesis: Option<SystemTime>,
}

/// The most blocks a chain builds to catch up with the wall clock (about 100 MB of history): a
/// genesis further back is refused rather than filling the memory.
pub const MAX_CATCH_UP: u64 = 250_000;

/// The identity of one node of the network (node-local answers differ per node).
#[derive(Debug, Clone)]
pub struct NodeIdentity {
    /// `NodeID-…`.
    pub node_id: String,
    /// `ip:port` as info.getNodeIP reports it.
    pub ip: String,
    /// BLS public key, `0x` + 48 bytes hex.
    pub bls_public_key: String,
    /// BLS proof of possession, `0x` + 96 bytes hex.
    pub bls_pop: String,
    /// The raw node ID.
    pub short_id: [u8; 20],
}

impl NodeIdentity {
    /// Deterministic identity of node `index` of a network seeded with `seed`. Identities
    /// `0..state::NODE_VALIDATORS` are primary-network validators.
    pub fn generate(seed: u64, index: u32) -> NodeIdentity {
        let short_id = identity_node_id(seed, index);
        let signer = Signer::derive(&short_id);
        NodeIdentity {
            node_id: node_id_str(&short_id),
            ip: format!("127.0.0.1:{}", 9651 + index),
            bls_public_key: hex_plain(&signer.public_key),
            bls_pop: hex_plain(&signer.pop),
            short_id,
        }
    }
}

/// How one node sees the shared chain.
#[derive(Debug, Clone)]
pub struct View<'a> {
    /// A lagging (frozen) node sees nothing above this height.
    pub height_cap: Option<u64>,
    /// False while the node pretends to bootstrap.
    pub bootstrapped: bool,
    /// The node answering.
    pub identity: &'a NodeIdentity,
    /// The release the node plays (`info.getNodeVersion`).
    pub version: NodeVersion,
    /// It lies: `getBlock`, `getBlockByHeight` and `getTx` answer another block's or tx's bytes.
    pub lie: bool,
}

/// Why a method call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The params did not decode: answered with [`BAD_ARGS`].
    BadArgs,
    /// An application error: answered as -32000 with this message.
    App(String),
}

/// The issueTx mempool and the record of dropped txs.
#[derive(Default)]
struct Pool {
    pending: Vec<(Id, Box<[u8]>)>,
    pending_ids: HashSet<Id>,
    dropped: HashMap<Id, String>,
    dropped_order: VecDeque<Id>,
}

/// Bound of the dropped-tx record (oldest forgotten first), like a node's dropped cache.
const MAX_DROPPED: usize = 1024;
/// Bound of the mempool; issueTx fails beyond it.
const MAX_PENDING: usize = 4096;

impl Pool {
    fn drop_tx(&mut self, id: Id, reason: String) {
        if self.dropped.insert(id, reason).is_none() {
            self.dropped_order.push_back(id);
            if self.dropped_order.len() > MAX_DROPPED {
                if let Some(old) = self.dropped_order.pop_front() {
                    self.dropped.remove(&old);
                }
            }
        }
    }
}

/// The chain state.
pub struct Chain {
    config: ChainConfig,
    /// When [`state::GENESIS_TIP`] was accepted (see [`ChainConfig::genesis`]).
    genesis: SystemTime,
    st: State,
    pool: Mutex<Pool>,
}

/// Every method of the spec, by service and Go method name, with the releases that serve it
/// (reference §5, "Other version markers" and "Version history").
const METHODS: &[(&str, &str, Served)] = &[
    ("info", "Acps", Served::ALWAYS),
    ("info", "IsBootstrapped", Served::ALWAYS),
    ("info", "GetBlockchainID", Served::ALWAYS),
    ("info", "GetNetworkID", Served::ALWAYS),
    ("info", "GetNetworkName", Served::ALWAYS),
    ("info", "GetNodeID", Served::ALWAYS),
    ("info", "GetNodeIP", Served::ALWAYS),
    ("info", "GetNodeVersion", Served::ALWAYS),
    ("info", "GetTxFee", Served::ALWAYS),
    ("info", "GetVMs", Served::ALWAYS),
    ("info", "Peers", Served::ALWAYS),
    ("info", "Uptime", Served::ALWAYS),
    ("info", "Upgrades", Served::since(version::V1_11_11)),
    (
        "platform",
        "ExportKey",
        Served::removed_in(version::V1_12_2),
    ),
    (
        "platform",
        "ListAddresses",
        Served::removed_in(version::V1_12_2),
    ),
    ("platform", "GetBalance", Served::ALWAYS),
    ("platform", "GetBlock", Served::ALWAYS),
    ("platform", "GetBlockByHeight", Served::ALWAYS),
    ("platform", "GetBlockchains", Served::ALWAYS),
    ("platform", "GetBlockchainStatus", Served::ALWAYS),
    ("platform", "GetCurrentSupply", Served::ALWAYS),
    ("platform", "GetCurrentValidators", Served::ALWAYS),
    ("platform", "GetFeeConfig", Served::since(version::V1_11_11)),
    ("platform", "GetFeeState", Served::since(version::V1_11_11)),
    ("platform", "GetHeight", Served::ALWAYS),
    (
        "platform",
        "GetL1Validator",
        Served::since(version::V1_11_13),
    ),
    (
        "platform",
        "GetProposedHeight",
        Served::since(version::V1_11_13),
    ),
    (
        "platform",
        "GetMaxStakeAmount",
        Served::removed_in(version::V1_11_3),
    ),
    ("platform", "GetMinStake", Served::ALWAYS),
    (
        "platform",
        "GetPendingValidators",
        Served::removed_in(version::V1_11_3),
    ),
    ("platform", "GetRewardUTXOs", Served::ALWAYS),
    ("platform", "GetStake", Served::ALWAYS),
    ("platform", "GetStakingAssetID", Served::ALWAYS),
    ("platform", "GetSubnet", Served::since(version::V1_11_0)),
    ("platform", "GetSubnets", Served::ALWAYS),
    ("platform", "GetTimestamp", Served::ALWAYS),
    ("platform", "GetTotalStake", Served::ALWAYS),
    ("platform", "GetTx", Served::ALWAYS),
    ("platform", "GetTxStatus", Served::ALWAYS),
    ("platform", "GetUTXOs", Served::ALWAYS),
    ("platform", "GetValidatorsAt", Served::ALWAYS),
    (
        "platform",
        "GetAllValidatorsAt",
        Served::since(version::V1_14_0),
    ),
    (
        "platform",
        "GetValidatorFeeConfig",
        Served::since(version::V1_12_2),
    ),
    (
        "platform",
        "GetValidatorFeeState",
        Served::since(version::V1_12_2),
    ),
    ("platform", "IssueTx", Served::ALWAYS),
    ("platform", "SampleValidators", Served::ALWAYS),
    ("platform", "ValidatedBy", Served::ALWAYS),
    ("platform", "Validates", Served::ALWAYS),
    (
        "proposervm",
        "GetProposedHeight",
        Served::since(version::V1_14_0),
    ),
    (
        "proposervm",
        "GetCurrentEpoch",
        Served::since(version::V1_14_0),
    ),
];

/// Blocks due after the built-in history at `now`, for a chain of `genesis` and `interval`.
fn blocks_due(genesis: SystemTime, interval: Duration, now: SystemTime) -> u64 {
    let Ok(since) = now.duration_since(genesis) else {
        return 0;
    };
    let interval = interval.as_nanos().max(1);
    u64::try_from(since.as_nanos() / interval).unwrap_or(u64::MAX)
}

impl Chain {
    /// Builds the deterministic genesis state and block history (heights 0..=1000), then the
    /// blocks due since `config.genesis`. Refused when that is more than [`MAX_CATCH_UP`] blocks.
    pub fn new(config: &ChainConfig) -> Result<Chain, String> {
        let now = SystemTime::now();
        let genesis = config.genesis.unwrap_or(now);
        let due = blocks_due(genesis, config.block_interval, now);
        if due > MAX_CATCH_UP {
            return Err(format!(
                "the genesis is {due} blocks ago at this block interval; at most {MAX_CATCH_UP}: \
                 give a later genesis or a longer block interval"
            ));
        }
        let mut chain = Chain {
            config: config.clone(),
            genesis,
            st: State::genesis(config.network_id, config.seed),
            pool: Mutex::new(Pool::default()),
        };
        chain.catch_up(now);
        Ok(chain)
    }

    /// Does `service` ("info", "platform" or "proposervm") have a Go method named `go_method`
    /// ("GetHeight") in any release?
    pub fn has_method(service: &str, go_method: &str) -> bool {
        METHODS
            .iter()
            .any(|&(s, m, _)| s == service && m == go_method)
    }

    /// Does release `version` serve `service.go_method`? A method it does not serve is unknown
    /// to such a node: "rpc: can't find method".
    pub fn serves(version: NodeVersion, service: &str, go_method: &str) -> bool {
        METHODS
            .iter()
            .any(|&(s, m, served)| s == service && m == go_method && served.serves(Some(version)))
    }

    /// Last accepted height as seen by `view`.
    pub fn height(&self, view: &View<'_>) -> u64 {
        let tip = self.st.blocks.len() as u64 - 1;
        view.height_cap.map_or(tip, |cap| cap.min(tip))
    }

    /// Produces every block due by `now` (the first commits the mempool). A block's time is its
    /// height's, not the moment it is built: two chains of one genesis build the same blocks.
    pub fn catch_up(&mut self, now: SystemTime) {
        let due = state::GENESIS_TIP + blocks_due(self.genesis, self.config.block_interval, now);
        while (self.st.blocks.len() as u64) <= due {
            let height = self.st.blocks.len() as u64;
            let pool = self.pool.get_mut();
            let issued: Vec<Box<[u8]>> = pool.pending.drain(..).map(|(_, b)| b).collect();
            pool.pending_ids.clear();
            self.st.produce(self.block_time(height), issued);
        }
    }

    /// When block `height` (past the built-in history) is due, on the wall clock.
    pub fn due_at(&self, height: u64) -> SystemTime {
        let after = height.saturating_sub(state::GENESIS_TIP);
        let interval = self.config.block_interval;
        let offset = interval.saturating_mul(u32::try_from(after).unwrap_or(u32::MAX));
        self.genesis + offset
    }

    /// The time (unix seconds) block `height` carries.
    fn block_time(&self, height: u64) -> u64 {
        let due = self.due_at(height);
        due.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
    }

    /// The last accepted height, whatever a node's view.
    pub fn tip(&self) -> u64 {
        self.st.blocks.len() as u64 - 1
    }

    /// The network ID this chain was built for.
    pub fn network_id(&self) -> u32 {
        self.config.network_id
    }

    /// A valid signed BaseTx (hex with checksum) for tests; distinct per `nonce`.
    pub fn sample_tx_hex(&self, nonce: u64) -> String {
        let avax = self.st.net.avax;
        let unsigned = Unsigned::Base(BaseTx {
            network_id: self.config.network_id,
            blockchain_id: EMPTY_ID,
            outs: vec![TransferOut {
                asset: avax,
                amount: 1_000_000_000 + nonce,
                owners: tx::Owners {
                    locktime: 0,
                    threshold: 1,
                    addrs: vec![self.st.addrs[3]],
                },
            }],
            ins: vec![TransferIn {
                tx_id: hash_parts(&[
                    b"sample",
                    &self.config.seed.to_be_bytes(),
                    &nonce.to_be_bytes(),
                ]),
                index: 0,
                asset: avax,
                amount: 1_001_000_000 + nonce,
                sig_indices: vec![0],
            }],
            memo: nonce.to_be_bytes().to_vec(),
        });
        hex_checksum(&Tx::sign(unsigned, &self.st.keys[2]).bytes())
    }

    /// Runs one method; the result is compact JSON.
    pub fn call(
        &self,
        view: &View<'_>,
        service: &str,
        go_method: &str,
        params: Option<&Json>,
    ) -> Result<String, CallError> {
        methods::dispatch(self, view, service, go_method, params)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test chains' genesis: a fixed moment, so that blocks are made by `catch_up` alone.
    const GENESIS: u64 = 1_800_000_000;

    fn chain(seed: u64) -> Chain {
        Chain::new(&ChainConfig {
            network_id: 12345,
            seed,
            block_interval: Duration::from_secs(1),
            genesis: Some(UNIX_EPOCH + Duration::from_secs(GENESIS)),
        })
        .unwrap()
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(GENESIS + secs)
    }

    #[test]
    fn same_seed_gives_same_blocks_and_advance_is_cheap() {
        let mut a = chain(7);
        let b = chain(7);
        assert_eq!(a.st.blocks[1000].id, b.st.blocks[1000].id);
        assert_ne!(a.st.blocks[1000].id, chain(8).st.blocks[1000].id);
        let start = std::time::Instant::now();
        for i in 1..=1000 {
            a.catch_up(at(i));
        }
        assert_eq!(a.st.blocks.len(), 2001);
        // Regeneration gives the stored ID back.
        let p = a.st.block_at(1500).unwrap();
        assert_eq!(codec::sha256(&p.bytes), a.st.blocks[1500].id);
        let _ = start.elapsed();
    }

    fn call(c: &Chain, v: &View<'_>, m: &str, params: &str) -> Result<String, CallError> {
        let (service, method) = m.split_once('.').unwrap();
        let p = Json::parse(params.as_bytes()).unwrap();
        c.call(v, service, method, Some(&p))
    }

    #[test]
    fn a_frozen_node_answers_as_of_its_height() {
        let mut c = chain(3);
        for i in 1..=5 {
            c.catch_up(at(i));
        }
        let id = NodeIdentity::generate(3, 0);
        let live = View {
            height_cap: None,
            bootstrapped: true,
            identity: &id,
            version: NodeVersion::CURRENT,
            lie: false,
        };
        let frozen = View {
            height_cap: Some(1002),
            bootstrapped: true,
            identity: &id,
            version: NodeVersion::CURRENT,
            lie: false,
        };
        assert_eq!(c.height(&live), 1005);
        assert_eq!(
            call(&c, &frozen, "platform.GetHeight", "{}").unwrap(),
            r#"{"height":"1002"}"#
        );
        assert_eq!(
            call(
                &c,
                &frozen,
                "platform.GetBlockByHeight",
                r#"{"height":1003}"#
            ),
            Err(CallError::App(
                "couldn't get block at height 1003: not found".into()
            ))
        );
        let block_id = codec::id_str(&c.st.blocks[1004].id);
        let q = format!(r#"{{"blockID":"{block_id}"}}"#);
        assert!(call(&c, &live, "platform.GetBlock", &q).is_ok());
        assert!(matches!(
            call(&c, &frozen, "platform.GetBlock", &q),
            Err(CallError::App(_))
        ));
        // A tx of a later block: not found, status Unknown; committed for the live node.
        let (&tx, _) = c.st.tx_index.iter().find(|(_, (h, _))| *h == 1004).unwrap();
        let q = format!(r#"{{"txID":"{}"}}"#, codec::id_str(&tx));
        assert_eq!(
            call(&c, &live, "platform.GetTxStatus", &q).unwrap(),
            r#"{"status":"Committed"}"#
        );
        assert_eq!(
            call(&c, &frozen, "platform.GetTxStatus", &q).unwrap(),
            r#"{"status":"Unknown"}"#
        );
        assert_eq!(
            call(&c, &frozen, "platform.GetTx", &q),
            Err(CallError::App("couldn't get tx: not found".into()))
        );
        let ts_live = call(&c, &live, "platform.GetTimestamp", "{}").unwrap();
        let ts_frozen = call(&c, &frozen, "platform.GetTimestamp", "{}").unwrap();
        assert_ne!(ts_live, ts_frozen);
        assert_eq!(
            ts_frozen,
            format!(
                r#"{{"timestamp":"{}"}}"#,
                codec::rfc3339(c.st.blocks[1002].time)
            )
        );
        let e = call(
            &c,
            &frozen,
            "platform.GetValidatorsAt",
            r#"{"height":1004}"#,
        )
        .unwrap_err();
        assert!(
            matches!(e, CallError::App(m) if m.ends_with("current P-chain height (1002) < requested P-Chain height (1004)"))
        );
        assert!(call(&c, &live, "platform.GetValidatorsAt", r#"{"height":1004}"#).is_ok());
        // Balances follow the height too: the payment UTXO of block 1004 is not visible.
        let p = c.st.block_at(1004).unwrap().payment;
        let addr = codec::address_str("local", &p.out.owners.addrs[0]);
        let q = format!(r#"{{"addresses":["{addr}"]}}"#);
        assert_ne!(
            call(&c, &live, "platform.GetBalance", &q).unwrap(),
            call(&c, &frozen, "platform.GetBalance", &q).unwrap()
        );
    }

    #[test]
    fn a_bootstrapping_node_reports_the_p_chain_not_bootstrapped() {
        let c = chain(3);
        let id = NodeIdentity::generate(3, 9);
        let v = View {
            height_cap: None,
            bootstrapped: false,
            identity: &id,
            version: NodeVersion::CURRENT,
            lie: false,
        };
        assert_eq!(
            call(&c, &v, "info.IsBootstrapped", r#"{"chain":"P"}"#).unwrap(),
            r#"{"isBootstrapped":false}"#
        );
        assert_eq!(
            call(&c, &v, "info.IsBootstrapped", r#"{"chain":"X"}"#).unwrap(),
            r#"{"isBootstrapped":true}"#
        );
        // Identity 9 is no validator.
        assert_eq!(
            call(&c, &v, "info.Uptime", "{}"),
            Err(CallError::App(
                "couldn't get node uptime: node is not a validator".into()
            ))
        );
        assert_eq!(
            call(
                &c,
                &v,
                "platform.GetBlockchainStatus",
                r#"{"blockchainID":"P"}"#
            )
            .unwrap(),
            r#"{"status":"Syncing"}"#
        );
    }

    #[test]
    fn node_local_answers_differ_per_identity_but_shared_ones_do_not() {
        let c = chain(5);
        let (a, b) = (NodeIdentity::generate(5, 0), NodeIdentity::generate(5, 1));
        let va = View {
            height_cap: None,
            bootstrapped: true,
            identity: &a,
            version: NodeVersion::CURRENT,
            lie: false,
        };
        let vb = View {
            height_cap: None,
            bootstrapped: true,
            identity: &b,
            version: NodeVersion::CURRENT,
            lie: false,
        };
        for m in ["info.GetNodeID", "info.Peers", "info.GetNodeIP"] {
            assert_ne!(call(&c, &va, m, "{}"), call(&c, &vb, m, "{}"), "{m}");
        }
        for m in [
            "platform.GetBlockchains",
            "platform.GetSubnets",
            "platform.GetFeeState",
            "platform.GetTotalStake",
        ] {
            assert_eq!(call(&c, &va, m, "{}"), call(&c, &vb, m, "{}"), "{m}");
        }
    }

    #[test]
    fn a_lying_node_answers_another_block_or_tx_well_formed_in_either_encoding() {
        let c = chain(4);
        let id = NodeIdentity::generate(4, 0);
        let view = |lie| View {
            height_cap: None,
            bootstrapped: true,
            identity: &id,
            version: NodeVersion::CURRENT,
            lie,
        };
        let (honest, liar) = (view(false), view(true));
        let field = |answer: &str, name: &str| -> Json {
            Json::parse(answer.as_bytes())
                .unwrap()
                .field(name)
                .unwrap()
                .clone()
        };
        let hex_of = |answer: &str, name: &str| -> Vec<u8> {
            let text = field(answer, name);
            codec::hex_decode(text.as_str().unwrap(), true).unwrap()
        };
        let block_id = codec::id_str(&c.st.blocks[500].id);
        let tx_id = codec::id_str(&c.st.block_at(500).unwrap().tx_ids[0]);
        let get_block = format!(r#"{{"blockID":"{block_id}"}}"#);
        let get_tx = format!(r#"{{"txID":"{tx_id}"}}"#);
        // Honest: the bytes hash to the ID asked; the block carries the height asked.
        let block = hex_of(
            &call(&c, &honest, "platform.GetBlock", &get_block).unwrap(),
            "block",
        );
        assert_eq!(codec::id_str(&codec::sha256(&block)), block_id);
        let tx = hex_of(&call(&c, &honest, "platform.GetTx", &get_tx).unwrap(), "tx");
        assert_eq!(codec::id_str(&codec::sha256(&tx)), tx_id);
        // Lying: valid hex with its checksum, another block's and another tx's bytes.
        let block = hex_of(
            &call(&c, &liar, "platform.GetBlock", &get_block).unwrap(),
            "block",
        );
        assert_ne!(codec::id_str(&codec::sha256(&block)), block_id);
        let tx = hex_of(&call(&c, &liar, "platform.GetTx", &get_tx).unwrap(), "tx");
        assert_ne!(codec::id_str(&codec::sha256(&tx)), tx_id);
        let by_height = |v: &View<'_>, enc: &str| {
            let p = format!(r#"{{"height":500,"encoding":"{enc}"}}"#);
            call(&c, v, "platform.GetBlockByHeight", &p).unwrap()
        };
        let height_in = |block: &[u8]| u64::from_be_bytes(block[46..54].try_into().unwrap());
        assert_eq!(height_in(&hex_of(&by_height(&honest, "hex"), "block")), 500);
        assert_ne!(height_in(&hex_of(&by_height(&liar, "hex"), "block")), 500);
        // In json: another block, which names its own ID and height; another tx, its own ID.
        let json = field(&by_height(&liar, "json"), "block");
        assert_ne!(json.field("height"), Some(&Json::Number("500".into())));
        let p = format!(r#"{{"blockID":"{block_id}","encoding":"json"}}"#);
        let json = field(&call(&c, &liar, "platform.GetBlock", &p).unwrap(), "block");
        assert_ne!(
            json.field("id").and_then(Json::as_str),
            Some(block_id.as_str())
        );
        let p = format!(r#"{{"txID":"{tx_id}","encoding":"json"}}"#);
        let json = field(&call(&c, &liar, "platform.GetTx", &p).unwrap(), "tx");
        assert_ne!(
            json.field("id").and_then(Json::as_str),
            Some(tx_id.as_str())
        );
        // The lie is about content only: an unknown ID is still not found.
        let unknown = format!(r#"{{"blockID":"{}"}}"#, codec::id_str(&[9; 32]));
        assert!(call(&c, &liar, "platform.GetBlock", &unknown).is_err());
    }

    #[test]
    fn every_method_is_registered() {
        for (s, m, _) in METHODS {
            assert!(Chain::has_method(s, m));
        }
        assert!(!Chain::has_method("platform", "Nope"));
        assert!(!Chain::has_method("info", "GetHeight"));
    }
}
