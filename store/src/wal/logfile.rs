//! One log file: records are appended to a memory buffer under the store's
//! sequencer and written (and in fsync mode synced) by whoever flushes first.
//!
//! A failed write or sync loses nothing: the bytes go back in front of the
//! buffer, the file is cut back to the last size known good (written, and in
//! fsync mode synced) before the next attempt, and the revision marks do not
//! move. A failed fsync is never retried on the same pages (after a failed
//! writeback Linux may report the next fsync clean while the data is gone): the
//! unsynced bytes are cut off and written again from memory.
//!
//! A hot fsync log writes zeros ahead of its records (`ZERO_CHUNK` at a time,
//! synced with the records of the same cycle): a record then overwrites
//! allocated, already-durable zeros instead of growing the file, and its
//! fdatasync has no file size or block allocation to write. On this VM's ext4
//! that cut the kernel time of a 16 KiB write + fdatasync from 67–85 µs to
//! 52–55 µs and its median latency from 0.19–0.22 ms to 0.11–0.13 ms
//! (docs/design.md §5, "Zeros written ahead"). Recovery takes a zero tail
//! for the end of the log (record.rs).
use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use super::fault::{FileOp, Faults};
use super::metrics::WalMetrics;
use super::Mode;

pub(super) struct Io {
    /// Opened on the first write (an open that fails is retried as a write is).
    pub(super) file: Option<File>,
    /// The buffer `pending` is swapped with: the two trade places at every
    /// write, so appends never allocate a fresh buffer (a 64 KiB malloc/free
    /// per write showed up as ~15 % of the store's CPU, mostly glibc
    /// consolidating its free lists for the large request).
    pub(super) spare: Vec<u8>,
    pub(super) written_rev: i64,
    pub(super) synced_rev: i64,
    /// Bytes of the file known good: written, and in fsync mode synced.
    pub(super) size: u64,
    /// The file may hold bytes past `size` (a write or sync failed): cut them first.
    pub(super) dirty: bool,
    /// fsync mode: the file holds durable zeros up to here (written ahead of
    /// the records, see the module's comment); at or below `size` when none are.
    pub(super) zeroed: u64,
    /// No zeros are written ahead before the log reaches this size (set when
    /// writing them failed: a full disk).
    pub(super) zero_paused: u64,
}

/// A log writes zeros ahead once it holds this much (a log that stays small,
/// as the meta log, never does), ...
pub(super) const ZERO_FROM: u64 = 1 << 20;
/// ... this many bytes at a time (one write in ≈ 40 at 100 clients), ...
pub(super) const ZERO_CHUNK: u64 = 1 << 20;
/// ... when fewer than this many are left ahead of the records.
const ZERO_LOW: u64 = 256 << 10;
/// The most one write (and its sync) carries: a larger buffer is written in
/// pieces, each synced before the next is written, so a machine that stops
/// mid-write leaves at most this many bytes unfinished, a lost sector and
/// every whole record after it among them — the bound recovery relies on to
/// tell a torn write from corruption (record.rs, `unfinished_write`).
pub(super) const MAX_WRITE: usize = 4 << 20;
static ZEROS: [u8; 1 << 16] = [0; 1 << 16];

pub struct LogFile {
    pub path: PathBuf,
    pub mode: Mode,
    pub(super) pending: Mutex<(Vec<u8>, i64, u64)>, // (bytes, last rev appended, records)
    pub(super) io: Mutex<Io>,
    /// Size of this prefix's last checkpoint: the log must outgrow it before the
    /// next one, so checkpoint work stays proportional to the bytes written.
    pub(super) last_ckpt: AtomicU64,
    /// The prefix's accounted bytes (written lengths) when its last checkpoint was
    /// written, 0 when unknown (none written since this process started): with
    /// `last_ckpt` it gives the ratio of checkpoint bytes to accounted bytes, which
    /// packing makes far below 1.
    pub(super) ckpt_accounted: AtomicU64,
    /// Some(rev) while the segment before the last cut (`<stem>.wal.old`)
    /// waits for a checkpoint at `rev` to cover it (docs/design.md,
    /// "Checkpoints"): every record in it is at or below `rev`, every record in
    /// the live file above.
    pub(super) cut: Mutex<Option<i64>>,
    pub(super) faults: Arc<Faults>,
    /// The last write of this log took `SLOW_WRITE` or more (a throttled or
    /// saturated disk): writers on the runtime's workers hand their revisions to
    /// the `wal-write` thread instead of writing (`try_flush`), until a write is
    /// fast again. A worker in a slow write holds every connection it serves —
    /// all of them with one worker (docs/design.md §8 rules 4 and 10).
    slow: AtomicBool,
}

/// A write of a log's buffer this slow marks the disk slow (`LogFile::slow`):
/// page-cache writes of a batch take microseconds, the 4 MiB pieces of a burst
/// about a millisecond.
pub(super) const SLOW_WRITE: std::time::Duration = std::time::Duration::from_millis(5);

/// The segment a cut left behind: `<stem>.wal` → `<stem>.wal.old`.
pub(super) fn old_segment(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".old");
    PathBuf::from(s)
}

/// The revision a checkpoint file covers (its header), without reading the rest.
pub(super) fn checkpoint_rev(path: &Path) -> std::io::Result<Option<i64>> {
    let mut head = [0u8; 16];
    match File::open(path) {
        Ok(mut f) => {
            f.read_exact(&mut head)?;
            Ok(Some(i64::from_le_bytes(head[8..16].try_into().unwrap())))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

impl LogFile {
    /// A log whose file is opened at its first write.
    /// Whether its last write took SLOW_WRITE or more (and none has been fast since).
    pub(super) fn is_slow(&self) -> bool {
        self.slow.load(Ordering::Relaxed)
    }

    pub(super) fn new(path: PathBuf, mode: Mode, faults: Arc<Faults>) -> Self {
        let ckpt = path.with_extension("ckpt");
        let last_ckpt = AtomicU64::new(fs::metadata(&ckpt).map(|m| m.len()).unwrap_or(0));
        let cut = Mutex::new(Self::cut_left(&path, &ckpt));
        let io = Io { file: None, spare: Vec::with_capacity(1 << 16), written_rev: 0, synced_rev: 0, size: 0, dirty: false, zeroed: 0, zero_paused: 0 };
        LogFile {
            path,
            mode,
            pending: Mutex::new((Vec::with_capacity(1 << 16), 0, 0)),
            io: Mutex::new(io),
            last_ckpt,
            ckpt_accounted: AtomicU64::new(0),
            cut,
            faults,
            slow: AtomicBool::new(false),
        }
    }

    /// A cut an earlier run left unfinished (it stopped between the cut and the
    /// checkpoint's rename, or the checkpoint failed): the next checkpoint must
    /// cover the old segment, so it is taken at the highest revision in it (or
    /// the checkpoint's, if higher); the live file holds only later ones.
    fn cut_left(path: &Path, ckpt: &Path) -> Option<i64> {
        let old = old_segment(path);
        if !old.exists() {
            return None;
        }
        let in_old = super::record::read_log(&old).map(|r| r.records.iter().map(super::record::Record::rev).max().unwrap_or(0)).unwrap_or(i64::MAX);
        let covered = checkpoint_rev(ckpt).ok().flatten().unwrap_or(0);
        Some(in_old.max(covered))
    }

    /// Starts a new segment: the records appended up to the revision the
    /// cut stands at stay in this one (renamed `<stem>.wal.old`), every later
    /// record goes to a new `<stem>.wal`; the revision is recorded in `cut`
    /// and returned. `at_cut` is called with this log's file lock held: it
    /// takes the prefix's lock (no writer of the prefix appends while it is
    /// held) and answers the revision every appended record is at or below.
    /// That lock is released as soon as the buffer is taken — the write, the
    /// rename, the new file and the directory's sync wait only for the file
    /// lock, which writers of the prefix do not need to commit (a buffered one
    /// finding it busy hands over, an fsync one waits for the flusher as for
    /// any sync). Held through them, the directory sync on a disk stopped
    /// every writer of the prefix at each checkpoint.
    pub(super) fn start_segment<G>(&self, dir: &Path, at_cut: impl FnOnce() -> (G, i64), m: &WalMetrics) -> std::io::Result<i64> {
        let mut io = self.io.lock();
        let (prefix_lock, rev) = at_cut();
        let (last, recs) = self.take_pending(&mut io);
        drop(prefix_lock);
        self.write_taken(&mut io, last, recs, m)?;
        if io.size == 0 {
            // Nothing in the file: no segment to keep.
            *self.cut.lock() = Some(rev);
            return Ok(rev);
        }
        fs::rename(&self.path, old_segment(&self.path))?;
        *self.cut.lock() = Some(rev);
        io.file = None;
        self.open_file(&mut io)?;
        File::open(dir).and_then(|d| d.sync_all())?;
        Ok(rev)
    }

    /// A log opened now (tests).
    #[cfg(test)]
    pub(super) fn open(path: PathBuf, mode: Mode, faults: Arc<Faults>) -> std::io::Result<Self> {
        let l = LogFile::new(path, mode, faults);
        l.open_file(&mut l.io.lock())?;
        Ok(l)
    }

    /// Opens the file at its end: recovery has cut whatever followed the last
    /// intact record (zeros written ahead included), so the length is the log's.
    /// Writes are positional (at `size`), not appends: zeros may lie ahead.
    fn open_file<'a>(&self, io: &'a mut Io) -> std::io::Result<&'a mut File> {
        if io.file.is_none() {
            self.faults.check(FileOp::Open, &self.path, 0)?;
            let f = OpenOptions::new().create(true).write(true).truncate(false).open(&self.path)?;
            io.size = f.metadata()?.len();
            io.zeroed = io.size;
            io.zero_paused = 0;
            io.file = Some(f);
        }
        Ok(io.file.as_mut().unwrap())
    }

    pub(super) fn append(&self, rev: i64, f: impl FnOnce(&mut Vec<u8>) -> u64) {
        let mut p = self.pending.lock();
        let n = f(&mut p.0);
        p.1 = rev;
        p.2 += n;
    }

    /// Bytes appended and not yet written (or, in fsync mode, not yet synced).
    pub fn pending_bytes(&self) -> usize {
        self.pending.lock().0.len()
    }

    /// Writes (and in fsync mode syncs) everything appended up to at least
    /// `rev`. On an error nothing appended is lost: the next call retries it.
    pub(super) fn flush_to(&self, rev: i64, m: &WalMetrics) -> std::io::Result<()> {
        self.flush_locked(&mut self.io.lock(), rev, m)
    }

    /// `flush_to` if no one else is at the file and its last write was not slow:
    /// None when another writer is (a slow write: a throttled disk, dirty-page
    /// writeback) or may well be. The caller then hands its revision to the
    /// `wal-write` thread rather than wait or write slowly itself (sink.rs).
    pub(super) fn try_flush(&self, rev: i64, m: &WalMetrics) -> Option<std::io::Result<()>> {
        if self.slow.load(Ordering::Relaxed) {
            return None;
        }
        let mut io = self.io.try_lock()?;
        Some(self.flush_locked(&mut io, rev, m))
    }

    fn flush_locked(&self, io: &mut Io, rev: i64, m: &WalMetrics) -> std::io::Result<()> {
        let done = if self.mode == Mode::Fsync { io.synced_rev } else { io.written_rev };
        if done >= rev {
            return Ok(());
        }
        // Nothing appended since the last good write (and sync): nothing to
        // do. The fsync flusher asks every fsync log each cycle; an idle one
        // (a prefix written once an hour) would cost an fdatasync each time.
        if !io.dirty && self.pending.lock().0.is_empty() {
            return Ok(());
        }
        let (last, recs) = self.take_pending(io);
        self.write_taken(io, last, recs, m)
    }

    /// Takes what was appended into `io.spare`: the last revision and the record count.
    fn take_pending(&self, io: &mut Io) -> (i64, u64) {
        let mut p = self.pending.lock();
        std::mem::swap(&mut p.0, &mut io.spare);
        (p.1, std::mem::take(&mut p.2))
    }

    /// Writes what `take_pending` took; on an error the bytes go back in
    /// front of whatever was appended meanwhile.
    fn write_taken(&self, io: &mut Io, last: i64, recs: u64, m: &WalMetrics) -> std::io::Result<()> {
        let n = io.spare.len() as u64;
        let start = Instant::now();
        let written = self.write_out(io, m);
        self.slow.store(start.elapsed() >= SLOW_WRITE, Ordering::Relaxed);
        if let Err(e) = written {
            // Put the bytes back in front of whatever was appended meanwhile.
            let mut p = self.pending.lock();
            io.spare.extend_from_slice(&p.0);
            std::mem::swap(&mut p.0, &mut io.spare);
            io.spare.clear();
            // All the batch's records, though pieces of it may be written:
            // only the batch-size metric counts them, once more.
            p.2 += recs;
            return Err(e);
        }
        let buf = &mut io.spare;
        buf.clear();
        if buf.capacity() > 4 << 20 {
            buf.shrink_to(1 << 20); // after a burst, do not keep a huge buffer
        }
        if n > 0 {
            m.bytes.fetch_add(n, Ordering::Relaxed);
            m.batches.fetch_add(1, Ordering::Relaxed);
            m.batch_records.fetch_add(recs, Ordering::Relaxed);
        }
        io.written_rev = io.written_rev.max(last);
        if self.mode == Mode::Fsync {
            io.synced_rev = io.written_rev;
        }
        Ok(())
    }

    /// Writes `io.spare` at the end of the known-good part of the file, and
    /// syncs in fsync mode, in pieces of at most `MAX_WRITE`; `size` moves by
    /// each piece that succeeded. On an error the pieces written are gone from
    /// `io.spare`, which holds only what is still to be written.
    fn write_out(&self, io: &mut Io, m: &WalMetrics) -> std::io::Result<()> {
        let (size, dirty) = (io.size, io.dirty);
        let f = self.open_file(io)?;
        if dirty {
            self.faults.check(FileOp::Truncate, &self.path, 0)?;
            f.set_len(size)?;
            io.zeroed = size;
        }
        io.dirty = false;
        if io.spare.is_empty() && self.mode != Mode::Fsync {
            return Ok(());
        }
        let mut done = 0;
        let r = loop {
            let n = (io.spare.len() - done).min(MAX_WRITE);
            if let Err(e) = self.write_piece(io, done, n, m) {
                break Err(e);
            }
            done += n;
            if done == io.spare.len() {
                break Ok(());
            }
        };
        if r.is_err() {
            io.spare.drain(..done);
        }
        r
    }

    /// One write at `size` (and its sync in fsync mode) of `io.spare[from..from + n]`.
    fn write_piece(&self, io: &mut Io, from: usize, n: usize, m: &WalMetrics) -> std::io::Result<()> {
        io.dirty = true;
        let f = io.file.as_ref().unwrap();
        if n > 0 {
            self.faults.check(FileOp::Write, &self.path, n)?;
            f.write_all_at(&io.spare[from..from + n], io.size)?;
        }
        if self.mode == Mode::Fsync {
            let end = io.size + n as u64;
            if end >= ZERO_FROM.max(io.zero_paused) && io.zeroed < end + ZERO_LOW {
                // Best effort: on a full disk the records are written all the
                // same (as appends), and the next try waits until the log has
                // grown by a chunk. Zeros a failed write left are a zero tail
                // like any other, and the next chunk follows them (no hole).
                let from = io.zeroed.max(end);
                let (written, r) = write_zeros(f, from, ZERO_CHUNK);
                io.zeroed = from + written;
                if r.is_err() {
                    io.zero_paused = end + ZERO_CHUNK;
                }
            }
            let t = Instant::now();
            self.faults.check(FileOp::Sync, &self.path, n)?;
            f.sync_data()?;
            m.observe_fsync(t.elapsed().as_secs_f64());
        }
        io.dirty = false;
        io.size += n as u64;
        Ok(())
    }
}

/// Writes `len` zero bytes at `at`: how many it wrote, and the error that stopped it.
fn write_zeros(f: &File, at: u64, len: u64) -> (u64, std::io::Result<()>) {
    let mut off = 0;
    while off < len {
        let n = (len - off).min(ZEROS.len() as u64) as usize;
        match f.write_at(&ZEROS[..n], at + off) {
            Ok(0) => return (off, Err(std::io::ErrorKind::WriteZero.into())),
            Ok(w) => off += w as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return (off, Err(e)),
        }
    }
    (off, Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::fault::DiskFull;

    /// An empty directory of its own for a test.
    fn fresh_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("{name}{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// After a write that took `SLOW_WRITE` or more, writers on the runtime's
    /// workers are turned away (`try_flush` None: they hand off to `wal-write`);
    /// the first fast write — the thread's — lets them write again.
    #[test]
    fn a_slow_write_turns_workers_away_until_a_write_is_fast() {
        use crate::wal::fault::Latency;
        let dir = fresh_dir("mgn-logfile-slow");
        let faults = Arc::new(Faults::default());
        let l = LogFile::open(dir.join("x.wal"), Mode::Buffered, faults.clone()).unwrap();
        let m = WalMetrics::default();
        let put = |rev: i64| {
            l.append(rev, |b| {
                b.extend_from_slice(b"rec");
                1
            })
        };
        put(1);
        assert!(matches!(l.try_flush(1, &m), Some(Ok(()))), "a fast disk: the worker writes");
        faults.set(Some(Arc::new(Latency { fsync: std::time::Duration::ZERO, write: SLOW_WRITE * 2 })));
        put(2);
        assert!(matches!(l.try_flush(2, &m), Some(Ok(()))), "nothing known yet: the worker writes, slowly");
        put(3);
        assert!(l.try_flush(3, &m).is_none(), "after a slow write the worker is turned away");
        l.flush_to(3, &m).unwrap(); // the wal-write thread's write, slow again
        put(4);
        assert!(l.try_flush(4, &m).is_none());
        faults.set(None);
        l.flush_to(4, &m).unwrap(); // the thread's next write is fast
        put(5);
        assert!(matches!(l.try_flush(5, &m), Some(Ok(()))), "a fast write lets the workers write again");
        assert_eq!(fs::read(dir.join("x.wal")).unwrap(), b"recrecrecrecrec");
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A write that fails leaves the file at its last good size and keeps the
    /// bytes; once the disk has room the retry writes them exactly once.
    #[test]
    fn failed_writes_keep_their_bytes_and_retry() {
        for mode in [Mode::Buffered, Mode::Fsync] {
            let dir = std::env::temp_dir().join(format!("mgn-logfile-{}-{mode:?}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).unwrap();
            let faults = Arc::new(Faults::default());
            let hook = Arc::new(DiskFull::default());
            faults.set(Some(hook.clone()));
            let l = LogFile::open(dir.join("x.wal"), mode, faults).unwrap();
            let m = WalMetrics::default();
            l.append(2, |b| {
                b.extend_from_slice(b"aaaa");
                1
            });
            l.flush_to(2, &m).unwrap();
            hook.full.store(true, Ordering::SeqCst);
            l.append(3, |b| {
                b.extend_from_slice(b"bbbb");
                1
            });
            assert!(l.flush_to(3, &m).is_err());
            // Appended while the disk is full: queued behind the failed bytes.
            l.append(4, |b| {
                b.extend_from_slice(b"cc");
                1
            });
            assert!(l.flush_to(4, &m).is_err());
            assert_eq!(l.pending_bytes(), 6);
            assert_eq!(fs::read(&l.path).unwrap(), b"aaaa");
            let done = |l: &LogFile| if mode == Mode::Fsync { l.io.lock().synced_rev } else { l.io.lock().written_rev };
            assert_eq!(done(&l), 2);
            hook.full.store(false, Ordering::SeqCst);
            l.flush_to(3, &m).unwrap();
            assert_eq!(fs::read(&l.path).unwrap(), b"aaaabbbbcc");
            assert_eq!((done(&l), l.pending_bytes()), (4, 0));
            fs::remove_dir_all(&dir).unwrap();
        }
    }

    /// Bytes a failed write did put in the file (a partial write, or a write
    /// whose fsync then failed) are cut before the retry writes them again.
    #[test]
    fn a_dirty_tail_is_cut_before_the_retry() {
        struct FailSync(std::sync::atomic::AtomicBool);
        impl crate::wal::fault::FaultHook for FailSync {
            fn before(&self, op: FileOp, _: &std::path::Path, _: usize) -> std::io::Result<()> {
                if op == FileOp::Sync && self.0.load(Ordering::SeqCst) {
                    return Err(std::io::Error::from_raw_os_error(5)); // EIO
                }
                Ok(())
            }
        }
        let dir = fresh_dir("mgn-logfile-eio-");
        let faults = Arc::new(Faults::default());
        let hook = Arc::new(FailSync(true.into()));
        faults.set(Some(hook.clone()));
        let l = LogFile::open(dir.join("x.wal"), Mode::Fsync, faults).unwrap();
        let m = WalMetrics::default();
        l.append(2, |b| {
            b.extend_from_slice(b"abc");
            1
        });
        assert!(l.flush_to(2, &m).is_err());
        // The write reached the file; its sync did not: not counted as written.
        assert_eq!(fs::read(&l.path).unwrap(), b"abc");
        hook.0.store(false, Ordering::SeqCst);
        l.flush_to(2, &m).unwrap();
        assert_eq!(fs::read(&l.path).unwrap(), b"abc");
        assert_eq!(l.io.lock().synced_rev, 2);
        fs::remove_dir_all(&dir).unwrap();
    }

    fn record(out: &mut Vec<u8>, rev: i64, value_len: usize) -> u64 {
        let kv = crate::mvcc::key_history::Version { mod_rev: rev, sub: 0, create_rev: rev, version: 1, value: bytes::Bytes::from(vec![b'v'; value_len]).into(), lease: 0 };
        crate::wal::record::encode_event(out, &crate::mvcc::watch_hub::Event { key: bytes::Bytes::from_static(b"/registry/pods/a"), kv, prev: None });
        1
    }

    /// An fsync log past `ZERO_FROM` writes zeros ahead of its records: the
    /// file is longer than the log, the records overwrite the zeros, and the
    /// log reads back whole, with the zeros as its end (no torn tail).
    #[test]
    fn a_hot_fsync_log_writes_zeros_ahead() {
        let dir = fresh_dir("mgn-logfile-zeros-");
        let l = LogFile::open(dir.join("x.wal"), Mode::Fsync, Arc::new(Faults::default())).unwrap();
        let m = WalMetrics::default();
        let mut rev = 1;
        while l.io.lock().size < ZERO_FROM + 3 * ZERO_CHUNK {
            for _ in 0..20 {
                rev += 1;
                l.append(rev, |b| record(b, rev, 1000));
            }
            l.flush_to(rev, &m).unwrap();
            let io = l.io.lock();
            let len = fs::metadata(&l.path).unwrap().len();
            assert_eq!(io.zeroed.max(io.size), len, "the file ends where the zeros do");
            if io.size >= ZERO_FROM {
                assert!(len >= io.size + ZERO_LOW, "zeros ahead: {len} B file, {} B log", io.size);
            }
        }
        let r = crate::wal::read_log(&l.path).unwrap();
        assert_eq!((r.records.len() as i64, r.torn_bytes, r.good_len as u64), (rev - 1, 0, l.io.lock().size));
        assert!(r.zero_tail > 0);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// An fsync log with nothing appended since its last sync is not synced
    /// again (the flusher asks every fsync log each cycle).
    #[test]
    fn an_idle_fsync_log_is_not_synced_again() {
        let dir = fresh_dir("mgn-logfile-idle-");
        let l = LogFile::open(dir.join("x.wal"), Mode::Fsync, Arc::new(Faults::default())).unwrap();
        let m = WalMetrics::default();
        l.append(2, |b| record(b, 2, 10));
        l.flush_to(i64::MAX, &m).unwrap();
        l.flush_to(i64::MAX, &m).unwrap();
        assert_eq!(m.fsyncs.load(Ordering::Relaxed), 1);
        l.append(3, |b| record(b, 3, 10));
        l.flush_to(i64::MAX, &m).unwrap();
        assert_eq!((m.fsyncs.load(Ordering::Relaxed), l.io.lock().synced_rev), (2, 3));
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A buffer larger than `MAX_WRITE` goes out in pieces, each synced: a
    /// failure after the first keeps only the rest to write, and the retry
    /// writes it exactly once.
    #[test]
    fn a_large_write_goes_out_in_synced_pieces() {
        struct FailSecondWrite(std::sync::atomic::AtomicUsize);
        impl crate::wal::fault::FaultHook for FailSecondWrite {
            fn before(&self, op: FileOp, _: &std::path::Path, _: usize) -> std::io::Result<()> {
                if op == FileOp::Write && self.0.fetch_add(1, Ordering::SeqCst) == 1 {
                    return Err(std::io::Error::from_raw_os_error(28)); // ENOSPC
                }
                Ok(())
            }
        }
        let dir = fresh_dir("mgn-logfile-pieces-");
        let faults = Arc::new(Faults::default());
        let hook = Arc::new(FailSecondWrite(0.into()));
        faults.set(Some(hook.clone()));
        let l = LogFile::open(dir.join("x.wal"), Mode::Fsync, faults).unwrap();
        let m = WalMetrics::default();
        let n = MAX_WRITE / 100_000 * 2 + 5;
        for i in 0..n as i64 {
            l.append(i + 2, |b| record(b, i + 2, 100_000));
        }
        let whole = l.pending_bytes() as u64;
        assert!(whole > 2 * MAX_WRITE as u64);
        assert!(l.flush_to(n as i64 + 1, &m).is_err());
        let at = |l: &LogFile| {
            let io = l.io.lock();
            (io.size, io.synced_rev)
        };
        assert_eq!(at(&l), (MAX_WRITE as u64, 0));
        assert_eq!(l.pending_bytes() as u64, whole - MAX_WRITE as u64);
        l.flush_to(n as i64 + 1, &m).unwrap();
        assert_eq!((at(&l), l.pending_bytes()), ((whole, n as i64 + 1), 0));
        let r = crate::wal::read_log(&l.path).unwrap();
        assert_eq!((r.records.len(), r.torn_bytes, r.good_len as u64), (n, 0, whole));
        fs::remove_dir_all(&dir).unwrap();
    }
}
