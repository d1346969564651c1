//! meganode-store: an etcd v3 API server that keeps everything in memory.
//!
//! Public nouns first: [`Store`] (the engine), [`config::Config`] (flags),
//! [`server`] (the gRPC services); internals live below them in `mvcc/`.
pub mod auth;
pub mod auto_tls;
pub mod background;
pub mod config;
pub mod errors;
pub mod histogram;
pub mod lease;
pub mod mvcc;
pub mod quota;
pub mod replication;
pub mod server;
pub mod snapshot;
pub mod state_file;
pub mod transport;
pub mod wal;

pub use mvcc::Store;
