//! A Prometheus histogram of durations kept in atomics: the store's request
//! latencies (server/metrics.rs) and the raft peers' round trips
//! (replication/), both rendered on /metrics. It sits below both layers.
use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds of the latency buckets in seconds (etcd's gRPC handling buckets start at 100 µs too).
const LATENCY_BOUNDS: [f64; 14] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];

/// A Prometheus histogram: one counter per bucket (not cumulative: rendering sums them), the sum in µs.
#[derive(Default)]
pub struct Histogram {
    buckets: [AtomicU64; LATENCY_BOUNDS.len() + 1],
    sum_us: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, secs: f64) {
        let i = LATENCY_BOUNDS.iter().position(|b| secs <= *b).unwrap_or(LATENCY_BOUNDS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add((secs * 1e6) as u64, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }

    /// The series of one histogram: cumulative `_bucket`s, `_sum`, `_count`, with `labels` (`k="v"`) on each.
    pub fn render(&self, name: &str, labels: &str, o: &mut String) {
        let mut n = 0;
        for (i, b) in LATENCY_BOUNDS.iter().enumerate() {
            n += self.buckets[i].load(Ordering::Relaxed);
            o.push_str(&format!("{name}_bucket{{{labels},le=\"{b}\"}} {n}\n"));
        }
        n += self.buckets[LATENCY_BOUNDS.len()].load(Ordering::Relaxed);
        o.push_str(&format!("{name}_bucket{{{labels},le=\"+Inf\"}} {n}\n"));
        o.push_str(&format!("{name}_sum{{{labels}}} {}\n", self.sum_us.load(Ordering::Relaxed) as f64 / 1e6));
        o.push_str(&format!("{name}_count{{{labels}}} {n}\n"));
    }
}
