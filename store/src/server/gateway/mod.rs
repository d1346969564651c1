//! etcd's gRPC gateway on the client URLs: the JSON API under `/v3/...`
//! (`curl -X POST http://127.0.0.1:2379/v3/kv/put -d '{"key":"Zm9v","value":"YmFy"}'`),
//! as etcd 3.6 serves it with grpc-gateway v2 (docs/design.md §3).
//!
//! Each request is answered as etcd's gateway answers it: its JSON body read
//! into the RPC's request message (`json`, with the tables of `schema`,
//! generated from etcd's .proto files), the RPC called — here in process,
//! through the same gRPC routes a gRPC client reaches, with the per-RPC
//! counters, so no semantics are implemented twice — with the HTTP
//! `Authorization` header (and any `Grpc-Metadata-*` header) as its metadata,
//! and the response message written back as JSON; a gRPC error becomes the
//! HTTP status grpc-gateway maps its code to and `{"code":N,"message":"..."}`.
//! Streams (Watch, LeaseKeepAlive, Snapshot, Observe) answer one
//! `{"result":{...}}` line per message, `{"error":{...}}` when the call fails.
pub mod json;
pub mod schema;

use std::sync::Arc;

use axum::body::Body;
use bytes::{Buf, Bytes, BytesMut};
use futures::StreamExt;
use http_body_util::BodyExt;
use tonic::codegen::http::{self, HeaderMap, HeaderValue, StatusCode};
use tonic::service::Routes;
use tonic::Code;
use tower_service::Service;

use super::grpc_metrics::{CountRpcs, Counted};
use super::Ctx;
use json::Rpc;

type Grpc = Counted<Routes>;

/// Adds the gateway to the routes of one client URL; `grpc` are its gRPC
/// services (what the gateway calls), `limit` the largest body it reads.
pub fn add(routes: &mut Routes, ctx: &Arc<Ctx>, grpc: Routes, limit: usize) {
    let svc: Grpc = tower_layer::Layer::layer(&CountRpcs, grpc);
    let ctx = ctx.clone();
    let h = move |req: http::Request<Body>| {
        let (svc, ctx) = (svc.clone(), ctx.clone());
        async move {
            if named_client(&ctx, &req) {
                return refuse_common_name();
            }
            handle(svc, limit, req).await
        }
    };
    let mut r = std::mem::take(routes.axum_router_mut());
    // etcd redirects the old /v3beta/ prefix to /v3/.
    for p in ["/v3/", "/v3/{*rest}", "/v3beta/", "/v3beta/{*rest}"] {
        r = r.route(p, axum::routing::any(h.clone()));
    }
    *routes.axum_router_mut() = r;
}

/// etcd's accessController: with --client-cert-auth and auth on, a gateway
/// request over TLS whose verified client certificate names a common name is
/// refused — the gateway's own gRPC connection would carry no identity, so
/// the name would be silently ignored. (The in-process call here carries no
/// certificate either, so the name could never be used.)
fn named_client(ctx: &Ctx, req: &http::Request<Body>) -> bool {
    if !ctx.cfg.client_cert_auth || !ctx.auth.enabled() {
        return false;
    }
    let cert = req.extensions().get::<crate::server::ClientCert>();
    cert.and_then(|c| c.common_name.as_deref()).is_some_and(|cn| !cn.is_empty())
}

/// etcd's refusal (http.Error: plain text, a newline, no CORS headers).
fn refuse_common_name() -> http::Response<Body> {
    http::Response::builder()
        .status(StatusCode::BAD_REQUEST)
        .header(http::header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .header("x-content-type-options", "nosniff")
        .body(Body::from("CommonName of client sending a request against gateway will be ignored and not used as expected\n"))
        .expect("a valid response")
}

async fn handle(svc: Grpc, limit: usize, req: http::Request<Body>) -> http::Response<Body> {
    if req.method() == http::Method::OPTIONS {
        return super::http_endpoints::preflight();
    }
    let mut resp = answer(svc, limit, req).await;
    super::http_endpoints::cors(resp.headers_mut());
    resp
}

async fn answer(svc: Grpc, limit: usize, req: http::Request<Body>) -> http::Response<Body> {
    let path = req.uri().path();
    let path = match path.strip_prefix("/v3beta/") {
        Some(rest) => format!("/v3/{rest}"),
        None => path.to_string(),
    };
    let Some(rpc) = schema::RPCS.iter().find(|r| r.http.contains(&path.as_str())) else {
        return error(Code::NotFound, "Not Found");
    };
    if req.method() != http::Method::POST {
        // grpc-gateway's routing error: Unimplemented, answered 501.
        return error(Code::Unimplemented, "Method Not Allowed");
    }
    let md = metadata(req.headers());
    if rpc.client_stream {
        let (gone, closed) = tokio::sync::oneshot::channel();
        return stream_call(svc, rpc, md, bidi_input(rpc, req.into_body(), limit, closed), Some(gone)).await;
    }
    let body = match axum::body::to_bytes(req.into_body(), limit).await {
        Ok(b) => b,
        Err(e) => return error(Code::InvalidArgument, &e.to_string()),
    };
    let msg = match request_message(rpc, &body) {
        Ok(m) => m,
        Err(e) => return error(Code::InvalidArgument, &e),
    };
    if rpc.server_stream {
        let once = futures::stream::once(async move { Ok(frame(&msg)) }).boxed();
        return stream_call(svc, rpc, md, once, None).await;
    }
    unary(svc, rpc, md, msg).await
}

/// The metadata etcd's gateway passes on: `Authorization` as `authorization`
/// (etcd's servers take it as the token), `Grpc-Metadata-<k>` as `<k>`.
fn metadata(h: &HeaderMap) -> Vec<(http::HeaderName, HeaderValue)> {
    let mut md = Vec::new();
    for (k, v) in h {
        if k == http::header::AUTHORIZATION {
            md.push((k.clone(), v.clone()));
        } else if let Some(rest) = k.as_str().strip_prefix("grpc-metadata-") {
            if let Ok(name) = http::HeaderName::from_bytes(rest.as_bytes()) {
                md.push((name, v.clone()));
            }
        }
    }
    md
}

/// The request message of a unary or server-streaming call: the first JSON
/// value of the body (Go's json.Decoder reads one and leaves the rest), none
/// at all being the empty message.
fn request_message(rpc: &Rpc, body: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    match first_value(body) {
        Parsed::Value(v, _) if !v.is_object() => {
            // protojson's refusal of anything but an object, with the position of the value.
            let start = body.iter().position(|c| !c.is_ascii_whitespace()).unwrap_or(0);
            let line = 1 + body[..start].iter().filter(|c| **c == b'\n').count();
            let col = 1 + start - body[..start].iter().rposition(|c| *c == b'\n').map_or(0, |i| i + 1);
            let token = match &v {
                serde_json::Value::Array(_) => "[".to_string(),
                v => v.to_string(),
            };
            return Err(format!("proto: syntax error (line {line}:{col}): unexpected token {token}"));
        }
        Parsed::Value(v, _) => json::from_json(rpc.req, &v, &mut out)?,
        Parsed::Empty => {}
        Parsed::Incomplete => return Err("unexpected EOF".into()),
        Parsed::Bad(e) => return Err(e),
    }
    Ok(out)
}

enum Parsed {
    /// A value and the bytes it took.
    Value(serde_json::Value, usize),
    /// Only whitespace.
    Empty,
    /// A value begun and not finished.
    Incomplete,
    Bad(String),
}

fn first_value(b: &[u8]) -> Parsed {
    let mut it = serde_json::Deserializer::from_slice(b).into_iter::<serde_json::Value>();
    match it.next() {
        None => Parsed::Empty,
        Some(Ok(v)) => Parsed::Value(v, it.byte_offset()),
        Some(Err(e)) if e.is_eof() => Parsed::Incomplete,
        Some(Err(e)) => Parsed::Bad(syntax_error(b, &e)),
    }
}

/// Go's encoding/json wording for a syntax error ("invalid character 'b'
/// looking for beginning of object key string"), what etcd's gateway answers.
fn syntax_error(b: &[u8], e: &serde_json::Error) -> String {
    let line_start = b.split(|c| *c == b'\n').take(e.line().saturating_sub(1)).map(|l| l.len() + 1).sum::<usize>();
    let at = (line_start + e.column()).saturating_sub(1);
    let what = e.to_string();
    let context = if what.starts_with("key must be a string") {
        "looking for beginning of object key string"
    } else if what.starts_with("expected `:`") {
        "after object key"
    } else if what.starts_with("expected `,` or `}`") {
        "after object key:value pair"
    } else if what.starts_with("expected `,` or `]`") {
        "after array element"
    } else {
        "looking for beginning of value"
    };
    match b.get(at) {
        Some(c) if c.is_ascii_graphic() || *c == b' ' => format!("invalid character '{}' {context}", *c as char),
        _ => format!("invalid JSON: {e}"),
    }
}

/// One gRPC message frame (uncompressed).
fn frame(msg: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(msg.len() + 5);
    b.extend_from_slice(&[0]);
    b.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    b.extend_from_slice(msg);
    b.freeze()
}

type Frames = futures::stream::BoxStream<'static, Result<Bytes, std::io::Error>>;

/// The request stream of a bidirectional call: each JSON value of the HTTP
/// body as it arrives, one message each. etcd's gateway stops sending at the
/// end of the body or at a value it cannot read, and half-closes; this one
/// keeps the stream open instead (etcd's Watch and LeaseKeepAlive go on after
/// a half-close, this store's end with it) until the HTTP response is dropped
/// (`closed` fires), which ends it with an error as a client's reset would.
/// A value still incomplete past `limit` bytes ends the input as a bad one does.
fn bidi_input(rpc: &'static Rpc, body: Body, limit: usize, closed: tokio::sync::oneshot::Receiver<()>) -> Frames {
    struct St {
        data: futures::stream::BoxStream<'static, Result<Bytes, axum::Error>>,
        buf: BytesMut,
        done: bool,
        closed: Option<tokio::sync::oneshot::Receiver<()>>,
    }
    let st = St { data: StreamExt::boxed(body.into_data_stream()), buf: BytesMut::new(), done: false, closed: Some(closed) };
    futures::stream::unfold(st, move |mut st| async move {
        loop {
            if st.done {
                // Held open until the response is gone, then ended with an error.
                let _ = st.closed.take()?.await;
                return Some((Err(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "HTTP client gone")), st));
            }
            match first_value(&st.buf) {
                Parsed::Value(v, n) => {
                    st.buf.advance(n);
                    let mut msg = Vec::new();
                    if json::from_json(rpc.req, &v, &mut msg).is_err() {
                        st.done = true;
                        continue;
                    }
                    return Some((Ok(frame(&msg)), st));
                }
                Parsed::Bad(_) => st.done = true,
                Parsed::Incomplete if st.buf.len() > limit => st.done = true,
                Parsed::Empty | Parsed::Incomplete => match st.data.next().await {
                    Some(Ok(b)) => st.buf.extend_from_slice(&b),
                    _ => st.done = true,
                },
            }
        }
    })
    .boxed()
}

/// The gRPC request of a call of `rpc` with `body` (framed messages).
fn grpc_request(rpc: &Rpc, md: Vec<(http::HeaderName, HeaderValue)>, body: Body) -> http::Request<Body> {
    let mut req = http::Request::builder()
        .method(http::Method::POST)
        .uri(rpc.grpc)
        .version(http::Version::HTTP_2)
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header(http::header::TE, "trailers")
        .body(body)
        .expect("a valid request");
    for (k, v) in md {
        req.headers_mut().append(k, v);
    }
    req
}

async fn call(mut svc: Grpc, req: http::Request<Body>) -> http::Response<super::grpc_metrics::CountedBody<tonic::body::Body>> {
    let _ = futures::future::poll_fn(|cx| Service::<http::Request<Body>>::poll_ready(&mut svc, cx)).await;
    match svc.call(req).await {
        Ok(r) => r,
        Err(never) => match never {},
    }
}

async fn unary(svc: Grpc, rpc: &Rpc, md: Vec<(http::HeaderName, HeaderValue)>, msg: Vec<u8>) -> http::Response<Body> {
    let resp = call(svc, grpc_request(rpc, md, Body::from(frame(&msg)))).await;
    let (parts, body) = resp.into_parts();
    if let Some(st) = failed(&parts.headers) {
        return error(st.code(), st.message());
    }
    let collected = match body.collect().await {
        Ok(c) => c,
        Err(st) => return error(st.code(), st.message()),
    };
    if let Some(st) = collected.trailers().and_then(failed) {
        return error(st.code(), st.message());
    }
    let mut data = collected.to_bytes();
    let Some(msg) = next_message(&mut data) else {
        return error(Code::Internal, "the call answered no message");
    };
    let mut out = String::new();
    if let Err(e) = json::to_json(rpc.resp, &msg, &mut out) {
        return error(Code::Internal, &e);
    }
    http::Response::builder()
        .status(StatusCode::OK)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header("grpc-metadata-content-type", "application/grpc")
        .body(Body::from(out))
        .expect("a valid response")
}

/// A gRPC status that is not OK, from headers or trailers.
fn failed(h: &HeaderMap) -> Option<tonic::Status> {
    tonic::Status::from_header_map(h).filter(|s| s.code() != Code::Ok)
}

/// One whole message from the front of `buf` (gRPC framing), taken out.
fn next_message(buf: &mut Bytes) -> Option<Bytes> {
    if buf.len() < 5 {
        return None;
    }
    let n = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
    if buf.len() < 5 + n {
        return None;
    }
    buf.advance(5);
    Some(buf.split_to(n))
}

/// A server-streaming or bidirectional call: the answer's lines as its
/// messages arrive.
/// `gone` is dropped with the answer (the input's signal that the client left).
async fn stream_call(
    svc: Grpc,
    rpc: &'static Rpc,
    md: Vec<(http::HeaderName, HeaderValue)>,
    input: Frames,
    gone: Option<tokio::sync::oneshot::Sender<()>>,
) -> http::Response<Body> {
    let resp = call(svc, grpc_request(rpc, md, Body::from_stream(input))).await;
    let (parts, body) = resp.into_parts();
    if let Some(st) = failed(&parts.headers) {
        return stream_error_response(&st);
    }
    struct St {
        body: super::grpc_metrics::CountedBody<tonic::body::Body>,
        buf: Bytes,
        end: bool,
        _gone: Option<tokio::sync::oneshot::Sender<()>>,
    }
    let st = St { body, buf: Bytes::new(), end: false, _gone: gone };
    let lines = futures::stream::unfold(st, move |mut st| async move {
        loop {
            if st.end {
                return None;
            }
            if let Some(msg) = next_message(&mut st.buf) {
                let mut out = String::from("{\"result\":");
                if let Err(e) = json::to_json(rpc.resp, &msg, &mut out) {
                    st.end = true;
                    return Some((Ok::<_, std::io::Error>(Bytes::from(error_line(Code::Internal, &e))), st));
                }
                out.push_str("}\n");
                return Some((Ok(Bytes::from(out)), st));
            }
            match st.body.frame().await {
                Some(Ok(f)) => {
                    if let Some(t) = f.trailers_ref() {
                        st.end = true;
                        if let Some(s) = failed(t) {
                            return Some((Ok(Bytes::from(error_line(s.code(), s.message()))), st));
                        }
                        return None;
                    }
                    if let Ok(d) = f.into_data() {
                        let mut b = BytesMut::from(&st.buf[..]);
                        b.extend_from_slice(&d);
                        st.buf = b.freeze();
                    }
                }
                Some(Err(s)) => {
                    st.end = true;
                    return Some((Ok(Bytes::from(error_line(s.code(), s.message()))), st));
                }
                None => return None,
            }
        }
    });
    http::Response::builder()
        .status(StatusCode::OK)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header("grpc-metadata-content-type", "application/grpc")
        .body(Body::from_stream(lines))
        .expect("a valid response")
}

/// grpc-gateway's HTTPStatusFromCode.
pub fn http_status(code: Code) -> u16 {
    match code {
        Code::Ok => 200,
        Code::Cancelled => 499,
        Code::Unknown => 500,
        Code::InvalidArgument => 400,
        Code::DeadlineExceeded => 504,
        Code::NotFound => 404,
        Code::AlreadyExists => 409,
        Code::PermissionDenied => 403,
        Code::Unauthenticated => 401,
        Code::ResourceExhausted => 429,
        Code::FailedPrecondition => 400,
        Code::Aborted => 409,
        Code::OutOfRange => 400,
        Code::Unimplemented => 501,
        Code::Internal => 500,
        Code::Unavailable => 503,
        Code::DataLoss => 500,
    }
}

/// google.rpc.Status as protojson writes it (details, never set here, left out).
fn status_json(code: Code, message: &str) -> String {
    let mut s = format!("{{\"code\":{}", code as i32);
    if !message.is_empty() {
        s.push_str(",\"message\":");
        s.push_str(&serde_json::to_string(message).expect("a string serialises"));
    }
    s.push('}');
    s
}

fn error_line(code: Code, message: &str) -> String {
    format!("{{\"error\":{}}}\n", status_json(code, message))
}

/// grpc-gateway's DefaultHTTPErrorHandler: the status mapped from the code,
/// the status as JSON, the message in WWW-Authenticate for Unauthenticated.
fn error(code: Code, message: &str) -> http::Response<Body> {
    let mut b = http::Response::builder().status(http_status(code)).header(http::header::CONTENT_TYPE, "application/json");
    if code == Code::Unauthenticated {
        if let Ok(v) = HeaderValue::from_str(message) {
            b = b.header(http::header::WWW_AUTHENTICATE, v);
        }
    }
    b.body(Body::from(status_json(code, message))).expect("a valid response")
}

/// A stream that failed before its first message: the status mapped from the
/// code, one error line.
fn stream_error_response(st: &tonic::Status) -> http::Response<Body> {
    http::Response::builder()
        .status(http_status(st.code()))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Body::from(error_line(st.code(), st.message())))
        .expect("a valid response")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put_error(body: &str) -> String {
        let put = schema::RPCS.iter().find(|r| r.grpc == "/etcdserverpb.KV/Put").unwrap();
        request_message(put, body.as_bytes()).unwrap_err()
    }

    /// The wording etcd's gateway answers (Go's encoding/json, protojson).
    #[test]
    fn bad_bodies_are_refused_in_etcds_words() {
        assert_eq!(put_error("{bad"), "invalid character 'b' looking for beginning of object key string");
        assert_eq!(put_error("x"), "invalid character 'x' looking for beginning of value");
        assert_eq!(put_error(r#"{"key":"#), "unexpected EOF");
        assert_eq!(put_error("[]"), "proto: syntax error (line 1:1): unexpected token [");
        assert_eq!(put_error("\n  5"), "proto: syntax error (line 2:3): unexpected token 5");
        let put = schema::RPCS.iter().find(|r| r.grpc == "/etcdserverpb.KV/Put").unwrap();
        assert_eq!(request_message(put, b"  ").unwrap(), Vec::<u8>::new());
        // One value read, the rest left (json.Decoder).
        assert_eq!(request_message(put, br#"{"key":"YQ=="} trailing"#).unwrap(), vec![0x0a, 1, b'a']);
    }

    #[test]
    fn every_gateway_path_is_one_rpc() {
        let mut paths: Vec<&str> = schema::RPCS.iter().flat_map(|r| r.http.iter().copied()).collect();
        let n = paths.len();
        paths.sort();
        paths.dedup();
        assert_eq!(paths.len(), n);
        for p in ["/v3/kv/range", "/v3/kv/lease/revoke", "/v3/kv/lease/timetolive", "/v3/watch", "/v3/auth/role/revoke", "/v3/lock/lock"] {
            assert!(paths.contains(&p), "{p}");
        }
        assert_eq!(http_status(Code::ResourceExhausted), 429);
        assert_eq!(status_json(Code::NotFound, "a \"b\""), r#"{"code":5,"message":"a \"b\""}"#);
    }
}
