//! Per-prefix checkpoints (docs/design.md, "Checkpoints"): the prefix's keys
//! written to `<stem>.ckpt` (tmp, fsync, rename, fsync dir), then its log cut.
use std::fs::{self, File};
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::atomic::Ordering;

use bytes::{Buf, BufMut, Bytes};

use super::fault::FileOp;
use super::sink::Wal;
use crate::mvcc::key_history::Version;
use crate::mvcc::Store;

fn named(path: &Path, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

pub const CKPT_MAGIC: &[u8; 8] = b"MGNCKPT1";

impl Wal {
    /// Writes a checkpoint of every shard whose log has grown past `min_bytes`
    /// and truncates that log. The shard is read-locked throughout, so the
    /// checkpoint holds exactly what the log held. The log is cut only once
    /// the checkpoint is durable (synced, renamed, directory synced); a
    /// checkpoint that fails leaves the log whole and its `.tmp` removed, and
    /// is tried again next time. Nothing runs while a log write has failed.
    pub fn checkpoint(&self, store: &Store, min_bytes: u64, force: bool) -> std::io::Result<usize> {
        let mut n = 0;
        if self.health.down() {
            return Ok(0);
        }
        for shard in store.all_shards() {
            let Some(log) = self.logs.read().get(shard.prefix.as_ref()).cloned().flatten() else { continue };
            let threshold = min_bytes.max(log.last_ckpt.load(Ordering::Relaxed)).max(1);
            if !force && log.io.lock().size < threshold {
                continue;
            }
            let g = shard.data.read();
            if let Err(e) = log.flush_to(i64::MAX, &self.metrics) {
                self.failed(&log, &e, 0);
                return Err(named(&log.path, e));
            }
            // Committed: the shard holds (and the log just wrote) every version up to it.
            let rev = store.committed_rev();
            let mut out = Vec::new();
            out.put_slice(CKPT_MAGIC);
            out.put_i64_le(rev);
            out.put_u64_le(g.len() as u64);
            for (k, h) in g.iter() {
                crate::snapshot::put_key(&mut out, k, h.versions());
            }
            let crc = crc32c::crc32c(&out);
            out.put_u32_le(crc);
            let stem = log.path.with_extension("");
            let tmp = stem.with_extension("ckpt.tmp");
            let dst = stem.with_extension("ckpt");
            let written = self.faults.check(FileOp::Checkpoint, &tmp, out.len()).and_then(|()| {
                let mut f = File::create(&tmp)?;
                f.write_all(&out)?;
                f.sync_all()?;
                fs::rename(&tmp, &dst)
            });
            if let Err(e) = written {
                // Frees what the partial checkpoint took; the log still holds everything.
                let _ = fs::remove_file(&tmp);
                return Err(named(&tmp, e));
            }
            File::open(&self.dir).and_then(|d| d.sync_all()).map_err(|e| named(&self.dir, e))?;
            let mut io = log.io.lock();
            let f = io.file.as_mut().expect("opened by the flush above");
            self.faults.check(FileOp::Truncate, &log.path, 0).and_then(|()| f.set_len(0)).map_err(|e| named(&log.path, e))?;
            // The records cut are all in the checkpoint (recovery skips them if
            // the cut is lost), so the size is 0 from here whatever the sync says.
            io.size = 0;
            let f = io.file.as_mut().unwrap();
            f.seek(SeekFrom::Start(0)).and_then(|_| f.sync_all()).map_err(|e| named(&log.path, e))?;
            drop(io);
            log.last_ckpt.store(out.len() as u64, Ordering::Relaxed);
            drop(g);
            self.metrics.checkpoints.fetch_add(1, Ordering::Relaxed);
            n += 1;
        }
        Ok(n)
    }
}

/// A per-prefix checkpoint: (revision it covers, keys).
pub fn decode_checkpoint(buf: &[u8]) -> Result<(i64, Vec<(Bytes, Vec<Version>)>), String> {
    if buf.len() < 8 + 16 + 4 || &buf[..8] != CKPT_MAGIC {
        return Err("not a meganode checkpoint (bad magic)".into());
    }
    let (body, tail) = buf.split_at(buf.len() - 4);
    if crc32c::crc32c(body) != u32::from_le_bytes(tail.try_into().unwrap()) {
        return Err("checkpoint checksum mismatch".into());
    }
    let mut b = &body[8..];
    let rev = b.get_i64_le();
    let nk = b.get_u64_le() as usize;
    let keys = crate::snapshot::get_keys(&mut b, nk)?;
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

    /// A checkpoint that fails for space leaves the log whole and no `.tmp`
    /// behind, does not stop writes, and the next one succeeds and cuts the log.
    #[test]
    fn a_failed_checkpoint_keeps_the_log() {
        let dir = std::env::temp_dir().join(format!("mgn-ckpt-full-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let store = Store::new();
        let (wal, _, _lock) = crate::wal::open(&dir, Durability::new(Mode::Buffered, &[]), &store, None).unwrap();
        store.set_sink(wal.clone());
        let hook = Arc::new(FailCheckpoints(AtomicBool::new(true)));
        wal.faults.set(Some(hook.clone()));
        let put = |k: &str| store.put(&PbPutRequest { key: k.into(), value: b"v".to_vec(), ..Default::default() }).unwrap();
        put("/registry/pods/a");
        let log = dir.join("registry+pods+.wal");
        let e = wal.checkpoint(&store, 0, true).unwrap_err();
        assert!(e.to_string().contains("registry+pods+.ckpt.tmp"), "{e}");
        assert!(!dir.join("registry+pods+.ckpt.tmp").exists() && !dir.join("registry+pods+.ckpt").exists());
        assert_eq!(crate::wal::read_log(&log).unwrap().records.len(), 1);
        assert!(!wal.health.down());
        put("/registry/pods/b");
        assert_eq!(crate::wal::read_log(&log).unwrap().records.len(), 2);
        hook.0.store(false, Ordering::SeqCst);
        assert_eq!(wal.checkpoint(&store, 0, true).unwrap(), 1);
        assert_eq!(fs::metadata(&log).unwrap().len(), 0);
        let (rev, keys) = decode_checkpoint(&fs::read(dir.join("registry+pods+.ckpt")).unwrap()).unwrap();
        assert_eq!((rev, keys.len()), (store.current_rev(), 2));
        drop((store, wal));
        fs::remove_dir_all(&dir).unwrap();
    }
}
