//! One HTTP/2 connection (RFC 9113, server side): frames read from the socket,
//! the hot unary calls run on the connection's own task (most finish in their
//! first poll: no task spawn, no cross-thread wake-up per request), every other
//! stream bridged to the tonic routes, and all answers written with one write
//! per turn of the loop, however many calls finished in it.
//!
//! Flow control. Receiving: we announce 1 MiB per stream and 16 MiB for the
//! connection; a hot call's bytes are given back as soon as they arrive (the
//! call holds them until it has decoded its message), a bridged stream's once its
//! service has read them. Sending: DATA never passes the client's windows; a
//! stream that has no window left waits in `blocked` for a WINDOW_UPDATE.
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use futures::future::{AbortHandle, Abortable, FutureExt};
use std::panic::AssertUnwindSafe;
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::Status;

use super::bridge::{self, BodySender, Credit, Event, Pump, Reset, Routes};
use super::frame::{self, Head};
use super::hpack::{self, Fields};
use super::unary::{self, Meta, Method, Reply, Services};
use crate::server::grpc_metrics::{GrpcMetrics, CANCELED};

/// The stream window we announce (SETTINGS_INITIAL_WINDOW_SIZE).
const STREAM_WINDOW: u32 = 1 << 20;
/// The connection window we open at the start.
const CONN_WINDOW: u32 = 16 << 20;
/// The largest frame we accept (SETTINGS_MAX_FRAME_SIZE).
const MAX_FRAME: u32 = 1 << 20;
/// A header block larger than this is refused (grpc-go's default header list limit).
const MAX_HEADER_BLOCK: usize = 16 << 20;
/// Credit is given back in steps of at least this (fewer WINDOW_UPDATE frames).
const CREDIT_STEP: u32 = 64 << 10;
/// A bridged stream's queued response bytes above which its pump waits.
const PUMP_QUEUE: usize = 1 << 20;
/// Output above which no more frames are read until the client reads what we wrote.
const WRITE_HIGH: usize = 4 << 20;
/// Reads per poll before the task yields to the runtime's other tasks.
const READS_PER_POLL: usize = 16;
/// Bytes written per poll before the task yields: a list page (1–2 MB) is written in
/// steps, with the runtime's other tasks (point requests) run in between.
const WRITE_PER_POLL: usize = 256 << 10;
/// DATA payloads at least this large are written from their own buffer, not copied.
const SEGMENT_MIN: usize = 8 << 10;

/// A connection-level failure: a GOAWAY with this code, then the end of the connection.
#[derive(Debug)]
struct ConnError(u32, String);

fn conn_err<T>(code: u32, msg: impl Into<String>) -> Result<T, ConnError> {
    Err(ConnError(code, msg.into()))
}

enum Recv {
    /// A hot call's request, arriving.
    Unary { method: Method, meta: Meta, body: BytesMut, credit: u32 },
    /// Handed to its call, or ended.
    Done,
    /// A bridged stream's request body, fed as DATA arrives (None once ended).
    Bridged { tx: Option<BodySender>, credit: u32 },
}

enum Out {
    Data { buf: Bytes, end: bool },
    Trailers(Vec<u8>),
}

struct Stream {
    recv: Recv,
    /// The client has sent END_STREAM (or we no longer read its request).
    recv_end: bool,
    /// Our DATA window on this stream (the client's).
    send_window: i64,
    /// What waits for window, in order; `out_bytes` is its DATA.
    out: VecDeque<Out>,
    out_bytes: usize,
    /// We sent END_STREAM.
    sent_end: bool,
    in_blocked: bool,
    /// The call running for it, to stop when the client resets the stream.
    abort: Option<AbortHandle>,
    /// The per-RPC counters' index: counted as handled when the answer goes out,
    /// or as Canceled when the client resets the stream first.
    rpc: Option<usize>,
    /// A bridged stream's pump, waiting while its queue drains.
    parked: Option<Pump>,
    /// What the client may still send on this stream (the window we granted).
    recv_window: i64,
    /// Stops the pump when the stream ends early (a Watch's body may never end by itself).
    pump_abort: Option<AbortHandle>,
}

impl Stream {
    fn new(recv: Recv, send_window: i64) -> Stream {
        Stream {
            recv,
            recv_end: false,
            send_window,
            out: VecDeque::new(),
            out_bytes: 0,
            sent_end: false,
            in_blocked: false,
            abort: None,
            rpc: None,
            parked: None,
            pump_abort: None,
            recv_window: STREAM_WINDOW as i64,
        }
    }
}

type CallOutput = (u32, Result<Result<Reply, Status>, futures::future::Aborted>);
type Call = Pin<Box<dyn Future<Output = CallOutput> + Send>>;

/// A header block being received (HEADERS, then CONTINUATION until END_HEADERS).
struct Partial {
    stream: u32,
    end_stream: bool,
    block: Vec<u8>,
}

pub struct Conn<T> {
    io: T,
    services: Services,
    routes: Routes,
    local: Option<SocketAddr>,
    remote: Option<SocketAddr>,
    /// The common name of the client's verified certificate (TLS listeners).
    client_cn: Option<Arc<str>>,
    /// The message size a hot call may carry (tonic's decode limit for the others).
    max_message: usize,

    rbuf: BytesMut,
    read_closed: bool,
    preface_done: bool,
    /// Output, in order: `wq`'s segments, then `wbuf`. Frames are gathered in `wbuf`;
    /// a large DATA payload goes in as a segment of its own (a slice of the encoded
    /// answer), written by `writev` without a copy.
    wq: VecDeque<Bytes>,
    wq_bytes: usize,
    wbuf: Vec<u8>,
    wpos: usize,

    decoder: hpack::Decoder,
    fields: Fields,
    partial: Option<Partial>,

    streams: HashMap<u32, Stream>,
    /// The highest stream id the client opened.
    last_stream: u32,
    /// The client sent GOAWAY: no new streams will come.
    client_gone: bool,
    /// We failed the connection: only the GOAWAY is left to write.
    closing: bool,

    peer_max_frame: usize,
    peer_initial_window: i64,
    /// Our DATA window on the connection.
    send_window: i64,
    /// Bytes received on the connection not yet given back.
    conn_credit: u32,
    /// What the client may still send on the connection (the window we granted): a
    /// client past it is a FLOW_CONTROL_ERROR, not memory we hold.
    recv_window: i64,
    blocked: VecDeque<u32>,
    /// Streams whose pump waits for the output to drain below WRITE_HIGH.
    parked_out: Vec<u32>,

    calls: FuturesUnordered<Call>,
    pumps: FuturesUnordered<Abortable<bridge::Next>>,
    credit: Arc<Credit>,
}

impl<T: AsyncRead + AsyncWrite + Unpin> Conn<T> {
    pub fn new(io: T, services: Services, routes: Routes, max_message: usize, local: Option<SocketAddr>, remote: Option<SocketAddr>) -> Self {
        let mut c = Conn {
            io,
            services,
            routes,
            local,
            remote,
            client_cn: None,
            max_message,
            rbuf: BytesMut::with_capacity(64 << 10),
            read_closed: false,
            preface_done: false,
            wq: VecDeque::new(),
            wq_bytes: 0,
            wbuf: Vec::with_capacity(64 << 10),
            wpos: 0,
            decoder: hpack::Decoder::default(),
            fields: Fields::default(),
            partial: None,
            streams: HashMap::new(),
            last_stream: 0,
            client_gone: false,
            closing: false,
            peer_max_frame: frame::MIN_MAX_FRAME_SIZE as usize,
            peer_initial_window: frame::DEFAULT_WINDOW as i64,
            send_window: frame::DEFAULT_WINDOW as i64,
            conn_credit: 0,
            recv_window: CONN_WINDOW as i64,
            blocked: VecDeque::new(),
            parked_out: Vec::new(),
            calls: FuturesUnordered::new(),
            pumps: FuturesUnordered::new(),
            credit: Arc::new(Credit::default()),
        };
        // The server's preface: our SETTINGS, then the connection window opened.
        frame::put_settings(
            &mut c.wbuf,
            &[(frame::SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW), (frame::SETTINGS_MAX_FRAME_SIZE, MAX_FRAME)],
        );
        frame::put_window_update(&mut c.wbuf, 0, CONN_WINDOW - frame::DEFAULT_WINDOW);
        c
    }

    /// The connection's client, as its TLS handshake verified it.
    pub fn with_client_cn(mut self, cn: Option<Arc<str>>) -> Self {
        self.client_cn = cn;
        self
    }

    // ---- reading ----

    /// Parses every whole frame in the read buffer.
    fn read_frames(&mut self, cx: &mut Context<'_>) -> Result<(), ConnError> {
        if !self.preface_done {
            if self.rbuf.len() < frame::PREFACE.len() {
                return Ok(());
            }
            if &self.rbuf[..frame::PREFACE.len()] != frame::PREFACE {
                return conn_err(frame::PROTOCOL_ERROR, "invalid connection preface");
            }
            self.rbuf.advance(frame::PREFACE.len());
            self.preface_done = true;
        }
        while self.rbuf.len() >= frame::HEADER_LEN && !self.closing {
            let head = Head::parse(&self.rbuf);
            if head.len > MAX_FRAME as usize {
                return conn_err(frame::FRAME_SIZE_ERROR, "frame larger than SETTINGS_MAX_FRAME_SIZE");
            }
            if self.rbuf.len() < frame::HEADER_LEN + head.len {
                self.rbuf.reserve(frame::HEADER_LEN + head.len - self.rbuf.len());
                break;
            }
            let mut f = self.rbuf.split_to(frame::HEADER_LEN + head.len);
            f.advance(frame::HEADER_LEN);
            self.frame(cx, head, f)?;
        }
        Ok(())
    }

    fn frame(&mut self, cx: &mut Context<'_>, head: Head, payload: BytesMut) -> Result<(), ConnError> {
        if let Some(p) = &self.partial {
            if head.kind != frame::CONTINUATION || head.stream != p.stream {
                return conn_err(frame::PROTOCOL_ERROR, "header block interrupted");
            }
        }
        match head.kind {
            frame::DATA => self.on_data(cx, head, payload),
            frame::HEADERS => self.on_headers(cx, head, payload),
            frame::CONTINUATION => {
                let Some(p) = self.partial.as_mut() else {
                    return conn_err(frame::PROTOCOL_ERROR, "CONTINUATION without HEADERS");
                };
                p.block.extend_from_slice(&payload);
                if p.block.len() > MAX_HEADER_BLOCK {
                    return conn_err(frame::PROTOCOL_ERROR, "header block too large");
                }
                if head.has(frame::END_HEADERS) {
                    let p = self.partial.take().unwrap();
                    self.on_header_block(cx, p.stream, p.end_stream, &p.block)?;
                }
                Ok(())
            }
            frame::PRIORITY => {
                if head.stream == 0 || head.len != 5 {
                    return conn_err(frame::PROTOCOL_ERROR, "malformed PRIORITY");
                }
                Ok(())
            }
            frame::RST_STREAM => {
                if head.stream == 0 || head.len != 4 {
                    return conn_err(frame::PROTOCOL_ERROR, "malformed RST_STREAM");
                }
                if head.stream > self.last_stream {
                    return conn_err(frame::PROTOCOL_ERROR, "RST_STREAM on an idle stream");
                }
                self.reset_by_client(head.stream);
                Ok(())
            }
            frame::SETTINGS => self.on_settings(head, &payload),
            frame::PUSH_PROMISE => conn_err(frame::PROTOCOL_ERROR, "PUSH_PROMISE from a client"),
            frame::PING => {
                if head.stream != 0 || head.len != 8 {
                    return conn_err(frame::PROTOCOL_ERROR, "malformed PING");
                }
                if !head.has(frame::ACK) {
                    frame::put_frame(&mut self.wbuf, frame::PING, frame::ACK, 0, &payload);
                }
                Ok(())
            }
            frame::GOAWAY => {
                if head.stream != 0 {
                    return conn_err(frame::PROTOCOL_ERROR, "GOAWAY on a stream");
                }
                self.client_gone = true;
                Ok(())
            }
            frame::WINDOW_UPDATE => self.on_window_update(head, &payload),
            // Unknown frame types are ignored (§5.5).
            _ => Ok(()),
        }
    }

    fn on_settings(&mut self, head: Head, p: &[u8]) -> Result<(), ConnError> {
        if head.stream != 0 {
            return conn_err(frame::PROTOCOL_ERROR, "SETTINGS on a stream");
        }
        if head.has(frame::ACK) {
            if !p.is_empty() {
                return conn_err(frame::FRAME_SIZE_ERROR, "SETTINGS ACK with a payload");
            }
            return Ok(());
        }
        if p.len() % 6 != 0 {
            return conn_err(frame::FRAME_SIZE_ERROR, "SETTINGS of a wrong length");
        }
        for s in p.chunks(6) {
            let id = u16::from_be_bytes([s[0], s[1]]);
            let v = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
            match id {
                frame::SETTINGS_INITIAL_WINDOW_SIZE => {
                    if v as i64 > frame::MAX_WINDOW {
                        return conn_err(frame::FLOW_CONTROL_ERROR, "SETTINGS_INITIAL_WINDOW_SIZE too large");
                    }
                    // Every stream's window moves by the difference (§6.9.2).
                    let delta = v as i64 - self.peer_initial_window;
                    self.peer_initial_window = v as i64;
                    let mut grew = Vec::new();
                    for (id, s) in self.streams.iter_mut() {
                        s.send_window += delta;
                        if s.send_window > frame::MAX_WINDOW {
                            return conn_err(frame::FLOW_CONTROL_ERROR, "stream window overflow");
                        }
                        if delta > 0 && !s.out.is_empty() {
                            grew.push(*id);
                        }
                    }
                    for id in grew {
                        self.mark_blocked(id);
                    }
                }
                frame::SETTINGS_MAX_FRAME_SIZE => {
                    if !(frame::MIN_MAX_FRAME_SIZE..=frame::MAX_MAX_FRAME_SIZE).contains(&v) {
                        return conn_err(frame::PROTOCOL_ERROR, "SETTINGS_MAX_FRAME_SIZE out of range");
                    }
                    self.peer_max_frame = v as usize;
                }
                frame::SETTINGS_ENABLE_PUSH if v > 1 => {
                    return conn_err(frame::PROTOCOL_ERROR, "SETTINGS_ENABLE_PUSH not 0 or 1");
                }
                // We never index response fields, so the client's table size does not
                // matter; nor do its stream limit (we open none) or header list size
                // (our response blocks are tiny, the bridged ones a few fields).
                _ => {}
            }
        }
        frame::put_frame(&mut self.wbuf, frame::SETTINGS, frame::ACK, 0, &[]);
        Ok(())
    }

    fn on_window_update(&mut self, head: Head, p: &[u8]) -> Result<(), ConnError> {
        if p.len() != 4 {
            return conn_err(frame::FRAME_SIZE_ERROR, "WINDOW_UPDATE of a wrong length");
        }
        let inc = (u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & 0x7fff_ffff) as i64;
        if head.stream == 0 {
            if inc == 0 {
                return conn_err(frame::PROTOCOL_ERROR, "WINDOW_UPDATE of 0");
            }
            self.send_window += inc;
            if self.send_window > frame::MAX_WINDOW {
                return conn_err(frame::FLOW_CONTROL_ERROR, "connection window overflow");
            }
            return Ok(());
        }
        if head.stream > self.last_stream {
            return conn_err(frame::PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream");
        }
        let Some(s) = self.streams.get_mut(&head.stream) else {
            return Ok(()); // a closed stream: ignored
        };
        if inc == 0 {
            self.reset(head.stream, frame::PROTOCOL_ERROR);
            return Ok(());
        }
        s.send_window += inc;
        if s.send_window > frame::MAX_WINDOW {
            self.reset(head.stream, frame::FLOW_CONTROL_ERROR);
            return Ok(());
        }
        if !s.out.is_empty() {
            self.mark_blocked(head.stream);
        }
        Ok(())
    }

    fn on_headers(&mut self, cx: &mut Context<'_>, head: Head, payload: BytesMut) -> Result<(), ConnError> {
        if head.stream == 0 {
            return conn_err(frame::PROTOCOL_ERROR, "HEADERS on stream 0");
        }
        let Some((start, end)) = frame::unpad(&head, &payload) else {
            return conn_err(frame::PROTOCOL_ERROR, "HEADERS padding longer than the frame");
        };
        let block = &payload[start..end];
        if head.has(frame::END_HEADERS) {
            return self.on_header_block(cx, head.stream, head.has(frame::END_STREAM), block);
        }
        self.partial = Some(Partial { stream: head.stream, end_stream: head.has(frame::END_STREAM), block: block.to_vec() });
        Ok(())
    }

    fn on_header_block(&mut self, cx: &mut Context<'_>, id: u32, end_stream: bool, block: &[u8]) -> Result<(), ConnError> {
        // Every block is decoded, whatever becomes of its stream: the table is the connection's.
        let mut fields = std::mem::take(&mut self.fields);
        let decoded = self.decoder.decode(block, &mut fields);
        let r = match decoded {
            Err(e) => conn_err(frame::COMPRESSION_ERROR, e),
            Ok(()) => self.on_fields(cx, id, end_stream, &fields),
        };
        self.fields = fields;
        r
    }

    fn on_fields(&mut self, cx: &mut Context<'_>, id: u32, end_stream: bool, fields: &Fields) -> Result<(), ConnError> {
        if id <= self.last_stream {
            // Trailers of a request (gRPC clients send none): they end its body.
            if let Some(s) = self.streams.get_mut(&id) {
                if s.recv_end || !end_stream {
                    self.reset(id, frame::PROTOCOL_ERROR);
                    return Ok(());
                }
                return self.end_request(cx, id);
            }
            // A stream already closed, or reset by us: ignored (§5.4.2).
            return Ok(());
        }
        if id % 2 == 0 {
            return conn_err(frame::PROTOCOL_ERROR, "a client stream with an even id");
        }
        self.last_stream = id;
        if self.client_gone {
            frame::put_rst_stream(&mut self.wbuf, id, frame::REFUSED_STREAM);
            return Ok(());
        }
        // A replicated member's RangeStreams go to the routes (their linearizable
        // wait is the routes'); its writes stay here and are forwarded (forward.rs).
        let ctx = &self.services.ctx;
        let hot = hot_method(fields).filter(|m| *m != Method::RangeStream || ctx.replica.get().is_none());
        let rpc = fields.get(b":path").and_then(|p| std::str::from_utf8(p).ok()).and_then(|p| GrpcMetrics::global().rpc(p));
        match hot {
            Some(method) => {
                let meta = Meta {
                    token: fields.get(b"token").and_then(|v| std::str::from_utf8(v).ok()).map(str::to_string),
                    authorization: fields.get(b"authorization").and_then(|v| std::str::from_utf8(v).ok()).map(str::to_string),
                    timeout: fields.get(b"grpc-timeout").and_then(|v| std::str::from_utf8(v).ok()).and_then(crate::server::deadline::parse_timeout),
                    client_cn: self.client_cn.clone(),
                };
                let mut s = Stream::new(Recv::Unary { method, meta, body: BytesMut::new(), credit: 0 }, self.peer_initial_window);
                s.rpc = rpc;
                if let Some(i) = rpc {
                    GrpcMetrics::global().start(i);
                }
                self.streams.insert(id, s);
                if end_stream {
                    self.end_request(cx, id)?;
                }
            }
            None => {
                let (req, tx) = match bridge::request(fields, id, self.credit.clone(), self.local, self.remote, self.client_cn.as_ref()) {
                    Ok(r) => r,
                    Err(_) => {
                        frame::put_rst_stream(&mut self.wbuf, id, frame::PROTOCOL_ERROR);
                        return Ok(());
                    }
                };
                let mut s = Stream::new(Recv::Bridged { tx: Some(tx), credit: 0 }, self.peer_initial_window);
                if end_stream {
                    s.recv = Recv::Bridged { tx: None, credit: 0 };
                    s.recv_end = true;
                }
                self.streams.insert(id, s);
                // The routes count the call themselves (CountRpcs).
                let pump = Pump::start(&mut self.routes, id, req);
                self.run_pump(pump);
            }
        }
        Ok(())
    }

    fn on_data(&mut self, cx: &mut Context<'_>, head: Head, payload: BytesMut) -> Result<(), ConnError> {
        if head.stream == 0 {
            return conn_err(frame::PROTOCOL_ERROR, "DATA on stream 0");
        }
        let Some((start, end)) = frame::unpad(&head, &payload) else {
            return conn_err(frame::PROTOCOL_ERROR, "DATA padding longer than the frame");
        };
        let n = head.len as u32;
        if head.stream > self.last_stream {
            return conn_err(frame::PROTOCOL_ERROR, "DATA on an idle stream");
        }
        self.recv_window -= n as i64;
        if self.recv_window < 0 {
            return conn_err(frame::FLOW_CONTROL_ERROR, "DATA past the connection's window");
        }
        let max = self.max_message;
        let Some(s) = self.streams.get_mut(&head.stream) else {
            // A stream already closed (or reset by us: its frames in flight are ignored,
            // §5.4.2): its bytes still count against the connection.
            self.conn_credit += n;
            return Ok(());
        };
        if s.recv_end {
            self.conn_credit += n;
            self.reset(head.stream, frame::STREAM_CLOSED);
            return Ok(());
        }
        s.recv_window -= n as i64;
        if s.recv_window < 0 {
            self.conn_credit += n;
            self.reset(head.stream, frame::FLOW_CONTROL_ERROR);
            return Ok(());
        }
        let end_stream = head.has(frame::END_STREAM);
        match &mut s.recv {
            Recv::Unary { body, credit, .. } => {
                self.conn_credit += n;
                body.extend_from_slice(&payload[start..end]);
                // Refused from the length the message declares, as grpc-go does, before its
                // bytes are read: etcd's ResourceExhausted and message.
                let declared = (body.len() >= 5).then(|| u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize);
                if let Some(len) = declared.filter(|&l| l > max) {
                    s.recv = Recv::Done;
                    s.recv_end = true;
                    self.answer(head.stream, Err(crate::server::grpc_too_large(len, max)));
                    self.reset(head.stream, frame::NO_ERROR);
                    return Ok(());
                }
                *credit += n;
                if !end_stream && *credit >= STREAM_WINDOW / 2 {
                    frame::put_window_update(&mut self.wbuf, head.stream, *credit);
                    s.recv_window += *credit as i64;
                    *credit = 0;
                }
            }
            Recv::Bridged { tx, credit } => {
                // Padding is given back at once; the data when the service reads it.
                let pad = n - (end - start) as u32;
                self.conn_credit += pad;
                *credit += pad;
                // A body its service no longer reads: the bytes are given back at once.
                let unread = match tx {
                    Some(tx) => tx.send(Ok(payload.freeze().slice(start..end))).is_err(),
                    None => true,
                };
                if unread {
                    self.conn_credit += n - pad;
                }
            }
            Recv::Done => self.conn_credit += n,
        }
        if end_stream {
            return self.end_request(cx, head.stream);
        }
        Ok(())
    }

    fn end_request(&mut self, cx: &mut Context<'_>, id: u32) -> Result<(), ConnError> {
        let Some(s) = self.streams.get_mut(&id) else { return Ok(()) };
        s.recv_end = true;
        match std::mem::replace(&mut s.recv, Recv::Done) {
            Recv::Unary { method, meta, body, .. } => self.dispatch(cx, id, method, meta, body),
            Recv::Bridged { tx, credit } => {
                drop(tx);
                s.recv = Recv::Bridged { tx: None, credit };
            }
            Recv::Done => {}
        }
        self.maybe_close(id);
        Ok(())
    }

    /// Starts a hot call on its whole request.
    fn dispatch(&mut self, cx: &mut Context<'_>, id: u32, method: Method, meta: Meta, body: BytesMut) {
        let msg = match grpc_message(body) {
            Ok(m) => m,
            Err(st) => return self.answer(id, Err(st)),
        };
        if method == Method::RangeStream {
            // Answered as a stream, through a pump: one chunk read and encoded at a
            // time, the next only once the client's window has taken this one.
            match unary::range_stream(&self.services, msg, meta) {
                Err(st) => self.answer(id, Err(st)),
                Ok(stream) => {
                    let rpc = self.streams.get_mut(&id).and_then(|s| s.rpc.take());
                    self.run_pump(Pump::framed(id, stream, rpc));
                }
            }
            return;
        }
        let (fut, spawn) = unary::call(&self.services, method, msg, meta);
        // A call that panics answers Internal (its stream alone, as a hyper stream task would),
        // whether it runs here or on a task of its own.
        let fut = AssertUnwindSafe(fut).catch_unwind().map(|r| r.unwrap_or_else(|_| Err(Status::internal("the call panicked"))));
        let (handle, reg) = AbortHandle::new_pair();
        if let Some(s) = self.streams.get_mut(&id) {
            s.abort = Some(handle);
        }
        let fut = Abortable::new(fut, reg);
        let mut call: Call = if spawn {
            let task = tokio::spawn(fut);
            Box::pin(async move { (id, task.await.unwrap_or(Err(futures::future::Aborted))) })
        } else {
            Box::pin(async move { (id, fut.await) })
        };
        // Most calls are done in their first poll: answered here, never queued.
        match call.as_mut().poll(cx) {
            Poll::Ready((id, r)) => self.finish_call(id, r),
            Poll::Pending => self.calls.push(call),
        }
    }

    fn finish_call(&mut self, id: u32, r: Result<Result<Reply, Status>, futures::future::Aborted>) {
        match r {
            Ok(r) => self.answer(id, r),
            // Aborted: the client reset the stream, which was counted then.
            Err(_) => {}
        }
    }

    // ---- writing ----

    /// A hot call's answer: headers, the message, trailers — or the error in the headers alone.
    fn answer(&mut self, id: u32, r: Result<Reply, Status>) {
        let max_frame = self.peer_max_frame;
        let Some(s) = self.streams.get_mut(&id) else { return };
        s.abort = None;
        let code = match &r {
            Ok(_) => 0,
            Err(st) => st.code() as usize,
        };
        if let Some(i) = s.rpc.take() {
            GrpcMetrics::global().handled(i, code);
        }
        match r {
            Err(st) => {
                let mut block = hpack::GRPC_HEADERS.to_vec();
                hpack::put_grpc_status(&mut block, st.code() as i32, st.message());
                frame::put_headers(&mut self.wbuf, id, &block, true, max_frame);
                s.sent_end = true;
            }
            Ok(reply) => {
                frame::put_headers(&mut self.wbuf, id, hpack::GRPC_HEADERS, false, max_frame);
                let len = reply.encoded_len();
                let total = len + 5;
                let fits = total <= max_frame && (total as i64) <= s.send_window && (total as i64) <= self.send_window;
                // Not ahead of answers already waiting for the connection's window.
                if fits && s.out.is_empty() && self.blocked.is_empty() {
                    // The usual case: the whole message in one DATA frame, encoded in place.
                    frame::put_head(&mut self.wbuf, total, frame::DATA, 0, id);
                    self.wbuf.push(0);
                    self.wbuf.extend_from_slice(&(len as u32).to_be_bytes());
                    reply.encode(&mut self.wbuf);
                    s.send_window -= total as i64;
                    self.send_window -= total as i64;
                    frame::put_headers(&mut self.wbuf, id, hpack::GRPC_OK_TRAILERS, true, max_frame);
                    s.sent_end = true;
                } else {
                    let msg = match reply {
                        // Encoded (and framed) off the request path: sent from its own buffer.
                        Reply::Framed(b) => b,
                        r => {
                            let mut m = Vec::with_capacity(total);
                            m.push(0);
                            m.extend_from_slice(&(len as u32).to_be_bytes());
                            r.encode(&mut m);
                            Bytes::from(m)
                        }
                    };
                    s.out_bytes += total;
                    s.out.push_back(Out::Data { buf: msg, end: false });
                    s.out.push_back(Out::Trailers(hpack::GRPC_OK_TRAILERS.to_vec()));
                    self.drain(id);
                }
            }
        }
        self.maybe_close(id);
    }

    /// Writes what a stream's windows allow; a stream left waiting goes to `blocked`.
    fn drain(&mut self, id: u32) {
        let max_frame = self.peer_max_frame;
        let Some(s) = self.streams.get_mut(&id) else { return };
        while let Some(front) = s.out.front_mut() {
            match front {
                Out::Data { buf, end } => {
                    let n = (buf.len() as i64).min(s.send_window).min(self.send_window).min(max_frame as i64).max(0) as usize;
                    if n == 0 && !buf.is_empty() {
                        if !s.in_blocked {
                            s.in_blocked = true;
                            self.blocked.push_back(id);
                        }
                        return;
                    }
                    let last = n == buf.len();
                    let flags = if last && *end { frame::END_STREAM } else { 0 };
                    if n >= SEGMENT_MIN {
                        frame::put_head(&mut self.wbuf, n, frame::DATA, flags, id);
                        let seg = buf.split_to(n);
                        push_segment(&mut self.wq, &mut self.wq_bytes, &mut self.wbuf, &mut self.wpos, seg);
                    } else {
                        frame::put_frame(&mut self.wbuf, frame::DATA, flags, id, &buf[..n]);
                        buf.advance(n);
                    }
                    s.send_window -= n as i64;
                    self.send_window -= n as i64;
                    s.out_bytes -= n;
                    if last {
                        if *end {
                            s.sent_end = true;
                        }
                        s.out.pop_front();
                    }
                }
                Out::Trailers(block) => {
                    frame::put_headers(&mut self.wbuf, id, block, true, max_frame);
                    s.sent_end = true;
                    s.out.pop_front();
                }
            }
        }
        if s.out_bytes < PUMP_QUEUE && s.parked.is_some() {
            let unwritten = self.wq_bytes + self.wbuf.len() - self.wpos;
            if unwritten < WRITE_HIGH {
                let p = s.parked.take().unwrap();
                self.run_pump(p);
            } else {
                self.parked_out.push(id);
            }
        }
    }

    /// Output queued and not yet written.
    fn unwritten(&self) -> usize {
        self.wq_bytes + self.wbuf.len() - self.wpos
    }

    /// Pumps parked for the output go on once it has drained.
    fn resume_parked(&mut self) {
        if self.parked_out.is_empty() || self.unwritten() >= WRITE_HIGH / 2 {
            return;
        }
        for id in std::mem::take(&mut self.parked_out) {
            if let Some(s) = self.streams.get_mut(&id) {
                if s.out_bytes < PUMP_QUEUE {
                    if let Some(p) = s.parked.take() {
                        self.run_pump(p);
                    }
                }
            }
        }
    }

    fn mark_blocked(&mut self, id: u32) {
        if let Some(s) = self.streams.get_mut(&id) {
            if !s.in_blocked {
                s.in_blocked = true;
                self.blocked.push_back(id);
            }
        }
    }

    /// Gives the blocked streams what the windows now allow, in turn.
    fn unblock(&mut self) {
        let n = self.blocked.len();
        for _ in 0..n {
            if self.send_window <= 0 {
                return;
            }
            let Some(id) = self.blocked.pop_front() else { return };
            if let Some(s) = self.streams.get_mut(&id) {
                s.in_blocked = false;
            }
            self.drain(id);
            self.maybe_close(id);
        }
    }

    /// Forgets a stream both sides have ended. A response finished before its
    /// request tells the client to stop sending (RST_STREAM NO_ERROR, §8.1).
    fn maybe_close(&mut self, id: u32) {
        let Some(s) = self.streams.get(&id) else { return };
        if !s.sent_end || !s.out.is_empty() {
            return;
        }
        if !s.recv_end {
            frame::put_rst_stream(&mut self.wbuf, id, frame::NO_ERROR);
        }
        self.remove(id);
    }

    fn remove(&mut self, id: u32) {
        if let Some(s) = self.streams.remove(&id) {
            end_stream(s);
        }
    }

    /// We end a stream (a stream error).
    fn reset(&mut self, id: u32, code: u32) {
        frame::put_rst_stream(&mut self.wbuf, id, code);
        self.remove(id);
    }

    /// The client ended a stream: its call is dropped (and counted as Canceled).
    fn reset_by_client(&mut self, id: u32) {
        self.remove(id);
    }

    fn on_pump(&mut self, pump: Pump, ev: Event) {
        let id = pump.stream;
        let max_frame = self.peer_max_frame;
        let Some(s) = self.streams.get_mut(&id) else { return };
        match ev {
            Event::Head { status, headers, end } => {
                let mut block = Vec::with_capacity(64);
                hpack::put_status(&mut block, status);
                for (n, v) in headers.iter() {
                    hpack::put_literal(&mut block, n.as_str().as_bytes(), v.as_bytes());
                }
                frame::put_headers(&mut self.wbuf, id, &block, end, max_frame);
                if end {
                    s.sent_end = true;
                }
            }
            Event::Data(d) => {
                s.out_bytes += d.len();
                s.out.push_back(Out::Data { buf: d, end: false });
                self.drain(id);
            }
            Event::Trailers(t) => {
                let mut block = Vec::with_capacity(64);
                for (n, v) in t.iter() {
                    hpack::put_literal(&mut block, n.as_str().as_bytes(), v.as_bytes());
                }
                s.out.push_back(Out::Trailers(block));
                self.drain(id);
            }
            Event::End => {
                s.out.push_back(Out::Data { buf: Bytes::new(), end: true });
                self.drain(id);
            }
            Event::Failed => {
                self.reset(id, frame::INTERNAL_ERROR);
                return;
            }
        }
        if pump.done() {
            self.maybe_close(id);
            return;
        }
        let full = self.unwritten() >= WRITE_HIGH;
        let Some(s) = self.streams.get_mut(&id) else { return };
        // Held back by the client's window (its queue) or by the socket (the output):
        // a stream is read only as fast as the client takes it.
        if s.out_bytes >= PUMP_QUEUE || full {
            s.parked = Some(pump);
            if full {
                self.parked_out.push(id);
            }
        } else {
            self.run_pump(pump);
        }
    }

    /// Polls a pump (again) until its next event; the stream keeps the means to stop it.
    fn run_pump(&mut self, pump: Pump) {
        let (handle, reg) = AbortHandle::new_pair();
        if let Some(s) = self.streams.get_mut(&pump.stream) {
            s.pump_abort = Some(handle);
        }
        self.pumps.push(Abortable::new(bridge::Next(Some(pump)), reg));
    }

    /// Window given back for what bridged services read, and for hot calls' bytes.
    fn give_credit(&mut self) {
        for (id, n) in self.credit.take() {
            self.conn_credit += n as u32;
            if let Some(Stream { recv: Recv::Bridged { credit, .. }, recv_end: false, recv_window, .. }) = self.streams.get_mut(&id) {
                *credit += n as u32;
                if *credit >= CREDIT_STEP.min(STREAM_WINDOW / 2) {
                    frame::put_window_update(&mut self.wbuf, id, *credit);
                    *recv_window += *credit as i64;
                    *credit = 0;
                }
            }
        }
        if self.conn_credit >= CREDIT_STEP {
            frame::put_window_update(&mut self.wbuf, 0, self.conn_credit);
            self.recv_window += self.conn_credit as i64;
            self.conn_credit = 0;
        }
    }

    /// Writes the output: the queued segments (vectored), then the frame buffer. After
    /// WRITE_PER_POLL bytes it yields (Pending, woken at once) so that one connection's
    /// large answer does not hold the worker from the others' small ones.
    fn poll_write(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let mut written = 0;
        loop {
            if written >= WRITE_PER_POLL && self.wq_bytes + self.wbuf.len() > self.wpos {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            let n = if !self.wq.is_empty() {
                let slices: Vec<std::io::IoSlice<'_>> = self.wq.iter().take(64).map(|b| std::io::IoSlice::new(b)).collect();
                let n = std::task::ready!(Pin::new(&mut self.io).poll_write_vectored(cx, &slices))?;
                let mut left = n;
                while left > 0 {
                    let front = self.wq.front_mut().unwrap();
                    if front.len() <= left {
                        left -= front.len();
                        self.wq.pop_front();
                    } else {
                        front.advance(left);
                        left = 0;
                    }
                }
                self.wq_bytes -= n;
                n
            } else if self.wpos < self.wbuf.len() {
                let n = std::task::ready!(Pin::new(&mut self.io).poll_write(cx, &self.wbuf[self.wpos..]))?;
                self.wpos += n;
                n
            } else {
                break;
            };
            if n == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            written += n;
        }
        // A TLS stream takes what we write into its own buffer of encrypted records
        // and only tries to send them when written to or flushed: flushed here, a
        // record left over when the socket was full goes out once it is writable
        // again, not when the client next sends something. Nothing on TCP.
        std::task::ready!(Pin::new(&mut self.io).poll_flush(cx))?;
        self.wbuf.clear();
        self.wpos = 0;
        if self.wbuf.capacity() > (8 << 20) {
            self.wbuf = Vec::with_capacity(64 << 10);
        }
        Poll::Ready(Ok(()))
    }

    fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<usize>> {
        if self.rbuf.capacity() - self.rbuf.len() < 16 << 10 {
            self.rbuf.reserve(64 << 10);
        }
        let spare = self.rbuf.spare_capacity_mut();
        let mut rb = ReadBuf::uninit(spare);
        std::task::ready!(Pin::new(&mut self.io).poll_read(cx, &mut rb))?;
        let n = rb.filled().len();
        // SAFETY: poll_read initialised the first n bytes of the spare capacity.
        unsafe { self.rbuf.set_len(self.rbuf.len() + n) };
        Poll::Ready(Ok(n))
    }

    fn fail(&mut self, e: ConnError) {
        frame::put_goaway(&mut self.wbuf, self.last_stream, e.0, e.1.as_bytes());
        self.closing = true;
        let ids: Vec<u32> = self.streams.keys().copied().collect();
        for id in ids {
            self.remove(id);
        }
    }
}

/// A stream leaving the connection before its end: its call or pump is stopped, its
/// counter counts Canceled, a bridged request body reads an error (the client reset it).
fn end_stream(mut s: Stream) {
    if let Some(a) = s.abort.take() {
        a.abort();
    }
    if let Some(a) = s.pump_abort.take() {
        a.abort();
    }
    if let Some(i) = s.rpc.take() {
        GrpcMetrics::global().handled(i, CANCELED);
    }
    if let Recv::Bridged { tx: Some(tx), .. } = &s.recv {
        let _ = tx.send(Err(Reset("stream reset")));
    }
}

impl<T> Drop for Conn<T> {
    /// The connection ended (closed, failed, or the task dropped): every stream ends
    /// as a reset one does (spawned calls aborted, bridged bodies told).
    fn drop(&mut self) {
        for (_, s) in self.streams.drain() {
            end_stream(s);
        }
    }
}

/// Queues `seg` after what `wbuf` holds: the frame buffer so far becomes a segment of
/// its own (no copy), then `seg`; later frames go to a new buffer.
/// (`wpos`: how much of `wbuf` is written already; it starts again at 0.)
fn push_segment(wq: &mut VecDeque<Bytes>, wq_bytes: &mut usize, wbuf: &mut Vec<u8>, wpos: &mut usize, seg: Bytes) {
    if wbuf.len() > *wpos {
        let head = Bytes::from(std::mem::replace(wbuf, Vec::with_capacity(4 << 10))).slice(*wpos..);
        *wq_bytes += head.len();
        wq.push_back(head);
    } else {
        wbuf.clear();
    }
    *wpos = 0;
    *wq_bytes += seg.len();
    wq.push_back(seg);
}

/// The method a header block asks for, if it is a hot call the transport answers
/// itself: a gRPC POST (content-type application/grpc[+proto]) without message
/// compression. Anything else goes to the routes, which answer it as tonic does.
fn hot_method(fields: &Fields) -> Option<Method> {
    let method = Method::from_path(fields.get(b":path")?)?;
    if fields.get(b":method")? != b"POST" {
        return None;
    }
    let ct = fields.get(b"content-type")?;
    if ct != b"application/grpc" && ct != b"application/grpc+proto" {
        return None;
    }
    if fields.get(b"grpc-encoding").is_some_and(|e| e != b"identity") {
        return None;
    }
    Some(method)
}

/// The one message of a unary request (gRPC's 5-byte prefix: compressed flag, length).
fn grpc_message(body: BytesMut) -> Result<Bytes, Status> {
    if body.len() < 5 {
        return Err(Status::internal(if body.is_empty() { "grpc: request without a message" } else { "grpc: truncated message" }));
    }
    if body[0] != 0 {
        return Err(Status::internal("grpc: compressed flag set with identity or empty encoding"));
    }
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    if body.len() != 5 + len {
        return Err(Status::internal("grpc: a unary request must carry exactly one message"));
    }
    Ok(body.freeze().slice(5..))
}

impl<T: AsyncRead + AsyncWrite + Unpin> Future for Conn<T> {
    type Output = std::io::Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        this.credit.waker.register(cx.waker());
        let mut reads = 0;
        loop {
            let mut busy = false;
            // Read while the client reads what we write. Every path that returns
            // Pending below leaves a waker behind: the read's (it returned Pending),
            // a call's or pump's, the write's, or our own when the budget ran out.
            if !this.read_closed && !this.closing && this.wbuf.len() + this.wq_bytes < WRITE_HIGH {
                match this.poll_read(cx) {
                    Poll::Ready(Ok(0)) => {
                        // An HTTP/2 client that closes its side is gone: its streams end.
                        this.read_closed = true;
                        let ids: Vec<u32> = this.streams.keys().copied().collect();
                        for id in ids {
                            this.remove(id);
                        }
                    }
                    Poll::Ready(Ok(_)) => {
                        reads += 1;
                        busy = true;
                        // The writes of everything this read brought share one log write.
                        let store = this.services.ctx.store.clone();
                        if let Err(e) = store.with_deferred_log_writes(|| this.read_frames(cx)) {
                            this.fail(e);
                        }
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => {}
                }
            }
            while let Poll::Ready(Some((id, r))) = this.calls.poll_next_unpin(cx) {
                this.finish_call(id, r);
                busy = true;
            }
            while let Poll::Ready(Some(r)) = this.pumps.poll_next_unpin(cx) {
                if let Ok((pump, ev)) = r {
                    this.on_pump(pump, ev);
                }
                busy = true;
            }
            this.give_credit();
            this.unblock();
            let wrote = !this.wbuf.is_empty() || !this.wq.is_empty();
            let written = this.poll_write(cx);
            this.resume_parked();
            match written {
                // Written: reading may go on (it stops above WRITE_HIGH).
                Poll::Ready(Ok(())) => busy |= wrote,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
            if this.closing || (this.read_closed && this.streams.is_empty()) {
                // Ends our side cleanly (TLS: close_notify after the last records).
                let _ = std::task::ready!(Pin::new(&mut this.io).poll_shutdown(cx));
                return Poll::Ready(Ok(()));
            }
            if reads >= READS_PER_POLL {
                // The runtime's other tasks get their turn; we come back at once.
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            if !busy {
                return Poll::Pending;
            }
        }
    }
}
