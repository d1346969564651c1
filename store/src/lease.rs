//! Leases: a TTL and the keys attached to it. Expiry deletes the keys (the
//! store does that; this table only tracks time and membership).
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::errors::{Result, StoreError};
use crate::quota::{LEASE_KEY_OVERHEAD, LEASE_OVERHEAD};

/// etcd's MaxLeaseTTL.
pub const MAX_LEASE_TTL: i64 = 9_000_000_000;
/// etcd raises TTLs below its minimum (1.5 election timeouts, rounded up) to this.
pub const MIN_LEASE_TTL: i64 = 2;

pub struct Lease {
    pub id: i64,
    pub granted_ttl: i64,
    pub expiry: Instant,
    pub keys: HashSet<Bytes>,
}

impl Lease {
    pub fn remaining_secs(&self, now: Instant) -> i64 {
        self.expiry.saturating_duration_since(now).as_secs() as i64
    }
}

pub struct LeaseTable {
    inner: Mutex<Inner>,
    /// Accounted bytes of the leases and their key sets (crate::quota), changed
    /// under `inner`'s lock and read without it.
    bytes: AtomicI64,
}

struct Inner {
    leases: HashMap<i64, Lease>,
    next_id: i64,
}

impl Default for LeaseTable {
    fn default() -> Self {
        Self::new()
    }
}

impl LeaseTable {
    pub fn new() -> Self {
        // Start IDs away from small numbers clients like to choose themselves.
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as i64)
            .unwrap_or(1);
        LeaseTable {
            inner: Mutex::new(Inner { leases: HashMap::new(), next_id: (seed & 0x0fff_ffff_ffff) << 16 | 1 }),
            bytes: AtomicI64::new(0),
        }
    }

    /// Accounted bytes of every lease and attached key (crate::quota).
    pub fn accounted_bytes(&self) -> i64 {
        self.bytes.load(Ordering::Relaxed)
    }

    fn charge(&self, b: i64) {
        self.bytes.fetch_add(b, Ordering::Relaxed);
    }

    fn lease_bytes(l: &Lease) -> i64 {
        LEASE_OVERHEAD + l.keys.len() as i64 * LEASE_KEY_OVERHEAD
    }

    /// Grants a lease; `id` 0 lets the table choose one. Returns (id, ttl).
    pub fn grant(&self, id: i64, ttl: i64) -> Result<(i64, i64)> {
        if ttl > MAX_LEASE_TTL {
            return Err(StoreError::LeaseTtlTooLarge);
        }
        let ttl = ttl.max(MIN_LEASE_TTL);
        let mut g = self.inner.lock();
        let id = if id == 0 {
            loop {
                let cand = g.next_id;
                g.next_id = g.next_id.wrapping_add(1) & i64::MAX;
                if cand > 0 && !g.leases.contains_key(&cand) {
                    break cand;
                }
            }
        } else {
            if g.leases.contains_key(&id) {
                return Err(StoreError::LeaseExist);
            }
            id
        };
        g.leases.insert(id, Lease { id, granted_ttl: ttl, expiry: Instant::now() + Duration::from_secs(ttl as u64), keys: HashSet::new() });
        self.charge(LEASE_OVERHEAD);
        Ok((id, ttl))
    }

    /// Restores a lease with a given remaining TTL (recovery).
    pub fn restore(&self, id: i64, granted_ttl: i64, remaining: i64) {
        let mut g = self.inner.lock();
        let old = g.leases.insert(id, Lease { id, granted_ttl, expiry: Instant::now() + Duration::from_secs(remaining.max(0) as u64), keys: HashSet::new() });
        self.charge(LEASE_OVERHEAD - old.as_ref().map_or(0, Self::lease_bytes));
    }

    pub fn exists(&self, id: i64) -> bool {
        self.inner.lock().leases.contains_key(&id)
    }

    /// Every lease's remaining TTL back to its granted TTL: a member that becomes
    /// the leader of its group, as etcd's lessor does on promotion (a lease's
    /// clock ran on the old leader; the new one cannot know how much was left).
    pub fn refresh_all(&self) {
        let now = Instant::now();
        for l in self.inner.lock().leases.values_mut() {
            l.expiry = now + Duration::from_secs(l.granted_ttl as u64);
        }
    }

    /// Removes the lease and returns its keys, for the store to delete.
    pub fn revoke(&self, id: i64) -> Result<Vec<Bytes>> {
        let mut g = self.inner.lock();
        let l = g.leases.remove(&id).ok_or(StoreError::LeaseNotFound)?;
        self.charge(-Self::lease_bytes(&l));
        let mut keys: Vec<Bytes> = l.keys.into_iter().collect();
        keys.sort();
        Ok(keys)
    }

    /// Renews; returns the granted TTL, or LeaseNotFound.
    pub fn renew(&self, id: i64) -> Result<i64> {
        let mut g = self.inner.lock();
        let l = g.leases.get_mut(&id).ok_or(StoreError::LeaseNotFound)?;
        let now = Instant::now();
        // An expired lease is about to be revoked: renewing it would resurrect it.
        if l.expiry <= now {
            return Err(StoreError::LeaseNotFound);
        }
        l.expiry = now + Duration::from_secs(l.granted_ttl as u64);
        Ok(l.granted_ttl)
    }

    /// (remaining, granted, keys) of a lease.
    pub fn time_to_live(&self, id: i64, with_keys: bool) -> Option<(i64, i64, Vec<Bytes>)> {
        let g = self.inner.lock();
        let l = g.leases.get(&id)?;
        let mut keys: Vec<Bytes> = if with_keys { l.keys.iter().cloned().collect() } else { Vec::new() };
        keys.sort();
        Some((l.remaining_secs(Instant::now()), l.granted_ttl, keys))
    }

    pub fn ids(&self) -> Vec<i64> {
        let mut v: Vec<i64> = self.inner.lock().leases.keys().copied().collect();
        v.sort();
        v
    }

    /// (id, granted, remaining) of every lease, for snapshots and logs.
    pub fn all(&self) -> Vec<(i64, i64, i64)> {
        let now = Instant::now();
        let g = self.inner.lock();
        let mut v: Vec<_> = g.leases.values().map(|l| (l.id, l.granted_ttl, l.remaining_secs(now))).collect();
        v.sort();
        v
    }

    pub fn expired(&self, now: Instant) -> Vec<i64> {
        let g = self.inner.lock();
        let mut v: Vec<i64> = g.leases.values().filter(|l| l.expiry <= now).map(|l| l.id).collect();
        v.sort();
        v
    }

    /// Moves `key` from lease `old` to lease `new` (0 = none).
    pub fn rebind(&self, key: &Bytes, old: i64, new: i64) {
        if old == new {
            return;
        }
        let mut g = self.inner.lock();
        if old != 0 {
            if let Some(l) = g.leases.get_mut(&old) {
                if l.keys.remove(key) {
                    self.charge(-LEASE_KEY_OVERHEAD);
                }
            }
        }
        if new != 0 {
            if let Some(l) = g.leases.get_mut(&new) {
                if l.keys.insert(key.clone()) {
                    self.charge(LEASE_KEY_OVERHEAD);
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.inner.lock().leases.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grant_revoke_renew() {
        let t = LeaseTable::new();
        let (id, ttl) = t.grant(0, 1).unwrap();
        assert!(id > 0);
        assert_eq!(ttl, MIN_LEASE_TTL);
        assert_eq!(t.grant(42, 10).unwrap(), (42, 10));
        assert_eq!(t.grant(42, 10), Err(StoreError::LeaseExist));
        assert_eq!(t.grant(7, MAX_LEASE_TTL + 1), Err(StoreError::LeaseTtlTooLarge));
        t.rebind(&Bytes::from("k"), 0, 42);
        assert_eq!(t.time_to_live(42, true).unwrap().2, vec![Bytes::from("k")]);
        assert_eq!(t.accounted_bytes(), 2 * LEASE_OVERHEAD + LEASE_KEY_OVERHEAD);
        assert_eq!(t.revoke(42).unwrap(), vec![Bytes::from("k")]);
        assert_eq!(t.accounted_bytes(), LEASE_OVERHEAD);
        assert_eq!(t.revoke(42), Err(StoreError::LeaseNotFound));
        assert_eq!(t.renew(id).unwrap(), MIN_LEASE_TTL);
    }
}
