//! The hot unary RPCs the lean transport answers itself — KV Range, Put,
//! DeleteRange, Txn and Maintenance Status — through the same service code as
//! the tonic routes (`KvService::*_call`, `MaintenanceService::status_answer`),
//! so every check, error and answer is the one a client gets either way.
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use etcd_client::proto::{
    PbDeleteRequest, PbDeleteResponse, PbPutRequest, PbPutResponse, PbRangeRequest, PbResponseHeader, PbStatusResponse,
    PbTxnResponse,
};
use prost::Message;
use tonic::Status;

use crate::auth::Creds;
use crate::mvcc::kvstore_range::RangeRead;
use crate::server::deadline::Deadline;
use crate::server::kv::KvService;
use crate::server::maintenance::MaintenanceService;
use crate::server::{bulk, metrics, Ctx};

use crate::server::range_wire;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Range,
    Put,
    DeleteRange,
    Txn,
    Status,
    /// Server-streaming: answered by a stream of framed messages (`range_stream`), not a `Reply`.
    RangeStream,
}

impl Method {
    pub fn from_path(path: &[u8]) -> Option<Method> {
        Some(match path {
            b"/etcdserverpb.KV/Range" => Method::Range,
            b"/etcdserverpb.KV/Put" => Method::Put,
            b"/etcdserverpb.KV/DeleteRange" => Method::DeleteRange,
            b"/etcdserverpb.KV/Txn" => Method::Txn,
            b"/etcdserverpb.Maintenance/Status" => Method::Status,
            b"/etcdserverpb.KV/RangeStream" => Method::RangeStream,
            _ => return None,
        })
    }

    /// Put, DeleteRange and Txn: what a replicated member that does not lead
    /// sends to the leader (forward.rs).
    pub fn needs_leader(self) -> bool {
        matches!(self, Method::Put | Method::DeleteRange | Method::Txn)
    }

    pub fn path(self) -> &'static str {
        match self {
            Method::Range => "/etcdserverpb.KV/Range",
            Method::Put => "/etcdserverpb.KV/Put",
            Method::DeleteRange => "/etcdserverpb.KV/DeleteRange",
            Method::Txn => "/etcdserverpb.KV/Txn",
            Method::Status => "/etcdserverpb.Maintenance/Status",
            Method::RangeStream => "/etcdserverpb.KV/RangeStream",
        }
    }
}

/// What a call takes from its header block besides the path.
#[derive(Default)]
pub struct Meta {
    pub token: Option<String>,
    pub authorization: Option<String>,
    pub timeout: Option<Duration>,
    /// The connection's verified client certificate's common name (TLS).
    pub client_cn: Option<std::sync::Arc<str>>,
}

impl Meta {
    /// etcd's reading of the credentials (`Ctx::creds`): `token`, else
    /// `authorization` with "Bearer " trimmed, and the connection's certificate's
    /// common name (a listener asks for certificates only under --client-cert-auth).
    fn creds(&self) -> Creds {
        let token = self.token.as_deref().or(self.authorization.as_deref()).map(|t| t.strip_prefix("Bearer ").unwrap_or(t).to_string());
        Creds { token, cn: self.client_cn.as_deref().map(str::to_string) }
    }
}

/// An answer, encoded into the connection's buffer by `encode`.
pub enum Reply {
    Range(RangeRead, PbResponseHeader),
    /// A large answer encoded off the request path (bulk threads), with its gRPC
    /// message prefix (compressed flag, length) already in front.
    Framed(Bytes),
    Put(PbPutResponse),
    Delete(PbDeleteResponse),
    Txn(PbTxnResponse),
    Status(PbStatusResponse),
}

impl Reply {
    pub fn encoded_len(&self) -> usize {
        match self {
            Reply::Range(r, h) => range_wire::encoded_len(r, Some(h)),
            Reply::Framed(b) => b.len() - 5,
            Reply::Put(m) => m.encoded_len(),
            Reply::Delete(m) => m.encoded_len(),
            Reply::Txn(m) => m.encoded_len(),
            Reply::Status(m) => m.encoded_len(),
        }
    }

    /// Appends the message (exactly `encoded_len` bytes).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Reply::Range(r, h) => range_wire::encode(r, Some(h), out),
            Reply::Framed(b) => out.extend_from_slice(&b[5..]),
            Reply::Put(m) => m.encode_raw(out),
            Reply::Delete(m) => m.encode_raw(out),
            Reply::Txn(m) => m.encode_raw(out),
            Reply::Status(m) => m.encode_raw(out),
        }
    }
}

pub type CallFuture = Pin<Box<dyn Future<Output = Result<Reply, Status>> + Send>>;

/// The services the calls run on.
#[derive(Clone)]
pub struct Services {
    pub ctx: Arc<Ctx>,
    kv: Arc<KvService>,
    maintenance: Arc<MaintenanceService>,
}

impl Services {
    pub fn new(ctx: Arc<Ctx>) -> Self {
        Services { kv: Arc::new(KvService(ctx.clone())), maintenance: Arc::new(MaintenanceService(ctx.clone())), ctx }
    }
}

/// grpc-go's answer to a request message it cannot decode.
fn undecodable(e: prost::DecodeError) -> Status {
    Status::internal(format!("grpc: error unmarshalling request: {e}"))
}

/// A RangeStream's messages, framed, after the same checks as the tonic route's
/// (`KvService::range_stream_checks`); an error is answered in the headers alone.
pub fn range_stream(s: &Services, msg: Bytes, meta: Meta) -> Result<crate::server::range_stream::FramedStream, Status> {
    let _timed = s.ctx.metrics.request(metrics::RANGE);
    let req = PbRangeRequest::decode(msg).map_err(undecodable)?;
    let caller = s.ctx.identify_with(|| meta.creds());
    let auth = s.kv.range_stream_checks(&req, caller)?;
    crate::server::range_stream::start_framed(s.ctx.clone(), req, auth)
}

/// A call, and whether it belongs on a task of its own: a Range over an interval
/// reads many keys under its shards' locks, which the connection's other calls
/// should not wait behind.
pub fn call(s: &Services, method: Method, msg: Bytes, meta: Meta) -> (CallFuture, bool) {
    // A replicated member that does not lead sends its writes to the leader (forward.rs).
    if method.needs_leader() && s.ctx.forwards_writes() {
        return (Box::pin(super::forward::call(s.clone(), method, msg, meta)), false);
    }
    call_local(s, method, msg, meta)
}

/// `call`, run on this member.
pub fn call_local(s: &Services, method: Method, msg: Bytes, meta: Meta) -> (CallFuture, bool) {
    let (ctx, kv) = (s.ctx.clone(), s.kv.clone());
    match method {
        Method::Range => {
            let req = match PbRangeRequest::decode(msg) {
                Ok(r) => r,
                Err(e) => return (Box::pin(std::future::ready(Err(undecodable(e)))), false),
            };
            let spawn = !req.range_end.is_empty();
            let fut = async move {
                let _timed = ctx.metrics.request(metrics::RANGE);
                ctx.linearizable(req.serializable).await?;
                let caller = ctx.identify_with(|| meta.creds());
                let read = kv.range_call(&req, caller)?;
                let header = ctx.header(read.rev).unwrap_or_default();
                if !bulk::is_bulk(&read) {
                    return Ok(Reply::Range(read, header));
                }
                let framed = bulk::run(move || {
                    let len = range_wire::encoded_len(&read, Some(&header));
                    let mut out = Vec::with_capacity(5 + len);
                    out.push(0);
                    out.extend_from_slice(&(len as u32).to_be_bytes());
                    range_wire::encode(&read, Some(&header), &mut out);
                    Bytes::from(out)
                })
                .await
                .ok_or_else(|| Status::internal("bulk read failed"))?;
                Ok(Reply::Framed(framed))
            };
            (Box::pin(fut), spawn)
        }
        Method::Put => {
            let fut = async move {
                let req = PbPutRequest::decode(msg).map_err(undecodable)?;
                let dl = Deadline::after(meta.timeout);
                let caller = ctx.identify_with(|| meta.creds());
                kv.put_call(req, caller, dl).await.map(Reply::Put)
            };
            (Box::pin(fut), false)
        }
        Method::DeleteRange => {
            let fut = async move {
                let req = PbDeleteRequest::decode(msg).map_err(undecodable)?;
                let dl = Deadline::after(meta.timeout);
                let caller = ctx.identify_with(|| meta.creds());
                kv.delete_call(req, caller, dl).await.map(Reply::Delete)
            };
            (Box::pin(fut), false)
        }
        Method::Txn => {
            let fut = async move {
                // The Txn decoder's own order (txn_codec): the gRPC limit before decoding.
                let limit = kv.grpc_limit();
                if msg.len() > limit {
                    return Err(crate::server::grpc_too_large(msg.len(), limit));
                }
                let call = crate::server::txn_codec::decode_txn(&msg)
                    .map_err(|e| Status::internal(format!("failed to decode TxnRequest: {}", e.0)))?;
                drop(msg);
                let dl = Deadline::after(meta.timeout);
                let caller = ctx.identify_with(|| meta.creds());
                kv.txn_call(call, caller, dl).await.map(Reply::Txn)
            };
            (Box::pin(fut), false)
        }
        Method::RangeStream => (Box::pin(std::future::ready(Err(Status::internal("RangeStream is a stream")))), false),
        Method::Status => {
            let m = s.maintenance.clone();
            let fut = async move {
                // The request has no fields; etcd decodes it all the same.
                etcd_client::proto::PbStatusRequest::decode(msg).map_err(undecodable)?;
                m.require_user_as(ctx.identify_with(|| meta.creds()))?;
                Ok(Reply::Status(m.status_answer()))
            };
            (Box::pin(fut), false)
        }
    }
}
