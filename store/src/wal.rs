//! Write-ahead logs, one file per resource prefix, with per-prefix durability:
//! `none` (memory only), `buffered` (written to the file — the page cache —
//! before the client is answered) and `fsync` (on disk before the answer).
//! Writers append encoded records to an in-memory buffer under the store's
//! sequencer; the first writer to reach the file writes (and in fsync mode
//! syncs) everything buffered so far, so concurrent writers share one write
//! and one fsync (group commit). The byte format is in docs/design.md.
use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::{Buf, BufMut, Bytes};
use parking_lot::{Mutex, RwLock};

use crate::mvcc::key_history::Version;
use crate::mvcc::kvstore::CommitSink;
use crate::mvcc::shard::prefix_of;
use crate::mvcc::watch_hub::Event;
use crate::mvcc::Store;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    None,
    Buffered,
    Fsync,
}

impl Mode {
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "none" => Some(Mode::None),
            "buffered" => Some(Mode::Buffered),
            "fsync" => Some(Mode::Fsync),
            _ => None,
        }
    }
}

/// Which mode each prefix gets: the longest configured prefix that matches,
/// else the default. Events and Leases default to memory only: Kubernetes
/// recreates both by itself (kubelets renew, controllers re-emit).
#[derive(Clone, Debug)]
pub struct Durability {
    pub default: Mode,
    pub prefixes: Vec<(Vec<u8>, Mode)>,
}

impl Durability {
    pub fn new(default: Mode, overrides: &[(String, Mode)]) -> Self {
        let mut prefixes: Vec<(Vec<u8>, Mode)> = vec![
            (b"/registry/events/".to_vec(), Mode::None),
            (b"/registry/leases/".to_vec(), Mode::None),
        ];
        for (p, m) in overrides {
            prefixes.retain(|(q, _)| q.as_slice() != p.as_bytes());
            prefixes.push((p.as_bytes().to_vec(), *m));
        }
        Durability { default, prefixes }
    }

    /// Mode for the shard holding `shard_prefix` (empty = keys outside any resource prefix).
    pub fn mode_for(&self, shard_prefix: &[u8]) -> Mode {
        self.prefixes
            .iter()
            .filter(|(p, _)| !shard_prefix.is_empty() && shard_prefix.starts_with(p))
            .max_by_key(|(p, _)| p.len())
            .map_or(self.default, |(_, m)| *m)
    }

    pub fn any_fsync(&self) -> bool {
        self.default == Mode::Fsync || self.prefixes.iter().any(|(_, m)| *m == Mode::Fsync)
    }
}

// Record types (docs/design.md, "Write-ahead log").
const REC_PUT: u8 = 1;
const REC_DELETE: u8 = 2;
const REC_COMPACT: u8 = 3;
const REC_LEASE_GRANT: u8 = 4;
const REC_LEASE_REVOKE: u8 = 5;
const REC_REV_FLOOR: u8 = 6;

/// Revisions reserved at a time in the meta log, so that a restart resumes
/// above every revision handed out, those of memory-only prefixes included.
const REV_BLOCK: i64 = 100_000;

fn frame(out: &mut Vec<u8>, payload_len: usize, write: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.put_u32_le(payload_len as u32);
    out.put_u32_le(0);
    write(out);
    debug_assert_eq!(out.len() - start - 8, payload_len);
    let crc = crc32c::crc32c(&out[start + 8..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

pub fn encode_event(out: &mut Vec<u8>, e: &Event) {
    let v = &e.kv;
    if v.is_tombstone() {
        frame(out, 1 + 8 + 4 + 4 + e.key.len(), |o| {
            o.put_u8(REC_DELETE);
            o.put_i64_le(v.mod_rev);
            o.put_u32_le(v.sub);
            o.put_u32_le(e.key.len() as u32);
            o.put_slice(&e.key);
        });
    } else {
        frame(out, 1 + 8 + 4 + 8 + 8 + 8 + 4 + e.key.len() + 4 + v.value.len(), |o| {
            o.put_u8(REC_PUT);
            o.put_i64_le(v.mod_rev);
            o.put_u32_le(v.sub);
            o.put_i64_le(v.create_rev);
            o.put_i64_le(v.version);
            o.put_i64_le(v.lease);
            o.put_u32_le(e.key.len() as u32);
            o.put_slice(&e.key);
            o.put_u32_le(v.value.len() as u32);
            o.put_slice(&v.value);
        });
    }
}

fn encode_pair(out: &mut Vec<u8>, kind: u8, a: i64, b: Option<i64>) {
    let n = 1 + 8 + if b.is_some() { 8 } else { 0 };
    frame(out, n, |o| {
        o.put_u8(kind);
        o.put_i64_le(a);
        if let Some(b) = b {
            o.put_i64_le(b);
        }
    });
}

/// One decoded record.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Put { key: Bytes, v: Version },
    Delete { key: Bytes, rev: i64, sub: u32 },
    Compact(i64),
    LeaseGrant { id: i64, ttl: i64 },
    LeaseRevoke(i64),
    RevFloor(i64),
}

fn decode_payload(p: &[u8]) -> Option<Record> {
    let mut b = p;
    if b.remaining() < 1 {
        return None;
    }
    let kind = b.get_u8();
    let rec = match kind {
        REC_PUT => {
            if b.remaining() < 8 + 4 + 24 + 4 {
                return None;
            }
            let mod_rev = b.get_i64_le();
            let sub = b.get_u32_le();
            let create_rev = b.get_i64_le();
            let version = b.get_i64_le();
            let lease = b.get_i64_le();
            let kl = b.get_u32_le() as usize;
            if b.remaining() < kl + 4 {
                return None;
            }
            let key = Bytes::copy_from_slice(&b[..kl]);
            b.advance(kl);
            let vl = b.get_u32_le() as usize;
            if b.remaining() != vl {
                return None;
            }
            let value = Bytes::copy_from_slice(&b[..vl]);
            Record::Put { key, v: Version { mod_rev, sub, create_rev, version, value, lease } }
        }
        REC_DELETE => {
            if b.remaining() < 16 {
                return None;
            }
            let rev = b.get_i64_le();
            let sub = b.get_u32_le();
            let kl = b.get_u32_le() as usize;
            if b.remaining() != kl {
                return None;
            }
            Record::Delete { key: Bytes::copy_from_slice(b), rev, sub }
        }
        REC_COMPACT | REC_LEASE_REVOKE | REC_REV_FLOOR => {
            if b.remaining() != 8 {
                return None;
            }
            let a = b.get_i64_le();
            match kind {
                REC_COMPACT => Record::Compact(a),
                REC_LEASE_REVOKE => Record::LeaseRevoke(a),
                _ => Record::RevFloor(a),
            }
        }
        REC_LEASE_GRANT => {
            if b.remaining() != 16 {
                return None;
            }
            Record::LeaseGrant { id: b.get_i64_le(), ttl: b.get_i64_le() }
        }
        _ => return None,
    };
    Some(rec)
}

/// Parses one framed record at `off`: Some((record, next offset)) if whole and intact.
fn parse_at(buf: &[u8], off: usize) -> Option<(Record, usize)> {
    if buf.len() < off + 8 {
        return None;
    }
    let len = u32::from_le_bytes(buf[off..off + 4].try_into().unwrap()) as usize;
    let crc = u32::from_le_bytes(buf[off + 4..off + 8].try_into().unwrap());
    let end = off.checked_add(8)?.checked_add(len)?;
    if len == 0 || end > buf.len() {
        return None;
    }
    let payload = &buf[off + 8..end];
    if crc32c::crc32c(payload) != crc {
        return None;
    }
    decode_payload(payload).map(|r| (r, end))
}

/// Result of reading a whole log file.
pub struct Replayed {
    pub records: Vec<Record>,
    /// Where the intact records end; bytes after it were a torn tail.
    pub good_len: usize,
    pub torn_bytes: usize,
}

/// Reads every record; a bad record with no intact record after it is a torn
/// tail (cut), one followed by intact records is corruption (an error naming
/// the file and offset: never skipped silently).
pub fn read_log(path: &Path) -> Result<Replayed, String> {
    let buf = fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut off = 0;
    let mut records = Vec::new();
    while off < buf.len() {
        match parse_at(&buf, off) {
            Some((r, next)) => {
                records.push(r);
                off = next;
            }
            None => {
                if let Some(at) = (off + 1..buf.len()).find(|&o| parse_at(&buf, o).is_some()) {
                    return Err(format!(
                        "{}: corrupt record at offset {off} (intact records follow at offset {at}); refusing to start",
                        path.display()
                    ));
                }
                break;
            }
        }
    }
    Ok(Replayed { records, good_len: off, torn_bytes: buf.len() - off })
}

/// File name for a shard prefix: readable, reversible enough to debug.
pub fn file_stem(prefix: &[u8]) -> String {
    if prefix.is_empty() {
        return "_other".into();
    }
    let mut s = String::new();
    for &b in prefix.strip_prefix(b"/").unwrap_or(prefix) {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' => s.push(b as char),
            b'/' => s.push('+'),
            _ => s.push_str(&format!("%{b:02x}")),
        }
    }
    s
}

struct Io {
    file: File,
    /// The buffer `pending` is swapped with: the two trade places at every
    /// write, so appends never allocate a fresh buffer (a 64 KiB malloc/free
    /// per write showed up as ~15 % of the store's CPU, mostly glibc
    /// consolidating its free lists for the large request).
    spare: Vec<u8>,
    written_rev: i64,
    synced_rev: i64,
    size: u64,
}

pub struct LogFile {
    pub path: PathBuf,
    pub mode: Mode,
    pending: Mutex<(Vec<u8>, i64, u64)>, // (bytes, last rev appended, records)
    io: Mutex<Io>,
    /// Size of this prefix's last checkpoint: the log must outgrow it before the
    /// next one, so checkpoint work stays proportional to the bytes written.
    last_ckpt: AtomicU64,
}

impl LogFile {
    fn open(path: PathBuf, mode: Mode) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        let size = file.metadata()?.len();
        let ckpt = path.with_extension("ckpt");
        let last_ckpt = AtomicU64::new(fs::metadata(&ckpt).map(|m| m.len()).unwrap_or(0));
        Ok(LogFile { path, mode, pending: Mutex::new((Vec::with_capacity(1 << 16), 0, 0)), io: Mutex::new(Io { file, spare: Vec::with_capacity(1 << 16), written_rev: 0, synced_rev: 0, size }), last_ckpt })
    }

    fn append(&self, rev: i64, f: impl FnOnce(&mut Vec<u8>) -> u64) {
        let mut p = self.pending.lock();
        let n = f(&mut p.0);
        p.1 = rev;
        p.2 += n;
    }

    /// Writes (and in fsync mode syncs) everything appended up to at least `rev`.
    fn flush_to(&self, rev: i64, m: &WalMetrics) -> std::io::Result<()> {
        let mut io = self.io.lock();
        let done = if self.mode == Mode::Fsync { io.synced_rev } else { io.written_rev };
        if done >= rev {
            return Ok(());
        }
        let io = &mut *io;
        let (last, recs) = {
            let mut p = self.pending.lock();
            std::mem::swap(&mut p.0, &mut io.spare);
            (p.1, std::mem::take(&mut p.2))
        };
        let buf = &mut io.spare;
        if !buf.is_empty() {
            let n = buf.len() as u64;
            let res = io.file.write_all(buf);
            buf.clear();
            if buf.capacity() > 4 << 20 {
                buf.shrink_to(1 << 20); // after a burst, do not keep a huge buffer
            }
            res?;
            io.size += n;
            m.bytes.fetch_add(n, Ordering::Relaxed);
            m.batches.fetch_add(1, Ordering::Relaxed);
            m.batch_records.fetch_add(recs, Ordering::Relaxed);
        }
        io.written_rev = io.written_rev.max(last);
        if self.mode == Mode::Fsync {
            let t = Instant::now();
            io.file.sync_data()?;
            m.observe_fsync(t.elapsed().as_secs_f64());
            io.synced_rev = io.written_rev;
        }
        Ok(())
    }
}

/// Metrics with etcd's names where etcd has one.
#[derive(Default)]
pub struct WalMetrics {
    pub bytes: AtomicU64,
    pub batches: AtomicU64,
    pub batch_records: AtomicU64,
    pub fsyncs: AtomicU64,
    fsync_buckets: [AtomicU64; 12],
    fsync_sum_us: AtomicU64,
    pub replay_ms: AtomicU64,
    pub checkpoints: AtomicU64,
}

const FSYNC_BOUNDS: [f64; 12] = [0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256];

impl WalMetrics {
    fn observe_fsync(&self, secs: f64) {
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
        self.fsync_sum_us.fetch_add((secs * 1e6) as u64, Ordering::Relaxed);
        for (i, b) in FSYNC_BOUNDS.iter().enumerate() {
            if secs <= *b {
                self.fsync_buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub fn render(&self) -> String {
        let mut o = String::new();
        o.push_str("# HELP etcd_disk_wal_fsync_duration_seconds The latency distributions of fsync called by the WAL.\n# TYPE etcd_disk_wal_fsync_duration_seconds histogram\n");
        for (i, b) in FSYNC_BOUNDS.iter().enumerate() {
            o.push_str(&format!("etcd_disk_wal_fsync_duration_seconds_bucket{{le=\"{b}\"}} {}\n", self.fsync_buckets[i].load(Ordering::Relaxed)));
        }
        let n = self.fsyncs.load(Ordering::Relaxed);
        o.push_str(&format!("etcd_disk_wal_fsync_duration_seconds_bucket{{le=\"+Inf\"}} {n}\n"));
        o.push_str(&format!("etcd_disk_wal_fsync_duration_seconds_sum {}\n", self.fsync_sum_us.load(Ordering::Relaxed) as f64 / 1e6));
        o.push_str(&format!("etcd_disk_wal_fsync_duration_seconds_count {n}\n"));
        o.push_str(&format!("# TYPE etcd_disk_wal_write_bytes_total counter\netcd_disk_wal_write_bytes_total {}\n", self.bytes.load(Ordering::Relaxed)));
        o.push_str(&format!("# TYPE meganode_wal_batches_total counter\nmeganode_wal_batches_total {}\n", self.batches.load(Ordering::Relaxed)));
        o.push_str(&format!("# TYPE meganode_wal_batch_records_total counter\nmeganode_wal_batch_records_total {}\n", self.batch_records.load(Ordering::Relaxed)));
        o.push_str(&format!("# TYPE meganode_wal_replay_seconds gauge\nmeganode_wal_replay_seconds {}\n", self.replay_ms.load(Ordering::Relaxed) as f64 / 1e3));
        o.push_str(&format!("# TYPE meganode_wal_checkpoints_total counter\nmeganode_wal_checkpoints_total {}\n", self.checkpoints.load(Ordering::Relaxed)));
        o
    }
}

/// fsync-mode logs are written and synced by one flusher thread; writers wait
/// asynchronously until `synced` reaches their revision. Every writer that
/// arrives during an fsync joins the next one (group commit), and no thread
/// is parked per waiting writer.
pub struct SyncState {
    wake: Mutex<bool>,
    cv: parking_lot::Condvar,
    /// Newest revision appended to any fsync-mode log.
    appended: AtomicI64,
    /// touched[rev % N] == rev when that revision wrote to an fsync-mode log.
    touched: Vec<AtomicI64>,
    /// Newest revision every fsync-mode log is on disk up to.
    synced: AtomicI64,
    /// Writers waiting for an fsync, by revision. The flusher wakes exactly
    /// those its fsync covered: a broadcast channel woke every waiter on every
    /// fsync, and at 1000 clients most went back to sleep (≈1000/batch wakeups
    /// per write).
    waiters: Mutex<BTreeMap<i64, Vec<tokio::sync::oneshot::Sender<()>>>>,
    logs: RwLock<Vec<Arc<LogFile>>>,
}

const TOUCHED_RING: usize = 1 << 16;

pub struct Wal {
    sync: Arc<SyncState>,
    dir: PathBuf,
    pub dur: Durability,
    /// Per shard prefix: its log, or None for memory-only prefixes.
    logs: RwLock<HashMap<Bytes, Option<Arc<LogFile>>>>,
    meta: Mutex<File>,
    leases: Arc<LogFile>,
    floor: AtomicI64,
    pub metrics: Arc<WalMetrics>,
}

impl Wal {
    fn log_for(&self, key: &[u8]) -> Option<Arc<LogFile>> {
        let prefix = prefix_of(key).unwrap_or(b"");
        if let Some(l) = self.logs.read().get(prefix) {
            return l.clone();
        }
        let mode = self.dur.mode_for(prefix);
        let mut logs = self.logs.write();
        if let Some(l) = logs.get(prefix) {
            return l.clone();
        }
        let log = if mode == Mode::None {
            None
        } else {
            let path = self.dir.join(format!("{}.wal", file_stem(prefix)));
            match LogFile::open(path.clone(), mode) {
                Ok(l) => {
                    let l = Arc::new(l);
                    if mode == Mode::Fsync {
                        self.sync.logs.write().push(l.clone());
                    }
                    Some(l)
                }
                Err(e) => {
                    // Cannot keep the promise: stop rather than acknowledge writes we would lose.
                    eprintln!("meganode-store: cannot open {}: {e}", path.display());
                    std::process::exit(1);
                }
            }
        };
        logs.insert(Bytes::copy_from_slice(prefix), log.clone());
        log
    }

    fn write_meta(&self, kind: u8, v: i64) {
        let mut buf = Vec::new();
        encode_pair(&mut buf, kind, v, None);
        let mut f = self.meta.lock();
        if let Err(e) = f.write_all(&buf).and_then(|_| f.sync_data()) {
            eprintln!("meganode-store: meta log write failed: {e}");
            std::process::exit(1);
        }
    }

    fn die(&self, path: &Path, e: std::io::Error) -> ! {
        eprintln!("meganode-store: write to {} failed: {e}; stopping so that no write is acknowledged and then lost", path.display());
        std::process::exit(1);
    }

    /// Writes a checkpoint of every shard whose log has grown past `min_bytes`
    /// and truncates that log. The shard is read-locked throughout, so the
    /// checkpoint holds exactly what the log held.
    pub fn checkpoint(&self, store: &Store, min_bytes: u64, force: bool) -> std::io::Result<usize> {
        let mut n = 0;
        for shard in store.all_shards() {
            let Some(log) = self.logs.read().get(shard.prefix.as_ref()).cloned().flatten() else { continue };
            let threshold = min_bytes.max(log.last_ckpt.load(Ordering::Relaxed)).max(1);
            if !force && log.io.lock().size < threshold {
                continue;
            }
            let g = shard.data.read();
            log.flush_to(i64::MAX, &self.metrics)?;
            let rev = store.current_rev();
            let mut out = Vec::new();
            out.put_slice(CKPT_MAGIC);
            out.put_i64_le(rev);
            out.put_u64_le(g.len() as u64);
            for (k, h) in g.iter() {
                crate::snapshot::put_key(&mut out, k, h.versions());
            }
            let crc = crc32c::crc32c(&out);
            out.put_u32_le(crc);
            let stem = log.path.with_extension("");
            let tmp = stem.with_extension("ckpt.tmp");
            let dst = stem.with_extension("ckpt");
            {
                let mut f = File::create(&tmp)?;
                f.write_all(&out)?;
                f.sync_all()?;
            }
            fs::rename(&tmp, &dst)?;
            File::open(&self.dir)?.sync_all()?;
            let mut io = log.io.lock();
            io.file.set_len(0)?;
            io.file.seek(SeekFrom::Start(0))?;
            io.file.sync_all()?;
            io.size = 0;
            drop(io);
            log.last_ckpt.store(out.len() as u64, Ordering::Relaxed);
            drop(g);
            self.metrics.checkpoints.fetch_add(1, Ordering::Relaxed);
            n += 1;
        }
        Ok(n)
    }
}

pub const CKPT_MAGIC: &[u8; 8] = b"MGNCKPT1";

impl Wal {
    /// Whether the write that committed `rev` must wait for an fsync. When the
    /// ring slot was reused by a later revision the answer is a safe "yes".
    pub fn needs_sync(&self, rev: i64) -> bool {
        rev > 0 && self.sync.touched[rev as usize % TOUCHED_RING].load(Ordering::Acquire) >= rev
    }

    /// Resolves once every fsync-mode log is on disk up to `rev`.
    pub async fn wait_synced(&self, rev: i64) {
        if self.sync.synced.load(Ordering::Acquire) >= rev {
            return;
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        {
            let mut w = self.sync.waiters.lock();
            // Checked again under the lock the flusher takes after publishing.
            if self.sync.synced.load(Ordering::Acquire) >= rev {
                return;
            }
            w.entry(rev).or_default().push(tx);
        }
        let _ = rx.await;
    }

    fn flusher(self: Arc<Self>) {
        loop {
            {
                let mut w = self.sync.wake.lock();
                while !*w {
                    self.sync.cv.wait(&mut w);
                }
                *w = false;
            }
            let target = self.sync.appended.load(Ordering::Acquire);
            let logs: Vec<Arc<LogFile>> = self.sync.logs.read().clone();
            for l in &logs {
                if let Err(e) = l.flush_to(i64::MAX, &self.metrics) {
                    self.die(&l.path, e);
                }
            }
            self.sync.synced.store(target, Ordering::Release);
            let ready = {
                let mut w = self.sync.waiters.lock();
                let later = w.split_off(&(target + 1));
                std::mem::replace(&mut *w, later)
            };
            for tx in ready.into_values().flatten() {
                let _ = tx.send(());
            }
        }
    }
}

impl CommitSink for Wal {
    fn committed(&self, rev: i64, events: &[Event]) {
        if rev >= self.floor.load(Ordering::Relaxed) {
            let f = rev + REV_BLOCK;
            self.write_meta(REC_REV_FLOOR, f);
            self.floor.store(f, Ordering::Relaxed);
        }
        let mut last: Option<(&[u8], Option<Arc<LogFile>>)> = None;
        let mut fsync_touched = false;
        for e in events {
            let p = prefix_of(&e.key).unwrap_or(b"");
            let log = match &last {
                Some((lp, l)) if *lp == p => l.clone(),
                _ => {
                    let l = self.log_for(&e.key);
                    last = Some((p, l.clone()));
                    l
                }
            };
            if let Some(l) = log {
                l.append(rev, |buf| {
                    encode_event(buf, e);
                    1
                });
                if l.mode == Mode::Fsync {
                    fsync_touched = true;
                }
            }
        }
        if fsync_touched {
            self.sync.touched[rev as usize % TOUCHED_RING].store(rev, Ordering::Release);
            self.sync.appended.store(rev, Ordering::Release);
            *self.sync.wake.lock() = true;
            self.sync.cv.notify_one();
        }
    }

    /// Buffered logs: write before the answer. fsync logs are the flusher's;
    /// the server awaits them with `wait_synced`.
    fn wait_durable(&self, rev: i64, events: &[Event]) {
        let mut done: Vec<*const LogFile> = Vec::new();
        for e in events {
            if let Some(l) = self.log_for(&e.key).filter(|l| l.mode != Mode::Fsync) {
                let ptr = Arc::as_ptr(&l);
                if done.contains(&ptr) {
                    continue;
                }
                done.push(ptr);
                if let Err(err) = l.flush_to(rev, &self.metrics) {
                    self.die(&l.path, err);
                }
            }
        }
    }

    fn lease_granted(&self, id: i64, ttl: i64) {
        self.leases.append(0, |buf| {
            encode_pair(buf, REC_LEASE_GRANT, id, Some(ttl));
            1
        });
        if let Err(e) = self.leases.flush_to(i64::MAX, &self.metrics) {
            self.die(&self.leases.path, e);
        }
    }

    fn lease_revoked(&self, id: i64) {
        self.leases.append(0, |buf| {
            encode_pair(buf, REC_LEASE_REVOKE, id, None);
            1
        });
        if let Err(e) = self.leases.flush_to(i64::MAX, &self.metrics) {
            self.die(&self.leases.path, e);
        }
    }

    fn compacted(&self, rev: i64) {
        self.write_meta(REC_COMPACT, rev);
    }
}

/// What recovery found, for the log line and tests.
#[derive(Debug, Default)]
pub struct RecoveryReport {
    pub files: usize,
    pub records: usize,
    pub keys: usize,
    pub torn: Vec<(PathBuf, usize, usize)>,
    pub rev: i64,
    pub compacted: i64,
    pub leases: usize,
    pub millis: u128,
}

fn lock_file(dir: &Path) -> Result<File, String> {
    let path = dir.join("LOCK");
    let f = OpenOptions::new().create(true).write(true).truncate(false).open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    // SAFETY: flock on a file descriptor we own; no memory is involved.
    let r = unsafe { libc_flock(std::os::unix::io::AsRawFd::as_raw_fd(&f), 2 | 4) };
    if r != 0 {
        return Err(format!("{} is in use by another meganode-store", dir.display()));
    }
    Ok(f)
}

extern "C" {
    #[link_name = "flock"]
    fn libc_flock(fd: i32, op: i32) -> i32;
}

/// Opens (creating if needed) the data directory, replays checkpoints and
/// logs into `store`, and returns the log ready to be the store's sink.
pub fn open(dir: &Path, dur: Durability, store: &Store, restore: Option<&Path>) -> Result<(Arc<Wal>, RecoveryReport, File), String> {
    let t0 = Instant::now();
    fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let lock = lock_file(dir)?;
    let mut rep = RecoveryReport::default();
    let mut floor = 0i64;
    let mut compacted = crate::mvcc::kvstore::NEVER_COMPACTED;
    let meta_path = dir.join("meta.wal");
    if meta_path.exists() {
        let r = read_log(&meta_path)?;
        cut_tail(&meta_path, &r, &mut rep)?;
        for rec in r.records {
            match rec {
                Record::RevFloor(f) => floor = floor.max(f),
                Record::Compact(c) => compacted = compacted.max(c),
                _ => {}
            }
        }
    }
    let mut max_rev = 0i64;
    let mut lease_set: HashMap<i64, i64> = HashMap::new();
    let mut entries: Vec<PathBuf> = fs::read_dir(dir).map_err(|e| e.to_string())?.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    let mut restored = false;
    let has_logs = entries.iter().any(|p| p.extension().map_or(false, |x| x == "wal" || x == "ckpt") && !p.ends_with("meta.wal"));
    let restore = match restore {
        Some(src) if has_logs => {
            // A restart with the same flags: the directory already holds the restored state.
            eprintln!("meganode-store: {} already holds logs; --restore-from {} ignored", dir.display(), src.display());
            None
        }
        r => r,
    };
    if let Some(src) = restore {
        let buf = fs::read(src).map_err(|e| format!("{}: {e}", src.display()))?;
        let snap = crate::snapshot::decode(&buf).map_err(|e| format!("{}: {e}", src.display()))?;
        for (k, vs) in snap.keys {
            rep.keys += 1;
            store.load_key(k, vs);
        }
        for (id, granted, _remaining) in &snap.leases {
            lease_set.insert(*id, *granted);
        }
        max_rev = snap.rev;
        compacted = compacted.max(snap.compacted);
        restored = true;
    }
    for path in &entries {
        if path.extension().map_or(true, |x| x != "ckpt") {
            continue;
        }
        let buf = fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let (rev, keys) = crate::snapshot::decode_checkpoint(&buf).map_err(|e| format!("{}: {e}", path.display()))?;
        max_rev = max_rev.max(rev);
        rep.files += 1;
        for (k, vs) in keys {
            rep.keys += 1;
            store.load_key(k, vs);
        }
    }
    for path in &entries {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !name.ends_with(".wal") || name == "meta.wal" {
            continue;
        }
        let r = read_log(path)?;
        cut_tail(path, &r, &mut rep)?;
        rep.files += 1;
        // Records already in this prefix's checkpoint are skipped.
        let ckpt_rev = {
            let c = path.with_extension("ckpt");
            if c.exists() {
                crate::snapshot::decode_checkpoint(&fs::read(&c).map_err(|e| e.to_string())?).map(|x| x.0).unwrap_or(0)
            } else {
                0
            }
        };
        for rec in r.records {
            rep.records += 1;
            match rec {
                Record::Put { key, v } => {
                    max_rev = max_rev.max(v.mod_rev);
                    if v.mod_rev > ckpt_rev {
                        store.load_version(&key, v);
                    }
                }
                Record::Delete { key, rev, sub } => {
                    max_rev = max_rev.max(rev);
                    if rev > ckpt_rev {
                        store.load_version(&key, Version { mod_rev: rev, sub, create_rev: 0, version: 0, value: Bytes::new(), lease: 0 });
                    }
                }
                Record::LeaseGrant { id, ttl } => {
                    lease_set.insert(id, ttl);
                }
                Record::LeaseRevoke(id) => {
                    lease_set.remove(&id);
                }
                Record::Compact(c) => compacted = compacted.max(c),
                Record::RevFloor(f) => floor = floor.max(f),
            }
        }
    }
    // Leases come back with their full TTL, as etcd's do after a restart or
    // leader change: their holders renew or let them lapse.
    for (id, ttl) in &lease_set {
        store.leases.restore(*id, *ttl, *ttl);
    }
    rep.leases = lease_set.len();
    let rev = max_rev.max(floor).max(1);
    store.set_revisions(rev, compacted);
    if compacted > 0 {
        store.compact_loaded(compacted);
    }
    let meta = OpenOptions::new().create(true).append(true).open(&meta_path).map_err(|e| format!("{}: {e}", meta_path.display()))?;
    let leases_path = dir.join("leases.wal");
    let leases = Arc::new(LogFile::open(leases_path.clone(), if dur.default == Mode::None { Mode::Buffered } else { dur.default }).map_err(|e| format!("{}: {e}", leases_path.display()))?);
    let sync = Arc::new(SyncState {
        wake: Mutex::new(false),
        cv: parking_lot::Condvar::new(),
        appended: AtomicI64::new(0),
        touched: (0..TOUCHED_RING).map(|_| AtomicI64::new(0)).collect(),
        synced: AtomicI64::new(0),
        waiters: Mutex::new(BTreeMap::new()),
        logs: RwLock::new(Vec::new()),
    });
    let wal = Arc::new(Wal { sync, dir: dir.to_path_buf(), dur, logs: RwLock::new(HashMap::new()), meta: Mutex::new(meta), leases, floor: AtomicI64::new(0), metrics: Arc::new(WalMetrics::default()) });
    {
        let w = wal.clone();
        std::thread::Builder::new().name("wal-fsync".into()).spawn(move || w.flusher()).map_err(|e| e.to_string())?;
    }
    // Reserve revisions above everything seen before accepting writes.
    let f = rev + REV_BLOCK;
    wal.write_meta(REC_REV_FLOOR, f);
    wal.floor.store(f, Ordering::Relaxed);
    if restored {
        // Persist the restored state at once as checkpoints (and leases in their log).
        for (id, ttl) in &lease_set {
            wal.leases.append(0, |buf| {
                encode_pair(buf, REC_LEASE_GRANT, *id, Some(*ttl));
                1
            });
        }
        wal.leases.flush_to(i64::MAX, &wal.metrics).map_err(|e| e.to_string())?;
        for s in store.all_shards() {
            let k = s.data.read().iter().next().map(|(k, _)| k.clone());
            if let Some(k) = k {
                wal.log_for(&k);
            }
        }
        wal.checkpoint(store, 0, true).map_err(|e| format!("writing checkpoints after restore: {e}"))?;
    }
    rep.rev = rev;
    rep.compacted = compacted;
    rep.millis = t0.elapsed().as_millis();
    wal.metrics.replay_ms.store(rep.millis as u64, Ordering::Relaxed);
    Ok((wal, rep, lock))
}

fn cut_tail(path: &Path, r: &Replayed, rep: &mut RecoveryReport) -> Result<(), String> {
    if r.torn_bytes > 0 {
        let f = OpenOptions::new().write(true).open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        f.set_len(r.good_len as u64).map_err(|e| format!("{}: {e}", path.display()))?;
        f.sync_all().map_err(|e| e.to_string())?;
        eprintln!(
            "meganode-store: {}: torn tail of {} bytes at offset {} (failed checksum or incomplete record) cut",
            path.display(),
            r.torn_bytes,
            r.good_len
        );
        rep.torn.push((path.to_path_buf(), r.good_len, r.torn_bytes));
    }
    Ok(())
}

/// Reads a whole file (helper for tests).
pub fn read_all(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut v = Vec::new();
    File::open(path)?.read_to_end(&mut v)?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(key: &str, rev: i64, val: &str) -> Event {
        Event { key: Bytes::from(key.to_string()), kv: Version { mod_rev: rev, sub: 0, create_rev: rev, version: 1, value: Bytes::from(val.to_string()), lease: 0 }, prev: None }
    }

    #[test]
    fn records_round_trip() {
        let mut buf = Vec::new();
        encode_event(&mut buf, &ev("/registry/pods/a", 5, "hello"));
        let del = Event { key: Bytes::from("/registry/pods/a"), kv: Version { mod_rev: 6, sub: 1, create_rev: 0, version: 0, value: Bytes::new(), lease: 0 }, prev: None };
        encode_event(&mut buf, &del);
        encode_pair(&mut buf, REC_LEASE_GRANT, 7, Some(30));
        let (r1, o1) = parse_at(&buf, 0).unwrap();
        assert!(matches!(r1, Record::Put { ref key, ref v } if key.as_ref() == b"/registry/pods/a" && v.mod_rev == 5 && v.value.as_ref() == b"hello"));
        let (r2, o2) = parse_at(&buf, o1).unwrap();
        assert_eq!(r2, Record::Delete { key: Bytes::from("/registry/pods/a"), rev: 6, sub: 1 });
        let (r3, o3) = parse_at(&buf, o2).unwrap();
        assert_eq!(r3, Record::LeaseGrant { id: 7, ttl: 30 });
        assert_eq!(o3, buf.len());
    }

    #[test]
    fn torn_tail_is_cut_and_middle_corruption_is_an_error() {
        let dir = std::env::temp_dir().join(format!("mgn-wal-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let p = dir.join("x.wal");
        let mut buf = Vec::new();
        for i in 0..10 {
            encode_event(&mut buf, &ev("/k", i + 2, "value"));
        }
        let whole = buf.len();
        // Torn: the last record half written.
        fs::write(&p, &buf[..whole - 7]).unwrap();
        let r = read_log(&p).unwrap();
        assert_eq!(r.records.len(), 9);
        assert!(r.torn_bytes > 0);
        // Bit flip in the last record: also a tail.
        let mut flipped = buf.clone();
        flipped[whole - 2] ^= 0x10;
        fs::write(&p, &flipped).unwrap();
        assert_eq!(read_log(&p).unwrap().records.len(), 9);
        // Bit flip in the middle: intact records follow, so it is an error with the offset.
        let mut mid = buf.clone();
        mid[30] ^= 0x01;
        fs::write(&p, &mid).unwrap();
        let e = read_log(&p).err().unwrap();
        assert!(e.contains("offset 0"), "{e}");
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A store never compacted comes back never compacted (etcd keeps -1 until
    /// its first compaction); a compaction at 0 comes back as 0.
    #[test]
    fn compaction_point_survives_a_restart() {
        let dir = std::env::temp_dir().join(format!("mgn-wal-compact-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let dur = Durability::new(Mode::Fsync, &[]);
        {
            let store = Store::new();
            let (log, rep, _lock) = open(&dir, dur.clone(), &store, None).unwrap();
            assert_eq!((rep.compacted, store.compacted_rev()), (-1, -1));
            drop(log);
        }
        {
            let store = Store::new();
            let (log, rep, _lock) = open(&dir, dur.clone(), &store, None).unwrap();
            assert_eq!((rep.compacted, store.compacted_rev()), (-1, -1));
            store.set_sink(log.clone());
            assert_eq!(store.compact(0), Ok(store.current_rev()));
        }
        {
            let store = Store::new();
            let (_log, rep, _lock) = open(&dir, dur.clone(), &store, None).unwrap();
            assert_eq!((rep.compacted, store.compacted_rev()), (0, 0));
            assert_eq!(store.compact(0), Err(crate::errors::StoreError::Compacted));
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn durability_modes_by_prefix() {
        let d = Durability::new(Mode::Buffered, &[("/registry/pods/".into(), Mode::Fsync), ("/registry/leases/".into(), Mode::Buffered)]);
        assert_eq!(d.mode_for(b"/registry/pods/"), Mode::Fsync);
        assert_eq!(d.mode_for(b"/registry/events/"), Mode::None);
        assert_eq!(d.mode_for(b"/registry/leases/"), Mode::Buffered);
        assert_eq!(d.mode_for(b"/registry/configmaps/"), Mode::Buffered);
        assert_eq!(d.mode_for(b""), Mode::Buffered);
        assert!(d.any_fsync());
    }

    #[test]
    fn file_stems() {
        assert_eq!(file_stem(b"/registry/pods/"), "registry+pods+");
        assert_eq!(file_stem(b"/registry/example.com/widgets/"), "registry+example.com+widgets+");
        assert_eq!(file_stem(b""), "_other");
    }
}
