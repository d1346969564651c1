//! gRPC services over the store. Each file is one etcd service, except
//! `concurrency` (etcd's client-side recipes, which Lock and Election run) and
//! `routes` (serving a service without a generated server).
pub mod cluster;
pub mod concurrency;
pub mod election;
pub mod health;
pub mod kv;
pub mod lease;
pub mod lock;
pub mod maintenance;
pub mod metrics;
pub mod routes;
pub mod txn_codec;
pub mod watch;

use std::sync::Arc;

use etcd_client::proto::PbResponseHeader;

use crate::config::Config;
use crate::mvcc::Store;

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

pub struct Ctx {
    pub store: Arc<Store>,
    pub cfg: Config,
    pub member_id: u64,
    pub cluster_id: u64,
    pub metrics: metrics::Metrics,
    /// The write-ahead log, to wait for fsync-mode prefixes before answering.
    pub wal: Option<Arc<crate::wal::Wal>>,
}

impl Ctx {
    pub fn new(store: Arc<Store>, cfg: Config, wal: Option<Arc<crate::wal::Wal>>) -> Arc<Self> {
        let member_id = fnv(cfg.name.as_bytes()) | 1;
        let cluster_id = fnv(format!("cluster/{}", cfg.name).as_bytes()) | 1;
        Arc::new(Ctx { store, cfg, member_id, cluster_id, metrics: metrics::Metrics::default(), wal })
    }

    pub fn header(&self, rev: i64) -> Option<PbResponseHeader> {
        Some(PbResponseHeader { cluster_id: self.cluster_id, member_id: self.member_id, revision: rev, raft_term: 2 })
    }

    /// Before answering a write at `rev`: waits for the fsync that covers it
    /// when it touched an fsync-mode prefix (other writes return at once).
    pub async fn synced(&self, rev: i64) {
        if let Some(w) = &self.wal {
            if w.needs_sync(rev) {
                w.wait_synced(rev).await;
            }
        }
    }

    /// Fills in the member fields of a header the engine produced.
    pub fn fill(&self, h: &mut Option<PbResponseHeader>) {
        let rev = h.as_ref().map_or(self.store.current_rev(), |h| h.revision);
        *h = self.header(rev);
    }
}

fn fnv(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for &x in b {
        h ^= x as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}
