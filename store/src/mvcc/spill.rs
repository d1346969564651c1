//! History off the heap: a value that a newer version of its key has replaced
//! (an update or a delete) is copied to a spill file and dropped from memory; the
//! version keeps `Value::Spilled { segment, offset, len }` and a read of it (a
//! Range at an old revision, a watch catching up from history, HashKV, a
//! checkpoint) reads the bytes back from the file.
//!
//! Why: an MVCC store keeps every version until compaction. etcd keeps them in
//! its db file, outside its heap; a store that keeps them in memory holds every
//! update of the last compaction interval — the put benchmark's 100K keys
//! updated 500K times in 10 s held 500 MiB of superseded 1 KiB values, 2.5–3.7×
//! etcd's peak RSS (issue 12), and a million node leases renewed every 10 s for
//! kube-apiserver's 5-minute compaction interval would hold 30M versions.
//!
//! Spill files are a cache of memory, not a durability mechanism: the write-ahead
//! log and checkpoints still hold every version. Each is created unlinked in the
//! data directory (`O_TMPFILE`), so it needs no cleaning after a crash and its
//! space is returned when the last version that points into it is compacted away
//! (its `Arc<Segment>` dropped). Appending is a copy into the segment's tail
//! buffer under the shard's write lock — no I/O under a lock; the buffer is
//! written out (`pwrite`) by a writer after its locks are dropped, once it holds
//! `FLUSH_AT` bytes. A read finds its bytes in the file, in the buffer being
//! written, or in the tail.
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

/// Values shorter than this stay in memory: a spilled value's handle (24 bytes)
/// and a file read would cost more than they save.
pub const MIN_LEN: usize = 256;
/// A segment takes appends until it holds this much; then a new one starts.
const SEGMENT_BYTES: u64 = 64 << 20;
/// The largest value spilled (`Value::Spilled` keeps its length in 32 bits).
pub const MAX_LEN: usize = u32::MAX as usize;
/// The tail is written out once it holds this much.
const FLUSH_AT: usize = 256 << 10;

/// Process-wide counters for /metrics.
#[derive(Default)]
pub struct SpillStats {
    /// Values spilled, and their bytes, since the start.
    pub values: AtomicU64,
    pub bytes: AtomicU64,
    /// Bytes of the segments still alive (referred to by some version), files on disk.
    pub live_bytes: AtomicU64,
    pub live_segments: AtomicU64,
    /// Reads of spilled values.
    pub reads: AtomicU64,
    /// Failed writes of spill files (the values stay in memory; the write is retried).
    pub write_errors: AtomicU64,
}

pub static STATS: SpillStats = SpillStats {
    values: AtomicU64::new(0),
    bytes: AtomicU64::new(0),
    live_bytes: AtomicU64::new(0),
    live_segments: AtomicU64::new(0),
    reads: AtomicU64::new(0),
    write_errors: AtomicU64::new(0),
};

struct Tail {
    /// Bytes appended and not yet handed to a write, from file offset `start`.
    buf: Vec<u8>,
    start: u64,
    /// A buffer being written: its bytes from file offset `at`.
    writing: Option<(Arc<Vec<u8>>, u64)>,
}

/// One spill file.
pub struct Segment {
    file: File,
    tail: Mutex<Tail>,
    /// Serialises the writes of full tails (in file order).
    write: Mutex<()>,
    size: AtomicU64,
}

impl Drop for Segment {
    fn drop(&mut self) {
        STATS.live_bytes.fetch_sub(self.size.load(Ordering::Relaxed), Ordering::Relaxed);
        STATS.live_segments.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Segment {
    /// Appends `bytes`; returns their offset.
    fn append(&self, bytes: &[u8]) -> u64 {
        let mut t = self.tail.lock();
        let off = t.start + t.buf.len() as u64;
        t.buf.extend_from_slice(bytes);
        self.size.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        STATS.live_bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        off
    }

    /// Writes the tail out if it is full enough (`force`: whatever it holds).
    /// Only one writer at a time; another finding the write busy goes on.
    fn flush(&self, force: bool) -> std::io::Result<()> {
        let Some(_w) = (if force { Some(self.write.lock()) } else { self.write.try_lock() }) else {
            return Ok(());
        };
        let (buf, at) = {
            let mut t = self.tail.lock();
            if t.buf.is_empty() || (!force && t.buf.len() < FLUSH_AT) {
                return Ok(());
            }
            let buf = Arc::new(std::mem::replace(&mut t.buf, Vec::with_capacity(FLUSH_AT + (64 << 10))));
            let at = t.start;
            t.start += buf.len() as u64;
            t.writing = Some((buf.clone(), at));
            (buf, at)
        };
        let r = self.file.write_all_at(&buf, at);
        drop(buf);
        let mut t = self.tail.lock();
        match &r {
            Ok(()) => t.writing = None,
            Err(e) => {
                if STATS.write_errors.fetch_add(1, Ordering::Relaxed) == 0 {
                    eprintln!("meganode-store: warning: writing a history spill file failed: {e}; the values stay in memory and the write is retried");
                }
                // Not written: the bytes stay in memory (`writing` is read like the tail)
                // and are tried again with the next flush.
                let mut back = Arc::try_unwrap(t.writing.take().unwrap().0).unwrap_or_else(|a| (*a).clone());
                back.extend_from_slice(&t.buf);
                t.buf = back;
                t.start = at;
            }
        }
        r
    }

    /// Appends the `len` bytes at `off` to `out`.
    pub fn read_into(&self, off: u64, len: usize, out: &mut Vec<u8>) {
        STATS.reads.fetch_add(1, Ordering::Relaxed);
        {
            let t = self.tail.lock();
            if off >= t.start {
                let s = (off - t.start) as usize;
                out.extend_from_slice(&t.buf[s..s + len]);
                return;
            }
            if let Some((w, at)) = &t.writing {
                if off >= *at {
                    let s = (off - at) as usize;
                    out.extend_from_slice(&w[s..s + len]);
                    return;
                }
            }
        }
        let at = out.len();
        out.resize(at + len, 0);
        self.file
            .read_exact_at(&mut out[at..], off)
            .unwrap_or_else(|e| panic!("reading {len} spilled bytes at {off}: {e} (the spill file was written; the disk failed)"));
    }
}

/// The spill of one store.
pub struct Spill {
    dir: PathBuf,
    state: Mutex<State>,
    /// Bytes put since the last `flush_if_full` that looked: the writers' fast path.
    unflushed: AtomicU64,
    /// A put found no segment ready: `flush_if_full` makes one at once.
    need_next: std::sync::atomic::AtomicBool,
}

struct State {
    /// The segment appended to now.
    cur: Option<Arc<Segment>>,
    /// The one to take over, made ahead of time so that no file is created under
    /// the caller's locks.
    next: Option<Segment>,
    /// Full segments whose tails are still to be written out.
    retired: Vec<Arc<Segment>>,
}

impl Spill {
    /// A spill in `dir`, checked by creating its first segment (an error: no spill).
    pub fn new(dir: &Path) -> std::io::Result<Spill> {
        let first = new_segment(dir)?;
        Ok(Spill {
            dir: dir.to_path_buf(),
            state: Mutex::new(State { cur: Some(Arc::new(first)), next: None, retired: Vec::new() }),
            unflushed: AtomicU64::new(0),
            need_next: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Copies `bytes` to the spill: the segment and offset that hold them now, or
    /// None when no segment can be had (the value then stays in memory). Memory
    /// work only, unless no segment was made ahead (then one file is created).
    pub fn put(&self, bytes: &[u8]) -> Option<(Arc<Segment>, u64)> {
        let mut st = self.state.lock();
        if st.cur.as_ref().is_none_or(|s| s.size.load(Ordering::Relaxed) >= SEGMENT_BYTES) {
            // No file is created here (the caller holds the shard's lock and the
            // sequencer): without a segment made ahead, the value stays in memory and the
            // next `flush_if_full` makes one.
            let Some(next) = st.next.take() else {
                self.need_next.store(true, Ordering::Relaxed);
                return None;
            };
            if let Some(old) = st.cur.replace(Arc::new(next)) {
                st.retired.push(old);
            }
        }
        let seg = st.cur.as_ref().unwrap().clone();
        drop(st);
        let off = seg.append(bytes);
        self.unflushed.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        STATS.values.fetch_add(1, Ordering::Relaxed);
        STATS.bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Some((seg, off))
    }

    /// Writes the current segment's tail out if it holds `FLUSH_AT` bytes, and full
    /// segments' tails whole; makes the next segment once this one is half full.
    /// Called by writers after their locks are dropped.
    pub fn flush_if_full(&self) {
        let needed = self.need_next.swap(false, Ordering::Relaxed);
        if !needed && self.unflushed.load(Ordering::Relaxed) < FLUSH_AT as u64 {
            return;
        }
        self.unflushed.store(0, Ordering::Relaxed);
        let (cur, retired, make_next) = {
            let mut st = self.state.lock();
            let cur = st.cur.clone();
            let half = cur.as_ref().is_none_or(|s| s.size.load(Ordering::Relaxed) >= SEGMENT_BYTES / 2);
            (cur, std::mem::take(&mut st.retired), (needed || half) && st.next.is_none())
        };
        if let Some(s) = cur {
            let _ = s.flush(false);
        }
        for s in retired {
            if s.flush(true).is_err() {
                // Kept in memory; tried again at the next call.
                self.state.lock().retired.push(s);
            }
        }
        if make_next {
            if let Ok(n) = new_segment(&self.dir) {
                let mut st = self.state.lock();
                if st.next.is_none() {
                    st.next = Some(n);
                }
            }
        }
    }
}

/// A new spill file: unlinked from the start (O_TMPFILE), or created and unlinked
/// where the filesystem has no O_TMPFILE.
fn new_segment(dir: &Path) -> std::io::Result<Segment> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = match std::fs::OpenOptions::new().read(true).write(true).mode(0o600).custom_flags(libc::O_TMPFILE).open(dir) {
        Ok(f) => f,
        Err(_) => {
            let path = dir.join(format!(".spill-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
            let f = std::fs::OpenOptions::new().read(true).write(true).create_new(true).mode(0o600).open(&path)?;
            std::fs::remove_file(&path)?;
            f
        }
    };
    STATS.live_segments.fetch_add(1, Ordering::Relaxed);
    Ok(Segment {
        file,
        tail: Mutex::new(Tail { buf: Vec::with_capacity(FLUSH_AT + (64 << 10)), start: 0, writing: None }),
        write: Mutex::new(()),
        size: AtomicU64::new(0),
    })
}

static NEXT: AtomicU64 = AtomicU64::new(0);

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("mgn-spill-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Bytes read back equal the bytes put, wherever they are: the tail, the file,
    /// the next segment; the files leave no name behind.
    #[test]
    fn reads_back_from_tail_file_and_later_segments() {
        let d = dir("rw");
        let s = Spill::new(&d).unwrap();
        let mut put = Vec::new();
        for i in 0..3000u32 {
            let v: Vec<u8> = (0..(300 + i % 5000)).map(|j| (i.wrapping_mul(31) ^ j) as u8).collect();
            let (seg, off) = s.put(&v).unwrap();
            put.push((seg, off, v));
            if i % 7 == 0 {
                s.flush_if_full();
            }
            // Read a few back at once, from the tail or the file.
            let (seg, off, v) = &put[(i as usize * 13) % put.len()];
            let mut out = vec![9];
            seg.read_into(*off, v.len(), &mut out);
            assert_eq!(&out[1..], &v[..]);
        }
        for (seg, off, v) in &put {
            let mut out = Vec::new();
            seg.read_into(*off, v.len(), &mut out);
            assert_eq!(&out, v);
        }
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0, "spill files have no name");
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A segment fills, the next takes over, and the full one is freed with the
    /// last value that refers to it.
    #[test]
    fn segments_roll_over_and_die_with_their_values() {
        let d = dir("roll");
        let s = Spill::new(&d).unwrap();
        let big = vec![7u8; 1 << 20];
        let first: Vec<_> = (0..64).map(|_| s.put(&big).unwrap()).collect();
        s.flush_if_full();
        let (next, _) = s.put(&big).unwrap();
        assert!(!Arc::ptr_eq(&first[0].0, &next), "a new segment after 64 MiB");
        s.flush_if_full();
        let weak = Arc::downgrade(&first[0].0);
        let mut out = Vec::new();
        first[63].0.read_into(first[63].1, big.len(), &mut out);
        assert_eq!(out, big);
        drop(first);
        assert!(weak.upgrade().is_none(), "freed with its last value");
        std::fs::remove_dir_all(&d).unwrap();
    }

    fn value(i: usize) -> Vec<u8> {
        // Sizes on both sides of MIN_LEN; bytes that differ by key and write.
        let n = [0usize, 40, 255, 256, 300, 1024, 5000][i % 7];
        (0..n).map(|j| (i.wrapping_mul(131) ^ j.wrapping_mul(7)) as u8).collect()
    }

    /// A store whose replaced values spill answers every read as one that keeps them
    /// in memory: Range at old revisions, paged, sorted by value; Txn reads; watch
    /// catch-up with prevKV; HashKV; the snapshot's bytes; the full state — across
    /// updates, deletes, several puts of one key in a txn, and compactions.
    #[test]
    fn every_read_answers_as_in_memory() {
        use crate::mvcc::Store;
        use etcd_client::proto::{PbDeleteRequest, PbPutRequest, PbRangeRequest, PbTxnOpRequest, PbTxnRequest, PbTxnRequestOp};
        let d = dir("reads");
        let (spilled, plain) = (Store::new(), Store::new());
        spilled.spill_to(&d).unwrap();
        let mut revs = Vec::new();
        for s in [&spilled, &plain] {
            revs.clear();
            for i in 0..6000usize {
                let k = format!("/registry/configmaps/ns/c{:04}", (i * 7919) % 700).into_bytes();
                match i % 17 {
                    0 => {
                        s.delete_range(&PbDeleteRequest { key: k, ..Default::default() }).unwrap();
                    }
                    1 => {
                        // Two keys in one revision (etcd refuses one key twice).
                        let put = |k: Vec<u8>, v| PbTxnRequestOp { request: Some(PbTxnOpRequest::RequestPut(PbPutRequest { key: k, value: v, ..Default::default() })) };
                        let mut k2 = k.clone();
                        k2.push(b'x');
                        s.txn(&PbTxnRequest { success: vec![put(k, value(i)), put(k2, value(i + 3))], ..Default::default() }).unwrap();
                    }
                    _ => {
                        s.put(&PbPutRequest { key: k, value: value(i), ..Default::default() }).unwrap();
                    }
                }
                if i % 1000 == 999 && s.current_rev() - 1500 > s.compacted_rev() {
                    s.compact(s.current_rev() - 1500).unwrap();
                }
                if i % 500 == 0 {
                    revs.push(s.current_rev());
                }
            }
        }
        assert!(spilled.dump().iter().any(|(_, vs)| vs.iter().any(|v| v.value.is_spilled())), "replaced values spilled");
        assert!(plain.dump().iter().all(|(_, vs)| vs.iter().all(|v| !v.value.is_spilled())));
        assert_eq!(spilled.dump(), plain.dump());
        let (k, end) = (b"/registry/".to_vec(), b"/registry0".to_vec());
        let rev = spilled.current_rev();
        for at in revs.iter().copied().filter(|r| *r >= spilled.compacted_rev()).chain([0, rev - 1]) {
            for req in [
                PbRangeRequest { key: k.clone(), range_end: end.clone(), revision: at, ..Default::default() },
                PbRangeRequest { key: k.clone(), range_end: end.clone(), revision: at, limit: 50, ..Default::default() },
                PbRangeRequest { key: k.clone(), range_end: end.clone(), revision: at, sort_target: 4, sort_order: 1, ..Default::default() },
            ] {
                assert_eq!(spilled.range(&req).unwrap(), plain.range(&req).unwrap(), "{req:?}");
            }
        }
        let from = spilled.compacted_rev() + 1;
        let events = |s: &Store| s.events_between(&k, &end, from, rev, usize::MAX).unwrap().0;
        let (a, b) = (events(&spilled), events(&plain));
        assert!(a.len() > 1000);
        for (x, y) in a.iter().zip(&b) {
            assert_eq!((&x.key, &x.kv, &x.prev), (&y.key, &y.kv, &y.prev));
        }
        assert!(a.iter().any(|e| e.prev.as_ref().is_some_and(|p| p.value.is_spilled())), "prevKV read from spilled history");
        assert_eq!(spilled.hash_kv(0), plain.hash_kv(0));
        assert_eq!(crate::snapshot::encode(&spilled), crate::snapshot::encode(&plain));
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// Compaction frees the spill files whose values it drops.
    #[test]
    fn compaction_frees_the_files() {
        use crate::mvcc::Store;
        use etcd_client::proto::PbPutRequest;
        let d = dir("compact");
        let s = Store::new();
        s.spill_to(&d).unwrap();
        let big = vec![3u8; 1 << 20];
        for i in 0..80 {
            s.put(&PbPutRequest { key: format!("/registry/secrets/ns/s{}", i % 2).into(), value: big.clone(), ..Default::default() }).unwrap();
        }
        let first = s.dump().into_iter().flat_map(|(_, vs)| vs).find_map(|v| match v.value {
            super::super::value::Value::Spilled { seg, .. } => Some(Arc::downgrade(&seg)),
            _ => None,
        });
        let first = first.expect("a spilled value");
        assert!(first.upgrade().is_some());
        s.compact(s.current_rev()).unwrap();
        assert!(first.upgrade().is_none(), "the first file is freed once no version points into it");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
