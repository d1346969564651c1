//! How raft messages travel between members: a small trait the driver calls
//! with each Ready's messages, so consensus never knows the wire. The peer
//! listener (gRPC over --listen-peer-urls) is planned (docs/design.md §10);
//! `MemNetwork` joins members inside one process (tests), and can cut one off.
use std::collections::{HashMap, HashSet};
use std::sync::mpsc::Sender;

use parking_lot::Mutex;
use raft::prelude::Message;

use super::node::Input;

pub trait Transport: Send + Sync + 'static {
    /// Sends each message to its `to` member; best effort (raft retries).
    fn send(&self, msgs: Vec<Message>);

    /// The group's members as this member applied them (itself included):
    /// where to reach each. Called at start and after each membership change.
    fn set_peers(&self, _members: &[super::members::MemberInfo]) {}

    /// Whether a peer said this member was removed from the group (a member
    /// removed while it was cut off never applies its own removal).
    fn removed(&self) -> bool {
        false
    }
}

/// Members of one process, each reached through its driver's inbox.
#[derive(Default)]
pub struct MemNetwork {
    inboxes: Mutex<HashMap<u64, Sender<Input>>>,
    /// Members whose traffic, both ways, is dropped.
    cut: Mutex<HashSet<u64>>,
}

impl MemNetwork {
    pub fn join(&self, id: u64, inbox: Sender<Input>) {
        self.inboxes.lock().insert(id, inbox);
    }

    /// Drops every message from or to `id` until `heal`.
    pub fn cut(&self, id: u64) {
        self.cut.lock().insert(id);
    }

    pub fn heal(&self, id: u64) {
        self.cut.lock().remove(&id);
    }
}

impl Transport for MemNetwork {
    fn send(&self, msgs: Vec<Message>) {
        let cut = self.cut.lock().clone();
        let inboxes = self.inboxes.lock();
        for m in msgs {
            if cut.contains(&m.from) || cut.contains(&m.to) {
                continue;
            }
            if let Some(inbox) = inboxes.get(&m.to) {
                let _ = inbox.send(Input::Raft(m));
            }
        }
    }
}
