//! etcd's per-RPC gRPC server metrics: `grpc_server_started_total` and
//! `grpc_server_handled_total`, labelled by grpc_type, grpc_service,
//! grpc_method (and grpc_code), as etcd exports them through
//! go-grpc-prometheus. Dashboards and alerts written for etcd (request rate by
//! method, error ratio by code) query these names, and client libraries' test
//! suites count calls with them.
//!
//! A tower layer around the whole gRPC server: one map lookup and one atomic
//! add when a call starts; the code is read from the response's trailers (or
//! its headers, for an error answered without a body) and counted once. Every
//! method etcd serves is listed up front, so the series exist at 0 as etcd's
//! do (go-grpc-prometheus pre-registers each method and code).
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::Frame;
use tonic::codegen::http;

/// The methods served, as (service, method, grpc_type).
const RPCS: &[(&str, &str, &str)] = &[
    ("etcdserverpb.KV", "Range", "unary"),
    ("etcdserverpb.KV", "Put", "unary"),
    ("etcdserverpb.KV", "DeleteRange", "unary"),
    ("etcdserverpb.KV", "Txn", "unary"),
    ("etcdserverpb.KV", "Compact", "unary"),
    ("etcdserverpb.KV", "RangeStream", "server_stream"),
    ("etcdserverpb.Watch", "Watch", "bidi_stream"),
    ("etcdserverpb.Lease", "LeaseGrant", "unary"),
    ("etcdserverpb.Lease", "LeaseRevoke", "unary"),
    ("etcdserverpb.Lease", "LeaseKeepAlive", "bidi_stream"),
    ("etcdserverpb.Lease", "LeaseTimeToLive", "unary"),
    ("etcdserverpb.Lease", "LeaseLeases", "unary"),
    ("etcdserverpb.Cluster", "MemberAdd", "unary"),
    ("etcdserverpb.Cluster", "MemberRemove", "unary"),
    ("etcdserverpb.Cluster", "MemberUpdate", "unary"),
    ("etcdserverpb.Cluster", "MemberList", "unary"),
    ("etcdserverpb.Cluster", "MemberPromote", "unary"),
    ("etcdserverpb.Maintenance", "Alarm", "unary"),
    ("etcdserverpb.Maintenance", "Status", "unary"),
    ("etcdserverpb.Maintenance", "Defragment", "unary"),
    ("etcdserverpb.Maintenance", "Hash", "unary"),
    ("etcdserverpb.Maintenance", "HashKV", "unary"),
    ("etcdserverpb.Maintenance", "Snapshot", "server_stream"),
    ("etcdserverpb.Maintenance", "MoveLeader", "unary"),
    ("etcdserverpb.Maintenance", "Downgrade", "unary"),
    ("etcdserverpb.Auth", "AuthEnable", "unary"),
    ("etcdserverpb.Auth", "AuthDisable", "unary"),
    ("etcdserverpb.Auth", "AuthStatus", "unary"),
    ("etcdserverpb.Auth", "Authenticate", "unary"),
    ("etcdserverpb.Auth", "UserAdd", "unary"),
    ("etcdserverpb.Auth", "UserGet", "unary"),
    ("etcdserverpb.Auth", "UserList", "unary"),
    ("etcdserverpb.Auth", "UserDelete", "unary"),
    ("etcdserverpb.Auth", "UserChangePassword", "unary"),
    ("etcdserverpb.Auth", "UserGrantRole", "unary"),
    ("etcdserverpb.Auth", "UserRevokeRole", "unary"),
    ("etcdserverpb.Auth", "RoleAdd", "unary"),
    ("etcdserverpb.Auth", "RoleGet", "unary"),
    ("etcdserverpb.Auth", "RoleList", "unary"),
    ("etcdserverpb.Auth", "RoleDelete", "unary"),
    ("etcdserverpb.Auth", "RoleGrantPermission", "unary"),
    ("etcdserverpb.Auth", "RoleRevokePermission", "unary"),
    ("v3lockpb.Lock", "Lock", "unary"),
    ("v3lockpb.Lock", "Unlock", "unary"),
    ("v3electionpb.Election", "Campaign", "unary"),
    ("v3electionpb.Election", "Proclaim", "unary"),
    ("v3electionpb.Election", "Leader", "unary"),
    ("v3electionpb.Election", "Observe", "server_stream"),
    ("v3electionpb.Election", "Resign", "unary"),
    ("grpc.health.v1.Health", "Check", "unary"),
    ("grpc.health.v1.Health", "Watch", "server_stream"),
];

/// gRPC status code names by number, as the grpc_code label spells them.
const CODES: [&str; 17] = [
    "OK",
    "Canceled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
];
pub const CANCELED: usize = 1;
const UNKNOWN: usize = 2;

/// The counters, one set per entry of RPCS.
pub struct GrpcMetrics {
    by_path: HashMap<String, usize>,
    started: Vec<AtomicU64>,
    handled: Vec<[AtomicU64; CODES.len()]>,
}

impl GrpcMetrics {
    /// The process's one set (the metrics endpoints render it).
    pub fn global() -> &'static GrpcMetrics {
        static M: OnceLock<GrpcMetrics> = OnceLock::new();
        M.get_or_init(|| GrpcMetrics {
            by_path: RPCS.iter().enumerate().map(|(i, (s, m, _))| (format!("/{s}/{m}"), i)).collect(),
            started: RPCS.iter().map(|_| AtomicU64::new(0)).collect(),
            handled: RPCS.iter().map(|_| Default::default()).collect(),
        })
    }

    /// The index of a method's counters by its path (`/service/Method`).
    pub fn rpc(&self, path: &str) -> Option<usize> {
        self.by_path.get(path).copied()
    }

    /// A call of method `rpc` started.
    pub fn start(&self, rpc: usize) {
        self.started[rpc].fetch_add(1, Ordering::Relaxed);
    }

    /// A call of method `rpc` ended with gRPC code `code`.
    pub fn handled(&self, rpc: usize, code: usize) {
        self.handled[rpc][code.min(CODES.len() - 1)].fetch_add(1, Ordering::Relaxed);
    }

    /// Appends both counters in Prometheus text form.
    pub fn render(&self, o: &mut String) {
        use std::fmt::Write;
        o.push_str("# HELP grpc_server_started_total Total number of RPCs started on the server.\n# TYPE grpc_server_started_total counter\n");
        for (i, (svc, method, kind)) in RPCS.iter().enumerate() {
            let n = self.started[i].load(Ordering::Relaxed);
            let _ = writeln!(o, "grpc_server_started_total{{grpc_method=\"{method}\",grpc_service=\"{svc}\",grpc_type=\"{kind}\"}} {n}");
        }
        o.push_str("# HELP grpc_server_handled_total Total number of RPCs completed on the server, regardless of success or failure.\n# TYPE grpc_server_handled_total counter\n");
        for (i, (svc, method, kind)) in RPCS.iter().enumerate() {
            for (c, name) in CODES.iter().enumerate() {
                let n = self.handled[i][c].load(Ordering::Relaxed);
                let _ = writeln!(o, "grpc_server_handled_total{{grpc_code=\"{name}\",grpc_method=\"{method}\",grpc_service=\"{svc}\",grpc_type=\"{kind}\"}} {n}");
            }
        }
    }
}

/// The grpc-status of a header map, if it carries one.
fn status_code(h: &http::HeaderMap) -> Option<usize> {
    let v = h.get("grpc-status")?;
    Some(v.to_str().ok().and_then(|s| s.parse::<usize>().ok()).unwrap_or(UNKNOWN))
}

/// The layer: `Server::builder().layer(CountRpcs)`.
#[derive(Clone, Copy, Default)]
pub struct CountRpcs;

impl<S> tower_layer::Layer<S> for CountRpcs {
    type Service = Counted<S>;
    fn layer(&self, inner: S) -> Counted<S> {
        Counted { inner }
    }
}

#[derive(Clone)]
pub struct Counted<S> {
    inner: S,
}

impl<S, B, RB> tower_service::Service<http::Request<B>> for Counted<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<RB>>,
{
    type Response = http::Response<CountedBody<RB>>;
    type Error = S::Error;
    type Future = CountedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let m = GrpcMetrics::global();
        let rpc = m.by_path.get(req.uri().path()).copied();
        if let Some(i) = rpc {
            m.started[i].fetch_add(1, Ordering::Relaxed);
        }
        CountedFuture { inner: self.inner.call(req), rpc }
    }
}

pin_project_lite::pin_project! {
    pub struct CountedFuture<F> {
        #[pin]
        inner: F,
        rpc: Option<usize>,
    }
}

impl<F, RB, E> Future for CountedFuture<F>
where
    F: Future<Output = Result<http::Response<RB>, E>>,
{
    type Output = Result<http::Response<CountedBody<RB>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let res = match this.inner.poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(r) => r,
        };
        let rpc = *this.rpc;
        Poll::Ready(res.map(|resp| {
            // An error answered in the headers alone (trailers-only) is complete here.
            let pending = match (rpc, status_code(resp.headers())) {
                (Some(i), Some(code)) => {
                    GrpcMetrics::global().handled(i, code);
                    None
                }
                (rpc, _) => rpc,
            };
            resp.map(|inner| CountedBody { inner, pending })
        }))
    }
}

pin_project_lite::pin_project! {
    /// A response body that counts its call's code when the trailers pass, or
    /// as Canceled when it is dropped before them (the client went away).
    pub struct CountedBody<B> {
        #[pin]
        inner: B,
        pending: Option<usize>,
    }

    impl<B> PinnedDrop for CountedBody<B> {
        fn drop(this: Pin<&mut Self>) {
            if let Some(i) = this.project().pending.take() {
                GrpcMetrics::global().handled(i, CANCELED);
            }
        }
    }
}

impl<B> CountedBody<B> {
    /// A body that counts nothing (an answer given outside the counted service).
    pub fn uncounted(inner: B) -> Self {
        CountedBody { inner, pending: None }
    }
}

impl<B> http_body::Body for CountedBody<B>
where
    B: http_body::Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        if let Poll::Ready(Some(Ok(f))) = &polled {
            if let Some(code) = f.trailers_ref().and_then(status_code) {
                if let Some(i) = this.pending.take() {
                    GrpcMetrics::global().handled(i, code);
                }
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_and_code_is_rendered_at_zero() {
        let mut o = String::new();
        GrpcMetrics::global().render(&mut o);
        assert!(o.contains("grpc_server_started_total{grpc_method=\"Range\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} "), "{o}");
        assert!(o.contains("grpc_server_handled_total{grpc_code=\"Unauthenticated\",grpc_method=\"Watch\",grpc_service=\"etcdserverpb.Watch\",grpc_type=\"bidi_stream\"} "));
        assert_eq!(o.lines().filter(|l| l.starts_with("grpc_server_handled_total{")).count(), RPCS.len() * CODES.len());
    }

    #[test]
    fn codes_come_from_grpc_status() {
        let mut h = http::HeaderMap::new();
        assert_eq!(status_code(&h), None);
        h.insert("grpc-status", http::HeaderValue::from_static("8"));
        assert_eq!(CODES[status_code(&h).unwrap()], "ResourceExhausted");
        h.insert("grpc-status", http::HeaderValue::from_static("x"));
        assert_eq!(status_code(&h), Some(UNKNOWN));
    }
}
