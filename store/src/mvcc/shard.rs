//! One resource prefix (`/registry/[group/]kind/`): a hash map for O(1) access
//! to existing keys and an ordered index for ranges, both pointing into a slab
//! of key histories. Keys outside any resource prefix share the fallback shard.
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

use bytes::{Bytes, BytesMut};

use super::key_history::{KeyHistory, Version};

const REGISTRY: &[u8] = b"/registry/";

/// The resource prefix a key belongs to, or None for the fallback shard.
/// `/registry/pods/ns/name` → `/registry/pods/`; a group containing a dot
/// (CRDs, `apiregistration.k8s.io`) adds one more segment:
/// `/registry/example.com/widgets/ns/x` → `/registry/example.com/widgets/`.
pub fn prefix_of(key: &[u8]) -> Option<&[u8]> {
    let rest = key.strip_prefix(REGISTRY)?;
    let i = rest.iter().position(|&b| b == b'/')?;
    if rest[..i].contains(&b'.') {
        let j = rest[i + 1..].iter().position(|&b| b == b'/')?;
        Some(&key[..REGISTRY.len() + i + 1 + j + 1])
    } else {
        Some(&key[..REGISTRY.len() + i + 1])
    }
}

/// The smallest key greater than every key that starts with `prefix`
/// (empty means "no upper bound"), as etcd's clientv3.GetPrefixRangeEnd.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(&last) = end.last() {
        if last < 0xff {
            *end.last_mut().unwrap() += 1;
            return end;
        }
        end.pop();
    }
    Vec::new()
}

/// A key interval as etcd spells it: empty `end` = the single key, `end` = "\0"
/// = every key from `key` on, otherwise [key, end).
#[derive(Clone, Debug)]
pub struct KeyRange<'a> {
    pub key: &'a [u8],
    pub end: &'a [u8],
}

impl<'a> KeyRange<'a> {
    pub fn new(key: &'a [u8], end: &'a [u8]) -> Self {
        KeyRange { key, end }
    }
    pub fn is_single(&self) -> bool {
        self.end.is_empty()
    }
    pub fn is_open(&self) -> bool {
        self.end == [0u8]
    }
    /// True when the interval holds no key at all (range_end at or below key).
    pub fn is_empty(&self) -> bool {
        !self.is_single() && !self.is_open() && self.end <= self.key
    }
    pub fn contains(&self, k: &[u8]) -> bool {
        if self.is_single() {
            k == self.key
        } else if self.is_open() {
            k >= self.key
        } else {
            k >= self.key && k < self.end
        }
    }
    /// The one resource prefix every key of this interval lies in, if there is one.
    pub fn single_prefix(&self) -> Option<&'a [u8]> {
        let p = prefix_of(self.key)?;
        if self.is_single() {
            return Some(p);
        }
        if self.is_open() {
            return None;
        }
        let pend = prefix_end(p);
        if !pend.is_empty() && self.end <= pend.as_slice() {
            Some(p)
        } else {
            None
        }
    }
    /// Whether keys under `prefix` can fall inside this interval.
    pub fn overlaps_prefix(&self, prefix: &[u8]) -> bool {
        if self.is_single() {
            return self.key.starts_with(prefix);
        }
        let pend = prefix_end(prefix);
        let below_end = self.is_open() || prefix < self.end;
        let above_start = pend.is_empty() || pend.as_slice() > self.key;
        below_end && above_start
    }
    pub fn bounds(&self) -> (Bound<&'a [u8]>, Bound<&'a [u8]>) {
        if self.is_single() {
            (Bound::Included(self.key), Bound::Included(self.key))
        } else if self.is_open() {
            (Bound::Included(self.key), Bound::Unbounded)
        } else {
            (Bound::Included(self.key), Bound::Excluded(self.end))
        }
    }
}

/// Where a shard's keys live: packed side by side in small chunks instead of
/// one heap block each. Why: a key is allocated once, when the key is first
/// written, between that write's value and the next; when compaction later
/// frees those values, every page still holding a key stays resident. Packed,
/// the keys pin only their own chunks (1M keys × 10 updates: see
/// docs/benchmarks.md, memory).
#[derive(Default)]
struct KeyArena {
    chunk: BytesMut,
}

const KEY_CHUNK: usize = 4096;

impl KeyArena {
    fn alloc(&mut self, key: &[u8]) -> Bytes {
        if key.len() > KEY_CHUNK / 4 {
            return Bytes::copy_from_slice(key);
        }
        if self.chunk.capacity() - self.chunk.len() < key.len() {
            self.chunk = BytesMut::with_capacity(KEY_CHUNK);
        }
        self.chunk.extend_from_slice(key);
        self.chunk.split().freeze()
    }
}

#[derive(Default)]
pub struct ShardData {
    keys: KeyArena,
    /// foldhash (seeded per process) rather than std's SipHash: every write
    /// looks its key up here on every member, and SipHash was a fifth of
    /// applying a put on a follower.
    by_key: HashMap<Bytes, usize, foldhash::quality::RandomState>,
    order: BTreeMap<Bytes, usize>,
    slots: Vec<KeyHistory>,
    free: Vec<usize>,
    /// Accounted bytes of this shard's keys and retained versions (crate::quota):
    /// kept up to date by every write, recomputed by compaction.
    pub bytes: usize,
    /// Puts so far: the packer revisits a shard written since its last pass.
    pub puts: u64,
    /// The dictionary the packer packs this prefix's values with (mvcc/packer.rs).
    pub dict: Option<std::sync::Arc<super::value::Dict>>,
}

impl ShardData {
    pub fn get(&self, key: &[u8]) -> Option<&KeyHistory> {
        self.by_key.get(key).map(|&i| &self.slots[i])
    }

    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut KeyHistory> {
        match self.by_key.get(key) {
            Some(&i) => Some(&mut self.slots[i]),
            None => None,
        }
    }

    /// The history of `key`, created empty if the key was never written (or
    /// compacted away), with the index's own copy of the key (a reference to
    /// the shard's key arena, cheap to clone into events).
    pub fn entry(&mut self, key: &[u8]) -> (Bytes, &mut KeyHistory) {
        let (k, i) = match self.by_key.get_key_value(key) {
            Some((k, &i)) => (k.clone(), i),
            None => {
                let i = match self.free.pop() {
                    Some(i) => i,
                    None => {
                        self.slots.push(KeyHistory::default());
                        self.slots.len() - 1
                    }
                };
                let k = self.keys.alloc(key);
                self.by_key.insert(k.clone(), i);
                self.order.insert(k.clone(), i);
                self.bytes += crate::quota::key_bytes(key.len());
                (k, i)
            }
        };
        (k, &mut self.slots[i])
    }

    /// Keys and histories of the interval, in key order.
    pub fn range<'s>(&'s self, r: &KeyRange<'_>) -> impl Iterator<Item = (&'s Bytes, &'s KeyHistory)> + 's {
        let single = if r.is_single() {
            self.by_key.get_key_value(r.key).map(|(k, &i)| (k, &self.slots[i]))
        } else {
            None
        };
        let empty = r.is_empty() || r.is_single();
        let bounds = r.bounds();
        let iter = if empty { None } else { Some(self.order.range::<[u8], _>(bounds).map(|(k, &i)| (k, &self.slots[i]))) };
        single.into_iter().chain(iter.into_iter().flatten())
    }

    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Applies compaction at `rev` to at most `n` keys after `after` (all with
    /// None); keys with nothing left leave the index. A big shard is compacted
    /// in steps between which the lock is released (`Store::compact_shards`); returns the last key visited, or None once the walk reached
    /// the end. Reads below `rev` are refused before it starts, so versions it
    /// has not reached yet are never read.
    pub fn compact_some(&mut self, rev: i64, after: Option<&[u8]>, n: usize, dropped: &mut Vec<Version>) -> Option<Bytes> {
        let from = match after {
            Some(k) => Bound::Excluded(k),
            None => Bound::Unbounded,
        };
        let mut gone = Vec::new();
        let (mut seen, mut last) = (0usize, None);
        let (mut added, mut freed) = (0usize, 0usize);
        for (k, &i) in self.order.range::<[u8], _>((from, Bound::Unbounded)) {
            if seen == n {
                break;
            }
            seen += 1;
            last = Some(k);
            let h = &mut self.slots[i];
            if h.len() > 1 || h.versions().first().map_or(true, |v| v.mod_rev <= rev) {
                let before = h.bytes();
                if h.compact(rev, dropped) {
                    freed += before + crate::quota::key_bytes(k.len());
                    gone.push(k.clone());
                    continue;
                }
                added += h.bytes();
                freed += before;
            }
        }
        let last = last.cloned();
        for k in gone {
            if let Some(i) = self.by_key.remove(&k) {
                self.order.remove(&k);
                self.slots[i] = KeyHistory::default();
                self.free.push(i);
            }
        }
        self.bytes = (self.bytes + added).saturating_sub(freed);
        if seen < n {
            None
        } else {
            last
        }
    }

    /// Every key with its history, in key order (dumps, snapshots, hashes).
    pub fn iter(&self) -> impl Iterator<Item = (&Bytes, &KeyHistory)> {
        self.order.iter().map(|(k, &i)| (k, &self.slots[i]))
    }

    /// The keys after `after` (all with None), in key order: a walk in chunks
    /// that releases the lock in between (`Shard::walk`).
    pub fn iter_after<'s>(&'s self, after: Option<&[u8]>) -> impl Iterator<Item = (&'s Bytes, &'s KeyHistory)> + 's {
        let from = match after {
            Some(k) => Bound::Excluded(k),
            None => Bound::Unbounded,
        };
        self.order.range::<[u8], _>((from, Bound::Unbounded)).map(|(k, &i)| (k, &self.slots[i]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        assert_eq!(prefix_of(b"/registry/pods/ns/a"), Some(&b"/registry/pods/"[..]));
        assert_eq!(prefix_of(b"/registry/example.com/widgets/ns/x"), Some(&b"/registry/example.com/widgets/"[..]));
        assert_eq!(prefix_of(b"/registry/pods"), None);
        assert_eq!(prefix_of(b"/registry/example.com/widgets"), None);
        assert_eq!(prefix_of(b"/other/pods/x"), None);
        assert_eq!(prefix_of(b"compact_rev_key"), None);
    }

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end(b"/a/"), b"/a0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), Vec::<u8>::new());
    }

    #[test]
    fn single_prefix_detection() {
        assert_eq!(KeyRange::new(b"/registry/pods/", b"/registry/pods0").single_prefix(), Some(&b"/registry/pods/"[..]));
        assert_eq!(KeyRange::new(b"/registry/pods/ns/", b"/registry/pods/ns0").single_prefix(), Some(&b"/registry/pods/"[..]));
        assert_eq!(KeyRange::new(b"/registry/pods/", b"/registry/q").single_prefix(), None);
        assert_eq!(KeyRange::new(b"/registry/pods/", b"\0").single_prefix(), None);
        assert_eq!(KeyRange::new(b"/registry/", b"/registry0").single_prefix(), None);
        assert!(KeyRange::new(b"/registry/", b"/registry0").overlaps_prefix(b"/registry/pods/"));
        assert!(!KeyRange::new(b"/registry/q", b"/registry/z").overlaps_prefix(b"/registry/pods/"));
        assert!(KeyRange::new(b"/registry/pods/x", b"\0").overlaps_prefix(b"/registry/pods/"));
        assert!(!KeyRange::new(b"/registry/pods0", b"\0").overlaps_prefix(b"/registry/pods/"));
    }

    #[test]
    fn range_in_order() {
        let mut s = ShardData::default();
        for k in ["/b", "/a", "/c", "/ab"] {
            s.entry(k.as_bytes());
        }
        let got: Vec<_> = s.range(&KeyRange::new(b"/a", b"/c")).map(|(k, _)| k.clone()).collect();
        assert_eq!(got, vec![Bytes::from("/a"), Bytes::from("/ab"), Bytes::from("/b")]);
        let one: Vec<_> = s.range(&KeyRange::new(b"/b", b"")).map(|(k, _)| k.clone()).collect();
        assert_eq!(one, vec![Bytes::from("/b")]);
        assert_eq!(s.range(&KeyRange::new(b"/c", b"/a")).count(), 0);
        assert_eq!(s.range(&KeyRange::new(b"/ab", b"\0")).count(), 3);
    }

    /// Compaction in steps of a few keys leaves exactly what one walk leaves
    /// (keys, versions, accounted bytes), keys that leave the index included.
    #[test]
    fn stepwise_compaction_equals_one_walk() {
        use super::super::value::Value;
        let v = |rev: i64, ver: i64| Version { mod_rev: rev, sub: 0, create_rev: 1, version: ver, value: Value::from(vec![b'x'; rev as usize]), lease: 0 };
        let build = || {
            let mut s = ShardData::default();
            let mut rev = 1;
            for round in 0..4 {
                for k in 0..23 {
                    if round == 3 && k % 5 == 0 {
                        continue; // deleted in round 2 for good: leaves the index once compacted
                    }
                    let (_, h) = s.entry(format!("/k{k:02}").as_bytes());
                    let ver = if round == 2 && k % 5 == 0 { 0 } else { round + 1 };
                    h.push(v(rev, ver));
                    rev += 1;
                }
            }
            let total: usize = s.iter().map(|(k, h)| crate::quota::key_bytes(k.len()) + h.bytes()).sum();
            s.bytes = total;
            s
        };
        for rev in [10, 50, 70, 92] {
            let (mut one, mut steps) = (build(), build());
            let versions = |s: &ShardData| s.iter().map(|(_, h)| h.len()).sum::<usize>();
            let held = versions(&one);
            let mut dropped = Vec::new();
            assert!(one.compact_some(rev, None, usize::MAX, &mut dropped).is_none(), "one walk reaches the end");
            assert_eq!(versions(&one) + dropped.len(), held, "every version is kept or handed back to be freed");
            assert!(dropped.iter().all(|v| v.mod_rev <= rev), "only versions at or below the compaction are dropped");
            let mut after = None;
            let mut n = 0;
            while let Some(k) = steps.compact_some(rev, after.as_deref(), 4, &mut Vec::new()) {
                after = Some(k);
                n += 1;
            }
            assert!(n >= 5, "{n} steps");
            let dump = |s: &ShardData| s.iter().map(|(k, h)| (k.clone(), h.versions().to_vec())).collect::<Vec<_>>();
            assert_eq!(dump(&steps), dump(&one), "at {rev}");
            assert_eq!(steps.len(), one.len());
            if rev == 92 {
                assert_eq!(one.len(), 23 - 5, "deleted keys left the index");
            }
            let recount: usize = one.iter().map(|(k, h)| crate::quota::key_bytes(k.len()) + h.bytes()).sum();
            assert_eq!((steps.bytes, one.bytes), (recount, recount), "at {rev}");
        }
    }
}
