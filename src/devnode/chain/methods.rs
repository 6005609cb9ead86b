//! Every `info.*` and `platform.*` method: args decoded first (so a malformed known field fails
//! with [`CallError::BadArgs`] before any work), then the answer written as compact JSON with
//! avalanchego's field order, quoting (`json.Uint64` as strings, plain numbers inside block/tx JSON
//! and fee config/state) and error texts (reference §5).

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;

use rand::Rng;

use super::args::{Args, Encoding, HeightArg};
use super::codec::{
    address_str, hash_parts, hex_checksum, hex_decode, hex_plain, id_str, node_id_str,
    parse_address, parse_id, rfc3339, sha256, Id, ShortId, EMPTY_ID,
};
use super::state::{
    Signer, State, Utxo, AVM_ID, DEMO_ADDRS, EVM_ID, GENESIS_TIP, PLATFORM_VM_ID, SUBNET_EVM_ID,
};
use super::tx::{output_bytes, utxo_bytes, JsonWriter, Owners, Tx};
use super::{CallError, Chain, View, DEMO_PASSWORD, DEMO_USERNAME, MAX_PENDING};
use crate::jsonrpc::gojson::{go_quote, write_go_string};
use crate::jsonrpc::release::NodeVersion;
use crate::jsonrpc::Json;

type Res = Result<String, CallError>;

fn app(msg: impl Into<String>) -> CallError {
    CallError::App(msg.into())
}

/// Routes one call to its method.
pub(super) fn dispatch(
    c: &Chain,
    v: &View<'_>,
    service: &str,
    method: &str,
    p: Option<&Json>,
) -> Res {
    match (service, method) {
        ("platform", "GetHeight") => {
            Args::none(p)?;
            Ok(format!("{{\"height\":\"{}\"}}", c.height(v)))
        }
        ("info", "Acps") => c.acps(v, p),
        ("info", "IsBootstrapped") => c.is_bootstrapped(v, p),
        ("info", "GetBlockchainID") => c.get_blockchain_id(p),
        ("info", "GetNetworkID") => {
            Args::none(p)?;
            Ok(format!("{{\"networkID\":\"{}\"}}", c.st.net.network_id))
        }
        ("info", "GetNetworkName") => {
            Args::none(p)?;
            Ok(format!("{{\"networkName\":{}}}", q(&c.st.net.name)))
        }
        ("info", "GetNodeID") => {
            Args::none(p)?;
            Ok(format!(
                "{{\"nodeID\":\"{}\",\"nodePOP\":{{\"publicKey\":\"{}\",\"proofOfPossession\":\"{}\"}}}}",
                v.identity.node_id, v.identity.bls_public_key, v.identity.bls_pop
            ))
        }
        ("info", "GetNodeIP") => {
            Args::none(p)?;
            Ok(format!("{{\"ip\":{}}}", q(&v.identity.ip)))
        }
        ("info", "GetNodeVersion") => {
            Args::none(p)?;
            Ok(node_version(v))
        }
        ("info", "GetTxFee") => {
            Args::none(p)?;
            Ok(c.tx_fee())
        }
        ("info", "GetVMs") => {
            Args::none(p)?;
            Ok(c.vms())
        }
        ("info", "Peers") => c.peers(v, p),
        ("info", "Uptime") => c.uptime(v, p),
        ("info", "Upgrades") => {
            Args::none(p)?;
            Ok(c.upgrades(v.version))
        }
        ("platform", "ExportKey") => c.export_key(p),
        ("platform", "ListAddresses") => c.list_addresses(p),
        ("platform", "GetBalance") => c.get_balance(v, p),
        ("platform", "GetBlock") => c.get_block(v, p),
        ("platform", "GetBlockByHeight") => c.get_block_by_height(v, p),
        ("platform", "GetBlockchains") => {
            Args::none(p)?;
            Ok(c.blockchains())
        }
        ("platform", "GetBlockchainStatus") => c.blockchain_status(v, p),
        ("platform", "GetCurrentSupply") => c.current_supply(v, p),
        ("platform", "GetCurrentValidators") => c.current_validators(v, p),
        ("platform", "GetFeeConfig") => {
            Args::none(p)?;
            Ok("{\"weights\":[1,1000,1000,4],\"maxCapacity\":1000000,\"maxPerSecond\":100000,\"targetPerSecond\":50000,\"minPrice\":1,\"excessConversionConstant\":2164043}".to_string())
        }
        ("platform", "GetFeeState") => {
            Args::none(p)?;
            let h = c.height(v);
            let (capacity, excess, price) = fee_state(h);
            Ok(format!(
                "{{\"capacity\":{capacity},\"excess\":{excess},\"price\":{price},\"timestamp\":\"{}\"}}",
                rfc3339(c.time_at(h))
            ))
        }
        ("platform", "GetL1Validator") => c.l1_validator(v, p),
        ("platform", "GetProposedHeight") => {
            Args::none(p)?;
            Ok(format!("{{\"height\":\"{}\"}}", c.proposed_height(v)))
        }
        ("platform", "GetMaxStakeAmount") => c.max_stake_amount(v, p),
        ("platform", "GetMinStake") => c.min_stake(p),
        ("platform", "GetPendingValidators") => c.pending_validators(p),
        ("platform", "GetRewardUTXOs") => c.reward_utxos(p),
        ("platform", "GetStake") => c.get_stake(v, p),
        ("platform", "GetStakingAssetID") => {
            let a = Args::new(p)?;
            let subnet = a.id("subnetID")?;
            if subnet != EMPTY_ID {
                return Err(no_transformation(&subnet));
            }
            Ok(format!("{{\"assetID\":\"{}\"}}", id_str(&c.st.net.avax)))
        }
        ("platform", "GetSubnet") => c.get_subnet(p),
        ("platform", "GetSubnets") => c.get_subnets(p),
        ("platform", "GetTimestamp") => {
            Args::none(p)?;
            Ok(format!(
                "{{\"timestamp\":\"{}\"}}",
                rfc3339(c.time_at(c.height(v)))
            ))
        }
        ("platform", "GetTotalStake") => c.total_stake(v, p),
        ("platform", "GetTx") => c.get_tx(v, p),
        ("platform", "GetTxStatus") => c.tx_status(v, p),
        ("platform", "GetUTXOs") => c.get_utxos(v, p),
        ("platform", "GetValidatorsAt") => c.validators_at(v, p),
        ("platform", "GetAllValidatorsAt") => c.all_validators_at(v, p),
        ("proposervm", "GetProposedHeight") => {
            Args::none(p)?;
            Ok(format!("{{\"height\":\"{}\"}}", c.proposed_height(v)))
        }
        ("proposervm", "GetCurrentEpoch") => {
            Args::none(p)?;
            Ok(c.current_epoch(v))
        }
        ("platform", "GetValidatorFeeConfig") => {
            Args::none(p)?;
            Ok("{\"capacity\":20000,\"target\":10000,\"minPrice\":512,\"excessConversionConstant\":1246488515}".to_string())
        }
        ("platform", "GetValidatorFeeState") => {
            Args::none(p)?;
            let h = c.height(v);
            let (excess, price) = validator_fee_state(h);
            Ok(format!(
                "{{\"excess\":{excess},\"price\":{price},\"timestamp\":\"{}\"}}",
                rfc3339(c.time_at(h))
            ))
        }
        ("platform", "IssueTx") => c.issue_tx(p),
        ("platform", "SampleValidators") => c.sample_validators(v, p),
        ("platform", "ValidatedBy") => c.validated_by(p),
        ("platform", "Validates") => c.validates(p),
        _ => Err(app(format!(
            "rpc: can't find method {}",
            go_quote(&format!("{service}.{method}"))
        ))),
    }
}

/// `info.getNodeVersion` for the release the node plays. The built-in VMs carry the node's own
/// version; `databaseVersion`, `rpcProtocolVersion` and `gitCommit` are v1.14.2's whatever the
/// release (the reference gives only those: a client that routes by version reads `version`).
fn node_version(v: &View<'_>) -> String {
    let n = v.version;
    let bare = format!("{}.{}.{}", n.major, n.minor, n.patch);
    format!(
        "{{\"version\":\"avalanchego/{bare}\",\"databaseVersion\":\"v1.4.5\",\"rpcProtocolVersion\":\"45\",\"gitCommit\":\"1cf1fc3d17a6e2b0e6d4f7c1e5a8b9d0c2f3e4a5\",\"vmVersions\":{{\"avm\":\"{n}\",\"evm\":\"{n}\",\"platform\":\"{n}\"}}}}"
    )
}
const GRANITE_TIME: u64 = 1_763_568_000;
/// Max UTXOs per getUTXOs page and max addresses per call.
const MAX_PAGE: usize = 1024;

/// A Go-escaped JSON string.
fn q(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    write_go_string(&mut out, s);
    out
}

/// Dynamic fee state as a function of height: (capacity, excess, price).
fn fee_state(h: u64) -> (u64, u64, u64) {
    let excess = h.wrapping_mul(2_654_435_761) % 60_000;
    (1_000_000 - excess / 2, excess, 1 + excess / 20_000)
}

/// Validator fee state as a function of height: (excess, price).
fn validator_fee_state(h: u64) -> (u64, u64) {
    let excess = h.wrapping_mul(40_503) % 30_000;
    (excess, 512 + excess / 1000)
}

/// `json.Float32`-style four-decimal percentage from parts per million.
fn pct(ppm: u64) -> String {
    format!("{}.{:04}", ppm / 10_000, ppm % 10_000)
}

fn imported_len(u: &super::tx::Unsigned) -> usize {
    match u {
        super::tx::Unsigned::Import { imported, .. } => imported.len(),
        _ => 0,
    }
}

fn no_transformation(subnet: &Id) -> CallError {
    app(format!(
        "failed fetching subnet transformation for {}: not found",
        id_str(subnet)
    ))
}

fn encode(enc: Encoding, bytes: &[u8]) -> Option<String> {
    match enc {
        Encoding::Hex | Encoding::HexC => Some(hex_checksum(bytes)),
        Encoding::HexNc => Some(hex_plain(bytes)),
        Encoding::Json => None,
    }
}

/// A node-local pseudo-random value in `0..m` for the pair (viewer, subject).
fn local_rand(viewer: &ShortId, subject: &[u8], m: u64) -> u64 {
    let h = hash_parts(&[viewer, subject]);
    u64::from_be_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]]) % m
}

impl Chain {
    fn hrp(&self) -> &'static str {
        self.st.net.hrp
    }

    fn time_at(&self, h: u64) -> u64 {
        self.st.blocks.get(h as usize).map_or(0, |b| b.time)
    }

    fn proposed_height(&self, v: &View<'_>) -> u64 {
        self.height(v).saturating_sub(3)
    }

    fn supply_at(h: u64) -> u64 {
        459_732_147_932_108_011 + h * 1_234_567_890
    }

    fn owners_json(&self, out: &mut String, o: &Owners) {
        let _ = write!(
            out,
            "{{\"locktime\":\"{}\",\"threshold\":\"{}\",\"addresses\":[",
            o.locktime, o.threshold
        );
        for (i, a) in o.addrs.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "\"{}\"", address_str(self.hrp(), a));
        }
        out.push_str("]}");
    }

    fn is_primary_validator(&self, node: &ShortId) -> bool {
        self.st.validators.iter().any(|v| &v.node_id == node)
    }

    /// Resolves a chain alias or ID to the chains this node runs (P, X, C).
    fn running_chain(&self, s: &str) -> Option<Id> {
        let net = &self.st.net;
        match s {
            "P" | "platform" => Some(EMPTY_ID),
            "X" | "avm" => Some(net.x_chain),
            "C" | "evm" => Some(net.c_chain),
            _ => {
                let id = parse_id(s).ok()?;
                [EMPTY_ID, net.x_chain, net.c_chain]
                    .contains(&id)
                    .then_some(id)
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // info

    /// Peers of `v`: every other primary validator.
    fn peer_list(&self, v: &View<'_>) -> Vec<(usize, String)> {
        self.st
            .validators
            .iter()
            .enumerate()
            .filter(|(_, val)| val.node_id != v.identity.short_id)
            .map(|(i, _)| {
                let ip = if i < super::state::NODE_VALIDATORS as usize {
                    super::NodeIdentity::generate(self.st.seed, i as u32).ip
                } else {
                    format!("203.0.113.{}:9651", 10 + i)
                };
                (i, ip)
            })
            .collect()
    }

    fn supports_acp(i: usize) -> bool {
        i % 3 != 1
    }

    fn acps(&self, v: &View<'_>, p: Option<&Json>) -> Res {
        Args::none(p)?;
        let total: u64 = self.st.validators.iter().map(|x| x.total_weight()).sum();
        let mut supporters: Vec<String> = Vec::new();
        let mut weight = 0u64;
        for (i, _) in self.peer_list(v) {
            if Self::supports_acp(i) {
                let val = &self.st.validators[i];
                supporters.push(node_id_str(&val.node_id));
                weight += val.total_weight();
            }
        }
        supporters.sort();
        let list = supporters
            .iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(",");
        Ok(format!(
            "{{\"acps\":{{\"247\":{{\"supportWeight\":\"{weight}\",\"supporters\":[{list}],\"objectWeight\":\"0\",\"objectors\":[],\"abstainWeight\":\"{}\"}}}}}}",
            total - weight
        ))
    }

    fn is_bootstrapped(&self, v: &View<'_>, p: Option<&Json>) -> Res {
        let a = Args::new(p)?;
        let chain = a.string("chain")?;
        if chain.is_empty() {
            return Err(app("argument 'chain' not given"));
        }
        match self.running_chain(chain) {
            None => Err(app(format!("there is no chain with alias/ID '{chain}'"))),
            Some(id) => {
                let b = id != EMPTY_ID || v.bootstrapped;
                Ok(format!("{{\"isBootstrapped\":{b}}}"))
            }
        }
    }

    fn get_blockchain_id(&self, p: Option<&Json>) -> Res {
        let a = Args::new(p)?;
        let alias = a.string("alias")?;
        match self.running_chain(alias) {
            Some(id) => Ok(format!("{{\"blockchainID\":\"{}\"}}", id_str(&id))),
            None => Err(app(format!("there is no ID with alias: {alias}"))),
        }
    }

    fn tx_fee(&self) -> String {
        let (subnet, transform) = match self.st.net.network_id {
            1 => (1_000_000_000u64, 10_000_000_000u64),
            5 => (100_000_000, 1_000_000_000),
            _ => (100_000_000, 100_000_000),
        };
        format!(
            "{{\"txFee\":\"1000000\",\"createAssetTxFee\":\"10000000\",\"createSubnetTxFee\":\"{subnet}\",\"transformSubnetTxFee\":\"{transform}\",\"createBlockchainTxFee\":\"{subnet}\",\"addPrimaryNetworkValidatorFee\":\"0\",\"addPrimaryNetworkDelegatorFee\":\"0\",\"addSubnetValidatorFee\":\"1000000\",\"addSubnetDelegatorFee\":\"1000000\"}}"
        )
    }

    fn vms(&self) -> String {
        format!(
            "{{\"vms\":{{\"{AVM_ID}\":[\"avm\"],\"{EVM_ID}\":[\"evm\"],\"{PLATFORM_VM_ID}\":[\"platform\"],\"{SUBNET_EVM_ID}\":[\"subnet-evm\"]}},\"fxs\":{{\"qd2U4HDWUvMrVUeTcCHp6xH3Qpnn1XbU5MDdnBoiifFqvgXwT\":\"nftfx\",\"rXJsCSEYXg2TehWxCEEGj6JU2PWKTkd6cBdNLjoe2SpsKD9cy\":\"propertyfx\",\"spdxUxVJQbX85MGxMHbKw1sHxMnSqJ3QBzDyDYEP3h6TLuxqQ\":\"secp256k1fx\"}}}}"
        )
    }

    fn peers(&self, v: &View<'_>, p: Option<&Json>) -> Res {
        let a = Args::new(p)?;
        let filter: HashSet<ShortId> = a.node_ids("nodeIDs")?.into_iter().collect();
        let last = rfc3339(self.time_at(self.st.blocks.len() as u64 - 1));
        let mut out = String::with_capacity(4096);
        let mut n = 0;
        out.push_str("{\"numPeers\":\"NUM\",\"peers\":[");
        for (i, ip) in self.peer_list(v) {
            let val = &self.st.validators[i];
            if !filter.is_empty() && !filter.contains(&val.node_id) {
                continue;
            }
            if n > 0 {
                out.push(',');
            }
            n += 1;
            let mut tracked: Vec<String> = self
                .st
                .subnets
                .iter()
                .filter(|s| s.validators.iter().any(|sv| sv.node_id == val.node_id))
                .map(|s| format!("\"{}\"", id_str(&s.id)))
                .collect();
            tracked.sort();
            let version = if i % 4 == 3 {
                "avalanchego/1.14.1"
            } else {
                "avalanchego/1.14.2"
            };
            let acps = if Self::supports_acp(i) { "247" } else { "" };
            let _ = write!(
                out,
                "{{\"ip\":\"{ip}\",\"publicIP\":\"{ip}\",\"nodeID\":\"{}\",\"version\":\"{version}\",\"upgradeTime\":{GRANITE_TIME},\"lastSent\":\"{last}\",\"lastReceived\":\"{last}\",\"observedUptime\":\"{}\",\"trackedSubnets\":[{}],\"supportedACPs\":[{acps}],\"objectedACPs\":[],\"benched\":[]}}",
                node_id_str(&val.node_id),
                95 + local_rand(&v.identity.short_id, &val.node_id, 5),
                tracked.join(",")
            );
        }
        out.push_str("]}");
        Ok(out.replacen("NUM", &n.to_string(), 1))
    }

    fn uptime(&self, v: &View<'_>, p: Option<&Json>) -> Res {
        Args::none(p)?;
        if !self.is_primary_validator(&v.identity.short_id) {
            return Err(app("couldn't get node uptime: node is not a validator"));
        }
        let avg = 990_000 + local_rand(&v.identity.short_id, b"uptime", 9_999);
        Ok(format!(
            "{{\"rewardingStakePercentage\":\"100.0000\",\"weightedAveragePercentage\":\"{}\"}}",
            pct(avg)
        ))
    }

    /// `info.upgrades` of a node of release `v`: from v1.15.0, a Fuji node schedules Helicon
    /// (earlier releases, and other networks, say 9999).
    fn upgrades(&self, v: NodeVersion) -> String {
        let helicon = if self.st.net.network_id == 5 && v >= NodeVersion::new(1, 15, 0) {
            "2026-07-28T15:00:00Z"
        } else {
            "9999-12-01T00:00:00Z"
        };
        let t = match self.st.net.network_id {
            1 => [
                "2021-03-31T14:00:00Z",
                "2021-05-10T11:00:00Z",
                "2021-08-24T14:00:00Z",
                "2021-09-22T21:00:00Z",
                "2021-12-02T18:00:00Z",
                "2022-09-05T01:30:00Z",
                "2022-09-06T20:00:00Z",
                "2022-09-07T03:00:00Z",
                "2022-10-18T16:00:00Z",
                "2023-04-25T15:00:00Z",
                "2024-03-06T16:00:00Z",
                "2024-12-16T17:00:00Z",
                "2025-04-08T15:00:00Z",
                "2025-11-19T16:00:00Z",
            ],
            5 => [
                "2021-03-26T14:00:00Z",
                "2021-05-05T14:00:00Z",
                "2021-08-16T19:00:00Z",
                "2021-09-16T21:00:00Z",
                "2021-11-24T15:00:00Z",
                "2022-09-06T20:00:00Z",
                "2022-09-06T20:00:00Z",
                "2022-09-07T06:00:00Z",
                "2022-10-03T14:00:00Z",
                "2023-04-06T15:00:00Z",
                "2024-02-13T16:00:00Z",
                "2024-11-25T16:00:00Z",
                "2025-03-13T15:00:00Z",
                "2025-11-11T15:00:00Z",
            ],
            _ => ["2020-12-05T05:00:00Z"; 14],
        };
        let (ap4_height, stop_vertex, epoch) = match self.st.net.network_id {
            1 => (
                793_005u64,
                "jrGWDh5Po9FMj54depyunNixpia5PN4aAYxfmNzU8n752Rjga",
                300_000_000_000u64,
            ),
            5 => (
                47_437,
                "2D1cmbiG36BqQMRyHt4kFhWarmatA1ighSpND3FeFgz3vFVtCZ",
                300_000_000_000,
            ),
            _ => (0, "11111111111111111111111111111111LpoYY", 30_000_000_000),
        };
        format!(
            "{{\"apricotPhase1Time\":\"{}\",\"apricotPhase2Time\":\"{}\",\"apricotPhase3Time\":\"{}\",\"apricotPhase4Time\":\"{}\",\"apricotPhase4MinPChainHeight\":{ap4_height},\"apricotPhase5Time\":\"{}\",\"apricotPhasePre6Time\":\"{}\",\"apricotPhase6Time\":\"{}\",\"apricotPhasePost6Time\":\"{}\",\"banffTime\":\"{}\",\"cortinaTime\":\"{}\",\"cortinaXChainStopVertexID\":\"{stop_vertex}\",\"durangoTime\":\"{}\",\"etnaTime\":\"{}\",\"fortunaTime\":\"{}\",\"graniteTime\":\"{}\",\"graniteEpochDuration\":{epoch},\"heliconTime\":\"{helicon}\"}}",
            t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9], t[10], t[11], t[12], t[13]
        )
    }

    // -----------------------------------------------------------------------------------------
    // keystore (removed from current nodes; served as the spec describes)

    fn check_user(username: &str, password: &str) -> Result<(), CallError> {
        if username.is_empty() {
            return Err(app("empty username"));
        }
        if username != DEMO_USERNAME || password != DEMO_PASSWORD {
            return Err(app(format!(
                "incorrect password: user {}",
                go_quote(username)
            )));
        }
        Ok(())
    }

    fn export_key(&self, p: Option<&Json>) -> Res {
        let a = Args::new(p)?;
        let (user, pass, addr) = (
            a.string("username")?,
            a.string("password")?,
            a.string("address")?,
        );
        Self::check_user(user, pass)?;
        let parsed = parse_address(self.hrp(), addr)
            .map_err(|e| app(format!("couldn't parse {addr} to address: {e}")))?;
        match self.st.addrs[..DEMO_ADDRS]
            .iter()
            .position(|x| *x == parsed)
        {
            Some(i) => Ok(format!(
                "{{\"privateKey\":\"PrivateKey-{}\"}}",
                super::codec::cb58_encode(&self.st.keys[i])
            )),
            None => Err(app("problem retrieving private key: not found")),
        }
    }

    fn list_addresses(&self, p: Option<&Json>) -> Res {
        let a = Args::new(p)?;
        Self::check_user(a.string("username")?, a.string("password")?)?;
        let list: Vec<String> = self.st.addrs[..DEMO_ADDRS]
            .iter()
            .map(|x| format!("\"{}\"", address_str(self.hrp(), x)))
            .collect();
        Ok(format!("{{\"addresses\":[{}]}}", list.join(",")))
    }

    // -----------------------------------------------------------------------------------------
    // blocks and txs

    fn block_result(&self, h: u64, enc: Encoding) -> String {
        let Some(p) = self.st.block_at(h) else {
            return String::new();
        };
        let mut out = String::with_capacity(p.bytes.len() * 3);
        out.push_str("{\"block\":");
        match encode(enc, &p.bytes) {
            Some(s) => {
                out.push('"');
                out.push_str(&s);
                out.push('"');
            }
            None => JsonWriter { hrp: self.hrp() }.block(
                &mut out,
                &p.block,
                &self.st.blocks[h as usize].id,
            ),
        }
        let _ = write!(out, ",\"encoding\":\"{}\"}}", enc.name());
        out
    }

    /// The height whose block a node answers for `h`: `h`, or, from a lying node
    /// (`Faults::lie`), another accepted one (when it sees more than one block).
    fn told_height(&self, v: &View<'_>, h: u64) -> u64 {
        if !v.lie {
            return h;
        }
        if h < self.height(v) {
            h + 1
        } else {
            h.saturating_sub(1)
        }
    }

    fn get_block(&self, v: &View<'_>, p: Option<&Json>) -> Res {
        let a = Args::new(p)?;
        let id = a.id("blockID")?;
        let enc = a.encoding()?;
        match self.st.block_index.get(&id) {
            Some(&h) if h <= self.height(v) => Ok(self.block_result(self.told_height(v, h), enc)),
            _ => Err(app(format!(
                "couldn't get block with id {}: not found",
                id_str(&id)
            ))),
        }
    }

    fn get_block_by_height(&self, v: &View<'_>, p: Option<&Json>) -> Res {
        let a = Args::new(p)?;
        let h = a.uint("height", u64::MAX)?;
        let enc = a.encoding()?;
        if h > self.height(v) {
            return Err(app(format!("couldn't get block at height {h}: not found")));
        }
        Ok(self.block_result(self.told_height(v, h), enc))
    }

    fn get_tx(&self, v: &View<'_>, p: Option<&Json>) -> Res {
        let a = Args::new(p)?;
        let id = a.id("txID")?;
        let enc = a.encoding()?;
        let not_found = || app("couldn't get tx: not found");
        let &(h, i) = self.st.tx_index.get(&id).ok_or_else(not_found)?;
        if h > self.height(v) {
            return Err(not_found());
        }
        // A lying node answers the first tx of another block, under that tx's own ID.
        let (h, i) = match self.told_height(v, h) {
            told if told != h => (told, 0),
            _ => (h, i),
        };
        let block = self.st.block_at(h).ok_or_else(not_found)?;
        let tx = block.block.txs.get(i as usize).ok_or_else(not_found)?;
        let bytes = tx.bytes();
        let id = if v.lie { sha256(&bytes) } else { id };
        let mut out = String::with_capacity(bytes.len() * 3);
        out.push_str("{\"tx\":");
        match encode(enc, &bytes) {
            Some(s) => {
                out.push('"');
                out.push_str(&s);
                out.push('"');
            }
            None => JsonWriter { hrp: self.hrp() }.tx(&mut out, tx, &id),
        }
        let _ = write!(out, ",\"encoding\":\"{}\"}}", enc.name());
        Ok(out)
    }

    fn tx_status(&self, v: &View<'_>, p: Option<&Json>) -> Res {
        let a = Args::new(p)?;
        let id = a.id("txID")?;
        if let Some(&(h, i)) = self.st.tx_index.get(&id) {
            if h <= self.height(v) {
                return Ok("{\"status\":\"Committed\"}".into());
            }
            // A lagging node has not accepted it yet; an issued tx sits in its mempool.
            let meta = &self.st.blocks[h as usize];
            let generated = self
                .st
                .block_at(h)
                .map_or(0, |b| b.tx_ids.len() - meta.issued.len());
            return Ok(if (i as usize) >= generated {
                "{\"status\":\"Processing\"}".into()
            } else {
                "{\"status\":\"Unknown\"}".into()
            });
        }
        let pool = self.pool.lock();
        if pool.pending_ids.contains(&id) {
            return Ok("{\"status\":\"Processing\"}".into());
        }
        if let Some(reason) = pool.dropped.get(&id) {
            return Ok(format!(
                "{{\"status\":\"Dropped\",\"reason\":{}}}",
                q(reason)
            ));
        }
        Ok("{\"status\":\"Unknown\"}".into())
    }

    fn issue_tx(&self, p: Option<&Json>) -> Res {
        let a = Args::new(p)?;
        let text = a.string("tx")?;
        let enc = a.encoding()?;
        let bytes = match enc {
            Encoding::Hex | Encoding::HexC => hex_decode(text, true),
            Encoding::HexNc => hex_decode(text, false),
            Encoding::Json => Err(super::codec::DecodeError("invalid encoding".into())),
        }
        .map_err(|e| app(format!("problem decoding transaction: {e}")))?;
        let id = sha256(&bytes);
        let id_json = format!("{{\"txID\":\"{}\"}}", id_str(&id));
        if self.st.tx_index.contains_key(&id) {
            return Ok(id_json);
        }
        let mut pool = self.pool.lock();
        if pool.pending_ids.contains(&id) {
            return Ok(id_json);
        }
        let tx = match Tx::parse(&bytes) {
            Ok(tx) => tx,
            Err(e) => {
                let msg = format!("couldn't parse tx: {}", e.0);
                pool.drop_tx(id, msg.clone());
                return Err(app(msg));
            }
        };
        let base = tx.unsigned.base();
        let why = if base.network_id != self.st.net.network_id {
            Some(format!(
                "failed verification: expected networkID {} but got {}",
                self.st.net.network_id, base.network_id
            ))
        } else if base.blockchain_id != EMPTY_ID {
            Some("failed verification: wrong chainID".to_string())
        } else if tx.creds.len() != base.ins.len() + imported_len(&tx.unsigned) {
            Some("failed verification: wrong number of credentials".to_string())
        } else {
            None
        };
        if let Some(why) = why {
            pool.drop_tx(id, why.clone());
            return Err(app(format!("couldn't issue tx: {why}")));
        }
        if pool.pending.len() >= MAX_PENDING {
            return Err(app("couldn't issue tx: mempool is full"));
        }
        pool.dropped.remove(&id);
        pool.pending_ids.insert(id);
        pool.pending.push((id, bytes.into_boxed_slice()));
        Ok(id_json)
    }

    // -----------------------------------------------------------------------------------------
    // chains and subnets

    fn blockchains(&self) -> String {
        let mut out = String::from("{\"blockchains\":[");
        for b in &self.st.chains {
            let _ = write!(
                out,
                "{{\"id\":\"{}\",\"name\":{},\"subnetID\":\"{}\",\"vmID\":\"{}\"}},",
                id_str(&b.id),
                q(&b.name),
                id_str(&b.subnet),
                id_str(&b.vm)
            );
        }
        let _ = write!(
            out,
            "{{\"id\":\"{}\",\"name\":\"X-Chain\",\"subnetID\":\"{}\",\"vmID\":\"{AVM_ID}\"}},{{\"id\":\"{}\",\"name\":\"C-Chain\",\"subnetID\":\"{}\",\"vmID\":\"{EVM_ID}\"}}]}}",
            id_str(&self.st.net.x_chain),
            id_str(&EMPTY_ID),
            id_str(&self.st.net.c_chain),
            id_str(&EMPTY_ID)
        );
        out
    }

    fn blockchain_status(&self, v: &View<'_>, p: Option<&Json>) -> Res {
        let a = Args::new(p)?;
        let s = a.string("blockchainID")?;
        if s.is_empty() {
            return Err(app("argument 'blockchainID' not given"));
        }
        let status = if self.running_chain(s).is_some() {
            if self.is_primary_validator(&v.identity.short_id) {
                "Validating"
            } else {
                "Syncing"
            }
        } else {
            let id = parse_id(s)
                .map_err(|e| app(format!("problem parsing blockchainID {}: {e}", go_quote(s))))?;
            if self.st.chains.iter().any(|c| c.id == id) {
                "Created"
            } else {
                "Unknown"
            }
        };
        Ok(format!("{{\"status\":\"{status}\"}}"))
    }

    fn validated_by(&self, p: Option<&Json>) -> Res {
        let a = Args::new(p)?;
        let id = a.id("blockchainID")?;
        let net = &self.st.net;
        let subnet = if [EMPTY_ID, net.x_chain, net.c_chain].contains(&id) {
            Some(EMPTY_ID)
        } else {
            self.st.chains.iter().find(|c| c.id == id).map(|c| c.subnet)
        };
        match subnet {
            Some(s) => Ok(format!("{{\"subnetID\":\"{}\"}}", id_str(&s))),
            None => Err(app(format!(
                "problem retrieving blockchain \"{}\": not found",
                id_str(&id)
            ))),
        }
    }

    fn validates(&self, p: Option<&Json>) -> Res {
        let a = Args::new(p)?;
        let id = a.id("subnetID")?;
        let ids: Vec<Id> = if id == EMPTY_ID {
            vec![self.st.net.x_chain, self.st.net.c_chain]
        } else if self.st.subnets.iter().any(|s| s.id == id) {
            self.st
                .chains
                .iter()
                .filter(|c| c.subnet == id)
                .map(|c| c.id)
                .collect()
        } else if self.st.tx_index.contains_key(&id) {
            return Err(app(format!("\"{}\" is not a subnet", id_str(&id))));
        } else {
            return Err(app(format!(
                "problem retrieving subnet \"{}\": not found",
                id_str(&id)
            )));
        };
        let list: Vec<String> = ids.iter().map(|i| format!("\"{}\"", id_str(i))).collect();
        Ok(format!("{{\"blockchainIDs\":[{}]}}", list.join(",")))
    }

    fn get_subnet(&self, p: Option<&Json>) -> Res {
        let a = Args::new(p)?;
        let id = a.id("subnetID")?;
        if id == EMPTY_ID {
            return Err(app("the primary network isn't a subnet"));
        }
        let s = self
            .st
            .subnets
            .iter()
            .find(|s| s.id == id)
            .ok_or_else(|| app("not found"))?;
        let keys: Vec<String> = s
            .owners
            .addrs
            .iter()
            .map(|x| format!("\"{}\"", address_str(self.hrp(), x)))
            .collect();
        let empty = id_str(&EMPTY_ID);
        let (permissioned, conversion, manager_chain, manager_addr) = match &s.l1 {
            None => (true, empty.clone(), empty.clone(), "null".to_string()),
            Some(l1) => (
                false,
                id_str(&l1.conversion_id),
                id_str(&l1.manager_chain),
                format!("\"{}\"", hex_plain(&l1.manager_address)),
            ),
        };
        Ok(format!(
            "{{\"isPermissioned\":{permissioned},\"controlKeys\":[{}],\"threshold\":\"{}\",\"locktime\":\"{}\",\"subnetTransformationTxID\":\"{empty}\",\"conversionID\":\"{conversion}\",\"managerChainID\":\"{manager_chain}\",\"managerAddress\":{manager_addr}}}",
            keys.join(","),
            s.owners.threshold,
            s.owners.locktime
        ))
    }

    fn get_subnets(&self, p: Option<&Json>) -> Res {
        let a = Args::new(p)?;
        let ids = a.ids("ids")?;
        let entry = |id: &Id| -> Option<String> {
            if *id == EMPTY_ID {
                return Some(format!(
                    "{{\"id\":\"{}\",\"controlKeys\":[],\"threshold\":\"0\"}}",
                    id_str(id)
                ));
            }
            let s = self.st.subnets.iter().find(|s| &s.id == id)?;
            let keys: Vec<String> = s
                .owners
                .addrs
                .iter()
                .map(|x| format!("\"{}\"", address_str(self.hrp(), x)))
                .collect();
            Some(format!(
                "{{\"id\":\"{}\",\"controlKeys\":[{}],\"threshold\":\"{}\"}}",
                id_str(id),
                keys.join(","),
                s.owners.threshold
            ))
        };
        // Like the node, an empty list means "all" (`len(args.IDs) == 0`).
        let list: Vec<String> = match ids.filter(|l| !l.is_empty()) {
            None => self
                .st
                .subnets
                .iter()
                .map(|s| s.id)
                .chain(std::iter::once(EMPTY_ID))
                .filter_map(|id| entry(&id))
                .collect(),
            Some(ids) => ids.iter().filter_map(entry).collect(),
        };
        Ok(format!("{{\"subnets\":[{}]}}", list.join(",")))
    }

    fn min_stake(&self, p: Option<&Json>) -> Res {
        let a = Args::new(p)?;
        let subnet = a.id("subnetID")?;
        if subnet != EMPTY_ID {
            return Err(no_transformation(&subnet));
        }
        let (v, d) = match self.st.net.network_id {
            5 => (1_000_000_000u64, 1_000_000_000u64),
            _ => (2_000_000_000_000, 25_000_000_000),
        };
        Ok(format!(
            "{{\"minValidatorStake\":\"{v}\",\"minDelegatorStake\":\"{d}\"}}"
        ))
    }

    fn current_supply(&self, v: &View<'_>, p: Option<&Json>) -> Res {
        let a = Args::new(p)?;
        let subnet = a.id("subnetID")?;
        if subnet != EMPTY_ID {
            return Err(app("fetching current supply failed: not found"));
        }
        let h = self.height(v);
        Ok(format!(
            "{{\"supply\":\"{}\",\"height\":\"{h}\"}}",
            Self::supply_at(h)
        ))
    }

    // -----------------------------------------------------------------------------------------
    // validators

    /// Validator set of `subnet` at height `h`: node ID -> (public key, weight); `None` when the
    /// subnet has no validator set at all.
    fn set_at(&self, subnet: &Id, h: u64) -> Option<BTreeMap<String, (Option<String>, u64)>> {
        let signer_of = |node: &ShortId| {
            self.st
                .validators
                .iter()
                .find(|v| &v.node_id == node)
                .and_then(|v| v.signer.as_ref())
                .map(|s| hex_plain(&s.public_key))
        };
        let mut out = BTreeMap::new();
        if *subnet == EMPTY_ID {
            for v in self.st.validators.iter().filter(|v| v.added_height <= h) {
                out.insert(
                    node_id_str(&v.node_id),
                    (
                        v.signer.as_ref().map(|s| hex_plain(&s.public_key)),
                        v.total_weight(),
                    ),
                );
            }
            return Some(out);
        }
        let s = self.st.subnets.iter().find(|s| &s.id == subnet)?;
        match &s.l1 {
            None => {
                for v in &s.validators {
                    out.insert(node_id_str(&v.node_id), (signer_of(&v.node_id), v.weight));
                }
            }
            Some(l1) => {
                for v in &l1.validators {
                    out.insert(
                        node_id_str(&v.node_id),
                        (Some(hex_plain(&v.public_key)), v.weight),
                    );
                }
            }
        }
        Some(out)
    }

    /// The height a `height` argument names: `"proposed"` is the node's proposervm height; a
    /// height above the node's tip is the "unfinalized height" error (naming `subnet`).
    fn height_arg(&self, v: &View<'_>, height: HeightArg, subnet: &Id) -> Result<u64, CallError> {
        let tip = self.height(v);
        match height {
            HeightArg::Proposed => Ok(self.proposed_height(v)),
            HeightArg::At(h) if h > tip => Err(app(format!(
                "failed to get validator set at {h}: failed to fetch validator set at unfinalized height with SubnetID = {}: current P-chain height ({tip}) < requested P-Chain height ({h})",
                id_str(subnet)
            ))),
            HeightArg::At(h) => Ok(h),
        }
    }

    fn validators_at(&self, v: &View<'_>, p: Option<&Json>) -> Res {
        let a = Args::new(p)?;
        let height = a.height("height")?;
        let subnet = a.id("subnetID")?;
        let h = self.height_arg(v, height, &subnet)?;
        let set = self.set_at(&subnet, h).unwrap_or_default();
        let mut out = String::with_capacity(64 + set.len() * 200);
        out.push('{');
        for (i, (node, (pk, w))) in set.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let pk = pk
                .as_ref()
                .map_or("null".to_string(), |k| format!("\"{k}\""));
            let _ = write!(out, "\"{node}\":{{\"publicKey\":{pk},\"weight\":\"{w}\"}}");
        }
        out.push('}');
        Ok(out)
    }

    /// `platform.getAllValidatorsAt` (v1.14.0+): every subnet's validator set at a height, in
    /// the reference's shape: `{"validatorSets":{"<subnetID>":{"validators":[{"publicKey",
    /// "weight","nodeIDs"}],"totalWeight"}}}`. Subnets are keyed in CB58 order (Go sorts map
    /// keys); within a set, validators sharing a BLS key are one entry (the warp set's
    /// flattening), sorted by key, and a validator without a key has `"publicKey":null` (the
    /// reference's shape allows null; where a real node places such validators is not shown, so
    /// they come last, one entry each). A height above the tip is getValidatorsAt's error,
    /// naming the primary network.
    fn all_validators_at(&self, v: &View<'_>, p: Option<&Json>) -> Res {
        let a = Args::new(p)?;
        let height = a.height("height")?;
        let h = self.height_arg(v, height, &EMPTY_ID)?;
        let mut subnets: Vec<Id> = vec![EMPTY_ID];
        subnets.extend(self.st.subnets.iter().map(|s| s.id));
        let mut sets: BTreeMap<String, String> = BTreeMap::new();
        for subnet in &subnets {
            let Some(set) = self.set_at(subnet, h) else {
                continue;
            };
            if set.is_empty() {
                continue;
            }
            // BLS key -> (weight, node IDs); keyless validators kept apart.
            let mut keyed: BTreeMap<String, (u64, Vec<String>)> = BTreeMap::new();
            let mut keyless: Vec<(String, u64)> = Vec::new();
            let mut total: u64 = 0;
            for (node, (pk, w)) in set {
                total = total.saturating_add(w);
                match pk {
                    Some(k) => {
                        let e = keyed.entry(k).or_default();
                        e.0 = e.0.saturating_add(w);
                        e.1.push(node);
                    }
                    None => keyless.push((node, w)),
                }
            }
            let mut out = String::from("{\"validators\":[");
            let entries = keyed
                .into_iter()
                .map(|(k, (w, nodes))| (format!("\"{k}\""), w, nodes))
                .chain(
                    keyless
                        .into_iter()
                        .map(|(n, w)| ("null".to_string(), w, vec![n])),
                );
            for (i, (pk, w, nodes)) in entries.enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let nodes: Vec<String> = nodes.iter().map(|n| format!("\"{n}\"")).collect();
                let _ = write!(
                    out,
                    "{{\"publicKey\":{pk},\"weight\":\"{w}\",\"nodeIDs\":[{}]}}",
                    nodes.join(",")
                );
            }
            let _ = write!(out, "],\"totalWeight\":\"{total}\"}}");
            sets.insert(id_str(subnet), out);
        }
        let mut out = String::from("{\"validatorSets\":{");
        for (i, (id, set)) in sets.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "\"{id}\":{set}");
        }
        out.push_str("}}");
        Ok(out)
    }

    /// `graniteTime` (Unix seconds) and `graniteEpochDuration` (seconds) of this network, as
    /// `info.upgrades` reports them.
    fn granite_epochs(&self) -> (u64, u64) {
        match self.st.net.network_id {
            1 => (GRANITE_TIME, 300),
            5 => (1_762_873_200, 300),
            _ => (1_607_144_400, 30),
        }
    }

    /// `proposervm.getCurrentEpoch` (v1.14.0+, Granite's epochs): `{"number","startTime",
    /// "pChainHeight"}`, all quoted uint64s as the reference gives them. The reference gives the
    /// shape, not the rule, so this is the most plausible reading, simulated: epochs of
    /// `graniteEpochDuration` (as `info.upgrades` reports it) counted from `graniteTime`,
    /// taken at the time of the node's proposed height; `startTime` is the epoch's start in Unix
    /// seconds and `pChainHeight` the last block accepted at or before it (0 before Granite).
    fn current_epoch(&self, v: &View<'_>) -> String {
        let (granite, epoch_secs) = self.granite_epochs();
        let t = self.time_at(self.proposed_height(v));
        let number = t.saturating_sub(granite) / epoch_secs;
        let start = granite + number * epoch_secs;
        let tip = usize::try_from(self.height(v)).unwrap_or(usize::MAX);
        let blocks = self.st.blocks.get(..=tip).unwrap_or(&self.st.blocks);
        let p_height = blocks
            .partition_point(|b| b.time <= start)
            .saturating_sub(1);
        format!(
            "{{\"number\":\"{number}\",\"startTime\":\"{start}\",\"pChainHeight\":\"{p_height}\"}}"
        )
    }

    fn sample_validators(&self, v: &View<'_>, p: Option<&Json>) -> Res {
        let a = Args::new(p)?;
        let size = a.uint("size", u64::from(u16::MAX))? as usize;
        let subnet = a.id("subnetID")?;
        let set = self.set_at(&subnet, self.height(v));
        let err = |why: &str| app(format!("sampling {} errored with {why}", id_str(&subnet)));
        let Some(set) = set else {
            return if size == 0 {
                Ok("{\"validators\":[]}".into())
            } else {
                Err(err("missing validators"))
            };
        };
        if size > set.len() {
            return Err(err("insufficient weight"));
        }
        let mut pool: Vec<(String, u64)> = set.into_iter().map(|(k, (_, w))| (k, w)).collect();
        let mut rng = rand::thread_rng();
        let mut picked: Vec<(ShortId, String)> = Vec::with_capacity(size);
        for _ in 0..size {
            let total: u64 = pool.iter().map(|x| x.1).sum();
            let mut r = rng.gen_range(0..total.max(1));
            let mut idx = pool.len() - 1;
            for (i, (_, w)) in pool.iter().enumerate() {
                if r < *w {
                    idx = i;
                    break;
                }
                r -= w;
            }
            let (node, _) = pool.swap_remove(idx);
            let raw = super::codec::parse_node_id(&node).unwrap_or([0; 20]);
            picked.push((raw, node));
        }
        picked.sort();
        let list: Vec<String> = picked.iter().map(|(_, n)| format!("\"{n}\"")).collect();
        Ok(format!("{{\"validators\":[{}]}}", list.join(",")))
    }

    fn signer_json(out: &mut String, s: &Signer) {
        let _ = write!(
            out,
            ",\"signer\":{{\"publicKey\":\"{}\",\"proofOfPossession\":\"{}\"}}",
            hex_plain(&s.public_key),
            hex_plain(&s.pop)
        );
    }

    fn current_validators(&self, v: &View<'_>, p: Option<&Json>) -> Res {
        let a = Args::new(p)?;
        let subnet = a.id("subnetID")?;
        let nodes = a.node_ids("nodeIDs")?;
        let filter: HashSet<ShortId> = nodes.iter().copied().collect();
        let keep = |n: &ShortId| filter.is_empty() || filter.contains(n);
        let h = self.height(v);
        let mut out = String::with_capacity(8192);
        out.push_str("{\"validators\":[");
        let mut first = true;
        let mut sep = |out: &mut String| {
            if !first {
                out.push(',');
            }
            first = false;
        };
        if subnet == EMPTY_ID {
            for (i, val) in self.st.validators.iter().enumerate() {
                if val.added_height > h || !keep(&val.node_id) {
                    continue;
                }
                sep(&mut out);
                let _ = write!(
                    out,
                    "{{\"txID\":\"{}\",\"startTime\":\"{}\",\"endTime\":\"{}\",\"weight\":\"{}\",\"nodeID\":\"{}\",\"validationRewardOwner\":",
                    id_str(&val.tx_id), val.start, val.end, val.weight, node_id_str(&val.node_id)
                );
                self.owners_json(&mut out, &val.reward_owner);
                out.push_str(",\"delegationRewardOwner\":");
                self.owners_json(&mut out, &val.delegation_owner);
                let connected = val.node_id == v.identity.short_id || i % 5 != 4;
                let up = 950_000 + local_rand(&v.identity.short_id, &val.node_id, 50_000);
                let _ = write!(
                    out,
                    ",\"potentialReward\":\"{}\",\"accruedDelegateeReward\":\"{}\",\"delegationFee\":\"{}\",\"uptime\":\"{}\",\"connected\":{connected}",
                    val.potential_reward,
                    val.accrued_delegatee_reward,
                    pct(u64::from(val.fee_ppm)),
                    pct(up)
                );
                if let Some(s) = &val.signer {
                    Self::signer_json(&mut out, s);
                }
                let dw: u64 = val.delegators.iter().map(|d| d.weight).sum();
                let _ = write!(
                    out,
                    ",\"delegatorCount\":\"{}\",\"delegatorWeight\":\"{dw}\"",
                    val.delegators.len()
                );
                if nodes.len() == 1 {
                    out.push_str(",\"delegators\":[");
                    for (j, d) in val.delegators.iter().enumerate() {
                        if j > 0 {
                            out.push(',');
                        }
                        let _ = write!(
                            out,
                            "{{\"txID\":\"{}\",\"startTime\":\"{}\",\"endTime\":\"{}\",\"weight\":\"{}\",\"nodeID\":\"{}\",\"rewardOwner\":",
                            id_str(&d.tx_id), d.start, d.end, d.weight, node_id_str(&d.node_id)
                        );
                        self.owners_json(&mut out, &d.reward_owner);
                        let _ = write!(out, ",\"potentialReward\":\"{}\"}}", d.potential_reward);
                    }
                    out.push(']');
                }
                out.push('}');
            }
        } else if let Some(s) = self.st.subnets.iter().find(|s| s.id == subnet) {
            match &s.l1 {
                None => {
                    for sv in s.validators.iter().filter(|x| keep(&x.node_id)) {
                        sep(&mut out);
                        let _ = write!(
                            out,
                            "{{\"txID\":\"{}\",\"startTime\":\"{}\",\"endTime\":\"{}\",\"weight\":\"{}\",\"nodeID\":\"{}\"}}",
                            id_str(&sv.tx_id), sv.start, sv.end, sv.weight, node_id_str(&sv.node_id)
                        );
                    }
                }
                Some(l1) => {
                    for lv in l1.validators.iter().filter(|x| keep(&x.node_id)) {
                        sep(&mut out);
                        self.l1_validator_fields(&mut out, lv, h);
                        out.push('}');
                    }
                }
            }
        }
        out.push_str("]}");
        Ok(out)
    }

    /// The fields an L1 validator shows in both `getCurrentValidators` and `getL1Validator`, from
    /// the opening brace up to `balance` (the caller adds its own fields and the closing brace).
    fn l1_validator_fields(&self, out: &mut String, lv: &super::state::L1Validator, h: u64) {
        let _ = write!(
            out,
            "{{\"nodeID\":\"{}\",\"weight\":\"{}\",\"startTime\":\"{}\",\"validationID\":\"{}\",\"publicKey\":\"{}\",\"remainingBalanceOwner\":",
            node_id_str(&lv.node_id), lv.weight, lv.start_time, id_str(&lv.validation_id), hex_plain(&lv.public_key)
        );
        self.owners_json(out, &lv.remaining_owner);
        out.push_str(",\"deactivationOwner\":");
        self.owners_json(out, &lv.deactivation_owner);
        let _ = write!(
            out,
            ",\"minNonce\":\"{}\",\"balance\":\"{}\"",
            lv.min_nonce,
            Self::l1_balance(lv.balance0, h)
        );
    }

    /// An L1 validator's balance at height `h`: it pays the continuous fee every block.
    fn l1_balance(balance0: u64, h: u64) -> u64 {
        balance0.saturating_sub(h.saturating_sub(GENESIS_TIP) * 1024)
    }

    fn l1_validator(&self, v: &View<'_>, p: Option<&Json>) -> Res {
        let a = Args::new(p)?;
        let id = a.id("validationID")?;
        let h = self.height(v);
        for s in &self.st.subnets {
            let Some(l1) = &s.l1 else { continue };
            if let Some(lv) = l1.validators.iter().find(|x| x.validation_id == id) {
                let mut out = String::with_capacity(1024);
                self.l1_validator_fields(&mut out, lv, h);
                let _ = write!(
                    out,
                    ",\"subnetID\":\"{}\",\"height\":\"{h}\"}}",
                    id_str(&s.id)
                );
                return Ok(out);
            }
        }
        Err(app(format!(
            "fetching L1 validator \"{}\": not found",
            id_str(&id)
        )))
    }

    fn pending_validators(&self, p: Option<&Json>) -> Res {
        let a = Args::new(p)?;
        let subnet = a.id("subnetID")?;
        let nodes: HashSet<ShortId> = a.node_ids("nodeIDs")?.into_iter().collect();
        let mut vals = Vec::new();
        let mut dels = Vec::new();
        if subnet == EMPTY_ID {
            for pv in &self.st.pending {
                if !nodes.is_empty() && !nodes.contains(&pv.node_id) {
                    continue;
                }
                let mut s = format!(
                    "{{\"txID\":\"{}\",\"startTime\":\"{}\",\"endTime\":\"{}\",\"stakeAmount\":\"{}\",\"nodeID\":\"{}\"",
                    id_str(&pv.tx_id), pv.start, pv.end, pv.stake, node_id_str(&pv.node_id)
                );
                if pv.is_delegator {
                    s.push('}');
                    dels.push(s);
                } else {
                    let _ = write!(
                        s,
                        ",\"delegationFee\":\"{}\",\"connected\":false",
                        pct(u64::from(pv.fee_ppm))
                    );
                    if let Some(sg) = &pv.signer {
                        Self::signer_json(&mut s, sg);
                    }
                    s.push('}');
                    vals.push(s);
                }
            }
        }
        Ok(format!(
            "{{\"validators\":[{}],\"delegators\":[{}]}}",
            vals.join(","),
            dels.join(",")
        ))
    }

    fn max_stake_amount(&self, v: &View<'_>, p: Option<&Json>) -> Res {
        let a = Args::new(p)?;
        let subnet = a.id("subnetID")?;
        let node = a.node_id("nodeID")?;
        let start = a.uint("startTime", u64::MAX)?;
        let end = a.uint("endTime", u64::MAX)?;
        if start > end {
            return Err(app("start time must be before end time"));
        }
        if start < self.time_at(self.height(v)) {
            return Err(app("start time must be in the future"));
        }
        let mut amount = 0u64;
        if subnet == EMPTY_ID {
            if let Some(val) = self.st.validators.iter().find(|x| x.node_id == node) {
                if val.start <= end && start <= val.end {
                    amount = val.weight
                        + val
                            .delegators
                            .iter()
                            .filter(|d| d.start <= end && start <= d.end)
                            .map(|d| d.weight)
                            .sum::<u64>();
                }
            }
        } else if let Some(s) = self.st.subnets.iter().find(|s| s.id == subnet) {
            amount = s
                .validators
                .iter()
                .find(|x| x.node_id == node && x.start <= end && start <= x.end)
                .map_or(0, |x| x.weight);
        }
        Ok(format!("{{\"amount\":\"{amount}\"}}"))
    }

    fn total_stake(&self, v: &View<'_>, p: Option<&Json>) -> Res {
        let a = Args::new(p)?;
        let subnet = a.id("subnetID")?;
        let h = self.height(v);
        let total: u64 = self
            .set_at(&subnet, h)
            .map_or(0, |s| s.values().map(|x| x.1).sum());
        if subnet == EMPTY_ID {
            Ok(format!("{{\"stake\":\"{total}\",\"weight\":\"{total}\"}}"))
        } else {
            Ok(format!("{{\"weight\":\"{total}\"}}"))
        }
    }

    // -----------------------------------------------------------------------------------------
    // balances and UTXOs

    fn parse_addrs(&self, list: &[&str]) -> Result<Vec<ShortId>, CallError> {
        list.iter()
            .map(|s| {
                parse_address(self.hrp(), s)
                    .map_err(|e| app(format!("couldn't parse address {}: {e}", go_quote(s))))
            })
            .collect()
    }

    fn get_balance(&self, v: &View<'_>, p: Option<&Json>) -> Res {
        let a = Args::new(p)?;
        let list = a.strings("addresses")?;
        let mut addrs = self.parse_addrs(&list)?;
        addrs.sort();
        addrs.dedup();
        let h = self.height(v);
        let now = self.time_at(h);
        let (mut unlocked, mut locked) = (0u64, 0u64);
        let mut seen = HashSet::new();
        let mut ids = Vec::new();
        for addr in &addrs {
            for u in self.st.utxos_of(addr, h) {
                if !seen.insert(u.id) {
                    continue;
                }
                if u.out.owners.locktime > now {
                    locked += u.out.amount;
                } else {
                    unlocked += u.out.amount;
                }
                ids.push(format!(
                    "{{\"txID\":\"{}\",\"outputIndex\":{}}}",
                    id_str(&u.tx_id),
                    u.index
                ));
            }
        }
        let asset = id_str(&self.st.net.avax);
        let map = |n: u64| {
            if n == 0 {
                "{}".to_string()
            } else {
                format!("{{\"{asset}\":\"{n}\"}}")
            }
        };
        let utxo_ids = if ids.is_empty() {
            "null".to_string()
        } else {
            format!("[{}]", ids.join(","))
        };
        Ok(format!(
            "{{\"balance\":\"{}\",\"unlocked\":\"{unlocked}\",\"lockedStakeable\":\"0\",\"lockedNotStakeable\":\"{locked}\",\"balances\":{},\"unlockeds\":{},\"lockedStakeables\":{{}},\"lockedNotStakeables\":{},\"utxoIDs\":{utxo_ids}}}",
            unlocked + locked,
            map(unlocked + locked),
            map(unlocked),
            map(locked)
        ))
    }

    fn get_utxos(&self, v: &View<'_>, p: Option<&Json>) -> Res {
        let a = Args::new(p)?;
        let list = a.strings("addresses")?;
        let source = a.string("sourceChain")?;
        let limit = a.uint("limit", u64::from(u32::MAX))? as usize;
        let (start_addr, start_utxo) = a.index("startIndex")?;
        let enc = a.encoding()?;
        if list.is_empty() {
            return Err(app("no addresses provided"));
        }
        if list.len() > MAX_PAGE {
            return Err(app(format!(
                "number of addresses given, {}, exceeds maximum, {MAX_PAGE}",
                list.len()
            )));
        }
        let atomic = if source.is_empty() {
            false
        } else {
            match self.running_chain(source) {
                Some(id) => id != EMPTY_ID,
                None => {
                    return Err(app(format!(
                        "problem parsing source chainID {}: there is no ID with alias: {source}",
                        go_quote(source)
                    )))
                }
            }
        };
        let mut addrs = self.parse_addrs(&list)?;
        addrs.sort();
        addrs.dedup();
        let start_addr = if start_addr.is_empty() {
            None
        } else {
            Some(parse_address(self.hrp(), start_addr).map_err(|e| {
                app(format!(
                    "couldn't parse start index address {}: {e}",
                    go_quote(start_addr)
                ))
            })?)
        };
        let start_utxo = if start_utxo.is_empty() {
            EMPTY_ID
        } else {
            parse_id(start_utxo)
                .map_err(|e| app(format!("couldn't parse start index utxo: {e}")))?
        };
        let limit = if limit == 0 || limit > MAX_PAGE {
            MAX_PAGE
        } else {
            limit
        };
        let h = self.height(v);
        let mut found: Vec<Utxo> = Vec::new();
        let mut seen = HashSet::new();
        let mut last_addr = start_addr.unwrap_or([0; 20]);
        let mut last_utxo = start_utxo;
        'outer: for addr in &addrs {
            let mut from = EMPTY_ID;
            if let Some(sa) = &start_addr {
                match addr.cmp(sa) {
                    std::cmp::Ordering::Less => continue,
                    std::cmp::Ordering::Equal => from = start_utxo,
                    std::cmp::Ordering::Greater => {}
                }
            }
            last_addr = *addr;
            if atomic {
                continue;
            }
            // The start UTXO itself was returned by the previous page (`UTXOIDs` skips it).
            for u in self.st.utxos_of(addr, h) {
                if from != EMPTY_ID && u.id <= from {
                    continue;
                }
                last_utxo = u.id;
                if !seen.insert(u.id) {
                    continue;
                }
                found.push(u.into_owned());
                if found.len() >= limit {
                    break 'outer;
                }
            }
        }
        let mut out = String::with_capacity(64 + found.len() * 200);
        let _ = write!(out, "{{\"numFetched\":\"{}\",\"utxos\":[", found.len());
        for (i, u) in found.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let s = encode(enc, &utxo_bytes(&u.tx_id, u.index, &u.out)).ok_or_else(|| {
                app(format!(
                    "couldn't encode UTXO {} as string: invalid encoding",
                    id_str(&u.id)
                ))
            })?;
            let _ = write!(out, "\"{s}\"");
        }
        let _ = write!(
            out,
            "],\"endIndex\":{{\"address\":\"{}\",\"utxo\":\"{}\"}},\"encoding\":\"{}\"}}",
            address_str(self.hrp(), &last_addr),
            id_str(&last_utxo),
            enc.name()
        );
        Ok(out)
    }

    fn get_stake(&self, _v: &View<'_>, p: Option<&Json>) -> Res {
        let a = Args::new(p)?;
        let list = a.strings("addresses")?;
        let validators_only = a.boolean("validatorsOnly")?;
        let enc = a.encoding()?;
        if list.len() > 256 {
            return Err(app(format!(
                "{} addresses provided but this method can take at most 256",
                list.len()
            )));
        }
        let addrs: HashSet<ShortId> = self.parse_addrs(&list)?.into_iter().collect();
        let owned = |o: &Owners| o.addrs.iter().any(|x| addrs.contains(x));
        let mut staked = 0u64;
        let mut outs = Vec::new();
        for val in &self.st.validators {
            if owned(&val.stake.owners) {
                staked += val.stake.amount;
                outs.push(output_bytes(&val.stake));
            }
            if !validators_only {
                for d in val.delegators.iter().filter(|d| owned(&d.stake.owners)) {
                    staked += d.stake.amount;
                    outs.push(output_bytes(&d.stake));
                }
            }
        }
        let encoded = outs
            .iter()
            .map(|b| encode(enc, b).map(|s| format!("\"{s}\"")))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| app("couldn't encode staked output as string: invalid encoding"))?;
        let stakeds = if staked == 0 {
            "{}".to_string()
        } else {
            format!("{{\"{}\":\"{staked}\"}}", id_str(&self.st.net.avax))
        };
        Ok(format!(
            "{{\"staked\":\"{staked}\",\"stakeds\":{stakeds},\"stakedOutputs\":[{}],\"encoding\":\"{}\"}}",
            encoded.join(","),
            enc.name()
        ))
    }

    fn reward_utxos(&self, p: Option<&Json>) -> Res {
        let a = Args::new(p)?;
        let id = a.id("txID")?;
        let enc = a.encoding()?;
        let mut list = Vec::new();
        if let Some(e) = self.st.ended.iter().find(|e| e.tx_id == id) {
            for &i in &e.rewards {
                let u = &self.st.utxos[i as usize];
                let s = encode(enc, &utxo_bytes(&u.tx_id, u.index, &u.out)).ok_or_else(|| {
                    app(format!(
                        "couldn't encode UTXO {} as string: invalid encoding",
                        id_str(&u.id)
                    ))
                })?;
                list.push(format!("\"{s}\""));
            }
        }
        Ok(format!(
            "{{\"numFetched\":\"{}\",\"utxos\":[{}],\"encoding\":\"{}\"}}",
            list.len(),
            list.join(","),
            enc.name()
        ))
    }
}

/// Exposed for tests: the state behind a chain.
impl Chain {
    /// The deterministic state (read-only), for tests and tools.
    pub fn state(&self) -> &State {
        &self.st
    }
}
