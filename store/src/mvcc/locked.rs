//! What a request holds while it reads or writes: the shards it locked, in id
//! order, and how keys and versions become etcd's messages. Below the store
//! (`kvstore`) and its range, txn and stream readers, which all use it.
use std::sync::Arc;

use bytes::Bytes;
use etcd_client::proto::{PbKeyValue, PbResponseHeader};
use parking_lot::lock_api::{ArcRwLockReadGuard, ArcRwLockWriteGuard};
use parking_lot::{RawRwLock, RwLock};

use super::key_history::{KeyHistory, Version};
use super::shard::{prefix_of, KeyRange, ShardData};

pub struct Shard {
    pub id: usize,
    /// Empty for the fallback shard.
    pub prefix: Bytes,
    pub data: Arc<RwLock<ShardData>>,
    /// Set by the packer once it has packed a quarter of the prefix's bytes since it
    /// last set it: the next checkpoint round rewrites the prefix's checkpoint (smaller,
    /// and loaded without packing again).
    pub packed: std::sync::atomic::AtomicBool,
}

impl Shard {
    /// Walks the prefix's keys in order, `n` per hold of the read lock: `visit` sees each
    /// key under the lock and may push items to the chunk; `between` gets the chunk after
    /// each hold, with the lock released (the work a walk must not do under it: writing a
    /// checkpoint, compressing). Keys written meanwhile after the walk's position are
    /// visited, those before it are not. Ends with the keys or with `between`'s error.
    pub fn walk<T, E>(
        &self,
        n: usize,
        mut visit: impl FnMut(&Bytes, &KeyHistory, &mut Vec<T>),
        mut between: impl FnMut(&mut Vec<T>) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let mut after: Option<Bytes> = None;
        let mut chunk = Vec::new();
        loop {
            let mut seen = 0;
            {
                let d = self.data.read();
                for (k, h) in d.iter_after(after.as_deref()).take(n) {
                    seen += 1;
                    after = Some(k.clone());
                    visit(k, h, &mut chunk);
                }
            }
            between(&mut chunk)?;
            if seen < n {
                return Ok(());
            }
        }
    }
}

pub type ReadGuard = ArcRwLockReadGuard<RawRwLock, ShardData>;
pub type WriteGuard = ArcRwLockWriteGuard<RawRwLock, ShardData>;

/// Shards locked for one request, in id order.
pub struct Locked<G> {
    pub shards: Vec<(Arc<Shard>, G)>,
}

impl<G: std::ops::Deref<Target = ShardData>> Locked<G> {
    fn index_of(&self, key: &[u8]) -> Option<usize> {
        if self.shards.len() == 1 {
            return Some(0);
        }
        let p = prefix_of(key).unwrap_or(b"");
        self.shards.iter().position(|(s, _)| s.prefix.as_ref() == p)
    }

    pub fn get(&self, key: &[u8]) -> Option<&KeyHistory> {
        let i = self.index_of(key)?;
        self.shards[i].1.get(key)
    }

    /// Every key in the interval with its history, in key order across shards.
    pub fn range<'a>(&'a self, r: &KeyRange<'_>) -> Vec<(&'a Bytes, &'a KeyHistory)> {
        if r.is_empty() {
            return Vec::new();
        }
        if r.is_single() {
            return self.index_of(r.key).and_then(|i| self.shards[i].1.range(r).next()).into_iter().collect();
        }
        let mut out: Vec<(&Bytes, &KeyHistory)> = Vec::new();
        let mut parts = 0;
        for g in self.touched(r) {
            let before = out.len();
            out.extend(g.range(r));
            if out.len() > before {
                parts += 1;
            }
        }
        if parts > 1 {
            out.sort_by(|a, b| a.0.cmp(b.0));
        }
        out
    }

    /// The locked shards that can hold keys of the interval (not single, not empty).
    fn touched(&self, r: &KeyRange<'_>) -> Vec<&G> {
        if r.is_empty() {
            return Vec::new();
        }
        self.shards.iter().filter(|(s, _)| s.prefix.is_empty() || r.overlaps_prefix(&s.prefix)).map(|(_, g)| g).collect()
    }

    /// Calls `f` on every key of the interval with its history, shard by
    /// shard (key order within a shard only), without collecting them.
    pub fn for_each_in<'a>(&'a self, r: &KeyRange<'_>, mut f: impl FnMut(&'a Bytes, &'a KeyHistory)) {
        if r.is_single() {
            if let Some((k, h)) = self.index_of(r.key).and_then(|i| self.shards[i].1.range(r).next()) {
                f(k, h);
            }
            return;
        }
        for g in self.touched(r) {
            for (k, h) in g.range(r) {
                f(k, h);
            }
        }
    }

    /// How many keys of the interval (not a single key) are live at `rev`,
    /// counted shard by shard without collecting them.
    pub fn count_live(&self, r: &KeyRange<'_>, rev: i64) -> i64 {
        self.touched(r).into_iter().map(|g| g.range(r).filter(|(_, h)| h.at(rev).is_some()).count() as i64).sum()
    }

    /// The first `want` keys of the interval (not a single key) live at `rev`,
    /// in key order: at most `want` from each shard, then merged.
    pub fn first_live<'a>(&'a self, r: &KeyRange<'_>, rev: i64, want: usize) -> Vec<(&'a Bytes, &'a Version)> {
        let mut out: Vec<(&Bytes, &Version)> = Vec::new();
        let mut parts = 0;
        for g in self.touched(r) {
            let before = out.len();
            out.extend(g.range(r).filter_map(|(k, h)| h.at(rev).map(|v| (k, v))).take(want));
            if out.len() > before {
                parts += 1;
            }
        }
        if parts > 1 {
            out.sort_by(|a, b| a.0.cmp(b.0));
            out.truncate(want);
        }
        out
    }
}

impl Locked<WriteGuard> {
    pub fn data_mut(&mut self, key: &[u8]) -> &mut ShardData {
        let i = self.index_of(key).expect("key outside the locked shards");
        &mut self.shards[i].1
    }
}

pub fn header(rev: i64) -> Option<PbResponseHeader> {
    Some(PbResponseHeader { revision: rev, ..Default::default() })
}

pub fn to_kv(key: &[u8], v: &Version, keys_only: bool) -> PbKeyValue {
    PbKeyValue {
        key: key.to_vec(),
        create_revision: v.create_rev,
        mod_revision: v.mod_rev,
        version: v.version,
        value: if keys_only { Vec::new() } else { v.value.to_vec() },
        lease: v.lease,
    }
}

