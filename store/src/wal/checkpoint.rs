//! Per-prefix checkpoints (docs/design.md, "Checkpoints"): the log is cut
//! into a new segment at a revision, the prefix's keys as of that revision are
//! streamed to `<stem>.ckpt.tmp` (fsync, rename, fsync dir), then the old
//! segment is deleted. Writers to the prefix wait only for the cut; the keys
//! are read a chunk at a time under short read locks.
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes};

use super::fault::FileOp;
use super::logfile::{old_segment, LogFile};
use super::sink::Wal;
use crate::mvcc::key_history::{KeyHistory, Version};
use crate::snapshot::{put_key_v3, ITEM_DICT, ITEM_KEY};
use crate::mvcc::value::{Dict, Value};
use crate::mvcc::kvstore::Shard;
use crate::mvcc::Store;

fn named(path: &Path, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// The first checkpoint format: the key count before the keys (the whole
/// checkpoint was built in memory). Still read.
pub const CKPT_MAGIC_V1: &[u8; 8] = b"MGNCKPT1";
/// The second format: the key count after the keys, so the file can be
/// streamed while the keys are read. Still read.
pub const CKPT_MAGIC_V2: &[u8; 8] = b"MGNCKPT2";
/// The format written: as the second, with packed values kept packed and the
/// dictionaries they need before them (docs/design.md §5).
pub const CKPT_MAGIC: &[u8; 8] = b"MGNCKPT3";

/// Keys read per shard read lock while a checkpoint is written: the lock is
/// held for microseconds, writers to the prefix slip in between chunks.
const CHUNK_KEYS: usize = 512;

/// A checkpoint's encoding buffer is written out once it holds this much.
const BUF_BYTES: usize = 1 << 20;

/// How often the checkpoint thread looks at the logs' sizes (a lock per log).
const CHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
/// At most this between the retries of a failed checkpoint.
const RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(4);

/// The size the prefix's next checkpoint would have: its accounted bytes (the
/// values' written lengths) scaled by the last checkpoint's ratio of file bytes to
/// accounted bytes — packed values make a checkpoint many times smaller than what
/// was written. Unknown ratio (no checkpoint written by this process): the last
/// checkpoint's size, so the first check after a start goes by the log's growth.
fn next_checkpoint_estimate(log: &LogFile, accounted: u64) -> u64 {
    let (last, at) = (log.last_ckpt.load(Ordering::Relaxed), log.ckpt_accounted.load(Ordering::Relaxed));
    if at == 0 {
        return last;
    }
    (accounted as u128 * last as u128 / at as u128) as u64
}

impl Wal {
    /// Writes a checkpoint of every shard whose log has grown past `min_bytes`
    /// (or whose last cut is not yet covered), then deletes the segment it
    /// covers. With the shard read-locked only for the cut (the log's buffer
    /// written, the file renamed to `<stem>.wal.old`, a new one created), the
    /// keys as of the cut's revision are then read a chunk at a time and
    /// streamed to the file. A checkpoint that fails leaves both segments and
    /// its `.tmp` removed, raises the disk's NOSPACE alarm (refusing nothing:
    /// the logs still take appends), and is tried again at the same revision
    /// next time; the alarm clears when it succeeds.
    /// Nothing runs while a log write has failed.
    pub fn checkpoint(&self, store: &Store, min_bytes: u64, force: bool) -> std::io::Result<usize> {
        let mut n = 0;
        if self.health.down() {
            return Ok(0);
        }
        for shard in store.all_shards() {
            let Some(log) = self.logs.read().get(shard.prefix.as_ref()).cloned().flatten() else { continue };
            let threshold = min_bytes.max(log.last_ckpt.load(Ordering::Relaxed)).max(1);
            let pending = *log.cut.lock();
            let packed = shard.packed.swap(false, Ordering::Relaxed);
            if !force && !packed && pending.is_none() {
                let (size, last) = (log.io.lock().size, log.last_ckpt.load(Ordering::Relaxed));
                if size < threshold {
                    continue;
                }
                // After the first, only a checkpoint that at least halves the prefix's files:
                // one that would hold every version they hold (nothing compacted or deleted
                // since) rewrites all of it to free nothing — a fifth of the put benchmark's
                // server CPU, every version rewritten once per checkpoint.
                if last > 0 && last + size < 2 * next_checkpoint_estimate(&log, shard.data.read().bytes as u64) {
                    continue;
                }
            }
            let dst = log.path.with_extension("ckpt");
            match self.checkpoint_shard(store, &shard, &log, pending) {
                Ok(()) => self.health.checkpoint_ok(&dst),
                // The cut's write of the log failed: that is the log's failure (alarm, retries).
                Err((true, e)) => return Err(e),
                Err((false, e)) => {
                    // Raises the alarm; both segments are kept, the next round retries at the same cut.
                    self.health.fail_checkpoint(&dst, &e);
                    return Err(e);
                }
            }
            n += 1;
        }
        Ok(n)
    }

    /// A checkpoint of every prefix with a log, the first error returned and
    /// nothing else done about it (no alarm, no log line): a restore's start,
    /// which fails on it.
    pub(super) fn checkpoint_all(&self, store: &Store) -> std::io::Result<()> {
        for shard in store.all_shards() {
            let Some(log) = self.logs.read().get(shard.prefix.as_ref()).cloned().flatten() else { continue };
            let pending = *log.cut.lock();
            self.checkpoint_shard(store, &shard, &log, pending).map_err(|(_, e)| e)?;
        }
        Ok(())
    }

    /// One prefix's checkpoint: the cut (unless one is `pending`), the keys
    /// streamed to `.ckpt.tmp`, the rename, the old segment deleted. An error
    /// says whether it was the log's write at the cut (true) or the checkpoint's.
    fn checkpoint_shard(&self, store: &Store, shard: &Arc<Shard>, log: &Arc<LogFile>, pending: Option<i64>) -> Result<(), (bool, std::io::Error)> {
        let rev = match pending {
            Some(rev) => rev,
            None => {
                // Every version of this prefix up to the committed revision is
                // in the log's buffer while the prefix's lock is held (no writer
                // can commit meanwhile); every later one goes to the new segment.
                let at_cut = || (shard.data.read(), store.committed_rev());
                match log.start_segment(&self.dir, at_cut, &self.metrics) {
                    Ok(rev) => rev,
                    Err(e) if log.cut.lock().is_none() => {
                        // The buffer's write failed: the alarm, and the flusher retries it.
                        self.failed(log, &e, 0);
                        return Err((true, named(&log.path, e)));
                    }
                    // Cut, but the new file or the directory's sync failed: the
                    // checkpoint at the cut is still owed (the next write opens the file).
                    Err(e) => return Err((false, named(&log.path, e))),
                }
            }
        };
        let stem = log.path.with_extension("");
        let tmp = stem.with_extension("ckpt.tmp");
        let dst = stem.with_extension("ckpt");
        let size = match self.write_checkpoint(shard, rev, &tmp) {
            Ok(size) => size,
            Err(e) => {
                // Frees what the partial checkpoint took; the segments still hold everything.
                let _ = fs::remove_file(&tmp);
                return Err((false, named(&tmp, e)));
            }
        };
        fs::rename(&tmp, &dst).map_err(|e| (false, named(&dst, e)))?;
        File::open(&self.dir).and_then(|d| d.sync_all()).map_err(|e| (false, named(&self.dir, e)))?;
        // Covered by the checkpoint (recovery skips its records if this is lost).
        match fs::remove_file(old_segment(&log.path)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err((false, named(&old_segment(&log.path), e))),
        }
        *log.cut.lock() = None;
        log.last_ckpt.store(size, Ordering::Relaxed);
        log.ckpt_accounted.store(shard.data.read().bytes as u64, Ordering::Relaxed);
        self.metrics.checkpoints.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The checkpoint thread: every `CHECK_EVERY` looks for a log past
    /// `min_bytes`. A failed checkpoint (logged and alarmed by `checkpoint`) is
    /// retried after 2 s, then every 4 s: each try writes up to the free
    /// space and removes it again.
    pub fn checkpointer(self: Arc<Self>, store: Arc<Store>, min_bytes: u64) {
        let mut wait = CHECK_EVERY;
        loop {
            std::thread::sleep(wait);
            wait = match self.checkpoint(&store, min_bytes, false) {
                Ok(_) => CHECK_EVERY,
                Err(_) if self.health.checkpoint_failing() => (wait * 2).min(RETRY_MAX),
                Err(_) => CHECK_EVERY,
            };
        }
    }

    /// Streams the shard's keys as of `rev` (versions at or below it; keys
    /// with none are left out) to `tmp` and syncs it; returns its size.
    /// Versions a compaction removes meanwhile are superseded by versions
    /// above `rev`, which the new segment holds: recovery ends in the same state.
    fn write_checkpoint(&self, shard: &Arc<Shard>, rev: i64, tmp: &Path) -> std::io::Result<u64> {
        self.faults.check(FileOp::Checkpoint, tmp, 0)?;
        check_room(&self.dir)?;
        let mut checked = 0u64;
        let mut file = BufWriter::with_capacity(1 << 20, File::create(tmp)?);
        let mut buf = Vec::with_capacity(1 << 16);
        buf.put_slice(CKPT_MAGIC);
        buf.put_i64_le(rev);
        let (mut crc, mut size, mut count) = (0u32, 0u64, 0u64);
        let mut dicts_written = std::collections::HashSet::new();
        let mut out = WriteOut::default();
        let keep_at_cut = |k: &Bytes, h: &KeyHistory, chunk: &mut Vec<(Bytes, Vec<Version>)>| {
            // Keys created after the cut (all their versions above `rev`) may
            // still arrive anywhere in the order; they are not wanted.
            let vs: Vec<Version> = h.versions().iter().filter(|v| v.mod_rev <= rev).cloned().collect();
            if !vs.is_empty() {
                chunk.push((k.clone(), vs));
            }
        };
        shard.walk(CHUNK_KEYS, keep_at_cut, |chunk| {
            let last = chunk.len();
            for (i, (k, vs)) in chunk.drain(..).enumerate() {
                put_key_v3(&mut buf, &k, &vs, &mut dicts_written);
                count += 1;
                // Out every MiB, not every chunk: 512 keys of 100 KiB values made a
                // 51 MiB buffer (the chunk's values are shared with the store, not copied).
                if buf.len() < BUF_BYTES && i + 1 < last {
                    continue;
                }
                crc = crc32c::crc32c_append(crc, &buf);
                file.write_all(&buf)?;
                size += buf.len() as u64;
                buf.clear();
                if size - checked >= 1 << 20 {
                    check_room(&self.dir)?;
                    checked = size;
                }
                if size - out.started >= WRITE_OUT_BYTES {
                    file.flush()?;
                    out.step(file.get_ref(), size);
                }
            }
            Ok::<(), std::io::Error>(())
        })?;
        buf.put_u64_le(count);
        crc = crc32c::crc32c_append(crc, &buf);
        buf.put_u32_le(crc);
        file.write_all(&buf)?;
        size += buf.len() as u64;
        let f = file.into_inner().map_err(|e| e.into_error())?;
        f.sync_all()?;
        Ok(size)
    }
}

/// How much of a checkpoint is handed to the disk at a time (WriteOut).
const WRITE_OUT_BYTES: u64 = 4 << 20;

/// A checkpoint's file written out as it grows, the way RocksDB's bytes_per_sync does:
/// each step starts the disk write of what was written since the last one and waits for
/// the step before it. Without it a prefix's checkpoint (hundreds of MiB with its history)
/// sat dirty in the page cache until the final fsync, and every fsync-mode log's fsync
/// queued behind that flush on the same disk: the put benchmark's slowest fsync-mode puts
/// took 78–88 ms with checkpoints and 21–27 ms without (docs/bench/put-2026-11-26).
/// Dirty pages of a checkpoint now stay within two steps. On tmpfs these calls do nothing.
#[derive(Default)]
struct WriteOut {
    waited: u64,  // written to the disk up to here
    started: u64, // handed to the disk up to here
}

/// A file written out in WRITE_OUT_BYTES steps as it is written (WriteOut):
/// a replicated member's snapshot on disk (replication/disk_log.rs), whose
/// final fsync would otherwise queue its raft log's fdatasyncs behind it.
pub struct WrittenOut<'a> {
    file: &'a File,
    out: WriteOut,
    size: u64,
}

impl<'a> WrittenOut<'a> {
    /// `size`: the bytes already in the file.
    pub fn new(file: &'a File, size: u64) -> Self {
        WrittenOut { file, out: WriteOut { waited: size, started: size }, size }
    }
}

impl std::io::Write for WrittenOut<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let n = (&mut &*self.file).write(b)?;
        self.size += n as u64;
        if self.size - self.out.started >= WRITE_OUT_BYTES {
            self.out.step(self.file, self.size);
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl WriteOut {
    fn step(&mut self, f: &File, size: u64) {
        use std::os::unix::io::AsRawFd;
        #[cfg(target_os = "linux")]
        // SAFETY: sync_file_range only reads the descriptor and the ranges given; errors
        // (an unsupported file system) are ignored: the final fsync still makes it durable.
        unsafe {
            libc::sync_file_range(f.as_raw_fd(), self.started as i64, (size - self.started) as i64, libc::SYNC_FILE_RANGE_WRITE);
            if self.started > self.waited {
                let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER;
                libc::sync_file_range(f.as_raw_fd(), self.waited as i64, (self.started - self.waited) as i64, flags);
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = f;
        (self.waited, self.started) = (self.started, size);
    }
}

/// What a checkpoint leaves free for the logs' appends: an eighth of the file
/// system, at most 64 MiB. A checkpoint that would take more stops as if the
/// disk were full, so that neither it nor its retries (which write up to the
/// free space and remove it again) make a log write fail meanwhile.
pub fn reserve_for_logs(fs_bytes: u64) -> u64 {
    (fs_bytes / 8).min(64 << 20)
}

/// Fails (StorageFull) when the file system of `dir` has less free than
/// `reserve_for_logs` leaves the logs. Checked before a checkpoint and after
/// each MiB of it: the bound is one MiB (and the buffer's MiB) past the reserve.
fn check_room(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else { return Ok(()) };
    // SAFETY: statvfs fills the zeroed struct it is given from a valid C string path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Ok(()); // no answer: the write itself will tell
    }
    let unit = st.f_frsize as u64;
    let (free, total) = (st.f_bavail as u64 * unit, st.f_blocks as u64 * unit);
    let keep = reserve_for_logs(total);
    if free < keep {
        return Err(std::io::Error::new(
            std::io::ErrorKind::StorageFull,
            format!(
                "No space left on device for a checkpoint: {} free, less than the {} it leaves to the logs",
                crate::quota::human(free),
                crate::quota::human(keep)
            ),
        ));
    }
    Ok(())
}

/// The items of a third-format checkpoint: packed values stay packed, each
/// holding the dictionary read before it.
fn get_items_v3(b: &mut &[u8]) -> Result<Vec<(Bytes, Vec<Version>)>, String> {
    let short = || "truncated".to_string();
    let mut dicts: std::collections::HashMap<u32, Arc<Dict>> = std::collections::HashMap::new();
    let mut keys = Vec::new();
    while b.has_remaining() {
        match b.get_u8() {
            ITEM_DICT => {
                if b.remaining() < 8 {
                    return Err(short());
                }
                let (id, n) = (b.get_u32_le(), b.get_u32_le() as usize);
                if b.remaining() < n {
                    return Err(short());
                }
                dicts.insert(id, Dict::new(&b[..n]));
                b.advance(n);
            }
            ITEM_KEY => {
                if b.remaining() < 4 {
                    return Err(short());
                }
                let kl = b.get_u32_le() as usize;
                if b.remaining() < kl + 4 {
                    return Err(short());
                }
                let key = Bytes::copy_from_slice(&b[..kl]);
                b.advance(kl);
                let nv = b.get_u32_le() as usize;
                let mut vs = Vec::with_capacity(nv.min(1 << 16));
                for _ in 0..nv {
                    if b.remaining() < 44 {
                        return Err(short());
                    }
                    let (mod_rev, sub, create_rev, version, lease) = (b.get_i64_le(), b.get_u32_le(), b.get_i64_le(), b.get_i64_le(), b.get_i64_le());
                    let (id, vl) = (b.get_u32_le(), b.get_u32_le() as usize);
                    if b.remaining() < vl {
                        return Err(short());
                    }
                    let data = Bytes::copy_from_slice(&b[..vl]);
                    b.advance(vl);
                    let value = if id == 0 {
                        Value::Raw(data)
                    } else {
                        let dict = dicts.get(&id).ok_or_else(|| format!("value of {:?} packed with dictionary {id}, not in the file before it", String::from_utf8_lossy(&key)))?;
                        if !matches!(zstd::zstd_safe::get_frame_content_size(&data), Ok(Some(_))) {
                            return Err(format!("packed value of {:?} is not a zstd frame with its size", String::from_utf8_lossy(&key)));
                        }
                        Value::Zstd { dict: dict.clone(), data }
                    };
                    vs.push(Version { mod_rev, sub, create_rev, version, value, lease });
                }
                keys.push((key, vs));
            }
            t => return Err(format!("unknown checkpoint item {t:#x}")),
        }
    }
    Ok(keys)
}

/// A per-prefix checkpoint: (revision it covers, keys). Reads all three formats.
pub fn decode_checkpoint(buf: &[u8]) -> Result<(i64, Vec<(Bytes, Vec<Version>)>), String> {
    if buf.len() < 8 + 16 + 4 || ![CKPT_MAGIC, CKPT_MAGIC_V2, CKPT_MAGIC_V1].contains(&buf[..8].try_into().unwrap()) {
        return Err("not a meganode checkpoint (bad magic)".into());
    }
    let (body, tail) = buf.split_at(buf.len() - 4);
    if crc32c::crc32c(body) != u32::from_le_bytes(tail.try_into().unwrap()) {
        return Err("checkpoint checksum mismatch".into());
    }
    let v2 = &buf[..8] == CKPT_MAGIC_V2;
    let mut b = &body[8..];
    let rev = b.get_i64_le();
    if &buf[..8] == CKPT_MAGIC {
        let (items, count) = b.split_at(b.len() - 8);
        let nk = u64::from_le_bytes(count.try_into().unwrap()) as usize;
        let mut items = items;
        let keys = get_items_v3(&mut items)?;
        if keys.len() != nk {
            return Err(format!("{} keys where the count says {nk}", keys.len()));
        }
        return Ok((rev, keys));
    }
    let nk = if v2 {
        let (keys, count) = b.split_at(b.len() - 8);
        let nk = u64::from_le_bytes(count.try_into().unwrap()) as usize;
        b = keys;
        nk
    } else {
        b.get_u64_le() as usize
    };
    let keys = crate::snapshot::get_keys(&mut b, nk)?;
    if b.has_remaining() {
        return Err(format!("{} bytes after the last key", b.remaining()));
    }
    Ok((rev, keys))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    use etcd_client::proto::PbPutRequest;

    use super::*;
    use crate::wal::fault::FaultHook;
    use crate::wal::{Durability, Mode};

    struct FailCheckpoints(AtomicBool);

    impl FaultHook for FailCheckpoints {
        fn before(&self, op: FileOp, _: &Path, _: usize) -> std::io::Result<()> {
            if op == FileOp::Checkpoint && self.0.load(Ordering::SeqCst) {
                return Err(std::io::Error::from_raw_os_error(28));
            }
            Ok(())
        }
    }

    /// Every key with its versions, across shards (to compare a store with its recovery).
    fn state(store: &Store) -> Vec<(Bytes, Vec<Version>)> {
        let mut out = Vec::new();
        for s in store.all_shards() {
            out.extend(s.data.read().iter().map(|(k, h)| (k.clone(), h.versions().to_vec())));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Closes the store, opens `dir` again and finds the state it had; removes `dir`.
    fn recovers_the_same_state(dir: &Path, open: (Store, Arc<Wal>, std::fs::File)) {
        let before = state(&open.0);
        drop(open);
        let (store, _wal, _lock) = reopen(dir);
        assert_eq!(state(&store), before);
        drop(store);
        fs::remove_dir_all(dir).unwrap();
    }

    fn reopen(dir: &Path) -> (Store, Arc<Wal>, std::fs::File) {
        let store = Store::new();
        let (wal, _, lock) = crate::wal::open(dir, Durability::new(Mode::Buffered, &[]), &store, None).unwrap();
        store.set_sink(wal.clone());
        (store, wal, lock)
    }

    /// A checkpoint written out in several steps (WriteOut: 20 MiB of values, five
    /// steps, on the disk of the temp dir rather than tmpfs) loads back the same state.
    #[test]
    fn a_checkpoint_written_out_in_steps_loads_back() {
        let dir = std::env::temp_dir().join(format!("mgn-ckpt-steps-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let (store, wal, lock) = reopen(&dir);
        for i in 0..5_000u32 {
            let v: Vec<u8> = (0..4096u32).map(|j| (i.wrapping_mul(31) ^ j.wrapping_mul(7)) as u8).collect();
            store.put(&PbPutRequest { key: format!("/registry/configmaps/c{i:05}").into_bytes(), value: v, ..Default::default() }).unwrap();
        }
        assert!(wal.checkpoint(&store, 0, true).unwrap() >= 1);
        let ckpts = fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).filter(|e| e.path().extension().is_some_and(|x| x == "ckpt"));
        let size = ckpts.map(|e| e.metadata().unwrap().len()).max().unwrap();
        assert!(size > 4 * WRITE_OUT_BYTES, "checkpoint of {size} B: fewer than five write-out steps");
        recovers_the_same_state(&dir, (store, wal, lock));
    }

    /// After the first checkpoint, a log past the threshold is checkpointed only when
    /// that halves the prefix's files: not while every version is still retained, and
    /// at once after a compaction freed history. Either way the state recovers.
    #[test]
    fn checkpoints_only_when_they_free_space() {
        let dir = std::env::temp_dir().join(format!("mgn-ckpt-frees-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let (store, wal, lock) = reopen(&dir);
        let put = |i: u32, gen: u32| {
            let v = vec![(i ^ gen) as u8; 600];
            store.put(&PbPutRequest { key: format!("/registry/configmaps/c{i:04}").into_bytes(), value: v, ..Default::default() }).unwrap();
        };
        for i in 0..500 {
            put(i, 0);
        }
        assert_eq!(wal.checkpoint(&store, 64 << 10, false).unwrap(), 1, "the first one at the threshold");
        for gen in 1..4 {
            for i in 0..500 {
                put(i, gen);
            }
        }
        assert_eq!(wal.checkpoint(&store, 64 << 10, false).unwrap(), 0, "every version retained: nothing to free");
        store.compact(store.current_rev()).unwrap();
        assert_eq!(wal.checkpoint(&store, 64 << 10, false).unwrap(), 1, "after the compaction");
        recovers_the_same_state(&dir, (store, wal, lock));
    }

    /// With packed values a checkpoint is many times smaller than what was written: the
    /// next one is due once the log has grown past about that, not past the written bytes
    /// (which with 20× packing would let the log grow to ~40× the checkpoint before one).
    #[test]
    fn packed_prefixes_checkpoint_by_their_packed_size() {
        let dir = std::env::temp_dir().join(format!("mgn-ckpt-packed-rule-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let (store, wal, lock) = reopen(&dir);
        let put = |i: usize| {
            let v = crate::mvcc::packer::tests::object(i);
            store.put(&PbPutRequest { key: format!("/registry/pods/ns/p{i:05}").into_bytes(), value: v, ..Default::default() }).unwrap();
        };
        for i in 0..1500 {
            put(i);
        }
        crate::mvcc::packer::Packer::unpaced().pass(&store);
        assert!(wal.checkpoint(&store, 0, true).unwrap() >= 1);
        let ckpt = dir.join("registry+pods+.ckpt");
        let first = fs::metadata(&ckpt).unwrap().len();
        let shard = store.all_shards().into_iter().find(|s| s.prefix.as_ref() == b"/registry/pods/").unwrap();
        assert!(first * 3 < shard.data.read().bytes as u64, "a packed checkpoint: {first} B");
        // New keys, no history freed: the log grows by written (unpacked) bytes. Once it
        // holds over twice the packed state, a checkpoint of everything (packed again)
        // halves the files and is due.
        let mut i = 1500;
        while fs::metadata(dir.join("registry+pods+.wal")).map(|m| m.len()).unwrap_or(0) < 3 * first {
            put(i);
            i += 1;
        }
        assert!(!shard.packed.load(Ordering::Relaxed), "no packer request: the rule alone decides");
        assert_eq!(wal.checkpoint(&store, 1, false).unwrap(), 1, "due at {i} keys: the log is 3× the packed checkpoint");
        recovers_the_same_state(&dir, (store, wal, lock));
    }

    /// A checkpoint that fails for space leaves both segments and no `.tmp`
    /// behind, does not stop writes; a restart recovers everything from the
    /// two segments, and the next checkpoint covers the old one at its cut.
    #[test]
    fn a_failed_checkpoint_keeps_the_log() {
        let dir = std::env::temp_dir().join(format!("mgn-ckpt-full-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let (store, wal, lock) = reopen(&dir);
        let alarm = Arc::new(AtomicBool::new(false));
        let a = alarm.clone();
        wal.health.set_alarm_hook(Box::new(move |up| a.store(up, Ordering::SeqCst)));
        let hook = Arc::new(FailCheckpoints(AtomicBool::new(true)));
        wal.faults.set(Some(hook.clone()));
        let put = |store: &Store, k: &str| store.put(&PbPutRequest { key: k.into(), value: b"v".to_vec(), ..Default::default() }).unwrap();
        put(&store, "/registry/pods/a");
        let cut = store.current_rev();
        let log = dir.join("registry+pods+.wal");
        let old = dir.join("registry+pods+.wal.old");
        let e = wal.checkpoint(&store, 0, true).unwrap_err();
        assert!(e.to_string().contains("registry+pods+.ckpt.tmp"), "{e}");
        assert!(!dir.join("registry+pods+.ckpt.tmp").exists() && !dir.join("registry+pods+.ckpt").exists());
        assert_eq!(crate::wal::read_log(&old).unwrap().records.len(), 1);
        // The alarm is up; writes are not refused for it (the logs take appends).
        assert!(alarm.load(Ordering::SeqCst) && wal.health.alarmed() && !wal.health.down());
        assert!(!wal.refuses(|_| true, store.current_rev()));
        put(&store, "/registry/pods/b");
        assert_eq!(crate::wal::read_log(&log).unwrap().records.len(), 1);
        // A retry that fails again keeps it up; one that succeeds clears it (and covers the cut).
        assert!(wal.checkpoint(&store, 0, false).is_err());
        assert!(alarm.load(Ordering::SeqCst));
        hook.0.store(false, Ordering::SeqCst);
        assert_eq!(wal.checkpoint(&store, 1 << 30, false).unwrap(), 1, "the owed cut is retried whatever the log's size");
        assert!(!alarm.load(Ordering::SeqCst) && !wal.health.alarmed());
        assert!(!old.exists());
        assert_eq!(decode_checkpoint(&fs::read(dir.join("registry+pods+.ckpt")).unwrap()).unwrap().0, cut);
        // Fail the next one again (at a new cut), and restart with its segments left.
        hook.0.store(true, Ordering::SeqCst);
        assert!(wal.checkpoint(&store, 0, true).is_err());
        let cut = store.current_rev();
        let before = state(&store);
        drop((store, wal, lock));

        let (store, wal, lock) = reopen(&dir);
        assert_eq!(state(&store), before);
        // The cut left behind is finished first: the checkpoint holds what the old segment held.
        put(&store, "/registry/pods/c");
        assert_eq!(wal.checkpoint(&store, 1 << 30, false).unwrap(), 1);
        let (rev, keys) = decode_checkpoint(&fs::read(dir.join("registry+pods+.ckpt")).unwrap()).unwrap();
        assert_eq!((rev, keys.len()), (cut, 2));
        assert!(!old.exists());
        assert_eq!(crate::wal::read_log(&log).unwrap().records.len(), 1);
        assert_eq!(wal.checkpoint(&store, 0, true).unwrap(), 1);
        let (rev, keys) = decode_checkpoint(&fs::read(dir.join("registry+pods+.ckpt")).unwrap()).unwrap();
        assert_eq!((rev, keys.len()), (store.current_rev(), 3));
        assert_eq!(fs::metadata(&log).unwrap().len(), 0);
        recovers_the_same_state(&dir, (store, wal, lock));
    }

    /// Checkpoints taken while another thread writes, deletes and compacts
    /// the same prefix (each one cut at one revision, read in chunks while
    /// the writes go on): the state recovered from checkpoint + segments
    /// equals the store's, history included.
    #[test]
    fn checkpoints_beside_writes_and_compactions_recover_the_state() {
        use etcd_client::proto::PbDeleteRequest;
        let dir = std::env::temp_dir().join(format!("mgn-ckpt-live-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let (store, wal, lock) = reopen(&dir);
        let store = Arc::new(store);
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (store, stop) = (store.clone(), stop.clone());
            std::thread::spawn(move || {
                let (mut i, mut compactions) = (0u64, 0);
                while !stop.load(Ordering::Relaxed) || i < 20_000 {
                    let k = format!("/registry/pods/ns/p{:05}", (i * 7919) % 3000);
                    if i % 11 == 0 {
                        store.delete_range(&PbDeleteRequest { key: k.into(), ..Default::default() }).unwrap();
                    } else {
                        store.put(&PbPutRequest { key: k.into(), value: vec![i as u8; 300], ..Default::default() }).unwrap();
                    }
                    // The writer does not wait for its puts to be published (the server
                    // does), so the published revision may not have moved since the last
                    // compaction: compact only above it, as a client at that revision would.
                    let at = store.current_rev() - 500;
                    if i % 2_500 == 2_000 && at > store.compacted_rev() {
                        store.compact(at).unwrap();
                        compactions += 1;
                    }
                    i += 1;
                }
                compactions
            })
        };
        let mut taken = 0;
        while !writer.is_finished() {
            taken += wal.checkpoint(&store, 0, true).unwrap();
            if taken > 30 {
                stop.store(true, Ordering::Relaxed);
            }
        }
        let compactions = writer.join().unwrap();
        assert!(taken >= 3, "only {taken} checkpoints");
        assert!(compactions >= 2, "only {compactions} compactions");
        recovers_the_same_state(&dir, (Arc::into_inner(store).unwrap(), wal, lock));
    }

    /// Packed values go into the checkpoint packed, with their dictionary, and come back
    /// packed (no decoding at load) and equal; the prefix keeps packing with that dictionary.
    /// The same keys in the second format (raw values) decode to the same state.
    #[test]
    fn packed_values_round_trip_through_a_checkpoint() {
        let dir = std::env::temp_dir().join(format!("mgn-ckpt-packed-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let (store, wal, lock) = reopen(&dir);
        for i in 0..1500 {
            let v = if i % 10 == 3 { vec![(i % 251) as u8; 10] } else { crate::mvcc::packer::tests::object(i) };
            store.put(&PbPutRequest { key: format!("/registry/pods/ns/p{i:05}").into_bytes(), value: v, ..Default::default() }).unwrap();
        }
        let mut p = crate::mvcc::packer::Packer::unpaced();
        p.pass(&store);
        assert!(store.packing.packed.load(Ordering::Relaxed) >= 1300);
        assert!(wal.checkpoint(&store, 0, true).unwrap() >= 1);
        let file = fs::read(dir.join("registry+pods+.ckpt")).unwrap();
        assert_eq!(&file[..8], CKPT_MAGIC);
        let (rev, keys) = decode_checkpoint(&file).unwrap();
        assert_eq!((rev, keys.len()), (store.current_rev(), 1500));
        let raw_total: usize = keys.iter().flat_map(|(_, vs)| vs.iter().map(|v| v.value.len())).sum();
        assert!(file.len() * 3 < raw_total, "checkpoint {} B for {raw_total} B written", file.len());
        // The second format of the same keys: raw values, the same state.
        let mut v2 = CKPT_MAGIC_V2.to_vec();
        v2.put_i64_le(rev);
        for (k, vs) in &keys {
            crate::snapshot::put_key(&mut v2, k, vs);
        }
        v2.put_u64_le(keys.len() as u64);
        let crc = crc32c::crc32c(&v2);
        v2.put_u32_le(crc);
        let (rev2, keys2) = decode_checkpoint(&v2).unwrap();
        assert_eq!((rev2, &keys2), (rev, &keys));
        assert!(keys2.iter().all(|(_, vs)| vs.iter().all(|v| !v.value.is_packed())));
        let mut bad = file.clone();
        bad[20] ^= 1;
        assert!(decode_checkpoint(&bad).is_err());
        let before = state(&store);
        drop((store, wal, lock));

        let (store, _wal, _lock) = reopen(&dir);
        assert_eq!(state(&store), before);
        let packed: usize = state(&store).iter().map(|(_, vs)| vs.iter().filter(|v| v.value.is_packed()).count()).sum();
        assert!(packed >= 1300, "{packed} values loaded packed");
        let shard = store.all_shards().into_iter().find(|s| s.prefix.as_ref() == b"/registry/pods/").unwrap();
        assert!(shard.data.read().dict.is_some(), "the prefix keeps its dictionary");
        store.put(&PbPutRequest { key: b"/registry/pods/ns/new".to_vec(), value: crate::mvcc::packer::tests::object(7), ..Default::default() }).unwrap();
        let mut p = crate::mvcc::packer::Packer::unpaced();
        p.pass(&store);
        assert_eq!((store.packing.packed.load(Ordering::Relaxed), store.packing.dicts.load(Ordering::Relaxed)), (1, 0), "only the new value packed, no new dictionary");
        drop(store);
        fs::remove_dir_all(&dir).unwrap();
    }
}
