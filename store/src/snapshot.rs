//! The snapshot format (docs/design.md, "Snapshot"): the whole state — every
//! retained revision of every key, leases, revision counters — as one
//! checksummed byte string. Maintenance.Snapshot streams it; restore reads it.
//! The server's snapshots end with the auth state (`"AUTH" | len:u64 |
//! auth.state's bytes`, crate::auth::persist) before the checksum, as etcd's
//! snapshot holds its auth buckets; a snapshot without it still decodes.
use bytes::{Buf, BufMut, Bytes};

use crate::mvcc::key_history::Version;
use crate::mvcc::Store;

pub const MAGIC: &[u8; 8] = b"MGNSNAP1";

const AUTH_TAG: &[u8; 4] = b"AUTH";

pub fn encode(store: &Store) -> Vec<u8> {
    encode_with_auth(store, None)
}

/// The snapshot, with the encoded auth state (crate::auth::persist::encode) when given.
pub fn encode_with_auth(store: &Store, auth: Option<&[u8]>) -> Vec<u8> {
    let shards = store.all_shards();
    let locked = store.lock_read(shards);
    // Committed: the shards hold every version up to it; the server streams
    // the snapshot only once it is published (durable).
    let rev = store.committed_rev();
    let mut out = Vec::with_capacity(1 << 16);
    out.put_slice(MAGIC);
    out.put_i64_le(rev);
    out.put_i64_le(store.compacted_rev());
    let leases = store.leases.all();
    out.put_u64_le(leases.len() as u64);
    for (id, granted, remaining) in leases {
        out.put_i64_le(id);
        out.put_i64_le(granted);
        out.put_i64_le(remaining);
    }
    let n: usize = locked.shards.iter().map(|(_, g)| g.len()).sum();
    out.put_u64_le(n as u64);
    for (_, g) in &locked.shards {
        for (k, h) in g.iter() {
            put_key(&mut out, k, h.versions());
        }
    }
    if let Some(a) = auth {
        out.put_slice(AUTH_TAG);
        out.put_u64_le(a.len() as u64);
        out.put_slice(a);
    }
    let crc = crc32c::crc32c(&out);
    out.put_u32_le(crc);
    out
}

pub struct Decoded {
    pub rev: i64,
    pub compacted: i64,
    pub leases: Vec<(i64, i64, i64)>,
    pub keys: Vec<(Bytes, Vec<Version>)>,
    /// The encoded auth state, when the snapshot carries one.
    pub auth: Option<Vec<u8>>,
}

pub fn decode(buf: &[u8]) -> Result<Decoded, String> {
    if buf.len() < MAGIC.len() + 4 || &buf[..8] != MAGIC {
        return Err("not a meganode snapshot (bad magic)".into());
    }
    let (body, tail) = buf.split_at(buf.len() - 4);
    let want = u32::from_le_bytes(tail.try_into().unwrap());
    if crc32c::crc32c(body) != want {
        return Err("snapshot checksum mismatch".into());
    }
    let mut b = &body[8..];
    let short = || "snapshot truncated".to_string();
    macro_rules! need {
        ($n:expr) => {
            if b.remaining() < $n {
                return Err(short());
            }
        };
    }
    need!(24);
    let rev = b.get_i64_le();
    let compacted = b.get_i64_le();
    let nl = b.get_u64_le() as usize;
    let mut leases = Vec::with_capacity(nl.min(1 << 20));
    for _ in 0..nl {
        need!(24);
        leases.push((b.get_i64_le(), b.get_i64_le(), b.get_i64_le()));
    }
    need!(8);
    let nk = b.get_u64_le() as usize;
    let keys = get_keys(&mut b, nk)?;
    let mut auth = None;
    if b.remaining() >= 12 && &b[..4] == AUTH_TAG {
        b.advance(4);
        let n = b.get_u64_le() as usize;
        need!(n);
        auth = Some(b[..n].to_vec());
        b.advance(n);
    }
    if b.has_remaining() {
        return Err(format!("snapshot: {} bytes after the keys", b.remaining()));
    }
    Ok(Decoded { rev, compacted, leases, keys, auth })
}

/// One key with its versions, as snapshots and checkpoints store it.
pub fn put_key(out: &mut Vec<u8>, k: &[u8], versions: &[Version]) {
    out.put_u32_le(k.len() as u32);
    out.put_slice(k);
    out.put_u32_le(versions.len() as u32);
    for v in versions {
        out.put_i64_le(v.mod_rev);
        out.put_u32_le(v.sub);
        out.put_i64_le(v.create_rev);
        out.put_i64_le(v.version);
        out.put_i64_le(v.lease);
        let value = v.value.cow();
        out.put_u32_le(value.len() as u32);
        out.put_slice(&value);
    }
}

/// Keys as `put_key` wrote them (snapshots and checkpoints).
pub(crate) fn get_keys(b: &mut &[u8], nk: usize) -> Result<Vec<(Bytes, Vec<Version>)>, String> {
    let short = || "truncated".to_string();
    let mut keys = Vec::with_capacity(nk.min(1 << 20));
    for _ in 0..nk {
        if b.remaining() < 4 {
            return Err(short());
        }
        let kl = b.get_u32_le() as usize;
        if b.remaining() < kl + 4 {
            return Err(short());
        }
        let key = Bytes::copy_from_slice(&b[..kl]);
        b.advance(kl);
        let nv = b.get_u32_le() as usize;
        let mut vs = Vec::with_capacity(nv.min(1 << 16));
        for _ in 0..nv {
            if b.remaining() < 40 {
                return Err(short());
            }
            let mod_rev = b.get_i64_le();
            let sub = b.get_u32_le();
            let create_rev = b.get_i64_le();
            let version = b.get_i64_le();
            let lease = b.get_i64_le();
            let vl = b.get_u32_le() as usize;
            if b.remaining() < vl {
                return Err(short());
            }
            let value = Bytes::copy_from_slice(&b[..vl]).into();
            b.advance(vl);
            vs.push(Version { mod_rev, sub, create_rev, version, value, lease });
        }
        keys.push((key, vs));
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_client::proto::PbPutRequest;

    #[test]
    fn snapshot_round_trip() {
        let s = Store::new();
        for i in 0..20 {
            s.put(&PbPutRequest { key: format!("/registry/pods/ns/p{}", i % 7).into_bytes(), value: vec![i as u8; 10], ..Default::default() }).unwrap();
        }
        s.grant_lease(99, 30).unwrap();
        let blob = encode(&s);
        let d = decode(&blob).unwrap();
        assert_eq!(d.rev, 21);
        assert_eq!(d.keys.len(), 7);
        assert_eq!(d.keys.iter().map(|(_, v)| v.len()).sum::<usize>(), 20);
        assert_eq!(d.leases.len(), 1);
        let mut bad = blob.clone();
        bad[20] ^= 1;
        assert!(decode(&bad).is_err());
        assert_eq!(d.auth, None);
        let with = decode(&encode_with_auth(&s, Some(b"MGNAUTH1 state"))).unwrap();
        assert_eq!(with.auth.as_deref(), Some(&b"MGNAUTH1 state"[..]));
        assert_eq!(with.keys.len(), 7);
    }
}
