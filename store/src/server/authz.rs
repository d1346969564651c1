//! The permission checks of KV and Lease requests, as etcd's auth applier and
//! v3 server make them (etcdserver/apply/apply_auth.go, v3_server.go). Each
//! returns at once while auth is off (crate::auth's one atomic load).
use etcd_client::proto::{PbDeleteRequest, PbPutRequest, PbTxnOpRequest, PbTxnRequest, PbTxnRequestOp};
use tonic::Status;

use super::Ctx;
use crate::auth::AuthInfo;

type Ai<'a> = Option<&'a AuthInfo>;

/// Put: write on the key; write on every key of its lease (unless admin);
/// read on the key when it asks for the previous value.
pub fn check_put(ctx: &Ctx, ai: Ai, r: &PbPutRequest) -> Result<(), Status> {
    if !ctx.auth.enabled() {
        return Ok(());
    }
    ctx.auth.check_write(ai, &r.key, &[])?;
    check_lease_puts(ctx, ai, r.lease)?;
    if r.prev_kv {
        ctx.auth.check_read(ai, &r.key, &[])?;
    }
    Ok(())
}

/// DeleteRange: write on the range; read too with prev_kv.
pub fn check_delete(ctx: &Ctx, ai: Ai, r: &PbDeleteRequest) -> Result<(), Status> {
    if !ctx.auth.enabled() {
        return Ok(());
    }
    ctx.auth.check_write(ai, &r.key, &r.range_end)?;
    if r.prev_kv {
        ctx.auth.check_read(ai, &r.key, &r.range_end)?;
    }
    Ok(())
}

/// Txn: read on every compare's key or range, then each op of both branches
/// (nested txns included) as its own request.
pub fn check_txn(ctx: &Ctx, ai: Ai, t: &PbTxnRequest) -> Result<(), Status> {
    if !ctx.auth.enabled() {
        return Ok(());
    }
    for c in &t.compare {
        ctx.auth.check_read(ai, &c.key, &c.range_end)?;
    }
    check_ops(ctx, ai, &t.success)?;
    check_ops(ctx, ai, &t.failure)
}

fn check_ops(ctx: &Ctx, ai: Ai, ops: &[PbTxnRequestOp]) -> Result<(), Status> {
    for op in ops {
        match &op.request {
            Some(PbTxnOpRequest::RequestRange(r)) => ctx.auth.check_read(ai, &r.key, &r.range_end)?,
            Some(PbTxnOpRequest::RequestPut(r)) => check_put(ctx, ai, r)?,
            Some(PbTxnOpRequest::RequestDeleteRange(r)) => {
                // etcd checks the read first here.
                if r.prev_kv {
                    ctx.auth.check_read(ai, &r.key, &r.range_end)?;
                }
                ctx.auth.check_write(ai, &r.key, &r.range_end)?;
            }
            Some(PbTxnOpRequest::RequestTxn(t)) => check_txn(ctx, ai, t)?,
            None => {}
        }
    }
    Ok(())
}

/// etcd's checkLeasePuts (LeaseRevoke, and Put with a lease): an admin may;
/// anyone else needs write on every key attached to the lease. A lease that
/// does not exist passes (the request fails on its own later).
pub fn check_lease_puts(ctx: &Ctx, ai: Ai, lease: i64) -> Result<(), Status> {
    if lease == 0 || !ctx.auth.enabled() {
        return Ok(());
    }
    let Some((_, _, keys)) = ctx.store.leases.time_to_live(lease, true) else {
        return Ok(());
    };
    if ctx.auth.check_admin(ai).is_ok() {
        return Ok(());
    }
    for k in keys {
        ctx.auth.check_write(ai, &k, &[])?;
    }
    Ok(())
}

/// etcd's checkLeaseTimeToLive (TimeToLive with keys) and checkLeaseLeases:
/// an admin may; anyone else needs read on every key of the leases.
pub fn check_lease_reads(ctx: &Ctx, ai: Ai, leases: &[i64]) -> Result<(), Status> {
    if !ctx.auth.enabled() {
        return Ok(());
    }
    ctx.auth.require(ai)?;
    if ctx.auth.check_admin(ai).is_ok() {
        return Ok(());
    }
    for &id in leases {
        if let Some((_, _, keys)) = ctx.store.leases.time_to_live(id, true) {
            for k in keys {
                ctx.auth.check_read(ai, &k, &[])?;
            }
        }
    }
    Ok(())
}
