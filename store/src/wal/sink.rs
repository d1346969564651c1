//! The store's commit sink: which log each write goes to, the buffered
//! writers' flush, the fsync flusher thread (group commit), the meta log.
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

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

/// fsync-mode logs are written and synced by one flusher thread; writers wait
/// asynchronously until `synced` reaches their revision. Every writer that
/// arrives during an fsync joins the next one (group commit), and no thread
/// is parked per waiting writer.
pub struct SyncState {
    pub(super) wake: Mutex<bool>,
    pub(super) cv: parking_lot::Condvar,
    /// Newest revision appended to any fsync-mode log.
    pub(super) appended: AtomicI64,
    /// touched[rev % N] == rev when that revision wrote to an fsync-mode log.
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
    pub(super) meta: Mutex<File>,
    pub(super) leases: Arc<LogFile>,
    pub(super) floor: AtomicI64,
    pub metrics: Arc<WalMetrics>,
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

    pub(super) fn write_meta(&self, kind: u8, v: i64) {
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

    pub(super) fn flusher(self: Arc<Self>) {
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
