//! The log's metrics, with etcd's names where etcd has one.
use std::sync::atomic::{AtomicU64, Ordering};

/// Metrics with etcd's names where etcd has one.
#[derive(Default)]
pub struct WalMetrics {
    pub bytes: AtomicU64,
    pub batches: AtomicU64,
    pub batch_records: AtomicU64,
    pub fsyncs: AtomicU64,
    fsync_buckets: [AtomicU64; FSYNC_BOUNDS.len()],
    fsync_sum_us: AtomicU64,
    pub replay_ms: AtomicU64,
    pub checkpoints: AtomicU64,
    /// Syncs the flusher held back to gather writes (`gather.rs`), and the time it held them.
    pub gathers: AtomicU64,
    pub gather_us: AtomicU64,
}

/// Up to etcd's top bucket (8.192 s): a slow disk's fsyncs take seconds, and the
/// dashboards written for etcd read this histogram to show it; below 1 ms finer
/// than etcd's, where an SSD's fsyncs fall.
const FSYNC_BOUNDS: [f64; 17] = [0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096, 8.192];

impl WalMetrics {
    pub(super) fn observe_fsync(&self, secs: f64) {
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
        self.fsync_sum_us.fetch_add((secs * 1e6) as u64, Ordering::Relaxed);
        for (i, b) in FSYNC_BOUNDS.iter().enumerate() {
            if secs <= *b {
                self.fsync_buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub fn render(&self) -> String {
        let mut o = String::new();
        o.push_str("# HELP etcd_disk_wal_fsync_duration_seconds The latency distributions of fsync called by the WAL.\n# TYPE etcd_disk_wal_fsync_duration_seconds histogram\n");
        for (i, b) in FSYNC_BOUNDS.iter().enumerate() {
            o.push_str(&format!("etcd_disk_wal_fsync_duration_seconds_bucket{{le=\"{b}\"}} {}\n", self.fsync_buckets[i].load(Ordering::Relaxed)));
        }
        let n = self.fsyncs.load(Ordering::Relaxed);
        o.push_str(&format!("etcd_disk_wal_fsync_duration_seconds_bucket{{le=\"+Inf\"}} {n}\n"));
        o.push_str(&format!("etcd_disk_wal_fsync_duration_seconds_sum {}\n", self.fsync_sum_us.load(Ordering::Relaxed) as f64 / 1e6));
        o.push_str(&format!("etcd_disk_wal_fsync_duration_seconds_count {n}\n"));
        o.push_str(&format!("# TYPE etcd_disk_wal_write_bytes_total counter\netcd_disk_wal_write_bytes_total {}\n", self.bytes.load(Ordering::Relaxed)));
        o.push_str(&format!("# TYPE meganode_wal_batches_total counter\nmeganode_wal_batches_total {}\n", self.batches.load(Ordering::Relaxed)));
        o.push_str(&format!("# TYPE meganode_wal_batch_records_total counter\nmeganode_wal_batch_records_total {}\n", self.batch_records.load(Ordering::Relaxed)));
        o.push_str(&format!("# TYPE meganode_wal_replay_seconds gauge\nmeganode_wal_replay_seconds {}\n", self.replay_ms.load(Ordering::Relaxed) as f64 / 1e3));
        o.push_str(&format!("# TYPE meganode_wal_checkpoints_total counter\nmeganode_wal_checkpoints_total {}\n", self.checkpoints.load(Ordering::Relaxed)));
        o.push_str(&format!("# HELP meganode_wal_fsync_gathers_total Syncs the fsync flusher held back to gather more writes.\n# TYPE meganode_wal_fsync_gathers_total counter\nmeganode_wal_fsync_gathers_total {}\n", self.gathers.load(Ordering::Relaxed)));
        o.push_str(&format!("# TYPE meganode_wal_fsync_gather_seconds_total counter\nmeganode_wal_fsync_gather_seconds_total {}\n", self.gather_us.load(Ordering::Relaxed) as f64 / 1e6));
        o
    }
}

#[cfg(test)]
mod tests {
    use super::WalMetrics;

    /// A slow disk's fsync of 1.5 s is counted in etcd's 2.048 s bucket, not only in +Inf.
    #[test]
    fn slow_fsyncs_land_in_etcds_buckets() {
        let m = WalMetrics::default();
        m.observe_fsync(0.003);
        m.observe_fsync(1.5);
        let out = m.render();
        for (le, n) in [("0.004", 1), ("1.024", 1), ("2.048", 2), ("8.192", 2), ("+Inf", 2)] {
            assert!(out.contains(&format!("etcd_disk_wal_fsync_duration_seconds_bucket{{le=\"{le}\"}} {n}\n")), "le {le}: {out}");
        }
    }
}
