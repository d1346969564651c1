//! Reads for a streamed range (RangeStream): one bounded chunk at a time at a
//! fixed revision, each under its own short hold of the shard locks, so a
//! stream holds nothing but its revision and next key between chunks.
use bytes::Bytes;

use super::key_history::Version;
use super::kvstore::Store;
use super::kvstore_range::RangeRead;
use super::shard::KeyRange;
use crate::errors::{Result, StoreError};

impl Store {
    /// Up to `limit` (>= 1) keys of `[from, end)` live at `rev`, as a Range at
    /// `rev` with that limit would return them (`more`: the interval holds more
    /// after the last of them), to be decoded once the locks are dropped. Fails with Compacted once a
    /// compaction has passed `rev` (etcd reads every chunk of a stream as a
    /// new Range at the stream's revision, and that Range fails the same way).
    pub fn range_chunk(&self, from: &[u8], end: &[u8], rev: i64, limit: usize, keys_only: bool) -> Result<RangeRead> {
        let r = KeyRange::new(from, end);
        let shards = self.shards_for(std::slice::from_ref(&r), false);
        let locked = self.lock_read(shards);
        // Checked with the shards held, so compaction cannot pass under the read.
        if rev < self.floor_for(&r) {
            return Err(StoreError::Compacted);
        }
        if r.is_empty() {
            return Ok(RangeRead::taken(rev, Vec::new(), keys_only, false, 0));
        }
        // At most limit+1 live keys from each shard the interval touches: the
        // first limit+1 of their merge are the first limit+1 of the interval.
        let want = limit.saturating_add(1);
        let mut picked: Vec<(&Bytes, &Version)> = Vec::new();
        let mut parts = 0;
        for (s, g) in &locked.shards {
            if !(r.is_single() || s.prefix.is_empty() || r.overlaps_prefix(&s.prefix)) {
                continue;
            }
            let before = picked.len();
            picked.extend(g.range(&r).filter_map(|(k, h)| h.at(rev).map(|v| (k, v))).take(want));
            if picked.len() > before {
                parts += 1;
            }
        }
        if parts > 1 {
            picked.sort_by(|a, b| a.0.cmp(b.0));
            picked.dedup_by(|a, b| a.0 == b.0);
        }
        let more = picked.len() > limit;
        picked.truncate(limit);
        Ok(RangeRead::taken(rev, picked, keys_only, more, 0))
    }

    /// How many keys of `[from, end)` are live at `rev` (the count a stream
    /// cut by its limit reports for the keys it did not send).
    pub fn count_at(&self, from: &[u8], end: &[u8], rev: i64) -> Result<i64> {
        let r = KeyRange::new(from, end);
        let shards = self.shards_for(std::slice::from_ref(&r), false);
        let locked = self.lock_read(shards);
        if rev < self.floor_for(&r) {
            return Err(StoreError::Compacted);
        }
        if r.is_empty() {
            return Ok(0);
        }
        let mut n = 0i64;
        for (s, g) in &locked.shards {
            if r.is_single() || s.prefix.is_empty() || r.overlaps_prefix(&s.prefix) {
                n += g.range(&r).filter(|(_, h)| h.at(rev).is_some()).count() as i64;
            }
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_client::proto::{PbDeleteRequest, PbKeyValue, PbPutRequest, PbRangeRequest};

    fn put(s: &Store, k: &str, v: &str) {
        s.put(&PbPutRequest { key: k.into(), value: v.into(), ..Default::default() }).unwrap();
    }

    /// Chunks read one after another from the last key sent concatenate to
    /// the Range at the same revision, across shards and with writes, deletes
    /// and a compaction (at the stream's revision) in between.
    #[test]
    fn chunks_concatenate_to_the_range_at_their_revision() {
        let s = Store::new();
        for i in 0..57 {
            put(&s, &format!("/registry/pods/ns/p{i:03}"), "a");
            put(&s, &format!("/registry/nodes/n{i:03}"), "b");
            put(&s, &format!("/other/{i:03}"), "c");
        }
        let rev = s.current_rev();
        let (key, end) = (b"/".to_vec(), b"0".to_vec());
        let want = s.range(&PbRangeRequest { key: key.clone(), range_end: end.clone(), revision: rev, ..Default::default() }).unwrap();
        assert_eq!(want.count, 171);
        let mut got: Vec<PbKeyValue> = Vec::new();
        let mut from = key.clone();
        let mut step = 0;
        loop {
            let c = s.range_chunk(&from, &end, rev, 7, false).unwrap();
            let more = c.more;
            got.extend(c.into_response().kvs);
            if !more {
                break;
            }
            from = got.last().unwrap().key.clone();
            from.push(0);
            // The store moves on while the stream is between chunks.
            step += 1;
            put(&s, &format!("/registry/pods/ns/p{step:03}x"), "new");
            s.delete_range(&PbDeleteRequest { key: format!("/other/{step:03}").into(), ..Default::default() }).unwrap();
            if step == 5 {
                s.compact(rev).unwrap();
            }
        }
        assert_eq!(got, want.kvs);
        assert_eq!(s.count_at(&key, &end, rev).unwrap(), 171);
        // A compaction past the stream's revision fails the next chunk.
        s.compact(rev + 1).unwrap();
        assert_eq!(s.range_chunk(&key, &end, rev, 7, false).err(), Some(StoreError::Compacted));
        assert_eq!(s.count_at(&key, &end, rev).err(), Some(StoreError::Compacted));
    }

    #[test]
    fn single_keys_empty_intervals_and_keys_only() {
        let s = Store::new();
        put(&s, "/registry/pods/ns/a", "v");
        let rev = s.current_rev();
        let chunk = |from: &[u8], end: &[u8], limit, keys_only| {
            let c = s.range_chunk(from, end, rev, limit, keys_only).unwrap();
            let more = c.more;
            (c.into_response().kvs, more)
        };
        let (kvs, more) = chunk(b"/registry/pods/ns/a", b"", 1, true);
        assert_eq!((kvs.len(), more, kvs[0].value.is_empty()), (1, false, true));
        let (kvs, more) = chunk(b"/registry/pods/ns/b", b"/registry/pods/ns/a", 10, false);
        assert_eq!((kvs.len(), more), (0, false));
        let (kvs, more) = chunk(b"/", b"\0", 1, false);
        assert_eq!((kvs.len(), more), (1, false));
    }
}
