//! The Txn method's request decoder. etcd's Go decoder has no nesting limit,
//! while prost's stops at 100 nested messages: a txn nested in a txn costs two
//! (TxnRequest, RequestOp), so a nest of 50 levels was refused with Internal
//! where etcd runs it. etcd's own check then caps the depth: the 128-op budget
//! is shared down the nesting (see `check_txn`), so no nest deeper than
//! MAX_TXN_OPS + 1 levels passes, and no check looks below MAX_TXN_OPS + 2.
//!
//! This decoder reads TxnRequest and RequestOp itself (leaf messages go to
//! prost) and keeps DECODED_DEPTH levels, well past what any check looks at.
//! A deeper nest is still read to the end, without recursion, so malformed
//! input is refused as etcd refuses it, but it is not kept: the request is
//! marked `truncated`, and etcd's check refuses it before it could matter.
//! Nothing here, in the checks or in dropping the request recurses more than
//! DECODED_DEPTH levels, however deep the input nests.
use bytes::Buf;
use etcd_client::proto::{
    PbCompare, PbDeleteRequest, PbPutRequest, PbRangeRequest, PbTxnOpRequest, PbTxnRequest,
    PbTxnRequestOp, PbTxnResponse,
};
use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;

/// Txn levels kept; deeper levels are validated and dropped.
pub const DECODED_DEPTH: usize = 2 * crate::mvcc::kvstore_txn::MAX_TXN_OPS;

/// A decoded Txn request with what the limits need to know about its wire form.
#[derive(Debug, Default)]
pub struct TxnCall {
    pub req: PbTxnRequest,
    /// The message's size on the wire (unknown fields included, as etcd's
    /// proposal carries them).
    pub wire_len: usize,
    /// Levels below DECODED_DEPTH were dropped.
    pub truncated: bool,
}

#[derive(Debug, PartialEq, Eq)]
pub struct WireError(pub String);

type Res<T> = Result<T, WireError>;

fn err<T>(m: &str) -> Res<T> {
    Err(WireError(m.to_string()))
}

fn varint(b: &mut &[u8]) -> Res<u64> {
    let mut v = 0u64;
    for i in 0..10 {
        let Some((&x, rest)) = b.split_first() else {
            return err("unexpected end of input in a varint");
        };
        *b = rest;
        v |= u64::from(x & 0x7f) << (7 * i);
        if x < 0x80 {
            return Ok(v);
        }
    }
    err("varint overflow")
}

/// (field number, wire type)
fn key(b: &mut &[u8]) -> Res<(u64, u8)> {
    let k = varint(b)?;
    let (field, wt) = (k >> 3, (k & 7) as u8);
    if field == 0 {
        return err("illegal tag 0");
    }
    if wt == 4 {
        return err("end group for a non-group");
    }
    Ok((field, wt))
}

fn take<'a>(b: &mut &'a [u8], n: u64) -> Res<&'a [u8]> {
    if n > b.len() as u64 {
        return err("unexpected end of input");
    }
    let (head, rest) = b.split_at(n as usize);
    *b = rest;
    Ok(head)
}

fn length_delimited<'a>(b: &mut &'a [u8], wt: u8) -> Res<&'a [u8]> {
    if wt != 2 {
        return err("wrong wire type for a message field");
    }
    let n = varint(b)?;
    take(b, n)
}

/// Skips an unknown field, groups included, without recursion.
fn skip(b: &mut &[u8], wt: u8) -> Res<()> {
    let mut depth = 0usize;
    let mut wt = wt;
    loop {
        match wt {
            0 => {
                varint(b)?;
            }
            1 => {
                take(b, 8)?;
            }
            2 => {
                let n = varint(b)?;
                take(b, n)?;
            }
            3 => depth += 1,
            4 => {
                if depth == 0 {
                    return err("unexpected end group");
                }
                depth -= 1;
            }
            5 => {
                take(b, 4)?;
            }
            _ => return err("illegal wire type"),
        }
        if depth == 0 {
            return Ok(());
        }
        let k = varint(b)?;
        if k >> 3 == 0 {
            return err("illegal tag 0");
        }
        wt = (k & 7) as u8;
    }
}

fn leaf<M: Message + Default>(b: &[u8]) -> Res<M> {
    M::decode(b).map_err(|e| WireError(e.to_string()))
}

fn txn(mut b: &[u8], depth: usize, truncated: &mut bool) -> Res<PbTxnRequest> {
    let mut t = PbTxnRequest::default();
    while !b.is_empty() {
        let (field, wt) = key(&mut b)?;
        match field {
            1 => t
                .compare
                .push(leaf::<PbCompare>(length_delimited(&mut b, wt)?)?),
            2 => t
                .success
                .push(op(length_delimited(&mut b, wt)?, depth, truncated)?),
            3 => t
                .failure
                .push(op(length_delimited(&mut b, wt)?, depth, truncated)?),
            _ => skip(&mut b, wt)?,
        }
    }
    Ok(t)
}

/// A RequestOp of a txn at `depth`. Like etcd's decoder, a later member of
/// the oneof replaces an earlier one (no merge).
fn op(mut b: &[u8], depth: usize, truncated: &mut bool) -> Res<PbTxnRequestOp> {
    let mut o = PbTxnRequestOp::default();
    while !b.is_empty() {
        let (field, wt) = key(&mut b)?;
        o.request = Some(match field {
            1 => {
                PbTxnOpRequest::RequestRange(leaf::<PbRangeRequest>(length_delimited(&mut b, wt)?)?)
            }
            2 => PbTxnOpRequest::RequestPut(leaf::<PbPutRequest>(length_delimited(&mut b, wt)?)?),
            3 => PbTxnOpRequest::RequestDeleteRange(leaf::<PbDeleteRequest>(length_delimited(
                &mut b, wt,
            )?)?),
            4 => {
                let inner = length_delimited(&mut b, wt)?;
                if depth + 1 >= DECODED_DEPTH {
                    validate_deep(inner)?;
                    *truncated = true;
                    PbTxnOpRequest::RequestTxn(PbTxnRequest::default())
                } else {
                    PbTxnOpRequest::RequestTxn(txn(inner, depth + 1, truncated)?)
                }
            }
            _ => {
                skip(&mut b, wt)?;
                continue;
            }
        });
    }
    Ok(o)
}

/// Reads a TxnRequest of any depth with an explicit stack: every field
/// checked as `txn` and `op` check it, nothing kept.
fn validate_deep(body: &[u8]) -> Res<()> {
    #[derive(Clone, Copy)]
    enum Kind {
        Txn,
        Op,
    }
    // Each entry: what is being read and the bytes of it left after the current child.
    let mut stack: Vec<(Kind, &[u8])> = vec![(Kind::Txn, body)];
    while let Some((kind, mut b)) = stack.pop() {
        if b.is_empty() {
            continue;
        }
        let (field, wt) = key(&mut b)?;
        let child = match (kind, field) {
            (Kind::Txn, 1) => {
                leaf::<PbCompare>(length_delimited(&mut b, wt)?)?;
                None
            }
            (Kind::Txn, 2 | 3) => Some((Kind::Op, length_delimited(&mut b, wt)?)),
            (Kind::Op, 1) => {
                leaf::<PbRangeRequest>(length_delimited(&mut b, wt)?)?;
                None
            }
            (Kind::Op, 2) => {
                leaf::<PbPutRequest>(length_delimited(&mut b, wt)?)?;
                None
            }
            (Kind::Op, 3) => {
                leaf::<PbDeleteRequest>(length_delimited(&mut b, wt)?)?;
                None
            }
            (Kind::Op, 4) => Some((Kind::Txn, length_delimited(&mut b, wt)?)),
            _ => {
                skip(&mut b, wt)?;
                None
            }
        };
        stack.push((kind, b));
        if let Some(c) = child {
            stack.push(c);
        }
    }
    Ok(())
}

/// Decodes a TxnRequest as etcd does, keeping DECODED_DEPTH levels.
pub fn decode_txn(b: &[u8]) -> Res<TxnCall> {
    let mut truncated = false;
    let req = txn(b, 0, &mut truncated)?;
    Ok(TxnCall {
        req,
        wire_len: b.len(),
        truncated,
    })
}

/// The codec of the Txn method: this decoder, prost's encoder. The decoder
/// first applies gRPC's receive limit (before decoding, as grpc-go does).
#[derive(Clone, Copy, Debug)]
pub struct TxnCodec {
    pub grpc_limit: usize,
}

pub struct TxnEncoder;

impl Encoder for TxnEncoder {
    type Item = PbTxnResponse;
    type Error = Status;

    fn encode(&mut self, item: PbTxnResponse, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(dst)
            .map_err(|e| Status::internal(e.to_string()))
    }
}

pub struct TxnDecoder {
    grpc_limit: usize,
}

impl Decoder for TxnDecoder {
    type Item = TxnCall;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<TxnCall>, Status> {
        let n = src.remaining();
        if n > self.grpc_limit {
            return Err(super::grpc_too_large(n, self.grpc_limit));
        }
        let bytes = src.copy_to_bytes(n);
        decode_txn(&bytes)
            .map(Some)
            .map_err(|e| Status::internal(format!("failed to decode TxnRequest: {}", e.0)))
    }
}

impl Codec for TxnCodec {
    type Encode = PbTxnResponse;
    type Decode = TxnCall;
    type Encoder = TxnEncoder;
    type Decoder = TxnDecoder;

    fn encoder(&mut self) -> TxnEncoder {
        TxnEncoder
    }

    fn decoder(&mut self) -> TxnDecoder {
        TxnDecoder {
            grpc_limit: self.grpc_limit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::StoreError;
    use crate::mvcc::kvstore_txn::check_txn;

    fn nest(depth: usize, leaf: Option<PbTxnRequestOp>) -> PbTxnRequest {
        let mut t = PbTxnRequest {
            success: leaf.into_iter().collect(),
            ..Default::default()
        };
        for _ in 1..depth {
            t = PbTxnRequest {
                success: vec![PbTxnRequestOp {
                    request: Some(PbTxnOpRequest::RequestTxn(t)),
                }],
                ..Default::default()
            };
        }
        t
    }

    /// The wire form of a nest, written outside in with the lengths measured
    /// first (linear: prost's encoder re-measures every level, and recurses).
    fn nest_bytes(depth: usize) -> Vec<u8> {
        let vl = |n: usize| prost::encoding::encoded_len_varint(n as u64);
        let range = PbRangeRequest {
            key: b"k".to_vec(),
            ..Default::default()
        }
        .encode_to_vec();
        let leaf_op = 1 + vl(range.len()) + range.len();
        // txn_len[i]: the body length of the txn at level i + 1 counted from the inside.
        let mut txn_len = vec![1 + vl(leaf_op) + leaf_op];
        let mut op_len = vec![leaf_op];
        for i in 1..depth {
            let op = 1 + vl(txn_len[i - 1]) + txn_len[i - 1];
            op_len.push(op);
            txn_len.push(1 + vl(op) + op);
        }
        let mut out = Vec::with_capacity(txn_len[depth - 1]);
        for i in (1..depth).rev() {
            out.push((2 << 3) | 2);
            prost::encoding::encode_varint(op_len[i] as u64, &mut out);
            out.push((4 << 3) | 2);
            prost::encoding::encode_varint(txn_len[i - 1] as u64, &mut out);
        }
        out.push((2 << 3) | 2);
        prost::encoding::encode_varint(leaf_op as u64, &mut out);
        out.push((1 << 3) | 2);
        prost::encoding::encode_varint(range.len() as u64, &mut out);
        out.extend_from_slice(&range);
        assert_eq!(out.len(), txn_len[depth - 1]);
        out
    }

    fn depth_of(t: &PbTxnRequest) -> usize {
        let mut d = 1;
        let mut t = t;
        while let Some(PbTxnOpRequest::RequestTxn(n)) =
            t.success.first().and_then(|o| o.request.as_ref())
        {
            d += 1;
            t = n;
        }
        d
    }

    #[test]
    fn decodes_what_prost_encodes() {
        let mut t = nest(
            3,
            Some(PbTxnRequestOp {
                request: Some(PbTxnOpRequest::RequestPut(PbPutRequest {
                    key: b"a".to_vec(),
                    value: b"v".to_vec(),
                    lease: 7,
                    ..Default::default()
                })),
            }),
        );
        t.compare.push(PbCompare {
            key: b"a".to_vec(),
            result: 1,
            target: 2,
            ..Default::default()
        });
        t.failure.push(PbTxnRequestOp {
            request: Some(PbTxnOpRequest::RequestDeleteRange(PbDeleteRequest {
                key: b"d".to_vec(),
                range_end: b"e".to_vec(),
                prev_kv: true,
            })),
        });
        let bytes = t.encode_to_vec();
        let got = decode_txn(&bytes).unwrap();
        assert_eq!(got.req, t);
        assert_eq!((got.wire_len, got.truncated), (bytes.len(), false));
        assert_eq!(
            nest_bytes(5),
            nest(
                5,
                Some(PbTxnRequestOp {
                    request: Some(PbTxnOpRequest::RequestRange(PbRangeRequest {
                        key: b"k".to_vec(),
                        ..Default::default()
                    }))
                })
            )
            .encode_to_vec()
        );
    }

    /// prost refuses 90 levels (its limit is 100 messages); etcd takes up to
    /// 128 with one op each.
    #[test]
    fn nests_etcd_accepts_are_decoded_whole() {
        let bytes = nest_bytes(128);
        assert!(
            PbTxnRequest::decode(&bytes[..]).is_err(),
            "prost's own limit is the reason for this decoder"
        );
        let got = decode_txn(&bytes).unwrap();
        assert!(!got.truncated);
        assert_eq!(depth_of(&got.req), 128);
        assert_eq!(check_txn(&got.req), Ok(()));
        let got = decode_txn(&nest_bytes(129)).unwrap();
        assert_eq!(check_txn(&got.req), Err(StoreError::TooManyOps));
    }

    /// A nest far deeper than any stack could recurse through is read to the
    /// end, kept to DECODED_DEPTH levels, refused by the check, and dropped.
    #[test]
    fn very_deep_nests_are_cut_not_recursed() {
        let bytes = nest_bytes(300_000);
        let got = decode_txn(&bytes).unwrap();
        assert!(got.truncated);
        // The kept levels, then an empty txn where the rest was dropped.
        assert_eq!(depth_of(&got.req), DECODED_DEPTH + 1);
        assert_eq!(check_txn(&got.req), Err(StoreError::TooManyOps));
        // Malformed far down: refused as a whole, as etcd's decoder does.
        let mut bad = bytes.clone();
        let n = bad.len();
        bad[n - 3] = 0x07; // an illegal wire type inside the innermost range
        assert!(decode_txn(&bad).is_err());
        // Groups in unknown fields nest without recursion too.
        let mut groups = Vec::new();
        for _ in 0..100_000 {
            groups.push((9 << 3) | 3);
        }
        for _ in 0..100_000 {
            groups.push((9 << 3) | 4);
        }
        assert_eq!(decode_txn(&groups).unwrap().req, PbTxnRequest::default());
        assert!(decode_txn(&groups[..groups.len() - 1]).is_err());
    }

    #[test]
    fn a_later_oneof_member_replaces_an_earlier_one() {
        let put = PbTxnRequestOp {
            request: Some(PbTxnOpRequest::RequestPut(PbPutRequest {
                key: b"a".to_vec(),
                lease: 5,
                ..Default::default()
            })),
        };
        let put2 = PbTxnRequestOp {
            request: Some(PbTxnOpRequest::RequestPut(PbPutRequest {
                key: b"b".to_vec(),
                ..Default::default()
            })),
        };
        let mut op = put.encode_to_vec();
        op.extend(put2.encode_to_vec());
        let mut t = vec![(2 << 3) | 2];
        prost::encoding::encode_varint(op.len() as u64, &mut t);
        t.extend(op);
        let got = decode_txn(&t).unwrap().req;
        assert_eq!(got.success, vec![put2]);
    }
}
