//! The store's commit sink: which log each write goes to, the buffered
//! writers' flush, the fsync flusher thread (group commit, and the retries of
//! failed writes, see `health`), the meta log.
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

use super::fault::Faults;
use super::health::{next_backoff, Health};
use super::logfile::LogFile;
use super::metrics::WalMetrics;
use super::record::{encode_event, encode_pair, REC_COMPACT, REC_LEASE_GRANT, REC_LEASE_REVOKE, REC_REV_FLOOR};
use super::{file_stem, Durability, Mode};
use crate::mvcc::kvstore::CommitSink;
use crate::mvcc::shard::prefix_of;
use crate::mvcc::watch_hub::Event;

/// Revisions reserved at a time in the meta log, so that a restart resumes
/// above every revision handed out, those of memory-only prefixes included.
pub(super) const REV_BLOCK: i64 = 100_000;

/// Writes are refused (all of them, memory-only prefixes' too) while the meta
/// log cannot reserve more revisions and fewer than this are left reserved.
/// The next block is reserved when half of the current one is left, so a full
/// disk has 50,000 revisions of memory-only writes before this bites.
pub const FLOOR_MARGIN: i64 = 1_000;

/// fsync-mode logs are written and synced by one flusher thread; writers wait
/// asynchronously until `synced` reaches their revision. Every writer that
/// arrives during an fsync joins the next one (group commit), and no thread
/// is parked per waiting writer.
pub struct SyncState {
    pub(super) wake: Mutex<bool>,
    pub(super) cv: parking_lot::Condvar,
    /// Newest revision appended to any fsync-mode log, or whose buffered write failed.
    pub(super) appended: AtomicI64,
    /// touched[rev % N] == rev when that revision wrote to an fsync-mode log
    /// (or its buffered write failed: it waits for the retry as an fsync).
    pub(super) touched: Vec<AtomicI64>,
    /// Newest revision every fsync-mode log is on disk up to.
    pub(super) synced: AtomicI64,
    /// Writers waiting for an fsync, by revision. The flusher wakes exactly
    /// those its fsync covered: a broadcast channel woke every waiter on every
    /// fsync, and at 1000 clients most went back to sleep (≈1000/batch wakeups
    /// per write).
    pub(super) waiters: Mutex<BTreeMap<i64, Vec<tokio::sync::oneshot::Sender<()>>>>,
    pub(super) logs: RwLock<Vec<Arc<LogFile>>>,
}

pub(super) const TOUCHED_RING: usize = 1 << 16;

pub struct Wal {
    pub(super) sync: Arc<SyncState>,
    pub(super) dir: PathBuf,
    pub dur: Durability,
    /// Per shard prefix: its log, or None for memory-only prefixes.
    pub(super) logs: RwLock<HashMap<Bytes, Option<Arc<LogFile>>>>,
    /// `meta.wal`, fsync mode, written only under `floor_wanted`'s lock.
    pub(super) meta: Arc<LogFile>,
    pub(super) leases: Arc<LogFile>,
    /// Revisions below this are reserved by a durable REV_FLOOR record.
    pub(super) floor: AtomicI64,
    /// The newest REV_FLOOR appended to the meta log (durable or not yet).
    pub(super) floor_wanted: Mutex<i64>,
    pub metrics: Arc<WalMetrics>,
    pub health: Health,
    pub faults: Arc<Faults>,
}

impl Wal {
    pub(super) fn log_for(&self, key: &[u8]) -> Option<Arc<LogFile>> {
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
            // Opened at its first write: an open that fails is a failed write.
            let l = Arc::new(LogFile::new(path, mode, self.faults.clone()));
            if mode == Mode::Fsync {
                self.sync.logs.write().push(l.clone());
            }
            Some(l)
        };
        logs.insert(Bytes::copy_from_slice(prefix), log.clone());
        log
    }

    /// Appends a record to the meta log and syncs it; a REV_FLOOR record's
    /// reservation counts once it is durable. On failure the record waits in
    /// the log for the retries (Err).
    pub(super) fn write_meta(&self, kind: u8, v: i64) -> std::io::Result<()> {
        let mut wanted = self.floor_wanted.lock();
        self.meta.append(0, |buf| {
            encode_pair(buf, kind, v, None);
            1
        });
        if kind == REC_REV_FLOOR {
            *wanted = (*wanted).max(v);
        }
        self.flush_meta(&wanted)
    }

    fn flush_meta(&self, wanted: &i64) -> std::io::Result<()> {
        match self.meta.flush_to(i64::MAX, &self.metrics) {
            Ok(()) => {
                self.floor.fetch_max(*wanted, Ordering::AcqRel);
                Ok(())
            }
            Err(e) => {
                self.failed(&self.meta, &e, 0);
                Err(e)
            }
        }
    }

    /// A write of `log` failed: the bytes wait in it, the health goes down (the
    /// alarm), and the flusher retries. A write at `rev` (> 0) waits for that
    /// retry as an fsync write does, so its client is answered only once it is
    /// written.
    pub(super) fn failed(&self, log: &Arc<LogFile>, e: &std::io::Error, rev: i64) {
        self.health.fail(log, e);
        if rev > 0 {
            self.sync.touched[rev as usize % TOUCHED_RING].fetch_max(rev, Ordering::AcqRel);
            self.sync.appended.fetch_max(rev, Ordering::AcqRel);
        }
        *self.sync.wake.lock() = true;
        self.sync.cv.notify_one();
    }

    /// Whether a write must be refused now: one to a durable prefix (or a
    /// lease, or a compaction) while a failed write is outstanding, and any
    /// write when too few revisions are left reserved (`FLOOR_MARGIN`).
    /// `durable` (whether the write would go to a log) is asked only while a log write is failing:
    /// a healthy disk costs a write two atomic loads, not a look-up of its prefix's mode.
    pub fn refuses(&self, durable: impl FnOnce(&Self) -> bool, cur_rev: i64) -> bool {
        (self.health.down() && durable(self)) || cur_rev + FLOOR_MARGIN >= self.floor.load(Ordering::Acquire)
    }

    /// Whether writes to `key` go to a log.
    pub fn durable_key(&self, key: &[u8]) -> bool {
        self.dur.mode_for(prefix_of(key).unwrap_or(b"")) != Mode::None
    }

    /// Whether a delete of [key, end) may touch a log: a range inside one
    /// memory-only prefix does not; anything wider is taken to.
    pub fn durable_range(&self, key: &[u8], end: &[u8]) -> bool {
        let r = crate::mvcc::shard::KeyRange::new(key, end);
        if r.is_single() {
            return self.durable_key(key);
        }
        match r.single_prefix() {
            Some(p) => self.dur.mode_for(p) != Mode::None,
            None => true,
        }
    }
}

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

    /// Resolves once no failed write is outstanding: a lease or compaction
    /// record that failed is then on disk (at once when nothing failed).
    pub async fn settled(&self) {
        self.health.settled().await
    }

    /// Writes and syncs the fsync-mode logs whenever woken; while a write has
    /// failed, also retries the failed logs (buffered, leases, meta), every
    /// `BACKOFF_MIN` doubling to `BACKOFF_MAX`, until all of them succeed.
    pub(super) fn flusher(self: Arc<Self>) {
        let mut backoff = Duration::ZERO;
        loop {
            {
                let mut w = self.sync.wake.lock();
                if backoff.is_zero() {
                    while !*w {
                        self.sync.cv.wait(&mut w);
                    }
                } else if !*w {
                    self.sync.cv.wait_for(&mut w, backoff);
                }
                *w = false;
            }
            let target = self.sync.appended.load(Ordering::Acquire);
            let (gen, failed) = self.health.snapshot();
            let mut logs: Vec<Arc<LogFile>> = self.sync.logs.read().clone();
            for f in failed {
                if !logs.iter().any(|l| Arc::ptr_eq(l, &f)) {
                    logs.push(f);
                }
            }
            let mut ok = true;
            for l in &logs {
                let res = if Arc::ptr_eq(l, &self.meta) {
                    let wanted = self.floor_wanted.lock();
                    self.meta.flush_to(i64::MAX, &self.metrics).map(|()| self.floor.fetch_max(*wanted, Ordering::AcqRel))
                } else {
                    l.flush_to(i64::MAX, &self.metrics).map(|()| 0)
                };
                if let Err(e) = res {
                    self.health.fail(l, &e);
                    ok = false;
                    break;
                }
            }
            if !ok {
                backoff = next_backoff(backoff);
                continue;
            }
            backoff = Duration::ZERO;
            self.health.recovered(gen);
            self.sync.synced.fetch_max(target, Ordering::AcqRel);
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
        // Reserve the next block while half of this one is left, so that a
        // meta write that fails has room to be retried (refuses, FLOOR_MARGIN).
        if rev + REV_BLOCK / 2 >= *self.floor_wanted.lock() {
            let _ = self.write_meta(REC_REV_FLOOR, rev + REV_BLOCK);
        }
        let mut warned = false;
        while rev >= self.floor.load(Ordering::Acquire) {
            // Unreachable unless writes got past `refuses`: never hand out a
            // revision no durable record reserves; wait for the disk instead.
            if !warned {
                eprintln!("meganode-store: error: revision {rev} is not reserved in {} yet; writes wait for it", self.meta.path.display());
                warned = true;
            }
            std::thread::sleep(Duration::from_millis(100));
            let wanted = self.floor_wanted.lock();
            let _ = self.flush_meta(&wanted);
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
            self.sync.appended.fetch_max(rev, Ordering::AcqRel);
            *self.sync.wake.lock() = true;
            self.sync.cv.notify_one();
        }
    }

    /// Buffered logs: write before the answer. fsync logs are the flusher's;
    /// the server awaits them with `wait_synced`, and so a buffered write that
    /// failed (`failed`): it is answered once the flusher's retry wrote it.
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
                    self.failed(&l, &err, rev);
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
            self.failed(&self.leases, &e, 0);
        }
    }

    fn lease_revoked(&self, id: i64) {
        self.leases.append(0, |buf| {
            encode_pair(buf, REC_LEASE_REVOKE, id, None);
            1
        });
        if let Err(e) = self.leases.flush_to(i64::MAX, &self.metrics) {
            self.failed(&self.leases, &e, 0);
        }
    }

    fn compacted(&self, rev: i64) {
        let _ = self.write_meta(REC_COMPACT, rev);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::time::Instant;

    use etcd_client::proto::PbPutRequest;

    use super::*;
    use crate::mvcc::Store;
    use crate::wal::fault::DiskFull;

    fn wait_until(what: &str, f: impl Fn() -> bool) {
        let t = Instant::now();
        while !f() {
            assert!(t.elapsed() < Duration::from_secs(5), "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A write whose log write fails is kept, waits (as an fsync write does)
    /// until the retry writes it, raises the alarm and refuses durable writes
    /// meanwhile; memory-only prefixes pass; the retry ends it all by itself.
    #[test]
    fn a_failed_write_is_retried_until_written_and_the_alarm_clears() {
        for mode in [Mode::Buffered, Mode::Fsync] {
            let dir = std::env::temp_dir().join(format!("mgn-wal-full-{}-{mode:?}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            let store = Store::new();
            let (wal, _, _lock) = crate::wal::open(&dir, Durability::new(mode, &[]), &store, None).unwrap();
            store.set_sink(wal.clone());
            let alarm = Arc::new(AtomicBool::new(false));
            let a = alarm.clone();
            wal.health.set_alarm_hook(Box::new(move |down| a.store(down, Ordering::SeqCst)));
            let hook = Arc::new(DiskFull::default());
            wal.faults.set(Some(hook.clone()));
            let put = |k: &str, v: &str| store.put(&PbPutRequest { key: k.into(), value: v.into(), ..Default::default() }).unwrap().header.unwrap().revision;
            let r1 = put("/registry/pods/a", "1");
            wait_until("first write", || !wal.needs_sync(r1) || wal.sync.synced.load(Ordering::Acquire) >= r1);
            hook.full.store(true, Ordering::SeqCst);
            let r2 = put("/registry/pods/b", "2");
            assert!(wal.needs_sync(r2), "{mode:?}: a failed write must wait for its retry");
            wait_until("the failure", || wal.health.down());
            assert!(alarm.load(Ordering::SeqCst));
            assert!(wal.refuses(|w| w.durable_key(b"/registry/pods/c"), store.current_rev()));
            assert!(!wal.refuses(|w| w.durable_key(b"/registry/events/e"), store.current_rev()));
            assert!(!wal.durable_range(b"/registry/events/", b"/registry/events0"));
            assert!(wal.durable_range(b"/registry/", b"/registry0"));
            std::thread::sleep(Duration::from_millis(100));
            assert!(wal.sync.synced.load(Ordering::Acquire) < r2, "{mode:?}: acknowledged while not written");
            assert!(hook.failures.load(Ordering::SeqCst) >= 2, "retried");
            // The log holds the first write only.
            let log = dir.join("registry+pods+.wal");
            assert_eq!(crate::wal::read_log(&log).unwrap().records.len(), 1);
            hook.full.store(false, Ordering::SeqCst);
            wait_until("the retry", || wal.sync.synced.load(Ordering::Acquire) >= r2 && !wal.health.down());
            assert!(!alarm.load(Ordering::SeqCst));
            assert_eq!(crate::wal::read_log(&log).unwrap().records.len(), 2);
            assert!(!wal.refuses(|_| true, store.current_rev()));
            drop((store, wal));
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    /// A lease record that fails is retried too, and `settled` waits for it.
    #[test]
    fn a_failed_lease_record_is_retried() {
        let dir = std::env::temp_dir().join(format!("mgn-wal-lease-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::new();
        let (wal, _, _lock) = crate::wal::open(&dir, Durability::new(Mode::Buffered, &[]), &store, None).unwrap();
        store.set_sink(wal.clone());
        let hook = Arc::new(DiskFull::default());
        wal.faults.set(Some(hook.clone()));
        hook.full.store(true, Ordering::SeqCst);
        store.grant_lease(5, 30).unwrap();
        assert!(wal.health.down());
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let w = wal.clone();
        let settled = rt.block_on(async move { tokio::time::timeout(Duration::from_millis(100), w.settled()).await.is_ok() });
        assert!(!settled);
        hook.full.store(false, Ordering::SeqCst);
        let w = wal.clone();
        rt.block_on(async move { tokio::time::timeout(Duration::from_secs(5), w.settled()).await.unwrap() });
        let recs = crate::wal::read_log(&dir.join("leases.wal")).unwrap().records;
        assert_eq!(recs, vec![crate::wal::Record::LeaseGrant { id: 5, ttl: 30 }]);
        drop((store, wal));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
