//! Serving gRPC methods without a generated server, with tonic's own unary and
//! server-streaming machinery as generated code does. Used where there is no
//! generated server to call (etcd-client keeps the Lock and Election servers'
//! request types and traits private, so those services declare their messages
//! themselves) and where a method needs what the generated server cannot give
//! (KV's Txn: its own codec for deep nests; Health's List: not in tonic-health).
use std::convert::Infallible;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use tonic::codec::Codec;
use tonic::codegen::{http, BoxFuture, Service, StdError};
use tonic::server::{Grpc, NamedService, ServerStreamingService, UnaryService};
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;

use super::Ctx;

pub type HttpResponse = http::Response<tonic::body::Body>;

struct Unary<F>(F);

impl<Req, Resp, F, Fut> UnaryService<Req> for Unary<F>
where
    F: FnMut(Request<Req>) -> Fut,
    Fut: Future<Output = Result<Response<Resp>, Status>> + Send + 'static,
{
    type Response = Resp;
    type Future = BoxFuture<Response<Resp>, Status>;

    fn call(&mut self, r: Request<Req>) -> Self::Future {
        Box::pin((self.0)(r))
    }
}

struct ServerStreaming<F>(F);

impl<Req, Resp, S, F, Fut> ServerStreamingService<Req> for ServerStreaming<F>
where
    F: FnMut(Request<Req>) -> Fut,
    Fut: Future<Output = Result<Response<S>, Status>> + Send + 'static,
    S: Stream<Item = Result<Resp, Status>> + Send + 'static,
{
    type Response = Resp;
    type ResponseStream = S;
    type Future = BoxFuture<Response<S>, Status>;

    fn call(&mut self, r: Request<Req>) -> Self::Future {
        Box::pin((self.0)(r))
    }
}

/// Answers a unary call with `f`; `decode_limit` as `crate::server::decode_limit`.
pub fn unary<Req, Resp, B, F, Fut>(req: http::Request<B>, decode_limit: usize, f: F) -> BoxFuture<HttpResponse, Infallible>
where
    Req: prost::Message + Default + Send + 'static,
    Resp: prost::Message + Send + 'static,
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
    F: FnMut(Request<Req>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Response<Resp>, Status>> + Send + 'static,
{
    unary_with_codec(req, ProstCodec::<Resp, Req>::default(), decode_limit, f)
}

/// Answers a unary call with `f`, its messages read and written by `codec`.
pub fn unary_with_codec<C, B, F, Fut>(req: http::Request<B>, codec: C, decode_limit: usize, f: F) -> BoxFuture<HttpResponse, Infallible>
where
    C: Codec + Send + 'static,
    C::Encode: Send + 'static,
    C::Decode: Send + 'static,
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
    F: FnMut(Request<C::Decode>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Response<C::Encode>, Status>> + Send + 'static,
{
    Box::pin(async move {
        let mut grpc = Grpc::new(codec).apply_max_message_size_config(Some(decode_limit), None);
        Ok(grpc.unary(Unary(f), req).await)
    })
}

/// Answers a server-streaming call with `f`.
pub fn server_streaming<Req, Resp, S, B, F, Fut>(req: http::Request<B>, decode_limit: usize, f: F) -> BoxFuture<HttpResponse, Infallible>
where
    Req: prost::Message + Default + Send + 'static,
    Resp: prost::Message + Send + 'static,
    S: Stream<Item = Result<Resp, Status>> + Send + 'static,
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
    F: FnMut(Request<Req>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Response<S>, Status>> + Send + 'static,
{
    Box::pin(async move {
        let mut grpc = Grpc::new(ProstCodec::<Resp, Req>::default()).apply_max_message_size_config(Some(decode_limit), None);
        Ok(grpc.server_streaming(ServerStreaming(f), req).await)
    })
}

/// grpc-go's answer to a method the service does not have.
pub fn unknown_method(service: &'static str, path: &str) -> BoxFuture<HttpResponse, Infallible> {
    let method = path.rsplit('/').next().unwrap_or("").to_string();
    Box::pin(async move { Ok(Status::unimplemented(format!("unknown method {method} for service {service}")).into_http()) })
}

/// A service whose methods `Router` serves: its name and the dispatch of one call by path.
pub trait Methods: Send + Sync + 'static {
    const NAME: &'static str;

    fn call<B>(ctx: Arc<Ctx>, decode_limit: usize, req: http::Request<B>) -> BoxFuture<HttpResponse, Infallible>
    where
        B: tonic::codegen::Body + Send + 'static,
        B::Error: Into<StdError> + Send + 'static;
}

/// Serves the service `M` as a generated server would (always ready, one call per request).
pub struct Router<M> {
    ctx: Arc<Ctx>,
    decode_limit: usize,
    methods: PhantomData<fn() -> M>,
}

impl<M> Router<M> {
    pub fn new(ctx: Arc<Ctx>, decode_limit: usize) -> Self {
        Router { ctx, decode_limit, methods: PhantomData }
    }
}

impl<M> Clone for Router<M> {
    fn clone(&self) -> Self {
        Router { ctx: self.ctx.clone(), decode_limit: self.decode_limit, methods: PhantomData }
    }
}

impl<M: Methods, B> Service<http::Request<B>> for Router<M>
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
        M::call(self.ctx.clone(), self.decode_limit, req)
    }
}

impl<M: Methods> NamedService for Router<M> {
    const NAME: &'static str = M::NAME;
}
