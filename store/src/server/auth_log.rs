//! The auth store in a replicated group (docs/design.md §10, "Auth"): every
//! change (crate::auth::ops) goes through the log and is applied by every
//! member in log order, as etcd applies its auth requests; the leader's caller
//! hears its own member's result. A single member applies at once.
//!
//! ```text
//! log entry body:  proposer member ID:u64 | request number:u64 | AuthOp::encode   (little-endian)
//! snapshot state:  raft index of the last auth entry in it:u64 | auth.state's bytes (auth::persist)
//! ```
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::oneshot;
use tonic::Status;

use crate::auth::ops::AuthOp;
use crate::auth::{AuthError, AuthStore};
use crate::replication::{AuthLog, Replica};

/// How long a change waits for its entry to be applied here (etcd's request timeout).
const APPLY_WAIT: Duration = Duration::from_secs(7);

pub struct AuthReplication {
    auth: Arc<AuthStore>,
    me: u64,
    next: AtomicU64,
    waiting: Mutex<HashMap<u64, oneshot::Sender<Result<(), AuthError>>>>,
    /// The raft index of the last auth entry the state holds, held while an
    /// entry is applied and while the state is copied for a snapshot (so the
    /// index a snapshot names is the one its state reached).
    applied: Mutex<u64>,
}

impl AuthReplication {
    pub fn new(auth: Arc<AuthStore>, me: u64) -> AuthReplication {
        AuthReplication { auth, me, next: AtomicU64::new(1), waiting: Mutex::default(), applied: Mutex::new(0) }
    }

    /// Applies `op` (this member must lead: the forward layer sends auth
    /// changes to the leader): the outer error is the group's (no leader, the
    /// entry not applied in time), the inner the auth store's answer.
    pub async fn change(&self, r: &Replica, op: AuthOp) -> Result<Result<(), AuthError>, Status> {
        let req = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().insert(req, tx);
        let mut body = Vec::with_capacity(64);
        body.extend_from_slice(&self.me.to_le_bytes());
        body.extend_from_slice(&req.to_le_bytes());
        body.extend_from_slice(&op.encode());
        let proposed = r.propose_auth(body).await.unwrap_or_else(|_| Err("the raft driver stopped".into()));
        if proposed.is_err() {
            self.waiting.lock().remove(&req);
            return Err(Status::unavailable("etcdserver: not leader"));
        }
        match tokio::time::timeout(APPLY_WAIT, rx).await {
            Ok(Ok(result)) => Ok(result),
            _ => {
                self.waiting.lock().remove(&req);
                Err(Status::unavailable("etcdserver: request timed out"))
            }
        }
    }
}

impl AuthLog for AuthReplication {
    fn apply(&self, index: u64, body: &[u8]) {
        let mut applied = self.applied.lock();
        if index <= *applied {
            return;
        }
        *applied = index;
        let parsed = body.split_at_checked(16).ok_or_else(|| "shorter than its head".to_string()).and_then(|(head, op)| {
            let n = |r: std::ops::Range<usize>| u64::from_le_bytes(head[r].try_into().expect("8 bytes"));
            Ok((n(0..8), n(8..16), AuthOp::decode(op)?))
        });
        let (who, req, op) = match parsed {
            Ok(p) => p,
            Err(e) => {
                eprintln!("meganode-store: the auth change at raft index {index} does not decode ({e}); passed over");
                return;
            }
        };
        let result = self.auth.apply(op);
        if who == self.me {
            if let Some(tx) = self.waiting.lock().remove(&req) {
                let _ = tx.send(result);
            }
        }
    }

    fn snapshot(&self) -> Vec<u8> {
        let applied = self.applied.lock();
        let mut out = applied.to_le_bytes().to_vec();
        out.extend_from_slice(&self.auth.encoded_state());
        out
    }

    fn restore(&self, state: &[u8]) -> Result<(), String> {
        let (index, state) = state.split_at_checked(8).ok_or("the auth state is shorter than its index")?;
        let mut applied = self.applied.lock();
        self.auth.replace_state(state).map_err(|e| e.message().to_string())?;
        *applied = u64::from_le_bytes(index.try_into().expect("8 bytes"));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entries apply once each, a snapshot's state and index travel together,
    /// and entries its state holds are passed over after a restore.
    #[test]
    fn entries_apply_once_and_a_snapshot_carries_its_index() {
        let a = AuthReplication::new(Arc::new(AuthStore::in_memory()), 1);
        let entry = |req: u64, op: AuthOp| {
            let mut b = 2u64.to_le_bytes().to_vec();
            b.extend_from_slice(&req.to_le_bytes());
            b.extend_from_slice(&op.encode());
            b
        };
        a.apply(5, &entry(1, AuthOp::RoleAdd { name: "r1".into() }));
        a.apply(5, &entry(1, AuthOp::RoleAdd { name: "r1".into() }));
        a.apply(6, b"garbled");
        a.apply(7, &entry(2, AuthOp::RoleAdd { name: "r2".into() }));
        assert_eq!(a.auth.role_list(), vec!["r1", "r2"]);
        let rev = a.auth.revision();
        let snap = a.snapshot();
        let b = AuthReplication::new(Arc::new(AuthStore::in_memory()), 3);
        b.restore(&snap).unwrap();
        assert_eq!(b.auth.encoded_state(), a.auth.encoded_state());
        b.apply(7, &entry(2, AuthOp::RoleAdd { name: "r2".into() }));
        assert_eq!(b.auth.revision(), rev, "an entry the snapshot holds was applied again");
        b.apply(8, &entry(3, AuthOp::RoleAdd { name: "r3".into() }));
        assert_eq!(b.auth.role_list(), vec!["r1", "r2", "r3"]);
        assert!(b.restore(b"short").is_err());
    }
}
