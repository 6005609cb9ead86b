//! The P-chain's binary formats (a faithful subset of avalanchego's linear codec: codec version
//! `u16`, type IDs `u32`, big-endian integers, `u32`-prefixed lists) and their JSON renderings.
//!
//! Transactions: BaseTx (0x22), ImportTx (0x11), ExportTx (0x12) and
//! AddPermissionlessDelegatorTx (0x1a) with secp256k1 transfer outputs (7) / inputs (5) and
//! credentials (9). Blocks: Banff standard block (0x20). UTXOs: codec version + UTXO ID + output.
//! Tx ID = sha256(signed tx bytes); block ID = sha256(block bytes).

use std::fmt::Write as _;

use super::codec::{address_str, hex_plain, id_str, node_id_str, sha256, Id, ShortId};

/// secp256k1fx's ID (the `fxID` of every output and input in JSON).
pub const SECP_FX_ID: &str = "spdxUxVJQbX85MGxMHbKw1sHxMnSqJ3QBzDyDYEP3h6TLuxqQ";

const TYPE_TRANSFER_INPUT: u32 = 5;
const TYPE_TRANSFER_OUTPUT: u32 = 7;
const TYPE_CREDENTIAL: u32 = 9;
const TYPE_OUTPUT_OWNERS: u32 = 11;
const TYPE_IMPORT: u32 = 0x11;
const TYPE_EXPORT: u32 = 0x12;
const TYPE_ADD_DELEGATOR: u32 = 0x1a;
const TYPE_BASE: u32 = 0x22;
const TYPE_BANFF_STANDARD_BLOCK: u32 = 0x20;

/// Who may spend an output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owners {
    pub locktime: u64,
    pub threshold: u32,
    pub addrs: Vec<ShortId>,
}

/// A secp256k1 transfer output of an asset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferOut {
    pub asset: Id,
    pub amount: u64,
    pub owners: Owners,
}

/// A secp256k1 transfer input spending UTXO `(tx_id, index)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferIn {
    pub tx_id: Id,
    pub index: u32,
    pub asset: Id,
    pub amount: u64,
    pub sig_indices: Vec<u32>,
}

/// Fields every P-chain tx starts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseTx {
    pub network_id: u32,
    pub blockchain_id: Id,
    pub outs: Vec<TransferOut>,
    pub ins: Vec<TransferIn>,
    pub memo: Vec<u8>,
}

/// The unsigned part of a tx.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unsigned {
    Base(BaseTx),
    Import {
        base: BaseTx,
        source_chain: Id,
        imported: Vec<TransferIn>,
    },
    Export {
        base: BaseTx,
        dest_chain: Id,
        exported: Vec<TransferOut>,
    },
    AddDelegator {
        base: BaseTx,
        node_id: ShortId,
        start: u64,
        end: u64,
        weight: u64,
        subnet: Id,
        stake: Vec<TransferOut>,
        rewards_owner: Owners,
    },
}

impl Unsigned {
    /// The common fields.
    pub fn base(&self) -> &BaseTx {
        match self {
            Unsigned::Base(b) => b,
            Unsigned::Import { base, .. }
            | Unsigned::Export { base, .. }
            | Unsigned::AddDelegator { base, .. } => base,
        }
    }
}

/// A signed tx: unsigned part plus one credential (list of 65-byte signatures) per input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tx {
    pub unsigned: Unsigned,
    pub creds: Vec<Vec<[u8; 65]>>,
}

// ---------------------------------------------------------------------------------------------
// Writing

struct W(Vec<u8>);

impl W {
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }
    fn len(&mut self, n: usize) {
        self.u32(n as u32);
    }
    fn owners_body(&mut self, o: &Owners) {
        self.u64(o.locktime);
        self.u32(o.threshold);
        self.len(o.addrs.len());
        for a in &o.addrs {
            self.bytes(a);
        }
    }
    fn out(&mut self, o: &TransferOut) {
        self.bytes(&o.asset);
        self.u32(TYPE_TRANSFER_OUTPUT);
        self.u64(o.amount);
        self.owners_body(&o.owners);
    }
    fn outs(&mut self, outs: &[TransferOut]) {
        self.len(outs.len());
        for o in outs {
            self.out(o);
        }
    }
    fn ins(&mut self, ins: &[TransferIn]) {
        self.len(ins.len());
        for i in ins {
            self.bytes(&i.tx_id);
            self.u32(i.index);
            self.bytes(&i.asset);
            self.u32(TYPE_TRANSFER_INPUT);
            self.u64(i.amount);
            self.len(i.sig_indices.len());
            for s in &i.sig_indices {
                self.u32(*s);
            }
        }
    }
    fn base(&mut self, b: &BaseTx) {
        self.u32(b.network_id);
        self.bytes(&b.blockchain_id);
        self.outs(&b.outs);
        self.ins(&b.ins);
        self.len(b.memo.len());
        self.bytes(&b.memo);
    }
    fn unsigned(&mut self, u: &Unsigned) {
        match u {
            Unsigned::Base(b) => {
                self.u32(TYPE_BASE);
                self.base(b);
            }
            Unsigned::Import {
                base,
                source_chain,
                imported,
            } => {
                self.u32(TYPE_IMPORT);
                self.base(base);
                self.bytes(source_chain);
                self.ins(imported);
            }
            Unsigned::Export {
                base,
                dest_chain,
                exported,
            } => {
                self.u32(TYPE_EXPORT);
                self.base(base);
                self.bytes(dest_chain);
                self.outs(exported);
            }
            Unsigned::AddDelegator {
                base,
                node_id,
                start,
                end,
                weight,
                subnet,
                stake,
                rewards_owner,
            } => {
                self.u32(TYPE_ADD_DELEGATOR);
                self.base(base);
                self.bytes(node_id);
                self.u64(*start);
                self.u64(*end);
                self.u64(*weight);
                self.bytes(subnet);
                self.outs(stake);
                self.u32(TYPE_OUTPUT_OWNERS);
                self.owners_body(rewards_owner);
            }
        }
    }
    fn signed(&mut self, tx: &Tx) {
        self.unsigned(&tx.unsigned);
        self.len(tx.creds.len());
        for c in &tx.creds {
            self.u32(TYPE_CREDENTIAL);
            self.len(c.len());
            for s in c {
                self.bytes(s);
            }
        }
    }
}

impl Tx {
    /// The unsigned bytes (what the credentials sign): codec version + unsigned tx.
    pub fn unsigned_bytes(unsigned: &Unsigned) -> Vec<u8> {
        let mut w = W(Vec::with_capacity(256));
        w.u16(0);
        w.unsigned(unsigned);
        w.0
    }

    /// The signed tx bytes: codec version + unsigned tx + credentials.
    pub fn bytes(&self) -> Vec<u8> {
        let mut w = W(Vec::with_capacity(384));
        w.u16(0);
        w.signed(self);
        w.0
    }

    /// Signs `unsigned` with deterministic stand-in signatures (one per input).
    pub fn sign(unsigned: Unsigned, key: &[u8]) -> Tx {
        let msg = sha256(&Tx::unsigned_bytes(&unsigned));
        let n = unsigned.base().ins.len()
            + match &unsigned {
                Unsigned::Import { imported, .. } => imported.len(),
                _ => 0,
            };
        let creds = (0..n)
            .map(|i| {
                let a = sha256(&[&msg[..], key, &(i as u32).to_be_bytes(), b"r"].concat());
                let b = sha256(&[&msg[..], key, &(i as u32).to_be_bytes(), b"s"].concat());
                let mut sig = [0u8; 65];
                sig[..32].copy_from_slice(&a);
                sig[32..64].copy_from_slice(&b);
                sig[64] = a[0] & 1;
                vec![sig]
            })
            .collect();
        Tx { unsigned, creds }
    }
}

// ---------------------------------------------------------------------------------------------
// Reading

/// Why bytes do not parse as a tx.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub String);

struct R<'a> {
    b: &'a [u8],
    pos: usize,
}

type PResult<T> = Result<T, ParseError>;

const MAX_LIST: usize = 1 << 16;

impl<'a> R<'a> {
    fn take(&mut self, n: usize) -> PResult<&'a [u8]> {
        if self.b.len() - self.pos < n {
            return Err(ParseError("insufficient length for input".into()));
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u16(&mut self) -> PResult<u16> {
        let s = self.take(2)?;
        Ok(u16::from_be_bytes([s[0], s[1]]))
    }
    fn u32(&mut self) -> PResult<u32> {
        let s = self.take(4)?;
        Ok(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn u64(&mut self) -> PResult<u64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(a))
    }
    fn id(&mut self) -> PResult<Id> {
        let mut a = [0u8; 32];
        a.copy_from_slice(self.take(32)?);
        Ok(a)
    }
    fn short(&mut self) -> PResult<ShortId> {
        let mut a = [0u8; 20];
        a.copy_from_slice(self.take(20)?);
        Ok(a)
    }
    fn len(&mut self, min_item: usize) -> PResult<usize> {
        let n = self.u32()? as usize;
        if n > MAX_LIST || n.saturating_mul(min_item) > self.b.len() - self.pos {
            return Err(ParseError(format!("slice length {n} is too large")));
        }
        Ok(n)
    }
    fn type_id(&mut self, want: u32) -> PResult<()> {
        let t = self.u32()?;
        if t != want {
            return Err(ParseError(format!(
                "couldn't unmarshal interface: unknown type ID {t}"
            )));
        }
        Ok(())
    }
    fn owners_body(&mut self) -> PResult<Owners> {
        let locktime = self.u64()?;
        let threshold = self.u32()?;
        let n = self.len(20)?;
        let addrs = (0..n).map(|_| self.short()).collect::<PResult<Vec<_>>>()?;
        if threshold as usize > addrs.len() || (threshold == 0 && !addrs.is_empty()) {
            return Err(ParseError("output is unoptimized".into()));
        }
        Ok(Owners {
            locktime,
            threshold,
            addrs,
        })
    }
    fn outs(&mut self) -> PResult<Vec<TransferOut>> {
        let n = self.len(32 + 4 + 8 + 8 + 4 + 4)?;
        (0..n)
            .map(|_| {
                let asset = self.id()?;
                self.type_id(TYPE_TRANSFER_OUTPUT)?;
                let amount = self.u64()?;
                let owners = self.owners_body()?;
                Ok(TransferOut {
                    asset,
                    amount,
                    owners,
                })
            })
            .collect()
    }
    fn ins(&mut self) -> PResult<Vec<TransferIn>> {
        let n = self.len(32 + 4 + 32 + 4 + 8 + 4)?;
        (0..n)
            .map(|_| {
                let tx_id = self.id()?;
                let index = self.u32()?;
                let asset = self.id()?;
                self.type_id(TYPE_TRANSFER_INPUT)?;
                let amount = self.u64()?;
                let k = self.len(4)?;
                let sig_indices = (0..k).map(|_| self.u32()).collect::<PResult<Vec<_>>>()?;
                Ok(TransferIn {
                    tx_id,
                    index,
                    asset,
                    amount,
                    sig_indices,
                })
            })
            .collect()
    }
    fn base(&mut self) -> PResult<BaseTx> {
        let network_id = self.u32()?;
        let blockchain_id = self.id()?;
        let outs = self.outs()?;
        let ins = self.ins()?;
        let m = self.len(1)?;
        let memo = self.take(m)?.to_vec();
        Ok(BaseTx {
            network_id,
            blockchain_id,
            outs,
            ins,
            memo,
        })
    }
    fn unsigned(&mut self) -> PResult<Unsigned> {
        let t = self.u32()?;
        Ok(match t {
            TYPE_BASE => Unsigned::Base(self.base()?),
            TYPE_IMPORT => {
                let base = self.base()?;
                let source_chain = self.id()?;
                let imported = self.ins()?;
                Unsigned::Import {
                    base,
                    source_chain,
                    imported,
                }
            }
            TYPE_EXPORT => {
                let base = self.base()?;
                let dest_chain = self.id()?;
                let exported = self.outs()?;
                Unsigned::Export {
                    base,
                    dest_chain,
                    exported,
                }
            }
            TYPE_ADD_DELEGATOR => {
                let base = self.base()?;
                let node_id = self.short()?;
                let start = self.u64()?;
                let end = self.u64()?;
                let weight = self.u64()?;
                let subnet = self.id()?;
                let stake = self.outs()?;
                self.type_id(TYPE_OUTPUT_OWNERS)?;
                let rewards_owner = self.owners_body()?;
                Unsigned::AddDelegator {
                    base,
                    node_id,
                    start,
                    end,
                    weight,
                    subnet,
                    stake,
                    rewards_owner,
                }
            }
            other => {
                return Err(ParseError(format!(
                    "couldn't unmarshal interface: unknown type ID {other}"
                )))
            }
        })
    }
    fn signed(&mut self) -> PResult<Tx> {
        let unsigned = self.unsigned()?;
        let n = self.len(8)?;
        let creds = (0..n)
            .map(|_| {
                self.type_id(TYPE_CREDENTIAL)?;
                let k = self.len(65)?;
                (0..k)
                    .map(|_| {
                        let mut s = [0u8; 65];
                        s.copy_from_slice(self.take(65)?);
                        Ok(s)
                    })
                    .collect::<PResult<Vec<_>>>()
            })
            .collect::<PResult<Vec<_>>>()?;
        Ok(Tx { unsigned, creds })
    }
}

impl Tx {
    /// Parses signed tx bytes (codec version 0, no trailing bytes).
    pub fn parse(bytes: &[u8]) -> Result<Tx, ParseError> {
        let mut r = R { b: bytes, pos: 0 };
        let v = r.u16()?;
        if v != 0 {
            return Err(ParseError(format!("unknown codec version: {v}")));
        }
        let tx = r.signed()?;
        if r.pos != bytes.len() {
            return Err(ParseError(format!(
                "{} extra bytes after tx",
                bytes.len() - r.pos
            )));
        }
        Ok(tx)
    }
}

// ---------------------------------------------------------------------------------------------
// Blocks and UTXOs

/// A Banff standard block.
#[derive(Debug, Clone)]
pub struct Block {
    pub time: u64,
    pub parent: Id,
    pub height: u64,
    pub txs: Vec<Tx>,
}

impl Block {
    /// Block bytes: codec version, type, time, parent ID, height, txs.
    pub fn bytes(&self) -> Vec<u8> {
        let mut w = W(Vec::with_capacity(64 + 400 * self.txs.len()));
        w.u16(0);
        w.u32(TYPE_BANFF_STANDARD_BLOCK);
        w.u64(self.time);
        w.bytes(&self.parent);
        w.u64(self.height);
        w.len(self.txs.len());
        for tx in &self.txs {
            w.signed(tx);
        }
        w.0
    }
}

/// Bytes of a UTXO holding a transfer output.
pub fn utxo_bytes(tx_id: &Id, index: u32, out: &TransferOut) -> Vec<u8> {
    let mut w = W(Vec::with_capacity(128));
    w.u16(0);
    w.bytes(tx_id);
    w.u32(index);
    w.out(out);
    w.0
}

/// Bytes of a transferable output (stakedOutputs of getStake).
pub fn output_bytes(out: &TransferOut) -> Vec<u8> {
    let mut w = W(Vec::with_capacity(96));
    w.u16(0);
    w.out(out);
    w.0
}

/// The ID of UTXO `(tx_id, index)` (`ids.ID.Prefix`).
pub fn utxo_id(tx_id: &Id, index: u32) -> Id {
    let mut buf = [0u8; 40];
    buf[..8].copy_from_slice(&u64::from(index).to_be_bytes());
    buf[8..].copy_from_slice(tx_id);
    sha256(&buf)
}

// ---------------------------------------------------------------------------------------------
// JSON

/// Renders txs and blocks as avalanchego's `json` encoding.
pub struct JsonWriter<'a> {
    pub hrp: &'a str,
}

impl JsonWriter<'_> {
    fn owners(&self, out: &mut String, o: &Owners) {
        out.push_str("{\"addresses\":[");
        for (i, a) in o.addrs.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "\"{}\"", address_str(self.hrp, a));
        }
        let _ = write!(
            out,
            "],\"locktime\":{},\"threshold\":{}}}",
            o.locktime, o.threshold
        );
    }
    fn outs(&self, out: &mut String, outs: &[TransferOut]) {
        out.push('[');
        for (i, o) in outs.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(
                out,
                "{{\"assetID\":\"{}\",\"fxID\":\"{SECP_FX_ID}\",\"output\":{{\"addresses\":[",
                id_str(&o.asset)
            );
            for (j, a) in o.owners.addrs.iter().enumerate() {
                if j > 0 {
                    out.push(',');
                }
                let _ = write!(out, "\"{}\"", address_str(self.hrp, a));
            }
            let _ = write!(
                out,
                "],\"amount\":{},\"locktime\":{},\"threshold\":{}}}}}",
                o.amount, o.owners.locktime, o.owners.threshold
            );
        }
        out.push(']');
    }
    fn ins(&self, out: &mut String, ins: &[TransferIn]) {
        out.push('[');
        for (i, x) in ins.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(
                out,
                "{{\"txID\":\"{}\",\"outputIndex\":{},\"assetID\":\"{}\",\"fxID\":\"{SECP_FX_ID}\",\"input\":{{\"amount\":{},\"signatureIndices\":[",
                id_str(&x.tx_id),
                x.index,
                id_str(&x.asset),
                x.amount
            );
            for (j, s) in x.sig_indices.iter().enumerate() {
                if j > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{s}");
            }
            out.push_str("]}}");
        }
        out.push(']');
    }
    fn base_fields(&self, out: &mut String, b: &BaseTx) {
        let _ = write!(
            out,
            "\"networkID\":{},\"blockchainID\":\"{}\",\"outputs\":",
            b.network_id,
            id_str(&b.blockchain_id)
        );
        self.outs(out, &b.outs);
        out.push_str(",\"inputs\":");
        self.ins(out, &b.ins);
        let _ = write!(out, ",\"memo\":\"{}\"", hex_plain(&b.memo));
    }

    /// `{"unsignedTx":{…},"credentials":[…],"id":"…"}`.
    pub fn tx(&self, out: &mut String, tx: &Tx, id: &Id) {
        out.push_str("{\"unsignedTx\":{");
        match &tx.unsigned {
            Unsigned::Base(b) => self.base_fields(out, b),
            Unsigned::Import {
                base,
                source_chain,
                imported,
            } => {
                self.base_fields(out, base);
                let _ = write!(
                    out,
                    ",\"sourceChain\":\"{}\",\"importedInputs\":",
                    id_str(source_chain)
                );
                self.ins(out, imported);
            }
            Unsigned::Export {
                base,
                dest_chain,
                exported,
            } => {
                self.base_fields(out, base);
                let _ = write!(
                    out,
                    ",\"destinationChain\":\"{}\",\"exportedOutputs\":",
                    id_str(dest_chain)
                );
                self.outs(out, exported);
            }
            Unsigned::AddDelegator {
                base,
                node_id,
                start,
                end,
                weight,
                subnet,
                stake,
                rewards_owner,
            } => {
                self.base_fields(out, base);
                let _ = write!(
                    out,
                    ",\"validator\":{{\"nodeID\":\"{}\",\"start\":{start},\"end\":{end},\"weight\":{weight}}},\"subnetID\":\"{}\",\"stake\":",
                    node_id_str(node_id),
                    id_str(subnet)
                );
                self.outs(out, stake);
                out.push_str(",\"rewardsOwner\":");
                self.owners(out, rewards_owner);
            }
        }
        out.push_str("},\"credentials\":[");
        for (i, c) in tx.creds.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str("{\"signatures\":[");
            for (j, s) in c.iter().enumerate() {
                if j > 0 {
                    out.push(',');
                }
                let _ = write!(out, "\"{}\"", hex_plain(s));
            }
            out.push_str("]}");
        }
        let _ = write!(out, "],\"id\":\"{}\"}}", id_str(id));
    }

    /// `{"time":…,"parentID":"…","height":…,"id":"…","txs":[…]}`.
    pub fn block(&self, out: &mut String, block: &Block, id: &Id) {
        let _ = write!(
            out,
            "{{\"time\":{},\"parentID\":\"{}\",\"height\":{},\"id\":\"{}\",\"txs\":[",
            block.time,
            id_str(&block.parent),
            block.height,
            id_str(id)
        );
        for (i, tx) in block.txs.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            self.tx(out, tx, &sha256(&tx.bytes()));
        }
        out.push_str("]}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Tx {
        let owners = Owners {
            locktime: 0,
            threshold: 1,
            addrs: vec![[3; 20]],
        };
        let base = BaseTx {
            network_id: 12345,
            blockchain_id: [0; 32],
            outs: vec![TransferOut {
                asset: [1; 32],
                amount: 5,
                owners: owners.clone(),
            }],
            ins: vec![TransferIn {
                tx_id: [2; 32],
                index: 1,
                asset: [1; 32],
                amount: 6,
                sig_indices: vec![0],
            }],
            memo: b"hi".to_vec(),
        };
        Tx::sign(
            Unsigned::AddDelegator {
                base,
                node_id: [4; 20],
                start: 1,
                end: 2,
                weight: 3,
                subnet: [0; 32],
                stake: vec![],
                rewards_owner: owners,
            },
            b"k",
        )
    }

    #[test]
    fn tx_bytes_round_trip() {
        let tx = sample();
        let bytes = tx.bytes();
        assert_eq!(Tx::parse(&bytes).unwrap(), tx);
        assert!(Tx::parse(&bytes[..bytes.len() - 1]).is_err());
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(Tx::parse(&extra).is_err());
        assert!(Tx::parse(b"garbage").is_err());
    }

    #[test]
    fn tx_json_has_node_key_order() {
        let tx = sample();
        let mut s = String::new();
        JsonWriter { hrp: "local" }.tx(&mut s, &tx, &[9; 32]);
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["unsignedTx"]["networkID"], 12345);
        assert!(s.starts_with("{\"unsignedTx\":{\"networkID\":12345,\"blockchainID\":"));
        assert!(s.contains("\"credentials\":[{\"signatures\":[\"0x"));
    }
}
