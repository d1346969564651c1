//! Raft messages between members over TCP (--listen-peer-urls): one connection
//! per ordered pair of members, opened by the sender, each starting with a
//! handshake that names the cluster, so a peer of another cluster is refused
//! before any message is read.
//!
//! ```text
//! handshake (sender → receiver): "MGNPEER1" | cluster_id:u64 | from:u64 | to:u64   (big-endian)
//! answer    (receiver → sender): status:u8  0 accepted, 1 cluster ID mismatch, 2 not this member,
//!                                            3 the sender was removed from the group (it stops;
//!                                            a removed member's open connections are closed
//!                                            at its next frame, so it reconnects and hears it)
//! then frames (sender → receiver): len:u32 | crc32c(payload):u32 | payload   (little-endian;
//!                                  payload = one raft Message in raft-proto's protobuf;
//!                                  len 0 and crc 0: a keepalive, sent every 200 ms a
//!                                  connection is idle, so every pair of members stays
//!                                  connected and counts each other's link as up)
//!
//! snapshot (a member that must take the sender's state): the handshake with
//!   "MGNSNPQ1" and the raft index of the snapshot (u64 LE), then the sender
//!   writes crate::snapshot::write_stream's bytes and closes (at once, writing
//!   nothing, if it has not applied that index: it restarted empty)
//!
//! forwarded calls over HTTP/2 (a follower's calls that need the leader, other
//!   than the lean forward's): the handshake with "MGNH2FW1", then HTTP/2 as on a
//!   plaintext client connection
//!
//! roster query (a member joining, --initial-cluster-state existing, which
//! knows neither the cluster ID nor its own member ID yet):
//!   "MGNMEMB1" | 0:u64 | 0:u64 | 0:u64  →  status:u8 | len:u32 LE | roster (members.rs), then closed
//! ```
//! A frame that fails its CRC, is longer than `MAX_FRAME` or does not decode
//! ends the connection (the sender reconnects; raft resends what matters); the
//! member goes on. Messages queued for a peer that cannot be reached are dropped
//! past `MAX_QUEUE`: raft retries heartbeats, votes and appends by itself.
//! Every connection is TCP, or TLS over it when the peer URL is https://
//! (peer_tls.rs: etcd's --peer-* flags); the handshake above is the same.
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use protobuf::Message as _;
use raft::prelude::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::members::MemberInfo;
use super::node::Input;
use super::peer_tls::{self, PeerStream, PeerTls};
use super::transport::Transport;
use parking_lot::Mutex;

const MAGIC: &[u8; 8] = b"MGNPEER1";
/// A connection that carries client calls a follower forwards to its leader
/// (the layer above speaks on it: `ForwardHandler`); same handshake.
const FORWARD_MAGIC: &[u8; 8] = b"MGNFWD01";
/// A query for the cluster ID and the members (`roster`).
const ROSTER_MAGIC: &[u8; 8] = b"MGNMEMB1";
/// An HTTP/2 connection carrying client calls a follower forwards to its
/// leader as they came (`connect_h2`; the calls the lean forward does not take).
const H2_MAGIC: &[u8; 8] = b"MGNH2FW1";
/// A request for the store's state (`open_snapshot`).
const SNAPSHOT_MAGIC: &[u8; 8] = b"MGNSNPQ1";
const ACCEPTED: u8 = 0;
const CLUSTER_MISMATCH: u8 = 1;
const NOT_THIS_MEMBER: u8 = 2;
/// The sender was removed from the group (etcd answers its HTTP 410 Gone).
const REMOVED: u8 = 3;
/// What a removed member's peers tell it; it stops on hearing it.
pub const REMOVED_MESSAGE: &str = "the member has been permanently removed from the cluster";
/// An append carries at most 1 MiB of entries (`max_size_per_msg`) plus one entry
/// that may be larger on its own (a request of up to --max-request-bytes).
pub const MAX_FRAME: usize = 64 << 20;
/// What a frame's header may make a reader allocate before its bytes arrive.
const FRAME_RESERVE: usize = 256 << 10;
const MAX_QUEUE: usize = 4096;
/// A peer connection on which no frame arrives for this long is closed (the
/// leader's heartbeats and the answers to them come every tick; a sender with
/// nothing to say reconnects when it has).
const IDLE: Duration = Duration::from_secs(60);
/// Peer connections served at once: a member has one per peer; more are strangers.
const MAX_CONNECTIONS: usize = 256;

/// What the peer listener refused, for metrics and tests.
#[derive(Default)]
pub struct PeerErrors {
    pub cluster_mismatch: AtomicU64,
    pub bad_frames: AtomicU64,
}

/// The sending side: a task per peer that owns its connection, started and
/// ended as the membership changes (`Transport::set_peers`).
pub struct PeerTransport {
    rt: tokio::runtime::Handle,
    cluster_id: u64,
    me: u64,
    /// Each peer's URL (its name resolved at every connection attempt: a
    /// restarted pod comes back at another address under its name), its
    /// sender task's queue and the socket the raft thread may write itself.
    queues: Mutex<HashMap<u64, Link>>,
    pub dropped: Arc<AtomicU64>,
    /// A peer answered that this member was removed from the group.
    removed: Arc<AtomicBool>,
    /// How https:// peer URLs are dialled (None: this member has no peer TLS).
    tls: Option<Arc<PeerTls>>,
}

impl PeerTransport {
    /// A transport whose sender tasks run on `rt`; `peers` (this member
    /// excluded) are reached at once, others once `set_peers` names them.
    pub fn start(rt: &tokio::runtime::Handle, cluster_id: u64, me: u64, peers: &[(u64, String)], tls: Option<Arc<PeerTls>>) -> Arc<PeerTransport> {
        let t = PeerTransport { rt: rt.clone(), cluster_id, me, queues: Mutex::default(), dropped: Arc::default(), removed: Arc::default(), tls };
        for (id, target) in peers {
            t.reach(*id, target.clone());
        }
        Arc::new(t)
    }

    fn reach(&self, id: u64, target: String) {
        let mut queues = self.queues.lock();
        if queues.get(&id).is_some_and(|l| l.target == target) {
            return;
        }
        let (tx, rx) = mpsc::channel(MAX_QUEUE);
        let direct: Arc<Mutex<Direct>> = Arc::default();
        let hs = Handshake { cluster_id: self.cluster_id, from: self.me, to: id };
        self.rt.spawn(send_loop(hs, target.clone(), rx, direct.clone(), self.removed.clone(), self.tls.clone()));
        // A replaced sender's task ends when its queue closes.
        queues.insert(id, Link { target, queue: tx, direct });
    }
}

/// The socket address of a peer URL (a name resolved now, blocking: for
/// binding a listener at start).
pub fn peer_addr(url: &str) -> Result<SocketAddr, String> {
    let (hp, _) = peer_tls::split_url(url)?;
    std::net::ToSocketAddrs::to_socket_addrs(hp).ok().and_then(|mut a| a.next()).ok_or_else(|| format!("peer URL {url:?}: cannot resolve {hp:?}"))
}

impl PeerTransport {
    /// Queues `msgs` for `link`'s task (the lock on its `Direct` held).
    fn queue(&self, link: &Link, d: &mut Direct, msgs: impl IntoIterator<Item = Message>) {
        for m in msgs {
            if link.queue.try_send(Out::Msg(m)).is_err() {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            } else {
                d.busy = true;
            }
        }
    }

    /// Sends one peer's messages of a Ready: written here when its link is
    /// idle and plaintext (`Direct`), else through its task.
    fn send_to(&self, link: &Link, msgs: Vec<Message>, buf: &mut Vec<u8>) {
        let mut d = link.direct.lock();
        let Some(sock) = d.sock.as_ref().filter(|_| !d.busy) else {
            return self.queue(link, &mut d, msgs);
        };
        buf.clear();
        if msgs.iter().any(|m| encode_frame(m, buf).is_err()) {
            return;
        }
        match std::io::Write::write(&mut &*sock, buf) {
            Ok(n) if n == buf.len() => {}
            // The socket took part (or none) of it: the task writes the rest
            // before anything else; if it cannot, the connection must end (a
            // frame cut in the middle), and the task reconnects.
            Ok(n) => self.hand_rest(link, &mut d, buf[n..].to_vec()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => self.hand_rest(link, &mut d, std::mem::take(buf)),
            Err(_) => {
                // The task meets the same error on its next write and reconnects.
                d.sock = None;
                self.dropped.fetch_add(msgs.len() as u64, Ordering::Relaxed);
            }
        }
    }

    fn hand_rest(&self, link: &Link, d: &mut Direct, rest: Vec<u8>) {
        if link.queue.try_send(Out::Raw(rest)).is_ok() {
            d.busy = true;
        } else if let Some(s) = d.sock.take() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Transport for PeerTransport {
    fn send(&self, mut msgs: Vec<Message>) {
        let queues = self.queues.lock();
        // A Ready's messages to one peer go out together, in their order.
        msgs.sort_by_key(|m| m.to);
        let mut buf = Vec::new();
        let mut msgs = msgs.into_iter().peekable();
        while let Some(first) = msgs.next() {
            let to = first.to;
            let mut group = vec![first];
            while let Some(m) = msgs.next_if(|m| m.to == to) {
                group.push(m);
            }
            if let Some(link) = queues.get(&to) {
                self.send_to(link, group, &mut buf);
            }
        }
    }

    fn set_peers(&self, members: &[MemberInfo]) {
        for m in members.iter().filter(|m| m.id != self.me) {
            // A name that does not resolve yet (a pod not yet scheduled) is
            // still reached: its sender retries the lookup with the connection.
            if let Some(url) = m.peer_urls.first().filter(|u| peer_tls::split_url(u).is_ok()) {
                self.reach(m.id, url.clone());
            }
        }
        self.queues.lock().retain(|id, _| members.iter().any(|m| m.id == *id));
    }

    fn removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }
}

/// Serves a forwarding connection once its handshake is accepted (the peer's address beside it).
pub type ForwardHandler = Arc<dyn Fn(PeerStream, SocketAddr) + Send + Sync>;

/// Gives the roster (members.rs) a joining member asks for.
pub type RosterHandler = Arc<dyn Fn() -> Vec<u8> + Send + Sync>;

/// What a peer listener serves besides raft messages.
#[derive(Clone, Default)]
pub struct Extras {
    pub forward: Option<ForwardHandler>,
    pub roster: Option<RosterHandler>,
    /// Writes the store's state to a member that asks (`open_snapshot`).
    pub snapshot: Option<ForwardHandler>,
    /// Whether a member was removed from the group (`Replica::was_removed`).
    pub removed: Option<Arc<dyn Fn(u64) -> bool + Send + Sync>>,
    /// Serves an HTTP/2 connection of forwarded client calls (`connect_h2`).
    pub h2: Option<ForwardHandler>,
}

/// Opens an HTTP/2 connection from member `from` to member `to` for the
/// client calls it forwards (handshake done: what follows is HTTP/2, served
/// by the leader as a plaintext client connection). Over the peer port, so a
/// leader whose client URLs are https only is reached all the same.
pub async fn connect_h2(tls: Option<&PeerTls>, cluster_id: u64, from: u64, to: u64, url: &str) -> std::io::Result<PeerStream> {
    let mut b = Handshake { cluster_id, from, to }.encode();
    b[..8].copy_from_slice(H2_MAGIC);
    Ok(connect_with(&b, tls, url).await?.0)
}

/// Opens member `to`'s stream of its store's state (its `Extras::snapshot`)
/// for a raft snapshot at `index`: the handshake, then the index (u64 LE) the
/// sender must have applied; what follows is crate::snapshot::write_stream's
/// bytes, or nothing if the sender refuses.
pub async fn open_snapshot(tls: Option<&PeerTls>, cluster_id: u64, from: u64, to: u64, url: &str, index: u64) -> std::io::Result<PeerStream> {
    let mut b = Handshake { cluster_id, from, to }.encode();
    b[..8].copy_from_slice(SNAPSHOT_MAGIC);
    let mut s = connect_with(&b, tls, url).await?.0;
    s.write_all(&index.to_le_bytes()).await?;
    Ok(s)
}

/// Asks the member at peer URL `url` for the group's roster (cluster ID and
/// members): how a member joining a running group learns its IDs.
pub async fn roster(tls: Option<&PeerTls>, url: &str) -> std::io::Result<Vec<u8>> {
    let mut b = [0u8; 32];
    b[..8].copy_from_slice(ROSTER_MAGIC);
    let mut s = connect_with(&b, tls, url).await?.0;
    let mut len = [0u8; 4];
    let read = async {
        s.read_exact(&mut len).await?;
        let n = u32::from_le_bytes(len) as usize;
        if n > MAX_FRAME {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "roster longer than the limit"));
        }
        let mut out = Vec::new();
        (&mut s).take(n as u64).read_to_end(&mut out).await?;
        if out.len() != n {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "roster cut short"));
        }
        Ok(out)
    };
    tokio::time::timeout(Duration::from_secs(5), read).await.map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "roster timed out"))?
}

#[derive(Clone, Copy)]
struct Handshake {
    cluster_id: u64,
    from: u64,
    to: u64,
}

/// The way to one peer: its URL, its sender task's queue, and its link's
/// socket for the raft thread's direct writes.
struct Link {
    target: String,
    queue: mpsc::Sender<Out>,
    direct: Arc<Mutex<Direct>>,
}

/// What a sender task writes: raft messages, or the rest of frames the raft
/// thread began writing itself that the socket did not take at once.
enum Out {
    Msg(Message),
    Raw(Vec<u8>),
}

/// A plaintext link's socket, shared by its sender task and the raft thread.
/// While the task has nothing in hand, the raft thread writes a Ready's frames
/// to the peer itself with one non-blocking write: at low rates the hop to a
/// runtime worker (a wake-up, a context switch) was most of a write's cost on
/// the leader. What the socket does not take, and every frame while the task
/// holds some, goes through the task, so the bytes stay in order.
#[derive(Default)]
struct Direct {
    /// A second handle on the connection's socket; None over TLS and while
    /// the task is not connected.
    sock: Option<std::net::TcpStream>,
    /// The task has frames queued or in hand: the raft thread queues too.
    busy: bool,
}

/// Opens a forwarding connection from member `from` to member `to` of
/// `cluster_id` at its peer URL `url`, handshake done.
pub async fn connect_forward(tls: Option<&PeerTls>, cluster_id: u64, from: u64, to: u64, url: &str) -> std::io::Result<PeerStream> {
    let mut b = Handshake { cluster_id, from, to }.encode();
    b[..8].copy_from_slice(FORWARD_MAGIC);
    Ok(connect_with(&b, tls, url).await?.0)
}

impl Handshake {
    fn encode(&self) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[..8].copy_from_slice(MAGIC);
        b[8..16].copy_from_slice(&self.cluster_id.to_be_bytes());
        b[16..24].copy_from_slice(&self.from.to_be_bytes());
        b[24..32].copy_from_slice(&self.to.to_be_bytes());
        b
    }

    fn decode(b: &[u8; 32]) -> Option<Handshake> {
        if ![MAGIC, FORWARD_MAGIC, ROSTER_MAGIC, SNAPSHOT_MAGIC, H2_MAGIC].iter().any(|m| &b[..8] == *m) {
            return None;
        }
        let n = |r: std::ops::Range<usize>| u64::from_be_bytes(b[r].try_into().expect("8 bytes"));
        Some(Handshake { cluster_id: n(8..16), from: n(16..24), to: n(24..32) })
    }
}

async fn send_loop(hs: Handshake, target: String, mut rx: mpsc::Receiver<Out>, direct: Arc<Mutex<Direct>>, removed: Arc<AtomicBool>, tls: Option<Arc<PeerTls>>) {
    let mut backoff = Duration::from_millis(20);
    let mut refused = false;
    loop {
        match connect_with(&hs.encode(), tls.as_deref(), &target).await {
            Ok((stream, sock)) => {
                backoff = Duration::from_millis(20);
                refused = false;
                {
                    let mut d = direct.lock();
                    d.sock = sock;
                    d.busy = !rx.is_empty();
                }
                let r = write_messages(stream, &mut rx, &direct).await;
                direct.lock().sock = None;
                match r {
                    Ok(()) => return, // the transport was dropped
                    Err(_) => continue,
                }
            }
            Err(e) => {
                if e.kind() == std::io::ErrorKind::PermissionDenied && e.to_string() == REMOVED_MESSAGE {
                    removed.store(true, Ordering::Release);
                }
                // Refused, or a TLS or URL error no retry mends: said once per outage.
                let lasting = matches!(e.kind(), std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::InvalidData | std::io::ErrorKind::InvalidInput);
                if lasting && !std::mem::replace(&mut refused, true) {
                    eprintln!("meganode-store: peer {:x} at {target}: {e}", hs.to);
                }
                // What queued while the peer was away is stale: raft resends.
                let _d = direct.lock();
                while rx.try_recv().is_ok() {}
                drop(_d);
                if rx.is_closed() {
                    return;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
        }
    }
}

async fn connect_with(hs: &[u8; 32], tls: Option<&PeerTls>, url: &str) -> std::io::Result<(PeerStream, Option<std::net::TcpStream>)> {
    let (mut s, sock) = peer_tls::dial_with_socket(tls, url).await?;
    s.write_all(hs).await?;
    s.flush().await?;
    let mut status = [0u8; 1];
    tokio::time::timeout(Duration::from_secs(2), s.read_exact(&mut status))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "handshake timed out"))??;
    match status[0] {
        ACCEPTED => Ok((s, sock)),
        CLUSTER_MISMATCH => Err(std::io::Error::new(std::io::ErrorKind::PermissionDenied, "cluster ID mismatch")),
        REMOVED => Err(std::io::Error::new(std::io::ErrorKind::PermissionDenied, REMOVED_MESSAGE)),
        _ => Err(std::io::Error::new(std::io::ErrorKind::PermissionDenied, "the member at this address is not the one named")),
    }
}

/// How often an idle connection carries a keepalive (an empty frame): well
/// within an election timeout, so the receiver counts its peer connected
/// (`Input::PeerAlive`) and never closes it as idle.
const KEEPALIVE: Duration = Duration::from_millis(200);

/// Writes every queued message, flushing when the queue is empty; a keepalive
/// when nothing was queued for `KEEPALIVE`. The raft thread writes to the
/// socket itself only while this task holds nothing (`Direct::busy` false):
/// the task marks itself busy before it writes and idle once everything
/// queued is flushed, both under the lock the raft thread writes under.
async fn write_messages(stream: PeerStream, rx: &mut mpsc::Receiver<Out>, direct: &Mutex<Direct>) -> std::io::Result<()> {
    let mut w = BufWriter::with_capacity(256 << 10, stream);
    let mut frame = Vec::new();
    loop {
        let out = match tokio::time::timeout(KEEPALIVE, rx.recv()).await {
            Ok(Some(out)) => out,
            Ok(None) => return Ok(()),
            Err(_) => {
                {
                    let mut d = direct.lock();
                    // Something is queued (the raft thread began a write): it goes first.
                    if d.busy {
                        continue;
                    }
                    d.busy = true;
                }
                w.write_all(&[0u8; 8]).await?;
                w.flush().await?;
                idle_if_drained(direct, rx);
                continue;
            }
        };
        direct.lock().busy = true;
        let mut next = Some(out);
        while let Some(out) = next {
            match out {
                Out::Msg(m) => {
                    frame.clear();
                    encode_frame(&m, &mut frame)?;
                    w.write_all(&frame).await?;
                }
                Out::Raw(b) => w.write_all(&b).await?,
            }
            next = rx.try_recv().ok();
        }
        w.flush().await?;
        idle_if_drained(direct, rx);
    }
}

/// Lets the raft thread write again if nothing was queued meanwhile.
fn idle_if_drained(direct: &Mutex<Direct>, rx: &mpsc::Receiver<Out>) {
    let mut d = direct.lock();
    if rx.is_empty() {
        d.busy = false;
    }
}

fn encode_frame(m: &Message, out: &mut Vec<u8>) -> std::io::Result<()> {
    let payload = m.write_to_bytes().map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    Ok(())
}

/// Accepts peer connections for member `me` of `cluster_id`, handing each
/// message to the member's driver; TLS first on an https listener (`tls`).
pub async fn serve(listener: TcpListener, tls: Option<Arc<PeerTls>>, cluster_id: u64, me: u64, inbox: Sender<Input>, errors: Arc<PeerErrors>, extras: Extras) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (stream, from) = match listener.accept().await {
            Ok(c) => c,
            Err(_) => {
                // Out of descriptors or the like: do not spin.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let (inbox, errors, extras, tls) = (inbox.clone(), errors.clone(), extras.clone(), tls.clone());
        tokio::spawn(async move {
            match peer_tls::accept(tls.as_deref(), stream).await {
                Ok(s) => serve_conn(s, from, cluster_id, me, inbox, errors, extras).await,
                Err(e) => garbled(&errors, from, &format!("TLS: {e}")),
            }
            drop(slot);
        });
    }
}

async fn serve_conn(mut s: PeerStream, from: SocketAddr, cluster_id: u64, me: u64, inbox: Sender<Input>, errors: Arc<PeerErrors>, extras: Extras) {
    let mut raw = [0u8; 32];
    let read = tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut raw)).await;
    let forwarding = &raw[..8] == FORWARD_MAGIC;
    let Some(hs) = read.ok().and_then(|r| r.ok()).and_then(|_| Handshake::decode(&raw)) else {
        errors.bad_frames.fetch_add(1, Ordering::Relaxed);
        return;
    };
    if &raw[..8] == ROSTER_MAGIC {
        let Some(roster) = extras.roster else {
            let _ = s.write_all(&[NOT_THIS_MEMBER]).await;
            let _ = s.flush().await;
            return;
        };
        let body = roster();
        let mut out = vec![ACCEPTED];
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&body);
        let _ = s.write_all(&out).await;
        let _ = s.shutdown().await;
        return;
    }
    let snapshot = &raw[..8] == SNAPSHOT_MAGIC;
    let h2 = &raw[..8] == H2_MAGIC;
    let forward = if snapshot {
        extras.snapshot
    } else if h2 {
        extras.h2
    } else {
        extras.forward
    };
    let status = if hs.cluster_id != cluster_id {
        errors.cluster_mismatch.fetch_add(1, Ordering::Relaxed);
        eprintln!(
            "meganode-store: rejected peer {:x} at {from}: request cluster ID mismatch (local {cluster_id:x}, remote {:x})",
            hs.from, hs.cluster_id
        );
        CLUSTER_MISMATCH
    } else if hs.to != me {
        NOT_THIS_MEMBER
    } else if extras.removed.as_ref().is_some_and(|r| r(hs.from)) {
        REMOVED
    } else {
        ACCEPTED
    };
    let forwarding = forwarding || snapshot || h2;
    let status = if forwarding && forward.is_none() { NOT_THIS_MEMBER } else { status };
    if s.write_all(&[status]).await.is_err() || s.flush().await.is_err() || status != ACCEPTED {
        return;
    }
    if forwarding {
        if let Some(f) = forward {
            f(s, from);
        }
        return;
    }
    let mut r = tokio::io::BufReader::with_capacity(256 << 10, s);
    if inbox.send(Input::PeerAlive(hs.from)).is_err() {
        return;
    }
    loop {
        let mut head = [0u8; 8];
        match tokio::time::timeout(IDLE, r.read_exact(&mut head)).await {
            Ok(Ok(_)) => {}
            // Closed between frames: the sender's process ended (a crash closes
            // its sockets at once) or it is reconnecting; the driver may start an
            // election early if it was the leader (`Input::PeerClosed`).
            Ok(Err(_)) => {
                let _ = inbox.send(Input::PeerClosed(hs.from));
                return;
            }
            Err(_) => return,
        }
        let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
        if extras.removed.as_ref().is_some_and(|r| r(hs.from)) {
            // Closed: the sender reconnects and its handshake is answered REMOVED.
            return;
        }
        if len == 0 {
            // A keepalive (raft messages are never empty: they name both members).
            if crc != 0 {
                return garbled(&errors, from, "a keepalive with a checksum");
            }
            if inbox.send(Input::PeerAlive(hs.from)).is_err() {
                return;
            }
            continue;
        }
        if len > MAX_FRAME {
            return garbled(&errors, from, "frame longer than the limit");
        }
        // Sized from the header up to FRAME_RESERVE, grown past it as the bytes
        // arrive: a header alone holds little memory. A buffer per frame, so
        // that the entries parsed from it share it instead of each copying
        // its data out.
        let mut payload = Vec::with_capacity(len.min(FRAME_RESERVE));
        let mut body = (&mut r).take(len as u64);
        if !matches!(tokio::time::timeout(IDLE, body.read_to_end(&mut payload)).await, Ok(Ok(n)) if n == len) {
            return;
        }
        if crc32c::crc32c(&payload) != crc {
            return garbled(&errors, from, "checksum mismatch");
        }
        let Ok(m) = Message::parse_from_carllerche_bytes(&Bytes::from(payload)) else {
            return garbled(&errors, from, "not a raft message");
        };
        // A message must come from the member that opened the connection, for this one.
        if m.from != hs.from || m.to != me {
            return garbled(&errors, from, "message for or from another member");
        }
        if inbox.send(Input::Raft(m)).is_err() {
            return;
        }
    }
}

fn garbled(errors: &PeerErrors, from: SocketAddr, why: &str) {
    errors.bad_frames.fetch_add(1, Ordering::Relaxed);
    eprintln!("meganode-store: dropped the peer connection from {from}: {why}");
}
