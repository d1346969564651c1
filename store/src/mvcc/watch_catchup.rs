//! Events rebuilt from key histories, for watchers that start before the watch
//! log or fell behind it: every retained revision in (from..=to) of the keys in
//! range, in revision order.
use super::key_history::Version;
use super::kvstore::Store;
use super::shard::KeyRange;
use super::watch_hub::Event;
use crate::errors::{Result, StoreError};

impl Store {
    /// Events with `from <= rev <= to` for keys in `[key, end)`; fails with
    /// Compacted when `from` is older than the compaction point.
    pub fn events_between(&self, key: &[u8], end: &[u8], from: i64, to: i64) -> Result<Vec<Event>> {
        let r = KeyRange::new(key, end);
        let shards = self.shards_for(std::slice::from_ref(&r), false);
        let locked = self.lock_read(shards);
        if from < self.floor_for(&r) {
            return Err(StoreError::Compacted);
        }
        let mut out: Vec<Event> = Vec::new();
        for (k, h) in locked.range(&r) {
            for v in h.versions().iter() {
                if v.mod_rev < from || v.mod_rev > to {
                    continue;
                }
                let is_create = !v.is_tombstone() && v.create_rev == v.mod_rev;
                let prev: Option<Version> = if is_create { None } else { h.before_rev(v.mod_rev).cloned() };
                out.push(Event { key: k.clone(), kv: v.clone(), prev });
            }
        }
        out.sort_by_key(|e| (e.kv.mod_rev, e.kv.sub));
        Ok(out)
    }
}
