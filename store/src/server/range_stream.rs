//! RangeStream (etcd v3.7): a Range answered in chunks that are read lazily,
//! each when the gRPC stream asks for the next message, at the revision the
//! first chunk was read at. Between chunks the stream holds its revision and
//! the key to go on from, nothing of the result: a reader that stops reading
//! stops the reads (HTTP/2 flow control → tonic stops polling the stream), so
//! its memory is the chunk in flight, not the result (docs/design.md §4).
use std::sync::Arc;

use bytes::Bytes;
use etcd_client::proto::{PbRangeRequest, PbRangeResponse, PbRangeStreamResponse, PbResponseHeader};
use futures::Stream;
use prost::Message;
use tonic::Status;

use super::Ctx;
use crate::auth::AuthInfo;
use crate::mvcc::kvstore::{check_range, header};
use crate::mvcc::kvstore_range::RangeRead;

/// etcd's first chunk limit; later chunks double or halve it (next_limit).
const FIRST_CHUNK: i64 = 10;

/// etcd's adjustChunkLimit: aim each chunk at `target` encoded bytes (the
/// server's --max-request-bytes), doubling the limit below half of it and
/// halving it above twice it; never below 1.
fn next_limit(last: i64, last_size: usize, target: usize) -> i64 {
    let l = if last_size < target / 2 {
        last.saturating_mul(2)
    } else if last_size > target.saturating_mul(2) {
        last / 2
    } else {
        last
    };
    l.max(1)
}

/// etcd's checkRangeStreamRequest: the Range checks, then the two options a
/// stream cannot honour without reading everything first.
pub fn check(req: &PbRangeRequest) -> Result<(), Status> {
    check_range(req)?;
    let default_order = req.sort_order == 0 || (req.sort_target == 0 && req.sort_order == 1);
    if !default_order {
        return Err(Status::unimplemented("RangeStream does not support custom sort orders"));
    }
    if req.min_mod_revision != 0 || req.max_mod_revision != 0 || req.min_create_revision != 0 || req.max_create_revision != 0 {
        return Err(Status::unimplemented("RangeStream does not support revision filters"));
    }
    Ok(())
}

/// What a stream keeps between chunks.
struct Cursor {
    ctx: Arc<Ctx>,
    /// The key the next chunk starts at, and the interval's end.
    next: Vec<u8>,
    end: Vec<u8>,
    keys_only: bool,
    /// The revision every chunk is read at.
    rev: i64,
    /// The final chunk's header revision: the store's revision when the stream began.
    header_rev: i64,
    /// Keys still allowed by the request's limit (i64::MAX without one).
    left: i64,
    sent: i64,
    limit: i64,
    auth: Option<Option<AuthInfo>>,
    state: State,
}

enum State {
    Reading,
    /// The last chunk went out: check the caller's auth revision (etcd's
    /// doSerialize does so after the whole read) and end.
    Finish,
    Done,
}

/// One chunk as read: its keys (refcounts), and for the last one the header, `more`
/// and `count` set on it (`read.more`, `read.count`).
struct Piece {
    read: RangeRead,
    header: Option<PbResponseHeader>,
}

impl Cursor {
    /// Reads the next chunk under the shard locks — no decoding there (`RangeRead`).
    fn read_chunk(&mut self) -> Result<Piece, Status> {
        let store = &self.ctx.store;
        let limit = self.limit.min(self.left).max(1) as usize;
        let mut c = store.range_chunk(&self.next, &self.end, self.rev, limit, self.keys_only)?;
        let more = c.more;
        // A chunk carries its keys only; the last one also the header, more and count.
        c.more = false;
        let n = c.len() as i64;
        self.sent += n;
        self.left = self.left.saturating_sub(n);
        let size = super::range_wire::encoded_len(&c, None);
        if more {
            self.next = c.entries().last().map(|(k, _)| k.to_vec()).unwrap_or_default();
            self.next.push(0);
        }
        let mut header = None;
        if !more || self.left == 0 {
            let rest = if more { store.count_at(&self.next, &self.end, self.rev)? } else { 0 };
            header = self.ctx.header(self.header_rev);
            c.more = more;
            c.count = self.sent + rest;
            self.state = State::Finish;
        } else {
            self.limit = next_limit(limit as i64, size, self.ctx.cfg.max_request_bytes);
        }
        Ok(Piece { read: c, header })
    }

    /// The next chunk, or the end: after the last one, the caller's auth revision is
    /// checked (etcd's doSerialize does so after the whole read).
    fn next_piece(&mut self) -> Option<Result<Piece, Status>> {
        match self.state {
            State::Done => None,
            State::Finish => {
                self.state = State::Done;
                match &self.auth {
                    Some(ai) => self.ctx.auth.check_unchanged(ai.as_ref()).err().map(|e| Err(e.into())),
                    None => None,
                }
            }
            State::Reading => match self.read_chunk() {
                Ok(p) => Some(Ok(p)),
                Err(e) => {
                    self.state = State::Done;
                    Some(Err(e))
                }
            },
        }
    }
}

/// A chunk decoded into the message tonic's encoder writes (decoded on the bulk
/// threads when large).
async fn message(p: Piece) -> Result<PbRangeStreamResponse, Status> {
    let (more, count) = (p.read.more, p.read.count);
    let mut r = super::bulk::decode(p.read).await?;
    r.header = p.header;
    r.more = more;
    r.count = count;
    Ok(PbRangeStreamResponse { range_response: Some(r) })
}

/// A chunk as the lean transport sends it: a RangeStreamResponse framed as a gRPC
/// message (flag, length), encoded from the store's buffers — on the bulk threads when large.
async fn framed(p: Piece) -> Result<Bytes, Status> {
    let bulk = super::bulk::is_bulk(&p.read);
    let encode = move || {
        use super::range_wire::{encoded_len, put_varint, varint_len};
        let n = encoded_len(&p.read, p.header.as_ref());
        let inner = 1 + varint_len(n as u64) + n;
        let mut out = Vec::with_capacity(5 + inner);
        out.push(0);
        out.extend_from_slice(&(inner as u32).to_be_bytes());
        out.push(1 << 3 | 2);
        put_varint(&mut out, n as u64);
        super::range_wire::encode(&p.read, p.header.as_ref(), &mut out);
        Bytes::from(out)
    };
    if !bulk {
        return Ok(encode());
    }
    super::bulk::run(encode).await.ok_or_else(|| Status::internal("bulk read failed"))
}

pub type RangeStream = std::pin::Pin<Box<dyn Stream<Item = Result<PbRangeStreamResponse, Status>> + Send>>;
/// The same stream's messages, framed and encoded (the lean transport's).
pub type FramedStream = std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, Status>> + Send>>;

/// What a stream starts with: a cursor, or (count only) its one message.
enum Start {
    Cursor(Cursor),
    Count(PbRangeResponse),
}

/// Resolves the revision (refused, future or compacted, before any chunk) of an
/// already checked and permitted request.
fn begin(ctx: Arc<Ctx>, req: PbRangeRequest, auth: Option<Option<AuthInfo>>) -> Result<Start, Status> {
    let store = &ctx.store;
    let cur = store.current_rev();
    let r = crate::mvcc::shard::KeyRange::new(&req.key, &req.range_end);
    let rev = store.check_rev_for(&r, req.revision)?.min(cur);
    if req.count_only {
        // One message, as etcd: the count of the whole interval, no keys.
        let count = store.count_at(&req.key, &req.range_end, rev)?;
        if let Some(ai) = &auth {
            ctx.auth.check_unchanged(ai.as_ref())?;
        }
        let mut h = header(cur);
        ctx.fill(&mut h);
        return Ok(Start::Count(PbRangeResponse { header: h, count, ..Default::default() }));
    }
    let left = if req.limit > 0 { req.limit } else { i64::MAX };
    Ok(Start::Cursor(Cursor {
        ctx: ctx.clone(),
        next: req.key,
        end: req.range_end,
        keys_only: req.keys_only,
        rev,
        header_rev: cur,
        left,
        sent: 0,
        limit: FIRST_CHUNK.min(left),
        auth,
        state: State::Reading,
    }))
}

/// Starts a stream for an already checked and permitted request. Each poll reads
/// one chunk: nothing is read ahead of what the client takes.
pub fn start(ctx: Arc<Ctx>, req: PbRangeRequest, auth: Option<Option<AuthInfo>>) -> Result<RangeStream, Status> {
    Ok(match begin(ctx, req, auth)? {
        Start::Count(r) => Box::pin(futures::stream::iter([Ok(PbRangeStreamResponse { range_response: Some(r) })])),
        Start::Cursor(c) => Box::pin(futures::stream::unfold(c, |mut c| async move {
            match c.next_piece()? {
                Ok(p) => Some((message(p).await, c)),
                Err(e) => Some((Err(e), c)),
            }
        })),
    })
}

/// `start`, for the lean transport: the same messages, framed and encoded.
pub fn start_framed(ctx: Arc<Ctx>, req: PbRangeRequest, auth: Option<Option<AuthInfo>>) -> Result<FramedStream, Status> {
    Ok(match begin(ctx, req, auth)? {
        Start::Count(r) => {
            let m = PbRangeStreamResponse { range_response: Some(r) }.encode_to_vec();
            let mut out = Vec::with_capacity(5 + m.len());
            out.push(0);
            out.extend_from_slice(&(m.len() as u32).to_be_bytes());
            out.extend_from_slice(&m);
            Box::pin(futures::stream::iter([Ok(Bytes::from(out))]))
        }
        Start::Cursor(c) => Box::pin(futures::stream::unfold(c, |mut c| async move {
            match c.next_piece()? {
                Ok(p) => Some((framed(p).await, c)),
                Err(e) => Some((Err(e), c)),
            }
        })),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_limit_follows_etcds_rule() {
        let t = 1 << 20;
        assert_eq!(next_limit(10, 1000, t), 20);
        assert_eq!(next_limit(10, t, t), 10);
        assert_eq!(next_limit(10, 3 * t, t), 5);
        assert_eq!(next_limit(1, 3 * t, t), 1);
        assert_eq!(next_limit(i64::MAX, 0, t), i64::MAX);
    }

    #[test]
    fn sort_orders_and_filters_are_refused_as_etcd_does() {
        let ok = PbRangeRequest { key: b"a".to_vec(), sort_order: 1, ..Default::default() };
        assert!(check(&ok).is_ok());
        let sorted = PbRangeRequest { key: b"a".to_vec(), sort_order: 2, ..Default::default() };
        assert_eq!(check(&sorted).unwrap_err().code(), tonic::Code::Unimplemented);
        let by_mod = PbRangeRequest { key: b"a".to_vec(), sort_order: 1, sort_target: 3, ..Default::default() };
        assert_eq!(check(&by_mod).unwrap_err().code(), tonic::Code::Unimplemented);
        let filtered = PbRangeRequest { key: b"a".to_vec(), min_mod_revision: 2, ..Default::default() };
        assert_eq!(check(&filtered).unwrap_err().message(), "RangeStream does not support revision filters");
        let bad = PbRangeRequest { key: b"a".to_vec(), sort_order: 7, ..Default::default() };
        assert_eq!(check(&bad).unwrap_err().message(), "etcdserver: invalid sort option");
    }
}
