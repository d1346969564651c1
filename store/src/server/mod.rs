//! gRPC services over the store. Each file is one etcd service, except
//! `concurrency` (etcd's client-side recipes, which Lock and Election run) and
//! `routes` (serving a service without a generated server).
pub mod auth;
pub mod auth_log;
pub mod authz;
pub mod backpressure;
pub mod bulk;
pub mod cluster;
pub mod concurrency;
pub mod deadline;
pub mod election;
pub mod forward;
pub mod gateway;
pub mod grpc_metrics;
pub mod health;
pub mod http_endpoints;
pub mod kv;
pub mod lease;
pub mod lock;
pub mod maintenance;
pub mod member_state;
pub mod metrics;
pub mod range_stream;
pub mod range_wire;
pub mod routes;
pub mod txn_codec;
pub mod watch;

use std::sync::Arc;

use etcd_client::proto::PbResponseHeader;

use crate::auth::{AuthInfo, AuthStore, Creds};
use crate::config::Config;
use crate::errors::StoreError;
use crate::mvcc::Store;
use crate::quota::ALARM_NOSPACE;

/// etcd's version as this store reports it: kube-apiserver enables progress
/// requests (consistent reads from cache) only for >= 3.5.13 / 3.4.31.
pub const ETCD_COMPAT_VERSION: &str = "3.6.0";

/// gRPC accepts this much above --max-request-bytes, as etcd's server does.
pub const GRPC_OVERHEAD: usize = 512 * 1024;

/// grpc-go's refusal of a message above the server's receive limit.
pub fn grpc_too_large(n: usize, limit: usize) -> tonic::Status {
    tonic::Status::resource_exhausted(format!("grpc: received message larger than max ({n} vs. {limit})"))
}

/// What tonic itself decodes at most: well above the limit above, so that an
/// oversized request reaches our check and gets etcd's exact status.
pub fn decode_limit(max_request_bytes: usize) -> usize {
    (4 * (max_request_bytes + GRPC_OVERHEAD)).max(16 << 20)
}

/// Every service a client port serves: etcd's gRPC services, health, etcd's HTTP
/// endpoints and its JSON gateway (which calls the gRPC routes in process).
pub fn routes(ctx: &Arc<Ctx>, limit: usize) -> tonic::service::Routes {
    use etcd_client::proto::{PbClusterServer, PbLeaseServer, PbMaintenanceServer, PbWatchServer};
    let mut routes = tonic::service::Routes::builder();
    routes
        .add_service(kv::KvRouter::new(ctx.clone(), limit))
        .add_service(PbWatchServer::new(watch::WatchService(ctx.clone())).max_decoding_message_size(limit))
        .add_service(PbLeaseServer::new(lease::LeaseService(ctx.clone())).max_decoding_message_size(limit))
        .add_service(PbMaintenanceServer::new(maintenance::MaintenanceService(ctx.clone())).max_decoding_message_size(limit))
        .add_service(PbClusterServer::new(cluster::ClusterService(ctx.clone())).max_decoding_message_size(limit))
        .add_service(auth::AuthRouter::new(ctx.clone(), limit))
        .add_service(lock::LockRouter::new(ctx.clone(), limit))
        .add_service(election::ElectionRouter::new(ctx.clone(), limit))
        .add_service(health::HealthRouter::default());
    let mut routes = routes.routes();
    if ctx.replica.get().is_some() {
        routes = forward::layer(routes, ctx);
    }
    let grpc = routes.clone();
    http_endpoints::add(&mut routes, ctx);
    gateway::add(&mut routes, ctx, grpc, limit);
    routes
}

/// An answer that holds only its header: etcd's many `...Response { header }`
/// messages (auth changes), and how a forwarded write's answer is read for its
/// revision (field 1 of every etcd response).
#[derive(Clone, PartialEq, prost::Message)]
pub struct HeaderOnly {
    #[prost(message, optional, tag = "1")]
    pub header: Option<PbResponseHeader>,
}

/// What a TLS connection's client proved: the common name of its verified
/// certificate (etcd's user under --client-cert-auth). In the extensions of
/// every request the connection carries, whichever path serves it.
#[derive(Clone, Debug, Default)]
pub struct ClientCert {
    pub common_name: Option<std::sync::Arc<str>>,
}


pub struct Ctx {
    pub store: Arc<Store>,
    pub cfg: Config,
    pub member_id: u64,
    pub cluster_id: u64,
    pub metrics: metrics::Metrics,
    /// The write-ahead log, to wait for fsync-mode prefixes before answering.
    pub wal: Option<Arc<crate::wal::Wal>>,
    /// Users, roles, tokens and the permission checks (crate::auth).
    pub auth: Arc<AuthStore>,
    /// This member's peer URLs as MemberList reports them (--initial-advertise-peer-urls,
    /// changed by MemberUpdate) and the downgrade target Downgrade ENABLE set; kept
    /// across restarts when a data directory is (member_state.rs).
    pub member: member_state::Member,
    /// This member's part in a replicated group (set once at start-up; unset
    /// for a single member, where every use of it is one load).
    pub replica: std::sync::OnceLock<Arc<crate::replication::Replica>>,
    /// How this member dials https:// peer URLs (set at start-up in a group
    /// with peer TLS): the forwards to the leader go over the peer port.
    pub peer_tls: std::sync::OnceLock<Arc<crate::replication::peer_tls::PeerTls>>,
    /// The auth store's changes through a group's log (unused by a single member).
    pub auth_log: Arc<auth_log::AuthReplication>,
}

impl Ctx {
    /// With an auth store in memory only (tests, in-process servers).
    pub fn new(store: Arc<Store>, cfg: Config, wal: Option<Arc<crate::wal::Wal>>) -> Arc<Self> {
        let auth = AuthStore::new(cfg.bcrypt_cost, cfg.auth_token_ttl, None).expect("in memory");
        Self::with_auth(store, cfg, wal, Arc::new(auth), None)
    }

    /// `ids`: this member's and its cluster's IDs when they are not the flags'
    /// (a member that joined a running group learns them from a peer).
    pub fn with_auth(store: Arc<Store>, cfg: Config, wal: Option<Arc<crate::wal::Wal>>, auth: Arc<AuthStore>, ids: Option<(u64, u64)>) -> Arc<Self> {
        let (member_id, cluster_id) = if let Some(ids) = ids {
            ids
        } else if cfg.is_cluster() {
            // etcd's IDs for the same flags (replication/identity.rs).
            use crate::replication::identity;
            let ms = identity::members(&cfg.initial_cluster, &cfg.initial_cluster_token);
            let me = ms.iter().find(|m| m.0 == cfg.name).map_or(0, |m| m.2);
            (me, identity::cluster_id(&ms.iter().map(|m| m.2).collect::<Vec<_>>()))
        } else {
            (fnv(cfg.name.as_bytes()) | 1, fnv(format!("cluster/{}", cfg.name).as_bytes()) | 1)
        };
        if let Some(w) = &wal {
            // A failed log write raises NOSPACE for this member; the store clears
            // it when the writes succeed again (crate::wal::health).
            let s = store.clone();
            w.health.set_alarm_hook(Box::new(move |down| {
                if down {
                    s.alarms.raise_disk(member_id);
                } else {
                    s.alarms.clear_disk(member_id);
                }
            }));
        }
        let member = member_state::Member::new(cfg.advertise_peer_urls.clone());
        let auth_log = Arc::new(auth_log::AuthReplication::new(auth.clone(), member_id));
        Arc::new(Ctx {
            store, cfg, member_id, cluster_id, metrics: metrics::Metrics::default(), wal, auth, member,
            replica: std::sync::OnceLock::new(),
            peer_tls: std::sync::OnceLock::new(),
            auth_log,
        })
    }

    /// What the request brings to identify its caller: its `token` (or
    /// `authorization`, "Bearer " trimmed) metadata and, with
    /// --client-cert-auth, its verified certificate's common name.
    pub fn creds<T>(&self, r: &tonic::Request<T>) -> Creds {
        let md = r.metadata();
        let token = md
            .get("token")
            .or_else(|| md.get("authorization"))
            .and_then(|v| v.to_str().ok())
            .map(|t| t.strip_prefix("Bearer ").unwrap_or(t).to_string());
        let cn = if self.cfg.client_cert_auth {
            r.extensions().get::<ClientCert>().and_then(|c| c.common_name.as_deref().map(str::to_string))
        } else {
            None
        };
        Creds { token, cn }
    }

    /// The hot path's form of `caller`: None while auth is off (one atomic
    /// load, nothing else); else the caller, or the refusal of its token.
    pub fn identify<T>(&self, r: &tonic::Request<T>) -> Option<Result<Option<AuthInfo>, tonic::Status>> {
        self.identify_with(|| self.creds(r))
    }

    /// `identify` with the credentials read by the caller (the lean transport
    /// reads them from the header block itself); `creds` is called only while
    /// auth is on.
    pub fn identify_with(&self, creds: impl FnOnce() -> Creds) -> Option<Result<Option<AuthInfo>, tonic::Status>> {
        if !self.auth.enabled() {
            return None;
        }
        Some(self.auth.info(&creds()).map_err(Into::into))
    }

    /// etcd's AuthInfoFromCtx: who the request runs as. Nobody while auth is off
    /// (one atomic load); an invalid or expired token is refused.
    pub fn caller<T>(&self, r: &tonic::Request<T>) -> Result<Option<AuthInfo>, tonic::Status> {
        if !self.auth.enabled() {
            return Ok(None);
        }
        Ok(self.auth.info(&self.creds(r))?)
    }

    pub fn header(&self, rev: i64) -> Option<PbResponseHeader> {
        let raft_term = self.replica.get().map_or(2, |r| r.term());
        Some(PbResponseHeader { cluster_id: self.cluster_id, member_id: self.member_id, revision: rev, raft_term })
    }

    /// A replicated member that must not take a write itself now (it does not
    /// lead, or its leadership is not yet writable): writes go through the
    /// routes, which forward them (forward.rs). One load; false for a single member.
    pub fn forwards_writes(&self) -> bool {
        self.replica.get().is_some_and(|r| !r.writable())
    }

    /// Before a linearizable read (`serializable` false) on a replicated member:
    /// waits until this member has published every write acknowledged before
    /// the call (raft's ReadIndex, then the revision it names). A learner
    /// refuses, as etcd's. Nothing to wait for on a single member.
    pub async fn linearizable(&self, serializable: bool) -> Result<(), tonic::Status> {
        let Some(r) = self.replica.get() else { return Ok(()) };
        if serializable {
            return Ok(());
        }
        if r.is_learner() {
            return Err(tonic::Status::failed_precondition("etcdserver: rpc not supported for learner"));
        }
        let deadline = tokio::time::Instant::now() + forward::REQUEST_TIMEOUT;
        loop {
            // Raft drops a ReadIndex when leadership moves meanwhile: asked again
            // of the next leader, until the request's time is up.
            match tokio::time::timeout_at(deadline, r.read_index()).await {
                Ok(Ok(rev)) => {
                    return tokio::time::timeout_at(deadline, self.store.wait_visible(rev)).await.map_err(|_| StoreError::Timeout.into())
                }
                Ok(Err(_)) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
                Err(_) => return Err(StoreError::Timeout.into()),
            }
        }
    }

    /// Before answering a write at `rev` (or anything that read the committed
    /// state at `rev`): waits until `rev` is published, i.e. it and every
    /// revision before it are durable (mvcc::visibility). One atomic load when
    /// it already is (memory-only prefixes, nothing pending).
    pub async fn synced(&self, rev: i64) {
        self.store.wait_visible(rev).await;
    }

    /// `synced`, for a request with the caller's deadline `dl`: past it, the
    /// answer is DeadlineExceeded (the write stays committed and becomes
    /// durable, as a proposal that timed out in etcd may still be applied).
    pub async fn synced_by(&self, rev: i64, dl: deadline::Deadline) -> Result<(), tonic::Status> {
        if self.store.current_rev() >= rev {
            return Ok(());
        }
        dl.bound(self.synced(rev)).await
    }

    /// etcd's quota check in front of Put, Txn and LeaseGrant (v3rpc/quota.go),
    /// before any other check of the request: one that costs something and does
    /// not fit raises NOSPACE for this member and is refused.
    pub fn check_quota(&self, cost: i64) -> Result<(), tonic::Status> {
        if self.store.quota_available(cost) {
            return Ok(());
        }
        match self.replica.get() {
            // In a group the alarm goes through the log, so every member holds
            // it (etcd's member proposes its NOSPACE); proposed once, until it is applied.
            Some(r) => {
                if !self.store.alarms.get(ALARM_NOSPACE).contains(&(self.member_id, ALARM_NOSPACE)) {
                    r.propose_alarm(true, self.member_id, ALARM_NOSPACE, false);
                }
            }
            None => {
                self.activate_alarm(self.member_id, ALARM_NOSPACE);
            }
        }
        Err(StoreError::NoSpace.into())
    }

    /// etcd's appliers in front of the backend (etcdserver/apply): with CORRUPT
    /// raised every write is refused; with NOSPACE raised Put, LeaseGrant and a
    /// Txn that costs something, whether or not the size is back under the quota.
    /// Runs where etcd applies: after the request's own checks and the proposal
    /// size limit, before any check against the store's state.
    pub fn check_alarms(&self, w: Write) -> Result<(), tonic::Status> {
        let a = &self.store.alarms;
        if a.corrupt() {
            return Err(StoreError::Corrupt.into());
        }
        let capped = match w {
            Write::Put | Write::LeaseGrant => true,
            Write::Txn { cost } => cost > 0,
            Write::Delete | Write::Compact | Write::LeaseRevoke => false,
        };
        if capped && a.capped() {
            return Err(StoreError::NoSpace.into());
        }
        Ok(())
    }

    /// After `check_alarms`: while a log write has failed (the disk's NOSPACE),
    /// a write that would go to a log (`durable`: a durable prefix's keys, a
    /// lease, a compaction) is refused as NOSPACE refuses; memory-only
    /// prefixes' writes pass. Every write is refused when too few revisions
    /// are left reserved on disk (crate::wal::FLOOR_MARGIN).
    pub fn check_disk(&self, durable: impl FnOnce(&crate::wal::Wal) -> bool) -> Result<(), tonic::Status> {
        match &self.wal {
            Some(w) if w.refuses(durable, self.store.committed_rev()) => Err(StoreError::NoSpace.into()),
            _ => Ok(()),
        }
    }

    /// Before answering a lease or compaction write: waits for its record if
    /// writing it failed (at once otherwise), at most until the deadline `dl`.
    pub async fn settled(&self, dl: deadline::Deadline) -> Result<(), tonic::Status> {
        match &self.wal {
            Some(w) if w.health.down() => dl.bound(w.settled()).await,
            _ => Ok(()),
        }
    }

    /// Raises an alarm (the Alarm RPC's ACTIVATE, or the quota check); logs it
    /// when it is new, as etcd does.
    pub fn activate_alarm(&self, member: u64, t: i32) -> Option<(u64, i32)> {
        let (m, new) = self.store.alarms.activate(member, t)?;
        if new {
            let (size, quota) = (self.store.size_bytes(), self.store.quota());
            eprintln!(
                "meganode-store: alarm raised: {} from member {member:x} (accounted size {} of quota {})",
                crate::quota::alarm_name(t), crate::quota::human(size.max(0) as u64), crate::quota::human(quota.max(0) as u64)
            );
        }
        Some(m)
    }

    /// Disarms an alarm (the Alarm RPC's DEACTIVATE); logs it.
    pub fn deactivate_alarm(&self, member: u64, t: i32) -> Option<(u64, i32)> {
        let m = self.store.alarms.deactivate(member, t)?;
        eprintln!("meganode-store: alarm disarmed: {} from member {member:x}", crate::quota::alarm_name(t));
        Some(m)
    }

    /// Fills in the member fields of a header the engine produced.
    pub fn fill(&self, h: &mut Option<PbResponseHeader>) {
        let rev = h.as_ref().map_or(self.store.current_rev(), |h| h.revision);
        *h = self.header(rev);
    }
}

/// A write as etcd's alarm appliers tell them apart (Ctx::check_alarms).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    Put,
    /// A Txn that is not read-only, with its quota cost (crate::quota::cost_txn).
    Txn { cost: i64 },
    Delete,
    Compact,
    LeaseGrant,
    LeaseRevoke,
}

fn fnv(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for &x in b {
        h ^= x as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}
