//! Cluster service: one member, this one. Clients call MemberList to sync
//! endpoints. The membership changes are answered as a single-member etcd 3.6
//! answers them (etcdserver/api/v3rpc/member.go, EtcdServer.AddMember and
//! friends) wherever that answer does not need a second member: the checks,
//! their order and their errors are etcd's; what would really add a member is
//! refused (docs/design.md §6 Membership).
use std::sync::Arc;

use etcd_client::proto::*;
use tonic::{Request, Response, Status};

use super::Ctx;

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
        if r.get_ref().id == self.0.member_id {
            return Err(Status::unknown("etcdserver: re-configuration failed due to not enough started members"));
        }
        Err(not_found())
    }

    /// etcd takes this member's new peer URLs as given (no check of their form)
    /// and answers the members. Kept across restarts (member_state.rs).
    async fn member_update(&self, r: Request<PbMemberUpdateRequest>) -> Result<Response<PbMemberUpdateResponse>, Status> {
        self.admin(&r)?;
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
        let members = match self.0.replica.get() {
            Some(r) => {
                let learners = r.status().members.learners;
                r.members()
                    .into_iter()
                    .map(|m| PbMember { id: m.id, name: m.name, peer_ur_ls: m.peer_urls, client_ur_ls: m.client_urls, is_learner: learners.contains(&m.id) })
                    .collect()
            }
            None => vec![self.me()],
        };
        Ok(Response::new(PbMemberListResponse { header: header(&self.0), members }))
    }

    /// The only member is a voting one, which etcd does not promote.
    async fn member_promote(&self, r: Request<PbMemberPromoteRequest>) -> Result<Response<PbMemberPromoteResponse>, Status> {
        self.admin(&r)?;
        if r.get_ref().id == self.0.member_id {
            return Err(Status::failed_precondition("etcdserver: can only promote a learner member"));
        }
        Err(not_found())
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
