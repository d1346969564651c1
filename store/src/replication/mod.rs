//! Replication: a member of a Raft group (docs/design.md §10). Consensus is
//! raft-rs's (`raft`, TiKV's port of etcd's raft), kept apart from the store
//! and the wire: `node` drives a `RawNode` on a thread of its own, `entry` is
//! the log entry format (the store's WAL records of one revision), `transport`
//! the trait messages leave through (`peer` over TCP between processes, TLS
//! for https:// peer URLs in `peer_tls`),
//! `identity` etcd's member and cluster IDs. The store side (applying a committed
//! revision, the publication watermark) is `mvcc::kvstore_replica`.
pub mod disk_log;
pub mod entry;
pub mod identity;
pub mod log_store;
pub mod members;
pub mod node;
pub mod peer;
pub mod peer_tls;
pub mod transport;

#[cfg(test)]
mod tests;

pub use members::MemberInfo;
pub use node::{AuthLog, Counters, ForwardedCall, Input, Membership, Replica, ReplicaConfig, SnapshotFetcher, Status};
pub use transport::{MemNetwork, Transport};
