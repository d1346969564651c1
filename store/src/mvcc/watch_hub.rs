//! The recent-event log every watch stream reads from. Writers append one batch
//! per revision (in revision order, under the sequencer) and never wait for a
//! watcher: the log is a bounded ring, and a watcher that falls off its start
//! catches up from the key histories instead (etcd's "unsynced" watchers).
use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::watch;

use super::key_history::Version;

#[derive(Clone, Debug)]
pub struct Event {
    pub key: Bytes,
    /// A tombstone (version 0) for deletions.
    pub kv: Version,
    pub prev: Option<Version>,
}

impl Event {
    pub fn is_delete(&self) -> bool {
        self.kv.is_tombstone()
    }
}

pub struct RevBatch {
    pub rev: i64,
    pub events: Vec<Event>,
}

/// Bounds of the ring; a watcher behind it reads key histories instead.
const MAX_EVENTS: usize = 200_000;
const MAX_BYTES: usize = 64 << 20;

pub struct WatchHub {
    log: Mutex<Log>,
    cap: usize,
    tx: watch::Sender<i64>,
}

struct Log {
    batches: VecDeque<Arc<RevBatch>>,
    /// Events and value bytes the ring holds: it is bounded by these too, not
    /// only by revisions, because a batch can hold many events and the ring
    /// keeps their values alive after compaction freed them from history.
    events: usize,
    bytes: usize,
    /// Revision of batches[0], or of the next batch when the log is empty.
    start: i64,
}

pub enum LogRead {
    /// Batches from the requested revision on (possibly none yet).
    Batches(Vec<Arc<RevBatch>>),
    /// The requested revision is older than the log: read history instead.
    Gap,
}

fn batch_size(events: &[Event]) -> (usize, usize) {
    let bytes = events.iter().map(|e| e.key.len() + e.kv.value.len() + e.prev.as_ref().map_or(0, |p| p.value.len()) + 96).sum();
    (events.len(), bytes)
}

impl WatchHub {
    pub fn new(cap: usize, rev: i64) -> Self {
        let (tx, _) = watch::channel(rev);
        WatchHub { log: Mutex::new(Log { batches: VecDeque::with_capacity(cap.min(1 << 16)), events: 0, bytes: 0, start: rev + 1 }), cap, tx }
    }

    /// Appends the events of revision `rev`. Called in revision order.
    pub fn publish(&self, rev: i64, events: Vec<Event>) {
        {
            let (n, b) = batch_size(&events);
            let mut log = self.log.lock();
            log.events += n;
            log.bytes += b;
            log.batches.push_back(Arc::new(RevBatch { rev, events }));
            while log.batches.len() > 1 && (log.batches.len() > self.cap || log.events > MAX_EVENTS || log.bytes > MAX_BYTES) {
                if let Some(old) = log.batches.pop_front() {
                    let (n, b) = batch_size(&old.events);
                    log.events -= n;
                    log.bytes -= b;
                }
            }
            log.start = log.batches[0].rev;
        }
        self.tx.send_replace(rev);
    }

    /// Moves the log past revisions that never reach it (recovery, restore):
    /// watchers asking for them read the key histories.
    pub fn reset(&self, rev: i64) {
        let mut log = self.log.lock();
        log.batches.clear();
        log.events = 0;
        log.bytes = 0;
        log.start = rev + 1;
        drop(log);
        self.tx.send_replace(rev);
    }

    pub fn subscribe(&self) -> watch::Receiver<i64> {
        self.tx.subscribe()
    }

    /// Batches with revision >= `from`, at most `max` of them.
    pub fn read_from(&self, from: i64, max: usize) -> LogRead {
        let log = self.log.lock();
        if from < log.start {
            return LogRead::Gap;
        }
        let skip = (from - log.start) as usize;
        LogRead::Batches(log.batches.iter().skip(skip).take(max).cloned().collect())
    }

    /// Oldest revision the log still holds.
    pub fn oldest(&self) -> Option<i64> {
        self.log.lock().batches.front().map(|b| b.rev)
    }
}
