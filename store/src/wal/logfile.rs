//! One log file: records are appended to a memory buffer under the store's
//! sequencer and written (and in fsync mode synced) by whoever flushes first.
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

use super::metrics::WalMetrics;
use super::Mode;

pub(super) struct Io {
    pub(super) file: File,
    /// The buffer `pending` is swapped with: the two trade places at every
    /// write, so appends never allocate a fresh buffer (a 64 KiB malloc/free
    /// per write showed up as ~15 % of the store's CPU, mostly glibc
    /// consolidating its free lists for the large request).
    pub(super) spare: Vec<u8>,
    pub(super) written_rev: i64,
    pub(super) synced_rev: i64,
    pub(super) size: u64,
}

pub struct LogFile {
    pub path: PathBuf,
    pub mode: Mode,
    pub(super) pending: Mutex<(Vec<u8>, i64, u64)>, // (bytes, last rev appended, records)
    pub(super) io: Mutex<Io>,
    /// Size of this prefix's last checkpoint: the log must outgrow it before the
    /// next one, so checkpoint work stays proportional to the bytes written.
    pub(super) last_ckpt: AtomicU64,
}

impl LogFile {
    pub(super) fn open(path: PathBuf, mode: Mode) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        let size = file.metadata()?.len();
        let ckpt = path.with_extension("ckpt");
        let last_ckpt = AtomicU64::new(fs::metadata(&ckpt).map(|m| m.len()).unwrap_or(0));
        Ok(LogFile { path, mode, pending: Mutex::new((Vec::with_capacity(1 << 16), 0, 0)), io: Mutex::new(Io { file, spare: Vec::with_capacity(1 << 16), written_rev: 0, synced_rev: 0, size }), last_ckpt })
    }

    pub(super) fn append(&self, rev: i64, f: impl FnOnce(&mut Vec<u8>) -> u64) {
        let mut p = self.pending.lock();
        let n = f(&mut p.0);
        p.1 = rev;
        p.2 += n;
    }

    /// Writes (and in fsync mode syncs) everything appended up to at least `rev`.
    pub(super) fn flush_to(&self, rev: i64, m: &WalMetrics) -> std::io::Result<()> {
        let mut io = self.io.lock();
        let done = if self.mode == Mode::Fsync { io.synced_rev } else { io.written_rev };
        if done >= rev {
            return Ok(());
        }
        let io = &mut *io;
        let (last, recs) = {
            let mut p = self.pending.lock();
            std::mem::swap(&mut p.0, &mut io.spare);
            (p.1, std::mem::take(&mut p.2))
        };
        let buf = &mut io.spare;
        if !buf.is_empty() {
            let n = buf.len() as u64;
            let res = io.file.write_all(buf);
            buf.clear();
            if buf.capacity() > 4 << 20 {
                buf.shrink_to(1 << 20); // after a burst, do not keep a huge buffer
            }
            res?;
            io.size += n;
            m.bytes.fetch_add(n, Ordering::Relaxed);
            m.batches.fetch_add(1, Ordering::Relaxed);
            m.batch_records.fetch_add(recs, Ordering::Relaxed);
        }
        io.written_rev = io.written_rev.max(last);
        if self.mode == Mode::Fsync {
            let t = Instant::now();
            io.file.sync_data()?;
            m.observe_fsync(t.elapsed().as_secs_f64());
            io.synced_rev = io.written_rev;
        }
        Ok(())
    }
}
