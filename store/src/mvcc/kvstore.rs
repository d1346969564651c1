//! The store: shards by resource prefix, one global revision, and the write
//! path's single short critical section (the sequencer) that gives every write
//! its revision, applies it to the shard it holds, and appends its events to
//! the watch log — so a revision becomes visible atomically and in order.
//!
//! Lock order (never taken the other way round): shard table (read) → shard
//! locks in shard-id order → sequencer → lease table. Lease existence is checked
//! under the sequencer, and revocation removes a lease under it too, so a put can
//! never attach a key to a lease that is being revoked. Everything expensive
//! (decoding, validation, compares, response building, watch fan-out) happens
//! outside the sequencer, and writes to different shards only meet there.
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use etcd_client::proto::{PbPutRequest, PbPutResponse, PbRangeResponse};
use parking_lot::{Mutex, RwLock};

use super::key_history::{KeyHistory, Version};
pub use super::locked::{header, to_kv, Locked, ReadGuard, Shard, WriteGuard};
use super::value::Value;
use super::shard::{prefix_of, KeyRange, ShardData};
use super::visibility::Visibility;
use super::watch_hub::{Event, WatchHub};
use crate::errors::{Result, StoreError};
use crate::lease::LeaseTable;

struct ShardTable {
    by_prefix: HashMap<Bytes, Arc<Shard>>,
    /// Every shard, fallback (id 0) first, then in creation order.
    all: Vec<Arc<Shard>>,
}

/// Receives every committed write, in revision order per shard, before the
/// client is answered (the write-ahead log implements it).
pub trait CommitSink: Send + Sync {
    /// Called with the shard lock(s) and the sequencer held: cheap appends only.
    /// Marks the revision in `Visibility` if it waits for the fsync flusher;
    /// returns whether it went to a buffered-mode log (then `wait_durable`
    /// must write it before the revision can be published).
    fn committed(&self, rev: i64, events: &[Event]) -> bool;
    /// Called after the sequencer is released, for a write `committed` said
    /// went to a buffered log: true once those logs are written (a failed
    /// write is marked for the fsync flusher's retries instead); false when a
    /// log was busy and its write was handed to another thread, which then
    /// calls `Visibility::mark_done(rev)` itself.
    fn wait_durable(&self, rev: i64, events: &[Event]) -> bool;
    /// Whether the sink holds the grant: a log always does (its failures are
    /// its alarm's); a replicated member once its group does (`Held`).
    fn lease_granted(&self, id: i64, ttl: i64) -> Held;
    fn lease_revoked(&self, id: i64);
    /// Whether `lease_granted`/`lease_revoked` may wait on the disk (the lease log
    /// is synced on each, or its last write was slow): the caller then runs them
    /// off the async workers.
    fn lease_log_may_block(&self) -> bool {
        false
    }
    /// Called when history is compacted at `rev`, after the sequencer is released;
    /// compactions call it one at a time, in order (`Store::compact`).
    fn compacted(&self, rev: i64);
}

/// What a sink says of a lease grant it was given.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Held {
    Yes,
    /// Not known yet (a replicated member's wait ran out): it may still take effect.
    Unknown,
    /// Never will: undone here.
    No,
}

/// The compaction revision of a store never compacted, as etcd's (so that
/// Compact(0) is accepted once and HashKV reports -1).
pub const NEVER_COMPACTED: i64 = -1;

pub struct Store {
    table: RwLock<ShardTable>,
    seq: Mutex<()>,
    /// The committed and the published revision (`visibility`).
    pub vis: Arc<Visibility>,
    compacted: AtomicI64,
    pub leases: LeaseTable,
    pub hub: WatchHub,
    sink: RwLock<Option<Arc<dyn CommitSink>>>,
    volatile: RwLock<Option<Volatile>>,
    /// The last compactions as (revision, the compaction before it), for
    /// HashKV: etcd keeps a hash per compaction and answers a HashKV at that
    /// revision from it, with the compaction point it had then.
    compactions: Mutex<std::collections::VecDeque<(i64, i64)>>,
    /// Held through a whole compaction (`compact`).
    compacting: Mutex<()>,
    /// Accounted bytes of every shard's keys and retained versions (the sum of
    /// the shards' `bytes`): moved by each commit's delta and by compaction.
    kv_bytes: AtomicI64,
    /// Accounted bytes of watch streams and watchers, kept by the watch service.
    pub watch_bytes: AtomicI64,
    /// The quota in bytes (<= 0: none), set at start (crate::quota::resolve).
    quota: AtomicI64,
    /// The raised alarms (NOSPACE, CORRUPT), in memory: see crate::quota.
    pub alarms: crate::quota::Alarms,
    /// The counts of paged lists in progress (page_counts).
    pub page_counts: super::page_counts::PageCounts,
    /// The background packer's progress (mvcc/packer.rs).
    pub packing: super::pack_stats::PackStats,
    /// Where replaced versions' values go (`spill`), set once at start when the
    /// store has a data directory.
    pub spill: std::sync::OnceLock<Arc<super::spill::Spill>>,
}

/// The accounted size by part (crate::quota), in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Accounted {
    /// Keys and their retained versions (values and tombstones).
    pub kv: i64,
    /// Leases and the keys attached to them.
    pub leases: i64,
    /// Events in the watch log.
    pub watch_log: i64,
    /// Watch streams and watchers.
    pub watchers: i64,
}

impl Accounted {
    pub fn total(&self) -> i64 {
        self.kv + self.leases + self.watch_log + self.watchers
    }
}

/// Keys compacted per hold of a shard's write lock (≈ 100 µs).
const COMPACT_STEP: usize = 1024;

/// How many compactions etcd keeps a hash of (its hashStorageMaxSize).
const COMPACTIONS_KEPT: usize = 10;

/// Key areas whose history before a restart is gone (memory-only prefixes):
/// reads and watches that need it are answered as if compacted, so clients
/// (kube-apiserver's watch cache) relist instead of trusting stale state.
#[derive(Clone, Debug)]
pub struct Volatile {
    /// The first revision after the restart.
    pub since: i64,
    pub prefixes: Vec<Vec<u8>>,
    /// Everything is memory-only (default durability none).
    pub all: bool,
}

thread_local! {
    /// The store whose buffered log writes this thread defers, and the revisions
    /// (with their events, to find their logs) waiting for the write
    /// (`Store::with_deferred_log_writes`).
    static DEFERRED: std::cell::RefCell<Option<(*const Store, Vec<(i64, Vec<Event>)>)>> = const { std::cell::RefCell::new(None) };
}

/// Copies the values of `vs` — versions a newer one replaced — to the spill and
/// drops them from memory (`mvcc/spill.rs`). Only raw values of at least
/// `spill::MIN_LEN` bytes: packed ones are small already.
fn spill_values(spill: &super::spill::Spill, vs: &mut [Version]) {
    for v in vs {
        let Value::Raw(b) = &v.value else { continue };
        if b.len() < super::spill::MIN_LEN || b.len() > super::spill::MAX_LEN {
            continue;
        }
        if let Some((seg, off)) = spill.put(b) {
            v.value = Value::Spilled { seg, off, len: b.len() as u32 };
        }
    }
}

/// A write in progress: the revision it will commit at, the events so far.
pub struct WriteBatch<'a> {
    pub rev: i64,
    /// Where the values this write replaces go (`spill`), if the store has one.
    spill: Option<&'a super::spill::Spill>,
    pub events: Vec<Event>,
    /// (key-less) lease moves to apply after commit: (key index in events, old lease).
    pub lease_moves: Vec<(Bytes, i64, i64)>,
    /// Accounted bytes this batch added to its shards (new keys and versions).
    pub bytes: i64,
    /// Went to a buffered log: `Store::durable` writes it, then marks it done.
    flush: bool,
}

impl<'a> WriteBatch<'a> {
    pub fn new(rev: i64, spill: Option<&'a super::spill::Spill>) -> Self {
        WriteBatch { rev, spill, events: Vec::new(), lease_moves: Vec::new(), bytes: 0, flush: false }
    }

    /// Writes `value` to `key` at this batch's revision.
    pub fn put(&mut self, data: &mut ShardData, key: &[u8], value: Value, lease: i64) -> Option<Version> {
        let sub = self.events.len() as u32;
        let bytes_before = data.bytes;
        let (key, h) = data.entry(key);
        let prev = h.latest().cloned();
        let (create_rev, version) = match &prev {
            Some(p) => (p.create_rev, p.version + 1),
            None => (self.rev, 1),
        };
        let v = Version { mod_rev: self.rev, sub, create_rev, version, value, lease };
        // etcd gives a create event (create == mod revision) no prev_kv, even
        // when the key existed before an earlier delete in the same txn.
        h.push(v.clone());
        if prev.is_some() {
            self.spill_replaced(h);
        }
        // Read after the spill: the watch log's prev then shares the spilled value
        // instead of keeping the replaced bytes in memory for as long as it holds the event.
        let before = if create_rev == self.rev { None } else { h.before_rev(self.rev).cloned() };
        data.puts += 1;
        data.bytes += crate::quota::version_bytes(v.value.len());
        self.bytes += (data.bytes - bytes_before) as i64;
        let old_lease = prev.as_ref().map_or(0, |p| p.lease);
        if old_lease != lease {
            self.lease_moves.push((key.clone(), old_lease, lease));
        }
        self.events.push(Event { key, kv: v, prev: before });
        prev
    }

    /// The version just replaced (the one before the newest) goes to the spill.
    fn spill_replaced(&mut self, h: &mut KeyHistory) {
        if let Some(spill) = self.spill {
            let vs = h.versions_mut();
            let n = vs.len();
            spill_values(spill, &mut vs[n.saturating_sub(2)..n.saturating_sub(1)]);
        }
    }

    /// Deletes `key` if it is live; returns its last value.
    pub fn delete(&mut self, data: &mut ShardData, key: &Bytes) -> Option<Version> {
        let sub = self.events.len() as u32;
        let h = data.get_mut(key)?;
        let prev = h.latest().cloned()?;
        let tomb = Version { mod_rev: self.rev, sub, create_rev: 0, version: 0, value: Value::default(), lease: 0 };
        h.push(tomb.clone());
        self.spill_replaced(h);
        let before = h.before_rev(self.rev).cloned();
        data.bytes += crate::quota::version_bytes(0);
        self.bytes += crate::quota::version_bytes(0) as i64;
        if prev.lease != 0 {
            self.lease_moves.push((key.clone(), prev.lease, 0));
        }
        self.events.push(Event { key: key.clone(), kv: tomb, prev: before });
        Some(prev)
    }
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
    }
}

impl Store {
    pub fn new() -> Self {
        let fallback = Arc::new(Shard { id: 0, prefix: Bytes::new(), data: Arc::new(RwLock::new(ShardData::default())), packed: Default::default() });
        Store {
            table: RwLock::new(ShardTable { by_prefix: HashMap::new(), all: vec![fallback] }),
            seq: Mutex::new(()),
            vis: Arc::new(Visibility::new(1)),
            compacted: AtomicI64::new(NEVER_COMPACTED),
            leases: LeaseTable::new(),
            hub: WatchHub::new(100_000, 1),
            sink: RwLock::new(None),
            volatile: RwLock::new(None),
            compactions: Mutex::new(std::collections::VecDeque::new()),
            compacting: Mutex::new(()),
            kv_bytes: AtomicI64::new(0),
            watch_bytes: AtomicI64::new(0),
            quota: AtomicI64::new(0),
            alarms: crate::quota::Alarms::default(),
            page_counts: Default::default(),
            packing: Default::default(),
            spill: std::sync::OnceLock::new(),
        }
    }

    /// Replaced versions' values go to spill files in `dir` from now on.
    pub fn spill_to(&self, dir: &std::path::Path) -> std::io::Result<()> {
        let s = super::spill::Spill::new(dir)?;
        let _ = self.spill.set(Arc::new(s));
        Ok(())
    }

    pub fn set_sink(&self, sink: Arc<dyn CommitSink>) {
        *self.sink.write() = Some(sink);
    }

    /// The newest published revision (etcd starts at 1 on an empty store):
    /// what default reads are served at, headers report and watchers get up
    /// to. Every revision up to it is durable (`visibility`).
    pub fn current_rev(&self) -> i64 {
        self.vis.published()
    }

    /// The newest committed revision: applied, possibly not durable yet. Only
    /// for what runs under shard write locks (compares, the answer of a write
    /// that changed nothing, which then waits for `wait_visible`) and for
    /// revision bookkeeping; never served to a reader as is.
    pub fn committed_rev(&self) -> i64 {
        self.vis.committed()
    }

    /// Resolves once `rev` is published: a write's answer (and any answer
    /// that read committed state) waits for it.
    pub async fn wait_visible(&self, rev: i64) {
        self.vis.wait(rev).await
    }

    /// The published revision as it moves (watch streams, Observe).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<i64> {
        self.vis.subscribe()
    }

    /// The last compaction revision, NEVER_COMPACTED (-1) before the first.
    pub fn compacted_rev(&self) -> i64 {
        self.compacted.load(Ordering::Acquire)
    }

    pub fn set_volatile(&self, v: Volatile) {
        *self.volatile.write() = Some(v);
    }

    /// The oldest revision a read or watch of `r` can be served from: the
    /// compaction point, raised past a restart for memory-only prefixes.
    pub fn floor_for(&self, r: &KeyRange<'_>) -> i64 {
        let c = self.compacted_rev();
        match &*self.volatile.read() {
            Some(v) if v.all || v.prefixes.iter().any(|p| r.overlaps_prefix(p)) => c.max(v.since),
            _ => c,
        }
    }

    /// Checks a read revision for the keys of `r`.
    pub fn check_rev_for(&self, r: &KeyRange<'_>, rev: i64) -> Result<i64> {
        let rev = self.check_rev(rev)?;
        if rev < self.floor_for(r) {
            return Err(StoreError::Compacted);
        }
        Ok(rev)
    }

    /// Sets the revision counters after recovery.
    pub fn set_revisions(&self, rev: i64, compacted: i64) {
        self.page_counts.clear();
        self.compacted.store(compacted, Ordering::Release);
        self.hub.reset(rev);
        self.vis.reset(rev);
    }

    pub fn shard_for(&self, key: &[u8]) -> Arc<Shard> {
        let p = match prefix_of(key) {
            None => return self.table.read().all[0].clone(),
            Some(p) => p,
        };
        if let Some(s) = self.table.read().by_prefix.get(p) {
            return s.clone();
        }
        let mut t = self.table.write();
        if let Some(s) = t.by_prefix.get(p) {
            return s.clone();
        }
        let s = Arc::new(Shard { id: t.all.len(), prefix: Bytes::copy_from_slice(p), data: Arc::new(RwLock::new(ShardData::default())), packed: Default::default() });
        t.by_prefix.insert(s.prefix.clone(), s.clone());
        t.all.push(s.clone());
        s
    }

    pub fn all_shards(&self) -> Vec<Arc<Shard>> {
        self.table.read().all.clone()
    }

    /// The shards that can hold keys of these intervals, in id order. With
    /// `create`, single-prefix intervals get their shard made (writes);
    /// otherwise a shard that does not exist yet holds nothing to read.
    pub fn shards_for(&self, ranges: &[KeyRange<'_>], create: bool) -> Vec<Arc<Shard>> {
        let mut out: Vec<Arc<Shard>> = Vec::new();
        let mut need_all = false;
        for r in ranges {
            if r.is_empty() {
                continue;
            }
            if r.is_single() || r.single_prefix().is_some() {
                let s = if create || prefix_of(r.key).is_none() {
                    Some(self.shard_for(r.key))
                } else {
                    self.table.read().by_prefix.get(prefix_of(r.key).unwrap()).cloned()
                };
                if let Some(s) = s {
                    if !out.iter().any(|o| o.id == s.id) {
                        out.push(s);
                    }
                }
            } else {
                need_all = true;
            }
        }
        if need_all {
            let t = self.table.read();
            for s in &t.all {
                if s.prefix.is_empty() || ranges.iter().any(|r| !r.is_single() && r.overlaps_prefix(&s.prefix)) || out.iter().any(|o| o.id == s.id) {
                    if !out.iter().any(|o| o.id == s.id) {
                        out.push(s.clone());
                    }
                }
            }
        }
        out.sort_by_key(|s| s.id);
        out
    }

    pub fn lock_read(&self, shards: Vec<Arc<Shard>>) -> Locked<ReadGuard> {
        Locked { shards: shards.into_iter().map(|s| { let g = s.data.read_arc(); (s, g) }).collect() }
    }

    pub fn lock_write(&self, shards: Vec<Arc<Shard>>) -> Locked<WriteGuard> {
        Locked { shards: shards.into_iter().map(|s| { let g = s.data.write_arc(); (s, g) }).collect() }
    }

    /// Checks a read revision: 0 = current.
    pub fn check_rev(&self, rev: i64) -> Result<i64> {
        let cur = self.current_rev();
        if rev <= 0 {
            return Ok(cur);
        }
        if rev > cur {
            return Err(StoreError::FutureRev);
        }
        if rev < self.compacted_rev() {
            return Err(StoreError::Compacted);
        }
        Ok(rev)
    }

    /// Runs `apply` under the sequencer with the next revision; if it produced
    /// events the revision is committed (sink, watch log, counter), otherwise
    /// it was never handed out (etcd does not bump the revision for no-op writes).
    /// A returned batch must reach `durable` (on the same thread, nothing
    /// fallible in between): until then a batch that went to a buffered log
    /// holds back the publication of every later revision.
    pub fn commit<F, T>(&self, apply: F) -> (T, Option<WriteBatch<'_>>)
    where
        F: FnOnce(&mut WriteBatch) -> T,
    {
        let sink = self.sink.read().clone();
        let guard = self.seq.lock();
        let rev = self.vis.committed() + 1;
        let mut batch = WriteBatch::new(rev, self.spill.get().map(|s| &**s));
        let out = apply(&mut batch);
        if batch.events.is_empty() {
            drop(guard);
            return (out, None);
        }
        for (key, old, new) in &batch.lease_moves {
            self.leases.rebind(key, *old, *new);
        }
        self.kv_bytes.fetch_add(batch.bytes, Ordering::Relaxed);
        batch.flush = sink.as_ref().is_some_and(|s| s.committed(rev, &batch.events));
        self.hub.publish(rev, batch.events.clone());
        self.vis.commit(rev);
        drop(guard);
        if !batch.flush {
            // Memory-only, or fsync-mode logs only (the flusher's part): done here.
            self.vis.mark_done(rev);
        }
        (out, Some(batch))
    }

    /// Writes a committed batch's buffered logs (fsync-mode logs are the
    /// flusher's) and returns the revision to report; the answer then waits
    /// for `wait_visible(rev)`. Called after the shard locks are released, so
    /// writers queue on the log (and share its write), not on the shard.
    pub fn durable(&self, batch: Option<WriteBatch>) -> i64 {
        if let Some(s) = self.spill.get() {
            s.flush_if_full();
        }
        match batch {
            None => self.current_rev(),
            Some(mut b) => {
                if b.flush {
                    match self.defer(b.rev, std::mem::take(&mut b.events)) {
                        Ok(()) => return b.rev,
                        Err(events) => b.events = events,
                    }
                }
                if b.flush {
                    let handed = self.sink.read().clone().is_some_and(|s| !s.wait_durable(b.rev, &b.events));
                    if !handed {
                        self.vis.mark_done(b.rev);
                    }
                }
                b.rev
            }
        }
    }

    /// Runs `f` with this thread's buffered log writes deferred to its end: every
    /// write inside appends its records to the logs as always, but the log writes
    /// (and the revisions' done marks, hence their publication and answers) wait
    /// for `f` to return, and then one write covers them all. The lean transport
    /// runs each batch of frames it read this way: the calls of one read share a
    /// write where each would have made its own `write(2)`.
    pub fn with_deferred_log_writes<T>(&self, f: impl FnOnce() -> T) -> T {
        let me = self as *const Store;
        let outer = DEFERRED.with(|d| {
            let mut d = d.borrow_mut();
            if d.is_some() {
                return true;
            }
            *d = Some((me, Vec::new()));
            false
        });
        if outer {
            return f();
        }
        // Flushed on the way out, a panic in `f` included: a revision left unmarked
        // would hold every later one unpublished.
        struct Flush<'a>(&'a Store);
        impl Drop for Flush<'_> {
            fn drop(&mut self) {
                let list = DEFERRED.with(|d| d.borrow_mut().take()).map(|(_, l)| l).unwrap_or_default();
                let sink = self.0.sink.read().clone();
                for (rev, events) in list {
                    // The first flush writes every record appended so far: the later
                    // revisions find theirs written and only take their marks.
                    let handed = sink.as_ref().is_some_and(|s| !s.wait_durable(rev, &events));
                    if !handed {
                        self.0.vis.mark_done(rev);
                    }
                }
            }
        }
        let _flush = Flush(self);
        f()
    }

    /// Keeps a committed batch's log write for the end of `with_deferred_log_writes`,
    /// when this thread is inside one for this store.
    fn defer(&self, rev: i64, events: Vec<Event>) -> std::result::Result<(), Vec<Event>> {
        DEFERRED.with(|d| match d.borrow_mut().as_mut() {
            Some((store, list)) if std::ptr::eq(*store, self) => {
                list.push((rev, events));
                Ok(())
            }
            _ => Err(events),
        })
    }

    pub fn put(&self, req: &PbPutRequest) -> Result<PbPutResponse> {
        self.put_value(req, Bytes::copy_from_slice(&req.value))
    }

    /// `put` writing `value`, already taken out of the request (its `value` field is
    /// not read): the gRPC path moves the decoded bytes in instead of copying them.
    pub fn put_value(&self, req: &PbPutRequest, value: Bytes) -> Result<PbPutResponse> {
        check_put_value(req, &value)?;
        let shard = self.shard_for(&req.key);
        let mut locked = self.lock_write(vec![shard]);
        self.check_put_against_state(&locked, req, false)?;
        let data = &mut *locked.shards[0].1;
        let leases = &self.leases;
        let (prev, batch) = self.commit(|b| {
            let (value, lease) = resolve_put(data, req, value);
            if lease != 0 && !leases.exists(lease) {
                return Err(StoreError::LeaseNotFound);
            }
            Ok(b.put(data, &req.key, value, lease))
        });
        drop(locked);
        let prev = prev?;
        let rev = self.durable(batch);
        Ok(PbPutResponse {
            header: header(rev),
            prev_kv: if req.prev_kv { prev.map(|p| to_kv(&req.key, &p, false)) } else { None },
        })
    }

    /// The checks a put must pass against the current state before it may commit.
    /// etcd orders them differently for a plain Put (lease first) and a put
    /// inside a Txn (key first).
    pub fn check_put_against_state<G: std::ops::Deref<Target = ShardData>>(
        &self,
        locked: &Locked<G>,
        req: &PbPutRequest,
        in_txn: bool,
    ) -> Result<()> {
        let lease_ok = || req.ignore_lease || req.lease == 0 || self.leases.exists(req.lease);
        let key_ok = || !(req.ignore_value || req.ignore_lease) || locked.get(&req.key).and_then(|h| h.latest()).is_some();
        if in_txn {
            if !key_ok() {
                return Err(StoreError::KeyNotFound);
            }
            if !lease_ok() {
                return Err(StoreError::LeaseNotFound);
            }
        } else {
            if !lease_ok() {
                return Err(StoreError::LeaseNotFound);
            }
            if !key_ok() {
                return Err(StoreError::KeyNotFound);
            }
        }
        Ok(())
    }

    /// Range over locked shards at `rev` with every etcd option; decoded by the caller.
    pub fn range_locked<G: std::ops::Deref<Target = ShardData>>(
        &self,
        locked: &Locked<G>,
        req: &etcd_client::proto::PbRangeRequest,
        rev: i64,
    ) -> super::kvstore_range::RangeRead {
        super::kvstore_range::range_over(locked, req, rev, Some(&self.page_counts))
    }

    pub fn range(&self, req: &etcd_client::proto::PbRangeRequest) -> Result<PbRangeResponse> {
        Ok(self.range_read(req)?.into_response())
    }

    /// A Range read under its shards' read locks, to be decoded (`RangeRead::into_response`)
    /// once they are dropped; its revision is the store's current one, which etcd's header
    /// always carries, whatever revision was read.
    pub fn range_read(&self, req: &etcd_client::proto::PbRangeRequest) -> Result<super::kvstore_range::RangeRead> {
        check_range(req)?;
        let r = KeyRange::new(&req.key, &req.range_end);
        let shards = self.shards_for(std::slice::from_ref(&r), false);
        let locked = self.lock_read(shards);
        // Checked with the shards held so compaction cannot pass under us.
        let cur = self.current_rev();
        let rev = self.check_rev_for(&r, req.revision)?.min(cur);
        let mut read = self.range_locked(&locked, req, rev);
        drop(locked);
        read.finish();
        read.rev = cur;
        Ok(read)
    }

    /// Deletes every live key of the interval in one revision.
    pub fn delete_range(&self, req: &etcd_client::proto::PbDeleteRequest) -> Result<etcd_client::proto::PbDeleteResponse> {
        if req.key.is_empty() {
            return Err(StoreError::EmptyKey);
        }
        let r = KeyRange::new(&req.key, &req.range_end);
        let shards = self.shards_for(std::slice::from_ref(&r), true);
        let mut locked = self.lock_write(shards);
        // Committed, not published: read under the write locks; the answer waits for it.
        let cur = self.committed_rev();
        let keys: Vec<Bytes> = locked.range(&r).into_iter().filter(|(_, h)| h.latest().is_some()).map(|(k, _)| k.clone()).collect();
        let (prevs, batch) = self.commit(|b| {
            let mut prevs = Vec::new();
            for k in &keys {
                let data = locked.data_mut(k);
                if let Some(p) = b.delete(data, k) {
                    prevs.push((k.clone(), p));
                }
            }
            prevs
        });
        drop(locked);
        // Nothing deleted: the interval was empty at `cur` (read under the locks), not
        // necessarily at the revision after they were dropped.
        let rev = if batch.is_none() { cur } else { self.durable(batch) };
        Ok(etcd_client::proto::PbDeleteResponse {
            header: header(rev),
            deleted: prevs.len() as i64,
            prev_kvs: if req.prev_kv { prevs.iter().map(|(k, v)| to_kv(k, v, false)).collect() } else { Vec::new() },
        })
    }

    /// Grants a lease and records it with the sink.
    /// Whether granting or revoking a lease may wait on the disk (`CommitSink::lease_log_may_block`).
    pub fn lease_log_may_block(&self) -> bool {
        self.sink.read().as_ref().is_some_and(|s| s.lease_log_may_block())
    }

    pub fn grant_lease(&self, id: i64, ttl: i64) -> Result<(i64, i64)> {
        let (id, ttl) = self.leases.grant(id, ttl)?;
        // Cloned out: a replicated member's sink waits for its group here.
        let sink = self.sink.read().clone();
        match sink.map_or(Held::Yes, |s| s.lease_granted(id, ttl)) {
            Held::Yes => Ok((id, ttl)),
            Held::Unknown => Err(StoreError::Timeout),
            Held::No => {
                let _ = self.leases.revoke(id);
                Err(StoreError::Timeout)
            }
        }
    }

    /// Puts recovered history for one key straight into its shard (start-up only).
    pub fn load_key(&self, key: Bytes, versions: Vec<Version>) {
        let shard = self.shard_for(&key);
        let mut d = shard.data.write();
        let before = d.bytes;
        // The prefix's values keep being packed with the dictionary they came with.
        if d.dict.is_none() {
            if let Some(Value::Zstd { dict, .. }) = versions.iter().map(|v| &v.value).find(|v| v.is_packed()) {
                d.dict = Some(dict.clone());
            }
        }
        let (_, h) = d.entry(&key);
        // A later checkpoint replaces what an earlier source loaded.
        let old = h.bytes();
        *h = KeyHistory::from_versions(versions);
        if let Some(spill) = self.spill.get() {
            let vs = h.versions_mut();
            let n = vs.len();
            spill_values(spill, &mut vs[..n.saturating_sub(1)]);
        }
        let new = h.bytes();
        d.bytes = d.bytes + new - old;
        self.kv_bytes.fetch_add(d.bytes as i64 - before as i64, Ordering::Relaxed);
        drop(d);
        if let Some(spill) = self.spill.get() {
            spill.flush_if_full();
        }
    }

    /// Every key with every retained version, in key order (tests: the same state
    /// whatever form the values are stored in, since versions compare their bytes).
    #[cfg(test)]
    pub fn dump(&self) -> Vec<(Bytes, Vec<Version>)> {
        let mut out = Vec::new();
        for s in self.all_shards() {
            out.extend(s.data.read().iter().map(|(k, h)| (k.clone(), h.versions().to_vec())));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Applies one recovered record to a key's history (start-up only).
    pub fn load_version(&self, key: &Bytes, v: Version) {
        let shard = self.shard_for(key);
        let mut d = shard.data.write();
        let before = d.bytes;
        d.bytes += crate::quota::version_bytes(v.value.len());
        let h = d.entry(key).1;
        h.push(v);
        if let Some(spill) = self.spill.get() {
            let vs = h.versions_mut();
            let n = vs.len();
            spill_values(spill, &mut vs[n.saturating_sub(2)..n.saturating_sub(1)]);
        }
        self.kv_bytes.fetch_add((d.bytes - before) as i64, Ordering::Relaxed);
        drop(d);
        if let Some(spill) = self.spill.get() {
            spill.flush_if_full();
        }
    }

    /// Re-attaches every live key to its lease after recovery; keys whose lease
    /// is gone are returned so the caller can delete them.
    pub fn relink_leases(&self) -> Vec<Bytes> {
        let mut orphans = Vec::new();
        for s in self.all_shards() {
            let d = s.data.read();
            for (k, h) in d.iter() {
                if let Some(v) = h.latest() {
                    if v.lease != 0 {
                        if self.leases.exists(v.lease) {
                            self.leases.rebind(k, 0, v.lease);
                        } else {
                            orphans.push(k.clone());
                        }
                    }
                }
            }
        }
        orphans
    }

    /// Deletes the keys of a revoked or expired lease (one revision for all).
    pub fn revoke_lease(&self, id: i64) -> Result<i64> {
        let keys = {
            let _seq = self.seq.lock();
            let keys = self.leases.revoke(id)?;
            if let Some(s) = self.sink.read().as_ref() {
                s.lease_revoked(id);
            }
            keys
        };
        if keys.is_empty() {
            return Ok(self.current_rev());
        }
        let ranges: Vec<KeyRange> = keys.iter().map(|k| KeyRange::new(k, b"")).collect();
        let shards = self.shards_for(&ranges, true);
        let mut locked = self.lock_write(shards);
        let (_, batch) = self.commit(|b| {
            for k in &keys {
                let data = locked.data_mut(k);
                // Only keys still attached to this lease: a later put may have moved them.
                if data.get(k).and_then(|h| h.latest()).map_or(false, |v| v.lease == id) {
                    b.delete(data, k);
                }
            }
        });
        drop(locked);
        Ok(self.durable(batch))
    }

    /// Compacts history at `rev`: reads below it fail, the versions they would
    /// need are freed, and deleted keys leave the index. etcd's rule: any
    /// revision above the last compaction (-1 before the first, so 0 is
    /// accepted once) up to the current one; at or below it ErrCompacted,
    /// above the current revision ErrFutureRev.
    /// Holds compactions off until the guard drops (a snapshot streamed while
    /// the store serves reads versions a compaction would drop).
    pub fn hold_compactions(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.compacting.lock()
    }

    pub fn compact(&self, rev: i64) -> Result<i64> {
        // One compaction at a time, so their records reach the meta log in order without
        // the sequencer: its fsync under the sequencer held every writer for the sync.
        let _one = self.compacting.lock();
        {
            let _g = self.seq.lock();
            let cur = self.current_rev();
            if rev <= self.compacted_rev() {
                return Err(StoreError::Compacted);
            }
            if rev > cur {
                return Err(StoreError::FutureRev);
            }
            let mut kept = self.compactions.lock();
            kept.push_back((rev, self.compacted_rev()));
            if kept.len() > COMPACTIONS_KEPT {
                kept.pop_front();
            }
            drop(kept);
            self.compacted.store(rev, Ordering::Release);
        }
        if let Some(s) = self.sink.read().as_ref() {
            s.compacted(rev);
        }
        self.page_counts.forget_below(rev);
        self.compact_shards(rev);
        self.hub.trim_below(rev);
        release_free_memory();
        Ok(self.current_rev())
    }

    /// The compaction point before the compaction at `rev`, if it is one of
    /// the last COMPACTIONS_KEPT compactions since start.
    pub fn compaction_before(&self, rev: i64) -> Option<i64> {
        self.compactions.lock().iter().find(|(r, _)| *r == rev).map(|(_, prev)| *prev)
    }

    /// Compacts recovered history without the checks and logging of the RPC.
    pub fn compact_loaded(&self, rev: i64) {
        self.page_counts.clear();
        self.compact_shards(rev);
    }

    /// Each shard in steps of COMPACT_STEP keys, the write lock released
    /// between steps: compacting a million keys at once held the prefix's
    /// writers for the whole walk.
    fn compact_shards(&self, rev: i64) {
        for s in self.all_shards() {
            let mut after = None;
            let mut dropped = Vec::new();
            loop {
                let mut d = s.data.write();
                let before = d.bytes as i64;
                let next = d.compact_some(rev, after.as_deref(), COMPACT_STEP, &mut dropped);
                self.kv_bytes.fetch_add(d.bytes as i64 - before, Ordering::Relaxed);
                drop(d);
                // Freed without the lock: the frees were most of a step's time (3 ms
                // per 1,024 keys of 30 versions each).
                dropped.clear();
                match next {
                    Some(k) => after = Some(k),
                    None => break,
                }
            }
        }
    }

    /// The accounted size by part: a few atomic loads (crate::quota).
    pub fn accounted(&self) -> Accounted {
        Accounted {
            kv: self.kv_bytes.load(Ordering::Relaxed),
            leases: self.leases.accounted_bytes(),
            watch_log: self.hub.accounted_bytes(),
            watchers: self.watch_bytes.load(Ordering::Relaxed),
        }
    }

    /// The accounted size the quota bounds (Status dbSize, etcd_mvcc_db_total_size_in_bytes).
    pub fn size_bytes(&self) -> i64 {
        self.accounted().total()
    }

    /// The quota in bytes; <= 0 means none.
    pub fn quota(&self) -> i64 {
        self.quota.load(Ordering::Relaxed)
    }

    pub fn set_quota(&self, bytes: i64) {
        self.quota.store(bytes, Ordering::Relaxed);
    }

    /// etcd's quota check (BackendQuota.Available): whether a request that
    /// costs `cost` fits; requests that cost nothing always do.
    pub fn quota_available(&self, cost: i64) -> bool {
        cost == 0 || crate::quota::available(self.size_bytes(), self.quota(), cost)
    }

    pub fn key_count(&self) -> usize {
        self.all_shards().iter().map(|s| s.data.read().len()).sum()
    }
}

/// Gives the pages compaction freed back to the OS at once: glibc's malloc
/// keeps them until asked (malloc_trim), jemalloc until its decay timer (10 s)
/// runs out — either way a store just compacted would report and hold the
/// history it dropped. jemalloc: purge every arena's unused dirty pages.
pub(crate) fn release_free_memory() {
    #[cfg(feature = "jemalloc")]
    {
        // SAFETY: "arena.<MALLCTL_ARENAS_ALL>.purge" takes and returns nothing.
        unsafe {
            tikv_jemalloc_sys::mallctl(c"arena.4096.purge".as_ptr(), std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), 0);
        }
    }
    #[cfg(all(target_os = "linux", target_env = "gnu", not(feature = "jemalloc")))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        // SAFETY: malloc_trim only walks glibc's own arenas.
        unsafe {
            malloc_trim(0);
        }
    }
}

/// `check_put` with the value taken out of the request (`Store::put_value`).
fn check_put_value(req: &PbPutRequest, value: &[u8]) -> Result<()> {
    if req.key.is_empty() {
        return Err(StoreError::EmptyKey);
    }
    if req.ignore_value && !value.is_empty() {
        return Err(StoreError::ValueProvided);
    }
    if req.ignore_lease && req.lease != 0 {
        return Err(StoreError::LeaseProvided);
    }
    Ok(())
}

/// etcd's static checks of a range: a key, and sort options it knows.
pub fn check_range(req: &etcd_client::proto::PbRangeRequest) -> Result<()> {
    if req.key.is_empty() {
        return Err(StoreError::EmptyKey);
    }
    if !(0..=2).contains(&req.sort_order) || !(0..=4).contains(&req.sort_target) {
        return Err(StoreError::InvalidSortOption);
    }
    Ok(())
}

pub fn check_put(req: &PbPutRequest) -> Result<()> {
    check_put_value(req, &req.value)
}

/// A decoded request's value as the store's `Bytes`, taken out of the request:
/// without a copy when the vector is exactly sized (prost sizes it so for all
/// but values under 8 bytes), else copied so no spare capacity is kept.
pub fn take_value(v: &mut Vec<u8>) -> Bytes {
    let v = std::mem::take(v);
    if v.len() == v.capacity() {
        Bytes::from(v)
    } else {
        Bytes::copy_from_slice(&v)
    }
}

/// The value and lease a put writes once ignore_value / ignore_lease are applied.
pub fn resolve_put(data: &ShardData, req: &PbPutRequest, value: Bytes) -> (Value, i64) {
    // Most puts carry their own value and lease: no lookup of the key for them
    // (a hash probe and a key compare, both cache misses at 100K keys).
    if !req.ignore_value && !req.ignore_lease {
        return (Value::Raw(value), req.lease);
    }
    let prev = data.get(&req.key).and_then(|h| h.latest());
    let value = if req.ignore_value { prev.map(|p| p.value.clone()).unwrap_or_default() } else { Value::Raw(value) };
    let lease = if req.ignore_lease { prev.map_or(0, |p| p.lease) } else { req.lease };
    (value, lease)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(s: &Store, k: &str) {
        s.put(&PbPutRequest { key: k.into(), value: b"v".to_vec(), ..Default::default() }).unwrap();
    }

    /// `put_value` writes the value it is given and checks the flags against it,
    /// not against the request's (emptied) value field.
    #[test]
    fn put_value_writes_and_checks_the_value_given() {
        let s = Store::new();
        let req = PbPutRequest { key: b"k".to_vec(), ..Default::default() };
        s.put_value(&req, Bytes::from_static(b"moved")).unwrap();
        let got = s.range(&etcd_client::proto::PbRangeRequest { key: b"k".to_vec(), ..Default::default() }).unwrap();
        assert_eq!(got.kvs[0].value, b"moved");
        let ignore = PbPutRequest { key: b"k".to_vec(), ignore_value: true, ..Default::default() };
        assert!(matches!(s.put_value(&ignore, Bytes::from_static(b"x")), Err(StoreError::ValueProvided)));
        s.put_value(&ignore, Bytes::new()).unwrap();
        let got = s.range(&etcd_client::proto::PbRangeRequest { key: b"k".to_vec(), ..Default::default() }).unwrap();
        assert_eq!((got.kvs[0].value.as_slice(), got.kvs[0].version), (&b"moved"[..], 2));
    }

    /// The accounted size is kept by deltas on the write path; it must equal a
    /// recount of what the shards hold after any mix of writes and compactions.
    fn recount(s: &Store) -> i64 {
        s.all_shards()
            .iter()
            .map(|sh| sh.data.read().iter().map(|(k, h)| (crate::quota::key_bytes(k.len()) + h.bytes()) as i64).sum::<i64>())
            .sum()
    }

    fn log_events(s: &Store) -> i64 {
        let Some(oldest) = s.hub.oldest() else { return 0 };
        match s.hub.read_from(oldest, usize::MAX) {
            super::super::watch_hub::LogRead::Batches(b) => b.iter().map(|b| b.events.len() as i64).sum(),
            super::super::watch_hub::LogRead::Gap => unreachable!(),
        }
    }

    #[test]
    fn accounted_size_follows_writes_and_compaction() {
        use etcd_client::proto::{PbDeleteRequest, PbTxnOpRequest, PbTxnRequest, PbTxnRequestOp};
        let s = Store::new();
        assert_eq!(s.size_bytes(), 0);
        let (lease, _) = s.grant_lease(0, 60).unwrap();
        for i in 0..200 {
            let key = format!("/registry/pods/ns/p{}", i % 37).into_bytes();
            s.put(&PbPutRequest { key, value: vec![b'x'; i % 50], lease: if i % 3 == 0 { lease } else { 0 }, ..Default::default() }).unwrap();
            if i % 7 == 0 {
                s.delete_range(&PbDeleteRequest { key: format!("/registry/pods/ns/p{}", i % 11).into_bytes(), ..Default::default() }).unwrap();
            }
            if i % 13 == 0 {
                let op = |k: String| PbTxnRequestOp { request: Some(PbTxnOpRequest::RequestPut(PbPutRequest { key: k.into_bytes(), value: b"t".to_vec(), ..Default::default() })) };
                s.txn(&PbTxnRequest { success: vec![op(format!("/registry/leases/x{i}")), op(format!("other{i}"))], ..Default::default() }).unwrap();
            }
            assert_eq!(s.accounted().kv, recount(&s), "after write {i}");
        }
        let attached = s.leases.time_to_live(lease, true).unwrap().2.len() as i64;
        assert_eq!(s.accounted().leases, crate::quota::LEASE_OVERHEAD + attached * crate::quota::LEASE_KEY_OVERHEAD);
        assert_eq!(s.accounted().watch_log, log_events(&s) * crate::quota::EVENT_OVERHEAD);
        let before = s.size_bytes();
        s.compact(s.current_rev() - 20).unwrap();
        assert_eq!(s.accounted().kv, recount(&s));
        assert!(s.size_bytes() < before, "compaction frees: {} -> {}", before, s.size_bytes());
        s.revoke_lease(lease).unwrap();
        s.compact(s.current_rev()).unwrap();
        assert_eq!(s.accounted().kv, recount(&s));
        assert_eq!(s.accounted().leases, 0);
        // The batch at the compaction revision stays in the watch log.
        assert_eq!(s.accounted().watch_log, log_events(&s) * crate::quota::EVENT_OVERHEAD);
    }

    #[test]
    fn quota_is_etcds_check() {
        let s = Store::new();
        s.set_quota(0);
        assert!(s.quota_available(1 << 40));
        put(&s, "a");
        let size = s.size_bytes();
        s.set_quota(size + 100);
        assert!(s.quota_available(99) && !s.quota_available(100) && s.quota_available(0));
        s.set_quota(-1);
        assert!(s.quota_available(1 << 40));
    }

    /// etcd's kvstore updateCompactRev: at or below the last compaction (-1
    /// on a store never compacted) ErrCompacted, above the current revision
    /// ErrFutureRev, anything between is accepted.
    #[test]
    fn compaction_revisions_answer_as_etcds() {
        let s = Store::new();
        assert_eq!(s.compacted_rev(), -1);
        assert_eq!(s.compact(-1), Err(StoreError::Compacted));
        assert_eq!(s.compact(2), Err(StoreError::FutureRev));
        assert_eq!(s.compact(0), Ok(1));
        assert_eq!(s.compacted_rev(), 0);
        assert_eq!(s.compact(0), Err(StoreError::Compacted));
        assert_eq!(s.compact(1), Ok(1));
        assert_eq!(s.compact(1), Err(StoreError::Compacted));
        put(&s, "a");
        put(&s, "a");
        assert_eq!(s.compact(4), Err(StoreError::FutureRev));
        assert_eq!(s.compact(3), Ok(3));
        assert_eq!(s.compact(2), Err(StoreError::Compacted));
        assert_eq!(s.compacted_rev(), 3);
        // What HashKV at a compaction revision reports as etcd does.
        assert_eq!((s.compaction_before(0), s.compaction_before(1), s.compaction_before(3)), (Some(-1), Some(0), Some(1)));
        assert_eq!(s.compaction_before(2), None);
    }
}
