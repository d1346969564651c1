//! Cluster service: one member, this one. Clients call MemberList to sync endpoints.
use std::sync::Arc;

use etcd_client::proto::*;
use tonic::{Request, Response, Status};

use super::Ctx;

pub struct ClusterService(pub Arc<Ctx>);

impl ClusterService {
    fn me(&self) -> PbMember {
        PbMember {
            id: self.0.member_id,
            name: self.0.cfg.name.clone(),
            peer_ur_ls: Vec::new(),
            client_ur_ls: self.0.cfg.advertise_client_urls.clone(),
            is_learner: false,
        }
    }
}

fn single_member() -> Status {
    Status::unimplemented("meganode-store is a single member: membership cannot change")
}

#[tonic::async_trait]
impl PbClusterService for ClusterService {
    async fn member_add(&self, _r: Request<PbMemberAddRequest>) -> Result<Response<PbMemberAddResponse>, Status> {
        Err(single_member())
    }
    async fn member_remove(&self, _r: Request<PbMemberRemoveRequest>) -> Result<Response<PbMemberRemoveResponse>, Status> {
        Err(single_member())
    }
    async fn member_update(&self, _r: Request<PbMemberUpdateRequest>) -> Result<Response<PbMemberUpdateResponse>, Status> {
        Err(single_member())
    }
    async fn member_list(&self, _r: Request<PbMemberListRequest>) -> Result<Response<PbMemberListResponse>, Status> {
        // etcd's cluster server fills cluster, member and term, not the revision.
        Ok(Response::new(PbMemberListResponse { header: self.0.header(0), members: vec![self.me()] }))
    }
    async fn member_promote(&self, _r: Request<PbMemberPromoteRequest>) -> Result<Response<PbMemberPromoteResponse>, Status> {
        Err(single_member())
    }
}
