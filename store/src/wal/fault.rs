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
