//! Maintenance service: Status (etcd-compatible version, accounted size and
//! quota, raised alarms), Alarm (etcd's GET / ACTIVATE / DEACTIVATE, see
//! crate::quota), Defragment (nothing to do in memory), Hash/HashKV, Snapshot,
//! MoveLeader (to itself: the single member is the leader).
use std::pin::Pin;
use std::sync::Arc;

use etcd_client::proto::*;
use futures::Stream;
use tonic::{Request, Response, Status};

use super::{Ctx, ETCD_COMPAT_VERSION};
use crate::quota::{alarm_text, ACTION_ACTIVATE, ACTION_DEACTIVATE, ACTION_GET, ALARM_NONE};

pub struct MaintenanceService(pub Arc<Ctx>);

/// Snapshot chunk size, like etcd's 32 KiB.
const SNAPSHOT_CHUNK: usize = 32 * 1024;

/// etcd's authMaintenanceServer: which methods take an admin (root role), which any user.
impl MaintenanceService {
    fn admin<T>(&self, r: &Request<T>) -> Result<(), Status> {
        if !self.0.auth.enabled() {
            return Ok(());
        }
        let ai = self.0.caller(r)?;
        Ok(self.0.auth.check_admin(ai.as_ref())?)
    }

    /// Status for a caller already let through (`require_user`).
    pub fn status_answer(&self) -> PbStatusResponse {
        let rev = self.0.store.current_rev();
        // Never 0: etcd's database file never is, and etcdctl's status table divides by it.
        let size = self.0.store.size_bytes().max(1);
        let errors = self.0.store.alarms.get(ALARM_NONE).into_iter().map(|(m, t)| alarm_text(m, t)).collect();
        // A single member leads itself; its raft index is its revision.
        let (leader, raft_index, raft_term, raft_applied_index, is_learner) = match self.0.replica.get() {
            Some(r) => {
                let st = r.status();
                (st.leader, st.commit_index, st.term, st.applied_index, st.is_learner())
            }
            None => (self.0.member_id, rev as u64, 2, rev as u64, false),
        };
        PbStatusResponse {
            header: self.0.header(rev),
            version: ETCD_COMPAT_VERSION.into(),
            db_size: size,
            leader,
            raft_index,
            raft_term,
            raft_applied_index,
            errors,
            db_size_in_use: size,
            is_learner,
            storage_version: "3.6.0".into(),
            db_size_quota: self.0.store.quota(),
            // etcd always sets it: not enabled and no target, or Downgrade ENABLE's.
            downgrade_info: Some(match self.0.member.get().downgrade {
                Some(target_version) => PbDowngradeInfo { enabled: true, target_version },
                None => PbDowngradeInfo { enabled: false, target_version: String::new() },
            }),
        }
    }

    /// `require_user` with the caller as `Ctx::identify_with` found it.
    pub fn require_user_as(&self, caller: crate::server::kv::Caller) -> Result<(), Status> {
        match caller {
            None => Ok(()),
            Some(ai) => Ok(self.0.auth.require(ai?.as_ref())?),
        }
    }

    fn require_user<T>(&self, r: &Request<T>) -> Result<(), Status> {
        if !self.0.auth.enabled() {
            return Ok(());
        }
        let ai = self.0.caller(r)?;
        Ok(self.0.auth.require(ai.as_ref())?)
    }
}

#[tonic::async_trait]
impl PbMaintenanceService for MaintenanceService {
    /// etcd's applierV3backend.Alarm: GET lists the alarms of a type (all for
    /// NONE); ACTIVATE raises one for the request's member (any id, 0 included)
    /// and answers it, also when it was raised already, nothing for type NONE;
    /// DEACTIVATE disarms that member's alarm and answers it, nothing when it
    /// was not raised. Disarming NOSPACE lets writes through again; a write that
    /// still does not fit raises it anew. (etcd answers an unknown action with
    /// a nil response its server then dereferences; here it gets no alarms.)
    async fn alarm(&self, r: Request<PbAlarmRequest>) -> Result<Response<PbAlarmResponse>, Status> {
        // etcd: any user may list the alarms; changing them takes an admin.
        if r.get_ref().action == ACTION_GET {
            self.require_user(&r)?;
        } else {
            self.admin(&r)?;
        }
        let r = r.into_inner();
        let ctx = &self.0;
        let group = ctx.replica.get();
        let alarms: Vec<(u64, i32)> = match r.action {
            ACTION_GET => ctx.store.alarms.get(r.alarm),
            // In a group through the log (the forward layer brought the call to
            // the leader): answered once this member applied it, as etcd's.
            ACTION_ACTIVATE | ACTION_DEACTIVATE if group.is_some() => {
                let raise = r.action == ACTION_ACTIVATE;
                if raise && r.alarm == ALARM_NONE {
                    Vec::new()
                } else {
                    let rx = group.expect("checked").propose_alarm(raise, r.member_id, r.alarm, true).expect("waited for");
                    match tokio::time::timeout(super::forward::REQUEST_TIMEOUT, rx).await {
                        Ok(Ok(true)) => vec![(r.member_id, r.alarm)],
                        Ok(Ok(false)) => Vec::new(),
                        _ => return Err(Status::unavailable("etcdserver: request timed out")),
                    }
                }
            }
            ACTION_ACTIVATE => ctx.activate_alarm(r.member_id, r.alarm).into_iter().collect(),
            ACTION_DEACTIVATE => ctx.deactivate_alarm(r.member_id, r.alarm).into_iter().collect(),
            _ => Vec::new(),
        };
        let alarms = alarms.into_iter().map(|(member_id, alarm)| PbAlarmMember { member_id, alarm }).collect();
        Ok(Response::new(PbAlarmResponse { header: ctx.header(ctx.store.current_rev()), alarms }))
    }

    /// dbSize and dbSizeInUse are both the accounted size the quota bounds: in
    /// memory nothing is allocated and unused the way free pages are in etcd's
    /// file (compaction hands freed memory back at once). dbSizeQuota is the
    /// quota in force, and every raised alarm is listed among the errors, as etcd.
    async fn status(&self, r: Request<PbStatusRequest>) -> Result<Response<PbStatusResponse>, Status> {
        self.require_user(&r)?;
        Ok(Response::new(self.status_answer()))
    }

    /// Nothing to defragment in memory. etcd answers an empty response: no header.
    async fn defragment(&self, r: Request<PbDefragmentRequest>) -> Result<Response<PbDefragmentResponse>, Status> {
        self.admin(&r)?;
        Ok(Response::new(PbDefragmentResponse { header: None }))
    }

    async fn hash(&self, r: Request<PbHashRequest>) -> Result<Response<PbHashResponse>, Status> {
        self.admin(&r)?;
        let rev = self.0.store.current_rev();
        Ok(Response::new(PbHashResponse { header: self.0.header(rev), hash: self.0.store.hash_kv(rev) }))
    }

    async fn hash_kv(&self, r: Request<PbHashKvRequest>) -> Result<Response<PbHashKvResponse>, Status> {
        self.admin(&r)?;
        // etcd first looks for the hash it kept at a compaction of exactly this
        // revision (0 included) and answers with the compaction point of then.
        // Otherwise it checks only positive revisions, reads 0 as the current
        // one and hashes a negative one as it is (nothing is at or below it).
        let asked = r.get_ref().revision;
        if let Some(prev) = self.0.store.compaction_before(asked) {
            return Ok(Response::new(PbHashKvResponse {
                header: self.0.header(self.0.store.current_rev()),
                hash: self.0.store.hash_kv(asked),
                compact_revision: prev,
                hash_revision: asked,
            }));
        }
        let rev = if asked < 0 { asked } else { self.0.store.check_rev(asked)? };
        Ok(Response::new(PbHashKvResponse {
            header: self.0.header(self.0.store.current_rev()),
            hash: self.0.store.hash_kv(rev),
            compact_revision: self.0.store.compacted_rev(),
            hash_revision: rev,
        }))
    }

    type SnapshotStream = Pin<Box<dyn Stream<Item = Result<PbSnapshotResponse, Status>> + Send>>;

    async fn snapshot(&self, r: Request<PbSnapshotRequest>) -> Result<Response<Self::SnapshotStream>, Status> {
        self.admin(&r)?;
        let store = self.0.store.clone();
        // With the auth state, as etcd's snapshot holds its auth buckets (restored by --restore-from).
        let auth = self.0.auth.encoded_state();
        let blob = tokio::task::spawn_blocking(move || crate::snapshot::encode_with_auth(&store, Some(&auth)))
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        // It holds every committed write: sent only once they are all durable.
        self.0.synced(i64::from_le_bytes(blob[8..16].try_into().unwrap())).await;
        let total = blob.len();
        // Chunks are copied out as the client takes them, not all up front: the
        // encoded store is held once, not twice (the quota leaves room for one copy).
        let chunks = (0..total.div_ceil(SNAPSHOT_CHUNK)).map(move |i| {
            let end = ((i + 1) * SNAPSHOT_CHUNK).min(total);
            Ok(PbSnapshotResponse {
                // etcd's snapshot chunks carry no header.
                header: None,
                remaining_bytes: (total - end) as u64,
                blob: blob[i * SNAPSHOT_CHUNK..end].to_vec(),
                version: ETCD_COMPAT_VERSION.into(),
            })
        });
        Ok(Response::new(Box::pin(futures::stream::iter(chunks))))
    }

    /// The single member is the leader: moving leadership to itself is done at
    /// once (etcd answers an empty response, no header); any other id is not a
    /// member, which etcd refuses as a bad transferee.
    async fn move_leader(&self, r: Request<PbMoveLeaderRequest>) -> Result<Response<PbMoveLeaderResponse>, Status> {
        self.admin(&r)?;
        if let Some(rep) = self.0.replica.get() {
            // etcd's: only the leader hands over, to a voting member, and answers once it has.
            let target = r.get_ref().target_id;
            let st = rep.status();
            if st.leader != st.id {
                return Err(Status::failed_precondition("etcdserver: not leader"));
            }
            if !st.members.voters.contains(&target) {
                return Err(Status::failed_precondition("etcdserver: bad leader transferee"));
            }
            if target != st.id {
                rep.move_leader(target);
                let deadline = tokio::time::Instant::now() + crate::server::forward::REQUEST_TIMEOUT;
                while rep.leader() != target {
                    if tokio::time::Instant::now() >= deadline {
                        return Err(Status::unavailable("etcdserver: request timed out, leader transfer took too long"));
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            }
            return Ok(Response::new(PbMoveLeaderResponse { header: self.0.header(self.0.store.current_rev()) }));
        }
        if r.get_ref().target_id == self.0.member_id {
            Ok(Response::new(PbMoveLeaderResponse { header: None }))
        } else {
            Err(Status::failed_precondition("etcdserver: bad leader transferee"))
        }
    }

    /// etcd's Downgrade on a single member: VALIDATE and ENABLE take the target
    /// as X.Y or X.Y.Z, which must be one minor below the cluster version (3.6);
    /// ENABLE records it (Status' downgrade_info, kept across restarts), CANCEL clears it
    /// and answers OK whether or not one was enabled. Every answer carries the
    /// cluster version (X.Y). etcd would then lower the cluster version to the
    /// target while its members run older binaries; this store never does
    /// (docs/design.md §6 Membership).
    async fn downgrade(&self, r: Request<PbDowngradeRequest>) -> Result<Response<PbDowngradeResponse>, Status> {
        self.admin(&r)?;
        let r = r.into_inner();
        let cluster: String = ETCD_COMPAT_VERSION.splitn(3, '.').take(2).collect::<Vec<_>>().join(".");
        self.0.member.update(|m| {
            match r.action {
                DOWNGRADE_VALIDATE | DOWNGRADE_ENABLE => {
                    let target = downgrade_target(&r.version)?;
                    if m.downgrade.is_some() {
                        return Err(Status::failed_precondition("etcdserver: cluster has a downgrade job in progress"));
                    }
                    if r.action == DOWNGRADE_ENABLE {
                        m.downgrade = Some(target);
                    }
                }
                DOWNGRADE_CANCEL => m.downgrade = None,
                _ => return Err(Status::unknown("etcdserver: unknown method")),
            }
            Ok(())
        })?;
        Ok(Response::new(PbDowngradeResponse { header: self.0.header(self.0.store.current_rev()), version: cluster }))
    }
}

const DOWNGRADE_VALIDATE: i32 = 0;
const DOWNGRADE_ENABLE: i32 = 1;
const DOWNGRADE_CANCEL: i32 = 2;

/// etcd's convertToClusterVersion and allowedDowngradeVersion: `v` read as a
/// semantic version (X.Y taken as X.Y.0), its patch dropped, must be one minor
/// below the version this store reports; answers it as etcd records it ("3.5.0").
fn downgrade_target(v: &str) -> Result<String, Status> {
    let (major, minor) = semver_major_minor(v)
        .or_else(|| semver_major_minor(&format!("{v}.0")))
        .ok_or_else(|| Status::invalid_argument("etcdserver: wrong downgrade target version format"))?;
    let mut ours = ETCD_COMPAT_VERSION.split('.').map(|p| p.parse::<i64>().unwrap_or(0));
    let (our_major, our_minor) = (ours.next().unwrap_or(0), ours.next().unwrap_or(0));
    if (major, minor) != (our_major, our_minor - 1) {
        return Err(Status::invalid_argument("etcdserver: invalid downgrade target version"));
    }
    Ok(format!("{major}.{minor}.0"))
}

/// go-semver's Version.Set: MAJOR.MINOR.PATCH[-PRE][+META], each of the three an integer.
fn semver_major_minor(v: &str) -> Option<(i64, i64)> {
    let (v, meta) = v.split_once('+').unwrap_or((v, ""));
    let (v, pre) = v.split_once('-').unwrap_or((v, ""));
    let ident_ok = |s: &str| s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
    if !ident_ok(pre) || !ident_ok(meta) {
        return None;
    }
    let parts: Vec<&str> = v.splitn(3, '.').collect();
    if parts.len() != 3 {
        return None;
    }
    let n: Vec<i64> = parts.iter().map(|p| p.parse::<i64>().ok()).collect::<Option<_>>()?;
    Some((n[0], n[1]))
}

#[cfg(test)]
mod tests {
    use super::downgrade_target;

    #[test]
    fn downgrade_targets_as_etcd_reads_them() {
        assert_eq!(downgrade_target("3.5").unwrap(), "3.5.0");
        assert_eq!(downgrade_target("3.5.17").unwrap(), "3.5.0");
        assert_eq!(downgrade_target("3.5.0-rc.1").unwrap(), "3.5.0");
        for bad in ["3.4", "3.6", "3.7", "4.5"] {
            assert_eq!(downgrade_target(bad).unwrap_err().message(), "etcdserver: invalid downgrade target version", "{bad}");
        }
        for bad in ["x.y", "", "3", "3.5.1.2", "3.a"] {
            assert_eq!(downgrade_target(bad).unwrap_err().message(), "etcdserver: wrong downgrade target version format", "{bad}");
        }
    }
}
