//! Calls that need the leader, on a member of a replicated group: served here
//! when this member is the writable leader, else forwarded to the leader as
//! they came (HTTP/2 over the leader's peer port, streams included) and
//! answered with its answer. etcd's clients do not retry a write another member refused (clientv3
//! retries only calls that are safe to repeat), so a follower must not refuse
//! one: etcd's followers forward their proposals to the leader as well.
//!
//! While no leader is known the call waits (an election takes about one
//! election timeout), at most `REQUEST_TIMEOUT`, then gets etcd's "request
//! timed out"; with `WithRequireLeader` ("hasleader" metadata) it gets "no
//! leader" at once, as from etcd. A forwarded call is marked and never
//! forwarded again: a member that was named leader but no longer is answers
//! "leader changed" instead of sending it on.
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use parking_lot::Mutex;
use tonic::codegen::http;
use tonic::transport::{Channel, Endpoint};
use tonic::Status;
use tower_service::Service;

use super::Ctx;
use crate::errors::StoreError;
use crate::replication::Replica;

/// How long a call waits for a leader (or a ReadIndex for its answer): etcd's
/// request timeout with its default election timeout.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(7);

/// Marks a call one member forwarded to another.
const FORWARDED: &str = "x-meganode-forwarded";

/// The calls only the leader serves: every write (its revision is assigned
/// where it executes), lease keep-alives and remaining TTLs (the leader's clock
/// counts them), and the recipes that write (Lock, Election).
fn needs_leader(path: &str) -> bool {
    matches!(
        path,
        "/etcdserverpb.KV/Put"
            | "/etcdserverpb.KV/DeleteRange"
            | "/etcdserverpb.KV/Txn"
            | "/etcdserverpb.KV/Compact"
            | "/etcdserverpb.Lease/LeaseGrant"
            | "/etcdserverpb.Lease/LeaseRevoke"
            | "/etcdserverpb.Lease/LeaseKeepAlive"
            | "/etcdserverpb.Lease/LeaseTimeToLive"
            | "/etcdserverpb.Cluster/MemberAdd"
            | "/etcdserverpb.Cluster/MemberRemove"
            | "/etcdserverpb.Cluster/MemberUpdate"
            | "/etcdserverpb.Cluster/MemberPromote"
            | "/etcdserverpb.Maintenance/Alarm"
    ) || path.starts_with("/v3lockpb.Lock/")
        || path.starts_with("/v3electionpb.Election/")
        || auth_change(path)
}

/// Auth changes and Authenticate go through the log from the leader
/// (server::auth_log); the reads of the auth store are served by any member.
fn auth_change(path: &str) -> bool {
    path.strip_prefix("/etcdserverpb.Auth/").is_some_and(|m| !matches!(m, "AuthStatus" | "UserGet" | "UserList" | "RoleGet" | "RoleList"))
}

/// `routes` with every call that needs the leader going through `forward`.
pub fn layer(routes: tonic::service::Routes, ctx: &Arc<Ctx>) -> tonic::service::Routes {
    let state = Forwarder { ctx: ctx.clone(), channels: Arc::default() };
    routes.into_axum_router().layer(axum::middleware::from_fn_with_state(state, forward)).into()
}

#[derive(Clone)]
struct Forwarder {
    ctx: Arc<Ctx>,
    /// One HTTP/2 connection per leader peer URL, made when first needed.
    channels: Arc<Mutex<HashMap<String, Channel>>>,
}

fn answer(s: Status) -> Response {
    s.into_http::<tonic::body::Body>().map(axum::body::Body::new)
}

async fn forward(State(f): State<Forwarder>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if !needs_leader(path) {
        return next.run(req).await;
    }
    let Some(r) = f.ctx.replica.get() else { return next.run(req).await };
    // A learner asks the leader to promote it (etcd's learner takes MemberPromote
    // and forwards it); it serves nothing else that needs the leader.
    if r.is_learner() && path != "/etcdserverpb.Cluster/MemberPromote" {
        return answer(Status::failed_precondition("etcdserver: rpc not supported for learner"));
    }
    if r.writable() {
        // A follower's call: its followers hear each commit at once meanwhile.
        let _forwarded = req.headers().contains_key(FORWARDED).then(|| r.forwarded_call());
        return next.run(req).await;
    }
    let forwarded = req.headers().contains_key(FORWARDED);
    let require_leader = req.headers().get("hasleader").is_some_and(|v| v == "true");
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    // A unary call's message is read whole first, so that a leader found gone
    // before it took the call (it died; the next one is being elected) can be
    // given it again; a keep-alive stream cannot be.
    let streaming = path == "/etcdserverpb.Lease/LeaseKeepAlive";
    let (parts, body) = req.into_parts();
    let mut body = if streaming {
        Body::Stream(body)
    } else {
        match http_body_util::BodyExt::collect(body).await {
            Ok(b) => Body::Whole(b.to_bytes()),
            Err(e) => return answer(Status::internal(format!("reading the request: {e}"))),
        }
    };
    loop {
        if r.writable() {
            return next.run(Request::from_parts(parts, body.take())).await;
        }
        if r.error().is_some() {
            return answer(Status::unavailable("etcdserver: this member left the group (see its log)"));
        }
        let leader = r.leader();
        if leader != 0 && leader != r.id() && !forwarded {
            if let Some(url) = peer_url(r, leader) {
                let mut head = http::Request::new(());
                *head.method_mut() = parts.method.clone();
                *head.uri_mut() = parts.uri.clone();
                *head.headers_mut() = parts.headers.clone();
                match f.proxy(leader, &url, head, body.take()).await {
                    Ok(resp) => return resp,
                    Err((s, unreached)) if !unreached || streaming || Instant::now() >= deadline => return answer(s),
                    Err((_, _)) => body.restore(),
                }
            }
        }
        if leader == 0 && require_leader {
            return answer(Status::unavailable("etcdserver: no leader"));
        }
        if Instant::now() >= deadline {
            return answer(if forwarded { Status::unavailable("etcdserver: leader changed") } else { StoreError::Timeout.into() });
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A call's request body: read whole (a unary call, which can be sent again),
/// or a stream passed through once.
enum Body {
    Whole(bytes::Bytes),
    Stream(axum::body::Body),
    /// Sent: `restore` brings a whole one back.
    Sent(Option<bytes::Bytes>),
}

impl Body {
    fn take(&mut self) -> axum::body::Body {
        match std::mem::replace(self, Body::Sent(None)) {
            Body::Whole(b) => {
                *self = Body::Sent(Some(b.clone()));
                axum::body::Body::from(b)
            }
            Body::Stream(s) => s,
            Body::Sent(_) => axum::body::Body::empty(),
        }
    }

    fn restore(&mut self) {
        if let Body::Sent(Some(b)) = self {
            *self = Body::Whole(b.clone());
        }
    }
}

/// Whether an error from the leader's connection means the call never reached
/// it (nothing listens there: it died), so that sending it elsewhere cannot
/// apply it twice.
fn unreached(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(e) = cur {
        if e.to_string().contains("tcp connect error") || e.to_string().contains("Connection refused") {
            return true;
        }
        cur = e.source();
    }
    false
}

/// The leader's first peer URL: forwarded calls travel over the peer port
/// (`peer::connect_h2`), whatever the scheme of its client URLs.
fn peer_url(r: &Replica, leader: u64) -> Option<String> {
    r.members().into_iter().find(|m| m.id == leader)?.peer_urls.into_iter().next()
}

impl Forwarder {
    /// The HTTP/2 connection to member `leader` at peer URL `url`: its peer
    /// port, with the peer handshake (its name resolved at each connection).
    fn channel(&self, leader: u64, url: &str) -> Result<Channel, Status> {
        let mut chans = self.channels.lock();
        if let Some(c) = chans.get(url) {
            return Ok(c.clone());
        }
        crate::replication::peer_tls::split_url(url).map_err(Status::unavailable)?;
        let (cluster, me, target) = (self.ctx.cluster_id, self.ctx.member_id, url.to_string());
        let ctx = self.ctx.clone();
        let connector = tower::service_fn(move |_: http::Uri| {
            let (target, ctx) = (target.clone(), ctx.clone());
            async move {
                let tls = ctx.peer_tls.get().map(|t| &**t);
                let s = tokio::time::timeout(Duration::from_secs(3), crate::replication::peer::connect_h2(tls, cluster, me, leader, &target))
                    .await
                    .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(s))
            }
        });
        let c = Endpoint::from_static("http://leader").connect_with_connector_lazy(connector);
        chans.insert(url.to_string(), c.clone());
        Ok(c)
    }

    /// Sends the call to member `leader` at peer URL `url`: its answer, or the
    /// error and whether the call never reached it (`unreached`).
    async fn proxy(&self, leader: u64, url: &str, head: http::Request<()>, body: axum::body::Body) -> Result<Response, (Status, bool)> {
        let mut ch = self.channel(leader, url).map_err(|s| (s, false))?;
        let (mut parts, ()) = head.into_parts();
        parts.headers.insert(FORWARDED, http::HeaderValue::from_static("1"));
        let req = http::Request::from_parts(parts, tonic::body::Body::new(body));
        if let Err(e) = futures::future::poll_fn(|cx| ch.poll_ready(cx)).await {
            return Err((Status::unavailable(format!("etcdserver: leader unreachable: {e}")), unreached(&e)));
        }
        match ch.call(req).await {
            Ok(resp) => Ok(resp.map(axum::body::Body::new)),
            Err(e) => {
                // The connection may be gone for good (the leader died): a fresh one next time.
                self.channels.lock().remove(url);
                let never_sent = unreached(&e);
                // A call the leader took and never answered may or may not have been
                // applied: etcd's answer to a proposal whose leader failed.
                let s = if never_sent {
                    Status::unavailable(format!("etcdserver: leader unreachable: {e}"))
                } else {
                    Status::unavailable("etcdserver: request timed out, possibly due to previous leader failure")
                };
                Err((s, never_sent))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_and_auth_changes_need_the_leader() {
        assert!(needs_leader("/etcdserverpb.KV/Put") && needs_leader("/etcdserverpb.Lease/LeaseKeepAlive") && needs_leader("/v3lockpb.Lock/Lock"));
        assert!(!needs_leader("/etcdserverpb.KV/Range") && !needs_leader("/etcdserverpb.Watch/Watch") && !needs_leader("/etcdserverpb.Maintenance/Status"));
        assert!(needs_leader("/etcdserverpb.Auth/AuthEnable") && needs_leader("/etcdserverpb.Auth/UserAdd") && needs_leader("/etcdserverpb.Auth/Authenticate"));
        assert!(!needs_leader("/etcdserverpb.Auth/UserGet") && !needs_leader("/etcdserverpb.Auth/AuthStatus"));
        assert!(needs_leader("/etcdserverpb.Maintenance/Alarm"));
    }
}
