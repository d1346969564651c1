//! Opening a data directory: lock it, replay meta log, checkpoints and logs
//! into the store (docs/design.md, "Recovery rules"), and start the sink.
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Mutex, RwLock};

use super::fault::Faults;
use super::health::Health;
use super::logfile::LogFile;
use super::metrics::WalMetrics;
use super::record::{encode_pair, read_log, Record, Replayed, REC_COMPACT, REC_LEASE_GRANT, REC_REV_FLOOR};
use super::sink::{SyncState, Wal, REV_BLOCK};
use super::{Durability, Mode};
use crate::mvcc::key_history::Version;
use crate::mvcc::Store;

/// What recovery found, for the log line and tests.
#[derive(Debug, Default)]
pub struct RecoveryReport {
    pub files: usize,
    pub records: usize,
    pub keys: usize,
    pub torn: Vec<(PathBuf, usize, usize)>,
    pub rev: i64,
    pub compacted: i64,
    pub leases: usize,
    pub millis: u128,
    /// The auth state a `--restore-from` snapshot carried (crate::auth::persist's encoding).
    pub restored_auth: Option<Vec<u8>>,
    /// This start restored a `--restore-from` snapshot (every prefix's history is the snapshot's).
    pub restored: bool,
}

fn lock_file(dir: &Path) -> Result<File, String> {
    let path = dir.join("LOCK");
    let f = OpenOptions::new().create(true).write(true).truncate(false).open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    // SAFETY: flock on a file descriptor we own; no memory is involved.
    let r = unsafe { libc_flock(std::os::unix::io::AsRawFd::as_raw_fd(&f), 2 | 4) };
    if r != 0 {
        return Err(format!("{} is in use by another meganode-store", dir.display()));
    }
    Ok(f)
}

extern "C" {
    #[link_name = "flock"]
    fn libc_flock(fd: i32, op: i32) -> i32;
}

/// Opens (creating if needed) the data directory, replays checkpoints and
/// logs into `store`, and returns the log ready to be the store's sink.
fn is_log(p: &Path) -> bool {
    p.extension().is_some_and(|x| x == "wal" || x == "ckpt" || x == "old") && !p.ends_with("meta.wal")
}

/// Whether `dir` holds a store's logs (then --restore-from is ignored: a
/// restart with the same flags).
pub fn holds_logs(dir: &Path) -> bool {
    fs::read_dir(dir).is_ok_and(|es| es.filter_map(|e| e.ok()).any(|e| is_log(&e.path())))
}

pub fn open(dir: &Path, dur: Durability, store: &Store, restore: Option<&Path>) -> Result<(Arc<Wal>, RecoveryReport, File), String> {
    let t0 = Instant::now();
    fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let lock = lock_file(dir)?;
    let mut rep = RecoveryReport::default();
    let mut floor = 0i64;
    let mut compacted = crate::mvcc::kvstore::NEVER_COMPACTED;
    let meta_path = dir.join("meta.wal");
    if meta_path.exists() {
        let r = read_log(&meta_path)?;
        cut_tail(&meta_path, &r, &mut rep)?;
        for rec in r.records {
            match rec {
                Record::RevFloor(f) => floor = floor.max(f),
                Record::Compact(c) => compacted = compacted.max(c),
                _ => {}
            }
        }
    }
    let mut max_rev = 0i64;
    let mut lease_set: HashMap<i64, i64> = HashMap::new();
    let mut entries: Vec<PathBuf> = fs::read_dir(dir).map_err(|e| e.to_string())?.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    let mut restored = false;
    let has_logs = entries.iter().any(|p| is_log(p));
    let restore = match restore {
        Some(src) if has_logs => {
            // A restart with the same flags: the directory already holds the restored state.
            eprintln!("meganode-store: {} already holds logs; --restore-from {} ignored", dir.display(), src.display());
            None
        }
        r => r,
    };
    if let Some(src) = restore {
        let buf = fs::read(src).map_err(|e| format!("{}: {e}", src.display()))?;
        let snap = crate::snapshot::decode(&buf).map_err(|e| format!("{}: {e}", src.display()))?;
        for (k, vs) in snap.keys {
            rep.keys += 1;
            store.load_key(k, vs);
        }
        for (id, granted, _remaining) in &snap.leases {
            lease_set.insert(*id, *granted);
        }
        max_rev = snap.rev;
        compacted = compacted.max(snap.compacted);
        rep.restored_auth = snap.auth;
        restored = true;
        rep.restored = true;
    }
    // The revision each prefix's checkpoint covers, by its `.ckpt` path.
    let mut covered: HashMap<PathBuf, i64> = HashMap::new();
    for path in &entries {
        if path.extension().map_or(true, |x| x != "ckpt") {
            continue;
        }
        let buf = fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let (rev, keys) = super::checkpoint::decode_checkpoint(&buf).map_err(|e| format!("{}: {e}", path.display()))?;
        covered.insert(path.clone(), rev);
        max_rev = max_rev.max(rev);
        rep.files += 1;
        for (k, vs) in keys {
            rep.keys += 1;
            store.load_key(k, vs);
        }
    }
    // Each log with the segment an unfinished cut left before it (`.wal.old`,
    // possibly alone if the run stopped before the new file was made).
    let mut logs: Vec<PathBuf> = entries
        .iter()
        .filter_map(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.ends_with(".wal.old") {
                Some(p.with_extension(""))
            } else if name.ends_with(".wal") && name != "meta.wal" {
                Some(p.clone())
            } else {
                None
            }
        })
        .collect();
    logs.sort();
    logs.dedup();
    for log in &logs {
        // Records already in this prefix's checkpoint are skipped.
        let ckpt_rev = covered.get(&log.with_extension("ckpt")).copied().unwrap_or(0);
        for path in [super::logfile::old_segment(log), log.clone()] {
            if !path.exists() {
                continue;
            }
            let r = read_log(&path)?;
            cut_tail(&path, &r, &mut rep)?;
            rep.files += 1;
            for rec in r.records {
                rep.records += 1;
                match rec {
                    Record::Put { key, v } => {
                        max_rev = max_rev.max(v.mod_rev);
                        if v.mod_rev > ckpt_rev {
                            store.load_version(&key, v);
                        }
                    }
                    Record::Delete { key, rev, sub } => {
                        max_rev = max_rev.max(rev);
                        if rev > ckpt_rev {
                            store.load_version(&key, Version { mod_rev: rev, sub, create_rev: 0, version: 0, value: Default::default(), lease: 0 });
                        }
                    }
                    Record::LeaseGrant { id, ttl } => {
                        lease_set.insert(id, ttl);
                    }
                    Record::LeaseRevoke(id) => {
                        lease_set.remove(&id);
                    }
                    Record::Compact(c) => compacted = compacted.max(c),
                    Record::RevFloor(f) => floor = floor.max(f),
                }
            }
        }
    }
    // Leases come back with their full TTL, as etcd's do after a restart or
    // leader change: their holders renew or let them lapse.
    for (id, ttl) in &lease_set {
        store.leases.restore(*id, *ttl, *ttl);
    }
    rep.leases = lease_set.len();
    let rev = max_rev.max(floor).max(1);
    store.set_revisions(rev, compacted);
    if compacted > 0 {
        store.compact_loaded(compacted);
    }
    let faults = Arc::new(Faults::default());
    // Opened at their first write, as the prefix logs: a start on a full disk
    // (or one that cannot create a file) is an outage to retry, not an exit.
    let meta = Arc::new(LogFile::new(meta_path.clone(), Mode::Fsync, faults.clone()));
    let leases_path = dir.join("leases.wal");
    let leases = Arc::new(LogFile::new(leases_path, if dur.default == Mode::None { Mode::Buffered } else { dur.default }, faults.clone()));
    let sync = Arc::new(SyncState {
        wake: Mutex::new(false),
        cv: parking_lot::Condvar::new(),
        appended: AtomicI64::new(0),
        records: Default::default(),
        wake_at: Default::default(),
        last_append: Default::default(),
        logs: RwLock::new(Vec::new()),
    });
    let wal = Arc::new(Wal {
        sync,
        handoff: Default::default(),
        vis: store.vis.clone(),
        dir: dir.to_path_buf(),
        dur,
        logs: RwLock::new(HashMap::new()),
        meta,
        leases,
        floor: AtomicI64::new(0),
        floor_wanted: Mutex::new(0),
        floor_next: AtomicI64::new(0),
        metrics: Arc::new(WalMetrics::default()),
        health: Health::default(),
        faults,
    });
    {
        let w = wal.clone();
        std::thread::Builder::new().name("wal-fsync".into()).spawn(move || w.flusher()).map_err(|e| e.to_string())?;
        let w = wal.clone();
        std::thread::Builder::new().name("wal-write".into()).spawn(move || w.writer()).map_err(|e| e.to_string())?;
    }
    // Open now the logs the next checkpoint must cover: every prefix's after a
    // restore, and a prefix's whose cut an earlier run did not finish
    // (`.wal.old` left), even if nothing is written to it again.
    for s in store.all_shards() {
        if !restored && !super::logfile::old_segment(&wal.log_path(&s.prefix)).exists() {
            continue;
        }
        let k = s.data.read().iter().next().map(|(k, _)| k.clone());
        if let Some(k) = k {
            wal.log_for(&k);
        }
    }
    if restored {
        // Persist the restored state at once as checkpoints (and leases in their
        // log), before anything else is written: the one part of a start that
        // cannot go on without writing, since the restored state is in no file
        // of the directory yet. On failure (one error line, naming the file and
        // the error) the files written so far are removed, so that the next
        // start restores again instead of taking them for the directory's state.
        let persisted = (|| -> Result<(), String> {
            for (id, ttl) in &lease_set {
                wal.leases.append(0, |buf| {
                    encode_pair(buf, REC_LEASE_GRANT, *id, Some(*ttl));
                    1
                });
            }
            wal.leases.flush_to(i64::MAX, &wal.metrics).map_err(|e| format!("{}: {e}", wal.leases.path.display()))?;
            wal.checkpoint_all(store).map_err(|e| e.to_string())?;
            // The restored compaction point, as a compaction would have left it:
            // a restart must refuse reads below it as this start does.
            if compacted > 0 {
                wal.write_meta(REC_COMPACT, compacted).map_err(|e| format!("{}: {e}", wal.meta.path.display()))?;
            }
            Ok(())
        })();
        if let Err(e) = persisted {
            undo_restore(dir);
            return Err(format!("cannot persist the state restored from {}: {e}", restore.unwrap().display()));
        }
    }
    // Reserve revisions above everything seen before accepting writes. If the
    // disk is full this fails like any log write (logged, the alarm, retried by
    // the flusher): the store starts and serves reads, and refuses every write
    // until the record is durable (no revision is reserved, crate::wal::FLOOR_MARGIN).
    let f = rev + REV_BLOCK;
    let _ = wal.write_meta(REC_REV_FLOOR, f);
    rep.rev = rev;
    rep.compacted = compacted;
    rep.millis = t0.elapsed().as_millis();
    wal.metrics.replay_ms.store(rep.millis as u64, Ordering::Relaxed);
    Ok((wal, rep, lock))
}

/// Removes the logs and checkpoints a restore that failed wrote (the directory
/// held none before it), so that the next start restores again instead of
/// taking them for the directory's state.
fn undo_restore(dir: &Path) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let ours = [".wal", ".wal.old", ".ckpt", ".ckpt.tmp"].iter().any(|x| name.ends_with(x));
        if ours && name != "meta.wal" {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// Cuts what follows the last intact record: a torn tail, or the zeros an
/// fsync log wrote ahead (the log's end, logfile.rs), so that the file's
/// length is the log's when it is opened for writing; both reported.
fn cut_tail(path: &Path, r: &Replayed, rep: &mut RecoveryReport) -> Result<(), String> {
    if r.torn_bytes == 0 && r.zero_tail == 0 {
        return Ok(());
    }
    let err = |e: std::io::Error| format!("{}: {e}", path.display());
    let f = OpenOptions::new().write(true).open(path).map_err(err)?;
    f.set_len(r.good_len as u64).map_err(err)?;
    if r.torn_bytes == 0 {
        // Said, not warned: the usual end of an fsync log past 1 MiB. In a
        // log that never writes zeros ahead it is what a lost tail looks like.
        eprintln!("meganode-store: {}: {} bytes of zeros after the last record (offset {}) cut", path.display(), r.zero_tail, r.good_len);
        return Ok(());
    }
    f.sync_all().map_err(|e| e.to_string())?;
    eprintln!(
        "meganode-store: {}: torn tail of {} bytes at offset {} (failed checksum or incomplete record) cut",
        path.display(),
        r.torn_bytes,
        r.good_len
    );
    rep.torn.push((path.to_path_buf(), r.good_len, r.torn_bytes));
    Ok(())
}

/// Reads a whole file (helper for tests).
pub fn read_all(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut v = Vec::new();
    File::open(path)?.read_to_end(&mut v)?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store never compacted comes back never compacted (etcd keeps -1 until
    /// its first compaction); a compaction at 0 comes back as 0.
    #[test]
    fn compaction_point_survives_a_restart() {
        let dir = std::env::temp_dir().join(format!("mgn-wal-compact-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let dur = Durability::new(Mode::Fsync, &[]);
        {
            let store = Store::new();
            let (log, rep, _lock) = open(&dir, dur.clone(), &store, None).unwrap();
            assert_eq!((rep.compacted, store.compacted_rev()), (-1, -1));
            drop(log);
        }
        {
            let store = Store::new();
            let (log, rep, _lock) = open(&dir, dur.clone(), &store, None).unwrap();
            assert_eq!((rep.compacted, store.compacted_rev()), (-1, -1));
            store.set_sink(log.clone());
            assert_eq!(store.compact(0), Ok(store.current_rev()));
        }
        {
            let store = Store::new();
            let (_log, rep, _lock) = open(&dir, dur.clone(), &store, None).unwrap();
            assert_eq!((rep.compacted, store.compacted_rev()), (0, 0));
            assert_eq!(store.compact(0), Err(crate::errors::StoreError::Compacted));
        }
        fs::remove_dir_all(&dir).unwrap();
    }
}
