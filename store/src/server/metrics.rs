//! Prometheus metrics and health on --listen-metrics-urls (and, through
//! http_endpoints, on the client URLs), with etcd's metric
//! names where etcd has one. A tiny HTTP/1 responder: nothing here is hot.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::Ctx;
pub use crate::histogram::Histogram;

#[derive(Default)]
pub struct Metrics {
    pub range: AtomicU64,
    pub put: AtomicU64,
    pub delete: AtomicU64,
    pub txn: AtomicU64,
    pub watch_streams: AtomicU64,
    pub watchers: AtomicU64,
    /// Active watchers by the prefix they watch (`watch_prefix`): which of
    /// kube-apiserver's resources hold watches on the store, as etcd cannot say.
    pub watchers_by_prefix: parking_lot::Mutex<std::collections::BTreeMap<String, u64>>,
    pub slow_watcher_catchups: AtomicU64,
    /// Writes that waited at the back-pressure gate (server/backpressure.rs).
    pub backpressure_waits: AtomicU64,
    /// Handling time of the KV RPCs, by method (the order of METHODS).
    pub latency: [Histogram; 4],
}

/// The KV methods counted and timed, as their gRPC names.
pub const METHODS: [&str; 4] = ["Range", "Put", "DeleteRange", "Txn"];
pub const RANGE: usize = 0;
pub const PUT: usize = 1;
pub const DELETE: usize = 2;
pub const TXN: usize = 3;

/// Counts a request of a method and, when dropped (on every return path), records its handling time.
pub struct Timed<'a> {
    h: &'a Histogram,
    t0: Instant,
}

impl Drop for Timed<'_> {
    fn drop(&mut self) {
        self.h.observe(self.t0.elapsed().as_secs_f64());
    }
}

/// The prefix a watch on `key` is counted under: `/registry/<resource>/`
/// (`/registry/<group>/<resource>/` for a group with a dot, as kube-apiserver
/// lays out its keys), otherwise the key's first segment (`/<segment>/`), and
/// `/` for a key without one.
pub fn watch_prefix(key: &[u8]) -> String {
    let k = String::from_utf8_lossy(key);
    let mut parts = k.split('/').skip(1);
    let (Some(first), Some(second)) = (parts.next(), parts.next()) else { return "/".into() };
    if first != "registry" || second.is_empty() {
        return if first.is_empty() { "/".into() } else { format!("/{first}/") };
    }
    match parts.next() {
        Some(third) if second.contains('.') && !third.is_empty() => format!("/registry/{second}/{third}/"),
        _ => format!("/registry/{second}/"),
    }
}

impl Metrics {
    /// A watcher on `key` was created (+1) or went away (-1).
    pub fn watcher_on(&self, key: &[u8], created: bool) {
        let p = watch_prefix(key);
        let mut by = self.watchers_by_prefix.lock();
        if created {
            *by.entry(p).or_default() += 1;
        } else if let Some(n) = by.get_mut(&p) {
            *n -= 1;
            if *n == 0 {
                by.remove(&p);
            }
        }
    }

    /// Count one request of `METHODS[method]` and time it until the guard drops.
    pub fn request(&self, method: usize) -> Timed<'_> {
        [&self.range, &self.put, &self.delete, &self.txn][method].fetch_add(1, Ordering::Relaxed);
        Timed { h: &self.latency[method], t0: Instant::now() }
    }
}

/// Resident set size of this process from /proc/self/status (VmRSS), 0 where unreadable.
fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

pub fn render(ctx: &Ctx) -> String {
    let m = &ctx.metrics;
    let s = &ctx.store;
    let mut o = String::new();
    let mut g = |name: &str, help: &str, kind: &str, v: String| {
        o.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}\n"));
    };
    // etcd's raft gauges. A single member leads itself, and each write is one
    // "proposal", committed and applied at once: its revision counts them.
    let group = ctx.replica.get();
    let st = group.map(|r| r.status());
    let c = group.map(|r| r.counters()).unwrap_or_default();
    let (has_leader, is_leader, is_learner) = match &st {
        Some(st) => (st.leader != 0, st.leader == st.id && st.leader != 0, st.is_learner()),
        None => (true, true, false),
    };
    let (committed, applied) = st.as_ref().map_or((s.current_rev() as u64, s.current_rev() as u64), |st| (st.commit_index, st.applied_index));
    g("etcd_server_has_leader", "Whether or not a leader exists. 1 is existence, 0 is not.", "gauge", u8::from(has_leader).to_string());
    g("etcd_server_is_leader", "Whether or not this member is a leader. 1 if is, 0 otherwise.", "gauge", u8::from(is_leader).to_string());
    g("etcd_server_is_learner", "Whether or not this member is a learner. 1 if is, 0 otherwise.", "gauge", u8::from(is_learner).to_string());
    g("etcd_server_leader_changes_seen_total", "The number of leader changes seen.", "counter", c.leader_changes.max(u64::from(st.is_none())).to_string());
    g("etcd_server_proposals_committed_total", "The total number of consensus proposals committed (the raft commit index; a single member: its revision).", "gauge", committed.to_string());
    g("etcd_server_proposals_applied_total", "The total number of consensus proposals applied (the raft applied index; a single member: its revision).", "gauge", applied.to_string());
    g("etcd_server_proposals_pending", "The current number of pending proposals to commit.", "gauge", c.pending.to_string());
    g("etcd_server_proposals_failed_total", "The total number of failed proposals seen.", "counter", c.failed.to_string());
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
    g("meganode_write_backpressure_waits_total", "Writes that waited before committing because 5,000 committed revisions were not yet durable (a disk slower than the clients).", "counter", m.backpressure_waits.load(Ordering::Relaxed).to_string());
    let pk = &s.packing;
    g("meganode_values_compressed_total", "Values the packer replaced by their zstd form (docs/design.md, packed values).", "counter", pk.packed.load(Ordering::Relaxed).to_string());
    g("meganode_compression_dictionaries_total", "Dictionaries the packer trained.", "counter", pk.dicts.load(Ordering::Relaxed).to_string());
    g("meganode_packer_passes_total", "Passes of the packer over the written prefixes.", "counter", pk.passes.load(Ordering::Relaxed).to_string());
    g("meganode_packer_idle", "1 when the packer's last pass found nothing written since the one before.", "gauge", (pk.idle.load(Ordering::Relaxed) as u8).to_string());
    g("meganode_packer_busy_seconds_total", "Time the packer spent training and compressing.", "counter", (pk.busy_us.load(Ordering::Relaxed) as f64 / 1e6).to_string());
    let sp = &crate::mvcc::spill::STATS;
    g("meganode_history_spilled_values_total", "Values of replaced versions moved from memory to spill files (docs/design.md, history spill).", "counter", sp.values.load(Ordering::Relaxed).to_string());
    g("meganode_history_spilled_bytes_total", "Bytes of the values spilled.", "counter", sp.bytes.load(Ordering::Relaxed).to_string());
    g("meganode_history_spill_bytes", "Bytes of the spill files still referred to by retained versions (on disk, unlinked).", "gauge", sp.live_bytes.load(Ordering::Relaxed).to_string());
    g("meganode_history_spill_files", "Spill files alive.", "gauge", sp.live_segments.load(Ordering::Relaxed).to_string());
    g("meganode_history_spill_reads_total", "Reads of spilled values (history reads: old revisions, watch catch-up, HashKV, checkpoints).", "counter", sp.reads.load(Ordering::Relaxed).to_string());
    g("meganode_history_spill_write_errors_total", "Failed writes of spill files (their values stay in memory; retried).", "counter", sp.write_errors.load(Ordering::Relaxed).to_string());
    o.push_str("# HELP meganode_value_compressed_bytes_total Bytes of the values packed: as written (raw) and as stored.\n# TYPE meganode_value_compressed_bytes_total counter\n");
    for (form, v) in [("raw", &pk.raw_bytes), ("stored", &pk.stored_bytes)] {
        o.push_str(&format!("meganode_value_compressed_bytes_total{{form=\"{form}\"}} {}\n", v.load(Ordering::Relaxed)));
    }
    o.push_str("# HELP meganode_watchers_by_prefix Active watchers by the prefix watched (/registry/<resource>/).\n# TYPE meganode_watchers_by_prefix gauge\n");
    for (p, n) in m.watchers_by_prefix.lock().iter() {
        let label = p.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
        o.push_str(&format!("meganode_watchers_by_prefix{{prefix=\"{label}\"}} {n}\n"));
    }
    o.push_str("# HELP meganode_accounted_bytes Accounted size by part (docs/design.md, memory quota).\n# TYPE meganode_accounted_bytes gauge\n");
    for (part, v) in [("kv", acc.kv), ("leases", acc.leases), ("watch_log", acc.watch_log), ("watchers", acc.watchers)] {
        o.push_str(&format!("meganode_accounted_bytes{{part=\"{part}\"}} {v}\n"));
    }
    if let Some(r) = group {
        o.push_str("# HELP etcd_network_peer_round_trip_time_seconds Round-Trip-Time histogram between peers (a heartbeat and its answer, measured on the leader)\n# TYPE etcd_network_peer_round_trip_time_seconds histogram\n");
        for (id, h) in r.round_trips() {
            h.render("etcd_network_peer_round_trip_time_seconds", &format!("To=\"{id:x}\""), &mut o);
        }
    }
    // etcd's alarm gauge: one series per raised alarm, labelled with the member id in hex as etcd's.
    o.push_str("# HELP etcd_debugging_server_alarms Alarms for every member in cluster. 1 for 'server_id' label with current ID. 2 for 'alarm_type' label with type of this alarm\n# TYPE etcd_debugging_server_alarms gauge\n");
    for (m, t) in s.alarms.get(crate::quota::ALARM_NONE) {
        o.push_str(&format!("etcd_debugging_server_alarms{{alarm_type=\"{}\",server_id=\"{m:x}\"}} 1\n", crate::quota::alarm_name(t)));
    }
    o.push_str("# HELP meganode_requests_total gRPC KV requests by method.\n# TYPE meganode_requests_total counter\n");
    for (name, c) in METHODS.iter().zip([&m.range, &m.put, &m.delete, &m.txn]) {
        o.push_str(&format!("meganode_requests_total{{method=\"{name}\"}} {}\n", c.load(Ordering::Relaxed)));
    }
    o.push_str("# HELP meganode_request_duration_seconds Handling time of gRPC KV requests by method (Range includes RangeStream).\n# TYPE meganode_request_duration_seconds histogram\n");
    for (name, h) in METHODS.iter().zip(&m.latency) {
        h.render("meganode_request_duration_seconds", &format!("method=\"{name}\""), &mut o);
    }
    o.push_str("# HELP meganode_client_connections_total Client connections taken, by the server that serves them (lean: the store's own HTTP/2 transport; tonic: HTTP/1.1, and everything with --grpc-transport=tonic) and whether the listener is TLS.\n# TYPE meganode_client_connections_total counter\n");
    for (transport, counts) in ["lean", "tonic"].iter().zip(connections()) {
        for (tls, n) in ["false", "true"].iter().zip(counts) {
            o.push_str(&format!("meganode_client_connections_total{{transport=\"{transport}\",tls=\"{tls}\"}} {n}\n"));
        }
    }
    o.push_str(&format!("# HELP process_resident_memory_bytes Resident memory size in bytes.\n# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes {}\n", rss_bytes()));
    super::grpc_metrics::GrpcMetrics::global().render(&mut o);
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
            let target = req.split_whitespace().nth(1).unwrap_or("/");
            let (path, query) = target.split_once('?').unwrap_or((target, ""));
            let (status, ctype, body) = super::http_endpoints::answer(&ctx, path, query).unwrap_or(("404 Not Found", "text/plain", "not found\n".to_string()));
            let resp = format!("HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
            let _ = sock.write_all(resp.as_bytes()).await;
        });
    }
}

/// Client connections taken, by the server that serves them ([lean, tonic]) and
/// the listener ([plaintext, TLS]): `meganode_client_connections_total`, so an
/// operator can see whether the clients' calls take the lean path. Kept here and
/// counted by the transports (crate::transport), which sit above the server.
static CONNECTIONS: [[AtomicU64; 2]; 2] = [[AtomicU64::new(0), AtomicU64::new(0)], [AtomicU64::new(0), AtomicU64::new(0)]];

/// Counts a connection handed to the lean transport (`lean`) or to tonic's server.
pub fn count_connection(lean: bool, tls: bool) {
    CONNECTIONS[usize::from(!lean)][usize::from(tls)].fetch_add(1, Ordering::Relaxed);
}

/// The counts, as `count_connection` keeps them: [transport][tls].
pub fn connections() -> [[u64; 2]; 2] {
    CONNECTIONS.each_ref().map(|r| r.each_ref().map(|c| c.load(Ordering::Relaxed)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_renders_cumulative_buckets() {
        let h = Histogram::default();
        for s in [0.00005, 0.0003, 0.0003, 0.02, 7.0] {
            h.observe(s);
        }
        let mut o = String::new();
        h.render("x_seconds", "method=\"Put\"", &mut o);
        assert!(o.contains("x_seconds_bucket{method=\"Put\",le=\"0.0001\"} 1\n"), "{o}");
        assert!(o.contains("x_seconds_bucket{method=\"Put\",le=\"0.0005\"} 3\n"), "{o}");
        assert!(o.contains("x_seconds_bucket{method=\"Put\",le=\"0.025\"} 4\n"), "{o}");
        assert!(o.contains("x_seconds_bucket{method=\"Put\",le=\"2.5\"} 4\n"), "{o}");
        assert!(o.contains("x_seconds_bucket{method=\"Put\",le=\"+Inf\"} 5\n"), "{o}");
        assert!(o.contains("x_seconds_count{method=\"Put\"} 5\n"), "{o}");
        assert!(o.contains("x_seconds_sum{method=\"Put\"} 7.02065\n"), "{o}");
    }

    #[test]
    fn request_counts_and_times_until_dropped() {
        let m = Metrics::default();
        {
            let _t = m.request(PUT);
            assert_eq!(m.put.load(Ordering::Relaxed), 1);
            assert_eq!(m.latency[PUT].count(), 0);
        }
        assert_eq!(m.latency[PUT].count(), 1);
        assert_eq!(m.txn.load(Ordering::Relaxed), 0);
        assert!(rss_bytes() > 0);
    }

    #[test]
    fn watch_prefix_is_the_resource() {
        assert_eq!(watch_prefix(b"/registry/pods/"), "/registry/pods/");
        assert_eq!(watch_prefix(b"/registry/pods/default/web-0"), "/registry/pods/");
        assert_eq!(watch_prefix(b"/registry/leases/kube-node-lease/n1"), "/registry/leases/");
        assert_eq!(watch_prefix(b"/registry/apiregistration.k8s.io/apiservices/"), "/registry/apiregistration.k8s.io/apiservices/");
        assert_eq!(watch_prefix(b"/registry/apiregistration.k8s.io/"), "/registry/apiregistration.k8s.io/");
        assert_eq!(watch_prefix(b"/registry/pods"), "/registry/pods/");
        assert_eq!(watch_prefix(b"/registry"), "/");
        assert_eq!(watch_prefix(b"/foo/bar/baz"), "/foo/");
        assert_eq!(watch_prefix(b"foo"), "/");
        assert_eq!(watch_prefix(b""), "/");
        assert_eq!(watch_prefix(b"\0"), "/");
    }

    #[test]
    fn watchers_by_prefix_count_up_and_down() {
        let m = Metrics::default();
        m.watcher_on(b"/registry/pods/", true);
        m.watcher_on(b"/registry/pods/ns/a", true);
        m.watcher_on(b"/registry/nodes/", true);
        m.watcher_on(b"/registry/pods/", false);
        assert_eq!(m.watchers_by_prefix.lock().iter().map(|(p, n)| (p.as_str(), *n)).collect::<Vec<_>>(), [("/registry/nodes/", 1), ("/registry/pods/", 1)]);
        m.watcher_on(b"/registry/nodes/", false);
        m.watcher_on(b"/registry/nodes/", false); // more ends than starts never underflows
        assert_eq!(m.watchers_by_prefix.lock().len(), 1);
    }
}
