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
    let acc = s.accounted();
    g("etcd_server_quota_backend_bytes", "Current backend storage quota size in bytes (--quota-backend-bytes or the machine's default).", "gauge", s.quota().to_string());
    g("etcd_mvcc_db_total_size_in_bytes", "Accounted size the quota bounds: keys, history, leases, watch state.", "gauge", acc.total().to_string());
    g("etcd_mvcc_db_total_size_in_use_in_bytes", "Accounted size in use (all of it: memory has no free pages to keep).", "gauge", acc.total().to_string());
    g("etcd_debugging_mvcc_keys_total", "Keys in the index (live and with retained history).", "gauge", s.key_count().to_string());
    g("etcd_debugging_mvcc_current_revision", "Current revision.", "gauge", s.current_rev().to_string());
    g("etcd_debugging_mvcc_compact_revision", "Last compaction revision.", "gauge", s.compacted_rev().to_string());
    g("etcd_debugging_lease_total", "Leases held.", "gauge", s.leases.len().to_string());
    g("etcd_debugging_mvcc_watch_stream_total", "Open watch streams.", "gauge", m.watch_streams.load(Ordering::Relaxed).to_string());
    g("etcd_debugging_mvcc_watcher_total", "Active watchers.", "gauge", m.watchers.load(Ordering::Relaxed).to_string());
    g("meganode_watch_catchups_total", "Times a watcher read history because it was behind the watch log.", "counter", m.slow_watcher_catchups.load(Ordering::Relaxed).to_string());
    o.push_str("# HELP meganode_accounted_bytes Accounted size by part (docs/design.md, memory quota).\n# TYPE meganode_accounted_bytes gauge\n");
    for (part, v) in [("kv", acc.kv), ("leases", acc.leases), ("watch_log", acc.watch_log), ("watchers", acc.watchers)] {
        o.push_str(&format!("meganode_accounted_bytes{{part=\"{part}\"}} {v}\n"));
    }
    // etcd's alarm gauge: one series per raised alarm, labelled with the member id in hex as etcd's.
    o.push_str("# HELP etcd_debugging_server_alarms Alarms for every member in cluster. 1 for 'server_id' label with current ID. 2 for 'alarm_type' label with type of this alarm\n# TYPE etcd_debugging_server_alarms gauge\n");
    for (m, t) in s.alarms.get(crate::quota::ALARM_NONE) {
        o.push_str(&format!("etcd_debugging_server_alarms{{alarm_type=\"{}\",server_id=\"{m:x}\"}} 1\n", crate::quota::alarm_name(t)));
    }
    o.push_str("# HELP meganode_requests_total gRPC KV requests by method.\n# TYPE meganode_requests_total counter\n");
    for (name, c) in [("Range", &m.range), ("Put", &m.put), ("DeleteRange", &m.delete), ("Txn", &m.txn)] {
        o.push_str(&format!("meganode_requests_total{{method=\"{name}\"}} {}\n", c.load(Ordering::Relaxed)));
    }
    if let Some(extra) = crate::server::metrics::EXTRA.get() {
        o.push_str(&extra());
    }
    o
}

/// etcd's /health: unhealthy (503) while an alarm is raised, naming the first
/// one, unless the query excludes it (`?exclude=NOSPACE`, repeatable).
fn health(ctx: &Ctx, query: &str) -> (&'static str, &'static str, String) {
    let excluded: Vec<&str> = query.split('&').filter_map(|kv| kv.strip_prefix("exclude=")).collect();
    let raised = ctx.store.alarms.get(crate::quota::ALARM_NONE).into_iter().map(|(_, t)| t).find(|t| !excluded.contains(&crate::quota::alarm_name(*t).as_str()));
    match raised {
        None => ("200 OK", "application/json", "{\"health\":\"true\",\"reason\":\"\"}".to_string()),
        Some(t) => {
            let reason = match t {
                crate::quota::ALARM_NOSPACE => "ALARM NOSPACE",
                crate::quota::ALARM_CORRUPT => "ALARM CORRUPT",
                _ => "ALARM UNKNOWN",
            };
            // http.Error's form: plain text, a newline after the JSON.
            ("503 Service Unavailable", "text/plain; charset=utf-8", format!("{{\"health\":\"false\",\"reason\":\"{reason}\"}}\n"))
        }
    }
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
            let target = req.split_whitespace().nth(1).unwrap_or("/");
            let (path, query) = target.split_once('?').unwrap_or((target, ""));
            let (status, ctype, body) = match path {
                "/metrics" => ("200 OK", "text/plain; version=0.0.4", render(&ctx)),
                "/health" => health(&ctx, query),
                "/readyz" if ctx.store.alarms.corrupt() => ("503 Service Unavailable", "text/plain; charset=utf-8", "[-]data_corruption failed: alarm activated: CORRUPT\nreadyz check failed\n".to_string()),
                "/livez" | "/readyz" => ("200 OK", "application/json", "{\"health\":\"true\",\"reason\":\"\"}".to_string()),
                _ => ("404 Not Found", "text/plain", "not found\n".to_string()),
            };
            let resp = format!("HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
            let _ = sock.write_all(resp.as_bytes()).await;
        });
    }
}
