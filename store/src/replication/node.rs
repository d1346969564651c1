//! One member's raft driver: a thread owning a raft-rs `RawNode`, fed by an
//! inbox (peer messages, the store's proposals, stop) and a tick, handling each
//! Ready in raft-rs's order — send, persist, apply, advance.
//!
//! The leader executes a write once, as a single store does, and proposes its
//! records (`ReplicationSink::committed`, under the store's sequencer, so log
//! order is revision order); the revision is published — its answer sent, its
//! watch events delivered — when the entry commits (`Store::replicated_to`).
//! Other members apply each committed entry through the store's write batch
//! (`Store::apply_replicated`). A committed entry that is neither this
//! member's own proposal nor the next revision it lacks means its state left
//! the group's: the driver stops applying and reports it (`Status::error`);
//! rolling such writes back is planned (§10).
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use raft::prelude::{ConfChange, ConfChangeType, ConfChangeV2, ConfState, Entry, EntryType, Message, MessageType};
use tokio::sync::oneshot;
use raft::storage::MemStorage;
use raft::{RawNode, SnapshotStatus, StateRole};

use super::disk_log::{self, DiskConfig, DiskLog};
use super::entry;
use super::log_store::LogStore;
use super::members::{self, MemberInfo};
use super::transport::Transport;
use crate::histogram::Histogram;
use crate::mvcc::kvstore::{CommitSink, Held};
use crate::mvcc::watch_hub::Event;
use crate::mvcc::Store;

/// What reaches a member's driver.
pub enum Input {
    /// A revision the store committed here, as its log entry.
    Propose { rev: i64, data: Vec<u8> },
    /// History compacted here (on the leader: proposed).
    ProposeCompact(i64),
    /// A lease granted or revoked here; `done` hears when the group holds it.
    ProposeLease { data: Vec<u8>, done: Option<std::sync::mpsc::Sender<()>> },
    /// A message from a peer.
    Raft(Message),
    /// A linearizable read: answered with the revision a read must wait for
    /// (raft's ReadIndex, `Replica::read_index`).
    ReadIndex(oneshot::Sender<i64>),
    /// A membership change, answered with the membership once it is applied here.
    ChangeMembers(ConfChange, oneshot::Sender<Result<Membership, String>>),
    /// etcd's MemberUpdate: a member's new peer URLs, through the log.
    UpdatePeerUrls(u64, Vec<String>, oneshot::Sender<Result<Membership, String>>),
    /// etcd's MoveLeader: hand leadership to this voter.
    TransferLeader(u64),
    /// An auth change to propose (`Replica::propose_auth`), answered once proposed.
    ProposeAuth(Vec<u8>, oneshot::Sender<Result<(), String>>),
    /// An alarm change to propose (`Replica::propose_alarm`); `done` hears, once
    /// this member applied it, whether it changed the alarm set.
    ProposeAlarm(Vec<u8>, Option<oneshot::Sender<bool>>),
    /// A peer's connection to this member closed between frames (its process
    /// ended, or it reconnects).
    PeerClosed(u64),
    /// A peer's connection to this member is up: it opened, or an idle one
    /// carried its keepalive (peer.rs). Every pair of members keeps one, so a
    /// new leader knows how long each voter has been connected (etcd's
    /// ActiveSince) without waiting to hear raft messages from it.
    PeerAlive(u64),
    Stop,
}

#[derive(Clone, Debug)]
pub struct ReplicaConfig {
    /// This member's raft ID (non-zero).
    pub id: u64,
    /// The voting members of a new group, this one included: each founding
    /// member starts with the same log, one AddNode entry per voter (as etcd
    /// bootstraps), so a member added later learns the whole membership from
    /// the log. Empty for a member joining a running group (etcd's
    /// --initial-cluster-state existing) or rejoining it.
    pub voters: Vec<u64>,
    /// One raft tick; etcd's --heartbeat-interval is one tick, its
    /// --election-timeout `election_ticks` of them (defaults 100 ms and 10).
    pub tick: Duration,
    pub election_ticks: usize,
    /// A member that comes back without the entries it acknowledged (no disk,
    /// or a lost data dir): it neither votes nor campaigns until it has heard
    /// from a leader and applied up to the commit index it learned then — with
    /// its vote it could elect a leader missing committed entries (§10).
    pub rejoining: bool,
    /// The founding voters' names and peer URLs (their AddNode entries carry
    /// them, as etcd's do); a voter missing here is added without.
    pub founders: Vec<MemberInfo>,
    /// This member's name and client URLs, published to the group once it has
    /// a leader (members.rs); not published when empty.
    pub me: MemberInfo,
    /// Committed entries kept in the log behind the applied index (etcd keeps
    /// 5,000 after a snapshot for slow followers); older ones are dropped once
    /// every member that answers has them, and a member behind gets a snapshot.
    pub log_keep: u64,
    /// How a member that must take a snapshot gets the store's state from the
    /// member that sent it (its peer listener's stream, `MGNSNAP2`), given the
    /// snapshot's raft index: a sender that has not applied that far refuses.
    /// Without one a snapshot stops the member.
    pub fetch_snapshot: Option<SnapshotFetcher>,
    /// The auth store's side of the log (its entries, its state in snapshots).
    pub auth: Option<Arc<dyn AuthLog>>,
    /// The raft log on disk (groups with `buffered` or `fsync` prefixes): a
    /// member that finds one restarts from it instead of rejoining empty.
    pub disk: Option<DiskConfig>,
}

/// State beside the store that changes only through the log (the auth store:
/// users, roles, auth on or off, simple tokens), its entries opaque here.
/// Every member applies every entry in log order; a snapshot carries the
/// whole state, which holds the entries up to some index.
pub trait AuthLog: Send + Sync {
    /// Applies the entry at raft index `index` (one the state already holds,
    /// at or below the index of a restored snapshot, is passed over).
    fn apply(&self, index: u64, body: &[u8]);
    /// The state for a snapshot this member streams.
    fn snapshot(&self) -> Vec<u8>;
    /// Takes a snapshot's state.
    fn restore(&self, state: &[u8]) -> Result<(), String>;
}

impl std::fmt::Debug for dyn AuthLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuthLog")
    }
}

/// Opens the stream of the store's state (`crate::snapshot::write_stream`)
/// from the member named.
#[derive(Clone)]
pub struct SnapshotFetcher(pub Arc<dyn Fn(&MemberInfo, u64) -> Result<Box<dyn std::io::Read + Send>, String> + Send + Sync>);

impl std::fmt::Debug for SnapshotFetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SnapshotFetcher")
    }
}

impl ReplicaConfig {
    pub fn new(id: u64, voters: Vec<u64>) -> Self {
        ReplicaConfig {
            id,
            voters,
            tick: Duration::from_millis(100),
            election_ticks: 10,
            rejoining: false,
            founders: Vec::new(),
            me: MemberInfo { id, ..Default::default() },
            log_keep: 5_000,
            fetch_snapshot: None,
            auth: None,
            disk: None,
        }
    }
}

/// What a member reports of itself (etcd's Status: leader, raftTerm, raftIndex,
/// raftAppliedIndex).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Status {
    pub id: u64,
    /// 0 while it knows no leader.
    pub leader: u64,
    pub term: u64,
    pub commit_index: u64,
    pub applied_index: u64,
    /// The first entry this member's raft log still holds (older ones are
    /// covered by snapshots).
    pub log_first_index: u64,
    /// Still catching up after rejoining (`ReplicaConfig::rejoining`): it does not vote.
    pub catching_up: bool,
    /// It leads and has applied every entry before its term's first: the store
    /// may take writes (before that a write would get a revision an earlier
    /// leader's committed entry already has).
    pub writable: bool,
    /// The membership as this member has applied it.
    pub members: Membership,
    /// Why it stopped applying, if it did.
    pub error: Option<String>,
}

/// `Replica::counters`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    pub leader_changes: u64,
    pub pending: u64,
    pub failed: u64,
}

impl Status {
    /// Whether this member is a learner of the membership it applied.
    pub fn is_learner(&self) -> bool {
        self.members.learners.contains(&self.id)
    }
}

/// Voters and learners, sorted.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Membership {
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
}

impl Membership {
    fn of(cs: &ConfState) -> Membership {
        let mut m = Membership { voters: cs.voters.clone(), learners: cs.learners.clone() };
        m.voters.sort_unstable();
        m.learners.sort_unstable();
        m
    }
}

#[derive(Default)]
struct Shared {
    /// Calls a follower forwarded that this leader is running: their
    /// followers wait to apply the write before answering, so the commit
    /// index is told at once while any runs (`Driver::tell_commit`).
    forwarded: AtomicU64,
    leader: AtomicU64,
    term: AtomicU64,
    commit: AtomicU64,
    applied: AtomicU64,
    log_first: AtomicU64,
    catching_up: AtomicBool,
    writable: AtomicBool,
    /// This member is a learner of the membership it applied (one load on every
    /// call a learner refuses).
    learner: AtomicBool,
    members: Mutex<Membership>,
    /// Names and URLs of the members, by ID (members.rs).
    info: Mutex<BTreeMap<u64, MemberInfo>>,
    /// Since when each peer has been heard from without a gap of an election
    /// timeout (etcd's transport ActiveSince), refreshed every tick.
    connected: Mutex<HashMap<u64, Instant>>,
    error: Mutex<Option<String>>,
    /// etcd's raft metrics (`Replica::counters`).
    leader_changes: AtomicU64,
    pending: AtomicU64,
    failed: AtomicU64,
    /// Heartbeat round trips to each peer, measured on the leader.
    round_trips: Mutex<BTreeMap<u64, Arc<Histogram>>>,
    /// Members removed by a change this member applied (etcd's removed
    /// members: their peer connections are refused); `any_removed` spares the
    /// lock on every peer frame while there are none.
    removed: Mutex<std::collections::HashSet<u64>>,
    any_removed: AtomicBool,
}

impl Shared {
    fn set_members(&self, me: u64, m: Membership) {
        self.learner.store(m.learners.contains(&me), Ordering::Release);
        *self.members.lock() = m;
    }

    /// Records why this member stopped taking part (the first reason, logged
    /// once): a state that left the group's, or a panic inside raft-rs.
    fn stop(&self, id: u64, why: String) {
        let mut e = self.error.lock();
        if e.is_none() {
            eprintln!("meganode-store: replication stopped on member {id:x}: {why}");
            *e = Some(why);
        }
        self.writable.store(false, Ordering::Release);
    }
}

/// A running member: its driver thread and the inbox that feeds it.
pub struct Replica {
    id: u64,
    inbox: Sender<Input>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Replica {
    /// Joins `store` to a new group as member `cfg.id`: from now on its
    /// revisions are published only once the group commits them, and the writes
    /// it commits are proposed. Messages leave through `transport`; peers'
    /// messages come in through `inbox()`.
    pub fn start(mut cfg: ReplicaConfig, store: Arc<Store>, transport: Arc<dyn Transport>) -> Result<Replica, String> {
        let (mut disk, recovered) = match &cfg.disk {
            Some(d) => {
                let (log, rec) = DiskLog::open(d.clone())?;
                (Some(log), rec)
            }
            None => (None, None),
        };
        let mut known = Vec::new();
        let mut snapshot_rev = None;
        let (mem, applied) = match recovered {
            // Its log and votes survived: it is the member it was, and votes.
            Some(rec) => {
                cfg.rejoining = false;
                let (mem, applied, rev, infos) = recover(&cfg, &store, rec)?;
                snapshot_rev = rev;
                known = infos;
                (mem, applied)
            }
            None => {
                let (mem, applied) = bootstrap(&cfg)?;
                if let Some(d) = &mut disk {
                    // A founding member's first entries (a joining or rejoining one has none).
                    let last = raft::Storage::last_index(&mem).map_err(|e| format!("raft: {e}"))?;
                    let entries = if last == 0 { Vec::new() } else { raft::Storage::entries(&mem, 1, last + 1, None, raft::GetEntriesContext::empty(false)).map_err(|e| format!("raft: {e}"))? };
                    let hs = raft::Storage::initial_state(&mem).map_err(|e| format!("raft: {e}"))?.hard_state;
                    d.append(&entries, Some(&hs))?;
                }
                (mem, applied)
            }
        };
        let storage = LogStore::new(mem);
        let raft_cfg = raft::Config {
            id: cfg.id,
            applied,
            election_tick: cfg.election_ticks,
            heartbeat_tick: 1,
            // etcd's: a member that rejoins does not disrupt a working leader, and a
            // leader cut off from its quorum steps down.
            pre_vote: true,
            check_quorum: true,
            max_size_per_msg: 1 << 20,
            max_inflight_msgs: 256,
            // A new commit index rides on the next append (or a heartbeat)
            // instead of an append of its own to every follower, whose answers
            // each wake this thread again: the driver tells it within
            // COMMIT_TELL if no append carried it (`tell_commit`).
            skip_bcast_commit: true,
            // The proposals one Ready takes go to each follower as one append
            // (raft-rs otherwise makes an append per proposal): one frame, one
            // step and one acknowledgement per follower for the batch instead
            // of one per write.
            batch_append: true,
            ..Default::default()
        };
        raft_cfg.validate().map_err(|e| format!("raft config: {e}"))?;
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let node = RawNode::new(&raft_cfg, storage, &logger).map_err(|e| format!("raft: {e}"))?;
        let (inbox, rx) = mpsc::channel();
        let shared = Arc::new(Shared::default());
        store.hold_for_replication();
        let applying_compaction = Arc::new(std::sync::atomic::AtomicI64::new(0));
        store.set_sink(Arc::new(ReplicationSink { inbox: inbox.clone(), applying_compaction: applying_compaction.clone() }));
        shared.catching_up.store(cfg.rejoining, Ordering::Release);
        let store_rev = store.committed_rev();
        let initial = raft::Storage::initial_state(&node.raft.raft_log.store).map_err(|e| format!("raft: {e}"))?;
        shared.set_members(cfg.id, Membership::of(&initial.conf_state));
        {
            let mut info = shared.info.lock();
            for id in initial.conf_state.voters.iter().chain(&initial.conf_state.learners) {
                let known = cfg.founders.iter().find(|f| f.id == *id).cloned();
                info.insert(*id, known.unwrap_or(MemberInfo { id: *id, ..Default::default() }));
            }
            // A member that starts without its log (rejoining) still knows the
            // founders from its flags: how else would it answer their leader.
            for f in &cfg.founders {
                info.entry(f.id).or_insert_with(|| f.clone());
            }
            // The members its snapshot on disk named, with their URLs.
            for m in known {
                if info.contains_key(&m.id) {
                    info.insert(m.id, m);
                }
            }
            transport.set_peers(&info.values().cloned().collect::<Vec<_>>());
        }
        let mut driver = Driver {
            node,
            store,
            transport,
            shared: shared.clone(),
            proposed: HashMap::new(),
            proposed_at: HashMap::new(),
            led: false,
            term_start: 0,
            tick: cfg.tick,
            applied_rev: store_rev,
            reads: HashMap::new(),
            next_read: 0,
            read_leader: 0,
            confirmed: Vec::new(),
            catching_up: cfg.rejoining.then_some(0),
            pending_change: None,
            heard: HashMap::new(),
            was_member: initial.conf_state.voters.contains(&cfg.id) || initial.conf_state.learners.contains(&cfg.id),
            waiting_reads: Vec::new(),
            me: cfg.me.clone(),
            next_publish: Instant::now(),
            next_self_report: Instant::now(),
            log_keep: cfg.log_keep.max(1),
            fetch_snapshot: cfg.fetch_snapshot.clone(),
            auth: cfg.auth.clone(),
            snapshot_rev,
            snapshots_sent: HashMap::new(),
            snapshot_data_stale: true,
            applying_compaction,
            early_campaign: None,
            heartbeats_sent: HashMap::new(),
            commit_told: HashMap::new(),
            commit_untold_since: None,
            disk,
            disk_saved: Arc::default(),
        };
        let thread = std::thread::Builder::new()
            .name(format!("raft-{}", cfg.id))
            .spawn(move || {
                // raft-rs stops on what it finds impossible (a commit index past the
                // log, etcd's "tocommit out of range") with a panic: report it.
                let (shared, id) = (driver.shared.clone(), cfg.id);
                if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| driver.run(rx))) {
                    let why = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
                    shared.stop(id, format!("the raft driver stopped: {why}"));
                }
            })
            .map_err(|e| format!("raft thread: {e}"))?;
        Ok(Replica { id: cfg.id, inbox, shared, thread: Some(thread) })
    }

    /// Where this member's peer messages go (a transport's receiving end).
    pub fn inbox(&self) -> Sender<Input> {
        self.inbox.clone()
    }

    /// etcd's raft counters: leader changes seen, proposals pending (made here,
    /// not yet applied) and failed (made here and never committed: dropped at
    /// a leader change, or refused).
    pub fn counters(&self) -> Counters {
        let s = &self.shared;
        Counters {
            leader_changes: s.leader_changes.load(Ordering::Relaxed),
            pending: s.pending.load(Ordering::Relaxed),
            failed: s.failed.load(Ordering::Relaxed),
        }
    }

    /// Whether member `id` was removed from the group (by a change applied here).
    pub fn was_removed(&self, id: u64) -> bool {
        self.shared.any_removed.load(Ordering::Acquire) && self.shared.removed.lock().contains(&id)
    }

    /// Heartbeat round trips to each peer (etcd's peer round-trip time),
    /// measured while this member leads.
    pub fn round_trips(&self) -> Vec<(u64, Arc<Histogram>)> {
        self.shared.round_trips.lock().iter().map(|(id, h)| (*id, h.clone())).collect()
    }

    pub fn status(&self) -> Status {
        let s = &self.shared;
        Status {
            id: self.id,
            leader: s.leader.load(Ordering::Acquire),
            term: s.term.load(Ordering::Acquire),
            commit_index: s.commit.load(Ordering::Acquire),
            applied_index: s.applied.load(Ordering::Acquire),
            log_first_index: s.log_first.load(Ordering::Acquire),
            catching_up: s.catching_up.load(Ordering::Acquire),
            writable: s.writable.load(Ordering::Acquire),
            members: s.members.lock().clone(),
            error: s.error.lock().clone(),
        }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// The term (one load: every response header carries it).
    pub fn term(&self) -> u64 {
        self.shared.term.load(Ordering::Acquire)
    }

    /// The leader this member knows, 0 for none (one load).
    pub fn leader(&self) -> u64 {
        self.shared.leader.load(Ordering::Acquire)
    }

    /// Whether member `id` has been heard from without a gap for at least `d`
    /// (this member always), as etcd's transport reports it for its
    /// reconfiguration checks (ActiveSince).
    pub fn connected_for(&self, id: u64, d: Duration) -> bool {
        id == self.id || self.shared.connected.lock().get(&id).is_some_and(|since| since.elapsed() >= d)
    }

    /// Whether member `id` is heard from now.
    pub fn connected(&self, id: u64) -> bool {
        self.connected_for(id, Duration::ZERO)
    }

    /// Whether this member is a learner (one load): `Status::is_learner`.
    pub fn is_learner(&self) -> bool {
        self.shared.learner.load(Ordering::Acquire)
    }

    /// Marks a call another member forwarded as running here until the guard
    /// drops: the followers hear each commit index at once meanwhile.
    pub fn forwarded_call(&self) -> ForwardedCall {
        self.shared.forwarded.fetch_add(1, Ordering::AcqRel);
        ForwardedCall(self.shared.clone())
    }

    /// Whether the store may take a write here now (one load): `Status::writable`.
    pub fn writable(&self) -> bool {
        self.shared.writable.load(Ordering::Acquire)
    }

    /// Whether this member stopped taking part, and why.
    pub fn error(&self) -> Option<String> {
        self.shared.error.lock().clone()
    }

    /// The members' names and URLs as this member has applied them, by ID.
    pub fn members(&self) -> Vec<MemberInfo> {
        self.shared.info.lock().values().cloned().collect()
    }

    /// A linearizable read's revision: once this member's store has published
    /// it, a read there sees every write acknowledged before the call. Raft's
    /// ReadIndex (`ReadOnlyOption::Safe`: the leader confirms with a quorum's
    /// heartbeats that it still leads; no clock is trusted), forwarded by raft
    /// from a follower. No answer (the sender dropped) when leadership changes
    /// meanwhile; without a leader, none at all: the caller bounds its wait.
    pub fn read_index(&self) -> oneshot::Receiver<i64> {
        let (tx, rx) = oneshot::channel();
        let _ = self.inbox.send(Input::ReadIndex(tx));
        rx
    }

    /// Proposes a membership change (on the leader; elsewhere answered with an
    /// error): resolved once the change is applied here.
    pub fn change_members(&self, cc: ConfChange) -> oneshot::Receiver<Result<Membership, String>> {
        let (tx, rx) = oneshot::channel();
        let _ = self.inbox.send(Input::ChangeMembers(cc, tx));
        rx
    }

    /// etcd's MemberAdd --learner, MemberPromote and MemberRemove.
    pub fn add_learner(&self, id: u64) -> oneshot::Receiver<Result<Membership, String>> {
        self.change_members(conf_change(ConfChangeType::AddLearnerNode, id))
    }

    /// MemberAdd of `m` (its name and peer URLs go with the change), as a learner or a voter.
    pub fn add_member(&self, m: &MemberInfo, learner: bool) -> oneshot::Receiver<Result<Membership, String>> {
        let t = if learner { ConfChangeType::AddLearnerNode } else { ConfChangeType::AddNode };
        let mut cc = conf_change(t, m.id);
        cc.context = members::encode_context(m).into();
        self.change_members(cc)
    }

    pub fn promote(&self, id: u64) -> oneshot::Receiver<Result<Membership, String>> {
        self.change_members(conf_change(ConfChangeType::AddNode, id))
    }

    pub fn remove(&self, id: u64) -> oneshot::Receiver<Result<Membership, String>> {
        self.change_members(conf_change(ConfChangeType::RemoveNode, id))
    }

    /// etcd's MemberUpdate (on the leader): member `id`'s peer URLs become `urls`
    /// on every member; resolved once applied here.
    pub fn update_peer_urls(&self, id: u64, urls: Vec<String>) -> oneshot::Receiver<Result<Membership, String>> {
        let (tx, rx) = oneshot::channel();
        let _ = self.inbox.send(Input::UpdatePeerUrls(id, urls, tx));
        rx
    }

    /// Proposes raising (`raise`) or disarming alarm `alarm` of `member`
    /// through the log; with `wait`, the answer says once this member applied
    /// it whether it changed the set (for a raise: that it is raised). A
    /// member that does not lead drops it (the receiver then errs).
    pub fn propose_alarm(&self, raise: bool, member: u64, alarm: i32, wait: bool) -> Option<oneshot::Receiver<bool>> {
        let (tx, rx) = oneshot::channel();
        let (done, rx) = if wait { (Some(tx), Some(rx)) } else { (None, None) };
        let _ = self.inbox.send(Input::ProposeAlarm(entry::encode_alarm(raise, member, alarm), done));
        rx
    }

    /// Proposes an auth change (crate::auth::ops) on this member, which must
    /// be the writable leader: answered once proposed; every member applies it
    /// through its `AuthLog` when committed.
    pub fn propose_auth(&self, body: Vec<u8>) -> oneshot::Receiver<Result<(), String>> {
        let (tx, rx) = oneshot::channel();
        let _ = self.inbox.send(Input::ProposeAuth(body, tx));
        rx
    }

    /// etcd's MoveLeader: the leader hands over to `to` once it has caught up.
    pub fn move_leader(&self, to: u64) {
        let _ = self.inbox.send(Input::TransferLeader(to));
    }

    /// Stops the driver (a member that dies: its store stays as it was).
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        let _ = self.inbox.send(Input::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.halt();
    }
}

thread_local! {
    /// Set while the driver applies a committed entry: the store's commit then
    /// calls the sink for a revision the group already holds.
    static APPLYING: Cell<bool> = const { Cell::new(false) };
}

/// The store's commit sink in a replicated member: each revision committed
/// here becomes a proposal (the channel send is the only work under the
/// sequencer). Nothing is written to a local log yet (the `replicated` mode).
struct ReplicationSink {
    inbox: Sender<Input>,
    /// The compaction the driver is applying from the log (on a thread of its
    /// own), which the sink must not propose again.
    applying_compaction: Arc<std::sync::atomic::AtomicI64>,
}

/// A forwarded call running on the leader (`Replica::forwarded_call`).
pub struct ForwardedCall(Arc<Shared>);

impl Drop for ForwardedCall {
    fn drop(&mut self) {
        self.0.forwarded.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How long a leader's new commit index may wait for an append to carry it
/// before one is sent for it alone (`Driver::tell_commit`).
const COMMIT_TELL: Duration = Duration::from_millis(10);

/// How long a LeaseGrant waits for its group before answering anyway (the
/// grant then stands on this member alone; etcd answers "request timed out").
const LEASE_COMMIT_WAIT: Duration = Duration::from_secs(7);

impl CommitSink for ReplicationSink {
    fn committed(&self, rev: i64, events: &[Event]) -> bool {
        if !APPLYING.with(|a| a.get()) {
            let _ = self.inbox.send(Input::Propose { rev, data: entry::encode(rev, events) });
        }
        false
    }

    fn wait_durable(&self, _rev: i64, _events: &[Event]) -> bool {
        true
    }

    /// Waits until the group holds the grant: the caller runs it off the async
    /// workers (`lease_log_may_block`).
    fn lease_granted(&self, id: i64, ttl: i64) -> Held {
        if APPLYING.with(|a| a.get()) {
            return Held::Yes;
        }
        let (tx, rx) = mpsc::channel();
        if self.inbox.send(Input::ProposeLease { data: entry::encode_grant(id, ttl), done: Some(tx) }).is_err() {
            return Held::No;
        }
        match rx.recv_timeout(LEASE_COMMIT_WAIT) {
            Ok(()) => Held::Yes,
            Err(mpsc::RecvTimeoutError::Timeout) => Held::Unknown,
            // Never proposed, or its index holds another entry: the driver stopped.
            Err(mpsc::RecvTimeoutError::Disconnected) => Held::No,
        }
    }

    /// Called under the sequencer, so it only proposes: the revoke's entry
    /// precedes the revision that deletes the lease's keys, whose publication
    /// the answer waits for. (A revoke of a lease without keys is answered
    /// before its entry commits: planned, §10.)
    fn lease_revoked(&self, id: i64) {
        if !APPLYING.with(|a| a.get()) {
            let _ = self.inbox.send(Input::ProposeLease { data: entry::encode_revoke(id), done: None });
        }
    }

    fn lease_log_may_block(&self) -> bool {
        true
    }

    fn compacted(&self, rev: i64) {
        if self.applying_compaction.load(Ordering::Acquire) != rev {
            let _ = self.inbox.send(Input::ProposeCompact(rev));
        }
    }
}

struct Driver {
    node: RawNode<LogStore>,
    store: Arc<Store>,
    transport: Arc<dyn Transport>,
    shared: Arc<Shared>,
    /// This member's proposals not yet applied: revision → the term it was proposed in.
    proposed: HashMap<i64, u64>,
    /// Its lease and alarm proposals: log index → the term, and who waits.
    proposed_at: HashMap<u64, (u64, Waiter)>,
    /// Whether it led at the last Ready (a new leader refreshes every lease).
    led: bool,
    /// As leader: the index of its term's first entry; writes wait until it is applied.
    term_start: u64,
    tick: Duration,
    /// The newest revision an applied entry carried.
    applied_rev: i64,
    /// ReadIndex requests raft has not answered, by the context sent with them,
    /// and the leader they were asked under (a new leader drops them).
    reads: HashMap<u64, Vec<oneshot::Sender<i64>>>,
    next_read: u64,
    read_leader: u64,
    /// Reads raft answered, waiting for the applied index to reach theirs.
    confirmed: Vec<(u64, Vec<oneshot::Sender<i64>>)>,
    /// Rejoining: None once caught up; Some(0) until a leader is heard; then
    /// Some(the commit index to apply up to).
    catching_up: Option<u64>,
    /// The membership change proposed here: its log index and who waits for it.
    pending_change: Option<(u64, oneshot::Sender<Result<Membership, String>>)>,
    /// Per peer: since when it has been heard without a gap, and when last.
    heard: HashMap<u64, (Instant, Instant)>,
    /// This member has been in the membership it applied: its removal from it
    /// stops it (a joining member is not in it until its own addition applies).
    was_member: bool,
    /// Linearizable reads that arrived in this turn: one ReadIndex serves them all.
    waiting_reads: Vec<oneshot::Sender<i64>>,
    /// This member's attributes, and when to propose them again while the
    /// group does not hold them.
    me: MemberInfo,
    next_publish: Instant,
    /// When a member without the log the leader counts on may say so again.
    next_self_report: Instant,
    log_keep: u64,
    fetch_snapshot: Option<SnapshotFetcher>,
    auth: Option<Arc<dyn AuthLog>>,
    /// After installing a snapshot taken at this revision: entries it already
    /// covers (revisions up to it, lease changes before the next revision) are
    /// passed over, until a later revision is applied.
    snapshot_rev: Option<i64>,
    /// Snapshots this leader sent, by receiver: one not taken within
    /// `SNAPSHOT_PATIENCE` is reported failed, so raft sends another.
    snapshots_sent: HashMap<u64, Instant>,
    /// The log store's snapshot data needs refreshing (membership or attributes changed).
    snapshot_data_stale: bool,
    applying_compaction: Arc<std::sync::atomic::AtomicI64>,
    /// After the leader's connection closed: which leader, and when to campaign.
    early_campaign: Option<(u64, Instant)>,
    /// Heartbeats sent and not yet answered, by peer: when (round trips).
    heartbeats_sent: HashMap<u64, Instant>,
    /// The commit index each peer was last sent (in an append or a heartbeat).
    commit_told: HashMap<u64, u64>,
    /// Since when a peer has not been sent this leader's commit index.
    commit_untold_since: Option<Instant>,
    /// The raft log on disk, if this member keeps one.
    disk: Option<DiskLog>,
    /// A snapshot saved on its own thread: the raft index it covers, or why it failed.
    disk_saved: Arc<Mutex<Option<Result<u64, String>>>>,
}

/// Who waits for a lease or alarm change proposed here.
enum Waiter {
    /// Hears when the group holds the change (the lease is in this member's table already).
    Lease(Option<std::sync::mpsc::Sender<()>>),
    /// Hears, once applied here, whether the alarm set changed.
    Alarm(oneshot::Sender<bool>),
}

/// Compactions from the log, one at a time in their order of arrival.
static COMPACTING: Mutex<()> = Mutex::new(());

/// How long a leader waits for a member to take the snapshot it sent.
const SNAPSHOT_PATIENCE: Duration = Duration::from_secs(30);
/// Times a member asks for a snapshot's state before it gives up and restarts.
const SNAPSHOT_ATTEMPTS: u32 = 10;

fn conf_change(t: ConfChangeType, id: u64) -> ConfChange {
    let mut cc = ConfChange::default();
    cc.set_change_type(t);
    cc.node_id = id;
    cc
}

/// A founding member's log: one AddNode entry per voter at term 1, committed
/// and applied (the same bytes on every founding member); a joining member's:
/// empty, filled by the leader from index 1.
fn bootstrap(cfg: &ReplicaConfig) -> Result<(MemStorage, u64), String> {
    if cfg.voters.is_empty() || cfg.rejoining {
        return Ok((MemStorage::new(), 0));
    }
    let mut voters = cfg.voters.clone();
    voters.sort_unstable();
    voters.dedup();
    let storage = MemStorage::new_with_conf_state(ConfState::from((voters.clone(), Vec::<u64>::new())));
    let mut entries = Vec::new();
    for (i, v) in voters.iter().enumerate() {
        let mut e = Entry::default();
        e.set_entry_type(EntryType::EntryConfChange);
        e.term = 1;
        e.index = i as u64 + 1;
        let mut cc = conf_change(ConfChangeType::AddNode, *v);
        if let Some(f) = cfg.founders.iter().find(|f| f.id == *v) {
            cc.context = members::encode_context(f).into();
        }
        e.data = protobuf::Message::write_to_bytes(&cc).map_err(|e| e.to_string())?.into();
        entries.push(e);
    }
    let n = entries.len() as u64;
    {
        let mut core = storage.wl();
        core.append(&entries).map_err(|e| format!("raft bootstrap: {e}"))?;
        let hs = core.mut_hard_state();
        hs.term = 1;
        hs.commit = n;
    }
    Ok((storage, n))
}

/// The store's state, with the auth state, saved beside the disk log as the
/// snapshot `meta` describes. Returns the state's revision.
fn save_state(dir: &std::path::Path, meta: &raft::prelude::SnapshotMetadata, members: &[u8], store: &Store, auth: Option<&Arc<dyn AuthLog>>) -> Result<i64, String> {
    let auth = auth.map(|a| a.snapshot());
    disk_log::save_snapshot(dir, meta, members, |f| crate::snapshot::write_stream_with(store, f, auth.as_deref()))
}

/// A member's raft log and store from its disk log: the newest snapshot's
/// state loaded into the (empty) store, raft's log from the snapshot's index
/// on, its hard state. Returns raft's log, its applied index, the snapshot's
/// revision (entries it covers are passed over) and the members it named.
fn recover(cfg: &ReplicaConfig, store: &Store, rec: disk_log::Recovered) -> Result<(MemStorage, u64, Option<i64>, Vec<MemberInfo>), String> {
    let t0 = Instant::now();
    let (mem, applied, rev, infos) = match &rec.snapshot {
        Some(saved) => {
            let (_, infos) = members::decode_members(&saved.members)?;
            let (rev, keys, auth) = crate::snapshot::install_stream_with(store, saved.open_stream()?).map_err(|e| format!("{}: {e}", saved.path.display()))?;
            if let (Some(a), Some(state)) = (&cfg.auth, auth) {
                a.restore(&state).map_err(|e| format!("the auth state in {}: {e}", saved.path.display()))?;
            }
            let mem = MemStorage::new();
            let mut snap = raft::prelude::Snapshot::default();
            snap.set_metadata(saved.metadata.clone());
            mem.wl().apply_snapshot(snap).map_err(|e| format!("raft snapshot: {e}"))?;
            eprintln!("meganode-store: member {:x}: loaded its snapshot at raft index {} (revision {rev}, {keys} keys)", cfg.id, saved.metadata.index);
            (mem, saved.metadata.index, Some(rev), infos)
        }
        // No snapshot yet: the log holds every entry from the group's first.
        None if !cfg.voters.is_empty() => {
            let mut voters = cfg.voters.clone();
            voters.sort_unstable();
            voters.dedup();
            (MemStorage::new_with_conf_state(ConfState::from((voters, Vec::<u64>::new()))), 0, None, Vec::new())
        }
        None => (MemStorage::new(), 0, None, Vec::new()),
    };
    {
        let mut core = mem.wl();
        core.append(&rec.entries).map_err(|e| format!("raft log from disk: {e}"))?;
        core.set_hardstate(rec.hard_state.clone());
    }
    eprintln!(
        "meganode-store: member {:x}: recovered its raft log in {} ms: {} entries after index {applied}, term {}, commit {}{}",
        cfg.id,
        t0.elapsed().as_millis(),
        rec.entries.len(),
        rec.hard_state.term,
        rec.hard_state.commit,
        rec.torn.map(|t| format!("; a torn tail cut ({t})")).unwrap_or_default()
    );
    Ok((mem, applied, rev, infos))
}

impl Driver {
    fn run(&mut self, rx: Receiver<Input>) {
        let mut next_tick = Instant::now() + self.tick;
        loop {
            let wake = self.early_campaign.map_or(next_tick, |(_, at)| at.min(next_tick));
            let wake = self.commit_untold_since.map_or(wake, |t| wake.min(t + COMMIT_TELL));
            let wait = wake.saturating_duration_since(Instant::now());
            match rx.recv_timeout(wait) {
                Ok(input) => {
                    // Everything already queued joins this Ready.
                    let more = std::iter::from_fn(|| rx.try_recv().ok());
                    if !std::iter::once(input).chain(more).all(|input| self.take(input)) {
                        break;
                    }
                    self.ask_read_index();
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if Instant::now() >= next_tick {
                // A rejoining member does not tick: it never campaigns.
                if self.catching_up.is_none() {
                    self.node.tick();
                }
                next_tick += self.tick;
                self.track_connections();
                if self.transport.removed() {
                    self.shared.stop(self.node.raft.id, super::peer::REMOVED_MESSAGE.into());
                }
            }
            if let Err(e) = self.on_ready() {
                self.fail(e);
            }
            self.tell_commit();
            self.campaign_early();
            self.answer_reads();
            self.track_catch_up();
            self.report();
            self.publish();
            // A member whose state left the group's takes no further part: it
            // would vote, lead and propose from a state the others do not have.
            if self.failed() {
                break;
            }
        }
        self.shared.writable.store(false, Ordering::Release);
    }

    /// Leads, has applied every entry before its term's first, and is not
    /// handing leadership over (raft-rs drops proposals during a transfer).
    fn writable(&self) -> bool {
        let r = &self.node.raft;
        r.state == StateRole::Leader && r.raft_log.applied >= self.term_start && r.lead_transferee.is_none()
    }

    /// Takes one input; false on Stop.
    fn take(&mut self, input: Input) -> bool {
        match input {
            Input::Stop => return false,
            Input::Raft(mut m) => {
                let now = Instant::now();
                self.heard.entry(m.from).and_modify(|h| h.1 = now).or_insert((now, now));
                let vote = matches!(m.get_msg_type(), MessageType::MsgRequestVote | MessageType::MsgRequestPreVote);
                if vote && self.catching_up.is_some() {
                    return true;
                }
                if m.get_msg_type() == MessageType::MsgUnreachable {
                    self.lost_log(m.from, m.index);
                    return true;
                }
                match m.get_msg_type() {
                    MessageType::MsgHeartbeat => self.heard_heartbeat(&mut m),
                    MessageType::MsgHeartbeatResponse => self.heartbeat_answered(m.from),
                    _ => {}
                }
                // The leader's commit index, as its appends and heartbeats carry it:
                // what a rejoining member must apply before it may vote again.
                let from_leader = matches!(m.get_msg_type(), MessageType::MsgAppend | MessageType::MsgHeartbeat);
                if self.catching_up == Some(0) && from_leader && m.commit > 0 {
                    self.catching_up = Some(m.commit);
                }
                // A message from a stale or unknown peer is raft's to ignore.
                let _ = self.node.step(m);
            }
            Input::ProposeLease { data, done } => {
                let before = self.node.raft.raft_log.last_index();
                if !self.writable() {
                    self.shared.failed.fetch_add(1, Ordering::Relaxed);
                    self.fail("a lease changed on a member that is not a writable leader".into());
                } else if let Err(e) = self.node.propose(Vec::new(), data) {
                    self.shared.failed.fetch_add(1, Ordering::Relaxed);
                    self.fail(format!("a lease change could not be proposed: {e}"));
                } else if self.node.raft.raft_log.last_index() > before {
                    self.proposed_at.insert(self.node.raft.raft_log.last_index(), (self.node.raft.term, Waiter::Lease(done)));
                }
            }
            Input::ChangeMembers(cc, tx) => {
                if self.node.raft.state != StateRole::Leader {
                    let _ = tx.send(Err("not the leader".into()));
                } else if self.pending_change.is_some() || self.node.raft.has_pending_conf() {
                    let _ = tx.send(Err("another membership change is in progress".into()));
                } else if let Some(why) = self.not_ready_to_promote(&cc) {
                    let _ = tx.send(Err(why));
                } else {
                    self.propose_change(tx, |n| n.propose_conf_change(Vec::new(), cc));
                }
            }
            Input::UpdatePeerUrls(id, urls, tx) => {
                if self.node.raft.state != StateRole::Leader {
                    let _ = tx.send(Err("not the leader".into()));
                } else if self.pending_change.is_some() {
                    let _ = tx.send(Err("another membership change is in progress".into()));
                } else {
                    self.propose_change(tx, |n| n.propose(Vec::new(), members::encode_peer_urls(id, &urls)));
                }
            }
            Input::TransferLeader(to) => self.node.transfer_leader(to),
            // Not this member's to raise unless it leads (a write refused for the
            // quota on a deposed leader): dropped, and whoever waits hears so.
            Input::ProposeAlarm(data, done) => {
                let before = self.node.raft.raft_log.last_index();
                if self.writable() && self.node.propose(Vec::new(), data).is_ok() && self.node.raft.raft_log.last_index() > before {
                    if let Some(done) = done {
                        self.proposed_at.insert(self.node.raft.raft_log.last_index(), (self.node.raft.term, Waiter::Alarm(done)));
                    }
                }
            }
            Input::ProposeAuth(data, tx) => {
                let r = if !self.writable() {
                    Err("not the leader".to_string())
                } else {
                    self.node.propose(Vec::new(), entry::encode_auth(&data)).map_err(|e| e.to_string())
                };
                if r.is_err() {
                    self.shared.failed.fetch_add(1, Ordering::Relaxed);
                }
                let _ = tx.send(r);
            }
            Input::PeerClosed(from) => {
                self.heard.remove(&from);
                self.leader_gone(from);
                // A member sent a snapshot whose process ended (one holding state
                // restarts itself empty to take it) will not take that one: raft
                // sends another once it answers, instead of after SNAPSHOT_PATIENCE.
                if self.snapshots_sent.remove(&from).is_some() && self.node.raft.prs().get(from).is_some_and(|p| p.state == raft::ProgressState::Snapshot) {
                    self.node.report_snapshot(from, SnapshotStatus::Failure);
                }
            }
            Input::PeerAlive(from) => {
                let now = Instant::now();
                self.heard.entry(from).and_modify(|h| h.1 = now).or_insert((now, now));
            }
            // A member that compacted while not leading (a compaction from the
            // log, or a leader deposed meanwhile) proposes nothing: the group's
            // compactions are its leader's.
            Input::ProposeCompact(rev) => {
                if self.writable() {
                    let _ = self.node.propose(Vec::new(), entry::encode_compact(rev));
                }
            }
            Input::ReadIndex(tx) => self.waiting_reads.push(tx),
            Input::Propose { rev, data } => {
                // The store applied this revision already: if it cannot be proposed,
                // this member's state has left the group's.
                if !self.writable() {
                    self.shared.failed.fetch_add(1, Ordering::Relaxed);
                    self.fail(format!("revision {rev} was written on a member that is not a writable leader"));
                } else if let Err(e) = self.node.propose(Vec::new(), data) {
                    self.shared.failed.fetch_add(1, Ordering::Relaxed);
                    self.fail(format!("revision {rev} could not be proposed: {e}"));
                } else {
                    self.proposed.insert(rev, self.node.raft.term);
                }
            }
        }
        true
    }

    fn fail(&self, why: String) {
        // What this member proposed and the group has not applied will not be applied here.
        self.shared.failed.fetch_add((self.proposed.len() + self.proposed_at.len()) as u64, Ordering::Relaxed);
        self.shared.stop(self.node.raft.id, why);
    }

    fn failed(&self) -> bool {
        self.shared.error.lock().is_some()
    }

    /// raft-rs's Ready order: messages a leader may send before persisting,
    /// the snapshot, committed entries, the log and hard state, the messages
    /// that needed them; then what advancing releases.
    fn on_ready(&mut self) -> Result<(), String> {
        if !self.node.has_ready() {
            return Ok(());
        }
        let mut rd = self.node.ready();
        if !rd.messages().is_empty() {
            let msgs = rd.take_messages();
            self.send(msgs);
        }
        for rs in rd.take_read_states() {
            let id = rs.request_ctx.as_slice().try_into().map(u64::from_le_bytes).unwrap_or(0);
            if let Some(txs) = self.reads.remove(&id) {
                self.confirmed.push((rs.index, txs));
            }
        }
        if !rd.snapshot().is_empty() {
            self.install_snapshot(rd.snapshot().clone())?;
        }
        self.apply(rd.take_committed_entries())?;
        let storage = self.node.raft.raft_log.store.mem.clone();
        if !rd.entries().is_empty() {
            storage.wl().append(rd.entries()).map_err(|e| format!("raft log append: {e}"))?;
        }
        if let Some(hs) = rd.hs() {
            storage.wl().set_hardstate(hs.clone());
        }
        // On disk before raft counts them as this member's (its own vote as
        // leader, its acknowledgement as follower).
        if let Some(d) = &mut self.disk {
            d.append(rd.entries(), rd.hs()).map_err(|e| format!("{}: {e}", disk_log::DISK_FAILED))?;
        }
        if !rd.persisted_messages().is_empty() {
            self.send(rd.take_persisted_messages());
        }
        let mut light = self.node.advance(rd);
        if let Some(commit) = light.commit_index() {
            storage.wl().mut_hard_state().set_commit(commit);
        }
        self.send(light.take_messages());
        self.apply(light.take_committed_entries())?;
        self.node.advance_apply();
        self.compact_log()?;
        Ok(())
    }

    /// A snapshot from the leader: this member is behind the leader's log.
    /// The store's state comes from the sender (`fetch_snapshot`), at the
    /// sender's published revision, at least the snapshot's; then raft's log
    /// restarts at the snapshot's index. Only an empty store takes one: a
    /// member holding state exits, to restart empty (rollback is planned, §10).
    fn install_snapshot(&mut self, snap: raft::prelude::Snapshot) -> Result<(), String> {
        let index = snap.get_metadata().index;
        let (sender, infos) = members::decode_members(&snap.data)?;
        if self.store.committed_rev() > 1 || self.store.key_count() > 0 {
            // Its log on disk leads to this state again: it goes, so that the
            // member's restart comes back empty, rejoins and takes the snapshot.
            let discarded = match &mut self.disk {
                Some(d) => {
                    d.discard()?;
                    "; its raft log on disk is discarded"
                }
                None => "",
            };
            return Err(format!(
                "a snapshot at index {index} arrived for a member holding revisions up to {}{discarded}: restart it with an empty store to take it",
                self.store.committed_rev()
            ));
        }
        let fetch = self.fetch_snapshot.clone().ok_or("a snapshot arrived and this member cannot fetch one")?;
        let from = infos.iter().find(|m| m.id == sender).cloned().ok_or_else(|| format!("snapshot from {sender:x}, a member it does not list"))?;
        let t0 = Instant::now();
        let mut attempt = 0;
        let (rev, keys, auth) = loop {
            attempt += 1;
            // Loaded as it arrives: the sender's walk, the transfer and this load overlap.
            let got = (fetch.0)(&from, index)
                .map_err(|e| format!("fetching the snapshot from member {sender:x}: {e}"))
                .and_then(|stream| crate::snapshot::install_stream_with(&self.store, stream).map_err(|e| format!("the snapshot from member {sender:x}: {e}")));
            match got {
                Ok(done) => break done,
                // Nothing loaded yet (the sender refused, busy or not caught up,
                // or the connection failed before the first key): ask again.
                // Past the first key the store holds part of a state: the
                // member stops and restarts empty.
                Err(e) if attempt < SNAPSHOT_ATTEMPTS && self.store.key_count() == 0 && self.store.committed_rev() <= 1 => {
                    eprintln!("meganode-store: member {:x}: {e}; asking again", self.node.raft.id);
                    std::thread::sleep(Duration::from_millis(500));
                }
                Err(e) => return Err(e),
            }
        };
        let timing = format!("{keys} keys streamed and loaded in {} ms", t0.elapsed().as_millis());
        if let (Some(a), Some(state)) = (&self.auth, auth) {
            a.restore(&state).map_err(|e| format!("the auth state in the snapshot from member {sender:x}: {e}"))?;
        }
        self.applied_rev = rev;
        self.snapshot_rev = Some(rev);
        self.proposed.clear();
        self.node.raft.raft_log.store.mem.wl().apply_snapshot(snap.clone()).map_err(|e| format!("raft snapshot: {e}"))?;
        let cs = snap.get_metadata().get_conf_state();
        self.shared.set_members(self.node.raft.id, Membership::of(cs));
        self.was_member |= cs.voters.contains(&self.node.raft.id) || cs.learners.contains(&self.node.raft.id);
        {
            let mut info = self.shared.info.lock();
            info.clear();
            for m in infos.into_iter().filter(|m| cs.voters.contains(&m.id) || cs.learners.contains(&m.id)) {
                info.insert(m.id, m);
            }
            self.transport.set_peers(&info.values().cloned().collect::<Vec<_>>());
        }
        self.snapshot_data_stale = true;
        self.shared.applied.store(index, Ordering::Release);
        eprintln!("meganode-store: member {:x} took a snapshot from {sender:x}: raft index {index}, revision {rev}; {timing}", self.node.raft.id);
        // Its log on disk restarts at the snapshot: saved here before raft
        // goes on from it (the entries on disk before it no longer follow).
        if let Some(d) = &mut self.disk {
            let t0 = Instant::now();
            d.snapshot_started(index + 1).map_err(|e| format!("{}: {e}", disk_log::DISK_FAILED))?;
            let saved = save_state(d.dir(), snap.get_metadata(), &snap.data, &self.store, self.auth.as_ref());
            d.snapshot_done(saved.as_ref().ok().map(|_| index));
            saved.map_err(|e| format!("{}: saving the snapshot: {e}", disk_log::DISK_FAILED))?;
            eprintln!("meganode-store: member {:x} saved the snapshot at raft index {index} to disk in {} ms", self.node.raft.id, t0.elapsed().as_millis());
        }
        Ok(())
    }

    /// Sends raft's messages, noting the snapshots (whose taking it waits
    /// for) and heartbeats (whose answers time the round trip) among them.
    fn send(&mut self, msgs: Vec<Message>) {
        if msgs.is_empty() {
            return;
        }
        let now = Instant::now();
        for m in &msgs {
            match m.get_msg_type() {
                MessageType::MsgSnapshot => {
                    self.snapshots_sent.insert(m.to, now);
                }
                // The oldest unanswered one: a lost answer shows as a long round trip.
                MessageType::MsgHeartbeat => {
                    self.heartbeats_sent.entry(m.to).or_insert(now);
                    let told = self.commit_told.entry(m.to).or_default();
                    *told = (*told).max(m.commit);
                }
                MessageType::MsgAppend => {
                    let told = self.commit_told.entry(m.to).or_default();
                    *told = (*told).max(m.commit);
                }
                _ => {}
            }
        }
        self.transport.send(msgs);
    }

    /// With `skip_bcast_commit` a leader's new commit index reaches the
    /// followers on the next append: at once under load (every Ready sends
    /// one), and otherwise within COMMIT_TELL, by an append to each peer that
    /// was not sent it (they apply the entry then: their watchers and
    /// serializable reads see it that much later; a linearizable read asks
    /// the leader, whose heartbeats carry the index). While a follower's
    /// forwarded call runs here it is told at once: that follower answers its
    /// client once it applied the write (etcd's member answers a write once it
    /// applied it), so a read there sees it.
    fn tell_commit(&mut self) {
        if self.node.raft.state != StateRole::Leader {
            self.commit_untold_since = None;
            return;
        }
        let committed = self.node.raft.raft_log.committed;
        let me = self.node.raft.id;
        // A peer is owed the index as far as it holds the log (a lagging or
        // dead one gets it with the entries it lacks, when it takes them).
        let untold = self.node.raft.prs().iter().any(|(id, pr)| *id != me && self.commit_told.get(id).copied().unwrap_or(0) < committed.min(pr.matched));
        if !untold {
            self.commit_untold_since = None;
            return;
        }
        let since = *self.commit_untold_since.get_or_insert_with(Instant::now);
        if since.elapsed() >= COMMIT_TELL || self.shared.forwarded.load(Ordering::Acquire) > 0 {
            self.node.raft.bcast_append();
            self.commit_untold_since = None;
            if let Err(e) = self.on_ready() {
                self.fail(e);
            }
        }
    }

    /// A heartbeat's answer: the round trip to its sender.
    fn heartbeat_answered(&mut self, from: u64) {
        if let Some(t) = self.heartbeats_sent.remove(&from) {
            let h = self.shared.round_trips.lock().entry(from).or_default().clone();
            h.observe(t.elapsed().as_secs_f64());
        }
    }

    /// Drops the log's entries older than `log_keep` behind the applied index,
    /// as far as every member still answering has them (one that stopped
    /// answering will take a snapshot). On a leader, a snapshot not taken in
    /// time is reported failed so that raft sends another.
    fn compact_log(&mut self) -> Result<(), String> {
        if self.snapshot_data_stale {
            self.snapshot_data_stale = false;
            let infos: Vec<MemberInfo> = self.shared.info.lock().values().cloned().collect();
            *self.node.raft.raft_log.store.snapshot_data.lock() = members::encode_members(self.node.raft.id, &infos);
        }
        self.save_to_disk()?;
        let r = &self.node.raft;
        let applied = r.raft_log.applied;
        let first = r.raft_log.first_index();
        if applied < first + 2 * self.log_keep {
            return Ok(());
        }
        let mut upto = applied - self.log_keep;
        if r.state == StateRole::Leader {
            for (id, pr) in r.prs().iter() {
                if *id != r.id && pr.recent_active && pr.state != raft::ProgressState::Snapshot {
                    upto = upto.min(pr.matched);
                }
            }
            let stuck: Vec<u64> = self
                .snapshots_sent
                .iter()
                .filter(|(id, t)| t.elapsed() > SNAPSHOT_PATIENCE && r.prs().get(**id).is_some_and(|p| p.state == raft::ProgressState::Snapshot))
                .map(|(id, _)| *id)
                .collect();
            for id in stuck {
                self.snapshots_sent.remove(&id);
                self.node.report_snapshot(id, SnapshotStatus::Failure);
            }
        }
        if upto > first {
            self.node.raft.raft_log.store.mem.wl().compact(upto).map_err(|e| format!("raft log compaction: {e}"))?;
            self.shared.log_first.store(upto, Ordering::Release);
        }
        Ok(())
    }

    /// Every `snapshot_every` entries, the store's state at the applied index
    /// is saved beside the disk log on a thread of its own (the driver goes on
    /// appending to a new segment); once saved, the segments it covers go.
    fn save_to_disk(&mut self) -> Result<(), String> {
        let Some(d) = &mut self.disk else { return Ok(()) };
        if let Some(done) = self.disk_saved.lock().take() {
            match done {
                Ok(index) => d.snapshot_done(Some(index)),
                Err(e) => {
                    eprintln!("meganode-store: member {:x}: saving a snapshot of the raft log failed: {e}; the log is kept whole", self.node.raft.id);
                    d.snapshot_done(None);
                }
            }
        }
        // A member still catching up, or one whose store holds a snapshot's
        // state ahead of its applied index, saves later.
        if !d.snapshot_due() || self.catching_up.is_some() || self.snapshot_rev.is_some() {
            return Ok(());
        }
        let r = &self.node.raft;
        let mut meta = raft::prelude::SnapshotMetadata::default();
        meta.index = r.raft_log.applied;
        meta.term = r.raft_log.term(meta.index).map_err(|e| format!("raft log term at {}: {e}", meta.index))?;
        meta.set_conf_state(r.prs().conf().to_conf_state());
        d.snapshot_started(r.raft_log.last_index() + 1).map_err(|e| format!("{}: {e}", disk_log::DISK_FAILED))?;
        let members = self.node.raft.raft_log.store.snapshot_data.lock().clone();
        let (dir, store, auth, slot, id) = (d.dir().to_path_buf(), self.store.clone(), self.auth.clone(), self.disk_saved.clone(), self.node.raft.id);
        std::thread::Builder::new()
            .name("raft-snapshot".into())
            .spawn(move || {
                crate::background::lower_this_thread();
                let t0 = Instant::now();
                let saved = save_state(&dir, &meta, &members, &store, auth.as_ref());
                if let Ok(rev) = &saved {
                    eprintln!("meganode-store: member {id:x} saved a snapshot at raft index {} (revision {rev}) in {} ms", meta.index, t0.elapsed().as_millis());
                }
                *slot.lock() = Some(saved.map(|_| meta.index));
            })
            .map_err(|e| format!("raft snapshot thread: {e}"))?;
        Ok(())
    }

    fn apply(&mut self, entries: Vec<Entry>) -> Result<(), String> {
        for e in entries {
            if self.failed() {
                return Ok(());
            }
            match e.get_entry_type() {
                // A new leader's empty entry carries nothing to apply.
                EntryType::EntryNormal if e.data.is_empty() => {}
                EntryType::EntryNormal => match entry::decode(&e.data)? {
                    entry::Change::Revision(rev, writes) => self.apply_revision(&e, rev, writes)?,
                    entry::Change::Attributes { id, name, client_urls } => self.apply_attributes(id, name, client_urls),
                    entry::Change::Compact(rev) => self.apply_compaction(rev),
                    entry::Change::PeerUrls { id, peer_urls } => self.apply_peer_urls(e.index, id, peer_urls),
                    entry::Change::Auth(body) => {
                        if let Some(a) = &self.auth {
                            a.apply(e.index, &body);
                        }
                    }
                    entry::Change::Alarm { raise, member, alarm } => self.apply_alarm(&e, raise, member, alarm),
                    lease => self.apply_lease(&e, lease)?,
                },
                EntryType::EntryConfChange => {
                    let cc: ConfChange = protobuf::Message::parse_from_bytes(&e.data).map_err(|err| format!("membership change at index {}: {err}", e.index))?;
                    let applied = self.node.apply_conf_change(&cc);
                    let adds = matches!(cc.get_change_type(), ConfChangeType::AddNode | ConfChangeType::AddLearnerNode);
                    let added = adds.then(|| members::decode_context(cc.node_id, &cc.context));
                    self.apply_change(e.index, applied, added);
                }
                EntryType::EntryConfChangeV2 => {
                    let cc: ConfChangeV2 = protobuf::Message::parse_from_bytes(&e.data).map_err(|err| format!("membership change at index {}: {err}", e.index))?;
                    let applied = self.node.apply_conf_change(&cc);
                    self.apply_change(e.index, applied, None);
                }
            }
            // apply_lease and apply_alarm take their own entries: this index holds
            // another leader's. A dropped alarm's waiter hears so; a lease change
            // is already in this member's table.
            if let Some((_, Waiter::Lease(_))) = self.proposed_at.remove(&e.index) {
                return Err(format!("the lease change proposed here at index {} was overwritten: this member's lease table left the group's", e.index));
            }
            if self.pending_change.as_ref().is_some_and(|(i, _)| *i == e.index) {
                // The index of the change proposed here holds something else.
                let (_, tx) = self.pending_change.take().expect("checked");
                let _ = tx.send(Err("the membership change was dropped".into()));
            }
            self.shared.applied.store(e.index, Ordering::Release);
        }
        Ok(())
    }

    fn apply_revision(&mut self, e: &Entry, rev: i64, writes: Vec<(bytes::Bytes, crate::mvcc::key_history::Version)>) -> Result<(), String> {
        // A snapshot this member took already holds it.
        if let Some(covered) = self.snapshot_rev {
            if rev <= covered {
                return Ok(());
            }
            self.snapshot_rev = None;
        }
        // Revisions come through the log one by one: a gap or a repeat means an
        // entry this member counted on was overwritten.
        if rev != self.applied_rev + 1 {
            return Err(format!(
                "the group committed revision {rev} (index {}, term {}) after revision {}: a revision was lost or repeated",
                e.index, e.term, self.applied_rev
            ));
        }
        let own = self.proposed.remove(&rev);
        self.proposed.retain(|r, _| *r > rev);
        match own {
            Some(term) if term == e.term => {}
            Some(_) | None if rev <= self.store.committed_rev() => {
                return Err(format!("the group committed revision {rev} (index {}, term {}) and this member holds another", e.index, e.term))
            }
            _ => {
                APPLYING.with(|a| a.set(true));
                let r = self.store.apply_replicated(rev, writes);
                APPLYING.with(|a| a.set(false));
                r?;
            }
        }
        self.store.replicated_to(rev);
        self.applied_rev = rev;
        Ok(())
    }

    /// Records an applied membership change (`applied`, raft's outcome) and
    /// answers the proposer. A change raft refuses (a second joint change, the
    /// last voter removed) is refused on every member alike: not a divergence.
    fn apply_change(&mut self, index: u64, applied: raft::Result<ConfState>, added: Option<MemberInfo>) {
        let result = applied.map_err(|err| format!("membership change at index {index}: {err}"));
        self.snapshot_data_stale = true;
        if let Ok(cs) = &result {
            self.node.raft.raft_log.store.mem.wl().set_conf_state(cs.clone());
            let before = self.shared.members.lock().clone();
            self.shared.set_members(self.node.raft.id, Membership::of(cs));
            let mut info = self.shared.info.lock();
            // Only a member this change removed is forgotten: a member replaying the
            // log from its start (a joiner) knows later members from its roster, and
            // must go on reaching them — its leader among them — while it applies the
            // founders' entries.
            let now = |id: &u64| cs.voters.contains(id) || cs.learners.contains(id);
            let gone: Vec<u64> = before.voters.iter().chain(&before.learners).filter(|id| !now(id)).copied().collect();
            if !gone.is_empty() {
                self.shared.removed.lock().extend(gone);
                self.shared.any_removed.store(true, Ordering::Release);
            }
            info.retain(|id, _| now(id) || !(before.voters.contains(id) || before.learners.contains(id)));
            if let Some(m) = added {
                let e = info.entry(m.id).or_insert_with(|| MemberInfo { id: m.id, ..Default::default() });
                if !m.peer_urls.is_empty() {
                    e.peer_urls = m.peer_urls;
                }
                if !m.name.is_empty() {
                    e.name = m.name;
                }
            }
            for id in cs.voters.iter().chain(&cs.learners) {
                info.entry(*id).or_insert_with(|| MemberInfo { id: *id, ..Default::default() });
            }
            self.transport.set_peers(&info.values().cloned().collect::<Vec<_>>());
            drop(info);
            let me = self.node.raft.id;
            if cs.voters.contains(&me) || cs.learners.contains(&me) {
                self.was_member = true;
            } else if self.was_member {
                // etcd's removed member stops too; its data dir must not be used again.
                self.shared.stop(me, super::peer::REMOVED_MESSAGE.into());
            }
        }
        if self.pending_change.as_ref().is_some_and(|(i, _)| *i == index) {
            let (_, tx) = self.pending_change.take().expect("checked");
            let _ = tx.send(result.as_ref().map(Membership::of).map_err(Clone::clone));
        }
    }

    /// A lease change: this member's own is already in its table (its proposer
    /// hears it is held); another's is applied to the table. A revoke only drops
    /// the lease: the deletes of its keys come as the next revision.
    fn apply_lease(&mut self, e: &Entry, change: entry::Change) -> Result<(), String> {
        if let Some((term, Waiter::Lease(done))) = self.proposed_at.remove(&e.index) {
            if term == e.term {
                if let Some(done) = done {
                    let _ = done.send(());
                }
                return Ok(());
            }
        }
        let leases = &self.store.leases;
        // A snapshot this member took may hold this change already: the
        // sender reads its leases as its stream starts, later than the raft
        // index the snapshot stands for, so a grant or revoke committed in
        // between is in it. (A leader proposes only a grant of a new ID and a
        // revoke of a lease it holds, so on a member that took no snapshot
        // these never match.)
        match &change {
            entry::Change::LeaseGrant { id, .. } if leases.exists(*id) => return Ok(()),
            entry::Change::LeaseRevoke(id) if !leases.exists(*id) => return Ok(()),
            _ => {}
        }
        let r = match change {
            entry::Change::LeaseGrant { id, ttl } => leases.grant(id, ttl).map(|_| ()),
            entry::Change::LeaseRevoke(id) => leases.revoke(id).map(|_| ()),
            entry::Change::Revision(..)
            | entry::Change::Attributes { .. }
            | entry::Change::Compact(_)
            | entry::Change::PeerUrls { .. }
            | entry::Change::Auth(_)
            | entry::Change::Alarm { .. } => {
                unreachable!("decoded as a lease change")
            }
        };
        r.map_err(|err| format!("lease change at index {}: {err}", e.index))
    }

    /// Raises or disarms an alarm on this member as the log says (etcd applies
    /// its Alarm requests on every member); idempotent, so a snapshot that
    /// holds it already changes nothing. Tells this member's caller, if it
    /// proposed it, whether the set changed.
    fn apply_alarm(&mut self, e: &Entry, raise: bool, member: u64, alarm: i32) {
        let alarms = &self.store.alarms;
        let changed = if raise { alarms.activate(member, alarm).is_some_and(|(_, new)| new) } else { alarms.deactivate(member, alarm).is_some() };
        if changed {
            let name = crate::quota::alarm_name(alarm);
            eprintln!("meganode-store: alarm {}: {name} from member {member:x} (raft index {})", if raise { "raised" } else { "disarmed" }, e.index);
        }
        if let Some((term, Waiter::Alarm(done))) = self.proposed_at.remove(&e.index) {
            // Another leader's entry at this index: the proposal was dropped.
            if term == e.term {
                let _ = done.send(if raise { true } else { changed });
            }
        }
    }

    /// Asks raft once for every linearizable read that arrived in this turn.
    fn ask_read_index(&mut self) {
        if self.waiting_reads.is_empty() {
            return;
        }
        self.next_read += 1;
        self.reads.insert(self.next_read, std::mem::take(&mut self.waiting_reads));
        self.node.read_index(self.next_read.to_le_bytes().to_vec());
    }

    /// The leader's connection closed: a crashed process closes its sockets at
    /// once, long before an election timeout passes without heartbeats. This
    /// follower stops counting the leader's lease (it will vote) and campaigns
    /// after 20 ms plus 150 ms per voter of lower ID, unless a leader is heard
    /// meanwhile. Other
    /// followers that still hear a live leader refuse its pre-vote (check-quorum's
    /// lease), so a connection that closed for another reason costs a pre-vote
    /// round, not an election; after a real crash the followers that saw the
    /// close elect within a few hundred milliseconds, where etcd waits 1–2 s.
    fn leader_gone(&mut self, from: u64) {
        let r = &mut self.node.raft;
        if from != r.leader_id || r.state != StateRole::Follower || self.catching_up.is_some() {
            return;
        }
        r.election_elapsed = r.election_timeout();
        // Voters campaign in turn, lowest ID first, 150 ms apart: two that
        // campaign together split the vote and wait a whole election timeout.
        let mut voters: Vec<u64> = r.prs().conf().voters().ids().iter().filter(|id| *id != from).collect();
        voters.sort_unstable();
        let rank = voters.iter().position(|id| *id == r.id).unwrap_or(voters.len()) as u64;
        let mut b = [0u8; 1];
        let _ = getrandom::getrandom(&mut b);
        let delay = Duration::from_millis(20 + rank * 150 + u64::from(b[0]) % 20);
        self.early_campaign = Some((from, Instant::now() + delay));
    }

    /// Campaigns once the early election's delay is over if no leader was heard since.
    fn campaign_early(&mut self) {
        let Some((gone, at)) = self.early_campaign else { return };
        let r = &self.node.raft;
        // Heard from a leader since (raft restarts the count on its messages), or
        // no longer a follower of the one that left: nothing to do.
        if r.leader_id != gone || r.state != StateRole::Follower || r.election_elapsed < r.election_timeout() {
            self.early_campaign = None;
            return;
        }
        if Instant::now() >= at {
            self.early_campaign = None;
            let _ = self.node.campaign();
        }
    }

    /// A heartbeat whose commit index lies past this member's log: the leader
    /// counts on entries this member lost (it restarted without its log, as a
    /// memory-only member does). raft-rs would stop on it (etcd's "tocommit out
    /// of range"); the commit it learns is cut to its log instead, and the
    /// leader is told where its log ends (`lost_log`), at most twice a second.
    fn heard_heartbeat(&mut self, m: &mut Message) {
        let last = self.node.raft.raft_log.last_index();
        if m.commit <= last {
            return;
        }
        if self.catching_up == Some(0) {
            self.catching_up = Some(m.commit);
        }
        m.commit = last;
        if Instant::now() >= self.next_self_report {
            self.next_self_report = Instant::now() + Duration::from_millis(500);
            let mut r = Message::default();
            r.set_msg_type(MessageType::MsgUnreachable);
            r.from = self.node.raft.id;
            r.to = m.from;
            r.index = last;
            self.transport.send(vec![r]);
        }
    }

    /// A member says its log ends at `last` though this leader counted it as
    /// holding more: replication to it restarts from there (raft-rs would take
    /// its refusals of later appends as stale and never resend).
    fn lost_log(&mut self, from: u64, last: u64) {
        if self.node.raft.state != StateRole::Leader {
            return;
        }
        if let Some(pr) = self.node.raft.mut_prs().get_mut(from) {
            if pr.matched > last {
                pr.matched = last;
                pr.become_probe();
                pr.next_idx = last + 1;
            }
        }
    }

    /// The leader's compaction, on a member that has not made it (the leader
    /// made it before proposing): on a thread of its own, since it walks every
    /// key and the driver must go on answering (compactions run one at a time,
    /// in order, in `Store::compact`).
    fn apply_compaction(&mut self, rev: i64) {
        if rev <= self.store.compacted_rev() {
            return;
        }
        let (store, flag) = (self.store.clone(), self.applying_compaction.clone());
        let _ = std::thread::Builder::new().name("compact".into()).spawn(move || {
            let _one = COMPACTING.lock();
            flag.store(rev, Ordering::Release);
            let _ = store.compact(rev);
            flag.store(0, Ordering::Release);
        });
    }

    fn apply_attributes(&mut self, id: u64, name: String, client_urls: Vec<String>) {
        self.snapshot_data_stale = true;
        let mut info = self.shared.info.lock();
        // A removed member's late attributes are not a member.
        if let Some(m) = info.get_mut(&id) {
            m.name = name;
            m.client_urls = client_urls;
        }
    }

    /// Proposes a membership change (`propose` on the raw node) whose proposer
    /// hears when it is applied (`pending_change`), or at once why it was not proposed.
    fn propose_change(&mut self, tx: oneshot::Sender<Result<Membership, String>>, propose: impl FnOnce(&mut RawNode<LogStore>) -> raft::Result<()>) {
        let before = self.node.raft.raft_log.last_index();
        match propose(&mut self.node) {
            Ok(()) if self.node.raft.raft_log.last_index() > before => {
                self.pending_change = Some((self.node.raft.raft_log.last_index(), tx));
            }
            Ok(()) => {
                let _ = tx.send(Err("the membership change was dropped".into()));
            }
            Err(e) => {
                let _ = tx.send(Err(e.to_string()));
            }
        }
    }

    /// A member's new peer URLs (MemberUpdate): where its peers now reach it.
    fn apply_peer_urls(&mut self, index: u64, id: u64, peer_urls: Vec<String>) {
        self.snapshot_data_stale = true;
        {
            let mut info = self.shared.info.lock();
            if let Some(m) = info.get_mut(&id) {
                m.peer_urls = peer_urls;
            }
            self.transport.set_peers(&info.values().cloned().collect::<Vec<_>>());
        }
        if self.pending_change.as_ref().is_some_and(|(i, _)| *i == index) {
            let (_, tx) = self.pending_change.take().expect("checked");
            let _ = tx.send(Ok(self.shared.members.lock().clone()));
        }
    }

    /// etcd's isLearnerReady: a learner is promoted only once its log matches
    /// at least 90 % of the leader's, so that the new voter does not hold up
    /// the quorum while it catches up.
    fn not_ready_to_promote(&self, cc: &ConfChange) -> Option<String> {
        if cc.get_change_type() != ConfChangeType::AddNode || !self.shared.members.lock().learners.contains(&cc.node_id) {
            return None;
        }
        let prs = self.node.raft.prs();
        let leader = prs.get(self.node.raft.id).map_or(0, |p| p.matched);
        let learner = prs.get(cc.node_id).map_or(0, |p| p.matched);
        ((learner as f64) < leader as f64 * 0.9).then(|| "etcdserver: can only promote a learner member which is in sync with leader".to_string())
    }

    /// Proposes this member's attributes while the group does not hold them
    /// (raft forwards a follower's proposal to the leader), once a second.
    fn publish(&mut self) {
        if self.me.client_urls.is_empty() && self.me.name.is_empty() {
            return;
        }
        if self.node.raft.leader_id == 0 || self.catching_up.is_some() || Instant::now() < self.next_publish {
            return;
        }
        let held = self.shared.info.lock().get(&self.me.id).is_some_and(|m| m.name == self.me.name && m.client_urls == self.me.client_urls);
        if held {
            return;
        }
        self.next_publish = Instant::now() + Duration::from_secs(1);
        let _ = self.node.propose(Vec::new(), members::encode_attributes(&self.me));
    }

    /// Answers the reads whose index is applied, with the revision applied so far.
    fn answer_reads(&mut self) {
        let leader = self.node.raft.leader_id;
        if leader != self.read_leader {
            // Raft drops a ReadIndex in flight when leadership moves: so do we.
            self.reads.clear();
            self.read_leader = leader;
        }
        // Raft may drop one silently too (no leader's-term commit yet, a lost
        // message): its caller gave up; forget it.
        self.reads.retain(|_, txs| {
            txs.retain(|tx| !tx.is_closed());
            !txs.is_empty()
        });
        if self.confirmed.is_empty() || self.failed() {
            return;
        }
        let applied = self.node.raft.raft_log.applied;
        // Before any revision came through the log, the store's first (1).
        let rev = self.applied_rev.max(1);
        for (index, txs) in std::mem::take(&mut self.confirmed) {
            if index <= applied {
                for tx in txs {
                    let _ = tx.send(rev);
                }
            } else {
                self.confirmed.push((index, txs));
            }
        }
    }

    /// A peer silent for an election timeout is no longer connected.
    fn track_connections(&mut self) {
        let gap = self.tick * self.node.raft.election_timeout() as u32;
        let now = Instant::now();
        self.heard.retain(|_, (_, last)| now.duration_since(*last) < gap);
        *self.shared.connected.lock() = self.heard.iter().map(|(id, (since, _))| (*id, *since)).collect();
    }

    fn track_catch_up(&mut self) {
        let Some(target) = self.catching_up else { return };
        if target > 0 && self.node.raft.raft_log.applied >= target {
            self.catching_up = None;
            self.shared.catching_up.store(false, Ordering::Release);
        }
    }

    fn report(&mut self) {
        let leads = self.node.raft.state == StateRole::Leader;
        if leads && !self.led {
            self.store.leases.refresh_all();
            // The empty entry raft appended on election.
            self.term_start = self.node.raft.raft_log.last_index();
        }
        if !leads {
            if let Some((_, tx)) = self.pending_change.take() {
                self.shared.failed.fetch_add(1, Ordering::Relaxed);
                let _ = tx.send(Err("leadership changed before the membership change was applied".into()));
            }
        }
        self.led = leads;
        self.shared.writable.store(self.writable(), Ordering::Release);
        let r = &self.node.raft;
        if r.leader_id != 0 && self.shared.leader.load(Ordering::Relaxed) != r.leader_id {
            self.shared.leader_changes.fetch_add(1, Ordering::Relaxed);
        }
        if !leads {
            self.heartbeats_sent.clear();
        }
        self.shared.pending.store((self.proposed.len() + self.proposed_at.len()) as u64, Ordering::Relaxed);
        self.shared.leader.store(r.leader_id, Ordering::Release);
        self.shared.term.store(r.term, Ordering::Release);
        self.shared.commit.store(r.raft_log.committed, Ordering::Release);
    }
}
