//! Lock service (etcd's v3lockpb.Lock): Lock and Unlock, as etcd's v3lock
//! server answers them, with the recipe of `concurrency::lock`.
use std::convert::Infallible;
use std::sync::Arc;

use etcd_client::proto::{PbLockResponse, PbUnlockResponse};
use prost::Message;
use tonic::codegen::{http, BoxFuture, StdError};
use tonic::Status;

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

/// The Lock service's methods; served as `LockRouter`.
pub struct LockMethods;

pub type LockRouter = routes::Router<LockMethods>;

impl routes::Methods for LockMethods {
    const NAME: &'static str = SERVICE;

    fn call<B>(ctx: Arc<Ctx>, limit: usize, req: http::Request<B>) -> BoxFuture<HttpResponse, Infallible>
    where
        B: tonic::codegen::Body + Send + 'static,
        B::Error: Into<StdError> + Send + 'static,
    {
        match req.uri().path() {
            "/v3lockpb.Lock/Lock" => concurrency::unary_as_caller(req, limit, ctx, lock),
            "/v3lockpb.Lock/Unlock" => concurrency::unary_as_caller(req, limit, ctx, unlock),
            p => routes::unknown_method(SERVICE, p),
        }
    }
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
