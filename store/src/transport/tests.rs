//! The lean transport against a client written frame by frame: the connection's
//! preface and settings, hot calls and their errors, flow control both ways,
//! header blocks in pieces, padding, protocol errors, bridged streams (a gRPC call
//! and an HTTP request the routes answer), resets and GOAWAY.
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::proto::{PbLeaseGrantRequest, PbLeaseGrantResponse, PbPutRequest, PbPutResponse, PbRangeRequest, PbRangeResponse};
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::frame::{self, Head};
use super::hpack::{self, Fields};
use crate::config::Config;
use crate::mvcc::Store;
use crate::server::Ctx;

async fn start() -> SocketAddr {
    super::serve_local(Ctx::new(Arc::new(Store::new()), Config::default(), None)).await.unwrap()
}

struct Raw {
    s: TcpStream,
    rbuf: Vec<u8>,
    dec: hpack::Decoder,
}

#[derive(Debug)]
struct Frame {
    head: Head,
    payload: Vec<u8>,
}

impl Raw {
    /// Connects, sends the preface and `settings`, and reads the server's preface
    /// (SETTINGS, WINDOW_UPDATE), checking what it announces.
    async fn connect(addr: SocketAddr, settings: &[(u16, u32)]) -> Raw {
        let s = TcpStream::connect(addr).await.unwrap();
        let mut r = Raw { s, rbuf: Vec::new(), dec: hpack::Decoder::default() };
        let mut out = frame::PREFACE.to_vec();
        frame::put_settings(&mut out, settings);
        r.send(&out).await;
        let f = r.frame().await;
        assert_eq!((f.head.kind, f.head.flags, f.head.stream), (frame::SETTINGS, 0, 0));
        let announced: Vec<(u16, u32)> = f.payload.chunks(6).map(|c| (u16::from_be_bytes([c[0], c[1]]), u32::from_be_bytes([c[2], c[3], c[4], c[5]]))).collect();
        assert!(announced.contains(&(frame::SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20)), "{announced:?}");
        let f = r.frame().await;
        assert_eq!((f.head.kind, f.head.stream), (frame::WINDOW_UPDATE, 0));
        let f = r.frame().await;
        assert_eq!((f.head.kind, f.head.flags), (frame::SETTINGS, frame::ACK), "our settings acknowledged");
        r
    }

    async fn send(&mut self, b: &[u8]) {
        self.s.write_all(b).await.unwrap();
    }

    /// The next frame, or None when none comes within `wait`.
    async fn frame_within(&mut self, wait: Duration) -> Option<Frame> {
        loop {
            if self.rbuf.len() >= frame::HEADER_LEN {
                let head = Head::parse(&self.rbuf);
                if self.rbuf.len() >= frame::HEADER_LEN + head.len {
                    let payload = self.rbuf[frame::HEADER_LEN..frame::HEADER_LEN + head.len].to_vec();
                    self.rbuf.drain(..frame::HEADER_LEN + head.len);
                    return Some(Frame { head, payload });
                }
            }
            let mut buf = [0u8; 65536];
            let n = match tokio::time::timeout(wait, self.s.read(&mut buf)).await {
                Err(_) => return None,
                Ok(r) => r.unwrap(),
            };
            if n == 0 {
                return None;
            }
            self.rbuf.extend_from_slice(&buf[..n]);
        }
    }

    async fn frame(&mut self) -> Frame {
        self.frame_within(Duration::from_secs(10)).await.expect("a frame from the server")
    }

    /// The next frame that is not a WINDOW_UPDATE.
    async fn frame_skipping_credit(&mut self) -> Frame {
        loop {
            let f = self.frame().await;
            if f.head.kind != frame::WINDOW_UPDATE {
                return f;
            }
        }
    }

    fn decode(&mut self, block: &[u8]) -> Vec<(String, String)> {
        let mut f = Fields::default();
        self.dec.decode(block, &mut f).unwrap();
        f.iter().map(|(n, v)| (String::from_utf8_lossy(n).into(), String::from_utf8_lossy(v).into())).collect()
    }

    /// Reads one gRPC answer on `stream`: (headers, message bytes, trailers).
    async fn answer(&mut self, stream: u32) -> (Vec<(String, String)>, Vec<u8>, Vec<(String, String)>) {
        let f = self.frame_skipping_credit().await;
        assert_eq!((f.head.kind, f.head.stream), (frame::HEADERS, stream), "{f:?}");
        let headers = self.decode(&f.payload);
        if f.head.has(frame::END_STREAM) {
            return (headers.clone(), Vec::new(), headers);
        }
        let mut data = Vec::new();
        loop {
            let f = self.frame_skipping_credit().await;
            assert_eq!(f.head.stream, stream);
            match f.head.kind {
                frame::DATA => data.extend_from_slice(&f.payload),
                frame::HEADERS => {
                    assert!(f.head.has(frame::END_STREAM));
                    let trailers = self.decode(&f.payload);
                    let msg = if data.is_empty() { Vec::new() } else { data[5..].to_vec() };
                    if !data.is_empty() {
                        assert_eq!(u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize, msg.len());
                    }
                    return (headers, msg, trailers);
                }
                k => panic!("unexpected frame type {k}"),
            }
        }
    }
}

fn request_block(path: &str) -> Vec<u8> {
    let mut b = Vec::new();
    for (n, v) in [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "localhost"), ("content-type", "application/grpc"), ("te", "trailers")] {
        hpack::put_literal(&mut b, n.as_bytes(), v.as_bytes());
    }
    b
}

fn grpc(msg: &impl Message) -> Vec<u8> {
    let m = msg.encode_to_vec();
    let mut out = vec![0];
    out.extend_from_slice(&(m.len() as u32).to_be_bytes());
    out.extend_from_slice(&m);
    out
}

/// A unary call in one HEADERS and one DATA frame.
fn call(stream: u32, path: &str, msg: &impl Message) -> Vec<u8> {
    let mut out = Vec::new();
    frame::put_headers(&mut out, stream, &request_block(path), false, 16384);
    frame::put_frame(&mut out, frame::DATA, frame::END_STREAM, stream, &grpc(msg));
    out
}

fn status(trailers: &[(String, String)]) -> (String, String) {
    let get = |n: &str| trailers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone()).unwrap_or_default();
    (get("grpc-status"), get("grpc-message"))
}

fn put(key: &str, value: Vec<u8>) -> PbPutRequest {
    PbPutRequest { key: key.into(), value, ..Default::default() }
}

#[tokio::test]
async fn settings_ping_and_hot_calls() {
    let mut c = Raw::connect(start().await, &[]).await;
    let mut ping = Vec::new();
    frame::put_frame(&mut ping, frame::PING, 0, 0, b"12345678");
    c.send(&ping).await;
    let f = c.frame().await;
    assert_eq!((f.head.kind, f.head.flags, f.payload.as_slice()), (frame::PING, frame::ACK, &b"12345678"[..]));

    c.send(&call(1, "/etcdserverpb.KV/Put", &put("/registry/pods/a", b"v1".to_vec()))).await;
    let (headers, msg, trailers) = c.answer(1).await;
    assert!(headers.contains(&(":status".into(), "200".into())) && headers.contains(&("content-type".into(), "application/grpc".into())));
    assert_eq!(status(&trailers), ("0".into(), String::new()));
    let resp = PbPutResponse::decode(msg.as_slice()).unwrap();
    assert_eq!(resp.header.unwrap().revision, 2);

    c.send(&call(3, "/etcdserverpb.KV/Range", &PbRangeRequest { key: b"/registry/pods/a".to_vec(), ..Default::default() })).await;
    let (_, msg, trailers) = c.answer(3).await;
    assert_eq!(status(&trailers).0, "0");
    let resp = PbRangeResponse::decode(msg.as_slice()).unwrap();
    assert_eq!((resp.count, resp.kvs[0].value.as_slice()), (1, &b"v1"[..]));
}

/// An error is answered in the headers alone, with etcd's code and message.
#[tokio::test]
async fn errors_are_answered_in_the_headers() {
    let mut c = Raw::connect(start().await, &[]).await;
    c.send(&call(1, "/etcdserverpb.KV/Put", &put("", b"v".to_vec()))).await;
    let f = c.frame_skipping_credit().await;
    assert_eq!((f.head.kind, f.head.flags & frame::END_STREAM), (frame::HEADERS, frame::END_STREAM));
    let fields = c.decode(&f.payload);
    assert_eq!(status(&fields), ("3".into(), "etcdserver: key is not provided".into()));

    // A message marked compressed, with no grpc-encoding.
    let mut out = Vec::new();
    frame::put_headers(&mut out, 3, &request_block("/etcdserverpb.KV/Put"), false, 16384);
    let mut m = grpc(&put("k", b"v".to_vec()));
    m[0] = 1;
    frame::put_frame(&mut out, frame::DATA, frame::END_STREAM, 3, &m);
    c.send(&out).await;
    let (_, _, trailers) = c.answer(3).await;
    assert_eq!(status(&trailers).0, "13");
}

/// DATA never passes the client's windows, the stream's or the connection's;
/// WINDOW_UPDATEs let the rest through.
#[tokio::test]
async fn answers_wait_for_the_clients_windows() {
    let mut c = Raw::connect(start().await, &[(frame::SETTINGS_INITIAL_WINDOW_SIZE, 100)]).await;
    c.send(&call(1, "/etcdserverpb.KV/Put", &put("/registry/pods/big", vec![7u8; 200_000]))).await;
    let (_, msg, trailers) = c.answer(1).await;
    assert_eq!(status(&trailers).0, "0");
    // What the put's answer took of the connection's window.
    let conn_window = 65_535 - (msg.len() + 5);
    c.send(&call(3, "/etcdserverpb.KV/Range", &PbRangeRequest { key: b"/registry/pods/big".to_vec(), ..Default::default() })).await;
    let f = c.frame_skipping_credit().await;
    assert_eq!(f.head.kind, frame::HEADERS);
    let f = c.frame_skipping_credit().await;
    assert_eq!((f.head.kind, f.head.len), (frame::DATA, 100), "the stream's window");
    assert!(c.frame_within(Duration::from_millis(300)).await.is_none(), "nothing more until the window opens");
    let mut wu = Vec::new();
    frame::put_window_update(&mut wu, 3, 1_000_000);
    c.send(&wu).await;
    let mut got = 100;
    // The connection's window (65,535 at the start) runs out next.
    while got < conn_window {
        let f = c.frame_skipping_credit().await;
        assert_eq!(f.head.kind, frame::DATA);
        assert!(f.head.len <= 16_384, "the default frame size");
        got += f.head.len;
    }
    assert_eq!(got, conn_window);
    assert!(c.frame_within(Duration::from_millis(300)).await.is_none(), "the connection's window is spent");
    let mut wu = Vec::new();
    frame::put_window_update(&mut wu, 0, 1_000_000);
    c.send(&wu).await;
    let mut trailers = None;
    while trailers.is_none() {
        let f = c.frame_skipping_credit().await;
        match f.head.kind {
            frame::DATA => got += f.head.len,
            frame::HEADERS => trailers = Some(c.decode(&f.payload)),
            k => panic!("frame {k}"),
        }
    }
    assert_eq!(status(&trailers.unwrap()).0, "0");
    assert!(got > 200_000);
}

/// A header block split over HEADERS and CONTINUATION frames, padded frames, a
/// priority field: all read as one request.
#[tokio::test]
async fn continuations_padding_and_priority() {
    let mut c = Raw::connect(start().await, &[]).await;
    let block = request_block("/etcdserverpb.KV/Put");
    let (a, b) = block.split_at(block.len() / 2);
    let mut out = Vec::new();
    // HEADERS, padded (3) with a priority field, no END_HEADERS.
    let mut p = vec![3, 0, 0, 0, 0, 16];
    p.extend_from_slice(a);
    p.extend_from_slice(&[0, 0, 0]);
    frame::put_frame(&mut out, frame::HEADERS, frame::PADDED | frame::PRIORITY_FLAG, 1, &p);
    frame::put_frame(&mut out, frame::CONTINUATION, frame::END_HEADERS, 1, b);
    let m = grpc(&put("/registry/pods/c", b"cv".to_vec()));
    let mut d = vec![5];
    d.extend_from_slice(&m);
    d.extend_from_slice(&[0; 5]);
    frame::put_frame(&mut out, frame::DATA, frame::PADDED | frame::END_STREAM, 1, &d);
    c.send(&out).await;
    let (_, msg, trailers) = c.answer(1).await;
    assert_eq!(status(&trailers).0, "0");
    assert_eq!(PbPutResponse::decode(msg.as_slice()).unwrap().header.unwrap().revision, 2);
}

/// A request larger than the stream window: the server opens it as it reads.
#[tokio::test]
async fn large_requests_get_window_updates() {
    let mut c = Raw::connect(start().await, &[]).await;
    let m = grpc(&put("/registry/configmaps/big", vec![1u8; 1_400_000]));
    let mut out = Vec::new();
    frame::put_headers(&mut out, 1, &request_block("/etcdserverpb.KV/Put"), false, 16384);
    c.send(&out).await;
    let (mut sent, mut window) = (0usize, 1usize << 20);
    for chunk in m.chunks(16_384) {
        while window < chunk.len() {
            let f = c.frame().await;
            if f.head.kind == frame::WINDOW_UPDATE && f.head.stream == 1 {
                window += u32::from_be_bytes(f.payload[..4].try_into().unwrap()) as usize;
            }
        }
        sent += chunk.len();
        let end = if sent == m.len() { frame::END_STREAM } else { 0 };
        let mut out = Vec::new();
        frame::put_frame(&mut out, frame::DATA, end, 1, chunk);
        c.send(&out).await;
        window -= chunk.len();
    }
    let (_, _, trailers) = c.answer(1).await;
    assert_eq!(status(&trailers), ("0".into(), String::new()));
}

/// A message declaring more than etcd's gRPC limit (--max-request-bytes + 512 KiB) is
/// refused from its 5-byte prefix, with grpc-go's ResourceExhausted text, before the
/// rest of it arrives; the connection goes on.
#[tokio::test]
async fn oversized_messages_are_refused_from_their_length() {
    let mut c = Raw::connect(start().await, &[]).await;
    let mut out = Vec::new();
    frame::put_headers(&mut out, 1, &request_block("/etcdserverpb.KV/Put"), false, 16384);
    let mut first = vec![0];
    first.extend_from_slice(&(3u32 << 20).to_be_bytes());
    first.extend_from_slice(&[0u8; 1000]);
    frame::put_frame(&mut out, frame::DATA, 0, 1, &first);
    c.send(&out).await;
    let f = c.frame_skipping_credit().await;
    assert_eq!((f.head.kind, f.head.stream, f.head.flags & frame::END_STREAM), (frame::HEADERS, 1, frame::END_STREAM));
    let fields = c.decode(&f.payload);
    assert_eq!(status(&fields), ("8".into(), "grpc: received message larger than max (3145728 vs. 2097152)".into()));
    // The rest of the request is not wanted: the stream is reset with NO_ERROR.
    let f = c.frame_skipping_credit().await;
    assert_eq!((f.head.kind, f.head.stream, u32::from_be_bytes(f.payload[..4].try_into().unwrap())), (frame::RST_STREAM, 1, frame::NO_ERROR));
    c.send(&call(3, "/etcdserverpb.KV/Put", &put("/registry/pods/ok", b"v".to_vec()))).await;
    let (_, _, trailers) = c.answer(3).await;
    assert_eq!(status(&trailers).0, "0");
}

/// Streams the transport does not answer itself go to the tonic routes: a gRPC
/// call (LeaseGrant) and a plain HTTP request (/health).
#[tokio::test]
async fn other_streams_are_bridged() {
    let mut c = Raw::connect(start().await, &[]).await;
    c.send(&call(1, "/etcdserverpb.Lease/LeaseGrant", &PbLeaseGrantRequest { ttl: 30, id: 0 })).await;
    let (headers, msg, trailers) = c.answer(1).await;
    assert!(headers.contains(&(":status".into(), "200".into())));
    assert_eq!(status(&trailers).0, "0");
    let resp = PbLeaseGrantResponse::decode(msg.as_slice()).unwrap();
    assert_eq!(resp.ttl, 30);
    assert!(resp.id != 0);

    let mut out = Vec::new();
    let mut block = Vec::new();
    for (n, v) in [(":method", "GET"), (":scheme", "http"), (":path", "/health"), (":authority", "localhost")] {
        hpack::put_literal(&mut block, n.as_bytes(), v.as_bytes());
    }
    frame::put_headers(&mut out, 3, &block, true, 16384);
    c.send(&out).await;
    let f = c.frame_skipping_credit().await;
    assert_eq!((f.head.kind, f.head.stream), (frame::HEADERS, 3));
    let headers = c.decode(&f.payload);
    assert!(headers.contains(&(":status".into(), "200".into())), "{headers:?}");
    let mut body = Vec::new();
    loop {
        let f = c.frame_skipping_credit().await;
        assert_eq!((f.head.kind, f.head.stream), (frame::DATA, 3));
        body.extend_from_slice(&f.payload);
        if f.head.has(frame::END_STREAM) {
            break;
        }
    }
    assert!(String::from_utf8_lossy(&body).contains("\"health\":\"true\""), "{}", String::from_utf8_lossy(&body));
}

/// A reset stream's call is dropped and the connection goes on; a client's
/// GOAWAY refuses new streams; a protocol error ends the connection with GOAWAY.
#[tokio::test]
async fn resets_goaway_and_protocol_errors() {
    let addr = start().await;
    let mut c = Raw::connect(addr, &[]).await;
    // A Watch (bridged, endless) reset by the client.
    let mut out = Vec::new();
    frame::put_headers(&mut out, 1, &request_block("/etcdserverpb.Watch/Watch"), false, 16384);
    frame::put_rst_stream(&mut out, 1, frame::CANCEL);
    c.send(&out).await;
    c.send(&call(3, "/etcdserverpb.KV/Put", &put("/registry/pods/after", b"x".to_vec()))).await;
    loop {
        let f = c.frame_skipping_credit().await;
        if f.head.stream == 3 && f.head.kind == frame::HEADERS {
            break;
        }
    }
    // GOAWAY from the client: a later stream is refused.
    let mut out = Vec::new();
    frame::put_goaway(&mut out, 0, frame::NO_ERROR, b"");
    out.extend_from_slice(&call(5, "/etcdserverpb.KV/Put", &put("/registry/pods/late", b"x".to_vec())));
    c.send(&out).await;
    loop {
        let f = c.frame_skipping_credit().await;
        if f.head.stream == 5 {
            assert_eq!((f.head.kind, u32::from_be_bytes(f.payload[..4].try_into().unwrap())), (frame::RST_STREAM, frame::REFUSED_STREAM));
            break;
        }
    }

    // DATA on stream 0 is a connection error.
    let mut c = Raw::connect(addr, &[]).await;
    let mut out = Vec::new();
    frame::put_frame(&mut out, frame::DATA, 0, 0, b"x");
    c.send(&out).await;
    let f = c.frame_skipping_credit().await;
    assert_eq!(f.head.kind, frame::GOAWAY);
    assert_eq!(u32::from_be_bytes(f.payload[4..8].try_into().unwrap()), frame::PROTOCOL_ERROR);
    assert!(c.frame_within(Duration::from_secs(2)).await.is_none(), "the connection ends");

    // A stream with an even id too.
    let mut c = Raw::connect(addr, &[]).await;
    c.send(&call(2, "/etcdserverpb.KV/Put", &put("k", b"v".to_vec()))).await;
    let f = c.frame_skipping_credit().await;
    assert_eq!(f.head.kind, frame::GOAWAY);
}

/// A stream that, like a TLS stream, takes every write into a buffer of its own and
/// sends it on only when flushed.
struct HeldUntilFlushed {
    io: TcpStream,
    held: Vec<u8>,
}

impl tokio::io::AsyncRead for HeldUntilFlushed {
    fn poll_read(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>, buf: &mut tokio::io::ReadBuf<'_>) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for HeldUntilFlushed {
    fn poll_write(mut self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>, buf: &[u8]) -> std::task::Poll<std::io::Result<usize>> {
        self.held.extend_from_slice(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        let this = &mut *self;
        while !this.held.is_empty() {
            let n = std::task::ready!(std::pin::Pin::new(&mut this.io).poll_write(cx, &this.held))?;
            this.held.drain(..n);
        }
        std::pin::Pin::new(&mut this.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        std::task::ready!(self.as_mut().poll_flush(cx))?;
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// A connection over a stream that holds its writes until flushed (a TLS stream
/// does) gets its answers: the connection flushes what it writes.
#[tokio::test]
async fn answers_are_flushed_through_a_buffering_stream() {
    let ctx = Ctx::new(Arc::new(Store::new()), Config::default(), None);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let routes = super::bridge::routes(crate::server::routes(&ctx, crate::server::decode_limit(ctx.cfg.max_request_bytes)));
    let services = super::unary::Services::new(ctx.clone());
    tokio::spawn(async move {
        let (s, _) = listener.accept().await.unwrap();
        let io = HeldUntilFlushed { io: s, held: Vec::new() };
        let _ = super::conn::Conn::new(io, services, routes, 2 << 20, None, None).await;
    });
    let mut c = Raw::connect(addr, &[]).await;
    c.send(&call(1, "/etcdserverpb.KV/Put", &put("/registry/pods/a", vec![7; 30 << 10]))).await;
    let (_, _, trailers) = c.answer(1).await;
    assert_eq!(status(&trailers).0, "0");
    c.send(&call(3, "/etcdserverpb.KV/Range", &PbRangeRequest { key: b"/registry/pods/a".to_vec(), ..Default::default() })).await;
    let (_, msg, trailers) = c.answer(3).await;
    assert_eq!(status(&trailers).0, "0");
    assert_eq!(PbRangeResponse::decode(msg.as_slice()).unwrap().kvs[0].value.len(), 30 << 10);
}
