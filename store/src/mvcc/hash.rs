//! HashKV as etcd computes it, so that `etcdctl endpoint hashkv` (and any tool
//! that compares members or a migrated copy by hash) gets the same number from
//! meganode-store as from an etcd holding the same history.
//!
//! etcd hashes its bbolt "key" bucket: CRC-32C (Castagnoli) over the bucket's
//! name, then over every record in bucket order — the revision key (8-byte
//! big-endian main revision, `_`, 8-byte big-endian sub-revision, and a `t`
//! when the record is a tombstone) followed by the record's value, a
//! marshalled `mvccpb.KeyValue` (a tombstone's holds only the key). Records
//! above the asked revision are left out; so are records at or below the
//! compaction point unless they are a key's live version at the asked revision
//! (when at least one key is live there), and a tombstone at exactly the
//! compaction point. Our histories retain what etcd's bucket retains after a
//! compaction (KeyHistory::compact), and carry the sub-revision, so the same
//! records can be rebuilt in the same order.
//!
//! Not reproduced: the hash etcd stores while it compacts (answered for a
//! HashKV at exactly that compaction's revision) covers revisions the
//! compaction then removes; we compute that answer from what is retained, and
//! it differs when the compaction removed revisions above the previous one.
use bytes::Bytes;
use prost::Message;

use super::key_history::Version;
use super::kvstore::{to_kv, Store};
use super::shard::KeyRange;
use etcd_client::proto::PbKeyValue;

/// The name of etcd's bucket of revisions, the first bytes hashed.
const KEY_BUCKET: &[u8] = b"key";

/// A bucket record's key: main and sub revision, big-endian, `_` between, `t` for a tombstone.
fn revision_key(v: &Version) -> ([u8; 18], usize) {
    let mut k = [0u8; 18];
    k[..8].copy_from_slice(&(v.mod_rev as u64).to_be_bytes());
    k[8] = b'_';
    k[9..17].copy_from_slice(&(v.sub as u64).to_be_bytes());
    if v.is_tombstone() {
        k[17] = b't';
        (k, 18)
    } else {
        (k, 17)
    }
}

/// A bucket record's value: the KeyValue etcd wrote for the revision.
fn record_value(key: &[u8], v: &Version, buf: &mut Vec<u8>) {
    buf.clear();
    let kv = if v.is_tombstone() { PbKeyValue { key: key.to_vec(), ..Default::default() } } else { to_kv(key, v, false) };
    kv.encode(buf).expect("a Vec grows as needed");
}

impl Store {
    /// etcd's HashKV of the history at or below `rev` (see the module comment).
    pub fn hash_kv(&self, rev: i64) -> u32 {
        let compacted = self.compacted_rev();
        // Gathered under the read locks (values are reference-counted), hashed after.
        let mut records: Vec<(Bytes, Version, bool)> = Vec::new();
        let mut any_live = false;
        {
            let locked = self.lock_read(self.all_shards());
            for (k, h) in locked.range(&KeyRange::new(b"\0", b"\0")) {
                // etcd's "keep" set at rev: each key's live version then, if it has one.
                let live = h.at(rev).map(|v| (v.mod_rev, v.sub));
                any_live |= live.is_some();
                for v in h.versions().iter().filter(|v| v.mod_rev <= rev) {
                    records.push((k.clone(), v.clone(), live == Some((v.mod_rev, v.sub))));
                }
            }
        }
        records.sort_unstable_by_key(|(_, v, _)| (v.mod_rev, v.sub));
        let mut crc = crc32c::crc32c(KEY_BUCKET);
        let mut buf = Vec::new();
        for (k, v, live) in &records {
            if v.mod_rev <= compacted && any_live && !live {
                continue;
            }
            if v.mod_rev == compacted && v.is_tombstone() {
                continue;
            }
            let (rk, n) = revision_key(v);
            crc = crc32c::crc32c_append(crc, &rk[..n]);
            record_value(k, v, &mut buf);
            crc = crc32c::crc32c_append(crc, &buf);
        }
        crc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_client::proto::{PbDeleteRequest, PbPutRequest};

    #[test]
    fn an_empty_history_hashes_the_bucket_name() {
        assert_eq!(Store::new().hash_kv(0), crc32c::crc32c(b"key"));
    }

    /// The bytes of one put and one delete spelled out: the record layout is etcd's.
    #[test]
    fn records_are_etcd_bucket_records() {
        let s = Store::new();
        s.put(&PbPutRequest { key: b"a".to_vec(), value: b"v".to_vec(), ..Default::default() }).unwrap();
        let mut want = b"key".to_vec();
        want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 2, b'_', 0, 0, 0, 0, 0, 0, 0, 0]);
        // KeyValue{key "a", create_revision 2, mod_revision 2, version 1, value "v"}
        want.extend_from_slice(&[0x0a, 1, b'a', 0x10, 2, 0x18, 2, 0x20, 1, 0x2a, 1, b'v']);
        assert_eq!(s.hash_kv(2), crc32c::crc32c(&want));
        s.delete_range(&PbDeleteRequest { key: b"a".to_vec(), ..Default::default() }).unwrap();
        let at2 = s.hash_kv(2);
        want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 3, b'_', 0, 0, 0, 0, 0, 0, 0, 0, b't']);
        want.extend_from_slice(&[0x0a, 1, b'a']);
        assert_eq!(s.hash_kv(3), crc32c::crc32c(&want));
        assert_eq!(s.hash_kv(2), at2, "a later write does not change the hash at an earlier revision");
    }

    /// After a compaction only each key's live version at or below the compaction point counts.
    #[test]
    fn compacted_revisions_count_only_when_live() {
        let put = |s: &Store, k: &str, v: &str| {
            s.put(&PbPutRequest { key: k.into(), value: v.into(), ..Default::default() }).unwrap();
        };
        let (a, b) = (Store::new(), Store::new());
        for s in [&a, &b] {
            put(s, "k", "1");
            put(s, "k", "2");
            put(s, "j", "1");
        }
        a.compact(3).unwrap();
        // b keeps its history; hashing it at 4 must skip what a's compaction dropped
        // only once b is compacted too, so the two differ before and agree after.
        assert_ne!(a.hash_kv(4), b.hash_kv(4));
        b.compact(3).unwrap();
        assert_eq!(a.hash_kv(4), b.hash_kv(4));
    }
}
