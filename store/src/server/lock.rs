//! Lock service (etcd's v3lockpb.Lock): Lock and Unlock, as etcd's v3lock
//! server answers them, with the recipe of `concurrency::lock`.
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use etcd_client::proto::{PbLockResponse, PbUnlockResponse};
use prost::Message;
use tonic::codegen::{http, BoxFuture, Service, StdError};
use tonic::server::NamedService;
use tonic::{Request, Response, Status};

use super::concurrency::{self, check_request_size};
use super::routes::{self, HttpResponse};
use super::Ctx;

/// v3lockpb.LockRequest.
#[derive(Clone, PartialEq, Message)]
pub struct LockRequest {
    /// The lock's name; its keys are `<name>/<lease in hex>`.
    #[prost(bytes = "vec", tag = "1")]
    pub name: Vec<u8>,
    /// The lease the lock's key is attached to; 0 grants a new one.
    #[prost(int64, tag = "2")]
    pub lease: i64,
}

/// v3lockpb.UnlockRequest.
#[derive(Clone, PartialEq, Message)]
pub struct UnlockRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
}

pub const SERVICE: &str = "v3lockpb.Lock";

pub async fn lock(ctx: Arc<Ctx>, r: LockRequest) -> Result<PbLockResponse, Status> {
    check_request_size(&ctx, r.encoded_len())?;
    let (header, key) = concurrency::lock(&ctx, &r.name, r.lease).await?;
    Ok(PbLockResponse { header, key })
}

/// Unlock deletes the key, whatever it is (etcd's server does no more).
pub async fn unlock(ctx: Arc<Ctx>, r: UnlockRequest) -> Result<PbUnlockResponse, Status> {
    check_request_size(&ctx, r.encoded_len())?;
    let resp = concurrency::delete(&ctx, &r.key).await?;
    Ok(PbUnlockResponse { header: resp.header })
}

#[derive(Clone)]
pub struct LockRouter {
    ctx: Arc<Ctx>,
    decode_limit: usize,
}

impl LockRouter {
    pub fn new(ctx: Arc<Ctx>, decode_limit: usize) -> Self {
        LockRouter { ctx, decode_limit }
    }
}

impl<B> Service<http::Request<B>> for LockRouter
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = HttpResponse;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let ctx = self.ctx.clone();
        match req.uri().path() {
            "/v3lockpb.Lock/Lock" => routes::unary(req, self.decode_limit, move |r: Request<LockRequest>| {
                let ctx = ctx.clone();
                async move { concurrency::as_caller(&ctx.clone(), &r, lock(ctx, r.get_ref().clone())).await.map(Response::new) }
            }),
            "/v3lockpb.Lock/Unlock" => routes::unary(req, self.decode_limit, move |r: Request<UnlockRequest>| {
                let ctx = ctx.clone();
                async move { concurrency::as_caller(&ctx.clone(), &r, unlock(ctx, r.get_ref().clone())).await.map(Response::new) }
            }),
            p => routes::unknown_method(SERVICE, p),
        }
    }
}

impl NamedService for LockRouter {
    const NAME: &'static str = SERVICE;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The field numbers of etcd's v3lock.proto.
    #[test]
    fn requests_have_etcds_wire_format() {
        assert_eq!(LockRequest { name: b"n".to_vec(), lease: 5 }.encode_to_vec(), [0x0a, 1, b'n', 0x10, 5]);
        assert_eq!(UnlockRequest { key: b"k".to_vec() }.encode_to_vec(), [0x0a, 1, b'k']);
    }
}
