//! etcd's client-side recipes (client/v3/concurrency: Session, Mutex,
//! Election) run inside the store, for the Lock and Election services.
//!
//! etcd serves those two services by running the same recipes through an
//! in-process client (server/etcdserver/api/v3lock, v3election). We follow the
//! recipes step by step against the store itself, because what clients see
//! comes from those steps: which keys exist (`<name>/<lease in hex>`), which
//! request's header is answered, what is cleaned up when a caller gives up.
//! Two properties of etcd's in-process client carry over as well:
//!
//! - a request with lease 0 gets a fresh 60 s lease (a Session's default), which
//!   is never kept alive (the session is orphaned at once);
//! - errors reach the caller as clientv3 errors, which carry no gRPC status:
//!   gRPC answers them with code Unknown and etcd's message text.
//!
//! Waiting uses the store's revision signal and the watch log, as etcd's
//! recipes use watches.
use std::convert::Infallible;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use etcd_client::proto::*;
use prost::Message;
use tokio::sync::watch;
use tonic::codegen::{http, BoxFuture, StdError};
use tonic::Status;

use super::routes::{self, HttpResponse};
use super::deadline::Deadline;
use super::{Ctx, Write};
use crate::auth::AuthInfo;
use crate::errors::StoreError;
use crate::mvcc::shard::{prefix_end, KeyRange};
use crate::mvcc::watch_hub::{Event, LogRead};

/// concurrency.defaultSessionTTL: the TTL of the lease a Session grants.
pub const SESSION_TTL: i64 = 60;

pub const ERR_SESSION_EXPIRED: &str = "mutex: session is expired";
pub const ERR_ELECTION_NOT_LEADER: &str = "election: not leader";
pub const ERR_ELECTION_NO_LEADER: &str = "election: no leader";
/// v3election.ErrMissingLeaderKey.
pub const ERR_MISSING_LEADER_KEY: &str = "\"leader\" field must be provided";

/// A store error as the Lock and Election services return it: through
/// clientv3, whose errors have no gRPC status, so gRPC sends code Unknown.
pub fn client_err(e: StoreError) -> Status {
    Status::unknown(e.message())
}

tokio::task_local! {
    /// The identity the recipe runs as: its caller's, as etcd's in-process client
    /// carries the caller's token into every step.
    static CALLER: Option<AuthInfo>;
}

/// Runs `f` (a Lock or Election call) as the request's caller; an invalid
/// token is refused as the recipe's first step would be (code Unknown).
pub async fn as_caller<T, R, F>(ctx: &Ctx, r: &tonic::Request<R>, f: F) -> Result<T, Status>
where
    F: std::future::Future<Output = Result<T, Status>>,
{
    let ai = ctx.caller(r).map_err(|s| Status::unknown(s.message()))?;
    CALLER.scope(ai, f).await
}

/// Answers a unary call of the Lock or Election service: `f` runs the recipe on the
/// request's message as the request's caller (`as_caller`).
pub fn unary_as_caller<Req, Resp, B, F, Fut>(req: http::Request<B>, decode_limit: usize, ctx: Arc<Ctx>, f: F) -> BoxFuture<HttpResponse, Infallible>
where
    Req: prost::Message + Default + Clone + Send + Sync + 'static,
    Resp: prost::Message + Send + 'static,
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
    F: Fn(Arc<Ctx>, Req) -> Fut + Copy + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Resp, Status>> + Send + 'static,
{
    routes::unary(req, decode_limit, move |r: tonic::Request<Req>| {
        let ctx = ctx.clone();
        async move {
            // A waiting Lock or Campaign whose caller's deadline passes answers as etcd's does,
            // and its recipe cleans up (OnDrop) as the future is dropped (super::deadline).
            let deadline = super::deadline::Deadline::of(r.metadata());
            let own = ctx.clone();
            deadline.bound(as_caller(&own, &r, f(ctx, r.get_ref().clone()))).await?.map(tonic::Response::new)
        }
    })
}

/// The identity the current recipe runs as (None: auth off, or nobody).
pub fn caller() -> Option<AuthInfo> {
    CALLER.try_with(|c| c.clone()).ok().flatten()
}

/// `f` running as `ai` (for tasks a recipe spawns).
pub fn scoped<F: std::future::Future>(ai: Option<AuthInfo>, f: F) -> impl std::future::Future<Output = F::Output> {
    CALLER.scope(ai, f)
}

/// A refused step, as the caller sees it through clientv3: code Unknown.
fn refused(s: Status) -> Status {
    Status::unknown(s.message())
}

/// A concurrency package error (errors.New): code Unknown as well.
pub fn recipe_err(msg: &str) -> Status {
    Status::unknown(msg)
}

/// gRPC's own limit on a request, before any handler runs.
pub fn check_request_size(ctx: &Ctx, n: usize) -> Result<(), Status> {
    let limit = ctx.cfg.max_request_bytes + super::GRPC_OVERHEAD;
    if n > limit {
        return Err(super::grpc_too_large(n, limit));
    }
    Ok(())
}

/// Go's `%x` of an int64 lease ID: lower-case hex, a minus sign for negative IDs.
pub fn lease_hex(id: i64) -> String {
    if id < 0 {
        format!("-{:x}", id.unsigned_abs())
    } else {
        format!("{id:x}")
    }
}

/// concurrency.NewSession(WithLease(id)) followed by Orphan(): lease 0 (no
/// lease) grants a new one with the default TTL; any other ID is used as
/// given, existing or not (a missing lease shows up at the first put).
pub async fn session(ctx: &Ctx, lease: i64) -> Result<i64, Status> {
    if lease != 0 {
        return Ok(lease);
    }
    // etcd's in-process client grants through the quota lease server: the
    // quota, the caller, the alarms (and here the disk), as LeaseGrant.
    ctx.check_quota(crate::quota::LEASE_GRANT_COST).map_err(refused)?;
    ctx.auth.require(caller().as_ref()).map_err(|e| refused(e.into()))?;
    ctx.check_alarms(Write::LeaseGrant).map_err(refused)?;
    ctx.check_disk(|_| true).map_err(refused)?;
    let (id, _) = ctx.store.grant_lease(0, SESSION_TTL).map_err(client_err)?;
    ctx.settled(Deadline::default()).await?;
    Ok(id)
}

/// `<pfx><lease in hex>`, the key a session holds under a lock or election prefix.
pub fn session_key(pfx: &[u8], lease: i64) -> Vec<u8> {
    [pfx, lease_hex(lease).as_bytes()].concat()
}

/// `name + "/"`, the prefix of a lock's or election's keys.
pub fn prefix(name: &[u8]) -> Vec<u8> {
    [name, b"/"].concat()
}

// ---- requests as clientv3 builds them ----

const SORT_ASCEND: i32 = 1;
const SORT_DESCEND: i32 = 2;
const SORT_BY_CREATE: i32 = 2;
const CMP_CREATE: i32 = 1;
const CMP_EQUAL: i32 = 0;

pub fn get(key: &[u8]) -> PbRangeRequest {
    PbRangeRequest { key: key.to_vec(), ..Default::default() }
}

/// Get(pfx, WithFirstCreate()): the key of the prefix created first.
pub fn get_first_created(pfx: &[u8]) -> PbRangeRequest {
    PbRangeRequest {
        key: pfx.to_vec(),
        range_end: prefix_end(pfx),
        limit: 1,
        sort_order: SORT_ASCEND,
        sort_target: SORT_BY_CREATE,
        ..Default::default()
    }
}

/// Get(pfx, WithLastCreate(), WithMaxCreateRev(max)): the key of the prefix
/// created last at or before `max`.
pub fn get_last_created_before(pfx: &[u8], max: i64) -> PbRangeRequest {
    PbRangeRequest {
        key: pfx.to_vec(),
        range_end: prefix_end(pfx),
        limit: 1,
        sort_order: SORT_DESCEND,
        sort_target: SORT_BY_CREATE,
        max_create_revision: max,
        ..Default::default()
    }
}

/// Compare(CreateRevision(key), "=", rev).
pub fn created_at(key: &[u8], rev: i64) -> PbCompare {
    PbCompare {
        key: key.to_vec(),
        target: CMP_CREATE,
        result: CMP_EQUAL,
        target_union: Some(PbTargetUnion::CreateRevision(rev)),
        ..Default::default()
    }
}

pub fn op_get(r: PbRangeRequest) -> PbTxnRequestOp {
    PbTxnRequestOp { request: Some(PbTxnOpRequest::RequestRange(r)) }
}

pub fn op_put(key: &[u8], value: &[u8], lease: i64) -> PbTxnRequestOp {
    PbTxnRequestOp {
        request: Some(PbTxnOpRequest::RequestPut(PbPutRequest {
            key: key.to_vec(),
            value: value.to_vec(),
            lease,
            ..Default::default()
        })),
    }
}

pub fn op_delete(key: &[u8]) -> PbTxnRequestOp {
    PbTxnRequestOp { request: Some(PbTxnOpRequest::RequestDeleteRange(PbDeleteRequest { key: key.to_vec(), ..Default::default() })) }
}

/// The kvs of the `i`th response of a txn, when it is a range.
pub fn range_kvs(r: &PbTxnResponse, i: usize) -> &[PbKeyValue] {
    match r.responses.get(i).and_then(|op| op.response.as_ref()) {
        Some(PbTxnOpResponse::ResponseRange(rr)) => &rr.kvs,
        _ => &[],
    }
}

pub fn header_rev(h: &Option<PbResponseHeader>) -> i64 {
    h.as_ref().map_or(0, |h| h.revision)
}

// ---- the in-process client: KV calls straight into the store ----

/// A Txn: etcd's request size limit for proposals, the store's checks, the
/// durability wait of its prefix, a full header.
pub async fn txn(ctx: &Ctx, req: PbTxnRequest) -> Result<PbTxnResponse, Status> {
    // etcd's in-process client writes through the quota KV server and the
    // apply's alarm checks, as a client's Txn: a full store or disk refuses the
    // recipe's put with NOSPACE (code Unknown through clientv3) instead of
    // holding it (docs/design.md §5).
    let cost = crate::quota::cost_txn(&req);
    ctx.check_quota(cost).map_err(refused)?;
    if req.encoded_len() > ctx.cfg.max_request_bytes {
        return Err(client_err(StoreError::RequestTooLarge));
    }
    if !crate::mvcc::kvstore_txn::txn_is_read_only(&req) {
        ctx.admit_write(Deadline::default()).await?;
        ctx.check_alarms(Write::Txn { cost }).map_err(refused)?;
        ctx.check_disk(|w| super::kv::txn_durable(w, &req)).map_err(refused)?;
    }
    super::authz::check_txn(ctx, caller().as_ref(), &req).map_err(refused)?;
    let mut resp = ctx.store.txn(&req).map_err(client_err)?;
    ctx.synced(header_rev(&resp.header)).await;
    ctx.fill(&mut resp.header);
    Ok(resp)
}

pub fn range(ctx: &Ctx, req: &PbRangeRequest) -> Result<PbRangeResponse, Status> {
    ctx.auth.check_read(caller().as_ref(), &req.key, &req.range_end).map_err(|e| refused(e.into()))?;
    let mut resp = ctx.store.range(req).map_err(client_err)?;
    ctx.fill(&mut resp.header);
    Ok(resp)
}

/// Delete(key): one key.
pub async fn delete(ctx: &Ctx, key: &[u8]) -> Result<PbDeleteResponse, Status> {
    let req = PbDeleteRequest { key: key.to_vec(), ..Default::default() };
    if req.encoded_len() > ctx.cfg.max_request_bytes {
        return Err(client_err(StoreError::RequestTooLarge));
    }
    ctx.admit_write(Deadline::default()).await?;
    ctx.check_alarms(Write::Delete).map_err(refused)?;
    ctx.check_disk(|w| w.durable_range(&req.key, &req.range_end)).map_err(refused)?;
    super::authz::check_delete(ctx, caller().as_ref(), &req).map_err(refused)?;
    let mut resp = ctx.store.delete_range(&req).map_err(client_err)?;
    ctx.synced(header_rev(&resp.header)).await;
    ctx.fill(&mut resp.header);
    Ok(resp)
}

/// Runs `f` when dropped unless disarmed: the clean-up etcd's recipes do when
/// a caller gives up while waiting (its context is cancelled; here, the RPC's
/// future is dropped, on a client cancel or the grpc-timeout deadline).
pub struct OnDrop<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> OnDrop<F> {
    pub fn new(f: F) -> Self {
        OnDrop(Some(f))
    }
    pub fn disarm(mut self) {
        self.0 = None;
    }
    /// Runs the clean-up now.
    pub fn fire(self) {
        drop(self);
    }
}

impl<F: FnOnce()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

/// waitDelete: until `key`, which had `create_rev`, is deleted (it is then
/// missing or re-created with another create revision). Woken by every new
/// revision of the store, it reads that one key each time; unlike a watch from
/// a revision, this cannot fail when history is compacted meanwhile.
async fn wait_delete(ctx: &Ctx, key: &[u8], create_rev: i64) -> Result<(), Status> {
    let mut rx = ctx.store.subscribe();
    loop {
        rx.borrow_and_update();
        let r = range(ctx, &get(key))?;
        if r.kvs.first().map(|kv| kv.create_revision) != Some(create_rev) {
            return Ok(());
        }
        if rx.changed().await.is_err() {
            return Err(Status::unavailable("store closed"));
        }
    }
}

/// waitDeletes: until every key of `pfx` created at or before `max_create_rev`
/// is gone, waiting on the newest of them each time (a waiter waits only on
/// the key queued right before its own).
pub async fn wait_deletes(ctx: &Ctx, pfx: &[u8], max_create_rev: i64) -> Result<(), Status> {
    loop {
        let r = range(ctx, &get_last_created_before(pfx, max_create_rev))?;
        let Some(kv) = r.kvs.first() else { return Ok(()) };
        wait_delete(ctx, &kv.key, kv.create_revision).await?;
    }
}

// ---- Mutex ----

/// Mutex.Lock on `name` for a session on `lease`: returns the header to
/// answer and the lock's key.
pub async fn lock(ctx: &Arc<Ctx>, name: &[u8], lease: i64) -> Result<(Option<PbResponseHeader>, Vec<u8>), Status> {
    let lease = session(ctx, lease).await?;
    let pfx = prefix(name);
    let my_key = session_key(&pfx, lease);
    // tryAcquire: queue up (or find our key from an earlier Lock with this
    // lease), and read the current holder in the same txn.
    let resp = txn(
        ctx,
        PbTxnRequest {
            compare: vec![created_at(&my_key, 0)],
            success: vec![op_put(&my_key, b"", lease), op_get(get_first_created(&pfx))],
            failure: vec![op_get(get(&my_key)), op_get(get_first_created(&pfx))],
        },
    )
    .await?;
    let my_rev = if resp.succeeded {
        header_rev(&resp.header)
    } else {
        range_kvs(&resp, 0).first().map_or(0, |kv| kv.create_revision)
    };
    let owner = range_kvs(&resp, 1);
    if owner.first().is_none_or(|kv| kv.create_revision == my_rev) {
        return Ok((resp.header, my_key));
    }
    // Wait for the key queued before ours; giving up deletes ours (Unlock).
    let unlock = {
        let (ctx, key) = (ctx.clone(), my_key.clone());
        OnDrop::new(move || {
            let _ = ctx.store.delete_range(&PbDeleteRequest { key, ..Default::default() });
        })
    };
    if let Err(e) = wait_deletes(ctx, &pfx, my_rev - 1).await {
        unlock.fire();
        return Err(e);
    }
    // The session may have expired meanwhile: our key is then gone.
    let g = match range(ctx, &get(&my_key)) {
        Ok(g) => g,
        Err(e) => {
            unlock.fire();
            return Err(e);
        }
    };
    unlock.disarm();
    if g.kvs.is_empty() {
        return Err(recipe_err(ERR_SESSION_EXPIRED));
    }
    Ok((g.header, my_key))
}

// ---- Election ----

/// Election.Proclaim for a resumed leadership: a put guarded by the leader
/// key's create revision.
pub async fn proclaim(ctx: &Ctx, key: &[u8], rev: i64, lease: i64, value: &[u8]) -> Result<Option<PbResponseHeader>, Status> {
    let resp = txn(ctx, PbTxnRequest { compare: vec![created_at(key, rev)], success: vec![op_put(key, value, lease)], failure: vec![] }).await?;
    if !resp.succeeded {
        return Err(recipe_err(ERR_ELECTION_NOT_LEADER));
    }
    Ok(resp.header)
}

fn resign_txn(key: &[u8], rev: i64) -> PbTxnRequest {
    PbTxnRequest { compare: vec![created_at(key, rev)], success: vec![op_delete(key)], failure: vec![] }
}

/// Election.Resign: deletes the leader key if it is still the one created at `rev`.
pub async fn resign(ctx: &Ctx, key: &[u8], rev: i64) -> Result<Option<PbResponseHeader>, Status> {
    Ok(txn(ctx, resign_txn(key, rev)).await?.header)
}

/// Election.Campaign: returns the campaign txn's header (etcd answers that one,
/// not a later one), the leader key and its create revision.
pub async fn campaign(ctx: &Arc<Ctx>, name: &[u8], lease: i64, value: &[u8]) -> Result<PbCampaignResponse, Status> {
    let lease = session(ctx, lease).await?;
    let pfx = prefix(name);
    let key = session_key(&pfx, lease);
    let resp = txn(
        ctx,
        PbTxnRequest {
            compare: vec![created_at(&key, 0)],
            success: vec![op_put(&key, value, lease)],
            failure: vec![op_get(get(&key))],
        },
    )
    .await?;
    let mut rev = header_rev(&resp.header);
    if !resp.succeeded {
        // Campaigning again with the same lease: keep the queued key, update its value.
        let (create, old) = range_kvs(&resp, 0).first().map_or((0, Vec::new()), |kv| (kv.create_revision, kv.value.clone()));
        rev = create;
        if old != value {
            if let Err(e) = proclaim(ctx, &key, rev, lease, value).await {
                let _ = resign(ctx, &key, rev).await;
                return Err(e);
            }
        }
    }
    // Giving up while waiting resigns (the caller's context is done).
    let give_up = {
        let (ctx, key) = (ctx.clone(), key.clone());
        OnDrop::new(move || {
            let _ = ctx.store.txn(&resign_txn(&key, rev));
        })
    };
    let waited = wait_deletes(ctx, &pfx, rev - 1).await;
    // An error that is not the caller giving up leaves the key in place.
    give_up.disarm();
    waited?;
    Ok(PbCampaignResponse {
        header: resp.header,
        leader: Some(PbLeaderKey { name: name.to_vec(), key, rev, lease }),
    })
}

/// Election.Leader: the key of the election created first.
pub fn leader(ctx: &Ctx, name: &[u8]) -> Result<PbLeaderResponse, Status> {
    let mut r = range(ctx, &get_first_created(&prefix(name)))?;
    if r.kvs.is_empty() {
        return Err(recipe_err(ERR_ELECTION_NO_LEADER));
    }
    Ok(PbLeaderResponse { header: r.header, kv: Some(r.kvs.swap_remove(0)) })
}

// ---- an internal watcher ----

/// The events of one key range from a start revision on, revision by
/// revision, read from the watch log as the Watch service reads it (a
/// low-water mark keeps the log from being trimmed under it; behind the log
/// it catches up from key histories).
pub struct Follow {
    ctx: Arc<Ctx>,
    key: Vec<u8>,
    end: Vec<u8>,
    next: i64,
    mark: Arc<AtomicI64>,
    rx: watch::Receiver<i64>,
}

/// The history a watcher needs has been compacted (etcd cancels it).
#[derive(Debug)]
pub struct Compacted;

impl Follow {
    pub fn new(ctx: Arc<Ctx>, key: Vec<u8>, end: Vec<u8>, start: i64) -> Result<Follow, Compacted> {
        let rx = ctx.store.subscribe();
        let mark = ctx.store.hub.register_mark();
        mark.store(start, Ordering::Release);
        if start < ctx.store.floor_for(&KeyRange::new(&key, &end)) {
            return Err(Compacted);
        }
        Ok(Follow { ctx, key, end, next: start, mark, rx })
    }

    /// The next events: the revision of the watch response that would carry
    /// them (a revision's own, or the current one after a catch-up) and the events.
    pub async fn next(&mut self) -> Result<(i64, Vec<Event>), Compacted> {
        loop {
            let cur = (*self.rx.borrow_and_update()).max(self.ctx.store.current_rev());
            while self.next <= cur {
                match self.ctx.store.hub.read_from(self.next, 256) {
                    LogRead::Batches(batches) => {
                        if batches.is_empty() {
                            break;
                        }
                        for b in batches {
                            if b.rev > cur {
                                break;
                            }
                            self.next = b.rev + 1;
                            let r = KeyRange::new(&self.key, &self.end);
                            let evs: Vec<Event> = b.events.iter().filter(|e| r.contains(&e.key)).cloned().collect();
                            if !evs.is_empty() {
                                self.mark.store(self.next, Ordering::Release);
                                return Ok((b.rev, evs));
                            }
                        }
                    }
                    LogRead::Gap => {
                        let (evs, hi) = self
                            .ctx
                            .store
                            .events_between(&self.key, &self.end, self.next, cur, crate::mvcc::watch_catchup::CATCHUP_REVS)
                            .map_err(|_| Compacted)?;
                        self.next = hi + 1;
                        self.mark.store(self.next, Ordering::Release);
                        if !evs.is_empty() {
                            // The header of etcd's catch-up response: the revision of the round.
                            return Ok((cur, evs));
                        }
                    }
                }
            }
            self.mark.store(self.next, Ordering::Release);
            if self.rx.changed().await.is_err() {
                return Err(Compacted);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::mvcc::Store;
    use std::time::Duration;

    fn ctx() -> Arc<Ctx> {
        Ctx::new(Arc::new(Store::new()), Config::default(), None)
    }

    fn lease(ctx: &Ctx) -> i64 {
        ctx.store.grant_lease(0, 60).unwrap().0
    }

    fn keys(ctx: &Ctx, pfx: &[u8]) -> Vec<Vec<u8>> {
        let r = ctx.store.range(&PbRangeRequest { key: pfx.to_vec(), range_end: prefix_end(pfx), ..Default::default() }).unwrap();
        r.kvs.into_iter().map(|kv| kv.key).collect()
    }

    async fn settle() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    #[tokio::test]
    async fn waiters_get_the_lock_in_queue_order() {
        let ctx = ctx();
        let (a, b, c) = (lease(&ctx), lease(&ctx), lease(&ctx));
        let (h, ka) = lock(&ctx, b"job", a).await.unwrap();
        assert_eq!(ka, session_key(b"job/", a));
        assert_eq!(header_rev(&h), 2);
        let tb = tokio::spawn({
            let ctx = ctx.clone();
            async move { lock(&ctx, b"job", b).await }
        });
        settle().await;
        let tc = tokio::spawn({
            let ctx = ctx.clone();
            async move { lock(&ctx, b"job", c).await }
        });
        settle().await;
        assert_eq!(keys(&ctx, b"job/").len(), 3);
        // Locking again with the holder's lease answers at once, without a write.
        let (h, k) = lock(&ctx, b"job", a).await.unwrap();
        assert_eq!((header_rev(&h), k), (4, ka.clone()));
        assert!(!tb.is_finished() && !tc.is_finished());
        delete(&ctx, &ka).await.unwrap();
        let (h, kb) = tb.await.unwrap().unwrap();
        assert_eq!((header_rev(&h), kb.clone()), (5, session_key(b"job/", b)));
        settle().await;
        assert!(!tc.is_finished());
        // The holder's lease revoked: the next waiter holds the lock.
        ctx.store.revoke_lease(b).unwrap();
        let (h, _) = tc.await.unwrap().unwrap();
        assert_eq!(header_rev(&h), 6);
    }

    #[tokio::test]
    async fn a_waiter_that_gives_up_leaves_no_key_and_one_that_lost_its_lease_fails() {
        let ctx = ctx();
        let (a, b) = (lease(&ctx), lease(&ctx));
        let (_, ka) = lock(&ctx, b"job", a).await.unwrap();
        let r = tokio::time::timeout(Duration::from_millis(100), lock(&ctx, b"job", b)).await;
        assert!(r.is_err());
        assert_eq!(keys(&ctx, b"job/"), vec![ka.clone()]);
        let tb = tokio::spawn({
            let ctx = ctx.clone();
            async move { lock(&ctx, b"job", b).await }
        });
        settle().await;
        ctx.store.revoke_lease(b).unwrap();
        settle().await;
        assert!(!tb.is_finished(), "waits on the key before its own, not on its own");
        delete(&ctx, &ka).await.unwrap();
        let e = tb.await.unwrap().unwrap_err();
        assert_eq!((e.code(), e.message()), (tonic::Code::Unknown, ERR_SESSION_EXPIRED));
        let e = lock(&ctx, b"job", b).await.unwrap_err();
        assert_eq!((e.code(), e.message()), (tonic::Code::Unknown, "etcdserver: requested lease not found"));
    }

    #[tokio::test]
    async fn lease_zero_grants_a_session_lease() {
        let ctx = ctx();
        let (_, k) = lock(&ctx, b"job", 0).await.unwrap();
        let id = i64::from_str_radix(std::str::from_utf8(&k[4..]).unwrap(), 16).unwrap();
        let (_, granted, keys) = ctx.store.leases.time_to_live(id, true).unwrap();
        assert_eq!(granted, SESSION_TTL);
        assert_eq!(keys.iter().map(|k| k.to_vec()).collect::<Vec<_>>(), vec![k]);
    }

    #[tokio::test]
    async fn campaign_answers_with_its_own_txn_and_gives_up_by_resigning() {
        let ctx = ctx();
        let (a, b) = (lease(&ctx), lease(&ctx));
        let ca = campaign(&ctx, b"e", a, b"va").await.unwrap();
        let la = ca.leader.clone().unwrap();
        assert_eq!((header_rev(&ca.header), la.rev, la.lease), (2, 2, a));
        let tb = tokio::spawn({
            let ctx = ctx.clone();
            async move { campaign(&ctx, b"e", b, b"vb").await }
        });
        settle().await;
        assert_eq!(leader(&ctx, b"e").unwrap().kv.unwrap().value, b"va");
        let e = proclaim(&ctx, &la.key, la.rev + 1, a, b"x").await.unwrap_err();
        assert_eq!(e.message(), ERR_ELECTION_NOT_LEADER);
        resign(&ctx, &la.key, la.rev).await.unwrap();
        let cb = tb.await.unwrap().unwrap();
        // The header of B's campaign txn (revision 3), not of the resignation (4).
        assert_eq!((header_rev(&cb.header), cb.leader.unwrap().rev), (3, 3));
        let r = tokio::time::timeout(Duration::from_millis(100), campaign(&ctx, b"e", a, b"again")).await;
        assert!(r.is_err());
        assert_eq!(keys(&ctx, b"e/"), vec![session_key(b"e/", b)]);
        resign(&ctx, &session_key(b"e/", b), 3).await.unwrap();
        assert_eq!(leader(&ctx, b"e").unwrap_err().message(), ERR_ELECTION_NO_LEADER);
    }

    #[tokio::test]
    async fn follow_reads_each_revision_of_its_range() {
        let ctx = ctx();
        let mut f = Follow::new(ctx.clone(), b"k".to_vec(), Vec::new(), 2).unwrap();
        for v in ["1", "2"] {
            ctx.store.put(&PbPutRequest { key: b"k".to_vec(), value: v.into(), ..Default::default() }).unwrap();
            ctx.store.put(&PbPutRequest { key: b"other".to_vec(), value: v.into(), ..Default::default() }).unwrap();
        }
        let (rev, evs) = f.next().await.unwrap();
        assert_eq!((rev, evs.len(), &evs[0].kv.value.to_vec()[..]), (2, 1, &b"1"[..]));
        let (rev, evs) = f.next().await.unwrap();
        assert_eq!((rev, &evs[0].kv.value.to_vec()[..]), (4, &b"2"[..]));
        let t = tokio::spawn(async move { f.next().await.map(|(rev, evs)| (rev, evs[0].is_delete())) });
        settle().await;
        assert!(!t.is_finished());
        delete(&ctx, b"k").await.unwrap();
        assert_eq!(t.await.unwrap().unwrap(), (6, true));
        ctx.store.compact(6).unwrap();
        assert!(Follow::new(ctx.clone(), b"k".to_vec(), Vec::new(), 3).is_err());
    }

    #[test]
    fn lease_keys_are_gos_hex() {
        assert_eq!(lease_hex(0x694d7a2c3b1e0a05), "694d7a2c3b1e0a05");
        assert_eq!(lease_hex(255), "ff");
        assert_eq!(lease_hex(-1), "-1");
        assert_eq!(lease_hex(i64::MIN), "-8000000000000000");
        assert_eq!(session_key(&prefix(b"job"), 10), b"job/a");
    }
}
