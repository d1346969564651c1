//! Per-prefix checkpoints (docs/design.md, "Checkpoints"): the prefix's keys
//! written to `<stem>.ckpt` (tmp, fsync, rename, fsync dir), then its log cut.
use std::fs::{self, File};
use std::io::{Seek, SeekFrom, Write};
use std::sync::atomic::Ordering;

use bytes::{Buf, BufMut, Bytes};

use super::sink::Wal;
use crate::mvcc::key_history::Version;
use crate::mvcc::Store;

pub const CKPT_MAGIC: &[u8; 8] = b"MGNCKPT1";

impl Wal {
    /// Writes a checkpoint of every shard whose log has grown past `min_bytes`
    /// and truncates that log. The shard is read-locked throughout, so the
    /// checkpoint holds exactly what the log held.
    pub fn checkpoint(&self, store: &Store, min_bytes: u64, force: bool) -> std::io::Result<usize> {
        let mut n = 0;
        for shard in store.all_shards() {
            let Some(log) = self.logs.read().get(shard.prefix.as_ref()).cloned().flatten() else { continue };
            let threshold = min_bytes.max(log.last_ckpt.load(Ordering::Relaxed)).max(1);
            if !force && log.io.lock().size < threshold {
                continue;
            }
            let g = shard.data.read();
            log.flush_to(i64::MAX, &self.metrics)?;
            let rev = store.current_rev();
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
            {
                let mut f = File::create(&tmp)?;
                f.write_all(&out)?;
                f.sync_all()?;
            }
            fs::rename(&tmp, &dst)?;
            File::open(&self.dir)?.sync_all()?;
            let mut io = log.io.lock();
            io.file.set_len(0)?;
            io.file.seek(SeekFrom::Start(0))?;
            io.file.sync_all()?;
            io.size = 0;
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
