//! The log record format (docs/design.md, "Record framing"): encoding,
//! decoding, and reading a whole log back with torn-tail detection.
use std::fs;
use std::path::Path;

use bytes::{Buf, BufMut, Bytes};

use crate::mvcc::key_history::Version;
use crate::mvcc::watch_hub::Event;

// Record types (docs/design.md, "Write-ahead log").
pub(super) const REC_PUT: u8 = 1;
pub(super) const REC_DELETE: u8 = 2;
pub(super) const REC_COMPACT: u8 = 3;
pub(super) const REC_LEASE_GRANT: u8 = 4;
pub(super) const REC_LEASE_REVOKE: u8 = 5;
pub(super) const REC_REV_FLOOR: u8 = 6;

fn frame(out: &mut Vec<u8>, payload_len: usize, write: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.put_u32_le(payload_len as u32);
    out.put_u32_le(0);
    write(out);
    debug_assert_eq!(out.len() - start - 8, payload_len);
    let crc = crc32c::crc32c(&out[start + 8..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

pub fn encode_event(out: &mut Vec<u8>, e: &Event) {
    let v = &e.kv;
    if v.is_tombstone() {
        frame(out, 1 + 8 + 4 + 4 + e.key.len(), |o| {
            o.put_u8(REC_DELETE);
            o.put_i64_le(v.mod_rev);
            o.put_u32_le(v.sub);
            o.put_u32_le(e.key.len() as u32);
            o.put_slice(&e.key);
        });
    } else {
        frame(out, 1 + 8 + 4 + 8 + 8 + 8 + 4 + e.key.len() + 4 + v.value.len(), |o| {
            o.put_u8(REC_PUT);
            o.put_i64_le(v.mod_rev);
            o.put_u32_le(v.sub);
            o.put_i64_le(v.create_rev);
            o.put_i64_le(v.version);
            o.put_i64_le(v.lease);
            o.put_u32_le(e.key.len() as u32);
            o.put_slice(&e.key);
            let value = v.value.cow();
            o.put_u32_le(value.len() as u32);
            o.put_slice(&value);
        });
    }
}

pub(super) fn encode_pair(out: &mut Vec<u8>, kind: u8, a: i64, b: Option<i64>) {
    let n = 1 + 8 + if b.is_some() { 8 } else { 0 };
    frame(out, n, |o| {
        o.put_u8(kind);
        o.put_i64_le(a);
        if let Some(b) = b {
            o.put_i64_le(b);
        }
    });
}

/// A LEASE_GRANT record (the lease log's, and a replicated lease entry's).
pub fn encode_lease_grant(out: &mut Vec<u8>, id: i64, ttl: i64) {
    encode_pair(out, REC_LEASE_GRANT, id, Some(ttl));
}

/// A LEASE_REVOKE record.
pub fn encode_lease_revoke(out: &mut Vec<u8>, id: i64) {
    encode_pair(out, REC_LEASE_REVOKE, id, None);
}

/// One decoded record.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Put { key: Bytes, v: Version },
    Delete { key: Bytes, rev: i64, sub: u32 },
    Compact(i64),
    LeaseGrant { id: i64, ttl: i64 },
    LeaseRevoke(i64),
    RevFloor(i64),
}

impl Record {
    /// The revision a key record was written at (0 for the others).
    pub fn rev(&self) -> i64 {
        match self {
            Record::Put { v, .. } => v.mod_rev,
            Record::Delete { rev, .. } => *rev,
            _ => 0,
        }
    }
}

fn decode_payload(p: &[u8]) -> Option<Record> {
    let mut b = p;
    if b.remaining() < 1 {
        return None;
    }
    let kind = b.get_u8();
    let rec = match kind {
        REC_PUT => {
            if b.remaining() < 8 + 4 + 24 + 4 {
                return None;
            }
            let mod_rev = b.get_i64_le();
            let sub = b.get_u32_le();
            let create_rev = b.get_i64_le();
            let version = b.get_i64_le();
            let lease = b.get_i64_le();
            let kl = b.get_u32_le() as usize;
            if b.remaining() < kl + 4 {
                return None;
            }
            let key = Bytes::copy_from_slice(&b[..kl]);
            b.advance(kl);
            let vl = b.get_u32_le() as usize;
            if b.remaining() != vl {
                return None;
            }
            let value = Bytes::copy_from_slice(&b[..vl]).into();
            Record::Put { key, v: Version { mod_rev, sub, create_rev, version, value, lease } }
        }
        REC_DELETE => {
            if b.remaining() < 16 {
                return None;
            }
            let rev = b.get_i64_le();
            let sub = b.get_u32_le();
            let kl = b.get_u32_le() as usize;
            if b.remaining() != kl {
                return None;
            }
            Record::Delete { key: Bytes::copy_from_slice(b), rev, sub }
        }
        REC_COMPACT | REC_LEASE_REVOKE | REC_REV_FLOOR => {
            if b.remaining() != 8 {
                return None;
            }
            let a = b.get_i64_le();
            match kind {
                REC_COMPACT => Record::Compact(a),
                REC_LEASE_REVOKE => Record::LeaseRevoke(a),
                _ => Record::RevFloor(a),
            }
        }
        REC_LEASE_GRANT => {
            if b.remaining() != 16 {
                return None;
            }
            Record::LeaseGrant { id: b.get_i64_le(), ttl: b.get_i64_le() }
        }
        _ => return None,
    };
    Some(rec)
}

/// Parses one framed record at `off`: Some((record, next offset)) if whole and intact.
pub(super) fn parse_at(buf: &[u8], off: usize) -> Option<(Record, usize)> {
    if buf.len() < off + 8 {
        return None;
    }
    let len = u32::from_le_bytes(buf[off..off + 4].try_into().unwrap()) as usize;
    let crc = u32::from_le_bytes(buf[off + 4..off + 8].try_into().unwrap());
    let end = off.checked_add(8)?.checked_add(len)?;
    if len == 0 || end > buf.len() {
        return None;
    }
    let payload = &buf[off + 8..end];
    if crc32c::crc32c(payload) != crc {
        return None;
    }
    decode_payload(payload).map(|r| (r, end))
}

/// Every record of `buf`, which holds whole records only (a replicated log
/// entry's): None if any is torn, fails its CRC or is followed by stray bytes.
pub fn decode_records(buf: &[u8]) -> Option<Vec<Record>> {
    let mut out = Vec::new();
    let mut off = 0;
    while off < buf.len() {
        let (r, next) = parse_at(buf, off)?;
        out.push(r);
        off = next;
    }
    Some(out)
}

/// Result of reading a whole log file.
pub struct Replayed {
    pub records: Vec<Record>,
    /// Where the intact records end; bytes after it were a torn tail or zeros.
    pub good_len: usize,
    /// Bytes after `good_len` that are not all zeros: a torn tail.
    pub torn_bytes: usize,
    /// Bytes after `good_len` when they are all zeros: written ahead of the
    /// records (logfile.rs), the log's end, not a tear.
    pub zero_tail: usize,
}

/// Sector size for telling an unfinished write (docs/design.md §5, "Recovery rules").
const SECTOR: usize = 512;

/// Reads every record. After the last intact one, zeros are the log's end
/// (written ahead); a bad record with no intact record after it is a torn tail
/// (cut); one followed by intact records is corruption (an error naming the
/// file and offset: never skipped silently) — unless it is the mark of a write
/// the machine stopped in the middle of (`unfinished_write`).
pub fn read_log(path: &Path) -> Result<Replayed, String> {
    let buf = fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut off = 0;
    let mut records = Vec::new();
    while off < buf.len() {
        match parse_at(&buf, off) {
            Some((r, next)) => {
                records.push(r);
                off = next;
            }
            None => {
                // Past the last byte that is not zero, no record can parse.
                let end = buf.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
                if end <= off {
                    return Ok(Replayed { records, good_len: off, torn_bytes: 0, zero_tail: buf.len() - off });
                }
                if let Some(at) = (off + 1..end).find(|&o| parse_at(&buf, o).is_some()) {
                    if !unfinished_write(&buf, off, at, end) {
                        return Err(format!(
                            "{}: corrupt record at offset {off} (intact records follow at offset {at}); refusing to start",
                            path.display()
                        ));
                    }
                }
                break;
            }
        }
    }
    Ok(Replayed { records, good_len: off, torn_bytes: buf.len() - off, zero_tail: 0 })
}

/// Whether `buf[off..end]` (a bad record at `off`, the first intact one after
/// it at `at`, only zeros after `end`) is what a machine stopped in the middle
/// of one write leaves in a log with zeros written ahead: the write's sectors
/// reach the disk in any order, so some of its later records may be whole
/// while an earlier sector still holds the zeros it was to replace. Such a
/// write was never synced (no answer waited on it), so it is cut. Told by the
/// mark of a sector that was not written — the part of a sector between `off`
/// and `at` all zeros (a record's length is never 0, so a lost sector holding
/// a record's start reads as zeros from there on) — lying within one write's
/// reach of `end` (`MAX_WRITE`: the writer syncs each piece before the next,
/// and a lost sector is in the unfinished piece, as is every intact record
/// after it). A record whose CRC fails on bytes that were written (a bit flip)
/// leaves no such mark unless its own bytes hold a zero run where a sector
/// falls (docs/design.md §5, "Recovery rules").
fn unfinished_write(buf: &[u8], off: usize, at: usize, end: usize) -> bool {
    let mut mark = None;
    let mut s = off / SECTOR * SECTOR;
    while s < at {
        let (from, to) = (s.max(off), (s + SECTOR).min(at));
        if buf[from..to].iter().all(|&b| b == 0) {
            mark = Some(from);
        }
        s += SECTOR;
    }
    mark.is_some_and(|z| end - z <= super::logfile::MAX_WRITE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(key: &str, rev: i64, val: &str) -> Event {
        Event { key: Bytes::from(key.to_string()), kv: Version { mod_rev: rev, sub: 0, create_rev: rev, version: 1, value: Bytes::from(val.to_string()).into(), lease: 0 }, prev: None }
    }

    #[test]
    fn records_round_trip() {
        let mut buf = Vec::new();
        encode_event(&mut buf, &ev("/registry/pods/a", 5, "hello"));
        let del = Event { key: Bytes::from("/registry/pods/a"), kv: Version { mod_rev: 6, sub: 1, create_rev: 0, version: 0, value: Default::default(), lease: 0 }, prev: None };
        encode_event(&mut buf, &del);
        encode_pair(&mut buf, REC_LEASE_GRANT, 7, Some(30));
        let (r1, o1) = parse_at(&buf, 0).unwrap();
        assert!(matches!(r1, Record::Put { ref key, ref v } if key.as_ref() == b"/registry/pods/a" && v.mod_rev == 5 && v.value.cow().as_ref() == b"hello"));
        let (r2, o2) = parse_at(&buf, o1).unwrap();
        assert_eq!(r2, Record::Delete { key: Bytes::from("/registry/pods/a"), rev: 6, sub: 1 });
        let (r3, o3) = parse_at(&buf, o2).unwrap();
        assert_eq!(r3, Record::LeaseGrant { id: 7, ttl: 30 });
        assert_eq!(o3, buf.len());
    }

    #[test]
    fn torn_tail_is_cut_and_middle_corruption_is_an_error() {
        let dir = std::env::temp_dir().join(format!("mgn-wal-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let p = dir.join("x.wal");
        let mut buf = Vec::new();
        for i in 0..10 {
            encode_event(&mut buf, &ev("/k", i + 2, "value"));
        }
        let whole = buf.len();
        // Torn: the last record half written.
        fs::write(&p, &buf[..whole - 7]).unwrap();
        let r = read_log(&p).unwrap();
        assert_eq!(r.records.len(), 9);
        assert!(r.torn_bytes > 0);
        // Bit flip in the last record: also a tail.
        let mut flipped = buf.clone();
        flipped[whole - 2] ^= 0x10;
        fs::write(&p, &flipped).unwrap();
        assert_eq!(read_log(&p).unwrap().records.len(), 9);
        // Bit flip in the middle: intact records follow, so it is an error with the offset.
        let mut mid = buf.clone();
        mid[30] ^= 0x01;
        fs::write(&p, &mid).unwrap();
        let e = read_log(&p).err().unwrap();
        assert!(e.contains("offset 0"), "{e}");
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Ten records of 1,000-byte values.
    fn log_of_ten() -> (Vec<u8>, Vec<usize>) {
        let mut buf = Vec::new();
        let mut starts = Vec::new();
        for i in 0..10 {
            starts.push(buf.len());
            encode_event(&mut buf, &ev("/registry/pods/k", i + 2, &"v".repeat(1000)));
        }
        (buf, starts)
    }

    fn read(dir: &Path, bytes: &[u8]) -> Result<Replayed, String> {
        let p = dir.join("x.wal");
        fs::write(&p, bytes).unwrap();
        read_log(&p)
    }

    /// Zeros after the last record are the log's end (written ahead), not a
    /// tear; a record cut short before them is a torn tail.
    #[test]
    fn a_zero_tail_ends_the_log() {
        let dir = std::env::temp_dir().join(format!("mgn-wal-zeros-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let (buf, starts) = log_of_ten();
        let mut z = buf.clone();
        z.resize(buf.len() + 70_000, 0);
        let r = read(&dir, &z).unwrap();
        assert_eq!((r.records.len(), r.good_len, r.torn_bytes, r.zero_tail), (10, buf.len(), 0, 70_000));
        // The last record half written, then the zeros it did not reach.
        let mut t = buf[..starts[9] + 500].to_vec();
        t.resize(buf.len() + 70_000, 0);
        let r = read(&dir, &t).unwrap();
        assert_eq!((r.records.len(), r.good_len, r.zero_tail), (9, starts[9], 0));
        assert!(r.torn_bytes > 0);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A machine stopped in the middle of a write into zeros written ahead can
    /// leave a later record of that write whole after an earlier sector still
    /// zero: cut as torn. A bit flip with intact records after it is not
    /// that, nor is a span longer than one write: both stay corruption.
    #[test]
    fn an_unfinished_write_is_torn_and_a_bit_flip_is_corruption() {
        let dir = std::env::temp_dir().join(format!("mgn-wal-unfinished-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let (mut buf, starts) = log_of_ten();
        buf.resize(buf.len() + 8192, 0);
        // Records 0–5 synced; the write of 6–9 reached the disk but for one
        // sector inside record 6 (still zeros).
        let s = starts[6].div_ceil(SECTOR) * SECTOR;
        assert!(s + SECTOR < starts[7]);
        let mut lost = buf.clone();
        lost[s..s + SECTOR].fill(0);
        let r = read(&dir, &lost).unwrap();
        assert_eq!((r.records.len(), r.good_len), (6, starts[6]));
        assert!(r.torn_bytes > 0);
        // The sector that held record 6's header lost: its length reads zero.
        let mut head = buf.clone();
        head[starts[6]..s].fill(0);
        let r = read(&dir, &head).unwrap();
        assert_eq!((r.records.len(), r.good_len), (6, starts[6]));
        // A bit flip in record 6, intact records after it: corruption.
        let mut flip = buf.clone();
        flip[starts[6] + 100] ^= 0x04;
        let e = read(&dir, &flip).err().unwrap();
        assert!(e.contains(&format!("corrupt record at offset {}", starts[6])), "{e}");
        // A zero sector, but intact records further than one write can reach.
        let mut far = lost[..starts[7]].to_vec();
        far.resize(starts[7] + crate::wal::logfile::MAX_WRITE, b'x');
        far.extend_from_slice(&buf[starts[7]..starts[8]]);
        assert!(read(&dir, &far).err().unwrap().contains("corrupt record"));
        // A record longer than one write (it began in a piece already synced):
        // its lost sector is within reach of the end though its start is not.
        let mut big = buf[..starts[6]].to_vec();
        let big_at = big.len();
        encode_event(&mut big, &ev("/registry/pods/big", 8, &"b".repeat(crate::wal::logfile::MAX_WRITE + 4096)));
        let tail_at = big.len();
        big.extend_from_slice(&buf[starts[7]..]);
        let s = (tail_at - 2048) / SECTOR * SECTOR;
        big[s..s + SECTOR].fill(0);
        let r = read(&dir, &big).unwrap();
        assert_eq!((r.records.len(), r.good_len), (6, big_at));
        // The sector holding the start of record 6 lost where its length
        // straddles two sectors: one byte of it in the lost sector, zero.
        let mut shifted = buf[..starts[6]].to_vec();
        let mut filler = Vec::new();
        for fill in 1.. {
            filler.clear();
            encode_event(&mut filler, &ev("/registry/pods/f", 7, &"f".repeat(fill)));
            if (shifted.len() + filler.len()) % SECTOR == SECTOR - 1 {
                break;
            }
        }
        shifted.extend_from_slice(&filler);
        let six = shifted.len();
        for i in 6..10 {
            encode_event(&mut shifted, &ev("/registry/pods/k", 100 + i, &"w".repeat(1000)));
        }
        shifted.resize(shifted.len() + 4096, 0);
        shifted[six] = 0; // the low byte of the length, alone in the lost sector
        let r = read(&dir, &shifted).unwrap();
        assert_eq!((r.records.len(), r.good_len), (7, six));
        fs::remove_dir_all(&dir).unwrap();
    }
}
