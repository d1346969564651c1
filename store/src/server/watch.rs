//! Watch service: many watchers multiplexed on one stream. Each stream is one
//! task that reads the shared watch log from each watcher's next revision and
//! sends what matches. A slow client only slows its own task: writers never
//! wait for it, and once it falls off the log it catches up from history
//! (or is cancelled with compact_revision if that history was compacted).
//! A client that stops reading holds at most STREAM_BUFFER_BYTES of queued
//! responses and the one being built; its stream is then lagging (etcd's
//! victims), and each of its watchers that a compaction passes meanwhile is
//! cancelled with compact_revision, to relist, once it reads again.
use std::collections::{BTreeMap, BTreeSet};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use etcd_client::proto::*;
use etcd_client::proto::PbWatchRequestUnion as Union;
use futures::{Stream, StreamExt};
use prost::Message;
use tokio::sync::{mpsc, Semaphore};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::Ctx;
use crate::auth::{AuthError, Creds};
use crate::mvcc::key_history::Version;
use crate::mvcc::shard::KeyRange;
use crate::mvcc::watch_hub::{Event, LogRead};

pub struct WatchService(pub Arc<Ctx>);

/// Revisions read from the log per watcher per round, so one busy watcher
/// cannot monopolise its stream: etcd's watchBatchMaxRevs, as a catch-up from
/// history (mvcc::watch_catchup::CATCHUP_REVS), so no response carries more.
const LOG_READ_BATCH: usize = crate::mvcc::watch_catchup::CATCHUP_REVS;
/// Event bytes read from the log per watcher per round (at least one revision):
/// what a stream holds in hand besides its queue while its client is slow.
const LOG_READ_BYTES: usize = 4 << 20;
/// Events of several revisions share one response up to about this size.
const RESPONSE_BYTES: usize = 1 << 20;
/// Responses queued towards one client before its task waits for it.
const STREAM_BUFFER: usize = 256;
/// Encoded bytes of responses queued towards one client before its task waits
/// for it (a larger response takes the whole budget): what a client that
/// stops reading costs, with the response being built and the few the
/// HTTP/2 stream holds.
const STREAM_BUFFER_BYTES: usize = 8 << 20;

#[derive(Clone)]
struct Watcher {
    id: i64,
    key: Vec<u8>,
    end: Vec<u8>,
    prev_kv: bool,
    no_put: bool,
    no_delete: bool,
    progress_notify: bool,
    fragment: bool,
    /// The next revision this watcher has not seen.
    next_rev: i64,
    /// Its create's start_revision (0: from now): etcd answers no progress
    /// request while it is ahead of the current revision.
    start: i64,
    /// Created with a start revision in the past: its first delivery reads
    /// history and sends everything up to now in one response (etcd's unsynced
    /// path), after which it follows the log one revision per response.
    catch_up: bool,
}

impl Watcher {
    /// What this watcher is charged against the quota (crate::quota).
    fn accounted_bytes(&self) -> i64 {
        crate::quota::WATCHER_OVERHEAD + (self.key.len() + self.end.len()) as i64
    }

    fn matches(&self, e: &Event) -> bool {
        if (e.is_delete() && self.no_delete) || (!e.is_delete() && self.no_put) {
            return false;
        }
        KeyRange::new(&self.key, &self.end).contains(&e.key)
    }
}

fn pb_event(e: &Event, with_prev: bool) -> PbEvent {
    let kv = if e.is_delete() {
        PbKeyValue { key: e.key.to_vec(), mod_revision: e.kv.mod_rev, ..Default::default() }
    } else {
        kv_of(&e.key, &e.kv)
    };
    PbEvent {
        r#type: if e.is_delete() { 1 } else { 0 },
        kv: Some(kv),
        prev_kv: if with_prev { e.prev.as_ref().map(|p| kv_of(&e.key, p)) } else { None },
    }
}

fn kv_of(key: &[u8], v: &Version) -> PbKeyValue {
    crate::mvcc::kvstore::to_kv(key, v, false)
}

/// A queued response and the bytes of the stream's budget it holds.
type Queued = (Result<PbWatchResponse, Status>, u32);

struct Session {
    ctx: Arc<Ctx>,
    tx: mpsc::Sender<Queued>,
    /// The stream's queue budget in bytes (STREAM_BUFFER_BYTES), given back as
    /// the client takes responses.
    budget: Arc<Semaphore>,
    /// A send had to wait for the client in this delivery round (`blocked`)
    /// or the last one (`lagging`): while lagging, a watcher whose next
    /// revision a compaction has passed is cancelled instead of read on from
    /// the log (etcd moves such a watcher to its victims, then to unsynced,
    /// where the compaction cancels it).
    blocked: bool,
    lagging: bool,
    watchers: BTreeMap<i64, Watcher>,
    next_id: i64,
    /// Ids of watchers a compaction cancelled: etcd keeps them in the stream
    /// until the client cancels them, so the id stays taken and no progress
    /// request is answered meanwhile.
    compacted: BTreeSet<i64>,
    /// This stream's low-water mark in the watch log (see WatchHub::trim_below).
    mark: Arc<std::sync::atomic::AtomicI64>,
    /// The stream's token / certificate, checked at each create as etcd does.
    creds: Creds,
}

type Closed = ();

impl Session {
    /// Forgets a watcher: counts and accounted bytes.
    fn drop_watcher(&mut self, id: i64) -> bool {
        match self.watchers.remove(&id) {
            Some(w) => {
                self.ctx.metrics.watchers.fetch_sub(1, Ordering::Relaxed);
                self.ctx.metrics.watcher_on(&w.key, false);
                self.ctx.store.watch_bytes.fetch_sub(w.accounted_bytes(), Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    async fn send(&mut self, r: PbWatchResponse) -> Result<(), Closed> {
        let n = r.encoded_len().clamp(1, STREAM_BUFFER_BYTES) as u32;
        let permit = match self.budget.try_acquire_many(n) {
            Ok(p) => p,
            Err(_) => {
                self.blocked = true;
                self.lagging = true;
                // Lagging: the watch log need not be kept for this stream (its
                // watchers relist if compaction passes them, or catch up from
                // history); what it holds in hand is in this task.
                self.mark.store(i64::MAX, Ordering::Release);
                self.budget.acquire_many(n).await.map_err(|_| ())?
            }
        };
        permit.forget();
        self.tx.send((Ok(r), n)).await.map_err(|_| ())
    }

    fn resp(&self, rev: i64, id: i64) -> PbWatchResponse {
        PbWatchResponse { header: self.ctx.header(rev), watch_id: id, ..Default::default() }
    }

    /// etcd's isWatchPermitted: read on the watched range (an empty key is "\0").
    /// The refusal is a created-and-canceled response with etcd's reason.
    fn refusal(&self, c: &PbWatchCreate) -> Option<String> {
        if !self.ctx.auth.enabled() {
            return None;
        }
        let key: &[u8] = if c.key.is_empty() { &[0] } else { &c.key };
        let res = self.ctx.auth.info(&self.creds).and_then(|ai| self.ctx.auth.check_read(ai.as_ref(), key, &c.range_end));
        // etcd's reason is the text of its gRPC error: "rpc error: code = ... desc = ...".
        let e = match res {
            Ok(()) => return None,
            Err(e @ (AuthError::InvalidAuthToken | AuthError::AuthOldRevision | AuthError::UserEmpty)) => e,
            Err(_) => AuthError::PermissionDenied,
        };
        let code = match e.code() {
            tonic::Code::Unauthenticated => "Unauthenticated",
            tonic::Code::PermissionDenied => "PermissionDenied",
            _ => "InvalidArgument",
        };
        Some(format!("rpc error: code = {code} desc = {}", e.message()))
    }

    async fn create(&mut self, c: PbWatchCreate) -> Result<(), Closed> {
        let cur = self.ctx.store.current_rev();
        if let Some(reason) = self.refusal(&c) {
            let mut r = self.resp(cur, -1);
            r.created = true;
            r.canceled = true;
            r.cancel_reason = reason;
            return self.send(r).await;
        }
        // etcd's watchStream.Watch: the range first, then the id. An id the
        // stream chose itself is never chosen again (etcd's nextID only grows).
        let end = if c.range_end == [0u8] { vec![0u8] } else { c.range_end.clone() };
        if KeyRange::new(&c.key, &end).is_empty() {
            let mut r = self.resp(cur, -1);
            r.created = true;
            r.canceled = true;
            r.cancel_reason = "mvcc: watcher range is empty".into();
            return self.send(r).await;
        }
        let id = if c.watch_id != 0 {
            if self.watchers.contains_key(&c.watch_id) || self.compacted.contains(&c.watch_id) {
                let mut r = self.resp(cur, -1);
                r.created = true;
                r.canceled = true;
                r.cancel_reason = "mvcc: duplicate watch ID provided on the WatchStream".into();
                return self.send(r).await;
            }
            c.watch_id
        } else {
            while self.watchers.contains_key(&self.next_id) || self.compacted.contains(&self.next_id) {
                self.next_id += 1;
            }
            self.next_id += 1;
            self.next_id - 1
        };
        let start = if c.start_revision > 0 { c.start_revision } else { cur + 1 };
        let mut r = self.resp(cur, id);
        r.created = true;
        self.send(r).await?;
        // Mark before the compaction check: a compaction that misses the mark
        // has already moved the floor this check reads.
        self.mark.fetch_min(start, Ordering::AcqRel);
        let compacted = self.ctx.store.floor_for(&KeyRange::new(&c.key, &end));
        if start < compacted {
            // No cancel reason, as etcd: the Go client would pass a reason on to
            // every watcher of the stream. No revision in the header either:
            // etcd's compacted response carries none.
            let mut r = self.resp(0, id);
            r.compact_revision = compacted;
            r.canceled = true;
            self.compacted.insert(id);
            return self.send(r).await;
        }
        let w = Watcher {
            id,
            key: c.key,
            end,
            prev_kv: c.prev_kv,
            no_put: c.filters.contains(&0),
            no_delete: c.filters.contains(&1),
            progress_notify: c.progress_notify,
            fragment: c.fragment,
            next_rev: start,
            start: c.start_revision,
            catch_up: start <= cur,
        };
        self.ctx.store.watch_bytes.fetch_add(w.accounted_bytes(), Ordering::Relaxed);
        self.ctx.metrics.watcher_on(&w.key, true);
        self.watchers.insert(id, w);
        self.ctx.metrics.watchers.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    async fn cancel(&mut self, id: i64) -> Result<(), Closed> {
        if self.drop_watcher(id) | self.compacted.remove(&id) {
            let mut r = self.resp(self.ctx.store.current_rev(), id);
            r.canceled = true;
            self.send(r).await?;
        }
        Ok(())
    }

    /// Sends every event up to `cur` to every watcher.
    async fn deliver(&mut self, cur: i64) -> Result<(), Closed> {
        self.blocked = false;
        let ids: Vec<i64> = self.watchers.keys().copied().collect();
        for id in ids {
            let mut catching = false;
            loop {
                let Some(w) = self.watchers.get(&id) else { break };
                if w.next_rev > cur {
                    break;
                }
                if self.lagging && !w.catch_up {
                    let floor = self.ctx.store.floor_for(&KeyRange::new(&w.key, &w.end));
                    if w.next_rev < floor {
                        self.cancel_compacted(id, floor).await?;
                        break;
                    }
                }
                let read = if w.catch_up { LogRead::Gap } else { self.ctx.store.hub.read_from_bounded(w.next_rev, LOG_READ_BATCH, LOG_READ_BYTES) };
                match read {
                    LogRead::Batches(batches) => {
                        if batches.is_empty() {
                            break;
                        }
                        // Every revision read this round goes out in as few responses as
                        // fit RESPONSE_BYTES each, as etcd batches a watcher that fell
                        // behind: under a write storm a watcher gets few large messages
                        // instead of one per revision. A watcher that keeps up still sees
                        // one revision per response. Each response carries the newest
                        // revision it includes, and is sent as soon as it is full, so a
                        // round holds at most one response besides the stream's queue.
                        let w = w.clone();
                        let mut pending: Option<(i64, Vec<PbEvent>)> = None;
                        let mut size = 0usize;
                        let mut last = w.next_rev - 1;
                        for b in &batches {
                            if b.rev > cur {
                                break;
                            }
                            last = b.rev;
                            for e in b.events.iter().filter(|e| w.matches(e)) {
                                let pe = pb_event(e, w.prev_kv);
                                let n = pe.encoded_len();
                                match &mut pending {
                                    Some((rev, evs)) if size + n <= RESPONSE_BYTES => {
                                        *rev = b.rev;
                                        evs.push(pe);
                                        size += n;
                                    }
                                    _ => {
                                        if let Some((rev, evs)) = pending.take() {
                                            self.send_events(id, rev, evs, w.fragment).await?;
                                        }
                                        pending = Some((b.rev, vec![pe]));
                                        size = n;
                                    }
                                }
                            }
                        }
                        drop(batches);
                        if let Some((rev, evs)) = pending {
                            self.send_events(id, rev, evs, w.fragment).await?;
                        }
                        self.watchers.get_mut(&id).unwrap().next_rev = last + 1;
                    }
                    LogRead::Gap => {
                        // New with a past start revision, or behind the log: rebuild the
                        // missed events from history.
                        // In bounded batches (CATCHUP_REVS revisions each, as etcd's
                        // watchBatchMaxRevs): this loop comes back for the next one.
                        if !w.catch_up && !catching {
                            self.ctx.metrics.slow_watcher_catchups.fetch_add(1, Ordering::Relaxed);
                        }
                        catching = true;
                        let (key, end, from, fragment, prev) = (w.key.clone(), w.end.clone(), w.next_rev, w.fragment, w.prev_kv);
                        match self.ctx.store.events_between(&key, &end, from, cur, crate::mvcc::watch_catchup::CATCHUP_REVS) {
                            Ok((events, hi)) => {
                                let w = self.watchers.get_mut(&id).unwrap();
                                w.next_rev = hi + 1;
                                w.catch_up = false;
                                let evs: Vec<PbEvent> = events.iter().filter(|e| w.matches(e)).map(|e| pb_event(e, prev)).collect();
                                drop(events);
                                if !evs.is_empty() {
                                    self.send_events(id, cur, evs, fragment).await?;
                                }
                            }
                            Err(_) => {
                                let floor = self.ctx.store.floor_for(&KeyRange::new(&key, &end));
                                self.cancel_compacted(id, floor).await?;
                            }
                        }
                    }
                }
            }
        }
        // A round that never waited for the client: the stream keeps up again.
        self.lagging = self.blocked;
        self.update_mark();
        Ok(())
    }

    /// Cancels a watcher whose next revision is compacted: etcd's response
    /// with compact_revision, which tells the client to relist.
    async fn cancel_compacted(&mut self, id: i64, floor: i64) -> Result<(), Closed> {
        self.drop_watcher(id);
        self.compacted.insert(id);
        // No cancel reason, as etcd: the Go client would pass a reason on to
        // every watcher of the stream. Header revision 0, as etcd's.
        let mut r = self.resp(0, id);
        r.compact_revision = floor;
        r.canceled = true;
        self.send(r).await
    }

    async fn send_events(&mut self, id: i64, rev: i64, events: Vec<PbEvent>, fragment: bool) -> Result<(), Closed> {
        let limit = self.ctx.cfg.max_request_bytes;
        let mut r = self.resp(rev, id);
        if fragment && events.iter().map(|e| e.encoded_len()).sum::<usize>() > limit {
            // Split into pieces under the limit; all but the last say fragment=true.
            let mut pieces: Vec<Vec<PbEvent>> = vec![Vec::new()];
            let mut size = 0;
            for e in events {
                let n = e.encoded_len();
                if size + n > limit && !pieces.last().unwrap().is_empty() {
                    pieces.push(Vec::new());
                    size = 0;
                }
                size += n;
                pieces.last_mut().unwrap().push(e);
            }
            let last = pieces.len() - 1;
            for (i, p) in pieces.into_iter().enumerate() {
                let mut r = self.resp(rev, id);
                r.events = p;
                r.fragment = i != last;
                self.send(r).await?;
            }
            return Ok(());
        }
        r.events = events;
        self.send(r).await
    }

    /// The revision every watcher of this stream has been brought up to.
    fn update_mark(&self) {
        let low = self.watchers.values().map(|w| w.next_rev).min().unwrap_or(i64::MAX);
        self.mark.store(low, Ordering::Release);
    }

    fn synced_rev(&self, cur: i64) -> i64 {
        self.watchers.values().map(|w| w.next_rev - 1).min().unwrap_or(cur).min(cur)
    }
}

struct PbWatchCreate {
    key: Vec<u8>,
    range_end: Vec<u8>,
    start_revision: i64,
    progress_notify: bool,
    filters: Vec<i32>,
    prev_kv: bool,
    watch_id: i64,
    fragment: bool,
}

async fn run(ctx: Arc<Ctx>, mut input: Streaming<PbWatchRequest>, tx: mpsc::Sender<Queued>, budget: Arc<Semaphore>, creds: Creds) {
    ctx.metrics.watch_streams.fetch_add(1, Ordering::Relaxed);
    ctx.store.watch_bytes.fetch_add(crate::quota::WATCH_STREAM_OVERHEAD, Ordering::Relaxed);
    let mut rev_rx = ctx.store.subscribe();
    let mut progress = tokio::time::interval(ctx.cfg.progress_notify_interval);
    progress.tick().await;
    let mark = ctx.store.hub.register_mark();
    let mut s = Session { ctx: ctx.clone(), tx, budget, blocked: false, lagging: false, watchers: BTreeMap::new(), next_id: 0,
        compacted: BTreeSet::new(), mark, creds };
    // A client that half-closes (CloseSend) still gets its watchers' events, as etcd's
    // recvLoop ends on io.EOF without ending the stream; from then on the stream ends only
    // when the client goes away, which the dropped response stream tells (`closed`).
    let mut input_open = true;
    let closed_tx = s.tx.clone();
    let result: Result<(), Closed> = async {
        loop {
            tokio::select! {
                msg = input.message(), if input_open => {
                    let req = match msg {
                        Ok(Some(r)) => r,
                        Ok(None) => { input_open = false; continue; }
                        Err(_) => return Ok(()),
                    };
                    match req.request_union {
                        Some(Union::CreateRequest(c)) => {
                            let create = PbWatchCreate {
                                key: c.key, range_end: c.range_end, start_revision: c.start_revision,
                                progress_notify: c.progress_notify, filters: c.filters, prev_kv: c.prev_kv,
                                watch_id: c.watch_id, fragment: c.fragment,
                            };
                            s.create(create).await?;
                        }
                        Some(Union::CancelRequest(c)) => s.cancel(c.watch_id).await?,
                        Some(Union::ProgressRequest(_)) => {
                            let cur = ctx.store.current_rev();
                            s.deliver(cur).await?;
                            // etcd's progressIfSync: no answer at all while a watcher of the
                            // stream waits for a future start or was cancelled by a compaction.
                            if !s.compacted.is_empty() || s.watchers.values().any(|w| w.start > cur) {
                                continue;
                            }
                            // Never ahead of an event this stream has not sent yet.
                            let r = s.resp(s.synced_rev(cur), -1);
                            s.send(r).await?;
                            continue;
                        }
                        None => {}
                    }
                }
                changed = rev_rx.changed() => {
                    if changed.is_err() { return Ok(()); }
                }
                _ = closed_tx.closed() => return Ok(()),
                _ = progress.tick() => {
                    let cur = ctx.store.current_rev();
                    s.deliver(cur).await?;
                    let rev = s.synced_rev(cur);
                    let ids: Vec<i64> = s.watchers.values().filter(|w| w.progress_notify).map(|w| w.id).collect();
                    for id in ids {
                        let r = s.resp(rev, id);
                        s.send(r).await?;
                    }
                    continue;
                }
            }
            let cur = *rev_rx.borrow_and_update();
            let cur = cur.max(ctx.store.current_rev());
            s.deliver(cur).await?;
        }
    }
    .await;
    let _ = result;
    let ids: Vec<i64> = s.watchers.keys().copied().collect();
    for id in ids {
        s.drop_watcher(id);
    }
    ctx.store.watch_bytes.fetch_sub(crate::quota::WATCH_STREAM_OVERHEAD, Ordering::Relaxed);
    ctx.metrics.watch_streams.fetch_sub(1, Ordering::Relaxed);
}

/// Closes a stream's queue budget when the response stream is dropped.
struct CloseOnDrop(Arc<Semaphore>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

#[tonic::async_trait]
impl PbWatchService for WatchService {
    type WatchStream = Pin<Box<dyn Stream<Item = Result<PbWatchResponse, Status>> + Send>>;

    async fn watch(&self, r: Request<Streaming<PbWatchRequest>>) -> Result<Response<Self::WatchStream>, Status> {
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let budget = Arc::new(Semaphore::new(STREAM_BUFFER_BYTES));
        let creds = self.0.creds(&r);
        tokio::spawn(run(self.0.clone(), r.into_inner(), tx, budget.clone(), creds));
        // A response taken by the client's stream gives its bytes back to the budget;
        // the stream gone (client away), the budget is closed so a task waiting on it ends.
        let guard = CloseOnDrop(budget);
        let out = ReceiverStream::new(rx).map(move |(r, n)| {
            guard.0.add_permits(n as usize);
            r
        });
        Ok(Response::new(Box::pin(out)))
    }
}
