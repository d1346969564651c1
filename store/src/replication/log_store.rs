//! The raft log a member keeps (raft-rs's `Storage`): raft-rs's `MemStorage`,
//! whose snapshots carry what a member needs besides the store's state — the
//! members' names and URLs, and where to fetch that state (docs/design.md §10
//! "Snapshots and the log"). Raft asks for a snapshot only on a leader sending
//! one to a member behind its log's first entry.
use std::sync::Arc;

use parking_lot::Mutex;
use raft::prelude::{Entry, Snapshot};
use raft::storage::MemStorage;
use raft::{GetEntriesContext, RaftState, Storage};

#[derive(Clone)]
pub struct LogStore {
    pub mem: MemStorage,
    /// The data every snapshot made here carries (`members::encode_members`),
    /// kept current by the driver as membership and attributes are applied.
    pub snapshot_data: Arc<Mutex<Vec<u8>>>,
}

impl LogStore {
    pub fn new(mem: MemStorage) -> LogStore {
        LogStore { mem, snapshot_data: Arc::default() }
    }
}

impl Storage for LogStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        self.mem.initial_state()
    }

    fn entries(&self, low: u64, high: u64, max_size: impl Into<Option<u64>>, context: GetEntriesContext) -> raft::Result<Vec<Entry>> {
        self.mem.entries(low, high, max_size, context)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        self.mem.term(idx)
    }

    fn first_index(&self) -> raft::Result<u64> {
        self.mem.first_index()
    }

    fn last_index(&self) -> raft::Result<u64> {
        self.mem.last_index()
    }

    /// `MemStorage`'s snapshot (the commit index, its term and the membership;
    /// every committed entry is applied by then, the driver applies them in the
    /// Ready that commits them) with this member's snapshot data.
    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        let mut s = self.mem.snapshot(request_index, to)?;
        s.data = self.snapshot_data.lock().clone().into();
        Ok(s)
    }
}
