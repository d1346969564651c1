//! Every stream the lean transport does not answer itself — Watch, LeaseKeepAlive,
//! Lock, Election, Auth, the rest of Maintenance and Lease, the JSON gateway and
//! the HTTP endpoints over HTTP/2 — is handed, as an `http::Request`, to the same
//! tonic routes (with the per-RPC counters) that serve HTTP/1 and TLS connections.
//! Its request body is fed from the connection's DATA frames and given back as
//! flow-control window only once the service has read it; its response (head,
//! data, trailers) is pumped back into the connection by a `Pump`, polled only
//! when woken.
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::task::AtomicWaker;
use http_body::{Body, Frame};
use tokio::sync::mpsc;
use tonic::codegen::http;
use tower_service::Service;

use crate::server::grpc_metrics::{CountRpcs, Counted, CountedBody};

use super::hpack::Fields;

/// The tonic routes with the per-RPC counters, as tonic's server serves them.
pub type Routes = Counted<tonic::service::Routes>;
type ResponseBody = CountedBody<tonic::body::Body>;
type ResponseFuture = Pin<Box<dyn Future<Output = Result<http::Response<ResponseBody>, Infallible>> + Send>>;

pub fn routes(r: tonic::service::Routes) -> Routes {
    tower_layer::Layer::layer(&CountRpcs, r)
}

/// The request body of a bridged stream ended abnormally (the client reset it,
/// or the connection ended).
#[derive(Debug)]
pub struct Reset(pub &'static str);

impl std::fmt::Display for Reset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Reset {}

/// Bytes the services have read from bridged request bodies, per stream, for the
/// connection to give back as WINDOW_UPDATEs; the body wakes the connection.
#[derive(Default)]
pub struct Credit {
    read: Mutex<Vec<(u32, usize)>>,
    pub waker: AtomicWaker,
}

impl Credit {
    fn add(&self, stream: u32, n: usize) {
        if let Ok(mut q) = self.read.lock() {
            q.push((stream, n));
        }
        self.waker.wake();
    }

    pub fn take(&self) -> Vec<(u32, usize)> {
        self.read.lock().map(|mut q| std::mem::take(&mut *q)).unwrap_or_default()
    }
}

pub type BodySender = mpsc::UnboundedSender<Result<Bytes, Reset>>;

/// A bridged request's body: the DATA frames' payloads as they arrive.
pub struct RequestBody {
    rx: mpsc::UnboundedReceiver<Result<Bytes, Reset>>,
    stream: u32,
    credit: Arc<Credit>,
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = Reset;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Reset>>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(Ok(b))) => {
                self.credit.add(self.stream, b.len());
                Poll::Ready(Some(Ok(Frame::data(b))))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for RequestBody {
    /// Bytes its service never read are given back all the same: the connection's
    /// window would otherwise shrink by them for good.
    fn drop(&mut self) {
        self.rx.close();
        while let Ok(r) = self.rx.try_recv() {
            if let Ok(b) = r {
                self.credit.add(self.stream, b.len());
            }
        }
    }
}

/// Headers that belong to a connection, never to a stream (RFC 9113 §8.2.2).
fn connection_specific(name: &[u8]) -> bool {
    matches!(name, b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding" | b"upgrade")
}

/// The request a header block describes, with its body's sender. Err: a malformed
/// request (a stream error, PROTOCOL_ERROR).
pub fn request(
    fields: &Fields,
    stream: u32,
    credit: Arc<Credit>,
    local: Option<SocketAddr>,
    remote: Option<SocketAddr>,
    client_cn: Option<&Arc<str>>,
) -> Result<(http::Request<RequestBody>, BodySender), String> {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut b = http::Request::builder().version(http::Version::HTTP_2);
    let (mut scheme, mut authority, mut path) = (None, None, None);
    for (n, v) in fields.iter() {
        match n {
            b":method" => b = b.method(v),
            b":scheme" => scheme = Some(v),
            b":authority" => authority = Some(v),
            b":path" => path = Some(v),
            _ if n.starts_with(b":") => return Err(format!("unknown pseudo-header {}", String::from_utf8_lossy(n))),
            _ if connection_specific(n) => return Err("connection-specific header".into()),
            _ => b = b.header(n, v),
        }
    }
    let mut uri = http::Uri::builder();
    if let Some(s) = scheme {
        uri = uri.scheme(s);
    }
    if let Some(a) = authority {
        uri = uri.authority(a);
    }
    uri = uri.path_and_query(path.ok_or("no :path")?);
    let uri = uri.build().map_err(|e| e.to_string())?;
    let req = b
        .uri(uri)
        .extension(tonic::transport::server::TcpConnectInfo { local_addr: local, remote_addr: remote })
        .extension(super::tls::ClientCert { common_name: client_cn.cloned() })
        .body(RequestBody { rx, stream, credit })
        .map_err(|e| e.to_string())?;
    Ok((req, tx))
}

/// What a pump has for the connection.
pub enum Event {
    /// The response's head; `end`: it has no body (a gRPC error answered in the headers alone).
    Head { status: u16, headers: http::HeaderMap, end: bool },
    Data(Bytes),
    Trailers(http::HeaderMap),
    /// The body ended without trailers.
    End,
    /// The body failed: the stream is reset.
    Failed,
}

enum State {
    Calling(ResponseFuture),
    Body(Pin<Box<ResponseBody>>),
    /// A stream the transport answers itself (RangeStream): framed messages, then
    /// grpc-status in the trailers; `counted` holds its per-RPC counter until then.
    Framed { s: FramedStream, headed: bool, counted: HandledCount },
    Done,
}

type FramedStream = crate::server::range_stream::FramedStream;

/// A call's handled counter, taken when its status is known, or counted as
/// Canceled when the stream is dropped first (the client went away).
struct HandledCount(Option<usize>);

impl HandledCount {
    fn handled(&mut self, code: usize) {
        if let Some(i) = self.0.take() {
            crate::server::grpc_metrics::GrpcMetrics::global().handled(i, code);
        }
    }
}

impl Drop for HandledCount {
    fn drop(&mut self) {
        self.handled(crate::server::grpc_metrics::CANCELED);
    }
}

/// The trailers (or trailers-only headers) of a gRPC status.
fn status_fields(st: &tonic::Status) -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    h.insert("grpc-status", http::HeaderValue::from(st.code() as i32));
    if !st.message().is_empty() {
        if let Ok(v) = http::HeaderValue::from_bytes(&super::hpack::percent_encode(st.message())) {
            h.insert("grpc-message", v);
        }
    }
    h
}

/// One bridged stream's response, from the call to its last frame.
pub struct Pump {
    pub stream: u32,
    state: State,
}

impl Pump {
    pub fn start(routes: &mut Routes, stream: u32, req: http::Request<RequestBody>) -> Pump {
        let timeout = req.headers().get("grpc-timeout").and_then(|v| v.to_str().ok()).and_then(crate::server::deadline::parse_timeout);
        // tonic's routes (an axum router) are always ready: no poll_ready needed.
        let fut = routes.call(req);
        let fut: ResponseFuture = match timeout {
            None => Box::pin(fut),
            // As tonic's server does (its GrpcTimeout layer): a call not answered by the
            // client's deadline is dropped and answered Cancelled "Timeout expired".
            Some(d) => Box::pin(async move {
                match tokio::time::timeout(d, fut).await {
                    Ok(r) => r,
                    Err(_) => Ok(tonic::Status::cancelled("Timeout expired").into_http().map(CountedBody::uncounted)),
                }
            }),
        };
        Pump { stream, state: State::Calling(fut) }
    }

    /// A pump for a stream the transport answers itself; `rpc`: its counter (started).
    pub fn framed(stream: u32, s: FramedStream, rpc: Option<usize>) -> Pump {
        Pump { stream, state: State::Framed { s, headed: false, counted: HandledCount(rpc) } }
    }

    pub fn done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Event> {
        loop {
            match &mut self.state {
                State::Calling(f) => {
                    let Ok(resp) = std::task::ready!(f.as_mut().poll(cx));
                    let (parts, body) = resp.into_parts();
                    let end = body.is_end_stream();
                    self.state = if end { State::Done } else { State::Body(Box::pin(body)) };
                    return Poll::Ready(Event::Head { status: parts.status.as_u16(), headers: parts.headers, end });
                }
                State::Body(b) => {
                    let ev = match std::task::ready!(b.as_mut().poll_frame(cx)) {
                        None => Event::End,
                        Some(Err(_)) => Event::Failed,
                        Some(Ok(f)) => match f.into_data() {
                            Ok(d) if d.is_empty() => continue,
                            Ok(d) => return Poll::Ready(Event::Data(d)),
                            Err(f) => match f.into_trailers() {
                                Ok(t) => Event::Trailers(t),
                                Err(_) => continue,
                            },
                        },
                    };
                    self.state = State::Done;
                    return Poll::Ready(ev);
                }
                State::Framed { s, headed, counted } => {
                    if !*headed {
                        *headed = true;
                        let mut h = http::HeaderMap::new();
                        h.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/grpc"));
                        return Poll::Ready(Event::Head { status: 200, headers: h, end: false });
                    }
                    let ev = match std::task::ready!(s.as_mut().poll_next(cx)) {
                        Some(Ok(b)) => return Poll::Ready(Event::Data(b)),
                        Some(Err(st)) => {
                            counted.handled(st.code() as usize);
                            Event::Trailers(status_fields(&st))
                        }
                        None => {
                            counted.handled(0);
                            Event::Trailers(status_fields(&tonic::Status::ok("")))
                        }
                    };
                    self.state = State::Done;
                    return Poll::Ready(ev);
                }
                State::Done => return Poll::Pending,
            }
        }
    }
}

/// The next event of a pump, as a future that gives the pump back with it.
pub struct Next(pub Option<Pump>);

impl Future for Next {
    type Output = (Pump, Event);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<(Pump, Event)> {
        let pump = self.0.as_mut().expect("polled after completion");
        // A service that panics fails its stream alone (as on a hyper stream task).
        let ev = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| pump.poll_event(cx))) {
            Ok(p) => std::task::ready!(p),
            Err(_) => {
                pump.state = State::Done;
                Event::Failed
            }
        };
        Poll::Ready((self.0.take().unwrap(), ev))
    }
}
