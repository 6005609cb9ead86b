//! The chain's genesis state and block production, all derived deterministically from the seed:
//! network constants, primary validators (with delegators and BLS signers), stakers whose period
//! ended (with reward UTXOs), permissioned subnets, a converted L1 with its validators, blockchains,
//! addresses and their UTXOs (one address holds more than 2,500), and the block history.
//!
//! Blocks are not stored: each keeps a small [`BlockMeta`] (time, ID, the "hot wallet" UTXO it
//! spends, issued txs) and its bytes are regenerated on demand by [`State::make_block`], so memory
//! grows by ~200 bytes per block.

use std::collections::HashMap;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::codec::{hash_parts, parse_id, sha256, Id, ShortId, EMPTY_ID};
use super::tx::{utxo_id, BaseTx, Block, Owners, TransferIn, TransferOut, Tx, Unsigned};

/// Height of the last block built at genesis (the history reachable from the start).
pub const GENESIS_TIP: u64 = 1000;
/// Chain time of the genesis tip (2025-11-19T16:00:00Z); earlier blocks are 20 s apart.
pub const TIP_TIME: u64 = 1_763_568_000;
/// Number of devnode identities (indexes 0..) that are primary validators.
pub const NODE_VALIDATORS: u32 = 5;
/// UTXOs held by the big address.
pub const BIG_UTXOS: u32 = 2600;
const DAY: u64 = 86_400;
const AVAX: u64 = 1_000_000_000;

/// subnet-evm's VM ID.
pub const SUBNET_EVM_ID: &str = "srEXiWaHuhNyGwPUi444Tu47ZEDwxTWrbQiuD7FmgSAQ6X7Dy";
/// avm's VM ID.
pub const AVM_ID: &str = "jvYyfQTxGMJLuGWa55kdP2p2zSUYsQ5Raupu4TW34ZAUBAbtq";
/// evm's VM ID.
pub const EVM_ID: &str = "mgj786NP7uDwBCcq6YwThhaN8FLyybkCa4zBWTQbNgmK6k9A6";
/// platformvm's VM ID.
pub const PLATFORM_VM_ID: &str = "rWhpuQPF1kb72esV2momhMuTYGkEb1oL29pt2EBXWmSy4kxnT";

/// Per-network constants.
#[derive(Debug, Clone)]
pub struct Net {
    pub network_id: u32,
    pub name: String,
    pub hrp: &'static str,
    pub x_chain: Id,
    pub c_chain: Id,
    pub avax: Id,
}

impl Net {
    fn new(network_id: u32, seed: u64) -> Net {
        let known = |s: &str| parse_id(s).unwrap_or_else(|_| sha256(s.as_bytes()));
        let derived = |tag: &str| {
            hash_parts(&[
                b"net",
                &network_id.to_be_bytes(),
                &seed.to_be_bytes(),
                tag.as_bytes(),
            ])
        };
        let (name, hrp, x, c, avax) = match network_id {
            1 => (
                "mainnet".to_string(),
                "avax",
                known("2oYMBNV4eNHyqk2fjjV5nVQLDbtmNJzq5s3qs3Lo6ftnC6FByM"),
                known("2q9e4r6Mu3U68nU1fYjgbR6JvwrRx36CohpAX5UQxse55x1Q5"),
                known("FvwEAhmxKfeiG8SnEvq42hc6whRyY3EFYAvebMqDNDGCgxN5Z"),
            ),
            5 => (
                "fuji".to_string(),
                "fuji",
                known("2JVSBoinj9C2J33VntvzYtVJNZdN2NKiwwKjcumHUWEb5DbBrm"),
                known("yH8D7ThNJkxmtkuv2jgBa4P1Rn3Qpr4pPr7QYNfcdoS6k6HWp"),
                known("U8iRqJoiJm8xZHAacmvYyZVwqQx6uDNtQeP3CQ6fcgQk3JqnK"),
            ),
            12345 => (
                "local".to_string(),
                "local",
                derived("X"),
                derived("C"),
                derived("AVAX"),
            ),
            id => (
                format!("network-{id}"),
                "custom",
                derived("X"),
                derived("C"),
                derived("AVAX"),
            ),
        };
        Net {
            network_id,
            name,
            hrp,
            x_chain: x,
            c_chain: c,
            avax,
        }
    }
}

/// A BLS signer: compressed public key and proof of possession.
#[derive(Debug, Clone)]
pub struct Signer {
    pub public_key: [u8; 48],
    pub pop: [u8; 96],
}

impl Signer {
    /// Deterministic stand-in key material from `tag`.
    pub fn derive(tag: &[u8]) -> Signer {
        let mut public_key = [0u8; 48];
        let mut pop = [0u8; 96];
        for (i, chunk) in public_key
            .chunks_mut(32)
            .chain(pop.chunks_mut(32))
            .enumerate()
        {
            let h = hash_parts(&[b"bls", tag, &(i as u32).to_be_bytes()]);
            chunk.copy_from_slice(&h[..chunk.len()]);
        }
        public_key[0] = 0x80 | (public_key[0] & 0x1f);
        pop[0] = 0xa0 | (pop[0] & 0x1f);
        Signer { public_key, pop }
    }
}

/// A primary-network delegator.
#[derive(Debug, Clone)]
pub struct Delegator {
    pub tx_id: Id,
    pub node_id: ShortId,
    pub start: u64,
    pub end: u64,
    pub weight: u64,
    pub reward_owner: Owners,
    pub potential_reward: u64,
    pub stake: TransferOut,
}

/// A primary-network validator.
#[derive(Debug, Clone)]
pub struct Validator {
    pub tx_id: Id,
    pub node_id: ShortId,
    pub start: u64,
    pub end: u64,
    pub weight: u64,
    pub reward_owner: Owners,
    pub delegation_owner: Owners,
    pub potential_reward: u64,
    pub accrued_delegatee_reward: u64,
    /// Delegation fee in parts per million (20000 = 2%).
    pub fee_ppm: u32,
    pub signer: Option<Signer>,
    pub delegators: Vec<Delegator>,
    /// First height at which it is in the validator set.
    pub added_height: u64,
    pub stake: TransferOut,
}

impl Validator {
    /// Own stake plus delegations.
    pub fn total_weight(&self) -> u64 {
        self.weight + self.delegators.iter().map(|d| d.weight).sum::<u64>()
    }
}

/// A validator of a permissioned subnet.
#[derive(Debug, Clone)]
pub struct SubnetValidator {
    pub tx_id: Id,
    pub node_id: ShortId,
    pub start: u64,
    pub end: u64,
    pub weight: u64,
}

/// A validator of a converted L1.
#[derive(Debug, Clone)]
pub struct L1Validator {
    pub validation_id: Id,
    pub node_id: ShortId,
    pub public_key: [u8; 48],
    pub remaining_owner: Owners,
    pub deactivation_owner: Owners,
    pub start_time: u64,
    pub weight: u64,
    pub min_nonce: u64,
    /// Balance at the genesis tip; it pays the continuous fee every block after.
    pub balance0: u64,
}

/// Conversion facts of an L1.
#[derive(Debug, Clone)]
pub struct L1 {
    pub conversion_id: Id,
    pub manager_chain: Id,
    pub manager_address: [u8; 20],
    pub validators: Vec<L1Validator>,
}

/// A subnet (permissioned, or converted into an L1).
#[derive(Debug, Clone)]
pub struct Subnet {
    pub id: Id,
    pub owners: Owners,
    pub validators: Vec<SubnetValidator>,
    pub l1: Option<L1>,
}

/// A blockchain other than the P-chain.
#[derive(Debug, Clone)]
pub struct Blockchain {
    pub id: Id,
    pub name: String,
    pub subnet: Id,
    pub vm: Id,
}

/// A UTXO with the height that created it.
#[derive(Debug, Clone)]
pub struct Utxo {
    pub id: Id,
    pub tx_id: Id,
    pub index: u32,
    pub out: TransferOut,
    pub height: u64,
}

/// A staker whose period ended, and its reward UTXOs (indexes into [`State::utxos`]).
#[derive(Debug, Clone)]
pub struct Ended {
    pub tx_id: Id,
    pub rewards: Vec<u32>,
}

/// A pending staker served by the (removed) getPendingValidators.
#[derive(Debug, Clone)]
pub struct Pending {
    pub tx_id: Id,
    pub node_id: ShortId,
    pub start: u64,
    pub end: u64,
    pub stake: u64,
    pub fee_ppm: u32,
    pub signer: Option<Signer>,
    pub is_delegator: bool,
}

/// What is kept per block; the rest is regenerated.
#[derive(Debug, Clone)]
pub struct BlockMeta {
    pub time: u64,
    pub id: Id,
    /// The hot-wallet UTXO this block's first tx spends (tx ID, amount; output 0).
    pub hot_tx: Id,
    pub hot_amount: u64,
    /// Txs issued through issueTx and committed in this block.
    pub issued: Vec<Box<[u8]>>,
}

/// What producing a block yields.
pub struct Produced {
    pub block: Block,
    pub bytes: Vec<u8>,
    pub tx_ids: Vec<Id>,
    pub hot_out: (Id, u64),
    pub payment: Utxo,
}

/// The whole chain state.
pub struct State {
    pub seed: u64,
    pub net: Net,
    pub validators: Vec<Validator>,
    pub ended: Vec<Ended>,
    pub pending: Vec<Pending>,
    pub subnets: Vec<Subnet>,
    pub chains: Vec<Blockchain>,
    pub addrs: Vec<ShortId>,
    /// Private keys of `addrs` (the demo keystore user controls the first few).
    pub keys: Vec<[u8; 32]>,
    pub utxos: Vec<Utxo>,
    /// Per address: indexes into `utxos`, sorted by UTXO ID.
    pub by_addr: HashMap<ShortId, Vec<u32>>,
    pub blocks: Vec<BlockMeta>,
    pub block_index: HashMap<Id, u64>,
    /// Tx ID -> (height, index in block).
    pub tx_index: HashMap<Id, (u64, u32)>,
    /// The hot-wallet UTXO after the last block.
    pub hot: (Id, u64),
}

/// Index of the big address in [`State::addrs`].
pub const BIG_ADDR: usize = 0;
/// Index of the hot wallet address.
pub const HOT_ADDR: usize = 1;
/// Addresses the demo keystore user controls: `addrs[..DEMO_ADDRS]`.
pub const DEMO_ADDRS: usize = 4;
const N_ADDRS: usize = 64;
const FIRST_RECIPIENT: usize = 8;

fn h32(seed: u64, tag: &str, i: u64) -> Id {
    hash_parts(&[&seed.to_be_bytes(), tag.as_bytes(), &i.to_be_bytes()])
}

fn short(id: &Id) -> ShortId {
    let mut s = [0u8; 20];
    s.copy_from_slice(&id[..20]);
    s
}

fn owner(addr: ShortId) -> Owners {
    Owners {
        locktime: 0,
        threshold: 1,
        addrs: vec![addr],
    }
}

/// A node ID of identity `index` of a network seeded with `seed`.
pub fn identity_node_id(seed: u64, index: u32) -> ShortId {
    short(&h32(seed, "node", u64::from(index)))
}

/// Potential reward of `weight` staked for `secs` at ~8% a year.
fn reward(weight: u64, secs: u64) -> u64 {
    ((u128::from(weight) * 8 * u128::from(secs)) / (100 * 365 * u128::from(DAY))) as u64
}

impl State {
    /// Builds the genesis state and the first [`GENESIS_TIP`] blocks.
    pub fn genesis(network_id: u32, seed: u64) -> State {
        let net = Net::new(network_id, seed);
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x5eed_cafe);
        let keys: Vec<[u8; 32]> = (0..N_ADDRS as u64).map(|i| h32(seed, "key", i)).collect();
        let addrs: Vec<ShortId> = keys.iter().map(|k| short(&sha256(k))).collect();
        let mut st = State {
            seed,
            net,
            validators: Vec::new(),
            ended: Vec::new(),
            pending: Vec::new(),
            subnets: Vec::new(),
            chains: Vec::new(),
            addrs,
            keys,
            utxos: Vec::new(),
            by_addr: HashMap::new(),
            blocks: Vec::with_capacity(4096),
            block_index: HashMap::new(),
            tx_index: HashMap::new(),
            hot: (h32(seed, "hot-genesis", 0), 100_000_000 * AVAX),
        };
        st.build_validators(&mut rng);
        st.build_subnets(&mut rng);
        st.build_utxos(&mut rng);
        for h in 0..=GENESIS_TIP {
            let time = TIP_TIME - (GENESIS_TIP - h) * 20;
            st.produce(time, Vec::new());
        }
        st
    }

    fn addr_of(&self, rng: &mut SmallRng) -> ShortId {
        self.addrs[rng.gen_range(FIRST_RECIPIENT..N_ADDRS)]
    }

    fn build_validators(&mut self, rng: &mut SmallRng) {
        let avax = self.net.avax;
        let n_extra = 9u32;
        for i in 0..NODE_VALIDATORS + n_extra {
            let node_id = if i < NODE_VALIDATORS {
                identity_node_id(self.seed, i)
            } else {
                short(&h32(self.seed, "extra-node", u64::from(i)))
            };
            let start = TIP_TIME - rng.gen_range(30..300) * DAY;
            let end = TIP_TIME + rng.gen_range(730..1095) * DAY;
            let weight = rng.gen_range(2_000..3_000_000) * AVAX;
            let ro = self.addr_of(rng);
            let stake_owner = self.addr_of(rng);
            let mut delegators = Vec::new();
            for d in 0..rng.gen_range(0..4u64) {
                let dw = rng.gen_range(25..50_000) * AVAX;
                let ds = start + rng.gen_range(1..20) * DAY;
                let de = end - rng.gen_range(1..20) * DAY;
                let down = self.addr_of(rng);
                delegators.push(Delegator {
                    tx_id: h32(self.seed, "delegator", u64::from(i) * 16 + d),
                    node_id,
                    start: ds,
                    end: de,
                    weight: dw,
                    reward_owner: owner(down),
                    potential_reward: reward(dw, de - ds),
                    stake: TransferOut {
                        asset: avax,
                        amount: dw,
                        owners: owner(down),
                    },
                });
            }
            let added_height = if i < NODE_VALIDATORS + 4 {
                0
            } else {
                u64::from(i - NODE_VALIDATORS - 3) * 150
            };
            self.validators.push(Validator {
                tx_id: h32(self.seed, "validator", u64::from(i)),
                node_id,
                start,
                end,
                weight,
                reward_owner: owner(ro),
                delegation_owner: owner(ro),
                potential_reward: reward(weight, end - start),
                accrued_delegatee_reward: rng.gen_range(0..50) * AVAX / 10,
                fee_ppm: [20_000, 20_000, 50_000, 100_000, 35_000][rng.gen_range(0..5)],
                signer: (i % 7 != 6).then(|| Signer::derive(&node_id)),
                delegators,
                added_height,
                stake: TransferOut {
                    asset: avax,
                    amount: weight,
                    owners: owner(stake_owner),
                },
            });
        }
        // Pending stakers for the removed getPendingValidators.
        let pn = short(&h32(self.seed, "pending-node", 0));
        self.pending.push(Pending {
            tx_id: h32(self.seed, "pending-validator", 0),
            node_id: pn,
            start: TIP_TIME + 1500 * DAY,
            end: TIP_TIME + 1900 * DAY,
            stake: 2_500 * AVAX,
            fee_ppm: 20_000,
            signer: Some(Signer::derive(&pn)),
            is_delegator: false,
        });
        self.pending.push(Pending {
            tx_id: h32(self.seed, "pending-delegator", 0),
            node_id: self.validators[0].node_id,
            start: TIP_TIME + 1500 * DAY,
            end: TIP_TIME + 1600 * DAY,
            stake: 100 * AVAX,
            fee_ppm: 0,
            signer: None,
            is_delegator: true,
        });
    }

    fn build_subnets(&mut self, rng: &mut SmallRng) {
        let subnet_evm = parse_id(SUBNET_EVM_ID).unwrap_or(EMPTY_ID);
        let custom_vm = h32(self.seed, "vm", 0);
        let specs: [(&str, &str, Id); 3] = [
            ("permissioned-a", "Sentinel", subnet_evm),
            ("permissioned-b", "Harbor", custom_vm),
            ("l1", "Aurora", subnet_evm),
        ];
        for (k, (tag, chain_name, vm)) in specs.iter().enumerate() {
            let id = h32(self.seed, tag, 0);
            let chain_id = h32(self.seed, "chain", k as u64);
            self.chains.push(Blockchain {
                id: chain_id,
                name: (*chain_name).to_string(),
                subnet: id,
                vm: *vm,
            });
            let mut keys = vec![self.addrs[4 + k]];
            if k == 0 {
                keys.push(self.addrs[7]);
                keys.sort();
            }
            let owners = Owners {
                locktime: 0,
                threshold: 1,
                addrs: keys,
            };
            let mut validators = Vec::new();
            let mut l1 = None;
            if k < 2 {
                let members: Vec<usize> = if k == 0 {
                    (0..4).collect()
                } else {
                    vec![6, 8, 10]
                };
                for (j, vi) in members.into_iter().enumerate() {
                    let v = &self.validators[vi];
                    validators.push(SubnetValidator {
                        tx_id: h32(self.seed, "subnet-validator", (k * 16 + j) as u64),
                        node_id: v.node_id,
                        start: v.start + DAY,
                        end: v.end - DAY,
                        weight: rng.gen_range(20..100),
                    });
                }
            } else {
                let mut vs = Vec::new();
                for j in 0..4u64 {
                    let node_id = short(&h32(self.seed, "l1-node", j));
                    let ro = self.addr_of(rng);
                    vs.push(L1Validator {
                        validation_id: h32(self.seed, "validation", j),
                        node_id,
                        public_key: Signer::derive(&node_id).public_key,
                        remaining_owner: owner(ro),
                        deactivation_owner: owner(ro),
                        start_time: TIP_TIME - rng.gen_range(10..200) * DAY,
                        weight: rng.gen_range(20..100),
                        min_nonce: j % 2,
                        balance0: rng.gen_range(5_000..50_000) * AVAX,
                    });
                }
                let mut manager_address = [0u8; 20];
                manager_address.copy_from_slice(&h32(self.seed, "manager", 0)[..20]);
                l1 = Some(L1 {
                    conversion_id: h32(self.seed, "conversion", 0),
                    manager_chain: chain_id,
                    manager_address,
                    validators: vs,
                });
            }
            self.subnets.push(Subnet {
                id,
                owners,
                validators,
                l1,
            });
        }
    }

    /// Adds a UTXO to the set and to each owner's sorted index.
    pub fn add_utxo(&mut self, u: Utxo) -> u32 {
        let idx = self.utxos.len() as u32;
        for a in &u.out.owners.addrs {
            let list = self.by_addr.entry(*a).or_default();
            let utxos = &self.utxos;
            let pos = list
                .binary_search_by(|&j| utxos[j as usize].id.cmp(&u.id))
                .unwrap_or_else(|p| p);
            list.insert(pos, idx);
        }
        self.utxos.push(u);
        idx
    }

    fn new_utxo(&self, tx_id: Id, index: u32, amount: u64, owners: Owners) -> Utxo {
        Utxo {
            id: utxo_id(&tx_id, index),
            tx_id,
            index,
            out: TransferOut {
                asset: self.net.avax,
                amount,
                owners,
            },
            height: 0,
        }
    }

    fn build_utxos(&mut self, rng: &mut SmallRng) {
        let big = self.addrs[BIG_ADDR];
        let shared = self.addrs[2];
        for k in 0..BIG_UTXOS {
            let tx = h32(self.seed, "genesis-utxo", u64::from(k / 100));
            let mut addrs = vec![big];
            if k % 50 == 7 {
                addrs.push(shared);
                addrs.sort();
            }
            let amount = rng.gen_range(1..5_000) * AVAX / 10;
            let u = self.new_utxo(
                tx,
                k % 100,
                amount,
                Owners {
                    locktime: 0,
                    threshold: 1,
                    addrs,
                },
            );
            self.add_utxo(u);
        }
        for (i, a) in self.addrs.clone().into_iter().enumerate().skip(2) {
            for k in 0..rng.gen_range(1..6u32) {
                let tx = h32(self.seed, "alloc", i as u64);
                let locktime = if i == 3 && k == 0 {
                    TIP_TIME + 3000 * DAY
                } else {
                    0
                };
                let amount = rng.gen_range(1..100_000) * AVAX;
                let u = self.new_utxo(
                    tx,
                    k,
                    amount,
                    Owners {
                        locktime,
                        threshold: 1,
                        addrs: vec![a],
                    },
                );
                self.add_utxo(u);
            }
        }
        // Stakers whose period ended before the genesis tip, with their reward UTXOs.
        for i in 0..6u64 {
            let tx_id = h32(self.seed, "ended-staker", i);
            let ro = self.addr_of(rng);
            let mut rewards = Vec::new();
            for k in 0..(1 + (i % 2) as u32) {
                let amount = rng.gen_range(1..900) * AVAX;
                let u = self.new_utxo(tx_id, 1 + k, amount, owner(ro));
                rewards.push(self.add_utxo(u));
            }
            self.ended.push(Ended { tx_id, rewards });
        }
    }

    /// Builds block `height` from what its [`BlockMeta`] keeps (pure).
    pub fn make_block(
        &self,
        height: u64,
        time: u64,
        parent: Id,
        hot: (Id, u64),
        issued: &[Box<[u8]>],
    ) -> Produced {
        let mut rng = SmallRng::seed_from_u64(u64::from_be_bytes(
            h32(self.seed, "block", height)[..8]
                .try_into()
                .unwrap_or([0; 8]),
        ));
        let avax = self.net.avax;
        let base = |outs: Vec<TransferOut>, ins: Vec<TransferIn>| BaseTx {
            network_id: self.net.network_id,
            blockchain_id: EMPTY_ID,
            outs,
            ins,
            memo: Vec::new(),
        };
        let pay = rng.gen_range(1..100) * AVAX;
        let fee = 1_000_000 + rng.gen_range(0..100_000);
        let change = hot.1.saturating_sub(pay + fee);
        let recipient = self.addrs[rng.gen_range(FIRST_RECIPIENT..N_ADDRS)];
        let hot_key = self.keys[HOT_ADDR];
        let mut txs = vec![Tx::sign(
            Unsigned::Base(base(
                vec![
                    TransferOut {
                        asset: avax,
                        amount: change,
                        owners: owner(self.addrs[HOT_ADDR]),
                    },
                    TransferOut {
                        asset: avax,
                        amount: pay,
                        owners: owner(recipient),
                    },
                ],
                vec![TransferIn {
                    tx_id: hot.0,
                    index: 0,
                    asset: avax,
                    amount: hot.1,
                    sig_indices: vec![0],
                }],
            )),
            &hot_key,
        )];
        let rand_in = |rng: &mut SmallRng, amount: u64| TransferIn {
            tx_id: h32(self.seed, "in", rng.gen()),
            index: rng.gen_range(0..3),
            asset: avax,
            amount,
            sig_indices: vec![0],
        };
        let kind = rng.gen_range(0..6u32);
        let amount = rng.gen_range(2..500) * AVAX;
        let someone = self.addrs[rng.gen_range(FIRST_RECIPIENT..N_ADDRS)];
        let other_chain = if rng.gen() {
            self.net.x_chain
        } else {
            self.net.c_chain
        };
        let key = self.keys[FIRST_RECIPIENT];
        match kind {
            0 | 1 => {
                let inp = rand_in(&mut rng, amount + fee);
                txs.push(Tx::sign(
                    Unsigned::Export {
                        base: base(Vec::new(), vec![inp]),
                        dest_chain: other_chain,
                        exported: vec![TransferOut {
                            asset: avax,
                            amount,
                            owners: owner(someone),
                        }],
                    },
                    &key,
                ));
            }
            2 | 3 => {
                let inp = rand_in(&mut rng, amount + fee);
                txs.push(Tx::sign(
                    Unsigned::Import {
                        base: base(
                            vec![TransferOut {
                                asset: avax,
                                amount,
                                owners: owner(someone),
                            }],
                            Vec::new(),
                        ),
                        source_chain: other_chain,
                        imported: vec![inp],
                    },
                    &key,
                ));
            }
            4 => {
                let v = &self.validators[rng.gen_range(0..self.validators.len())];
                let w = rng.gen_range(25..2_000) * AVAX;
                let inp = rand_in(&mut rng, w + fee);
                txs.push(Tx::sign(
                    Unsigned::AddDelegator {
                        base: base(Vec::new(), vec![inp]),
                        node_id: v.node_id,
                        start: time,
                        end: time + 14 * DAY,
                        weight: w,
                        subnet: EMPTY_ID,
                        stake: vec![TransferOut {
                            asset: avax,
                            amount: w,
                            owners: owner(someone),
                        }],
                        rewards_owner: owner(someone),
                    },
                    &key,
                ));
            }
            _ => {}
        }
        for raw in issued {
            if let Ok(tx) = Tx::parse(raw) {
                txs.push(tx);
            }
        }
        let tx_ids: Vec<Id> = txs.iter().map(|t| sha256(&t.bytes())).collect();
        let block = Block {
            time,
            parent,
            height,
            txs,
        };
        let bytes = block.bytes();
        let mut payment = self.new_utxo(tx_ids[0], 1, pay, owner(recipient));
        payment.height = height;
        Produced {
            block,
            bytes,
            hot_out: (tx_ids[0], change),
            tx_ids,
            payment,
        }
    }

    /// Rebuilds an accepted block from its metadata.
    pub fn block_at(&self, height: u64) -> Option<Produced> {
        let meta = self.blocks.get(height as usize)?;
        let parent = if height == 0 {
            EMPTY_ID
        } else {
            self.blocks[height as usize - 1].id
        };
        Some(self.make_block(
            height,
            meta.time,
            parent,
            (meta.hot_tx, meta.hot_amount),
            &meta.issued,
        ))
    }

    /// Appends the next block (at chain time `time`, never before its parent) with `issued` txs;
    /// returns the IDs of its txs.
    pub fn produce(&mut self, time: u64, issued: Vec<Box<[u8]>>) -> Vec<Id> {
        let height = self.blocks.len() as u64;
        let (parent, time) = match self.blocks.last() {
            // Banff: a block's time is never before its parent's (equal is allowed).
            Some(b) => (b.id, time.max(b.time)),
            None => (EMPTY_ID, time),
        };
        let p = self.make_block(height, time, parent, self.hot, &issued);
        let id = sha256(&p.bytes);
        self.blocks.push(BlockMeta {
            time,
            id,
            hot_tx: self.hot.0,
            hot_amount: self.hot.1,
            issued,
        });
        self.block_index.insert(id, height);
        for (i, t) in p.tx_ids.iter().enumerate() {
            self.tx_index.insert(*t, (height, i as u32));
        }
        self.hot = p.hot_out;
        self.add_utxo(p.payment);
        p.tx_ids
    }

    /// The hot-wallet UTXO as of `height`.
    pub fn hot_at(&self, height: u64) -> (Id, u64) {
        match self.blocks.get(height as usize + 1) {
            Some(m) => (m.hot_tx, m.hot_amount),
            None => self.hot,
        }
    }

    /// A UTXO value for the hot wallet output `(tx, amount)`.
    pub fn hot_utxo(&self, hot: (Id, u64)) -> Utxo {
        self.new_utxo(hot.0, 0, hot.1, owner(self.addrs[HOT_ADDR]))
    }

    /// UTXOs of `addr` as of `height`, sorted by UTXO ID.
    pub fn utxos_of(&self, addr: &ShortId, height: u64) -> Vec<std::borrow::Cow<'_, Utxo>> {
        let mut out: Vec<std::borrow::Cow<'_, Utxo>> = self
            .by_addr
            .get(addr)
            .map(|l| {
                l.iter()
                    .map(|&i| &self.utxos[i as usize])
                    .filter(|u| u.height <= height)
                    .map(std::borrow::Cow::Borrowed)
                    .collect()
            })
            .unwrap_or_default();
        if *addr == self.addrs[HOT_ADDR] {
            let hot = self.hot_utxo(self.hot_at(height));
            let pos = out
                .binary_search_by(|u| u.id.cmp(&hot.id))
                .unwrap_or_else(|p| p);
            out.insert(pos, std::borrow::Cow::Owned(hot));
        }
        out
    }
}
