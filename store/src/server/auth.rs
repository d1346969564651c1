//! Auth service (etcd's etcdserverpb.Auth), served through `routes` with its
//! messages declared here: etcd-client's generated server names AuthStatus's
//! messages and authpb's types in modules it keeps private.
//!
//! Each method runs as etcd's server runs it: the caller's token is checked
//! first (an invalid one is refused even for an admin method), then, for the
//! methods etcd's auth applier guards (every one but Authenticate, UserGet and
//! RoleGet), the caller must have the root role while auth is on; UserGet is
//! also open to the user itself and RoleGet to a holder of the role.
use std::convert::Infallible;
use std::sync::Arc;

use etcd_client::proto::PbResponseHeader;
use prost::Message;
use tonic::codegen::{http, BoxFuture, StdError};
use tonic::{Request, Response, Status};

use super::routes::{self, HttpResponse};
use super::{Ctx, HeaderOnly};
use crate::auth::ops::AuthOp;
use crate::auth::perm::Perm;
use crate::auth::{AuthError, AuthInfo, Password};

pub const SERVICE: &str = "etcdserverpb.Auth";

/// authpb.Permission.
#[derive(Clone, PartialEq, Message)]
pub struct Permission {
    #[prost(int32, tag = "1")]
    pub perm_type: i32,
    #[prost(bytes = "vec", tag = "2")]
    pub key: Vec<u8>,
    #[prost(bytes = "vec", tag = "3")]
    pub range_end: Vec<u8>,
}

/// authpb.UserAddOptions.
#[derive(Clone, PartialEq, Message)]
pub struct UserAddOptions {
    #[prost(bool, tag = "1")]
    pub no_password: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct Empty {}

#[derive(Clone, PartialEq, Message)]
pub struct AuthStatusResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<PbResponseHeader>,
    #[prost(bool, tag = "2")]
    pub enabled: bool,
    #[prost(uint64, tag = "3")]
    pub auth_revision: u64,
}

#[derive(Clone, PartialEq, Message)]
pub struct AuthenticateRequest {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub password: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct AuthenticateResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<PbResponseHeader>,
    #[prost(string, tag = "2")]
    pub token: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct UserAddRequest {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub password: String,
    #[prost(message, optional, tag = "3")]
    pub options: Option<UserAddOptions>,
    #[prost(string, tag = "4")]
    pub hashed_password: String,
}

/// AuthUserGetRequest, AuthUserDeleteRequest, AuthRoleAddRequest (field 1: the name).
#[derive(Clone, PartialEq, Message)]
pub struct NameRequest {
    #[prost(string, tag = "1")]
    pub name: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct ChangePasswordRequest {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub password: String,
    #[prost(string, tag = "3")]
    pub hashed_password: String,
}

/// AuthUserGrantRoleRequest (user, role) and AuthUserRevokeRoleRequest (name, role).
#[derive(Clone, PartialEq, Message)]
pub struct UserRoleRequest {
    #[prost(string, tag = "1")]
    pub user: String,
    #[prost(string, tag = "2")]
    pub role: String,
}

/// AuthUserGetResponse (roles), AuthUserListResponse (users), AuthRoleListResponse (roles).
#[derive(Clone, PartialEq, Message)]
pub struct NamesResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<PbResponseHeader>,
    #[prost(string, repeated, tag = "2")]
    pub names: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct RoleGetResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<PbResponseHeader>,
    #[prost(message, repeated, tag = "2")]
    pub perm: Vec<Permission>,
}

#[derive(Clone, PartialEq, Message)]
pub struct GrantPermissionRequest {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub perm: Option<Permission>,
}

#[derive(Clone, PartialEq, Message)]
pub struct RevokePermissionRequest {
    #[prost(string, tag = "1")]
    pub role: String,
    #[prost(bytes = "vec", tag = "2")]
    pub key: Vec<u8>,
    #[prost(bytes = "vec", tag = "3")]
    pub range_end: Vec<u8>,
}

/// Runs bcrypt off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, Status> {
    tokio::task::spawn_blocking(f).await.map_err(|e| Status::internal(e.to_string()))
}

fn header_only(ctx: &Ctx) -> HeaderOnly {
    HeaderOnly { header: ctx.header(ctx.store.current_rev()) }
}

/// The caller (token checked), who must be an admin while auth is on.
fn admin<T>(ctx: &Ctx, r: &Request<T>) -> Result<Option<AuthInfo>, Status> {
    let ai = ctx.caller(r)?;
    ctx.auth.check_admin(ai.as_ref())?;
    Ok(ai)
}

/// Applies a change: at once on a single member, through the log in a group
/// (server::auth_log; the forward layer brings it to the leader). The outer
/// error is the group's, the inner the auth store's answer.
async fn apply(ctx: &Ctx, op: AuthOp) -> Result<Result<(), AuthError>, Status> {
    match ctx.replica.get() {
        None => Ok(ctx.auth.apply(op)),
        Some(r) => ctx.auth_log.change(r, op).await,
    }
}

/// Applies a header-only mutation and answers it.
async fn done(ctx: &Ctx, op: AuthOp) -> Result<HeaderOnly, Status> {
    apply(ctx, op).await??;
    Ok(header_only(ctx))
}

/// The bcrypt text of a password (hashed here) or of a given hash.
async fn hash(ctx: &Arc<Ctx>, password: String, hashed: String) -> Result<String, Status> {
    let auth = ctx.auth.clone();
    match blocking(move || auth.hash_password(&password, &hashed)).await?? {
        Password::Hashed(h) => Ok(h),
        Password::None => Ok(String::new()),
    }
}

type Res<T> = Result<T, Status>;

async fn auth_enable(ctx: Arc<Ctx>, r: Request<Empty>) -> Res<HeaderOnly> {
    admin(&ctx, &r)?;
    done(&ctx, AuthOp::Enable).await
}

async fn auth_disable(ctx: Arc<Ctx>, r: Request<Empty>) -> Res<HeaderOnly> {
    admin(&ctx, &r)?;
    done(&ctx, AuthOp::Disable).await
}

async fn auth_status(ctx: Arc<Ctx>, r: Request<Empty>) -> Res<AuthStatusResponse> {
    admin(&ctx, &r)?;
    let (enabled, auth_revision) = ctx.auth.status();
    Ok(AuthStatusResponse { header: ctx.header(ctx.store.current_rev()), enabled, auth_revision })
}

/// No token check: etcd authenticates whatever metadata the request carries.
/// In a group a simple token goes through the log, so every member knows it
/// (etcd proposes Authenticate too); a JWT is valid everywhere as it is.
async fn authenticate(ctx: Arc<Ctx>, r: Request<AuthenticateRequest>) -> Res<AuthenticateResponse> {
    let r = r.into_inner();
    let auth = ctx.auth.clone();
    if ctx.replica.get().is_none() || auth.jwt_tokens() {
        let token = blocking(move || auth.authenticate(&r.name, &r.password)).await??;
        return Ok(AuthenticateResponse { header: ctx.header(ctx.store.current_rev()), token });
    }
    loop {
        let (auth, name, password) = (ctx.auth.clone(), r.name.clone(), r.password.clone());
        let rev = blocking(move || auth.check_password(&name, &password)).await??;
        let token = ctx.auth.new_simple_token();
        match apply(&ctx, AuthOp::Token { user: r.name.clone(), token: token.clone(), rev }).await? {
            Ok(()) => return Ok(AuthenticateResponse { header: ctx.header(ctx.store.current_rev()), token }),
            // The auth store changed since the password was checked: check it again.
            Err(AuthError::AuthOldRevision) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// The password is hashed first, as etcd's server does before proposing.
async fn user_add(ctx: Arc<Ctx>, r: Request<UserAddRequest>) -> Res<HeaderOnly> {
    let no_password = r.get_ref().options.as_ref().is_some_and(|o| o.no_password);
    let hash = if no_password { String::new() } else { hash(&ctx, r.get_ref().password.clone(), r.get_ref().hashed_password.clone()).await? };
    admin(&ctx, &r)?;
    done(&ctx, AuthOp::UserAdd { name: r.into_inner().name, hash, no_password }).await
}

async fn user_get(ctx: Arc<Ctx>, r: Request<NameRequest>) -> Res<NamesResponse> {
    let ai = ctx.caller(&r)?;
    if let Err(e) = ctx.auth.check_admin(ai.as_ref()) {
        if ai.as_ref().map_or("", |a| a.user.as_str()) != r.get_ref().name {
            return Err(e.into());
        }
    }
    let names = ctx.auth.user_get(&r.get_ref().name)?;
    Ok(NamesResponse { header: ctx.header(ctx.store.current_rev()), names })
}

async fn user_list(ctx: Arc<Ctx>, r: Request<Empty>) -> Res<NamesResponse> {
    admin(&ctx, &r)?;
    Ok(NamesResponse { header: ctx.header(ctx.store.current_rev()), names: ctx.auth.user_list() })
}

async fn user_delete(ctx: Arc<Ctx>, r: Request<NameRequest>) -> Res<HeaderOnly> {
    admin(&ctx, &r)?;
    done(&ctx, AuthOp::UserDelete { name: r.into_inner().name }).await
}

/// etcd hashes a password given; without one it decodes the hash field (empty: no password bytes).
async fn user_change_password(ctx: Arc<Ctx>, r: Request<ChangePasswordRequest>) -> Res<HeaderOnly> {
    let q = r.get_ref();
    let hash = match (q.password.as_str(), q.hashed_password.as_str()) {
        ("", "") => String::new(),
        ("", h) => hash(&ctx, String::new(), h.to_string()).await?,
        (p, _) => hash(&ctx, p.to_string(), String::new()).await?,
    };
    admin(&ctx, &r)?;
    done(&ctx, AuthOp::UserChangePassword { name: r.into_inner().name, hash }).await
}

async fn user_grant_role(ctx: Arc<Ctx>, r: Request<UserRoleRequest>) -> Res<HeaderOnly> {
    admin(&ctx, &r)?;
    let r = r.into_inner();
    done(&ctx, AuthOp::UserGrantRole { user: r.user, role: r.role }).await
}

async fn user_revoke_role(ctx: Arc<Ctx>, r: Request<UserRoleRequest>) -> Res<HeaderOnly> {
    admin(&ctx, &r)?;
    let r = r.into_inner();
    done(&ctx, AuthOp::UserRevokeRole { user: r.user, role: r.role }).await
}

async fn role_add(ctx: Arc<Ctx>, r: Request<NameRequest>) -> Res<HeaderOnly> {
    admin(&ctx, &r)?;
    done(&ctx, AuthOp::RoleAdd { name: r.into_inner().name }).await
}

async fn role_get(ctx: Arc<Ctx>, r: Request<NameRequest>) -> Res<RoleGetResponse> {
    let ai = ctx.caller(&r)?;
    if let Err(e) = ctx.auth.check_admin(ai.as_ref()) {
        if !ctx.auth.has_role(ai.as_ref().map_or("", |a| a.user.as_str()), &r.get_ref().name) {
            return Err(e.into());
        }
    }
    let perm = ctx
        .auth
        .role_get(&r.get_ref().name)?
        .into_iter()
        .map(|p| Permission { perm_type: p.perm_type, key: p.key, range_end: p.range_end })
        .collect();
    Ok(RoleGetResponse { header: ctx.header(ctx.store.current_rev()), perm })
}

async fn role_list(ctx: Arc<Ctx>, r: Request<Empty>) -> Res<NamesResponse> {
    admin(&ctx, &r)?;
    Ok(NamesResponse { header: ctx.header(ctx.store.current_rev()), names: ctx.auth.role_list() })
}

async fn role_delete(ctx: Arc<Ctx>, r: Request<NameRequest>) -> Res<HeaderOnly> {
    admin(&ctx, &r)?;
    done(&ctx, AuthOp::RoleDelete { name: r.into_inner().name }).await
}

async fn role_grant_permission(ctx: Arc<Ctx>, r: Request<GrantPermissionRequest>) -> Res<HeaderOnly> {
    admin(&ctx, &r)?;
    let r = r.into_inner();
    let perm = r.perm.map(|p| Perm { perm_type: p.perm_type, key: p.key, range_end: p.range_end });
    done(&ctx, AuthOp::RoleGrantPermission { role: r.name, perm }).await
}

async fn role_revoke_permission(ctx: Arc<Ctx>, r: Request<RevokePermissionRequest>) -> Res<HeaderOnly> {
    admin(&ctx, &r)?;
    let r = r.into_inner();
    done(&ctx, AuthOp::RoleRevokePermission { role: r.role, key: r.key, range_end: r.range_end }).await
}

/// The Auth service's methods; served as `AuthRouter`.
pub struct AuthMethods;

pub type AuthRouter = routes::Router<AuthMethods>;

impl routes::Methods for AuthMethods {
    const NAME: &'static str = SERVICE;

    fn call<B>(ctx: Arc<Ctx>, limit: usize, req: http::Request<B>) -> BoxFuture<HttpResponse, Infallible>
    where
        B: tonic::codegen::Body + Send + 'static,
        B::Error: Into<StdError> + Send + 'static,
    {
        macro_rules! route {
            ($f:ident) => {
                routes::unary(req, limit, move |r| {
                    let ctx = ctx.clone();
                    async move { $f(ctx, r).await.map(Response::new) }
                })
            };
        }
        match req.uri().path().strip_prefix("/etcdserverpb.Auth/").unwrap_or("") {
            "AuthEnable" => route!(auth_enable),
            "AuthDisable" => route!(auth_disable),
            "AuthStatus" => route!(auth_status),
            "Authenticate" => route!(authenticate),
            "UserAdd" => route!(user_add),
            "UserGet" => route!(user_get),
            "UserList" => route!(user_list),
            "UserDelete" => route!(user_delete),
            "UserChangePassword" => route!(user_change_password),
            "UserGrantRole" => route!(user_grant_role),
            "UserRevokeRole" => route!(user_revoke_role),
            "RoleAdd" => route!(role_add),
            "RoleGet" => route!(role_get),
            "RoleList" => route!(role_list),
            "RoleDelete" => route!(role_delete),
            "RoleGrantPermission" => route!(role_grant_permission),
            "RoleRevokePermission" => route!(role_revoke_permission),
            _ => routes::unknown_method(SERVICE, req.uri().path()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Field numbers of etcd's rpc.proto / auth.proto.
    #[test]
    fn messages_have_etcds_wire_format() {
        let r = UserAddRequest { name: "u".into(), password: "p".into(), options: Some(UserAddOptions { no_password: true }), hashed_password: "h".into() };
        assert_eq!(r.encode_to_vec(), [0x0a, 1, b'u', 0x12, 1, b'p', 0x1a, 2, 0x08, 1, 0x22, 1, b'h']);
        let p = GrantPermissionRequest { name: "r".into(), perm: Some(Permission { perm_type: 2, key: b"k".to_vec(), range_end: b"e".to_vec() }) };
        assert_eq!(p.encode_to_vec(), [0x0a, 1, b'r', 0x12, 8, 0x08, 2, 0x12, 1, b'k', 0x1a, 1, b'e']);
        let s = AuthStatusResponse { header: None, enabled: true, auth_revision: 3 };
        assert_eq!(s.encode_to_vec(), [0x10, 1, 0x18, 3]);
    }
}
