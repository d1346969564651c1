//! The lean forward: a follower's Put, DeleteRange and Txn reach the leader as
//! their message bytes over one TCP connection per leader (opened with the peer
//! handshake, `replication::peer::connect_forward`), and the leader runs them
//! through the same `unary::call` its own clients' calls take. The HTTP/2
//! forward (`server::forward`) tripled a forwarded put's CPU (tonic client,
//! axum, a second HTTP/2 server); it stays for every other call that needs the
//! leader.
//!
//! ```text
//! request  (follower → leader): len:u32 | id:u64 | method:u8 | timeout_ms:u32 | token_len:u16 | token | message
//! response (leader → follower): len:u32 | id:u64 | code:u8 | body
//!   code 0: body = the answer's message; 255: not the leader, not run (sent again to
//!   the next one); else a gRPC code, body = its message (UTF-8)
//! ```
//! (integers little-endian; `len` counts what follows it.) A call in flight
//! when the connection breaks may or may not have run: etcd's answer to a
//! proposal whose leader failed.
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::io::AsyncWrite;
use tokio::sync::{mpsc, oneshot};
use tonic::{Code, Status};

use super::unary::{self, Meta, Method, Reply, Services};
use crate::errors::StoreError;
use crate::replication::peer::{self, ForwardHandler};
use crate::replication::peer_tls::PeerStream;
use crate::replication::Replica;

const NOT_LEADER: u8 = 255;
/// A forwarded call's message is at most the decoder's limit; a frame above this is garbage.
const MAX_FRAME: usize = 256 << 20;

fn method_byte(m: Method) -> u8 {
    match m {
        Method::Put => 1,
        Method::DeleteRange => 2,
        Method::Txn => 3,
        _ => 0,
    }
}

fn method_of(b: u8) -> Option<Method> {
    Some(match b {
        1 => Method::Put,
        2 => Method::DeleteRange,
        3 => Method::Txn,
        _ => return None,
    })
}

enum Answer {
    Ok(Bytes),
    /// The leader did not run it (not the leader any more), or it was never sent.
    NotRun,
    Err(Status),
}

/// One connection to a leader: frames go out through the writer task; answers
/// come back by call ID.
struct Link {
    leader: u64,
    out: mpsc::UnboundedSender<Vec<u8>>,
    pending: Arc<Mutex<HashMap<u64, oneshot::Sender<Answer>>>>,
    next: AtomicU64,
    dead: Arc<AtomicBool>,
}

/// This process's link to its leader (a process is one member).
static LINK: Mutex<Option<Arc<Link>>> = Mutex::new(None);

impl Link {
    async fn open(s: &Services, r: &Replica, leader: u64) -> Option<Arc<Link>> {
        let m = r.members().into_iter().find(|m| m.id == leader)?;
        let tls = s.ctx.peer_tls.get().map(|t| &**t);
        let stream = peer::connect_forward(tls, s.ctx.cluster_id, s.ctx.member_id, leader, m.peer_urls.first()?).await.ok()?;
        let (rd, wr) = tokio::io::split(stream);
        let dead: Arc<AtomicBool> = Arc::default();
        let out = spawn_writer(wr, Some(dead.clone()));
        let link = Arc::new(Link { leader, out, pending: Arc::default(), next: AtomicU64::new(1), dead });
        let (pending, dead) = (link.pending.clone(), link.dead.clone());
        tokio::spawn(async move {
            let mut r = tokio::io::BufReader::with_capacity(64 << 10, rd);
            while let Some((id, code, body)) = read_frame(&mut r).await {
                let Some(tx) = pending.lock().remove(&id) else { continue };
                let a = match code {
                    0 => Answer::Ok(body),
                    NOT_LEADER => Answer::NotRun,
                    c => Answer::Err(Status::new(Code::from_i32(c as i32), String::from_utf8_lossy(&body).into_owned())),
                };
                let _ = tx.send(a);
            }
            dead.store(true, Ordering::Release);
            // Calls sent and not answered: their leader may have run them.
            for (_, tx) in pending.lock().drain() {
                let _ = tx.send(Answer::Err(Status::unavailable("etcdserver: request timed out, possibly due to previous leader failure")));
            }
        });
        Some(link)
    }

    async fn call(&self, method: Method, msg: &Bytes, meta: &Meta) -> Answer {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let token = meta.token.as_deref().or(meta.authorization.as_deref()).unwrap_or("").as_bytes();
        let mut f = Vec::with_capacity(4 + 8 + 1 + 4 + 2 + token.len() + msg.len());
        f.extend_from_slice(&0u32.to_le_bytes());
        f.extend_from_slice(&id.to_le_bytes());
        f.push(method_byte(method));
        f.extend_from_slice(&(meta.timeout.map_or(0, |t| t.as_millis().clamp(1, u32::MAX as u128) as u32)).to_le_bytes());
        f.extend_from_slice(&(token.len().min(u16::MAX as usize) as u16).to_le_bytes());
        f.extend_from_slice(&token[..token.len().min(u16::MAX as usize)]);
        f.extend_from_slice(msg);
        let len = (f.len() - 4) as u32;
        f[..4].copy_from_slice(&len.to_le_bytes());
        let (tx, rx) = oneshot::channel();
        self.pending.lock().insert(id, tx);
        if self.dead.load(Ordering::Acquire) || self.out.send(f).is_err() {
            self.pending.lock().remove(&id);
            return Answer::NotRun;
        }
        rx.await.unwrap_or(Answer::NotRun)
    }
}

/// A task writing the frames sent to it, flushing when none wait; on a write
/// error it stops and sets `dead`.
fn spawn_writer(wr: impl AsyncWrite + Unpin + Send + 'static, dead: Option<Arc<AtomicBool>>) -> mpsc::UnboundedSender<Vec<u8>> {
    let (out, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
    tokio::spawn(async move {
        let mut w = BufWriter::with_capacity(64 << 10, wr);
        while let Some(f) = rx.recv().await {
            let mut next = Some(f);
            let mut ok = true;
            loop {
                while let Some(f) = next {
                    ok = w.write_all(&f).await.is_ok();
                    next = if ok { rx.try_recv().ok() } else { None };
                }
                // The answers of one applied batch are sent by tasks that run one after
                // another on this worker, and a task woken by another runs next (tokio's
                // LIFO slot): without this yield the writer ran, and flushed, after each
                // answer. Yielding once lets the rest of the batch queue theirs: one send.
                if !ok {
                    break;
                }
                tokio::task::yield_now().await;
                next = rx.try_recv().ok();
                if next.is_none() {
                    break;
                }
            }
            if !ok || w.flush().await.is_err() {
                if let Some(d) = &dead {
                    d.store(true, Ordering::Release);
                }
                return;
            }
        }
    });
    out
}

async fn read_frame<R: AsyncReadExt + Unpin>(r: &mut R) -> Option<(u64, u8, Bytes)> {
    let len = r.read_u32_le().await.ok()? as usize;
    if !(9..=MAX_FRAME).contains(&len) {
        return None;
    }
    let mut b = BytesMut::zeroed(len);
    r.read_exact(&mut b).await.ok()?;
    let id = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
    let code = b[8];
    Some((id, code, b.freeze().slice(9..)))
}

/// Held while a link is opened: calls that find none wait for the one being
/// opened instead of each opening their own (a thousand clients' first calls
/// at once overflowed the leader's accept queue, and a dropped SYN waits 1 s).
static OPENING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn link(s: &Services, r: &Replica, leader: u64) -> Option<Arc<Link>> {
    let current = || LINK.lock().as_ref().filter(|l| l.leader == leader && !l.dead.load(Ordering::Acquire)).cloned();
    if let Some(l) = current() {
        return Some(l);
    }
    let _one = OPENING.lock().await;
    if let Some(l) = current() {
        return Some(l);
    }
    let l = Link::open(s, r, leader).await?;
    let mut cur = LINK.lock();
    match cur.as_ref() {
        Some(c) if c.leader == leader && !c.dead.load(Ordering::Acquire) => Some(c.clone()),
        _ => {
            *cur = Some(l.clone());
            Some(l)
        }
    }
}

/// A write on a replicated member: run here once this member is the writable
/// leader, else sent to the leader (waiting out an election, up to etcd's
/// request timeout).
pub async fn call(s: Services, method: Method, msg: Bytes, meta: Meta) -> Result<Reply, Status> {
    let r = s.ctx.replica.get().cloned().ok_or_else(|| Status::internal("forwarding on a single member"))?;
    if r.is_learner() {
        return Err(Status::failed_precondition("etcdserver: rpc not supported for learner"));
    }
    let deadline = tokio::time::Instant::now() + crate::server::forward::REQUEST_TIMEOUT;
    loop {
        if r.writable() {
            return unary::call_local(&s, method, msg, meta).0.await;
        }
        if r.error().is_some() {
            return Err(Status::unavailable("etcdserver: this member left the group (see its log)"));
        }
        let leader = r.leader();
        if leader != 0 && leader != r.id() {
            if let Some(l) = link(&s, &r, leader).await {
                match l.call(method, &msg, &meta).await {
                    Answer::Ok(body) => {
                        applied_here(&s, &body).await;
                        let mut framed = Vec::with_capacity(5 + body.len());
                        framed.push(0);
                        framed.extend_from_slice(&(body.len() as u32).to_be_bytes());
                        framed.extend_from_slice(&body);
                        return Ok(Reply::Framed(Bytes::from(framed)));
                    }
                    Answer::Err(st) => return Err(st),
                    Answer::NotRun => {}
                }
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(StoreError::Timeout.into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits, briefly, until this member applied the write whose answer `body`
/// is (its header's revision), as etcd's member answers a write it took once
/// it applied it: a read here after the answer sees the write. The leader
/// tells the commit at once while forwarded calls run (`Replica::forwarded_call`).
async fn applied_here(s: &Services, body: &[u8]) {
    let Ok(h) = <crate::server::HeaderOnly as prost::Message>::decode(body) else { return };
    let Some(rev) = h.header.map(|h| h.revision) else { return };
    let _ = tokio::time::timeout(APPLY_WAIT, s.ctx.store.wait_visible(rev)).await;
}

/// How long a follower waits to apply a forwarded write before answering
/// anyway (it is committed: a member cut off from its leader meanwhile).
const APPLY_WAIT: Duration = Duration::from_secs(1);

/// The leader's side: serves a follower's forwarding connection.
pub fn handler(services: Services) -> ForwardHandler {
    Arc::new(move |stream: PeerStream, _| {
        let s = services.clone();
        tokio::spawn(serve(stream, s));
    })
}

async fn serve(stream: PeerStream, s: Services) {
    let (rd, wr) = tokio::io::split(stream);
    let out = spawn_writer(wr, None);
    let mut r = tokio::io::BufReader::with_capacity(64 << 10, rd);
    loop {
        let Ok(len) = r.read_u32_le().await else { return };
        let len = len as usize;
        if !(19..=MAX_FRAME).contains(&len) {
            return;
        }
        let mut b = BytesMut::zeroed(len);
        if r.read_exact(&mut b).await.is_err() {
            return;
        }
        let b = b.freeze();
        let id = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
        let method = method_of(b[8]);
        let timeout = u32::from_le_bytes(b[9..13].try_into().expect("4 bytes"));
        let tlen = u16::from_le_bytes(b[13..15].try_into().expect("2 bytes")) as usize;
        if 15 + tlen > b.len() {
            return;
        }
        let token = (tlen > 0).then(|| String::from_utf8_lossy(&b[15..15 + tlen]).into_owned());
        let msg = b.slice(15 + tlen..);
        let (s, out) = (s.clone(), out.clone());
        tokio::spawn(async move {
            let answer = match method {
                // Only a writable leader runs it: elsewhere it would take a revision the group does not give it.
                Some(m) if s.ctx.replica.get().is_some_and(|r| r.writable()) => {
                    let _forwarded = s.ctx.replica.get().map(|r| r.forwarded_call());
                    let meta = Meta { token, authorization: None, timeout: (timeout > 0).then(|| Duration::from_millis(timeout as u64)), client_cn: None };
                    match unary::call_local(&s, m, msg, meta).0.await {
                        Ok(reply) => {
                            let mut body = Vec::with_capacity(reply.encoded_len());
                            reply.encode(&mut body);
                            (0u8, body)
                        }
                        Err(st) => (st.code() as i32 as u8, st.message().as_bytes().to_vec()),
                    }
                }
                Some(_) => (NOT_LEADER, Vec::new()),
                None => (Code::Unimplemented as i32 as u8, b"meganode-store: not a forwardable method".to_vec()),
            };
            let mut f = Vec::with_capacity(13 + answer.1.len());
            f.extend_from_slice(&((9 + answer.1.len()) as u32).to_le_bytes());
            f.extend_from_slice(&id.to_le_bytes());
            f.push(answer.0);
            f.extend_from_slice(&answer.1);
            let _ = out.send(f);
        });
    }
}
