//! Which revision readers and watchers may see: the newest one such that every
//! revision up to it is durable as its prefixes' modes promise (docs/design.md
//! §2, "Visibility"). The sequencer commits a revision (applies it and takes
//! the next number); the revision is *published* — served by default reads,
//! reported in headers, delivered to watchers, answered to its writer — only
//! once it and every revision before it are durable, as etcd applies an entry
//! only once it is persisted.
//!
//! A revision is durable when both hold:
//! - its `done` mark is set: it wrote no buffered-mode log, or its writer has
//!   written (flushed) them since — a buffered write that failed is handed to
//!   the fsync flusher's retries (its `fsync` mark) and marked done then;
//! - it has no `fsync` mark, or `synced` reached it: the fsync flusher wrote and
//!   synced every fsync-mode log (and every failed log) up to it.
//!
//! The published watermark is one atomic; whoever completes a revision's
//! durability (its writer after the commit or after its buffered write, the
//! fsync flusher after a sync) scans forward from it and moves it with
//! `fetch_max`. No lock is taken on the way unless a writer is waiting for a
//! revision to be published (its answer waits: `wait`), or to wake watchers.
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};

use parking_lot::Mutex;
use tokio::sync::{oneshot, watch};

/// Revisions the rings cover. A revision's `done` mark waits until the one
/// `RING` revisions before it is marked (a mark must never hide that an
/// older revision in the same slot is not done), so at most this many
/// revisions can be committed and not yet written to their buffered logs.
pub const RING: i64 = 1 << 16;

fn slot(rev: i64) -> usize {
    rev.rem_euclid(RING) as usize
}

pub struct Visibility {
    /// The newest committed revision (the sequencer's counter).
    committed: AtomicI64,
    /// The newest published revision: every revision up to it is durable.
    published: AtomicI64,
    /// done[slot(r)] >= r: revision r needs no buffered write any more.
    /// Each slot's values go r - RING, r, r + RING, ... in this order.
    done: Box<[AtomicI64]>,
    /// fsync[slot(r)] >= r: revision r waits for the fsync flusher (it wrote
    /// to an fsync-mode log, or its buffered write failed and is retried).
    /// A slot reused by a later revision answers "waits": safe.
    fsync: Box<[AtomicI64]>,
    /// Every revision up to this that has an fsync mark is on disk.
    synced: AtomicI64,
    /// Writers waiting for their revision to be published, by revision; the
    /// count lets a publish skip the lock when nobody waits.
    waiting: AtomicUsize,
    waiters: Mutex<BTreeMap<i64, Vec<oneshot::Sender<()>>>>,
    /// The published revision, for watch streams (woken when it moves).
    tx: watch::Sender<i64>,
}

impl Visibility {
    pub fn new(rev: i64) -> Self {
        let v = Visibility {
            committed: AtomicI64::new(rev),
            published: AtomicI64::new(rev),
            done: (0..RING).map(|_| AtomicI64::new(0)).collect(),
            fsync: (0..RING).map(|_| AtomicI64::new(0)).collect(),
            synced: AtomicI64::new(0),
            waiting: AtomicUsize::new(0),
            waiters: Mutex::new(BTreeMap::new()),
            tx: watch::channel(rev).0,
        };
        v.reset(rev);
        v
    }

    /// Everything up to `rev` is committed and published (start-up, recovery).
    pub fn reset(&self, rev: i64) {
        for (i, d) in self.done.iter().enumerate() {
            // The newest revision <= rev in this slot: marked done.
            d.store(rev - (rev - i as i64).rem_euclid(RING), Ordering::Relaxed);
        }
        self.committed.store(rev, Ordering::Release);
        self.published.store(rev, Ordering::SeqCst);
        self.tx.send_replace(rev);
    }

    pub fn committed(&self) -> i64 {
        self.committed.load(Ordering::Acquire)
    }

    pub fn published(&self) -> i64 {
        self.published.load(Ordering::Acquire)
    }

    /// The sequencer's step: `rev` (= committed + 1) is applied. Its `fsync`
    /// mark, if any, must be set before this.
    pub fn commit(&self, rev: i64) {
        self.committed.store(rev, Ordering::Release);
    }

    /// Revision `rev` needs the fsync flusher (set before `commit`, or before
    /// `mark_done` for a buffered write that failed).
    pub fn mark_fsync(&self, rev: i64) {
        self.fsync[slot(rev)].fetch_max(rev, Ordering::AcqRel);
    }

    /// Whether `rev` waits for the fsync flusher (a reused slot says yes).
    pub fn needs_fsync(&self, rev: i64) -> bool {
        rev > 0 && self.fsync[slot(rev)].load(Ordering::Acquire) >= rev
    }

    pub fn synced(&self) -> i64 {
        self.synced.load(Ordering::Acquire)
    }

    /// The fsync flusher: every fsync-marked revision up to `rev` is on disk.
    pub fn set_synced(&self, rev: i64) {
        self.synced.fetch_max(rev, Ordering::AcqRel);
        self.advance();
    }

    /// Revision `rev` needs no buffered write any more; publishes what it can.
    pub fn mark_done(&self, rev: i64) {
        let d = &self.done[slot(rev)];
        // Unreachable unless RING revisions were committed while one writer's
        // buffered write had not returned: wait for that one's mark.
        while d.load(Ordering::Acquire) < rev - RING {
            std::thread::yield_now();
        }
        d.store(rev, Ordering::Release);
        self.advance();
    }

    /// Moves the published revision over every durable revision after it.
    /// Every caller has just stored a mark (done, synced): the fence orders that
    /// store before the loads below, so of two threads completing neighbouring
    /// revisions at once at least one sees both marks (else both could stop at
    /// the other's revision and leave it unpublished).
    pub fn advance(&self) {
        std::sync::atomic::fence(Ordering::SeqCst);
        let committed = self.committed.load(Ordering::Acquire);
        let start = self.published.load(Ordering::Acquire);
        if start >= committed {
            return;
        }
        let synced = self.synced.load(Ordering::Acquire);
        let mut p = start;
        while p < committed {
            let r = p + 1;
            let i = slot(r);
            if self.done[i].load(Ordering::Acquire) < r || (r > synced && self.fsync[i].load(Ordering::Acquire) >= r) {
                break;
            }
            p = r;
        }
        if p > start {
            self.publish(p);
        }
    }

    fn publish(&self, p: i64) {
        // SeqCst with `waiting` (Dekker): either this sees a waiter's count,
        // or that waiter sees the new revision.
        if self.published.fetch_max(p, Ordering::SeqCst) >= p {
            return;
        }
        self.tx.send_if_modified(|v| {
            let newer = p > *v;
            if newer {
                *v = p;
            }
            newer
        });
        if self.waiting.load(Ordering::SeqCst) > 0 {
            let ready = {
                let mut w = self.waiters.lock();
                let later = w.split_off(&(p + 1));
                std::mem::replace(&mut *w, later)
            };
            for tx in ready.into_values().flatten() {
                self.waiting.fetch_sub(1, Ordering::SeqCst);
                let _ = tx.send(());
            }
        }
    }

    /// Resolves once `rev` is published (at once when it is).
    pub async fn wait(&self, rev: i64) {
        if self.published.load(Ordering::Acquire) >= rev {
            return;
        }
        let (tx, rx) = oneshot::channel();
        {
            let mut w = self.waiters.lock();
            self.waiting.fetch_add(1, Ordering::SeqCst);
            if self.published.load(Ordering::SeqCst) >= rev {
                self.waiting.fetch_sub(1, Ordering::SeqCst);
                return;
            }
            w.entry(rev).or_default().push(tx);
        }
        let _ = rx.await;
    }

    /// The published revision as it moves (watch streams).
    pub fn subscribe(&self) -> watch::Receiver<i64> {
        self.tx.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit(v: &Visibility, fsync: bool) -> i64 {
        let r = v.committed() + 1;
        if fsync {
            v.mark_fsync(r);
        }
        v.commit(r);
        r
    }

    /// A revision is published only once it and all before it are durable;
    /// a memory-only revision behind an fsync waits for that fsync.
    #[test]
    fn published_only_up_to_the_first_revision_not_durable() {
        let v = Visibility::new(10);
        let a = commit(&v, false); // 11, buffered: not yet written
        let b = commit(&v, true); // 12, fsync
        let c = commit(&v, false); // 13, memory only
        v.mark_done(c);
        assert_eq!(v.published(), 10);
        v.mark_done(b);
        assert_eq!(v.published(), 10);
        v.mark_done(a); // written
        assert_eq!(v.published(), 11, "12 is not synced yet, 13 is behind it");
        v.set_synced(12);
        assert_eq!(v.published(), 13);
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(v.wait(13));
    }

    /// Writers completing revisions out of order on several threads, a flusher
    /// syncing behind them: the published revision never passes a revision
    /// that is not durable, and ends at the last one (no completion is missed).
    #[test]
    fn concurrent_completions_publish_everything_and_nothing_early() {
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        const PER_THREAD: i64 = 20_000;
        let v = Arc::new(Visibility::new(5));
        let seq = Arc::new(Mutex::new(()));
        // durable[r]: set just before r's last obligation completes.
        let durable: Arc<Vec<AtomicBool>> = Arc::new((0..(5 + 4 * PER_THREAD + 1) as usize).map(|_| AtomicBool::new(false)).collect());
        let stop = Arc::new(AtomicBool::new(false));
        let flusher = {
            let (v, durable, stop) = (v.clone(), durable.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let to = v.committed();
                    let synced = v.synced();
                    for r in synced + 1..=to {
                        if v.needs_fsync(r) && v.done[slot(r)].load(Ordering::SeqCst) >= r {
                            durable[r as usize].store(true, Ordering::SeqCst);
                        }
                    }
                    // Only up to the first fsync revision whose buffered part is not done.
                    let mut upto = synced;
                    while upto < to && (!v.needs_fsync(upto + 1) || durable[(upto + 1) as usize].load(Ordering::SeqCst)) {
                        upto += 1;
                    }
                    v.set_synced(upto);
                    std::thread::yield_now();
                }
            })
        };
        let checker = {
            let (v, durable, stop) = (v.clone(), durable.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut checked = 5;
                while !stop.load(Ordering::SeqCst) {
                    let p = v.published();
                    for r in checked + 1..=p {
                        assert!(durable[r as usize].load(Ordering::SeqCst), "published {p} past revision {r}, not durable");
                    }
                    checked = checked.max(p);
                }
            })
        };
        let writers: Vec<_> = (0..4)
            .map(|t| {
                let (v, seq, durable) = (v.clone(), seq.clone(), durable.clone());
                std::thread::spawn(move || {
                    for i in 0..PER_THREAD {
                        let fsync = (i + t) % 3 == 0;
                        let r = {
                            let _g = seq.lock();
                            let r = v.committed() + 1;
                            if fsync {
                                v.mark_fsync(r);
                            }
                            v.commit(r);
                            r
                        };
                        if i % 7 == 0 {
                            std::thread::yield_now(); // a buffered write
                        }
                        if !fsync {
                            durable[r as usize].store(true, Ordering::SeqCst);
                        }
                        v.mark_done(r);
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        let last = v.committed();
        let t = std::time::Instant::now();
        while v.published() < last {
            assert!(t.elapsed() < std::time::Duration::from_secs(10), "stuck at {} of {last}", v.published());
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        stop.store(true, Ordering::SeqCst);
        flusher.join().unwrap();
        checker.join().unwrap();
        assert_eq!(last, 5 + 4 * PER_THREAD);
    }

    #[test]
    fn waiters_are_woken_when_their_revision_is_published() {
        let v = std::sync::Arc::new(Visibility::new(RING * 3 - 2)); // slots wrap in the middle
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let revs: Vec<i64> = (0..4).map(|i| commit(&v, i == 1)).collect();
        let waits: Vec<_> = revs.iter().map(|&r| { let v = v.clone(); rt.spawn(async move { v.wait(r).await }) }).collect();
        for &r in revs.iter().rev() {
            v.mark_done(r);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(v.published(), revs[0]);
        assert!(waits.iter().skip(1).all(|w| !w.is_finished()), "published past an unsynced revision");
        v.set_synced(revs[1]);
        rt.block_on(async {
            for w in waits {
                tokio::time::timeout(std::time::Duration::from_secs(5), w).await.unwrap().unwrap();
            }
        });
        assert_eq!(v.published(), revs[3]);
        assert_eq!(v.waiting.load(Ordering::SeqCst), 0);
    }
}
