//! The memory quota and the alarms, with etcd's semantics.
//!
//! **What is accounted** (see docs/design.md, "Memory quota"): every structure
//! whose size grows with what clients write — keys and their retained history,
//! leases and the keys attached to them, the watch log's events, watch streams
//! and watchers. Each is charged a per-item estimate of its in-memory cost plus
//! its variable-length bytes, maintained incrementally (atomic counters updated
//! as items come and go), so the quota check is a few atomic loads, never a scan.
//!
//! **The check** is etcd's (server/storage/quota.go, etcdserver/api/v3rpc/quota.go):
//! a request that costs something (a Put: 256 + key + value; a Txn: the dearer of
//! its branches' puts, nested txns included; a LeaseGrant: 64) is refused when the
//! accounted size plus its cost would reach the quota, and that refusal raises
//! the NOSPACE alarm for this member. Requests that cost nothing (reads, deletes,
//! compaction, defragment, lease revoke, a Txn without puts) always pass.
//!
//! **The alarms** are etcd's appliers (etcdserver/apply): while NOSPACE is raised,
//! Put, LeaseGrant and any Txn that costs something are refused even when the
//! size is back under the quota, until the alarm is disarmed; while CORRUPT is
//! raised every write (Put, DeleteRange, write Txn, Compact, LeaseGrant,
//! LeaseRevoke) is refused. Alarms live in memory only: a restart starts with none.
//! etcd persists them in its backend (the "alarm" bucket), so an etcd member comes
//! back still capped; this store comes back with the accounted size of what it
//! recovered, and the next write that does not fit raises NOSPACE again.
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};

use etcd_client::proto::{PbPutRequest, PbTxnOpRequest, PbTxnRequest, PbTxnRequestOp};
use parking_lot::Mutex;

// ---- What each item is charged (bytes). Estimates of the heap the store keeps
// per item on 64-bit Linux with glibc malloc, measured against RSS (docs/design.md).

/// Per key in a shard: its hash-map and B-tree entries, its slot (which holds the
/// first version inline) and allocator slack; the key's own bytes come on top.
pub const KEY_OVERHEAD: usize = 224;
/// Per retained version (value or tombstone): the version record (72 bytes) in a
/// history vector that grows by doubling (≈ 1.5× on average), the value's
/// allocation header, and the shared-buffer header the value gets once the watch
/// log refers to it too; the value's bytes come on top.
pub const VERSION_OVERHEAD: usize = 160;
/// Per lease: its table entry (id, TTL, expiry, key set).
pub const LEASE_OVERHEAD: i64 = 128;
/// Per key attached to a lease: its entry in the lease's key set.
pub const LEASE_KEY_OVERHEAD: i64 = 48;
/// Per event in the watch log: the event (key, version and previous version
/// records) and its share of its revision's batch. The values it refers to are
/// the key histories' (shared buffers) and are counted there.
pub const EVENT_OVERHEAD: i64 = 200;
/// Per open watch stream: its task, queues and decoder buffers.
pub const WATCH_STREAM_OVERHEAD: i64 = 16 << 10;
/// Per watcher: its record, plus its key and range end.
pub const WATCHER_OVERHEAD: i64 = 192;

pub fn key_bytes(key_len: usize) -> usize {
    KEY_OVERHEAD + key_len
}

pub fn version_bytes(value_len: usize) -> usize {
    VERSION_OVERHEAD + value_len
}

// ---- etcd's request costs (server/storage/quota.go).

/// etcd's kvOverhead: what a put costs on top of its key and value.
pub const PUT_COST_OVERHEAD: i64 = 256;
/// etcd's leaseOverhead: what a LeaseGrant costs.
pub const LEASE_GRANT_COST: i64 = 64;

pub fn cost_put(p: &PbPutRequest) -> i64 {
    PUT_COST_OVERHEAD + p.key.len() as i64 + p.value.len() as i64
}

/// The dearer branch's puts, nested txns included (etcd 3.6's costTxn).
pub fn cost_txn(t: &PbTxnRequest) -> i64 {
    fn ops(o: &[PbTxnRequestOp]) -> i64 {
        o.iter()
            .map(|op| match &op.request {
                Some(PbTxnOpRequest::RequestPut(p)) => cost_put(p),
                Some(PbTxnOpRequest::RequestTxn(t)) => cost_txn(t),
                _ => 0,
            })
            .sum()
    }
    ops(&t.success).max(ops(&t.failure))
}

/// etcd's BackendQuota.Available: free requests pass; others must leave the
/// size strictly below the quota. A quota <= 0 means none (etcd: negative).
pub fn available(size: i64, quota: i64, cost: i64) -> bool {
    cost == 0 || quota <= 0 || size + cost < quota
}

// ---- The default quota.

/// The share of the machine's memory (RAM, or the cgroup limit when lower) the
/// default quota takes. The rest covers what the accounting leaves out and what
/// is transient: allocator fragmentation after compactions, a Snapshot's encoded
/// copy of the whole store, checkpoints, request and response buffers.
pub const DEFAULT_QUOTA_PERCENT: u64 = 40;

/// Where the memory limit the default is a share of came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryLimit {
    pub bytes: u64,
    pub source: String,
}

/// The memory this process may use: the smallest of the RAM (/proc/meminfo) and
/// the memory limits of its cgroup and that cgroup's ancestors (cgroup v2
/// memory.max, cgroup v1 memory.limit_in_bytes). None when nothing is readable.
pub fn memory_limit() -> Option<MemoryLimit> {
    let mut best: Option<MemoryLimit> = None;
    let mut consider = |bytes: u64, source: String| {
        if bytes > 0 && best.as_ref().map_or(true, |b| bytes < b.bytes) {
            best = Some(MemoryLimit { bytes, source });
        }
    };
    if let Ok(m) = std::fs::read_to_string("/proc/meminfo") {
        if let Some(kb) = meminfo_total_kb(&m) {
            consider(kb * 1024, "RAM (/proc/meminfo MemTotal)".into());
        }
    }
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    for file in cgroup_limit_files(&cgroups) {
        if let Some(bytes) = std::fs::read_to_string(&file).ok().as_deref().and_then(parse_cgroup_limit) {
            consider(bytes, format!("cgroup limit ({file})"));
        }
    }
    best
}

fn meminfo_total_kb(meminfo: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| l.strip_prefix("MemTotal:")).and_then(|r| r.trim().trim_end_matches("kB").trim().parse().ok())
}

/// "max" and cgroup v1's "unlimited" (a number near 2^63) are no limit.
fn parse_cgroup_limit(v: &str) -> Option<u64> {
    let v = v.trim();
    if v == "max" {
        return None;
    }
    let n: u64 = v.parse().ok()?;
    (n < 1 << 60).then_some(n)
}

/// The limit files of the process's cgroup and of each ancestor, from /proc/self/cgroup
/// lines: "0::/path" (v2, under /sys/fs/cgroup) and "N:...memory...:/path" (v1,
/// under /sys/fs/cgroup/memory).
fn cgroup_limit_files(proc_self_cgroup: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in proc_self_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next()) else { continue };
        let (root, file) = if id == "0" && ctrls.is_empty() {
            ("/sys/fs/cgroup", "memory.max")
        } else if ctrls.split(',').any(|c| c == "memory") {
            ("/sys/fs/cgroup/memory", "memory.limit_in_bytes")
        } else {
            continue;
        };
        let mut p = path.trim_end_matches('/').to_string();
        loop {
            out.push(format!("{root}{p}/{file}"));
            match p.rfind('/') {
                Some(i) => p.truncate(i),
                None => break,
            }
            if p.is_empty() {
                out.push(format!("{root}/{file}"));
                break;
            }
        }
    }
    out
}

/// The quota in force and how it was chosen: `configured` is --quota-backend-bytes
/// (0 = the default from the machine, negative = no quota, as etcd).
pub fn resolve(configured: i64) -> (i64, String) {
    if configured < 0 {
        return (configured, format!("quota disabled (--quota-backend-bytes {configured})"));
    }
    if configured > 0 {
        return (configured, format!("quota {} (--quota-backend-bytes)", human(configured as u64)));
    }
    match memory_limit() {
        Some(m) => {
            let q = (m.bytes / 100 * DEFAULT_QUOTA_PERCENT) as i64;
            (q, format!("quota {} ({DEFAULT_QUOTA_PERCENT}% of {} {}; --quota-backend-bytes overrides)", human(q as u64), human(m.bytes), m.source))
        }
        None => {
            // Nothing readable: etcd's default.
            let q = 2i64 << 30;
            (q, format!("quota {} (etcd's default: the machine's memory could not be read; --quota-backend-bytes overrides)", human(q as u64)))
        }
    }
}

pub fn human(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

// ---- Alarms (etcd's v3alarm.AlarmStore, in memory).

/// etcd's AlarmType values.
pub const ALARM_NONE: i32 = 0;
pub const ALARM_NOSPACE: i32 = 1;
pub const ALARM_CORRUPT: i32 = 2;

/// etcd's AlarmRequest actions.
pub const ACTION_GET: i32 = 0;
pub const ACTION_ACTIVATE: i32 = 1;
pub const ACTION_DEACTIVATE: i32 = 2;

/// The raised alarms, one per (type, member) as etcd keeps them. Kept in memory
/// only: a restart clears them (etcd persists them in its backend, see the
/// module comment). The flags let the write path test for NOSPACE and
/// CORRUPT without the lock.
///
/// A NOSPACE raised by the disk (a log write failed, crate::wal::health) is
/// the store's to clear: it is disarmed by itself when the writes succeed
/// again, unless the quota or an operator raised the same alarm meanwhile.
/// It refuses only writes to durable prefixes (the log decides), so it does
/// not set `capped`, the flag etcd's NOSPACE rule reads.
#[derive(Default)]
pub struct Alarms {
    set: Mutex<AlarmSet>,
    nospace: AtomicBool,
    capped: AtomicBool,
    corrupt: AtomicBool,
}

#[derive(Default)]
struct AlarmSet {
    raised: BTreeSet<(i32, u64)>,
    /// Members whose NOSPACE only the disk raised.
    disk_only: BTreeSet<u64>,
}

impl Alarms {
    /// (member, type) of the raised alarms of type `t`, every type for ALARM_NONE;
    /// ordered by type, then member (etcd's order is its map's: unspecified).
    pub fn get(&self, t: i32) -> Vec<(u64, i32)> {
        self.set.lock().raised.iter().filter(|(ty, _)| t == ALARM_NONE || *ty == t).map(|(ty, m)| (*m, *ty)).collect()
    }

    /// Raises alarm `t` for `member`; returns the alarm (also when it was already
    /// raised) and whether it is new, None for ALARM_NONE, which etcd ignores.
    pub fn activate(&self, member: u64, t: i32) -> Option<((u64, i32), bool)> {
        if t == ALARM_NONE {
            return None;
        }
        let mut s = self.set.lock();
        let new = s.raised.insert((t, member));
        if t == ALARM_NOSPACE {
            s.disk_only.remove(&member);
        }
        self.refresh(&s);
        Some(((member, t), new))
    }

    /// Raises NOSPACE for `member` because a log write failed; true if new.
    pub fn raise_disk(&self, member: u64) -> bool {
        let mut s = self.set.lock();
        let new = s.raised.insert((ALARM_NOSPACE, member));
        if new {
            s.disk_only.insert(member);
        }
        self.refresh(&s);
        new
    }

    /// The disk works again: disarms `member`'s NOSPACE if only the disk
    /// raised it; true if it did.
    pub fn clear_disk(&self, member: u64) -> bool {
        let mut s = self.set.lock();
        let cleared = s.disk_only.remove(&member) && s.raised.remove(&(ALARM_NOSPACE, member));
        self.refresh(&s);
        cleared
    }

    /// Disarms alarm `t` of `member`; returns it if it was raised.
    pub fn deactivate(&self, member: u64, t: i32) -> Option<(u64, i32)> {
        let mut s = self.set.lock();
        let was = s.raised.remove(&(t, member));
        if t == ALARM_NOSPACE {
            s.disk_only.remove(&member);
        }
        self.refresh(&s);
        was.then_some((member, t))
    }

    fn refresh(&self, s: &AlarmSet) {
        let of = |t: i32| s.raised.range((t, 0)..=(t, u64::MAX));
        self.nospace.store(of(ALARM_NOSPACE).next().is_some(), Ordering::Release);
        self.capped.store(of(ALARM_NOSPACE).any(|(_, m)| !s.disk_only.contains(m)), Ordering::Release);
        self.corrupt.store(of(ALARM_CORRUPT).next().is_some(), Ordering::Release);
    }

    /// Whether any NOSPACE is raised (for whatever reason).
    pub fn nospace(&self) -> bool {
        self.nospace.load(Ordering::Acquire)
    }

    /// Whether a NOSPACE the quota or an operator raised is in force: etcd's
    /// rule then refuses every Put, LeaseGrant and costly Txn.
    pub fn capped(&self) -> bool {
        self.capped.load(Ordering::Acquire)
    }

    pub fn corrupt(&self) -> bool {
        self.corrupt.load(Ordering::Acquire)
    }
}

/// An alarm as etcd's Status lists it among its errors: the AlarmMember's
/// compact text form, zero fields left out ("memberID:123 alarm:NOSPACE ").
pub fn alarm_text(member: u64, t: i32) -> String {
    let mut s = String::new();
    if member != 0 {
        s.push_str(&format!("memberID:{member} "));
    }
    if t != ALARM_NONE {
        s.push_str(&format!("alarm:{} ", alarm_name(t)));
    }
    s
}

/// etcd's name of an alarm type (the proto enum's), for logs, metrics and Status errors.
pub fn alarm_name(t: i32) -> String {
    match t {
        ALARM_NONE => "NONE".into(),
        ALARM_NOSPACE => "NOSPACE".into(),
        ALARM_CORRUPT => "CORRUPT".into(),
        n => n.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_client::proto::PbTxnOpRequest as Op;

    fn put(k: &str, v: usize) -> PbTxnRequestOp {
        PbTxnRequestOp { request: Some(Op::RequestPut(PbPutRequest { key: k.into(), value: vec![0; v], ..Default::default() })) }
    }

    #[test]
    fn costs_are_etcds() {
        assert_eq!(cost_put(&PbPutRequest { key: b"ab".to_vec(), value: vec![0; 10], ..Default::default() }), 268);
        let nested = PbTxnRequestOp { request: Some(Op::RequestTxn(PbTxnRequest { failure: vec![put("n", 100)], ..Default::default() })) };
        let t = PbTxnRequest { success: vec![put("a", 1), put("b", 1)], failure: vec![nested], ..Default::default() };
        // success: 2 × 258; failure: the nested txn's dearer branch, 357.
        assert_eq!(cost_txn(&t), 516);
        let only_nested = PbTxnRequest { success: vec![t.failure[0].clone()], ..Default::default() };
        assert_eq!(cost_txn(&only_nested), 357);
        assert_eq!(cost_txn(&PbTxnRequest::default()), 0);
        assert!(available(100, 200, 0) && available(1000, 200, 0));
        assert!(available(100, 200, 99) && !available(100, 200, 100));
        assert!(available(1 << 40, -1, 10) && available(1 << 40, 0, 10));
    }

    #[test]
    fn alarms_as_etcds_store() {
        let a = Alarms::default();
        assert_eq!(a.activate(7, ALARM_NONE), None);
        assert_eq!(a.activate(7, ALARM_NOSPACE), Some(((7, ALARM_NOSPACE), true)));
        assert_eq!(a.activate(7, ALARM_NOSPACE), Some(((7, ALARM_NOSPACE), false)));
        assert!(a.nospace() && !a.corrupt());
        a.activate(3, ALARM_CORRUPT);
        a.activate(1, ALARM_NOSPACE);
        assert_eq!(a.get(ALARM_NONE), vec![(1, ALARM_NOSPACE), (7, ALARM_NOSPACE), (3, ALARM_CORRUPT)]);
        assert_eq!(a.get(ALARM_CORRUPT), vec![(3, ALARM_CORRUPT)]);
        assert_eq!(a.deactivate(3, ALARM_NOSPACE), None);
        assert_eq!(a.deactivate(3, ALARM_CORRUPT), Some((3, ALARM_CORRUPT)));
        assert!(!a.corrupt() && a.nospace());
        a.deactivate(1, ALARM_NOSPACE);
        assert!(a.nospace());
        a.deactivate(7, ALARM_NOSPACE);
        assert!(!a.nospace());
        assert!(a.get(ALARM_NONE).is_empty());
    }

    /// The disk's NOSPACE clears itself, unless the quota or an operator
    /// raised NOSPACE too; an operator's disarm clears it at once.
    #[test]
    fn disk_nospace_clears_itself_unless_raised_otherwise() {
        let a = Alarms::default();
        assert!(a.raise_disk(7));
        assert!(a.nospace() && !a.capped());
        assert!(!a.raise_disk(7));
        assert!(a.clear_disk(7));
        assert!(!a.nospace() && a.get(ALARM_NONE).is_empty());
        // Quota first, then the disk: the alarm is the quota's and stays.
        a.activate(7, ALARM_NOSPACE);
        assert!(!a.raise_disk(7));
        assert!(!a.clear_disk(7));
        assert!(a.nospace() && a.capped());
        a.deactivate(7, ALARM_NOSPACE);
        // The disk first, then the quota: it stays too.
        a.raise_disk(7);
        a.activate(7, ALARM_NOSPACE);
        assert!(a.capped());
        assert!(!a.clear_disk(7));
        assert!(a.nospace());
        a.deactivate(7, ALARM_NOSPACE);
        // Disarmed by an operator while the disk is down: gone; raised again at the next failure.
        a.raise_disk(7);
        assert_eq!(a.deactivate(7, ALARM_NOSPACE), Some((7, ALARM_NOSPACE)));
        assert!(!a.nospace());
        assert!(!a.clear_disk(7));
        assert!(a.raise_disk(7) && a.clear_disk(7));
    }

    #[test]
    fn machine_limits() {
        assert_eq!(meminfo_total_kb("MemTotal:       24684092 kB\nMemFree: 1 kB\n"), Some(24684092));
        assert_eq!(parse_cgroup_limit("max\n"), None);
        assert_eq!(parse_cgroup_limit("9223372036854771712\n"), None);
        assert_eq!(parse_cgroup_limit("4294967296\n"), Some(4 << 30));
        let files = cgroup_limit_files("4:memory:/a/b\n0::/x\n3:cpu:/c\n");
        assert_eq!(
            files,
            vec![
                "/sys/fs/cgroup/memory/a/b/memory.limit_in_bytes",
                "/sys/fs/cgroup/memory/a/memory.limit_in_bytes",
                "/sys/fs/cgroup/memory/memory.limit_in_bytes",
                "/sys/fs/cgroup/x/memory.max",
                "/sys/fs/cgroup/memory.max",
            ]
        );
        assert_eq!(cgroup_limit_files("0::/\n"), vec!["/sys/fs/cgroup/memory.max"]);
        let (q, why) = resolve(0);
        assert!(q > 0, "{why}");
        assert_eq!(resolve(33554432).0, 33554432);
        assert_eq!(resolve(-1).0, -1);
        assert_eq!(human(33554432), "32.0 MiB");
    }
}
