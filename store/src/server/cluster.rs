//! Cluster service. Clients call MemberList to sync endpoints.
//!
//! In a replicated group (docs/design.md §10) the membership changes go
//! through the group's log as etcd's do: MemberAdd (as a voter or a learner),
//! MemberPromote, MemberRemove, MemberUpdate, with etcd's checks and errors
//! (etcdserver/api/v3rpc/member.go, EtcdServer.AddMember and friends). The
//! routes send them to the leader (forward.rs).
//!
//! A single member answers as a single-member etcd 3.6 does wherever that
//! answer does not need a second member; what would really add a member is
//! refused (docs/design.md §6 Membership).
use std::sync::Arc;

use etcd_client::proto::*;
use tonic::{Request, Response, Status};

use super::Ctx;
use crate::replication::{identity, MemberInfo, Membership, Replica};

pub struct ClusterService(pub Arc<Ctx>);

/// etcd's header for the cluster service: cluster, member and term, no revision.
fn header(ctx: &Ctx) -> Option<PbResponseHeader> {
    ctx.header(0)
}

fn not_found() -> Status {
    Status::not_found("etcdserver: member not found")
}

impl ClusterService {
    fn me(&self) -> PbMember {
        PbMember {
            id: self.0.member_id,
            name: self.0.cfg.name.clone(),
            peer_ur_ls: self.0.member.get().peer_urls,
            client_ur_ls: self.0.cfg.advertise_client_urls.clone(),
            is_learner: false,
        }
    }

    /// Every member of the group with its learner flag, as MemberList gives them.
    fn group_members(r: &Replica) -> Vec<PbMember> {
        let learners = r.status().members.learners;
        r.members()
            .into_iter()
            .map(|m| PbMember { id: m.id, name: m.name, peer_ur_ls: m.peer_urls, client_ur_ls: m.client_urls, is_learner: learners.contains(&m.id) })
            .collect()
    }

    /// etcd's checkMembershipOperationPermission: an admin (root role) while auth is on.
    fn admin<T>(&self, r: &Request<T>) -> Result<(), Status> {
        if !self.0.auth.enabled() {
            return Ok(());
        }
        let ai = self.0.caller(r)?;
        Ok(self.0.auth.check_admin(ai.as_ref())?)
    }
}

/// etcd's types.NewURLs: at least one; each http(s)://host:port without a path, or unix(s)://.
pub fn valid_peer_urls(urls: &[String]) -> bool {
    !urls.is_empty() && urls.iter().all(|u| valid_peer_url(u.trim()))
}

fn valid_peer_url(u: &str) -> bool {
    let Some((scheme, rest)) = u.split_once("://") else { return false };
    match scheme {
        "unix" | "unixs" => true,
        "http" | "https" => {
            let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            let (authority, tail) = rest.split_at(end);
            let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            // net.SplitHostPort: a port separator after the host (a bracketed IPv6 host included).
            let has_port = match host_port.strip_prefix('[') {
                Some(v6) => v6.split_once(']').is_some_and(|(_, p)| p.starts_with(':')),
                None => host_port.matches(':').count() == 1,
            };
            let path = &tail[..tail.find(['?', '#']).unwrap_or(tail.len())];
            has_port && path.is_empty()
        }
        _ => false,
    }
}

#[tonic::async_trait]
impl PbClusterService for ClusterService {
    /// etcd: the URLs checked, then the permission; a single member then accepts
    /// a voting member (the restore case of IsReadyToAddVotingMember) and a
    /// learner alike, unless a member already has one of the URLs. Here the URL
    /// check stands, and the addition itself is refused: no second process can
    /// join this one (etcd's new member would make the cluster wait for it).
    async fn member_add(&self, r: Request<PbMemberAddRequest>) -> Result<Response<PbMemberAddResponse>, Status> {
        if !valid_peer_urls(&r.get_ref().peer_ur_ls) {
            return Err(Status::invalid_argument("etcdserver: given member URLs are invalid"));
        }
        self.admin(&r)?;
        if let Some(g) = self.0.replica.get() {
            return self.group_add(g, r.into_inner()).await;
        }
        let mine = self.0.member.get().peer_urls;
        if r.get_ref().peer_ur_ls.iter().any(|u| mine.iter().any(|m| m == u.trim())) {
            return Err(Status::failed_precondition("etcdserver: Peer URLs already exists"));
        }
        Err(Status::unimplemented("meganode-store is a single member: it cannot add members"))
    }

    /// etcd refuses to remove its only voting member (no started member would be
    /// left for the quorum; its gRPC layer has no code for that error: Unknown)
    /// and does not know any other id.
    async fn member_remove(&self, r: Request<PbMemberRemoveRequest>) -> Result<Response<PbMemberRemoveResponse>, Status> {
        self.admin(&r)?;
        if let Some(g) = self.0.replica.get() {
            let _one = ONE_CHANGE.lock().await;
            let id = r.get_ref().id;
            if !g.members().iter().any(|m| m.id == id) {
                return Err(not_found());
            }
            may_remove(g, id)?;
            change(g.remove(id)).await?;
            return Ok(Response::new(PbMemberRemoveResponse { header: header(&self.0), members: Self::group_members(g) }));
        }
        if r.get_ref().id == self.0.member_id {
            return Err(Status::unknown("etcdserver: re-configuration failed due to not enough started members"));
        }
        Err(not_found())
    }

    /// etcd takes this member's new peer URLs as given (no check of their form)
    /// and answers the members. Kept across restarts (member_state.rs).
    async fn member_update(&self, r: Request<PbMemberUpdateRequest>) -> Result<Response<PbMemberUpdateResponse>, Status> {
        self.admin(&r)?;
        if let Some(g) = self.0.replica.get() {
            let PbMemberUpdateRequest { id, peer_ur_ls } = r.into_inner();
            reachable_peer_urls(&peer_ur_ls)?;
            let _one = ONE_CHANGE.lock().await;
            let ms = g.members();
            if !ms.iter().any(|m| m.id == id) {
                return Err(not_found());
            }
            if ms.iter().any(|m| m.id != id && m.peer_urls.iter().any(|u| peer_ur_ls.contains(u))) {
                return Err(Status::failed_precondition("etcdserver: Peer URLs already exists"));
            }
            change(g.update_peer_urls(id, peer_ur_ls)).await?;
            return Ok(Response::new(PbMemberUpdateResponse { header: header(&self.0), members: Self::group_members(g) }));
        }
        if r.get_ref().id != self.0.member_id {
            return Err(not_found());
        }
        let urls = r.into_inner().peer_ur_ls;
        self.0.member.update(|m| {
            m.peer_urls = urls;
            Ok(())
        })?;
        Ok(Response::new(PbMemberUpdateResponse { header: header(&self.0), members: vec![self.me()] }))
    }

    /// etcd's requireAuthInfo: any user while auth is on.
    async fn member_list(&self, r: Request<PbMemberListRequest>) -> Result<Response<PbMemberListResponse>, Status> {
        if self.0.auth.enabled() {
            let ai = self.0.caller(&r)?;
            self.0.auth.require(ai.as_ref())?;
        }
        // etcd 3.5's linearizable MemberList (the client's default): a member
        // answers once it has applied every change committed before the call.
        if r.get_ref().linearizable {
            self.0.linearizable(false).await?;
        }
        let members = match self.0.replica.get() {
            Some(r) => Self::group_members(r),
            None => vec![self.me()],
        };
        Ok(Response::new(PbMemberListResponse { header: header(&self.0), members }))
    }

    /// The only member is a voting one, which etcd does not promote.
    async fn member_promote(&self, r: Request<PbMemberPromoteRequest>) -> Result<Response<PbMemberPromoteResponse>, Status> {
        self.admin(&r)?;
        if let Some(g) = self.0.replica.get() {
            let _one = ONE_CHANGE.lock().await;
            let id = r.get_ref().id;
            if !g.members().iter().any(|m| m.id == id) {
                return Err(not_found());
            }
            let ms = g.status().members;
            if !ms.learners.contains(&id) {
                return Err(Status::failed_precondition("etcdserver: can only promote a learner member"));
            }
            // etcd's isReadyToPromoteMember: the started voters and the learner
            // must be a quorum of the voters after the promotion.
            if started_voters(g, &ms.voters).len() + 1 < (ms.voters.len() + 1) / 2 + 1 {
                return Err(not_enough_started());
            }
            change(g.promote(id)).await?;
            return Ok(Response::new(PbMemberPromoteResponse { header: header(&self.0), members: Self::group_members(g) }));
        }
        if r.get_ref().id == self.0.member_id {
            return Err(Status::failed_precondition("etcdserver: can only promote a learner member"));
        }
        Err(not_found())
    }
}

/// etcd's --max-learners default: one learner at a time.
const MAX_LEARNERS: usize = 1;
/// etcd's HealthInterval: a reconfiguration needs peers connected this long.
const HEALTH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

fn unhealthy() -> Status {
    Status::unavailable("etcdserver: unhealthy cluster")
}

fn not_enough_started() -> Status {
    Status::failed_precondition("etcdserver: re-configuration failed due to not enough started members")
}

/// Voters that have started (published their name: etcd's "started member").
fn started_voters(g: &Replica, voters: &[u64]) -> Vec<u64> {
    g.members().into_iter().filter(|m| voters.contains(&m.id) && !m.name.is_empty()).map(|m| m.id).collect()
}

/// One membership change at a time on this member, from its checks to its
/// application: two MemberAdds that each pass "too many learners" or the
/// quorum checks alone must not both go through (etcd checks under its
/// cluster's lock as it applies).
static ONE_CHANGE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// In a group the members dial each other's first peer URL, over TCP or TLS
/// (replication::peer_tls): a unix:// URL etcd would take names a member
/// nobody here could reach, so it is refused before it enters the log.
fn reachable_peer_urls(urls: &[String]) -> Result<(), Status> {
    match urls.iter().find_map(|u| crate::replication::peer_tls::split_url(u.trim()).err()) {
        Some(e) => Err(Status::invalid_argument(format!("etcdserver: given member URLs are invalid: {e}"))),
        None => Ok(()),
    }
}

impl ClusterService {
    /// MemberAdd in a group: etcd's checks (a peer URL already a member's, too
    /// many learners, a voter the started members could not outvote), then the
    /// change through the log; the new member gets etcd's ID for an added
    /// member (its URLs, the token and the time).
    async fn group_add(&self, g: &Replica, req: PbMemberAddRequest) -> Result<Response<PbMemberAddResponse>, Status> {
        let urls: Vec<String> = req.peer_ur_ls.iter().map(|u| u.trim().to_string()).collect();
        reachable_peer_urls(&urls)?;
        let _one = ONE_CHANGE.lock().await;
        let status = g.status();
        let voters = &status.members.voters;
        // etcd's mayAddMember (strict reconfiguration): a new voter must leave the
        // started voters a quorum, and the leader must have been connected to
        // every voter for HealthInterval.
        // (etcd's exception: the one voter of a group of one may add a second.)
        let started = started_voters(g, voters).len();
        if !req.is_learner && started < (voters.len() + 1) / 2 + 1 && !(started == 1 && voters.len() == 1) {
            return Err(not_enough_started());
        }
        if !voters.iter().all(|v| g.connected_for(*v, HEALTH_INTERVAL)) {
            return Err(unhealthy());
        }
        // Then what etcd checks as it applies the change.
        let ms = g.members();
        if ms.iter().any(|m| m.peer_urls.iter().any(|u| urls.contains(u))) {
            return Err(Status::failed_precondition("etcdserver: Peer URLs already exists"));
        }
        if req.is_learner && status.members.learners.len() >= MAX_LEARNERS {
            return Err(Status::failed_precondition("etcdserver: too many learner members in cluster"));
        }
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
        let id = identity::member_id_at(&urls, &self.0.cfg.initial_cluster_token, now);
        if ms.iter().any(|m| m.id == id) {
            return Err(Status::failed_precondition("etcdserver: member ID already exist"));
        }
        let info = MemberInfo { id, name: String::new(), peer_urls: urls.clone(), client_urls: Vec::new() };
        change(g.add_member(&info, req.is_learner)).await?;
        let member = PbMember { id, name: String::new(), peer_ur_ls: urls, client_ur_ls: Vec::new(), is_learner: req.is_learner };
        Ok(Response::new(PbMemberAddResponse { header: header(&self.0), member: Some(member), members: Self::group_members(g) }))
    }
}

/// etcd's mayRemoveMember: a learner goes freely; a voter only if the started
/// voters left are a quorum, and, unless it is down already, if the voters
/// connected for HealthInterval stay a quorum without it.
fn may_remove(g: &Replica, id: u64) -> Result<(), Status> {
    let voters = g.status().members.voters;
    if !voters.contains(&id) {
        return Ok(());
    }
    let left: Vec<u64> = voters.iter().copied().filter(|v| *v != id).collect();
    if started_voters(g, &left).len() < left.len() / 2 + 1 {
        return Err(not_enough_started());
    }
    if id != g.id() && !g.connected(id) {
        return Ok(());
    }
    let active = voters.iter().filter(|v| g.connected_for(**v, HEALTH_INTERVAL)).count();
    if active.saturating_sub(1) < 1 + (voters.len() - 1) / 2 {
        return Err(unhealthy());
    }
    Ok(())
}

/// Waits for a membership change proposed here to be applied here.
async fn change(rx: tokio::sync::oneshot::Receiver<Result<Membership, String>>) -> Result<Membership, Status> {
    match tokio::time::timeout(super::forward::REQUEST_TIMEOUT, rx).await {
        Ok(Ok(Ok(m))) => Ok(m),
        Ok(Ok(Err(e))) if e.starts_with("etcdserver: ") => Err(Status::failed_precondition(e)),
        Ok(Ok(Err(e))) if e == "not the leader" || e.starts_with("leadership changed") => Err(Status::unavailable("etcdserver: leader changed")),
        Ok(Ok(Err(e))) => Err(Status::failed_precondition(format!("etcdserver: {e}"))),
        Ok(Err(_)) => Err(Status::unavailable("etcdserver: leader changed")),
        Err(_) => Err(crate::errors::StoreError::Timeout.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::valid_peer_urls;

    #[test]
    fn peer_urls_as_etcd_parses_them() {
        let v = |s: &[&str]| valid_peer_urls(&s.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert!(v(&["http://10.0.0.1:2380"]));
        assert!(v(&["https://[::1]:2380", " http://h:1 "]));
        assert!(v(&["unix://sock"]));
        assert!(!v(&[]));
        assert!(!v(&["::bad"]));
        assert!(!v(&["http://10.0.0.1"]));
        assert!(!v(&["http://10.0.0.1:2380/path"]));
        assert!(!v(&["ftp://10.0.0.1:2380"]));
        assert!(!v(&["localhost:2380"]));
        assert!(!v(&["http://h:1", "bad"]));
    }
}
