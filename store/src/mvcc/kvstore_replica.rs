//! A replica's side of the store (crate::replication, docs/design.md §10): a
//! member applies the revisions its group committed, written by the leader as
//! log records, through the same write batch a client's write takes — so its
//! shards, accounting, spill, lease links and watch events are what the leader's
//! were, and its watchers get every revision once, in order.
use bytes::Bytes;

use super::key_history::Version;
use super::kvstore::Store;
use super::shard::KeyRange;

impl Store {
    /// From now on a revision is published only once `replicated_to` covers it.
    pub fn hold_for_replication(&self) {
        self.vis.hold_for_replication();
    }

    /// Every revision up to `rev` is committed by the group's quorum.
    pub fn replicated_to(&self, rev: i64) {
        self.vis.set_replicated(rev);
    }

    /// Loads the group's snapshot into this empty store (a member behind its
    /// leader's log): keys with their history, leases with their remaining
    /// TTLs, revision and compaction point, published at once (the group
    /// committed it).
    /// `leases` are (ID, granted TTL, remaining TTL), as `crate::snapshot` decodes them.
    pub fn install_snapshot(&self, rev: i64, compacted: i64, leases: &[(i64, i64, i64)], keys: Vec<(Bytes, Vec<Version>)>) {
        for (k, vs) in keys {
            self.load_key(k, vs);
        }
        self.finish_snapshot(rev, compacted, leases);
    }

    /// After a snapshot's keys are loaded (`load_key`): its leases, revision
    /// and compaction point, published at once.
    pub fn finish_snapshot(&self, rev: i64, compacted: i64, leases: &[(i64, i64, i64)]) {
        for (id, granted, remaining) in leases {
            self.leases.restore(*id, *granted, *remaining);
        }
        self.set_revisions(rev, compacted);
        if compacted > 0 {
            self.compact_loaded(compacted);
        }
        // Keys whose lease the snapshot lacks stay: the leader's deletes arrive in the log.
        let _ = self.relink_leases();
        self.replicated_to(rev);
    }

    /// Applies the revision `rev` the group committed: the versions its leader
    /// wrote, in their order (a tombstone for a delete). It must follow the newest
    /// committed revision, and each version it makes must be the leader's (create
    /// revision, version, sub-index): else this member's state is not the
    /// leader's, and the error says where.
    pub fn apply_replicated(&self, rev: i64, writes: Vec<(Bytes, Version)>) -> Result<(), String> {
        let committed = self.committed_rev();
        if rev != committed + 1 {
            return Err(format!("replicated revision {rev} does not follow this member's {committed}"));
        }
        let ranges: Vec<KeyRange<'_>> = writes.iter().map(|(key, _)| KeyRange::new(key, &[])).collect();
        let mut locked = self.lock_write(self.shards_for(&ranges, true));
        drop(ranges);
        let (res, batch) = self.commit(|b| {
            if b.rev != rev {
                return Err(format!("replicated revision {rev} applied at {}", b.rev));
            }
            for (key, v) in writes {
                let want = (v.create_rev, v.version, v.sub);
                if v.is_tombstone() {
                    if b.delete(locked.data_mut(&key), &key).is_none() {
                        return Err(format!("replicated revision {rev} deletes {} which this member does not hold", show(&key)));
                    }
                } else {
                    b.put(locked.data_mut(&key), &key, v.value, v.lease);
                }
                same_version(&key, want, b.events.last().map(|e| &e.kv))?;
            }
            Ok(())
        });
        drop(locked);
        self.durable(batch);
        res
    }
}

fn same_version(key: &Bytes, want: (i64, i64, u32), got: Option<&Version>) -> Result<(), String> {
    let got = got.map(|v| (v.create_rev, v.version, v.sub));
    if got != Some(want) {
        return Err(format!("{}: the leader wrote (create, version, sub) {want:?}, this member made {got:?}", show(key)));
    }
    Ok(())
}

fn show(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}
