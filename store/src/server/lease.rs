//! Lease service: Grant, Revoke, KeepAlive (stream), TimeToLive, Leases; and
//! the expiry loop that revokes leases whose time ran out.
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::proto::*;
use futures::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use super::deadline::Deadline;
use super::{authz, Ctx, Write};

pub struct LeaseService(pub Arc<Ctx>);

#[tonic::async_trait]
impl PbLeaseService for LeaseService {
    async fn lease_grant(&self, r: Request<PbLeaseGrantRequest>) -> Result<Response<PbLeaseGrantResponse>, Status> {
        // etcd: the quota first, then the caller (any user may grant), then
        // (applying) the alarms, then the lease's own checks.
        self.0.check_quota(crate::quota::LEASE_GRANT_COST)?;
        let dl = Deadline::of(r.metadata());
        let ai = self.0.caller(&r)?;
        self.0.auth.require(ai.as_ref())?;
        let r = r.get_ref();
        self.0.check_alarms(Write::LeaseGrant)?;
        self.0.check_disk(|_| true)?;
        // A grant writes the lease log; when that may wait on the disk (fsync mode, a
        // slow disk) it runs on the blocking pool, not on a worker that every
        // connection it serves would wait behind (docs/design.md §8).
        let (id, ttl) = if self.0.store.lease_log_may_block() {
            let (store, (id, ttl)) = (self.0.store.clone(), (r.id, r.ttl));
            tokio::task::spawn_blocking(move || store.grant_lease(id, ttl)).await.map_err(|e| Status::internal(e.to_string()))??
        } else {
            self.0.store.grant_lease(r.id, r.ttl)?
        };
        self.0.settled(dl).await?;
        Ok(Response::new(PbLeaseGrantResponse { header: self.0.header(self.0.store.current_rev()), id, ttl, error: String::new() }))
    }

    async fn lease_revoke(&self, r: Request<PbLeaseRevokeRequest>) -> Result<Response<PbLeaseRevokeResponse>, Status> {
        let dl = Deadline::of(r.metadata());
        let ai = self.0.caller(&r)?;
        self.0.auth.require(ai.as_ref())?;
        self.0.check_alarms(Write::LeaseRevoke)?;
        self.0.check_disk(|_| true)?;
        // Write on every key attached to the lease (etcd's checkLeasePuts).
        authz::check_lease_puts(&self.0, ai.as_ref(), r.get_ref().id)?;
        let id = r.get_ref().id;
        let rev = if self.0.store.lease_log_may_block() {
            let store = self.0.store.clone();
            tokio::task::spawn_blocking(move || store.revoke_lease(id)).await.map_err(|e| Status::internal(e.to_string()))??
        } else {
            self.0.store.revoke_lease(id)?
        };
        self.0.synced_by(rev, dl).await?;
        self.0.settled(dl).await?;
        Ok(Response::new(PbLeaseRevokeResponse { header: self.0.header(rev) }))
    }

    type LeaseKeepAliveStream = Pin<Box<dyn Stream<Item = Result<PbLeaseKeepAliveResponse, Status>> + Send>>;

    async fn lease_keep_alive(
        &self,
        r: Request<Streaming<PbLeaseKeepAliveRequest>>,
    ) -> Result<Response<Self::LeaseKeepAliveStream>, Status> {
        let ctx = self.0.clone();
        let out = r.into_inner().filter_map(move |m| {
            let ctx = ctx.clone();
            async move {
                match m {
                    Ok(req) => {
                        // Unknown or expired leases answer TTL 0, as etcd does.
                        let ttl = ctx.store.leases.renew(req.id).unwrap_or(0);
                        Some(Ok(PbLeaseKeepAliveResponse { header: ctx.header(ctx.store.current_rev()), id: req.id, ttl }))
                    }
                    Err(_) => None,
                }
            }
        });
        Ok(Response::new(Box::pin(out)))
    }

    async fn lease_time_to_live(
        &self,
        r: Request<PbLeaseTimeToLiveRequest>,
    ) -> Result<Response<PbLeaseTimeToLiveResponse>, Status> {
        let ai = self.0.caller(&r)?;
        self.0.auth.require(ai.as_ref())?;
        let r = r.get_ref();
        if r.keys {
            authz::check_lease_reads(&self.0, ai.as_ref(), &[r.id])?;
        }
        let header = self.0.header(self.0.store.current_rev());
        let resp = match self.0.store.leases.time_to_live(r.id, r.keys) {
            Some((ttl, granted, keys)) => PbLeaseTimeToLiveResponse {
                header,
                id: r.id,
                ttl,
                granted_ttl: granted,
                keys: keys.into_iter().map(|k| k.to_vec()).collect(),
            },
            None => PbLeaseTimeToLiveResponse { header, id: r.id, ttl: -1, granted_ttl: 0, keys: Vec::new() },
        };
        Ok(Response::new(resp))
    }

    async fn lease_leases(&self, r: Request<PbLeaseLeasesRequest>) -> Result<Response<PbLeaseLeasesResponse>, Status> {
        let ids = self.0.store.leases.ids();
        if self.0.auth.enabled() {
            // etcd's checkLeaseLeases: an admin, or read on every key of every lease.
            let ai = self.0.caller(&r)?;
            authz::check_lease_reads(&self.0, ai.as_ref(), &ids)?;
        }
        let leases = ids.into_iter().map(|id| PbLeaseStatus { id }).collect();
        Ok(Response::new(PbLeaseLeasesResponse { header: self.0.header(self.0.store.current_rev()), leases }))
    }
}

/// Revokes expired leases twice a second; each revocation deletes the lease's
/// keys in one revision, with watch events.
pub async fn expiry_loop(ctx: Arc<Ctx>) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tick.tick().await;
        // etcd revokes an expired lease through a LeaseRevoke proposal, which
        // the CORRUPT alarm refuses: its leases outlive their TTL.
        if ctx.store.alarms.corrupt() {
            continue;
        }
        // Nor while a log write has failed: a revocation writes the lease log.
        if ctx.wal.as_ref().map_or(false, |w| w.health.down()) {
            continue;
        }
        // In a replicated group only the leader expires leases (its revocations
        // go through the log); the others' clocks do not count keep-alives,
        // which reach the leader alone.
        if ctx.forwards_writes() {
            continue;
        }
        let expired = ctx.store.leases.expired(Instant::now());
        if expired.is_empty() {
            continue;
        }
        // Off the runtime's workers: each revocation writes the lease log (and a
        // buffered prefix's log) on the calling thread, and thousands of leases may
        // expire at once (a zone's kubelets gone); on a worker that held every
        // connection it serves — all of them with one worker (§8 rule 10).
        let c = ctx.clone();
        let _ = tokio::task::spawn_blocking(move || {
            for id in expired {
                let _ = c.store.revoke_lease(id);
            }
        })
        .await;
    }
}
