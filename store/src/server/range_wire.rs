//! A RangeResponse's protobuf encoding written straight from a `RangeRead`: the
//! keys and values go from the store's buffers (packed values decoded in place)
//! into the answer, with no KeyValue of their own in between — the copy, the
//! allocations and the frees of the generated types' `Vec<u8>`s are what a list
//! page cost beyond decoding. The bytes equal prost's encoding of the same
//! answer (fields in number order, defaults left out), which the tests check.
use etcd_client::proto::PbResponseHeader;

use crate::mvcc::key_history::Version;
use crate::mvcc::kvstore_range::RangeRead;

pub fn varint_len(v: u64) -> usize {
    ((64 - (v | 1).leading_zeros() as usize) + 6) / 7
}

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A varint field of a number below 16 (one byte of tag), left out at zero.
fn int_len(v: u64) -> usize {
    if v == 0 {
        0
    } else {
        1 + varint_len(v)
    }
}

fn put_int(out: &mut Vec<u8>, field: u8, v: u64) {
    if v != 0 {
        out.push(field << 3);
        put_varint(out, v);
    }
}

/// A length-delimited field's size for a body of `n` bytes.
fn delimited_len(n: usize) -> usize {
    1 + varint_len(n as u64) + n
}

fn put_delimited_head(out: &mut Vec<u8>, field: u8, n: usize) {
    out.push(field << 3 | 2);
    put_varint(out, n as u64);
}

fn header_len(h: &PbResponseHeader) -> usize {
    int_len(h.cluster_id) + int_len(h.member_id) + int_len(h.revision as u64) + int_len(h.raft_term)
}

fn put_header(out: &mut Vec<u8>, h: &PbResponseHeader) {
    put_delimited_head(out, 1, header_len(h));
    put_int(out, 1, h.cluster_id);
    put_int(out, 2, h.member_id);
    put_int(out, 3, h.revision as u64);
    put_int(out, 4, h.raft_term);
}

fn kv_len(key: &[u8], v: &Version, keys_only: bool) -> usize {
    let value = if keys_only { 0 } else { v.value.len() };
    (if key.is_empty() { 0 } else { delimited_len(key.len()) })
        + int_len(v.create_rev as u64)
        + int_len(v.mod_rev as u64)
        + int_len(v.version as u64)
        + (if value == 0 { 0 } else { delimited_len(value) })
        + int_len(v.lease as u64)
}

/// The encoded length of the answer with `header` (none: a RangeStream chunk's).
pub fn encoded_len(read: &RangeRead, header: Option<&PbResponseHeader>) -> usize {
    let kvs: usize = read.entries().iter().map(|(k, v)| delimited_len(kv_len(k, v, read.keys_only()))).sum();
    header.map_or(0, |h| delimited_len(header_len(h))) + kvs + if read.more { 2 } else { 0 } + int_len(read.count as u64)
}

/// Appends the answer with `header`: exactly `encoded_len` bytes.
pub fn encode(read: &RangeRead, header: Option<&PbResponseHeader>, out: &mut Vec<u8>) {
    let keys_only = read.keys_only();
    if let Some(h) = header {
        put_header(out, h);
    }
    for (k, v) in read.entries() {
        put_delimited_head(out, 2, kv_len(k, v, keys_only));
        if !k.is_empty() {
            put_delimited_head(out, 1, k.len());
            out.extend_from_slice(k);
        }
        put_int(out, 2, v.create_rev as u64);
        put_int(out, 3, v.mod_rev as u64);
        put_int(out, 4, v.version as u64);
        let n = if keys_only { 0 } else { v.value.len() };
        if n != 0 {
            put_delimited_head(out, 5, n);
            v.value.write_to(out);
        }
        put_int(out, 6, v.lease as u64);
    }
    if read.more {
        out.extend_from_slice(&[3 << 3, 1]);
    }
    put_int(out, 4, read.count as u64);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mvcc::Store;
    use etcd_client::proto::{PbPutRequest, PbRangeRequest};
    use prost::Message;

    fn check(s: &Store, req: PbRangeRequest, header: PbResponseHeader) {
        let read = s.range_read(&req).unwrap();
        let mut want = s.range_read(&req).unwrap().into_response();
        want.header = Some(header);
        let mut got = Vec::new();
        encode(&read, Some(&header), &mut got);
        assert_eq!(got.len(), encoded_len(&read, Some(&header)), "{req:?}");
        assert_eq!(got, want.encode_to_vec(), "{req:?}");
        // Without a header (a RangeStream chunk): prost's encoding of the same with none.
        want.header = None;
        let mut got = Vec::new();
        encode(&read, None, &mut got);
        assert_eq!((got.len(), &got), (encoded_len(&read, None), &want.encode_to_vec()), "{req:?}");
    }

    /// Byte for byte what prost writes, for every shape of answer: empty, keys
    /// only, limited (more), counts, large revisions and versions, leases, empty
    /// values, long values, negative numbers in the header.
    #[test]
    fn equals_prosts_encoding() {
        let s = Store::new();
        let (lease, _) = s.grant_lease(0x7fff_0000_0000_0001, 60).unwrap();
        for i in 0..300u32 {
            let value = match i % 4 {
                0 => Vec::new(),
                1 => vec![b'v'; 200],
                2 => vec![7u8; 20_000],
                _ => i.to_be_bytes().to_vec(),
            };
            let l = if i % 5 == 0 { lease } else { 0 };
            s.put(&PbPutRequest { key: format!("/registry/pods/ns/p{i:04}").into(), value, lease: l, ..Default::default() }).unwrap();
        }
        for i in 0..40u32 {
            s.put(&PbPutRequest { key: format!("/registry/pods/ns/p{i:04}").into(), value: b"again".to_vec(), ..Default::default() }).unwrap();
        }
        let pods = |limit, keys_only, count_only| PbRangeRequest {
            key: b"/registry/pods/".to_vec(),
            range_end: b"/registry/pods0".to_vec(),
            limit,
            keys_only,
            count_only,
            ..Default::default()
        };
        let h = PbResponseHeader { cluster_id: u64::MAX, member_id: 1, revision: 1 << 40, raft_term: 2 };
        check(&s, pods(0, false, false), h);
        check(&s, pods(7, false, false), h);
        check(&s, pods(7, true, false), h);
        check(&s, pods(0, false, true), h);
        check(&s, PbRangeRequest { key: b"/registry/pods/ns/p0002".to_vec(), ..Default::default() }, h);
        check(&s, PbRangeRequest { key: b"/missing".to_vec(), ..Default::default() }, PbResponseHeader::default());
        check(&s, pods(3, false, false), PbResponseHeader { revision: -1, ..Default::default() });
    }

    #[test]
    fn varint_lengths() {
        for v in [0u64, 1, 127, 128, 16_383, 16_384, u32::MAX as u64, u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v), "{v}");
        }
    }
}
