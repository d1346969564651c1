//! KV service: Range, RangeStream, Put, DeleteRange, Txn, Compact.
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use etcd_client::proto::*;
use futures::Stream;
use prost::Message;
use tonic::codegen::{http, BoxFuture, Service, StdError};
use tonic::server::NamedService;
use tonic::{Request, Response, Status};

use super::deadline::Deadline;
use super::routes;
use super::txn_codec::{TxnCall, TxnCodec};
use super::{authz, metrics, Ctx, Write};
use crate::auth::AuthInfo;
use crate::errors::StoreError;
use crate::mvcc::kvstore_txn::{check_txn, check_txn_intervals, txn_is_read_only};

pub struct KvService(pub Arc<Ctx>);

impl KvService {
    pub fn grpc_limit(&self) -> usize {
        self.0.cfg.max_request_bytes + crate::server::GRPC_OVERHEAD
    }

    /// etcd's first limit: gRPC refuses messages above --max-request-bytes +
    /// 512 KiB (ResourceExhausted, gRPC-Go's message) before anything else.
    fn grpc_too_large(&self, n: usize) -> Result<(), Status> {
        let limit = self.grpc_limit();
        if n > limit {
            return Err(crate::server::grpc_too_large(n, limit));
        }
        Ok(())
    }

    /// etcd's second limit: a raft proposal above --max-request-bytes is
    /// refused ("request is too large"), after the request's own checks.
    fn proposal_too_large(&self, n: usize) -> Result<(), Status> {
        if n > self.0.cfg.max_request_bytes {
            return Err(StoreError::RequestTooLarge.into());
        }
        Ok(())
    }

    /// A Txn in etcd's order: gRPC limit, quota, static checks, proposal limit
    /// and alarms (write txns only: read-only ones are not proposed), then the
    /// txn itself.
    /// `caller` is the request's identity (`Ctx::identify`: None while auth is
    /// off), refused (invalid token) where etcd looks at it.
    pub async fn txn_call(&self, call: TxnCall, caller: Option<Result<Option<AuthInfo>, Status>>, dl: Deadline) -> Result<PbTxnResponse, Status> {
        let _timed = self.0.metrics.request(metrics::TXN);
        let req = &call.req;
        self.grpc_too_large(call.wire_len)?;
        // Costed on the levels decoded: a truncated nest's deeper puts are not seen,
        // but check_txn refuses any such nest (docs/design.md §4).
        let cost = crate::quota::cost_txn(req);
        self.0.check_quota(cost)?;
        check_txn(req)?;
        if call.truncated {
            // Unreachable: the check refuses any nest deeper than the decoder keeps.
            return Err(StoreError::TooManyOps.into());
        }
        check_txn_intervals(req)?;
        let auth = caller.transpose()?;
        let read_only = txn_is_read_only(req);
        if read_only {
            // Served where it arrives (a write txn goes to the leader, forward.rs).
            self.0.linearizable(false).await?;
        }
        if !read_only {
            self.proposal_too_large(call.wire_len)?;
            self.0.admit_write(dl).await?;
            self.0.check_alarms(Write::Txn { cost })?;
            self.0.check_disk(|w| txn_durable(w, req))?;
        }
        if let Some(ai) = &auth {
            authz::check_txn(&self.0, ai.as_ref(), req)?;
        }
        // The txn's put values move into the store (`take_value`); nothing reads them after.
        let mut call = call;
        let term = self.0.replica.get().map(|r| r.term());
        let mut resp = self.0.store.txn_checked(&mut call.req)?;
        if let (true, Some(ai)) = (read_only, &auth) {
            self.0.auth.check_unchanged(ai.as_ref())?;
        }
        drop(call);
        if !read_only && !txn_wrote(&resp) {
            self.confirm_unwritten(term).await?;
        }
        self.0.synced_by(resp.header.as_ref().map_or(0, |h| h.revision), dl).await?;
        self.0.fill(&mut resp.header);
        Ok(resp)
    }
}

impl KvService {
    /// A write that wrote nothing (a txn whose branch only read, a delete of an
    /// empty interval) made no revision, so no quorum confirms what it read: on
    /// a leader deposed without knowing it yet, its answer (the header's
    /// revision, the compare's outcome) would be stale. It is confirmed as a
    /// linearizable read is (ReadIndex), and only for the leadership it ran
    /// under (`term`, taken before it ran); etcd sends every write through its
    /// log instead.
    async fn confirm_unwritten(&self, term: Option<u64>) -> Result<(), Status> {
        let (Some(r), Some(term)) = (self.0.replica.get(), term) else { return Ok(()) };
        self.0.linearizable(false).await?;
        if r.term() != term || r.leader() != r.id() {
            return Err(Status::unavailable("etcdserver: leader changed"));
        }
        Ok(())
    }
}

/// Whether a txn's executed branch wrote anything: a put, a delete that
/// deleted, at any depth of nested txns.
fn txn_wrote(resp: &etcd_client::proto::PbTxnResponse) -> bool {
    use etcd_client::proto::PbTxnOpResponse as R;
    resp.responses.iter().filter_map(|r| r.response.as_ref()).any(|r| match r {
        R::ResponsePut(_) => true,
        R::ResponseDeleteRange(d) => d.deleted > 0,
        R::ResponseTxn(t) => txn_wrote(t),
        R::ResponseRange(_) => false,
    })
}

impl KvService {
    /// A Range up to its read: the gRPC limit, the caller's read permission, the
    /// read under the shards' read locks, the auth revision unchanged across it.
    /// The answer is decoded from it with the locks dropped (`bulk::decode`, or
    /// the lean transport's encoder); its header is `Ctx::header(read.rev)`.
    pub fn range_call(&self, req: &PbRangeRequest, caller: Caller) -> Result<crate::mvcc::kvstore_range::RangeRead, Status> {
        self.grpc_too_large(req.encoded_len())?;
        let auth = caller.transpose()?;
        if let Some(ai) = &auth {
            self.0.auth.check_read(ai.as_ref(), &req.key, &req.range_end)?;
        }
        let read = self.0.store.range_read(req)?;
        if let Some(ai) = &auth {
            self.0.auth.check_unchanged(ai.as_ref())?;
        }
        Ok(read)
    }

    /// A RangeStream's checks before its first chunk, in etcd's order: the gRPC limit,
    /// the options a stream cannot honour, the caller and its read permission.
    pub fn range_stream_checks(&self, req: &PbRangeRequest, caller: Caller) -> Result<Option<Option<AuthInfo>>, Status> {
        self.grpc_too_large(req.encoded_len())?;
        super::range_stream::check(req)?;
        let auth = caller.transpose()?;
        if let Some(ai) = &auth {
            self.0.auth.check_read(ai.as_ref(), &req.key, &req.range_end)?;
        }
        Ok(auth)
    }

    /// A Put in etcd's order of checks, answered once its revision is published.
    pub async fn put_call(&self, mut req: PbPutRequest, caller: Caller, dl: Deadline) -> Result<PbPutResponse, Status> {
        let _timed = self.0.metrics.request(metrics::PUT);
        let n = req.encoded_len();
        self.grpc_too_large(n)?;
        self.0.check_quota(crate::quota::cost_put(&req))?;
        crate::mvcc::kvstore::check_put(&req)?;
        let auth = caller.transpose()?;
        self.proposal_too_large(n)?;
        self.0.admit_write(dl).await?;
        self.0.check_alarms(Write::Put)?;
        self.0.check_disk(|w| w.durable_key(&req.key))?;
        if let Some(ai) = &auth {
            authz::check_put(&self.0, ai.as_ref(), &req)?;
        }
        let value = crate::mvcc::kvstore::take_value(&mut req.value);
        let mut resp = self.0.store.put_value(&req, value)?;
        // The rest of the request is not kept for the wait on the log, where a slow
        // disk keeps every writer's call pending.
        drop(req);
        self.0.synced_by(resp.header.as_ref().map_or(0, |h| h.revision), dl).await?;
        self.0.fill(&mut resp.header);
        Ok(resp)
    }

    /// A DeleteRange in etcd's order of checks, answered once its revision is published.
    pub async fn delete_call(&self, req: PbDeleteRequest, caller: Caller, dl: Deadline) -> Result<PbDeleteResponse, Status> {
        let _timed = self.0.metrics.request(metrics::DELETE);
        let n = req.encoded_len();
        self.grpc_too_large(n)?;
        if req.key.is_empty() {
            return Err(StoreError::EmptyKey.into());
        }
        let auth = caller.transpose()?;
        self.proposal_too_large(n)?;
        self.0.admit_write(dl).await?;
        self.0.check_alarms(Write::Delete)?;
        self.0.check_disk(|w| w.durable_range(&req.key, &req.range_end))?;
        if let Some(ai) = &auth {
            authz::check_delete(&self.0, ai.as_ref(), &req)?;
        }
        let term = self.0.replica.get().map(|r| r.term());
        let mut resp = self.0.store.delete_range(&req)?;
        drop(req);
        if resp.deleted == 0 {
            self.confirm_unwritten(term).await?;
        }
        self.0.synced_by(resp.header.as_ref().map_or(0, |h| h.revision), dl).await?;
        self.0.fill(&mut resp.header);
        Ok(resp)
    }
}

/// Who a request runs as, as `Ctx::identify` finds it: None while auth is off.
pub type Caller = Option<Result<Option<AuthInfo>, Status>>;

#[tonic::async_trait]
impl PbKvService for KvService {
    async fn range(&self, request: Request<PbRangeRequest>) -> Result<Response<PbRangeResponse>, Status> {
        let _timed = self.0.metrics.request(metrics::RANGE);
        self.0.linearizable(request.get_ref().serializable).await?;
        let caller = self.0.identify(&request);
        let read = self.range_call(request.get_ref(), caller)?;
        let header = self.0.header(read.rev);
        let mut resp = super::bulk::decode(read).await?;
        resp.header = header;
        Ok(Response::new(resp))
    }

    type RangeStreamStream = Pin<Box<dyn Stream<Item = Result<PbRangeStreamResponse, Status>> + Send>>;

    async fn range_stream(&self, request: Request<PbRangeRequest>) -> Result<Response<Self::RangeStreamStream>, Status> {
        let _timed = self.0.metrics.request(metrics::RANGE);
        self.0.linearizable(request.get_ref().serializable).await?;
        let caller = self.0.identify(&request);
        let auth = self.range_stream_checks(request.get_ref(), caller)?;
        let stream = super::range_stream::start(self.0.clone(), request.into_inner(), auth)?;
        Ok(Response::new(stream))
    }

    async fn put(&self, request: Request<PbPutRequest>) -> Result<Response<PbPutResponse>, Status> {
        let dl = Deadline::of(request.metadata());
        let caller = self.0.identify(&request);
        Ok(Response::new(self.put_call(request.into_inner(), caller, dl).await?))
    }

    async fn delete_range(&self, request: Request<PbDeleteRequest>) -> Result<Response<PbDeleteResponse>, Status> {
        let dl = Deadline::of(request.metadata());
        let caller = self.0.identify(&request);
        Ok(Response::new(self.delete_call(request.into_inner(), caller, dl).await?))
    }

    /// Reached only through the generated server; `KvRouter` sends Txn calls
    /// to `txn_call` with the decoder of `txn_codec`.
    async fn txn(&self, request: Request<PbTxnRequest>) -> Result<Response<PbTxnResponse>, Status> {
        let caller = self.0.identify(&request);
        let dl = Deadline::of(request.metadata());
        let req = request.into_inner();
        let wire_len = req.encoded_len();
        Ok(Response::new(self.txn_call(TxnCall { req, wire_len, truncated: false }, caller, dl).await?))
    }

    async fn compact(&self, request: Request<PbCompactionRequest>) -> Result<Response<PbCompactionResponse>, Status> {
        let n = request.get_ref().encoded_len();
        let dl = Deadline::of(request.metadata());
        self.grpc_too_large(n)?;
        // etcd looks at the token, then whether the caller is an admin (root role:
        // etcd 3.6 refuses others `permission denied`), then at the size.
        let ai = self.0.caller(&request)?;
        self.0.auth.check_admin(ai.as_ref())?;
        self.proposal_too_large(n)?;
        self.0.check_alarms(Write::Compact)?;
        self.0.check_disk(|_| true)?;
        let rev = compact_at_low_priority(self.0.store.clone(), request.get_ref().revision).await?;
        self.0.settled(dl).await?;
        Ok(Response::new(PbCompactionResponse { header: self.0.header(rev) }))
    }
}

/// Runs a compaction on a thread of its own at a background priority (crate::background),
/// off the runtime's workers: the meta record's fsync, freeing a minute's history (300K
/// values at 5K writes/s) and handing the pages back to the OS took ≈100 ms of CPU, and on
/// a worker held it and the tasks queued on it.
async fn compact_at_low_priority(store: Arc<crate::mvcc::Store>, rev: i64) -> Result<i64, Status> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("compaction".into())
        .spawn(move || {
            crate::background::lower_this_thread();
            let _ = tx.send(store.compact(rev));
        })
        .map_err(|e| Status::internal(format!("compaction thread: {e}")))?;
    Ok(rx.await.map_err(|_| Status::internal("compaction thread ended"))??)
}

/// The KV service as served: Txn with its own codec (deep nests, see
/// `txn_codec`), every other method through the generated server.
#[derive(Clone)]
pub struct KvRouter {
    svc: Arc<KvService>,
    generated: PbKvServer<KvService>,
    decode_limit: usize,
}

impl KvRouter {
    pub fn new(ctx: Arc<Ctx>, decode_limit: usize) -> Self {
        let svc = Arc::new(KvService(ctx));
        let generated = PbKvServer::from_arc(svc.clone()).max_decoding_message_size(decode_limit);
        KvRouter { svc, generated, decode_limit }
    }
}

impl<B> Service<http::Request<B>> for KvRouter
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() != "/etcdserverpb.KV/Txn" {
            return self.generated.call(req);
        }
        let svc = self.svc.clone();
        let codec = TxnCodec { grpc_limit: svc.grpc_limit() };
        routes::unary_with_codec(req, codec, self.decode_limit, move |request: tonic::Request<TxnCall>| {
            let svc = svc.clone();
            async move {
                let caller = svc.0.identify(&request);
                let dl = Deadline::of(request.metadata());
                svc.txn_call(request.into_inner(), caller, dl).await.map(tonic::Response::new)
            }
        })
    }
}

impl NamedService for KvRouter {
    const NAME: &'static str = "etcdserverpb.KV";
}

/// Whether a write txn may write to a log: any put or delete, in either
/// branch or a nested txn, on a durable prefix.
pub fn txn_durable(w: &crate::wal::Wal, t: &PbTxnRequest) -> bool {
    t.success.iter().chain(&t.failure).any(|op| match &op.request {
        Some(PbTxnOpRequest::RequestPut(p)) => w.durable_key(&p.key),
        Some(PbTxnOpRequest::RequestDeleteRange(d)) => w.durable_range(&d.key, &d.range_end),
        Some(PbTxnOpRequest::RequestTxn(t)) => txn_durable(w, t),
        _ => false,
    })
}
