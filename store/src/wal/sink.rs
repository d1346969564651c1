//! The store's commit sink: which log each write goes to, the buffered
//! writers' flush, the fsync flusher thread (group commit, and the retries of
//! failed writes, see `health`), the meta log.
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

use super::fault::Faults;
use super::gather;
use super::health::{next_backoff, Health};
use super::logfile::LogFile;
use super::metrics::WalMetrics;
use super::record::{encode_event, encode_pair, REC_COMPACT, REC_LEASE_GRANT, REC_LEASE_REVOKE, REC_REV_FLOOR};
use super::{file_stem, Durability, Mode};
use crate::mvcc::kvstore::CommitSink;
use crate::mvcc::shard::prefix_of;
use crate::mvcc::visibility::Visibility;
use crate::mvcc::watch_hub::Event;

/// Revisions reserved at a time in the meta log, so that a restart resumes
/// above every revision handed out, those of memory-only prefixes included.
pub(super) const REV_BLOCK: i64 = 100_000;

/// Writes are refused (all of them, memory-only prefixes' too) while the meta
/// log cannot reserve more revisions and fewer than this are left reserved.
/// The next block is reserved when half of the current one is left, so a full
/// disk has 50,000 revisions of memory-only writes before this bites.
pub const FLOOR_MARGIN: i64 = 1_000;

/// fsync-mode logs are written and synced by one flusher thread; a revision
/// that touched one is marked in `Visibility` (its fsync ring) and published
/// once the flusher reports `synced` past it. Writers wait asynchronously for
/// the publication (`Visibility::wait`, which wakes exactly the writers a
/// publication covers). Every writer that arrives during an fsync joins the
/// next one (group commit), and no thread is parked per waiting writer.
/// When each sync starts (at once, or after gathering more writes) is
/// `gather`'s: one sync costs the same whatever it carries.
pub struct SyncState {
    pub(super) wake: Mutex<bool>,
    pub(super) cv: parking_lot::Condvar,
    /// Newest revision appended to any fsync-mode log, or whose buffered write failed.
    pub(super) appended: AtomicI64,
    /// Revisions appended to fsync-mode logs so far (a count, for the gather).
    pub(super) records: AtomicU64,
    /// While the flusher gathers a batch: the `records` count that wakes it
    /// (0 otherwise: every append wakes it).
    pub(super) wake_at: AtomicU64,
    /// When the last of them was appended (`clock` nanoseconds).
    pub(super) last_append: AtomicU64,
    pub(super) logs: RwLock<Vec<Arc<LogFile>>>,
}

/// Buffered writes whose log was busy, for the `wal-write` thread: (revision, its busy logs).
#[derive(Default)]
pub struct Handoff {
    pub(super) queue: Mutex<Vec<(i64, Vec<Arc<LogFile>>)>>,
    pub(super) cv: parking_lot::Condvar,
}

pub struct Wal {
    pub(super) sync: Arc<SyncState>,
    /// Buffered writes handed over because their log was busy (`wait_durable`).
    pub(super) handoff: Handoff,
    /// The store's published revision: the flusher moves it after each sync.
    pub(super) vis: Arc<Visibility>,
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
    /// `floor_wanted`'s value, read without its lock by every commit (a meta
    /// write holds the lock through its fsync).
    pub(super) floor_next: AtomicI64,
    pub metrics: Arc<WalMetrics>,
    pub health: Health,
    pub faults: Arc<Faults>,
}

impl Wal {
    /// Where the log of the shard holding `prefix` lives (`<stem>.wal`).
    pub(super) fn log_path(&self, prefix: &[u8]) -> std::path::PathBuf {
        self.dir.join(format!("{}.wal", file_stem(prefix)))
    }

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
            let path = self.log_path(prefix);
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
            self.floor_next.fetch_max(v, Ordering::AcqRel);
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

    /// Reserves revisions up to `v` from the sequencer without waiting for the
    /// disk: appends the REV_FLOOR record and leaves its fsync to the flusher
    /// (the reservation counts once it is synced). A meta write in progress
    /// holds the lock through its fsync: then nothing is appended, and the next
    /// commit asks again. Done 50,000 revisions ahead of need, so the sequencer
    /// never waits for a slow fsync here (it did: 200 ms of every writer's time
    /// per 50,000 revisions, buffered and memory-only ones too).
    fn reserve(&self, v: i64) {
        let Some(mut wanted) = self.floor_wanted.try_lock() else { return };
        if *wanted >= v {
            return;
        }
        self.meta.append(0, |buf| {
            encode_pair(buf, REC_REV_FLOOR, v, None);
            1
        });
        *wanted = v;
        self.floor_next.store(v, Ordering::Release);
        drop(wanted);
        *self.sync.wake.lock() = true;
        self.sync.cv.notify_one();
    }

    /// A write of `log` failed: the bytes wait in it, the health goes down (the
    /// alarm), and the flusher retries. A write at `rev` (> 0) waits for that
    /// retry as an fsync write does, so its client is answered only once it is
    /// written.
    pub(super) fn failed(&self, log: &Arc<LogFile>, e: &std::io::Error, rev: i64) {
        self.health.fail(log, e);
        if rev > 0 {
            self.vis.mark_fsync(rev);
            self.sync.appended.fetch_max(rev, Ordering::AcqRel);
        }
        *self.sync.wake.lock() = true;
        self.sync.cv.notify_one();
    }

    /// Whether a write must be refused now: one to a durable prefix (or a
    /// lease, or a compaction) while a failed write is outstanding; any write
    /// while a prefix log holds a failed write (a revision nothing after can
    /// be published before, so a memory-only write would only hang); and any
    /// write when too few revisions are left reserved (`FLOOR_MARGIN`).
    /// `durable` (whether the write would go to a log) is asked only while a log write is failing:
    /// a healthy disk costs a write two atomic loads, not a look-up of its prefix's mode.
    pub fn refuses(&self, durable: impl FnOnce(&Self) -> bool, cur_rev: i64) -> bool {
        (self.health.down() && (durable(self) || self.holds_writes())) || cur_rev + FLOOR_MARGIN >= self.floor.load(Ordering::Acquire)
    }

    /// Whether a failed log is a prefix's (it holds written revisions back),
    /// not only the lease or meta log (whose records hold no revision).
    fn holds_writes(&self) -> bool {
        self.health.snapshot().1.iter().any(|l| !Arc::ptr_eq(l, &self.meta) && !Arc::ptr_eq(l, &self.leases))
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
    /// Whether the write that committed `rev` waits for the fsync flusher. When
    /// the ring slot was reused by a later revision the answer is a safe "yes".
    pub fn needs_sync(&self, rev: i64) -> bool {
        self.vis.needs_fsync(rev)
    }

    /// Every fsync-mode log (and every failed log) is on disk up to this.
    pub fn synced(&self) -> i64 {
        self.vis.synced()
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
        let mut synced_records = 0u64;
        // MEGANODE_FSYNC_GATHER_US overrides the gather window (0: never gather), for A/B runs.
        let window = std::env::var("MEGANODE_FSYNC_GATHER_US").ok().and_then(|v| v.parse().ok()).map(|us: u64| Duration::from_micros(us.min(1_000_000)));
        let mut policy = gather::Policy::new(window);
        // The gather's timed waits are a fraction of a millisecond: the default 50 µs timer
        // slack would stretch each by a quarter. SAFETY: prctl on this thread only.
        #[cfg(target_os = "linux")]
        unsafe {
            libc::prctl(libc::PR_SET_TIMERSLACK, 10_000u64, 0, 0, 0)
        };
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
            if backoff.is_zero() {
                match policy.plan(std::time::Instant::now()) {
                    gather::Plan::Now => {}
                    gather::Plan::Sleep(d) => std::thread::sleep(d),
                    gather::Plan::Gather { records, window } => self.gather(synced_records + records, window),
                }
            }
            let records_now = self.sync.records.load(Ordering::Acquire);
            let target = self.sync.appended.load(Ordering::Acquire);
            let (gen, failed) = self.health.snapshot();
            let started = std::time::Instant::now();
            let mut logs: Vec<Arc<LogFile>> = self.sync.logs.read().clone();
            if self.floor.load(Ordering::Acquire) < self.floor_next.load(Ordering::Acquire) {
                logs.push(self.meta.clone()); // a reservation to sync (`reserve`)
            }
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
            policy.synced(started, started.elapsed(), records_now - synced_records);
            synced_records = records_now;
            self.health.recovered(gen);
            // Publishes what this sync made durable and wakes its writers.
            self.vis.set_synced(target);
        }
    }
}

impl Wal {
    /// The `wal-write` thread: writes the buffered logs writers handed over
    /// (`wait_durable`), each once per round whatever number of revisions
    /// wait on it (everything appended by then goes in that one write), then
    /// marks those revisions done so they are published. A write that fails
    /// is the flusher's to retry (`failed` marks its revisions first).
    pub(super) fn writer(self: Arc<Self>) {
        loop {
            let batch = {
                let mut q = self.handoff.queue.lock();
                while q.is_empty() {
                    self.handoff.cv.wait(&mut q);
                }
                std::mem::take(&mut *q)
            };
            let mut logs: Vec<Arc<LogFile>> = Vec::new();
            for (_, ls) in &batch {
                for l in ls {
                    if !logs.iter().any(|x| Arc::ptr_eq(x, l)) {
                        logs.push(l.clone());
                    }
                }
            }
            for l in &logs {
                if let Err(e) = l.flush_to(i64::MAX, &self.metrics) {
                    for (rev, ls) in &batch {
                        if ls.iter().any(|x| Arc::ptr_eq(x, l)) {
                            self.failed(l, &e, *rev);
                        }
                    }
                }
            }
            for (rev, _) in &batch {
                self.vis.mark_done(*rev);
            }
        }
    }
}

impl Wal {
    /// Holds the next sync back until the count of fsync-mode writes reaches `until`,
    /// `window` has passed, or none came for `gather::QUIET`. Writers below the
    /// count do not wake the flusher (`wake_at`); the quiet check costs a timer
    /// wake-up per `QUIET` while they keep coming.
    fn gather(&self, until: u64, window: Duration) {
        let start = clock();
        let deadline = start.saturating_add(window.as_nanos().min(u64::MAX as u128) as u64);
        let quiet = gather::QUIET.as_nanos() as u64;
        let mut w = self.sync.wake.lock();
        self.sync.wake_at.store(until, Ordering::Release);
        while self.sync.records.load(Ordering::Acquire) < until {
            let now = clock();
            let quiet_at = self.sync.last_append.load(Ordering::Acquire).max(start) + quiet;
            if now >= deadline || now >= quiet_at {
                break;
            }
            self.sync.cv.wait_for(&mut w, Duration::from_nanos(deadline.min(quiet_at) - now));
        }
        self.sync.wake_at.store(0, Ordering::Release);
        // Pairs with the fence in `committed`: a writer that saw the old count (and did
        // not wake us) appended before the loads that choose this sync's target.
        std::sync::atomic::fence(Ordering::SeqCst);
        *w = false;
        drop(w);
        self.metrics.gathers.fetch_add(1, Ordering::Relaxed);
        self.metrics.gather_us.fetch_add((clock() - start) / 1000, Ordering::Relaxed);
    }
}

/// Nanoseconds since the first call (a monotonic clock that fits an atomic).
fn clock() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
}

impl CommitSink for Wal {
    fn committed(&self, rev: i64, events: &[Event]) -> bool {
        // Reserve the next block while half of this one is left, so that a
        // meta write that fails has room to be retried (refuses, FLOOR_MARGIN).
        if rev + REV_BLOCK / 2 >= self.floor_next.load(Ordering::Acquire) {
            self.reserve(rev + REV_BLOCK);
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
        let mut buffered = false;
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
                } else {
                    buffered = true;
                }
            }
        }
        if fsync_touched {
            self.vis.mark_fsync(rev);
            self.sync.appended.fetch_max(rev, Ordering::AcqRel);
            self.sync.last_append.store(clock(), Ordering::Release);
            let n = self.sync.records.fetch_add(1, Ordering::AcqRel) + 1;
            // Store-load order against `gather` clearing `wake_at` (its fence): either we
            // see 0 and wake the flusher, or it sees our append when it picks its target.
            std::sync::atomic::fence(Ordering::SeqCst);
            if n >= self.sync.wake_at.load(Ordering::Acquire) {
                *self.sync.wake.lock() = true;
                self.sync.cv.notify_one();
            }
        }
        buffered
    }

    /// Buffered logs: written here, before the revision can be published —
    /// when no one else is writing the log. A log busy with another writer's
    /// write (a slow one: a throttled disk, dirty-page writeback) is handed to
    /// the `wal-write` thread instead, which writes everything queued by then
    /// in one write and marks the revision done (false). Waiting here held a
    /// thread per waiting writer and let each slow write carry a few records
    /// (20 ms per write: ~340 puts/s with 1000 clients). fsync logs are the
    /// flusher's, and so is a buffered write that failed (`failed` marks it):
    /// it is published once the flusher's retry wrote it.
    fn wait_durable(&self, rev: i64, events: &[Event]) -> bool {
        let mut seen: Vec<*const LogFile> = Vec::new();
        let mut busy: Vec<Arc<LogFile>> = Vec::new();
        for e in events {
            if let Some(l) = self.log_for(&e.key).filter(|l| l.mode != Mode::Fsync) {
                let ptr = Arc::as_ptr(&l);
                if seen.contains(&ptr) {
                    continue;
                }
                seen.push(ptr);
                match l.try_flush(rev, &self.metrics) {
                    Some(Ok(())) => {}
                    Some(Err(err)) => self.failed(&l, &err, rev),
                    None => busy.push(l),
                }
            }
        }
        if busy.is_empty() {
            return true;
        }
        self.handoff.queue.lock().push((rev, busy));
        self.handoff.cv.notify_one();
        false
    }

    fn lease_granted(&self, id: i64, ttl: i64) -> crate::mvcc::kvstore::Held {
        self.leases.append(0, |buf| {
            encode_pair(buf, REC_LEASE_GRANT, id, Some(ttl));
            1
        });
        if let Err(e) = self.leases.flush_to(i64::MAX, &self.metrics) {
            self.failed(&self.leases, &e, 0);
        }
        crate::mvcc::kvstore::Held::Yes
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

    fn lease_log_may_block(&self) -> bool {
        self.leases.mode == Mode::Fsync || self.leases.is_slow()
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
            wait_until("first write", || store.current_rev() >= r1);
            hook.full.store(true, Ordering::SeqCst);
            let r2 = put("/registry/pods/b", "2");
            assert!(wal.needs_sync(r2), "{mode:?}: a failed write must wait for its retry");
            wait_until("the failure", || wal.health.down());
            assert!(alarm.load(Ordering::SeqCst));
            assert!(wal.refuses(|w| w.durable_key(b"/registry/pods/c"), store.current_rev()));
            // Memory-only writes too: they could not be published before the held one.
            assert!(wal.refuses(|w| w.durable_key(b"/registry/events/e"), store.current_rev()));
            assert!(!wal.durable_range(b"/registry/events/", b"/registry/events0"));
            assert!(wal.durable_range(b"/registry/", b"/registry0"));
            std::thread::sleep(Duration::from_millis(100));
            assert!(wal.synced() < r2, "{mode:?}: acknowledged while not written");
            assert!(store.current_rev() < r2, "{mode:?}: visible while not written");
            assert!(hook.failures.load(Ordering::SeqCst) >= 2, "retried");
            // The log holds the first write only.
            let log = dir.join("registry+pods+.wal");
            assert_eq!(crate::wal::read_log(&log).unwrap().records.len(), 1);
            hook.full.store(false, Ordering::SeqCst);
            wait_until("the retry", || wal.synced() >= r2 && !wal.health.down() && store.current_rev() >= r2);
            assert!(!alarm.load(Ordering::SeqCst));
            assert_eq!(crate::wal::read_log(&log).unwrap().records.len(), 2);
            assert!(!wal.refuses(|_| true, store.current_rev()));
            drop((store, wal));
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    /// Writes inside `with_deferred_log_writes` are appended but neither written
    /// nor published until it returns; then one log write carries them all and
    /// every revision is published. Writes to memory-only prefixes and outside the
    /// scope are not held.
    #[test]
    fn deferred_log_writes_share_one_write() {
        let dir = std::env::temp_dir().join(format!("mgn-wal-defer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::new();
        let (wal, _, _lock) = crate::wal::open(&dir, Durability::new(Mode::Buffered, &[]), &store, None).unwrap();
        store.set_sink(wal.clone());
        let put = |k: &str| store.put(&PbPutRequest { key: k.into(), value: b"v".to_vec(), ..Default::default() }).unwrap().header.unwrap().revision;
        let r0 = put("/registry/pods/before");
        assert_eq!(store.current_rev(), r0);
        let log = dir.join("registry+pods+.wal");
        let batches = || wal.metrics.batches.load(Ordering::Relaxed);
        let b0 = batches();
        let last = store.with_deferred_log_writes(|| {
            let mut last = 0;
            for i in 0..20 {
                last = put(&format!("/registry/pods/p{i}"));
            }
            assert_eq!(store.current_rev(), r0, "not published before the write");
            assert_eq!(crate::wal::read_log(&log).unwrap().records.len(), 1, "not written yet");
            last
        });
        assert_eq!(store.current_rev(), last, "published once written");
        assert_eq!(crate::wal::read_log(&log).unwrap().records.len(), 21);
        assert_eq!(batches() - b0, 1, "one write for the twenty");
        // Outside the scope, each write is written at once.
        let r = put("/registry/pods/after");
        assert_eq!(store.current_rev(), r);
        drop((store, wal));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A slow fsync (a hook holds it): the write that waits for it, and a
    /// memory-only write committed after it, are invisible — to the default
    /// revision, to reads, to watch subscribers — until the fsync returns; then
    /// both are published at once. A memory-only write alone is published at commit.
    #[test]
    fn a_write_is_published_only_once_durable() {
        struct HoldSync(AtomicBool);
        impl crate::wal::fault::FaultHook for HoldSync {
            fn before(&self, op: crate::wal::fault::FileOp, _: &std::path::Path, _: usize) -> std::io::Result<()> {
                while op == crate::wal::fault::FileOp::Sync && self.0.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok(())
            }
        }
        let dir = std::env::temp_dir().join(format!("mgn-wal-vis-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::new();
        let (wal, _, _lock) = crate::wal::open(&dir, Durability::new(Mode::Fsync, &[]), &store, None).unwrap();
        store.set_sink(wal.clone());
        let put = |k: &str| store.put(&PbPutRequest { key: k.into(), value: b"v".to_vec(), ..Default::default() }).unwrap().header.unwrap().revision;
        let get = |k: &str| store.range(&etcd_client::proto::PbRangeRequest { key: k.into(), ..Default::default() }).unwrap();
        let r0 = put("/registry/events/e0");
        assert_eq!(store.current_rev(), r0, "memory-only: published at commit");
        let hook = Arc::new(HoldSync(AtomicBool::new(true)));
        wal.faults.set(Some(hook.clone()));
        let mut rx = store.subscribe();
        rx.borrow_and_update();
        let r1 = put("/registry/pods/a");
        let r2 = put("/registry/events/e1");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!((store.committed_rev(), store.current_rev()), (r2, r0), "published before its fsync");
        let g = get("/registry/pods/a");
        assert!(g.kvs.is_empty() && g.header.unwrap().revision == r0, "read an undurable write");
        assert!(get("/registry/events/e1").kvs.is_empty(), "read a write queued behind an undurable one");
        assert!(store.range(&etcd_client::proto::PbRangeRequest { key: b"/registry/pods/a".to_vec(), revision: r1, ..Default::default() }).is_err());
        assert!(!rx.has_changed().unwrap(), "watchers told of an undurable revision");
        hook.0.store(false, Ordering::SeqCst);
        wait_until("the fsync", || store.current_rev() == r2);
        assert_eq!(*rx.borrow_and_update(), r2);
        assert_eq!(get("/registry/pods/a").kvs.len(), 1);
        drop((store, wal));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The next block of revisions is reserved without the sequencer waiting for
    /// the meta log's fsync: with 300 ms per fsync, no buffered put past the
    /// reservation point takes long, and the floor moves once the flusher synced it.
    #[test]
    fn a_revision_reservation_does_not_wait_for_a_slow_fsync() {
        let dir = std::env::temp_dir().join(format!("mgn-wal-floor-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::new();
        let (wal, _, _lock) = crate::wal::open(&dir, Durability::new(Mode::Buffered, &[]), &store, None).unwrap();
        store.set_sink(wal.clone());
        let floor = wal.floor.load(Ordering::SeqCst);
        wal.faults.set(Some(Arc::new(crate::wal::fault::Latency { fsync: Duration::from_millis(300), write: Duration::ZERO })));
        let mut slowest = Duration::ZERO;
        for i in 0..REV_BLOCK / 2 + 10 {
            let t = Instant::now();
            store.put(&PbPutRequest { key: format!("/registry/pods/{}", i % 1000).into(), value: b"v".to_vec(), ..Default::default() }).unwrap();
            slowest = slowest.max(t.elapsed());
        }
        assert!(slowest < Duration::from_millis(150), "a put waited {slowest:?} for the reservation's fsync");
        assert!(*wal.floor_wanted.lock() > floor, "no reservation appended");
        wait_until("the reservation synced", || wal.floor.load(Ordering::SeqCst) > floor);
        drop((store, wal));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A store on a fresh fsync-mode data dir `mgn-wal-<name>-<pid>`: (dir, store, its log, the dir's lock).
    fn fsync_store(name: &str) -> (std::path::PathBuf, Arc<Store>, Arc<Wal>, std::fs::File) {
        let dir = std::env::temp_dir().join(format!("mgn-wal-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Arc::new(Store::new());
        let (wal, _, lock) = crate::wal::open(&dir, Durability::new(Mode::Fsync, &[]), &store, None).unwrap();
        store.set_sink(wal.clone());
        (dir, store, wal, lock)
    }

    /// A gather never outlasts its window and ends early when nothing comes (`QUIET`)
    /// or its count is already reached. (Whether it waits its whole window while writes
    /// trickle in depends on the scheduler: not asserted.)
    #[test]
    fn a_gather_is_bounded_by_its_window_and_ends_early_when_writes_stop() {
        let (dir, store, wal, _lock) = fsync_store("gather");
        let records = || wal.sync.records.load(Ordering::SeqCst);
        let put = |store: &Store, i: u64| {
            store.put(&PbPutRequest { key: format!("/registry/pods/g{}", i % 100).into(), value: b"v".to_vec(), ..Default::default() }).unwrap();
        };
        // Nothing comes: over after QUIET, not at the 3 s window.
        let t = Instant::now();
        wal.gather(records() + 10, Duration::from_secs(3));
        assert!(t.elapsed() < Duration::from_secs(1), "a quiet gather took {:?}", t.elapsed());
        // Its count already reached: over at once.
        for i in 0..5 {
            put(&store, i);
        }
        let t = Instant::now();
        wal.gather(records(), Duration::from_secs(3));
        assert!(t.elapsed() < Duration::from_millis(100), "a gather past its count took {:?}", t.elapsed());
        // A writer never pausing: over at the 20 ms window (or earlier, if it was descheduled).
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (store, stop) = (store.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::SeqCst) {
                    put(&store, i);
                    i += 1;
                }
            })
        };
        let t = Instant::now();
        wal.gather(u64::MAX, Duration::from_millis(20));
        assert!(t.elapsed() < Duration::from_secs(1), "a 20 ms window took {:?}", t.elapsed());
        stop.store(true, Ordering::SeqCst);
        writer.join().unwrap();
        drop((store, wal));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// After a burst that may set the flusher gathering, each write that no other
    /// follows is still synced and published (a smoke test of the gather's wake-ups).
    #[test]
    fn a_lone_write_after_a_burst_is_published() {
        let (dir, store, wal, _lock) = fsync_store("lone");
        let put = |store: &Store, k: String| store.put(&PbPutRequest { key: k.into(), value: vec![7; 512], ..Default::default() }).unwrap().header.unwrap().revision;
        let burst: Vec<_> = (0..8)
            .map(|t| {
                let store = store.clone();
                std::thread::spawn(move || {
                    for i in 0..500 {
                        put(&store, format!("/registry/pods/b{t}-{i}"));
                    }
                })
            })
            .collect();
        for b in burst {
            b.join().unwrap();
        }
        assert!(wal.metrics.render().contains("meganode_wal_fsync_gathers_total "), "the gather counter is exported");
        for i in 0..50 {
            let rev = put(&store, format!("/registry/pods/lone{i}"));
            wait_until("a lone write published", || store.current_rev() >= rev);
            std::thread::sleep(Duration::from_micros(300));
        }
        drop((store, wal));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A buffered write whose log is busy with a slow write does not wait for
    /// it: it is handed to the `wal-write` thread, stays invisible until that
    /// thread wrote it, and later writes queued meanwhile share one write.
    #[test]
    fn a_busy_buffered_log_is_handed_to_the_writer_thread() {
        struct HoldWrites(AtomicBool, std::sync::atomic::AtomicU64);
        impl crate::wal::fault::FaultHook for HoldWrites {
            fn before(&self, op: crate::wal::fault::FileOp, _: &std::path::Path, _: usize) -> std::io::Result<()> {
                if op == crate::wal::fault::FileOp::Write {
                    self.1.fetch_add(1, Ordering::SeqCst);
                    while self.0.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                Ok(())
            }
        }
        let dir = std::env::temp_dir().join(format!("mgn-wal-handoff-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Arc::new(Store::new());
        let (wal, _, _lock) = crate::wal::open(&dir, Durability::new(Mode::Buffered, &[]), &store, None).unwrap();
        store.set_sink(wal.clone());
        let put = |store: &Store, k: &str| store.put(&PbPutRequest { key: k.into(), value: b"v".to_vec(), ..Default::default() }).unwrap().header.unwrap().revision;
        put(&store, "/registry/pods/first");
        let hook = Arc::new(HoldWrites(AtomicBool::new(true), Default::default()));
        wal.faults.set(Some(hook.clone()));
        let slow = {
            let store = store.clone();
            std::thread::spawn(move || put(&store, "/registry/pods/slow"))
        };
        wait_until("the slow write", || hook.1.load(Ordering::SeqCst) == 1);
        let t = Instant::now();
        let revs: Vec<i64> = (0..10).map(|i| put(&store, &format!("/registry/pods/k{i}"))).collect();
        assert!(t.elapsed() < Duration::from_millis(500), "writers waited {:?} for the busy log", t.elapsed());
        assert!(store.current_rev() < revs[0], "published before written");
        hook.0.store(false, Ordering::SeqCst);
        let r = slow.join().unwrap();
        wait_until("the handed writes", || store.current_rev() >= revs[9]);
        assert!(r < revs[0]);
        assert_eq!(crate::wal::read_log(&dir.join("registry+pods+.wal")).unwrap().records.len(), 12);
        // The slow write, then one write for the ten handed ones.
        assert_eq!(hook.1.load(Ordering::SeqCst), 2, "the handed writes were not batched");
        drop((store, wal));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A grant or revoke waits on the disk when the lease log syncs each record, not
    /// when it is buffered (then only after a slow write): the lease service then
    /// runs them on the blocking pool (docs/bench/lease-grant-2026-11-28).
    #[test]
    fn lease_records_may_block_in_fsync_mode() {
        for (mode, want) in [(Mode::Fsync, true), (Mode::Buffered, false)] {
            let dir = std::env::temp_dir().join(format!("mgn-wal-lease-block-{}-{want}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            let store = Store::new();
            assert!(!store.lease_log_may_block(), "no log, nothing to wait for");
            let (wal, _, _lock) = crate::wal::open(&dir, Durability::new(mode, &[]), &store, None).unwrap();
            store.set_sink(wal.clone());
            store.grant_lease(7, 30).unwrap();
            assert_eq!(store.lease_log_may_block(), want, "{mode:?}");
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
        // No revision is held: memory-only writes are served, durable ones refused.
        assert!(!wal.refuses(|w| w.durable_key(b"/registry/events/e"), store.current_rev()));
        assert!(wal.refuses(|w| w.durable_key(b"/registry/pods/p"), store.current_rev()));
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
