//! The store's own HTTP/2 server for the hot unary RPCs.
//!
//! Why: a unary call that does no store work (Status, a Range of a missing key)
//! cost 11–13 µs of server CPU through tonic/hyper/h2 — a task spawned per
//! stream, a tower stack, a header map and its hashing per request and per
//! response, h2's stream bookkeeping, one write per response — which by itself
//! was 0.15–0.17× of etcd's whole put (docs/bench/floor/), where issue 12 asks for
//! the put at ≤ 0.2×. Here a connection is one task: the hot calls (KV Range, Put,
//! DeleteRange, Txn, Maintenance Status: `unary`) run on it and most finish in
//! their first poll; their answers are encoded in place into one output buffer,
//! written once per turn of the loop for every call that finished in it.
//!
//! What it is not: everything else — Watch, LeaseKeepAlive and the other Lease
//! calls, Lock, Election, Auth, Cluster, the rest of Maintenance, the JSON
//! gateway and the HTTP endpoints when asked over HTTP/2 — is bridged, stream by
//! stream, to the same tonic routes as before (`bridge`), and HTTP/1.1
//! connections (etcd's endpoints, the gateway) and TLS listeners are served by
//! tonic's server whole. The hot calls run the same service code as through
//! tonic (`KvService::*_call`), so answers and errors do not depend on the path.
//!
//! Modules: `frame` (the wire format), `hpack` (header blocks), `conn` (a
//! connection: streams, flow control, the loop), `unary` (the hot calls; a Range
//! answer is encoded from the store's buffers by `server::range_wire`), `bridge`,
//! `tls` (the handshake and the client's certificate).
pub mod bridge;
pub mod conn;
pub mod forward;
pub mod frame;
pub mod hpack;
#[cfg(test)]
mod tests;
pub mod tls;
pub mod unary;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use crate::server::Ctx;

pub use crate::server::metrics::count_connection;

/// How long a connection may take to send the 24 bytes of the HTTP/2 preface
/// once it has sent the first of them.
pub(crate) const PREFACE_WAIT: Duration = Duration::from_secs(10);

/// Whether a new connection speaks HTTP/2 with prior knowledge (its first bytes
/// are the preface), without taking any byte from it.
async fn speaks_h2(s: &TcpStream) -> std::io::Result<bool> {
    let mut buf = [0u8; 24];
    let start = tokio::time::Instant::now();
    loop {
        let n = s.peek(&mut buf).await?;
        if n == 0 || buf[..n] != frame::PREFACE[..n] {
            return Ok(false);
        }
        if n == buf.len() {
            return Ok(true);
        }
        if start.elapsed() > PREFACE_WAIT {
            return Ok(false);
        }
        // Part of the preface: the rest is on its way.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// A store served on 127.0.0.1 (a free port) by this transport alone, every
/// connection that is not HTTP/2 closed: for tests and embedders that want the
/// hot path without tonic's server beside it.
pub async fn serve_local(ctx: Arc<Ctx>) -> std::io::Result<std::net::SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let routes = crate::server::routes(&ctx, crate::server::decode_limit(ctx.cfg.max_request_bytes));
    let (tx, mut rx) = mpsc::unbounded_channel::<TcpStream>();
    tokio::spawn(async move { while rx.recv().await.is_some() {} });
    tokio::spawn(serve(listener, ctx, routes, tx));
    Ok(addr)
}

/// The next connection, Nagle's algorithm off (it would hold small answers back
/// ~40 ms). Out of descriptors, or a connection aborted before it was taken: the
/// listener goes on (as tonic's does); a short pause lets descriptors free.
async fn accept(listener: &TcpListener) -> (TcpStream, std::net::SocketAddr) {
    loop {
        match listener.accept().await {
            Ok((s, remote)) => {
                let _ = s.set_nodelay(true);
                return (s, remote);
            }
            Err(e) => {
                if matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE) | Some(libc::ENOBUFS) | Some(libc::ENOMEM)) {
                    eprintln!("meganode-store: accept: {e}; retrying in 100 ms");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}

/// Serves the HTTP/2 connections followers open over the peer port for the
/// calls they forward to this member (`replication::peer::connect_h2`), as a
/// plaintext client connection: the same routes and services as a client URL.
pub fn forwarded_h2_handler(ctx: Arc<Ctx>) -> crate::replication::peer::ForwardHandler {
    let max_message = ctx.cfg.max_request_bytes + crate::server::GRPC_OVERHEAD;
    let routes = bridge::routes(crate::server::routes(&ctx, crate::server::decode_limit(ctx.cfg.max_request_bytes)));
    let services = unary::Services::new(ctx);
    Arc::new(move |s, remote| {
        let (services, routes) = (services.clone(), routes.clone());
        tokio::spawn(async move {
            let _ = conn::Conn::new(s, services, routes, max_message, None, Some(remote)).await;
        });
    })
}

/// Serves a plaintext listener: HTTP/2 connections here, every other one handed
/// to tonic's server through `others`.
pub async fn serve(listener: TcpListener, ctx: Arc<Ctx>, routes: tonic::service::Routes, others: mpsc::UnboundedSender<TcpStream>) -> std::io::Result<()> {
    // etcd's gRPC limit: a hot call's message larger than this is refused from its
    // declared length, as grpc-go does, before its bytes are read.
    let max_message = ctx.cfg.max_request_bytes + crate::server::GRPC_OVERHEAD;
    let services = unary::Services::new(ctx);
    let routes = bridge::routes(routes);
    loop {
        let (s, remote) = accept(&listener).await;
        let (services, routes, others) = (services.clone(), routes.clone(), others.clone());
        tokio::spawn(async move {
            match speaks_h2(&s).await {
                Ok(true) => {
                    count_connection(true, false);
                    let local = s.local_addr().ok();
                    let _ = conn::Conn::new(s, services, routes, max_message, local, Some(remote)).await;
                }
                Ok(false) => {
                    count_connection(false, false);
                    let _ = others.send(s);
                }
                Err(_) => {}
            }
        });
    }
}
