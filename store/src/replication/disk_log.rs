//! A member's raft log on disk, for groups with `buffered` or `fsync`
//! prefixes (docs/design.md §10 "Durability across members"): every entry and
//! hard state raft hands the driver is written here before the member
//! acknowledges it, and fdatasynced first when the entry holds a key of an
//! `fsync` prefix or the hard state's vote changed. Snapshots of the store's
//! state bound the log: one starts every `snapshot_every` entries once the log
//! has also grown by the newest snapshot's size (a large state is not rewritten
//! more often than the log itself is); once one is saved at raft index I, the
//! segments wholly at or below I are deleted. A member restarts from its newest snapshot and
//! the entries after it, instead of rejoining empty.
//!
//! Files in `<data-dir>/member/raft/` (integers little-endian):
//! - `<first index, 16 hex digits>.log`: records `[u32 payload length][u32 crc32c of
//!   payload][payload]`, payload `[u8 kind][protobuf]`, kind 1 a raft `Entry`, 2 a
//!   `HardState`. Records follow in the order raft produced them: an entry at
//!   an index already written replaces it and every entry after it (a new
//!   leader's log overwrote them). A segment is named by the first index
//!   written to it; a new one starts past `SEGMENT_BYTES` and at each snapshot.
//!   A torn record at the end of the newest segment (a crash mid-write) is cut.
//! - `<index, 16 hex digits>.snap`: `MGNRSNP1`, `[u32 length][SnapshotMetadata
//!   protobuf]` (index, term, membership), `[u32 length][members]`
//!   (`members::encode_members`), then the store's snapshot stream
//!   (`crate::snapshot::write_stream_with`, its own checksum). Written to
//!   `.snap.tmp`, synced, renamed.
use std::fs::{self, File, OpenOptions};
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};

use raft::prelude::{Entry, HardState, SnapshotMetadata};

use super::entry;
use crate::wal::{Durability, Mode};

/// How a member's stop for a failed write of its disk log begins: it exits
/// rather than restart in place (main.rs), which would fail the same way.
pub const DISK_FAILED: &str = "its raft log on disk failed";

const REC_ENTRY: u8 = 1;
const REC_HARD_STATE: u8 = 2;
const SNAP_MAGIC: &[u8; 8] = b"MGNRSNP1";
/// A segment past this size is closed and a new one started.
const SEGMENT_BYTES: u64 = 64 << 20;

/// Whether a Ready's entries must be fdatasynced before the member
/// acknowledges them, by the durability plan (longest prefix wins): a revision
/// with a key of an `fsync` prefix; anything else that is not a revision
/// (membership, leases, auth, alarms, compactions) whenever any prefix is
/// `fsync`. Others are written (page cache) and acknowledged.
fn entries_need_sync(dur: &Durability, entries: &[Entry]) -> bool {
    if !dur.any_fsync() {
        return false;
    }
    entries.iter().any(|e| {
        if e.data.is_empty() {
            return false;
        }
        match entry::decode(&e.data) {
            Ok(entry::Change::Revision(_, writes)) => writes.iter().any(|(k, _)| dur.mode_for(k) == Mode::Fsync),
            _ => true,
        }
    })
}

/// Where a member's disk log lives and what it syncs.
#[derive(Clone, Debug)]
pub struct DiskConfig {
    pub dir: PathBuf,
    /// The group's durability plan (`replicated` prefixes as `none`).
    pub sync: Durability,
    /// Entries written after the last snapshot that start the next one (etcd's --snapshot-count).
    pub snapshot_every: u64,
}

/// What a restart finds.
#[derive(Debug, Default)]
pub struct Recovered {
    pub hard_state: HardState,
    /// The entries after the snapshot's index, in order, without gaps.
    pub entries: Vec<Entry>,
    pub snapshot: Option<SavedSnapshot>,
    /// A torn record cut from the newest segment's end.
    pub torn: Option<String>,
}

#[derive(Debug)]
pub struct SavedSnapshot {
    pub path: PathBuf,
    pub metadata: SnapshotMetadata,
    pub members: Vec<u8>,
}

impl SavedSnapshot {
    /// The store's stream inside the file, past the raft head.
    pub fn open_stream(&self) -> Result<impl Read, String> {
        let mut r = BufReader::with_capacity(1 << 20, File::open(&self.path).map_err(|e| format!("{}: {e}", self.path.display()))?);
        read_snapshot_head(&mut r).map_err(|e| format!("{}: {e}", self.path.display()))?;
        Ok(r)
    }
}

pub struct DiskLog {
    cfg: DiskConfig,
    file: File,
    file_bytes: u64,
    /// Segments by first index, the open one last.
    segments: Vec<(u64, PathBuf)>,
    /// Entries and bytes written since the last snapshot began.
    since_snapshot: u64,
    bytes_since_snapshot: u64,
    /// The size of the newest snapshot saved: the log grows at least as much
    /// before the next, so that snapshots of a large state cost at most as
    /// many bytes written as the log itself.
    snapshot_bytes: u64,
    /// A snapshot is being saved (one at a time).
    saving: bool,
    /// The vote and term last written: a change is synced before it is acted on.
    last_vote: (u64, u64),
    buf: Vec<u8>,
}

fn seg_name(first: u64) -> String {
    format!("{first:016x}.log")
}

fn parse_hex(name: &str, ext: &str) -> Option<u64> {
    let stem = name.strip_suffix(ext)?;
    (stem.len() == 16).then(|| u64::from_str_radix(stem, 16).ok()).flatten()
}

/// Whether `dir` holds a member's disk log (a restart recovers from it).
pub fn holds_state(dir: &Path) -> bool {
    fs::read_dir(dir).map(|rd| rd.flatten().any(|e| {
        let n = e.file_name().to_string_lossy().into_owned();
        (parse_hex(&n, ".log").is_some() && e.metadata().map(|m| m.len() > 0).unwrap_or(false)) || parse_hex(&n, ".snap").is_some()
    })).unwrap_or(false)
}

fn sync_dir(dir: &Path) -> Result<(), String> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| format!("{}: {e}", dir.display()))
}

fn put_record(out: &mut Vec<u8>, kind: u8, msg: &impl protobuf::Message) {
    let start = out.len();
    out.extend_from_slice(&[0u8; 8]);
    out.push(kind);
    msg.write_to_vec(out).expect("a protobuf message encodes into a Vec");
    let len = (out.len() - start - 8) as u32;
    let crc = crc32c::crc32c(&out[start + 8..]);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

impl DiskLog {
    /// Opens `cfg.dir` (made if missing): what it held, or None when it held nothing.
    pub fn open(cfg: DiskConfig) -> Result<(DiskLog, Option<Recovered>), String> {
        let dir = cfg.dir.clone();
        fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut segments = Vec::new();
        let mut snaps = Vec::new();
        for e in fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if let Some(i) = parse_hex(&n, ".log") {
                segments.push((i, e.path()));
            } else if let Some(i) = parse_hex(&n, ".snap") {
                snaps.push((i, e.path()));
            } else if n.ends_with(".snap.tmp") {
                let _ = fs::remove_file(e.path());
            }
        }
        segments.sort();
        snaps.sort();
        let mut rec = Recovered::default();
        // The newest snapshot whose head reads; an older one is left for the next deletion.
        while let Some((_, path)) = snaps.pop() {
            let head = File::open(&path).map_err(|e| e.to_string()).and_then(|f| read_snapshot_head(&mut BufReader::new(f)));
            match head {
                Ok((metadata, members)) => {
                    rec.snapshot = Some(SavedSnapshot { path, metadata, members });
                    break;
                }
                Err(e) => return Err(format!("{}: {e}", path.display())),
            }
        }
        let base = rec.snapshot.as_ref().map_or(0, |s| s.metadata.index);
        let n = segments.len();
        for (i, (_, path)) in segments.iter().enumerate() {
            let bytes = fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let good = replay(&bytes, base, &mut rec).map_err(|e| format!("{}: {e}", path.display()))?;
            if good < bytes.len() {
                if i + 1 < n {
                    return Err(format!("{}: a damaged record at byte {good} before the newest segment", path.display()));
                }
                let f = OpenOptions::new().write(true).open(path).map_err(|e| format!("{}: {e}", path.display()))?;
                f.set_len(good as u64).and_then(|_| f.sync_all()).map_err(|e| format!("{}: {e}", path.display()))?;
                rec.torn = Some(format!("{}: {} bytes cut at byte {good}", path.display(), bytes.len() - good));
            }
        }
        let held = rec.snapshot.is_some() || !rec.entries.is_empty() || rec.hard_state != HardState::default();
        // The commit index never points past the log (a tail cut, or a buffered log a crash shortened).
        let last = rec.entries.last().map_or(base, |e| e.index);
        rec.hard_state.commit = rec.hard_state.commit.clamp(base, last);
        let first = last + 1;
        let (path, file) = if let Some((_, p)) = segments.last() {
            let f = OpenOptions::new().append(true).open(p).map_err(|e| format!("{}: {e}", p.display()))?;
            (p.clone(), f)
        } else {
            let p = dir.join(seg_name(first));
            let f = OpenOptions::new().create(true).append(true).open(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            sync_dir(&dir)?;
            segments.push((first, p.clone()));
            (p, f)
        };
        let file_bytes = file.metadata().map_err(|e| format!("{}: {e}", path.display()))?.len();
        let snapshot_bytes = rec.snapshot.as_ref().and_then(|s| fs::metadata(&s.path).ok()).map_or(0, |m| m.len());
        let log = DiskLog {
            since_snapshot: rec.entries.len() as u64,
            bytes_since_snapshot: segments.iter().filter_map(|(_, p)| fs::metadata(p).ok()).map(|m| m.len()).sum(),
            snapshot_bytes,
            last_vote: (rec.hard_state.term, rec.hard_state.vote),
            cfg,
            file,
            file_bytes,
            segments,
            saving: false,
            buf: Vec::new(),
        };
        Ok((log, held.then_some(rec)))
    }

    /// Writes a Ready's entries and hard state, synced when the rule or a new
    /// vote asks for it: raft may count them as this member's once it returns.
    pub fn append(&mut self, entries: &[Entry], hs: Option<&HardState>) -> Result<(), String> {
        if entries.is_empty() && hs.is_none() {
            return Ok(());
        }
        if self.file_bytes > SEGMENT_BYTES {
            if let Some(e) = entries.first() {
                self.rotate(e.index)?;
            }
        }
        self.buf.clear();
        for e in entries {
            put_record(&mut self.buf, REC_ENTRY, e);
        }
        let mut sync = entries_need_sync(&self.cfg.sync, entries);
        if let Some(hs) = hs {
            put_record(&mut self.buf, REC_HARD_STATE, hs);
            // A vote must hold across a crash whenever anything is synced, or the member could vote twice in a term.
            if (hs.term, hs.vote) != self.last_vote {
                self.last_vote = (hs.term, hs.vote);
                sync |= self.cfg.sync.any_fsync();
            }
        }
        self.file.write_all(&self.buf).map_err(|e| format!("raft log write: {e}"))?;
        self.file_bytes += self.buf.len() as u64;
        self.bytes_since_snapshot += self.buf.len() as u64;
        if sync {
            self.file.sync_data().map_err(|e| format!("raft log fdatasync: {e}"))?;
        }
        self.since_snapshot += entries.len() as u64;
        Ok(())
    }

    fn rotate(&mut self, first: u64) -> Result<(), String> {
        // The closed segment's records reach the disk before the next one's.
        self.file.sync_data().map_err(|e| format!("raft log fdatasync: {e}"))?;
        let p = self.cfg.dir.join(seg_name(first));
        self.file = OpenOptions::new().create(true).append(true).open(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        sync_dir(&self.cfg.dir)?;
        self.file_bytes = 0;
        if self.segments.last().is_some_and(|(f, _)| *f == first) {
            self.segments.pop();
        }
        self.segments.push((first, p));
        Ok(())
    }

    /// Whether a snapshot should start now: none is being saved, `snapshot_every`
    /// entries and as many bytes as the newest snapshot holds were written since.
    pub fn snapshot_due(&self) -> bool {
        !self.saving && self.since_snapshot >= self.cfg.snapshot_every && self.bytes_since_snapshot >= self.snapshot_bytes
    }

    /// A snapshot starts: later entries go to a new segment (`next` is the
    /// next index raft will append), so that the ones it covers can go.
    pub fn snapshot_started(&mut self, next: u64) -> Result<(), String> {
        self.saving = true;
        self.since_snapshot = 0;
        self.bytes_since_snapshot = 0;
        if self.file_bytes > 0 {
            self.rotate(next)?;
        }
        Ok(())
    }

    /// The snapshot at `index` is saved (`saved`), or failed (None): the
    /// segments and snapshots it makes redundant are deleted.
    pub fn snapshot_done(&mut self, index: Option<u64>) {
        self.saving = false;
        let Some(index) = index else { return };
        self.snapshot_bytes = fs::metadata(self.cfg.dir.join(format!("{index:016x}.snap"))).map_or(0, |m| m.len());
        while self.segments.len() > 1 && self.segments[1].0 <= index + 1 {
            let (_, p) = self.segments.remove(0);
            let _ = fs::remove_file(p);
        }
        if let Ok(rd) = fs::read_dir(&self.cfg.dir) {
            for e in rd.flatten() {
                if parse_hex(&e.file_name().to_string_lossy(), ".snap").is_some_and(|i| i < index) {
                    let _ = fs::remove_file(e.path());
                }
            }
        }
    }

    /// Deletes every segment and snapshot: the member's next start finds no
    /// log (it rejoins empty). Segments go last to first, snapshots after, so a
    /// crash midway leaves no log with a hole.
    pub fn discard(&mut self) -> Result<(), String> {
        for (_, p) in self.segments.drain(..).rev() {
            fs::remove_file(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        }
        for e in fs::read_dir(&self.cfg.dir).map_err(|e| format!("{}: {e}", self.cfg.dir.display()))?.flatten() {
            if e.file_name().to_string_lossy().ends_with(".snap") {
                fs::remove_file(e.path()).map_err(|err| format!("{}: {err}", e.path().display()))?;
            }
        }
        sync_dir(&self.cfg.dir)?;
        // Nothing more is written here: the driver stops.
        self.file = OpenOptions::new().read(true).open("/dev/null").map_err(|e| e.to_string())?;
        Ok(())
    }

    pub fn dir(&self) -> &Path {
        &self.cfg.dir
    }
}

/// Saves a snapshot: the raft head, then the store's state from `write`
/// (which writes the stream and returns its revision). Returns the revision.
/// The file is handed to the disk as it grows (`wal::WrittenOut`), so its final
/// fsync does not hold the raft log's fdatasyncs behind hundreds of MiB.
pub fn save_snapshot(
    dir: &Path,
    metadata: &SnapshotMetadata,
    members: &[u8],
    write: impl FnOnce(&mut crate::wal::WrittenOut) -> std::io::Result<(i64, u64)>,
) -> Result<i64, String> {
    let path = dir.join(format!("{:016x}.snap", metadata.index));
    let tmp = dir.join(format!("{:016x}.snap.tmp", metadata.index));
    let run = || -> std::io::Result<i64> {
        let mut f = File::create(&tmp)?;
        let mut head = SNAP_MAGIC.to_vec();
        let meta = protobuf::Message::write_to_bytes(metadata).map_err(std::io::Error::other)?;
        head.extend_from_slice(&(meta.len() as u32).to_le_bytes());
        head.extend_from_slice(&meta);
        head.extend_from_slice(&(members.len() as u32).to_le_bytes());
        head.extend_from_slice(members);
        f.write_all(&head)?;
        let (rev, _) = write(&mut crate::wal::WrittenOut::new(&f, head.len() as u64))?;
        f.sync_all()?;
        fs::rename(&tmp, &path)?;
        Ok(rev)
    };
    let rev = run().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        format!("{}: {e}", path.display())
    })?;
    sync_dir(dir)?;
    Ok(rev)
}

fn read_snapshot_head(r: &mut impl Read) -> Result<(SnapshotMetadata, Vec<u8>), String> {
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic).map_err(|e| format!("snapshot head: {e}"))?;
    if &magic != SNAP_MAGIC {
        return Err("not a raft snapshot (bad magic)".into());
    }
    let mut part = || -> Result<Vec<u8>, String> {
        let mut len = [0u8; 4];
        r.read_exact(&mut len).map_err(|e| format!("snapshot head: {e}"))?;
        let len = u32::from_le_bytes(len) as usize;
        if len > 64 << 20 {
            return Err(format!("snapshot head: a part of {len} bytes"));
        }
        let mut b = vec![0u8; len];
        r.read_exact(&mut b).map_err(|e| format!("snapshot head: {e}"))?;
        Ok(b)
    };
    let meta = part()?;
    let members = part()?;
    let metadata: SnapshotMetadata = protobuf::Message::parse_from_bytes(&meta).map_err(|e| format!("snapshot metadata: {e}"))?;
    Ok((metadata, members))
}

/// Replays one segment's records into `rec`; returns the length of its
/// intact prefix (shorter than the file when a record is torn or damaged).
fn replay(bytes: &[u8], base: u64, rec: &mut Recovered) -> Result<usize, String> {
    let mut at = 0;
    while at + 8 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().expect("4 bytes"));
        let Some(payload) = bytes.get(at + 8..at + 8 + len) else { break };
        if len == 0 || crc32c::crc32c(payload) != crc {
            break;
        }
        match payload[0] {
            REC_ENTRY => {
                let e: Entry = protobuf::Message::parse_from_bytes(&payload[1..]).map_err(|err| format!("entry at byte {at}: {err}"))?;
                // An entry at an index already held replaces it and all after it.
                if rec.entries.last().is_some_and(|l| e.index <= l.index) {
                    let keep = rec.entries.partition_point(|x| x.index < e.index);
                    rec.entries.truncate(keep);
                }
                if e.index > base {
                    let want = rec.entries.last().map_or(base + 1, |l| l.index + 1);
                    if e.index != want {
                        return Err(format!("entry {} follows entry {} (a gap)", e.index, want - 1));
                    }
                    rec.entries.push(e);
                }
            }
            REC_HARD_STATE => {
                rec.hard_state = protobuf::Message::parse_from_bytes(&payload[1..]).map_err(|err| format!("hard state at byte {at}: {err}"))?;
            }
            k => return Err(format!("unknown record kind {k} at byte {at}")),
        }
        at += 8 + len;
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("disk-log-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    fn cfg(d: &Path) -> DiskConfig {
        DiskConfig { dir: d.to_path_buf(), sync: Durability::new(Mode::Fsync, &[("/registry/leases/".into(), Mode::None)]), snapshot_every: 4 }
    }

    fn ent(index: u64, term: u64, rev: i64, key: &[u8]) -> Entry {
        let mut e = Entry::default();
        e.index = index;
        e.term = term;
        let v = crate::mvcc::key_history::Version { mod_rev: rev, sub: 0, create_rev: rev, version: 1, value: bytes::Bytes::from_static(b"v").into(), lease: 0 };
        e.data = entry::encode(rev, &[crate::mvcc::watch_hub::Event { key: bytes::Bytes::copy_from_slice(key), kv: v, prev: None }]).into();
        e
    }

    fn hs(term: u64, vote: u64, commit: u64) -> HardState {
        let mut h = HardState::default();
        h.term = term;
        h.vote = vote;
        h.commit = commit;
        h
    }

    #[test]
    fn entries_and_hard_state_come_back_with_overwrites_and_a_torn_tail_cut() {
        let d = dir("replay");
        let (mut log, none) = DiskLog::open(cfg(&d)).unwrap();
        assert!(none.is_none() && !holds_state(&d));
        log.append(&[ent(1, 1, 1, b"/a"), ent(2, 1, 2, b"/b"), ent(3, 1, 3, b"/c")], Some(&hs(1, 7, 2))).unwrap();
        // A new leader of term 2 overwrote index 3 on.
        log.append(&[ent(3, 2, 3, b"/x"), ent(4, 2, 4, b"/y")], Some(&hs(2, 8, 4))).unwrap();
        drop(log);
        assert!(holds_state(&d));
        // A torn record at the end: half a frame.
        let seg = d.join(seg_name(1));
        let full = fs::metadata(&seg).unwrap().len();
        let mut f = OpenOptions::new().append(true).open(&seg).unwrap();
        f.write_all(&[9, 0, 0, 0, 1, 2]).unwrap();
        drop(f);
        let (_, rec) = DiskLog::open(cfg(&d)).unwrap();
        let rec = rec.unwrap();
        assert_eq!(rec.entries.iter().map(|e| (e.index, e.term)).collect::<Vec<_>>(), vec![(1, 1), (2, 1), (3, 2), (4, 2)]);
        assert_eq!((rec.hard_state.term, rec.hard_state.vote, rec.hard_state.commit), (2, 8, 4));
        assert!(rec.torn.is_some());
        assert_eq!(fs::metadata(&seg).unwrap().len(), full);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn a_snapshot_deletes_the_segments_it_covers_and_a_restart_starts_from_it() {
        let d = dir("snap");
        let (mut log, _) = DiskLog::open(cfg(&d)).unwrap();
        log.append(&(1..=5).map(|i| ent(i, 1, i as i64, b"/a")).collect::<Vec<_>>(), Some(&hs(1, 1, 5))).unwrap();
        assert!(log.snapshot_due());
        log.snapshot_started(6).unwrap();
        assert!(!log.snapshot_due());
        log.append(&[ent(6, 1, 6, b"/a"), ent(7, 1, 7, b"/a")], Some(&hs(1, 1, 6))).unwrap();
        let mut meta = SnapshotMetadata::default();
        meta.index = 5;
        meta.term = 1;
        let rev = save_snapshot(&d, &meta, b"members", |f| {
            f.write_all(b"state")?;
            Ok((5, 5))
        })
        .unwrap();
        assert_eq!(rev, 5);
        log.snapshot_done(Some(5));
        assert!(!d.join(seg_name(1)).exists(), "the segment the snapshot covers is deleted");
        // The next waits for as many bytes of log as the snapshot holds.
        log.append(&(8..=12).map(|i| ent(i, 1, i as i64, b"/a")).collect::<Vec<_>>(), None).unwrap();
        assert!(log.snapshot_due());
        log.snapshot_bytes = 1 << 30;
        assert!(!log.snapshot_due(), "a snapshot larger than the log written since waits");
        drop(log);
        let (_, rec) = DiskLog::open(cfg(&d)).unwrap();
        let rec = rec.unwrap();
        let s = rec.snapshot.as_ref().unwrap();
        assert_eq!((s.metadata.index, s.members.as_slice()), (5, &b"members"[..]));
        let mut state = String::new();
        s.open_stream().unwrap().read_to_string(&mut state).unwrap();
        assert_eq!(state, "state");
        assert_eq!(rec.entries.iter().map(|e| e.index).collect::<Vec<_>>(), (6..=12).collect::<Vec<_>>());
        assert_eq!(rec.hard_state.commit, 6);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn damage_before_the_newest_segment_is_an_error_and_a_gap_too() {
        let d = dir("damage");
        let (mut log, _) = DiskLog::open(cfg(&d)).unwrap();
        log.append(&[ent(1, 1, 1, b"/a")], None).unwrap();
        log.rotate(2).unwrap();
        log.append(&[ent(2, 1, 2, b"/a")], None).unwrap();
        drop(log);
        let seg = d.join(seg_name(1));
        let mut b = fs::read(&seg).unwrap();
        let n = b.len();
        b[n - 1] ^= 0xff;
        fs::write(&seg, &b).unwrap();
        let err = DiskLog::open(cfg(&d)).err().unwrap();
        assert!(err.contains("damaged record"), "{err}");
        let _ = fs::remove_dir_all(&d);
        let (mut log, _) = DiskLog::open(cfg(&d)).unwrap();
        log.append(&[ent(1, 1, 1, b"/a"), ent(3, 1, 2, b"/a")], None).unwrap();
        drop(log);
        let err = DiskLog::open(cfg(&d)).err().unwrap();
        assert!(err.contains("gap"), "{err}");
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn a_failed_write_is_an_error_not_an_acknowledgement() {
        let d = dir("full");
        let (mut log, _) = DiskLog::open(cfg(&d)).unwrap();
        // A disk that takes no more bytes (writes to /dev/full fail with ENOSPC).
        log.file = OpenOptions::new().write(true).open("/dev/full").unwrap();
        let err = log.append(&[ent(1, 1, 1, b"/a")], None).unwrap_err();
        assert!(err.contains("raft log write"), "{err}");
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn only_fsync_prefixes_and_non_revision_entries_ask_for_a_sync() {
        let r = &cfg(Path::new("/")).sync;
        assert!(entries_need_sync(r, &[ent(1, 1, 1, b"/registry/pods/a")]));
        assert!(!entries_need_sync(r, &[ent(1, 1, 1, b"/registry/leases/a")]));
        let mut lease = Entry::default();
        lease.data = entry::encode_grant(1, 10).into();
        assert!(entries_need_sync(r, &[lease]));
        assert!(!entries_need_sync(&Durability::new(Mode::Buffered, &[]), &[ent(1, 1, 1, b"/registry/pods/a")]));
    }
}
