//! Multi-version key-value engine: per-key revision histories, one ordered
//! index per resource prefix, one global revision, the watch log.
pub mod hash;
pub mod key_history;
pub mod kvstore;
pub mod kvstore_range;
pub mod kvstore_replica;
pub mod kvstore_stream;
pub mod kvstore_txn;
pub mod locked;
pub mod pack_stats;
pub mod packer;
pub mod page_counts;
pub mod shard;
pub mod spill;
pub mod value;
pub mod visibility;
pub mod watch_hub;
pub mod watch_catchup;

pub use kvstore::Store;
