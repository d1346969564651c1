//! The background packer's progress (mvcc/packer.rs), kept in the store it packs
//! (`Store::packing`) and read by the metrics: below both, so the store does not
//! import the packer that works on it.
use std::sync::atomic::{AtomicBool, AtomicU64};

/// Progress, for the metrics (`server/metrics.rs`).
#[derive(Default)]
pub struct PackStats {
    /// Values replaced by their packed form.
    pub packed: AtomicU64,
    /// Their bytes as written and as now stored.
    pub raw_bytes: AtomicU64,
    pub stored_bytes: AtomicU64,
    pub dicts: AtomicU64,
    pub passes: AtomicU64,
    /// Time the packer spent training and compressing (not sleeping), in microseconds.
    pub busy_us: AtomicU64,
    /// The last pass found no prefix written since the one before it.
    pub idle: AtomicBool,
}

