//! Events rebuilt from key histories, for watchers that start before the watch
//! log or fell behind it: the retained revisions in (from..=to) of the keys in
//! range, in revision order, at most CATCHUP_REVS revisions per call — as
//! etcd's unsynced watchers catch up watchBatchMaxRevs (1,000) revisions per
//! sync round — so what a catch-up holds is bounded by a batch, not by how far
//! behind the watcher is.
use std::collections::BTreeMap;

use super::key_history::Version;
use super::kvstore::Store;
use super::shard::KeyRange;
use super::watch_hub::Event;
use crate::errors::{Result, StoreError};

/// Revisions (with events in the watched range) per catch-up batch.
pub const CATCHUP_REVS: usize = 1000;

impl Store {
    /// Events with `from <= rev <= hi` for keys in `[key, end)`, where `hi` is
    /// `to` or, when more than `max_revs` revisions in `[from, to]` have
    /// events there, the last of the first `max_revs` of them; returns the
    /// events and `hi` (the next batch starts at `hi + 1`). Fails with
    /// Compacted when `from` is older than the compaction point.
    pub fn events_between(&self, key: &[u8], end: &[u8], from: i64, to: i64, max_revs: usize) -> Result<(Vec<Event>, i64)> {
        let r = KeyRange::new(key, end);
        let shards = self.shards_for(std::slice::from_ref(&r), false);
        let locked = self.lock_read(shards);
        if from < self.floor_for(&r) {
            return Err(StoreError::Compacted);
        }
        let max_revs = max_revs.max(1);
        // The lowest max_revs revisions seen so far, with their events: a
        // revision above the highest of them is skipped once they are full.
        let mut by_rev: BTreeMap<i64, Vec<Event>> = BTreeMap::new();
        let mut hi = to;
        locked.for_each_in(&r, |k, h| {
            for v in h.versions().iter() {
                if v.mod_rev < from || v.mod_rev > hi {
                    continue;
                }
                let is_create = !v.is_tombstone() && v.create_rev == v.mod_rev;
                let prev: Option<Version> = if is_create { None } else { h.before_rev(v.mod_rev).cloned() };
                by_rev.entry(v.mod_rev).or_default().push(Event { key: k.clone(), kv: v.clone(), prev });
                if by_rev.len() > max_revs {
                    by_rev.pop_last();
                    hi = *by_rev.last_key_value().unwrap().0;
                }
            }
        });
        let mut out: Vec<Event> = Vec::with_capacity(by_rev.values().map(|v| v.len()).sum());
        for (_, mut evs) in by_rev {
            evs.sort_by_key(|e| e.kv.sub);
            out.extend(evs);
        }
        Ok((out, hi))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_client::proto::{PbDeleteRequest, PbPutRequest, PbTxnOpRequest, PbTxnRequest, PbTxnRequestOp};

    fn put(s: &Store, k: &str, v: &str) {
        s.put(&PbPutRequest { key: k.into(), value: v.into(), ..Default::default() }).unwrap();
    }

    /// Batches read one after another from the last `hi` concatenate to the
    /// unbounded read: same events, same order, none twice, none missing,
    /// across shards, with deletes and multi-key revisions.
    #[test]
    fn batches_concatenate_to_the_whole_catch_up() {
        let s = Store::new();
        let start = s.current_rev() + 1;
        for i in 0..300 {
            put(&s, &format!("/registry/pods/ns/p{:03}", i % 40), &format!("v{i}"));
            put(&s, &format!("/other/{:03}", i % 7), "o");
            if i % 9 == 0 {
                s.delete_range(&PbDeleteRequest { key: format!("/registry/pods/ns/p{:03}", i % 40).into(), ..Default::default() }).unwrap();
            }
            if i % 50 == 0 {
                // Several events in one revision (one txn over two shards).
                let op = |k: String| PbTxnRequestOp { request: Some(PbTxnOpRequest::RequestPut(PbPutRequest { key: k.into(), value: b"t".to_vec(), ..Default::default() })) };
                s.txn(&PbTxnRequest { success: vec![op(format!("/registry/nodes/n{i}")), op(format!("/other/t{i}")), op(format!("/registry/pods/ns/t{i}"))], ..Default::default() }).unwrap();
            }
        }
        let to = s.current_rev();
        for (key, end) in [(&b"/"[..], &b"0"[..]), (b"/registry/pods/", b"/registry/pods0"), (b"/registry/pods/ns/p005", b"")] {
            let (all, hi) = s.events_between(key, end, start, to, usize::MAX).unwrap();
            assert_eq!(hi, to);
            let revs = |evs: &[Event]| evs.iter().map(|e| (e.kv.mod_rev, e.kv.sub, e.key.clone())).collect::<Vec<_>>();
            assert!(revs(&all).windows(2).all(|w| (w[0].0, w[0].1) < (w[1].0, w[1].1)));
            for max in [1, 7, 100] {
                let mut got: Vec<Event> = Vec::new();
                let mut from = start;
                let mut rounds = 0;
                while from <= to {
                    let (evs, hi) = s.events_between(key, end, from, to, max).unwrap();
                    let distinct: std::collections::BTreeSet<i64> = evs.iter().map(|e| e.kv.mod_rev).collect();
                    assert!(distinct.len() <= max);
                    assert!(hi == to || distinct.len() == max);
                    got.extend(evs);
                    from = hi + 1;
                    rounds += 1;
                }
                assert_eq!(revs(&got), revs(&all), "max {max}");
                assert!(got.iter().zip(&all).all(|(a, b)| a.kv.value == b.kv.value && a.prev.as_ref().map(|p| p.mod_rev) == b.prev.as_ref().map(|p| p.mod_rev)));
                if all.len() > max {
                    assert!(rounds > 1);
                }
            }
        }
        s.compact(start + 10).unwrap();
        assert_eq!(s.events_between(b"/", b"0", start, to, 10).err(), Some(StoreError::Compacted));
    }
}
