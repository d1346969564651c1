//! Election service (etcd's v3electionpb.Election): Campaign, Proclaim,
//! Leader, Observe (server stream) and Resign, as etcd's v3election server
//! answers them, with the recipes of `concurrency`.
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;

use etcd_client::proto::{
    PbCampaignResponse, PbKeyValue, PbLeaderKey, PbLeaderResponse, PbProclaimResponse, PbResignResponse, PbResponseHeader,
};
use futures::Stream;
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::{http, BoxFuture, StdError};
use tonic::{Request, Response, Status};

use super::concurrency::{self as cc, check_request_size, Follow};
use super::routes::{self, HttpResponse};
use super::Ctx;
use crate::mvcc::kvstore::to_kv;
use crate::mvcc::shard::prefix_end;

/// v3electionpb.CampaignRequest.
#[derive(Clone, PartialEq, Message)]
pub struct CampaignRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub name: Vec<u8>,
    /// 0 grants a new lease.
    #[prost(int64, tag = "2")]
    pub lease: i64,
    #[prost(bytes = "vec", tag = "3")]
    pub value: Vec<u8>,
}

/// v3electionpb.LeaderRequest (Leader and Observe).
#[derive(Clone, PartialEq, Message)]
pub struct LeaderRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub name: Vec<u8>,
}

/// v3electionpb.ResignRequest.
#[derive(Clone, PartialEq, Message)]
pub struct ResignRequest {
    #[prost(message, optional, tag = "1")]
    pub leader: Option<PbLeaderKey>,
}

/// v3electionpb.ProclaimRequest.
#[derive(Clone, PartialEq, Message)]
pub struct ProclaimRequest {
    #[prost(message, optional, tag = "1")]
    pub leader: Option<PbLeaderKey>,
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

pub const SERVICE: &str = "v3electionpb.Election";

pub async fn campaign(ctx: Arc<Ctx>, r: CampaignRequest) -> Result<PbCampaignResponse, Status> {
    check_request_size(&ctx, r.encoded_len())?;
    cc::campaign(&ctx, &r.name, r.lease, &r.value).await
}

/// Proclaim on a resumed leadership: the leader key's put, guarded by its
/// create revision, with the request's lease (0: a new one, as etcd's session).
pub async fn proclaim(ctx: Arc<Ctx>, r: ProclaimRequest) -> Result<PbProclaimResponse, Status> {
    check_request_size(&ctx, r.encoded_len())?;
    let l = r.leader.ok_or_else(|| cc::recipe_err(cc::ERR_MISSING_LEADER_KEY))?;
    let lease = cc::session(&ctx, l.lease).await?;
    let header = cc::proclaim(&ctx, &l.key, l.rev, lease, &r.value).await?;
    Ok(PbProclaimResponse { header })
}

pub async fn resign(ctx: Arc<Ctx>, r: ResignRequest) -> Result<PbResignResponse, Status> {
    check_request_size(&ctx, r.encoded_len())?;
    let l = r.leader.ok_or_else(|| cc::recipe_err(cc::ERR_MISSING_LEADER_KEY))?;
    cc::session(&ctx, l.lease).await?;
    let header = cc::resign(&ctx, &l.key, l.rev).await?;
    Ok(PbResignResponse { header })
}

pub async fn leader(ctx: Arc<Ctx>, r: LeaderRequest) -> Result<PbLeaderResponse, Status> {
    check_request_size(&ctx, r.encoded_len())?;
    cc::leader(&ctx, &r.name)
}

pub type ObserveStream = Pin<Box<dyn Stream<Item = Result<PbLeaderResponse, Status>> + Send>>;

/// Leader proclamations as they happen; the stream ends (OK) when the
/// history it follows is compacted, as etcd's ends when its watch is cancelled.
pub async fn observe(ctx: Arc<Ctx>, r: LeaderRequest) -> Result<ObserveStream, Status> {
    check_request_size(&ctx, r.encoded_len())?;
    let (tx, rx) = mpsc::channel(16);
    let caller = cc::caller();
    tokio::spawn(cc::scoped(caller, async move {
        let closed = tx.clone();
        tokio::select! {
            _ = observe_loop(ctx, cc::prefix(&r.name), tx) => {}
            _ = closed.closed() => {}
        }
    }));
    Ok(Box::pin(ReceiverStream::new(rx)))
}

type Tx = mpsc::Sender<Result<PbLeaderResponse, Status>>;

/// Election.observe: the current leader (or, without one, the first key put
/// under the prefix), then every put to that key until it is deleted; then
/// again with the next leader.
async fn observe_loop(ctx: Arc<Ctx>, pfx: Vec<u8>, tx: Tx) {
    let send = |header: Option<PbResponseHeader>, kv: PbKeyValue| {
        let tx = tx.clone();
        async move { tx.send(Ok(PbLeaderResponse { header, kv: Some(kv) })).await.is_ok() }
    };
    loop {
        let Ok(resp) = cc::range(&ctx, &cc::get_first_created(&pfx)) else { return };
        let (header, kv) = match resp.kvs.into_iter().next() {
            Some(kv) => (resp.header, kv),
            None => {
                // Wait for the first put on the prefix (deletes do not count).
                let from = cc::header_rev(&resp.header);
                let Ok(mut w) = Follow::new(ctx.clone(), pfx.clone(), prefix_end(&pfx), from) else { return };
                loop {
                    let Ok((_, events)) = w.next().await else { return };
                    if let Some(e) = events.iter().find(|e| !e.is_delete()) {
                        // etcd reports the put's revision, not the watch response's.
                        let kv = to_kv(&e.key, &e.kv, false);
                        break (ctx.header(kv.mod_revision), kv);
                    }
                }
            }
        };
        let from = cc::header_rev(&header) + 1;
        let key = kv.key.clone();
        if !send(header, kv).await {
            return;
        }
        let Ok(mut w) = Follow::new(ctx.clone(), key, Vec::new(), from) else { return };
        'leader: loop {
            let Ok((rev, events)) = w.next().await else { return };
            for e in events {
                if e.is_delete() {
                    break 'leader;
                }
                if !send(ctx.header(rev), to_kv(&e.key, &e.kv, false)).await {
                    return;
                }
            }
        }
    }
}

/// The Election service's methods; served as `ElectionRouter`.
pub struct ElectionMethods;

pub type ElectionRouter = routes::Router<ElectionMethods>;

impl routes::Methods for ElectionMethods {
    const NAME: &'static str = SERVICE;

    fn call<B>(ctx: Arc<Ctx>, limit: usize, req: http::Request<B>) -> BoxFuture<HttpResponse, Infallible>
    where
        B: tonic::codegen::Body + Send + 'static,
        B::Error: Into<StdError> + Send + 'static,
    {
        match req.uri().path() {
            "/v3electionpb.Election/Campaign" => cc::unary_as_caller(req, limit, ctx, campaign),
            "/v3electionpb.Election/Proclaim" => cc::unary_as_caller(req, limit, ctx, proclaim),
            "/v3electionpb.Election/Leader" => cc::unary_as_caller(req, limit, ctx, leader),
            "/v3electionpb.Election/Resign" => cc::unary_as_caller(req, limit, ctx, resign),
            "/v3electionpb.Election/Observe" => routes::server_streaming(req, limit, move |r: Request<LeaderRequest>| {
                let ctx = ctx.clone();
                async move { cc::as_caller(&ctx.clone(), &r, observe(ctx, r.get_ref().clone())).await.map(Response::new) }
            }),
            p => routes::unknown_method(SERVICE, p),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The field numbers of etcd's v3election.proto.
    #[test]
    fn requests_have_etcds_wire_format() {
        let c = CampaignRequest { name: b"n".to_vec(), lease: 5, value: b"v".to_vec() };
        assert_eq!(c.encode_to_vec(), [0x0a, 1, b'n', 0x10, 5, 0x1a, 1, b'v']);
        let l = PbLeaderKey { name: b"n".to_vec(), key: b"k".to_vec(), rev: 7, lease: 9 };
        let p = ProclaimRequest { leader: Some(l.clone()), value: b"v".to_vec() };
        assert_eq!(p.encode_to_vec(), [0x0a, 10, 0x0a, 1, b'n', 0x12, 1, b'k', 0x18, 7, 0x20, 9, 0x12, 1, b'v']);
        assert_eq!(ResignRequest { leader: Some(l) }.encode_to_vec()[..2], [0x0a, 10]);
        assert_eq!(LeaderRequest { name: b"n".to_vec() }.encode_to_vec(), [0x0a, 1, b'n']);
    }
}
