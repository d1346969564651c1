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
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;
use tokio::sync::watch;

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
    /// In a replicated group (crate::replication), every revision up to this is
    /// committed by a quorum; none after it is published. i64::MAX for a store
    /// that does not replicate: one more load in `advance`, nothing else.
    replicated: AtomicI64,
    /// Writers waiting for their revision to be published: (revision, id,
    /// waker), in no order; the count lets a publish skip the lock when nobody
    /// waits. A plain list: the waiters of one fsync cycle (tens) are woken
    /// together, and a per-waiter channel and map node cost more than the scan
    /// (an allocation or three per put).
    waiting: AtomicUsize,
    waiters: Mutex<Vec<(i64, u64, Waker)>>,
    next_id: AtomicU64,
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
            replicated: AtomicI64::new(i64::MAX),
            waiting: AtomicUsize::new(0),
            waiters: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(0),
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

    /// From now on no revision after the committed one is published before
    /// `set_replicated` covers it (a member joining its replicated group).
    pub fn hold_for_replication(&self) {
        self.replicated.store(self.committed(), Ordering::SeqCst);
    }

    /// The replication driver: every revision up to `rev` is committed by a
    /// quorum (raft log order is revision order, so one watermark serves).
    pub fn set_replicated(&self, rev: i64) {
        self.replicated.fetch_max(rev, Ordering::AcqRel);
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
        let committed = committed.min(self.replicated.load(Ordering::Acquire));
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
            let mut w = self.waiters.lock();
            let before = w.len();
            // Woken under the lock: a wake only queues the task, and a task
            // woken here finds its revision published without taking it.
            w.retain(|(rev, _, waker)| {
                if *rev <= p {
                    waker.wake_by_ref();
                    false
                } else {
                    true
                }
            });
            self.waiting.fetch_sub(before - w.len(), Ordering::SeqCst);
        }
    }

    /// Resolves once `rev` is published (at once when it is).
    pub fn wait(&self, rev: i64) -> Published<'_> {
        Published { vis: self, rev, id: None }
    }

    /// The published revision as it moves (watch streams).
    pub fn subscribe(&self) -> watch::Receiver<i64> {
        self.tx.subscribe()
    }
}

/// The future `Visibility::wait` returns: registered in the waiter list at
/// its first pending poll, removed by the publish that wakes it or when
/// dropped (a cancelled request).
pub struct Published<'a> {
    vis: &'a Visibility,
    rev: i64,
    /// Its entry's id while it has one in the list.
    id: Option<u64>,
}

impl Future for Published<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let vis = self.vis;
        if vis.published.load(Ordering::Acquire) >= self.rev {
            return Poll::Ready(());
        }
        let mut w = vis.waiters.lock();
        if let Some(id) = self.id {
            match w.iter_mut().find(|e| e.1 == id) {
                // Polled again before its publish (a timer beside it in a select).
                Some(e) => {
                    if !e.2.will_wake(cx.waker()) {
                        e.2 = cx.waker().clone();
                    }
                    return Poll::Pending;
                }
                // Its entry is gone: a publish took it, having published its
                // revision first.
                None => {
                    self.id = None;
                    return Poll::Ready(());
                }
            }
        }
        // SeqCst with `publish` (Dekker): either it sees this count, or this
        // load sees its revision.
        vis.waiting.fetch_add(1, Ordering::SeqCst);
        if vis.published.load(Ordering::SeqCst) >= self.rev {
            vis.waiting.fetch_sub(1, Ordering::SeqCst);
            return Poll::Ready(());
        }
        let id = vis.next_id.fetch_add(1, Ordering::Relaxed);
        w.push((self.rev, id, cx.waker().clone()));
        self.id = Some(id);
        Poll::Pending
    }
}

impl Drop for Published<'_> {
    fn drop(&mut self) {
        let Some(id) = self.id else { return };
        let mut w = self.vis.waiters.lock();
        if let Some(i) = w.iter().position(|e| e.1 == id) {
            w.swap_remove(i);
            self.vis.waiting.fetch_sub(1, Ordering::SeqCst);
        }
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

    /// In a replicated group a durable revision waits for its quorum too, and
    /// the quorum's watermark alone does not publish what is not durable.
    #[test]
    fn a_replicated_group_publishes_only_what_a_quorum_holds() {
        let v = Visibility::new(10);
        let a = commit(&v, false); // 11: before the group, published as before
        v.mark_done(a);
        assert_eq!(v.published(), 11);
        v.hold_for_replication();
        let b = commit(&v, false); // 12
        let c = commit(&v, true); // 13, fsync
        v.mark_done(b);
        v.mark_done(c);
        assert_eq!(v.published(), 11, "done, not replicated");
        v.set_replicated(13);
        assert_eq!(v.published(), 12, "13 is replicated, not synced");
        v.set_synced(13);
        assert_eq!(v.published(), 13);
        v.set_replicated(12);
        let d = commit(&v, false); // 14
        v.mark_done(d);
        assert_eq!(v.published(), 13, "the watermark never goes back");
        v.set_replicated(14);
        assert_eq!(v.published(), 14);
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

    /// A waiter dropped before its revision is published (a cancelled request)
    /// leaves nothing behind; one polled again keeps a single entry.
    #[test]
    fn dropped_and_repolled_waiters_leave_no_entries() {
        let v = Visibility::new(10);
        let r = commit(&v, true);
        v.mark_done(r);
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut a = v.wait(r);
        let mut b = v.wait(r);
        assert!(Pin::new(&mut a).poll(&mut cx).is_pending());
        assert!(Pin::new(&mut a).poll(&mut cx).is_pending());
        assert!(Pin::new(&mut b).poll(&mut cx).is_pending());
        assert_eq!((v.waiters.lock().len(), v.waiting.load(Ordering::SeqCst)), (2, 2));
        drop(b);
        assert_eq!((v.waiters.lock().len(), v.waiting.load(Ordering::SeqCst)), (1, 1));
        v.set_synced(r);
        assert_eq!((v.waiters.lock().len(), v.waiting.load(Ordering::SeqCst)), (0, 0));
        assert!(Pin::new(&mut a).poll(&mut cx).is_ready());
        drop(a);
        assert_eq!(v.waiting.load(Ordering::SeqCst), 0);
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
