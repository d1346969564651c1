//! grpc.health.v1.Health as etcd serves it: grpc-go's health server with one
//! entry, "" (the whole server), SERVING from the moment clients are served.
//! tonic-health supplies the protocol; the answers are grpc-go's (its own
//! server words them differently and has no List).
use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use tonic::codegen::{http, BoxFuture, Service, StdError};
use tonic::server::NamedService;
use tonic::{Request, Response, Status};
use super::routes;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

/// The only service name with a status, as in etcd: "" (all services).
const ALL_SERVICES: &str = "";

fn status_of(service: &str) -> Option<ServingStatus> {
    (service == ALL_SERVICES).then_some(ServingStatus::Serving)
}

#[derive(Clone, Copy, Debug, Default)]
pub struct HealthService;

#[tonic::async_trait]
impl Health for HealthService {
    async fn check(
        &self,
        r: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        match status_of(&r.get_ref().service) {
            Some(s) => Ok(Response::new(HealthCheckResponse { status: s as i32 })),
            None => Err(Status::not_found("unknown service")),
        }
    }

    type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

    /// The current status (SERVICE_UNKNOWN for a name without one), then the
    /// stream stays open for changes, which never come.
    async fn watch(
        &self,
        r: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let s = status_of(&r.get_ref().service).unwrap_or(ServingStatus::ServiceUnknown);
        let first =
            futures::stream::once(async move { Ok(HealthCheckResponse { status: s as i32 }) });
        Ok(Response::new(Box::pin(futures::StreamExt::chain(
            first,
            futures::stream::pending(),
        ))))
    }
}

/// grpc-go's List (newer than tonic-health's copy of the protocol).
#[derive(Clone, PartialEq, prost::Message)]
pub struct HealthListRequest {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct HealthListResponse {
    #[prost(map = "string, message", tag = "1")]
    pub statuses: HashMap<String, HealthCheckResponse>,
}

pub fn list() -> HealthListResponse {
    let statuses = [(
        ALL_SERVICES.to_string(),
        HealthCheckResponse {
            status: ServingStatus::Serving as i32,
        },
    )]
    .into();
    HealthListResponse { statuses }
}

/// The served Health service: List here, Check and Watch through tonic-health.
#[derive(Clone)]
pub struct HealthRouter {
    generated: HealthServer<HealthService>,
}

impl Default for HealthRouter {
    fn default() -> Self {
        HealthRouter {
            generated: HealthServer::new(HealthService),
        }
    }
}

impl<B> Service<http::Request<B>> for HealthRouter
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
        if req.uri().path() != "/grpc.health.v1.Health/List" {
            return self.generated.call(req);
        }
        // tonic's default decode limit, as the generated Check and Watch have.
        routes::unary(req, 4 << 20, |_r: Request<HealthListRequest>| async { Ok(Response::new(list())) })
    }
}

impl NamedService for HealthRouter {
    const NAME: &'static str = "grpc.health.v1.Health";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_as_grpc_gos_health_server() {
        let h = HealthService;
        let ok = h
            .check(Request::new(HealthCheckRequest {
                service: String::new(),
            }))
            .await
            .unwrap();
        assert_eq!(ok.get_ref().status, ServingStatus::Serving as i32);
        let e = h
            .check(Request::new(HealthCheckRequest {
                service: "etcdserverpb.KV".into(),
            }))
            .await
            .unwrap_err();
        assert_eq!(
            (e.code(), e.message()),
            (tonic::Code::NotFound, "unknown service")
        );
        let mut w = h
            .watch(Request::new(HealthCheckRequest {
                service: "x".into(),
            }))
            .await
            .unwrap()
            .into_inner();
        let first = futures::StreamExt::next(&mut w).await.unwrap().unwrap();
        assert_eq!(first.status, ServingStatus::ServiceUnknown as i32);
        assert_eq!(
            list().statuses.get("").map(|r| r.status),
            Some(ServingStatus::Serving as i32)
        );
    }
}
