//! Prometheus metrics and health on --listen-metrics-urls, with etcd's metric
//! names where etcd has one. A tiny HTTP/1 responder: nothing here is hot.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::Ctx;

#[derive(Default)]
pub struct Metrics {
    pub range: AtomicU64,
    pub put: AtomicU64,
    pub delete: AtomicU64,
    pub txn: AtomicU64,
    pub watch_streams: AtomicU64,
    pub watchers: AtomicU64,
    pub slow_watcher_catchups: AtomicU64,
}

pub fn render(ctx: &Ctx) -> String {
    let m = &ctx.metrics;
    let s = &ctx.store;
    let mut o = String::new();
    let mut g = |name: &str, help: &str, kind: &str, v: String| {
        o.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}\n"));
    };
    g("etcd_server_has_leader", "Whether a leader exists (always: single member).", "gauge", "1".into());
    g("etcd_mvcc_db_total_size_in_bytes", "Approximate bytes held by keys, values and history.", "gauge", s.size_bytes().to_string());
    g("etcd_debugging_mvcc_keys_total", "Keys in the index (live and with retained history).", "gauge", s.key_count().to_string());
    g("etcd_debugging_mvcc_current_revision", "Current revision.", "gauge", s.current_rev().to_string());
    g("etcd_debugging_mvcc_compact_revision", "Last compaction revision.", "gauge", s.compacted_rev().to_string());
    g("etcd_debugging_lease_total", "Leases held.", "gauge", s.leases.len().to_string());
    g("etcd_debugging_mvcc_watch_stream_total", "Open watch streams.", "gauge", m.watch_streams.load(Ordering::Relaxed).to_string());
    g("etcd_debugging_mvcc_watcher_total", "Active watchers.", "gauge", m.watchers.load(Ordering::Relaxed).to_string());
    g("meganode_watch_catchups_total", "Times a watcher read history because it was behind the watch log.", "counter", m.slow_watcher_catchups.load(Ordering::Relaxed).to_string());
    o.push_str("# HELP meganode_requests_total gRPC KV requests by method.\n# TYPE meganode_requests_total counter\n");
    for (name, c) in [("Range", &m.range), ("Put", &m.put), ("DeleteRange", &m.delete), ("Txn", &m.txn)] {
        o.push_str(&format!("meganode_requests_total{{method=\"{name}\"}} {}\n", c.load(Ordering::Relaxed)));
    }
    if let Some(extra) = crate::server::metrics::EXTRA.get() {
        o.push_str(&extra());
    }
    o
}

/// Extra metric text from other parts of the binary (the write-ahead log).
pub static EXTRA: std::sync::OnceLock<Box<dyn Fn() -> String + Send + Sync>> = std::sync::OnceLock::new();

pub async fn serve(ctx: Arc<Ctx>, listener: TcpListener) {
    loop {
        let Ok((mut sock, _)) = listener.accept().await else { continue };
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            let n = match sock.read(&mut buf).await {
                Ok(n) => n,
                Err(_) => return,
            };
            let req = String::from_utf8_lossy(&buf[..n]);
            let path = req.split_whitespace().nth(1).unwrap_or("/");
            let (status, ctype, body) = match path {
                "/metrics" => ("200 OK", "text/plain; version=0.0.4", render(&ctx)),
                "/health" | "/livez" | "/readyz" => ("200 OK", "application/json", "{\"health\":\"true\",\"reason\":\"\"}".to_string()),
                _ => ("404 Not Found", "text/plain", "not found\n".to_string()),
            };
            let resp = format!("HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
            let _ = sock.write_all(resp.as_bytes()).await;
        });
    }
}
