//! A hook in front of every file operation of the logs, for tests: it can fail
//! an operation (ENOSPC, EIO) as the kernel would, or delay it (a slow disk).
//! Production installs none; the cost is one uncontended read lock per write.
use std::io;
use std::path::Path;
use std::sync::Arc;

use parking_lot::RwLock;

/// The file operation about to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileOp {
    /// Opening (creating) a log file.
    Open,
    /// Appending `len` bytes to a log.
    Write,
    /// fdatasync of a log.
    Sync,
    /// Cutting a log back to a size (after a failed write, or after a checkpoint).
    Truncate,
    /// Writing a checkpoint's `.ckpt.tmp` of `len` bytes.
    Checkpoint,
}

/// Consulted before each operation: an error fails it with that error, before
/// anything reaches the file (a partial write is simulated by the hook writing
/// nothing and failing: the log's recovery from both is the same truncation).
pub trait FaultHook: Send + Sync {
    fn before(&self, op: FileOp, path: &Path, len: usize) -> io::Result<()>;
}

/// The hook slot shared by a log's files.
#[derive(Default)]
pub struct Faults(RwLock<Option<Arc<dyn FaultHook>>>);

impl Faults {
    pub fn set(&self, hook: Option<Arc<dyn FaultHook>>) {
        *self.0.write() = hook;
    }

    pub fn check(&self, op: FileOp, path: &Path, len: usize) -> io::Result<()> {
        match &*self.0.read() {
            Some(h) => h.before(op, path, len),
            None => Ok(()),
        }
    }
}

/// A slow disk, for tests (the store's `--test-fault-fsync-latency` and
/// `--test-fault-write-latency` flags): every fdatasync of a log sleeps
/// `fsync` first and every append `write`; a checkpoint, which is written
/// then synced, sleeps both. Opens and truncations are not delayed. The sleep
/// runs where the syscall would, under the log's file lock, so writers queue
/// behind it exactly as they queue behind a slow device.
pub struct Latency {
    pub fsync: std::time::Duration,
    pub write: std::time::Duration,
}

impl FaultHook for Latency {
    fn before(&self, op: FileOp, _path: &Path, _len: usize) -> io::Result<()> {
        let d = match op {
            FileOp::Sync => self.fsync,
            FileOp::Write => self.write,
            FileOp::Checkpoint => self.write + self.fsync,
            FileOp::Open | FileOp::Truncate => std::time::Duration::ZERO,
        };
        if !d.is_zero() {
            std::thread::sleep(d);
        }
        Ok(())
    }
}

/// A hook for tests: fails every operation of the listed kinds with ENOSPC
/// while `full` is set.
#[cfg(test)]
#[derive(Default)]
pub struct DiskFull {
    pub full: std::sync::atomic::AtomicBool,
    pub failures: std::sync::atomic::AtomicU64,
}

#[cfg(test)]
impl FaultHook for DiskFull {
    fn before(&self, op: FileOp, _path: &Path, _len: usize) -> io::Result<()> {
        use std::sync::atomic::Ordering;
        if op != FileOp::Truncate && self.full.load(Ordering::SeqCst) {
            self.failures.fetch_add(1, Ordering::SeqCst);
            return Err(io::Error::from_raw_os_error(28)); // ENOSPC
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn latency_delays_syncs_and_writes_only() {
        let f = Faults::default();
        f.set(Some(Arc::new(Latency { fsync: Duration::from_millis(40), write: Duration::from_millis(10) })));
        let took = |op| {
            let t = Instant::now();
            f.check(op, Path::new("x.wal"), 1).unwrap();
            t.elapsed()
        };
        assert!(took(FileOp::Sync) >= Duration::from_millis(40));
        let w = took(FileOp::Write);
        assert!(w >= Duration::from_millis(10) && w < Duration::from_millis(40), "{w:?}");
        assert!(took(FileOp::Checkpoint) >= Duration::from_millis(50));
        assert!(took(FileOp::Open) < Duration::from_millis(10));
    }
}
