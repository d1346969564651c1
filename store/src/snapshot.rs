//! The snapshot format (docs/design.md, "Snapshot"): the whole state — every
//! retained revision of every key, leases, revision counters — as one
//! checksummed byte string. Maintenance.Snapshot streams it; restore reads it.
//! The server's snapshots end with the auth state (`"AUTH" | len:u64 |
//! auth.state's bytes`, crate::auth::persist) before the checksum, as etcd's
//! snapshot holds its auth buckets; a snapshot without it still decodes.
use std::io::{Read, Write};

use bytes::{Buf, BufMut, Bytes};

use crate::mvcc::key_history::Version;
use crate::mvcc::value::{Dict, Value};
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
    put_head(&mut out, MAGIC, store, rev);
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

/// What both forms start with: magic, revision, compaction point, and every
/// lease as (ID, granted TTL, remaining TTL).
fn put_head(out: &mut Vec<u8>, magic: &[u8; 8], store: &Store, rev: i64) {
    out.put_slice(magic);
    out.put_i64_le(rev);
    out.put_i64_le(store.compacted_rev());
    let leases = store.leases.all();
    out.put_u64_le(leases.len() as u64);
    for (id, granted, remaining) in leases {
        out.put_i64_le(id);
        out.put_i64_le(granted);
        out.put_i64_le(remaining);
    }
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

/// The items of the third checkpoint format and of the snapshot stream.
pub(crate) const ITEM_DICT: u8 = b'D';
pub(crate) const ITEM_KEY: u8 = b'K';

/// One key as the third checkpoint format and the snapshot stream store it: a
/// dictionary item first for each dictionary not yet written, then the key item
/// (docs/design.md §5).
pub(crate) fn put_key_v3(out: &mut Vec<u8>, k: &[u8], versions: &[Version], written: &mut std::collections::HashSet<u32>) {
    for v in versions {
        if let Value::Zstd { dict, .. } = &v.value {
            if written.insert(dict.id) {
                out.put_u8(ITEM_DICT);
                out.put_u32_le(dict.id);
                out.put_u32_le(dict.content.len() as u32);
                out.put_slice(&dict.content);
            }
        }
    }
    out.put_u8(ITEM_KEY);
    out.put_u32_le(k.len() as u32);
    out.put_slice(k);
    out.put_u32_le(versions.len() as u32);
    for v in versions {
        out.put_i64_le(v.mod_rev);
        out.put_u32_le(v.sub);
        out.put_i64_le(v.create_rev);
        out.put_i64_le(v.version);
        out.put_i64_le(v.lease);
        match &v.value {
            Value::Raw(data) | Value::Zstd { data, .. } => {
                out.put_u32_le(if let Value::Zstd { dict, .. } = &v.value { dict.id } else { 0 });
                out.put_u32_le(data.len() as u32);
                out.put_slice(data);
            }
            // A replaced version's value, read back from its spill file as written.
            Value::Spilled { .. } => {
                out.put_u32_le(0);
                out.put_u32_le(v.value.len() as u32);
                v.value.write_to(out);
            }
        }
    }
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

/// The streamed form a member sends another that must take its state
/// (docs/design.md §10, "Snapshots"): written while the store serves, not
/// from one copy made under every shard's lock.
///
/// ```text
/// "MGNSNAP2" | rev:i64 | compacted:i64 | leases:u64 | (id:i64, granted:i64, remaining:i64)*
///   | item* | 'E' | crc32c:u32                                               (little-endian)
/// item: the third checkpoint format's (docs/design.md §5): 'D' | dict id:u32 | len:u32 | zstd
///   dictionary, before the first value packed with it; 'K' | key | versions with mod_rev <= rev,
///   each value with its dictionary id (0: raw) as stored — packed values stay packed;
///   'A' | len:u32 | the auth state as the group's log keeps it (replication::AuthLog), once, first;
///   'M' | n:u32 | (member:u64 | alarm:i32)* the raised alarms, once, after 'A' (none: no item)
/// ```
/// The crc covers every byte before it. Packed values travel packed: the
/// sender decompresses nothing, the receiver holds no raw copy it would pack
/// again (at 1M nodes the values are 7.3 GiB raw, 0.4 GiB packed).
pub const STREAM_MAGIC: &[u8; 8] = b"MGNSNAP2";
const ITEM_END: u8 = b'E';
const ITEM_AUTH: u8 = b'A';
const ITEM_ALARMS: u8 = b'M';
/// Keys copied per shard lock: a writer to the shard waits at most one chunk.
const STREAM_CHUNK_KEYS: usize = 2048;
/// Bounds for a key or value length read from a stream (a garbled one must not
/// make the reader allocate gigabytes).
const STREAM_MAX_LEN: usize = 256 << 20;

struct CrcWriter<W: std::io::Write> {
    inner: W,
    crc: u32,
}

impl<W: std::io::Write> CrcWriter<W> {
    fn put(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.crc = crc32c::crc32c_append(self.crc, b);
        self.inner.write_all(b)
    }
}

/// Writes the store's state at its published revision to `w` as the stream
/// above: each shard walked a chunk of keys at a time under its read lock;
/// versions written after the revision are left out, and compactions wait
/// until the stream is written (one would drop versions it still reads).
/// Returns the revision and the bytes written.
pub fn write_stream(store: &Store, w: impl std::io::Write) -> std::io::Result<(i64, u64)> {
    write_stream_with(store, w, None)
}

/// `write_stream` with the auth state (`'A'` item) after the head.
pub fn write_stream_with(store: &Store, w: impl std::io::Write, auth: Option<&[u8]>) -> std::io::Result<(i64, u64)> {
    let _no_compaction = store.hold_compactions();
    let rev = store.current_rev();
    let mut w = CrcWriter { inner: std::io::BufWriter::with_capacity(1 << 20, w), crc: 0 };
    let mut head = Vec::with_capacity(64);
    put_head(&mut head, STREAM_MAGIC, store, rev);
    if let Some(a) = auth {
        head.push(ITEM_AUTH);
        head.extend_from_slice(&(a.len() as u32).to_le_bytes());
        head.extend_from_slice(a);
    }
    let alarms = store.alarms.get(crate::quota::ALARM_NONE);
    if !alarms.is_empty() {
        head.push(ITEM_ALARMS);
        head.extend_from_slice(&(alarms.len() as u32).to_le_bytes());
        for (member, alarm) in alarms {
            head.extend_from_slice(&member.to_le_bytes());
            head.extend_from_slice(&alarm.to_le_bytes());
        }
    }
    w.put(&head)?;
    let mut total = head.len() as u64;
    let mut buf = Vec::with_capacity(1 << 20);
    let mut dicts = std::collections::HashSet::new();
    for shard in store.all_shards() {
        let mut after: Option<Bytes> = None;
        loop {
            buf.clear();
            let mut walked = 0;
            {
                let locked = store.lock_read(vec![shard.clone()]);
                for (k, h) in locked.shards[0].1.iter_after(after.as_deref()) {
                    let vs = h.versions();
                    let upto = vs.partition_point(|v| v.mod_rev <= rev);
                    if upto > 0 {
                        put_key_v3(&mut buf, k, &vs[..upto], &mut dicts);
                    }
                    walked += 1;
                    if walked == STREAM_CHUNK_KEYS {
                        after = Some(k.clone());
                        break;
                    }
                }
            }
            w.put(&buf)?;
            total += buf.len() as u64;
            if walked < STREAM_CHUNK_KEYS {
                break;
            }
        }
    }
    w.put(&[ITEM_END])?;
    let crc = w.crc;
    w.inner.write_all(&crc.to_le_bytes())?;
    w.inner.flush()?;
    Ok((rev, total + 1 + 4))
}

struct CrcReader<R: std::io::Read> {
    inner: R,
    crc: u32,
}

impl<R: std::io::Read> CrcReader<R> {
    fn take(&mut self, out: &mut [u8]) -> Result<(), String> {
        self.inner.read_exact(out).map_err(|e| format!("snapshot stream: {e}"))?;
        self.crc = crc32c::crc32c_append(self.crc, out);
        Ok(())
    }

    fn u8(&mut self) -> Result<u8, String> {
        let mut b = [0u8; 1];
        self.take(&mut b)?;
        Ok(b[0])
    }

    fn u32(&mut self) -> Result<u32, String> {
        let mut b = [0u8; 4];
        self.take(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    fn i64(&mut self) -> Result<i64, String> {
        let mut b = [0u8; 8];
        self.take(&mut b)?;
        Ok(i64::from_le_bytes(b))
    }

    fn bytes(&mut self, n: usize) -> Result<Bytes, String> {
        if n > STREAM_MAX_LEN {
            return Err(format!("snapshot stream: a length of {n} bytes"));
        }
        let mut v = vec![0u8; n];
        self.take(&mut v)?;
        Ok(Bytes::from(v))
    }
}

/// Loads a stream (`write_stream`) into this empty store as it arrives, then
/// publishes it at once (`Store::finish_snapshot`). Returns the revision and
/// the keys. A stream that ends early or fails its checksum is an error: the
/// store then holds part of it and must not serve (the caller stops).
pub fn install_stream(store: &Store, r: impl std::io::Read) -> Result<(i64, u64), String> {
    install_stream_with(store, r).map(|(rev, keys, _)| (rev, keys))
}

/// `install_stream`, also giving the auth state the stream carried.
pub fn install_stream_with(store: &Store, r: impl std::io::Read) -> Result<(i64, u64, Option<Vec<u8>>), String> {
    let mut auth = None;
    let mut r = CrcReader { inner: std::io::BufReader::with_capacity(1 << 20, r), crc: 0 };
    let mut magic = [0u8; 8];
    r.take(&mut magic)?;
    if &magic != STREAM_MAGIC {
        return Err("not a meganode snapshot stream (bad magic)".into());
    }
    let rev = r.i64()?;
    let compacted = r.i64()?;
    let nl = r.i64()? as u64;
    if nl > 1 << 32 {
        return Err(format!("snapshot stream: {nl} leases"));
    }
    let mut leases = Vec::with_capacity(nl.min(1 << 20) as usize);
    for _ in 0..nl {
        leases.push((r.i64()?, r.i64()?, r.i64()?));
    }
    let mut keys = 0u64;
    let mut dicts: std::collections::HashMap<u32, std::sync::Arc<Dict>> = std::collections::HashMap::new();
    loop {
        match r.u8()? {
            ITEM_END => break,
            ITEM_AUTH if auth.is_none() && keys == 0 => {
                let n = r.u32()? as usize;
                auth = Some(r.bytes(n)?.to_vec());
            }
            ITEM_ALARMS if keys == 0 => {
                let n = r.u32()?;
                if n > 1 << 16 {
                    return Err(format!("snapshot stream: {n} alarms"));
                }
                for _ in 0..n {
                    let member = r.i64()? as u64;
                    let alarm = r.u32()? as i32;
                    store.alarms.activate(member, alarm);
                }
            }
            ITEM_DICT => {
                let id = r.u32()?;
                let n = r.u32()? as usize;
                dicts.insert(id, Dict::new(&r.bytes(n)?));
            }
            ITEM_KEY => {
                let kl = r.u32()? as usize;
                let key = r.bytes(kl)?;
                let nv = r.u32()? as usize;
                if nv > STREAM_MAX_LEN {
                    return Err(format!("snapshot stream: {nv} versions of one key"));
                }
                let mut vs = Vec::with_capacity(nv.min(1 << 16));
                for _ in 0..nv {
                    let mod_rev = r.i64()?;
                    let sub = r.u32()?;
                    let create_rev = r.i64()?;
                    let version = r.i64()?;
                    let lease = r.i64()?;
                    let id = r.u32()?;
                    let vl = r.u32()? as usize;
                    let data = r.bytes(vl)?;
                    let value = if id == 0 {
                        Value::Raw(data)
                    } else {
                        let dict = dicts.get(&id).ok_or_else(|| format!("snapshot stream: a value packed with dictionary {id}, not sent before it"))?;
                        if !matches!(zstd::zstd_safe::get_frame_content_size(&data), Ok(Some(_))) {
                            return Err("snapshot stream: a packed value that is not a zstd frame with its size".into());
                        }
                        Value::Zstd { dict: dict.clone(), data }
                    };
                    vs.push(Version { mod_rev, sub, create_rev, version, value, lease });
                }
                store.load_key(key, vs);
                keys += 1;
            }
            t => return Err(format!("snapshot stream: unknown item {t:#x}")),
        }
    }
    let want = r.crc;
    let mut tail = [0u8; 4];
    r.inner.read_exact(&mut tail).map_err(|e| format!("snapshot stream: {e}"))?;
    if u32::from_le_bytes(tail) != want {
        return Err("snapshot stream checksum mismatch".into());
    }
    store.finish_snapshot(rev, compacted, &leases);
    Ok((rev, keys, auth))
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_client::proto::PbPutRequest;

    #[test]
    fn a_stream_carries_the_published_state_and_a_bad_one_is_refused() {
        let s = Store::new();
        for i in 0..5000 {
            s.put(&PbPutRequest { key: format!("/registry/pods/ns/p{}", i % 3000).into_bytes(), value: vec![i as u8; 10], ..Default::default() }).unwrap();
        }
        // Node-like values, enough for the packer to train a dictionary and pack them.
        for i in 0..1500 {
            let v = format!("{{\"kind\":\"Node\",\"metadata\":{{\"name\":\"node-{i:05}\",\"labels\":{{\"zone\":\"z{}\"}}}},\"status\":\"{}\"}}", i % 7, "Ready ".repeat(150));
            s.put(&PbPutRequest { key: format!("/registry/minions/node-{i:05}").into_bytes(), value: v.into_bytes(), ..Default::default() }).unwrap();
        }
        s.grant_lease(99, 30).unwrap();
        crate::mvcc::packer::Packer::unpaced().pass(&s);
        let packed = |st: &Store| {
            let locked = st.lock_read(st.all_shards());
            locked.shards.iter().flat_map(|(_, g)| g.iter().map(|(_, h)| h.versions().iter().filter(|v| v.value.is_packed()).count())).sum::<usize>()
        };
        assert!(packed(&s) > 1000, "the packer packed the nodes: {}", packed(&s));
        let mut out = Vec::new();
        let (rev, n) = write_stream(&s, &mut out).unwrap();
        assert_eq!((rev, n), (s.current_rev(), out.len() as u64));
        let t = Store::new();
        assert_eq!(install_stream(&t, &out[..]).unwrap(), (rev, 4500));
        assert_eq!(t.current_rev(), rev);
        assert_eq!(packed(&t), packed(&s), "packed values travel packed");
        let keys = |st: &Store| {
            let mut d = decode(&encode(st)).unwrap();
            d.keys.sort_by(|a, b| a.0.cmp(&b.0));
            (d.rev, d.leases.iter().map(|l| (l.0, l.1)).collect::<Vec<_>>(), d.keys.into_iter().map(|(k, vs)| (k, vs.iter().map(|v| (v.mod_rev, v.sub, v.create_rev, v.version, v.value.cow().to_vec())).collect::<Vec<_>>())).collect::<Vec<_>>())
        };
        let (a, b) = (keys(&t), keys(&s));
        assert_eq!((a.0, &a.1, a.2.len()), (b.0, &b.1, b.2.len()));
        for (x, y) in a.2.iter().zip(&b.2) {
            assert!(x == y, "{:?}: {:?} vs {:?}", x.0, x.1.iter().map(|v| v.0).collect::<Vec<_>>(), y.1.iter().map(|v| v.0).collect::<Vec<_>>());
        }
        let mut bad = out.clone();
        bad[100] ^= 1;
        assert!(install_stream(&Store::new(), &bad[..]).is_err(), "a flipped bit");
        assert!(install_stream(&Store::new(), &out[..out.len() - 1]).is_err(), "cut short");
        assert!(install_stream(&Store::new(), &out[8..]).is_err(), "no magic");
    }

    /// A group member's stream carries the auth state and the raised alarms beside the keys.
    #[test]
    fn a_stream_carries_the_auth_state_and_the_alarms() {
        let s = Store::new();
        s.put(&PbPutRequest { key: b"k".to_vec(), value: b"v".to_vec(), ..Default::default() }).unwrap();
        s.alarms.activate(7, crate::quota::ALARM_NOSPACE);
        s.alarms.activate(9, crate::quota::ALARM_CORRUPT);
        let mut out = Vec::new();
        write_stream_with(&s, &mut out, Some(b"the auth state")).unwrap();
        let t = Store::new();
        let (_, keys, auth) = install_stream_with(&t, &out[..]).unwrap();
        assert_eq!((keys, auth.as_deref()), (1, Some(&b"the auth state"[..])));
        assert_eq!(t.alarms.get(crate::quota::ALARM_NONE), s.alarms.get(crate::quota::ALARM_NONE));
        assert!(t.alarms.capped() && t.alarms.corrupt());
        // Without them, neither item.
        let mut plain = Vec::new();
        write_stream(&Store::new(), &mut plain).unwrap();
        let (_, _, auth) = install_stream_with(&Store::new(), &plain[..]).unwrap();
        assert!(auth.is_none());
    }

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
