//! The revisions of one key, oldest first. A tombstone (version 0) ends a
//! generation; the next put starts a new one with a new create revision.
use super::value::Value;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    pub mod_rev: i64,
    /// Position inside the revision's transaction: events of one revision are
    /// delivered in this order.
    pub sub: u32,
    pub create_rev: i64,
    /// 0 marks a deletion (tombstone).
    pub version: i64,
    /// The bytes written, raw or packed (`mvcc/value.rs`).
    pub value: Value,
    pub lease: i64,
}

impl Version {
    pub fn is_tombstone(&self) -> bool {
        self.version == 0
    }
}

/// The versions of one key. Most keys hold exactly one version between
/// compactions' worth of writes (and every key right after a compaction), so
/// that version lives inline in the shard's slab instead of in a small heap
/// block of its own. Why it matters: compaction used to shrink each key's
/// vector into a fresh small allocation, and glibc placed those blocks in the
/// holes the freed versions had left — one live block per page kept every page
/// of the old history resident (RSS 7× the data after 10 updates per key).
#[derive(Clone, Debug, Default)]
pub struct KeyHistory {
    store: Versions,
}

#[derive(Clone, Debug, Default)]
enum Versions {
    #[default]
    Empty,
    One(Version),
    Many(Vec<Version>),
}

impl KeyHistory {
    pub fn from_versions(mut v: Vec<Version>) -> Self {
        let store = match v.len() {
            0 => Versions::Empty,
            1 => Versions::One(v.pop().unwrap()),
            _ => Versions::Many(v),
        };
        KeyHistory { store }
    }

    /// Every retained version, oldest first.
    pub fn versions(&self) -> &[Version] {
        match &self.store {
            Versions::Empty => &[],
            Versions::One(v) => std::slice::from_ref(v),
            Versions::Many(v) => v,
        }
    }

    /// The retained versions, to put a value's packed form in place (mvcc/packer.rs).
    pub fn versions_mut(&mut self) -> &mut [Version] {
        match &mut self.store {
            Versions::Empty => &mut [],
            Versions::One(v) => std::slice::from_mut(v),
            Versions::Many(v) => v,
        }
    }

    pub fn len(&self) -> usize {
        self.versions().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn push(&mut self, v: Version) {
        self.store = match std::mem::take(&mut self.store) {
            Versions::Empty => Versions::One(v),
            Versions::One(first) => {
                let mut all = Vec::with_capacity(2);
                all.push(first);
                all.push(v);
                Versions::Many(all)
            }
            Versions::Many(mut all) => {
                // Grown by half, not doubled (2, 3, 4, 6, 9, 13 …): a history is
                // held until the next compaction, and doubling left a key written
                // 5 times with 8 slots of 88 bytes. Over 100K keys written ≈ 4
                // times each that idle capacity was ≈ 12 MB of a 212 MB peak
                // (issue 12's memory target); the few more reallocations are
                // small copies, once per growth.
                if all.len() == all.capacity() {
                    all.reserve_exact(all.len() / 2);
                }
                all.push(v);
                Versions::Many(all)
            }
        };
    }

    /// The live value at the newest revision, if the key exists now.
    pub fn latest(&self) -> Option<&Version> {
        self.versions().last().filter(|v| !v.is_tombstone())
    }

    /// The live value as of revision `rev`, if the key existed then.
    pub fn at(&self, rev: i64) -> Option<&Version> {
        self.versions()
            .iter()
            .rev()
            .find(|v| v.mod_rev <= rev)
            .filter(|v| !v.is_tombstone())
    }

    /// The live value just before revision `rev`: an event's prev_kv, which
    /// etcd reads at rev-1, so earlier writes of the same txn do not count.
    pub fn before_rev(&self, rev: i64) -> Option<&Version> {
        self.versions().iter().rev().find(|v| v.mod_rev < rev).filter(|v| !v.is_tombstone())
    }

    /// Drops every revision that no read or watch at or after `rev` can see: all
    /// but the newest version at or below `rev`, and that one too when it is a
    /// tombstone older than `rev` (a tombstone at exactly `rev` stays, as in
    /// etcd, so a watch from the compaction revision still sees that delete).
    /// Returns true when nothing is left (the key can leave the index). The
    /// versions dropped go to `dropped`, for the caller to free after its lock.
    pub fn compact(&mut self, rev: i64, dropped: &mut Vec<Version>) -> bool {
        let keep_from = match self.versions().iter().rposition(|v| v.mod_rev <= rev) {
            None => return self.is_empty(),
            Some(i) if self.versions()[i].is_tombstone() && self.versions()[i].mod_rev < rev => i + 1,
            Some(i) => i,
        };
        if keep_from == 0 {
            return false;
        }
        self.store = match std::mem::take(&mut self.store) {
            Versions::Many(mut all) => {
                dropped.extend(all.drain(..keep_from));
                match all.len() {
                    0 => Versions::Empty,
                    // Back inline: no new heap block (see the type's comment).
                    1 => Versions::One(all.pop().unwrap()),
                    _ => {
                        // Histories grow between compactions; give the slack back.
                        if all.capacity() > 2 * all.len() + 2 {
                            all.shrink_to_fit();
                        }
                        Versions::Many(all)
                    }
                }
            }
            // keep_from > 0 with one version: that version is dropped.
            Versions::One(v) => {
                dropped.push(v);
                Versions::Empty
            }
            Versions::Empty => Versions::Empty,
        };
        self.is_empty()
    }

    /// Accounted bytes of the retained versions (crate::quota).
    pub fn bytes(&self) -> usize {
        self.versions().iter().map(|v| crate::quota::version_bytes(v.value.len())).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(rev: i64, create: i64, ver: i64) -> Version {
        Version { mod_rev: rev, sub: 0, create_rev: create, version: ver, value: format!("v{rev}").into_bytes().into(), lease: 0 }
    }
    fn del(rev: i64) -> Version {
        Version { mod_rev: rev, sub: 0, create_rev: 0, version: 0, value: Value::default(), lease: 0 }
    }

    /// A history grows by half, not double: a key written 5 times holds 6 slots, not 8.
    #[test]
    fn histories_grow_by_half() {
        let mut h = KeyHistory::default();
        let mut caps = Vec::new();
        for r in 1..=10 {
            h.push(put(r, 1, r));
            if let Versions::Many(v) = &h.store {
                caps.push(v.capacity());
            }
        }
        assert_eq!(caps, [2, 3, 4, 6, 6, 9, 9, 9, 13]);
    }

    #[test]
    fn reads_at_revisions() {
        let h = KeyHistory::from_versions(vec![put(2, 2, 1), put(5, 2, 2), del(7), put(9, 9, 1)]);
        assert!(h.at(1).is_none());
        assert_eq!(h.at(2).unwrap().mod_rev, 2);
        assert_eq!(h.at(6).unwrap().version, 2);
        assert!(h.at(7).is_none());
        assert!(h.at(8).is_none());
        assert_eq!(h.at(100).unwrap().create_rev, 9);
        assert_eq!(h.latest().unwrap().mod_rev, 9);
    }

    #[test]
    fn compaction_keeps_the_visible_version() {
        let mut h = KeyHistory::from_versions(vec![put(2, 2, 1), put(5, 2, 2), del(7), put(9, 9, 1)]);
        assert!(!h.compact(6, &mut Vec::new()));
        assert_eq!(h.versions()[0].mod_rev, 5);
        assert_eq!(h.at(6).unwrap().mod_rev, 5);
        // Compacting at the tombstone keeps it (a watch from 7 sees the delete);
        // compacting past it drops it.
        assert!(!h.compact(7, &mut Vec::new()));
        assert_eq!(h.versions()[0].mod_rev, 7);
        assert!(!h.compact(8, &mut Vec::new()));
        assert_eq!(h.versions().len(), 1);
        assert_eq!(h.versions()[0].mod_rev, 9);
    }

    #[test]
    fn compaction_removes_deleted_keys() {
        let mut h = KeyHistory::from_versions(vec![put(2, 2, 1), del(3)]);
        assert!(!h.compact(3, &mut Vec::new()));
        assert!(h.compact(4, &mut Vec::new()));
        let mut h2 = KeyHistory::from_versions(vec![put(2, 2, 1), del(3)]);
        assert!(!h2.compact(2, &mut Vec::new()));
        assert_eq!(h2.versions().len(), 2);
    }
}
