//! Serving a gRPC service whose generated server we do not have: etcd-client
//! generates etcd's Lock and Election servers but keeps their request types
//! and server traits private, so those two services declare their request
//! messages themselves (a few fields each) and route their methods here with
//! tonic's own unary and server-streaming machinery, as generated code does.
use std::convert::Infallible;
use std::future::Future;

use futures::Stream;
use tonic::codegen::{http, BoxFuture, StdError};
use tonic::server::{Grpc, ServerStreamingService, UnaryService};
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;

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
    Box::pin(async move {
        let mut grpc = Grpc::new(ProstCodec::<Resp, Req>::default()).apply_max_message_size_config(Some(decode_limit), None);
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
