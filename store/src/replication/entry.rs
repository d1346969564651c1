//! A replicated log entry (docs/design.md §10): the store's own write-ahead
//! records, so a member's log, its WAL and a replica's apply share one format.
//!
//! ```text
//! entry: rev:i64 (little-endian) | record*
//!   rev > 0: one committed revision, its PUT and DELETE records (§5 "Record framing")
//!   rev = 0: one lease change, a LEASE_GRANT or LEASE_REVOKE record (no revision, as in etcd)
//!   rev = -1: a member's attributes, its name and client URLs (members.rs)
//!   rev = -2: a compaction: compact_rev:i64 (LE)
//!   rev = -3: a member's new peer URLs (MemberUpdate, members.rs)
//!   rev = -4: an auth change, opaque here (crate::auth::ops; applied by `AuthLog`)
//!   rev = -5: an alarm raised or disarmed: action:u8 (1 raise, 0 disarm) | member:u64 | alarm:i32 (LE)
//! ```
use bytes::Bytes;

use crate::mvcc::key_history::Version;
use crate::mvcc::watch_hub::Event;
use crate::wal::{decode_records, encode_event, encode_lease_grant, encode_lease_revoke, Record};

/// What an entry asks a member to apply.
#[derive(Debug, PartialEq)]
pub enum Change {
    /// A revision and its versions in order (a tombstone for a delete).
    Revision(i64, Vec<(Bytes, Version)>),
    LeaseGrant { id: i64, ttl: i64 },
    LeaseRevoke(i64),
    /// A member's name and client URLs (etcd's published attributes).
    Attributes { id: u64, name: String, client_urls: Vec<String> },
    /// History compacted at this revision (etcd's Compact, applied on every member).
    Compact(i64),
    /// A member's new peer URLs (etcd's MemberUpdate).
    PeerUrls { id: u64, peer_urls: Vec<String> },
    /// An auth change (users, roles, auth on or off, a simple token).
    Auth(Vec<u8>),
    /// etcd's Alarm ACTIVATE (`raise`) or DEACTIVATE of `alarm` for `member`.
    Alarm { raise: bool, member: u64, alarm: i32 },
}

/// The entry revision that marks an alarm change.
pub const ALARM: i64 = -5;

pub fn encode_alarm(raise: bool, member: u64, alarm: i32) -> Vec<u8> {
    let mut out = ALARM.to_le_bytes().to_vec();
    out.push(raise as u8);
    out.extend_from_slice(&member.to_le_bytes());
    out.extend_from_slice(&alarm.to_le_bytes());
    out
}

/// The entry revision that marks an auth change.
pub const AUTH: i64 = -4;

pub fn encode_auth(body: &[u8]) -> Vec<u8> {
    let mut out = AUTH.to_le_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

/// The entry revision that marks a compaction.
pub const COMPACT: i64 = -2;

pub fn encode_compact(rev: i64) -> Vec<u8> {
    let mut out = COMPACT.to_le_bytes().to_vec();
    out.extend_from_slice(&rev.to_le_bytes());
    out
}

/// The entry of revision `rev`, whose writes are `events`.
pub fn encode(rev: i64, events: &[Event]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + events.iter().map(|e| 64 + e.key.len() + e.kv.value.len()).sum::<usize>());
    out.extend_from_slice(&rev.to_le_bytes());
    for e in events {
        encode_event(&mut out, e);
    }
    out
}

pub fn encode_grant(id: i64, ttl: i64) -> Vec<u8> {
    let mut out = 0i64.to_le_bytes().to_vec();
    encode_lease_grant(&mut out, id, ttl);
    out
}

pub fn encode_revoke(id: i64) -> Vec<u8> {
    let mut out = 0i64.to_le_bytes().to_vec();
    encode_lease_revoke(&mut out, id);
    out
}

pub fn decode(data: &[u8]) -> Result<Change, String> {
    let (head, body) = data.split_at_checked(8).ok_or("replicated entry shorter than its revision")?;
    let rev = i64::from_le_bytes(head.try_into().expect("8 bytes"));
    if rev == super::members::ATTRIBUTES {
        let (id, name, client_urls) = super::members::decode_attributes(body)?;
        return Ok(Change::Attributes { id, name, client_urls });
    }
    if rev == super::members::PEER_URLS {
        let (id, peer_urls) = super::members::decode_peer_urls(body)?;
        return Ok(Change::PeerUrls { id, peer_urls });
    }
    if rev == AUTH {
        return Ok(Change::Auth(body.to_vec()));
    }
    if rev == ALARM {
        let b: &[u8; 13] = body.try_into().map_err(|_| "alarm entry of the wrong length")?;
        let member = u64::from_le_bytes(b[1..9].try_into().expect("8 bytes"));
        return Ok(Change::Alarm { raise: b[0] == 1, member, alarm: i32::from_le_bytes(b[9..].try_into().expect("4 bytes")) });
    }
    if rev == COMPACT {
        let at = body.try_into().map(i64::from_le_bytes).map_err(|_| "compaction entry without its revision")?;
        return Ok(Change::Compact(at));
    }
    if rev < 0 {
        return Err(format!("replicated entry of unknown kind {rev}"));
    }
    let records = decode_records(body).ok_or_else(|| format!("replicated entry of revision {rev}: a record is torn or corrupt"))?;
    if rev == 0 {
        return match records.as_slice() {
            [Record::LeaseGrant { id, ttl }] => Ok(Change::LeaseGrant { id: *id, ttl: *ttl }),
            [Record::LeaseRevoke(id)] => Ok(Change::LeaseRevoke(*id)),
            other => Err(format!("replicated lease entry holds {other:?}")),
        };
    }
    let mut writes = Vec::with_capacity(records.len());
    for r in records {
        match r {
            Record::Put { key, v } if v.mod_rev == rev => writes.push((key, v)),
            Record::Delete { key, rev: r, sub } if r == rev => {
                writes.push((key, Version { mod_rev: rev, sub, create_rev: 0, version: 0, value: Default::default(), lease: 0 }))
            }
            other => return Err(format!("replicated entry of revision {rev} holds {other:?}")),
        }
    }
    Ok(Change::Revision(rev, writes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_round_trips_and_a_bad_one_is_refused() {
        let put = Version { mod_rev: 7, sub: 0, create_rev: 3, version: 2, value: Bytes::from_static(b"v").into(), lease: 5 };
        let del = Version { mod_rev: 7, sub: 1, create_rev: 0, version: 0, value: Default::default(), lease: 0 };
        let events = vec![
            Event { key: Bytes::from_static(b"/registry/pods/a"), kv: put.clone(), prev: None },
            Event { key: Bytes::from_static(b"/registry/pods/b"), kv: del.clone(), prev: None },
        ];
        let data = encode(7, &events);
        assert_eq!(
            decode(&data).unwrap(),
            Change::Revision(7, vec![(Bytes::from_static(b"/registry/pods/a"), put), (Bytes::from_static(b"/registry/pods/b"), del)])
        );
        let mut bad = data.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert!(decode(&bad).is_err(), "a flipped bit");
        assert!(decode(&data[..data.len() - 1]).is_err(), "a torn record");
        assert!(decode(&data[..4]).is_err());
        let mut other_rev = data.clone();
        other_rev[..8].copy_from_slice(&8i64.to_le_bytes());
        assert!(decode(&other_rev).is_err(), "records of another revision");
        let mut no_rev = data;
        no_rev[..8].copy_from_slice(&0i64.to_le_bytes());
        assert!(decode(&no_rev).is_err(), "key records without a revision");
    }

    #[test]
    fn lease_entries_round_trip() {
        assert_eq!(decode(&encode_grant(42, 60)).unwrap(), Change::LeaseGrant { id: 42, ttl: 60 });
        assert_eq!(decode(&encode_revoke(42)).unwrap(), Change::LeaseRevoke(42));
        let mut two = encode_grant(1, 5);
        two.extend_from_slice(&encode_revoke(1)[8..]);
        assert!(decode(&two).is_err(), "one lease change per entry");
        assert_eq!(decode(&encode_compact(77)).unwrap(), Change::Compact(77));
        assert_eq!(decode(&encode_auth(b"op")).unwrap(), Change::Auth(b"op".to_vec()));
        assert_eq!(decode(&encode_alarm(true, 9, 1)).unwrap(), Change::Alarm { raise: true, member: 9, alarm: 1 });
        assert_eq!(decode(&encode_alarm(false, 9, 2)).unwrap(), Change::Alarm { raise: false, member: 9, alarm: 2 });
        assert!(decode(&encode_alarm(true, 9, 1)[..15]).is_err());
        assert!(decode(&encode_compact(77)[..12]).is_err());
    }
}
