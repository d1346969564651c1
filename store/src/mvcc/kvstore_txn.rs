//! Txn: compares, then one branch of operations, all at one revision. Static
//! checks (op counts, empty keys, etcd's duplicate-key rule) run first, then
//! checks against the current state (leases, ignore_*, read revisions), and
//! only then does the branch execute under the sequencer.
use std::collections::HashSet;
use std::ops::Deref;

use bytes::Bytes;
use etcd_client::proto::{
    PbCompare, PbDeleteResponse, PbPutResponse, PbRangeResponse, PbTargetUnion, PbTxnOpRequest, PbTxnOpResponse,
    PbTxnRequest, PbTxnRequestOp, PbTxnResponse, PbResponseOp,
};

use super::key_history::Version;
use super::kvstore::{check_put, header, resolve_put, take_value, to_kv, Locked, Store, WriteBatch, WriteGuard};
use super::shard::{KeyRange, ShardData};
use crate::errors::{Result, StoreError};

/// etcd's default --max-txn-ops.
pub const MAX_TXN_OPS: usize = 128;

impl Store {
    pub fn txn(&self, req: &PbTxnRequest) -> Result<PbTxnResponse> {
        check_txn(req)?;
        check_intervals(&req.success)?;
        check_intervals(&req.failure)?;
        self.txn_checked(&mut req.clone())
    }

    /// Runs a txn that passed `check_txn` and `check_txn_intervals`. The values of
    /// the puts it executes are taken out of `req` into the store.
    pub fn txn_checked(&self, req: &mut PbTxnRequest) -> Result<PbTxnResponse> {
        let mut ranges = Vec::new();
        collect_ranges(req, &mut ranges);
        if !txn_writes(req) {
            let shards = self.shards_for(&ranges, false);
            let locked = self.lock_read(shards);
            let rev = self.current_rev();
            let succeeded = eval_compares(&locked, &req.compare, rev);
            let ops = if succeeded { &req.success } else { &req.failure };
            self.check_ops(&locked, ops, rev)?;
            let responses = self.exec_reads(&locked, ops, rev);
            return Ok(PbTxnResponse { header: header(rev), succeeded, responses });
        }
        let shards = self.shards_for(&ranges, true);
        let mut locked = self.lock_write(shards);
        // Compares see the committed state (the sequencer's order); an answer
        // that depends on an unpublished write waits for it (`wait_visible`).
        let cur = self.committed_rev();
        let succeeded = eval_compares(&locked, &req.compare, i64::MAX);
        self.check_ops(&locked, if succeeded { &req.success } else { &req.failure }, cur)?;
        let ops = if succeeded { &mut req.success } else { &mut req.failure };
        let leases = &self.leases;
        let (responses, batch) = self.commit(|b| {
            // Re-checked under the sequencer: revocation happens under it too.
            check_leases(leases, &locked, ops)?;
            Ok(exec_writes(&mut locked, ops, b))
        });
        drop(locked);
        let responses = responses?;
        // A txn that wrote nothing (kube-apiserver's update whose compare failed) read its
        // shards at `cur`, under their locks: that is its header, not the revision after
        // the locks were dropped (a writer may have committed to these shards since).
        let rev = if batch.is_none() { cur } else { self.durable(batch) };
        Ok(PbTxnResponse { header: header(rev), succeeded, responses })
    }

    /// Checks the chosen branch against the state before the txn, as etcd does.
    fn check_ops<G: Deref<Target = ShardData>>(&self, locked: &Locked<G>, ops: &[PbTxnRequestOp], cur: i64) -> Result<()> {
        for op in ops {
            match &op.request {
                Some(PbTxnOpRequest::RequestRange(r)) => {
                    if r.revision > cur {
                        return Err(StoreError::FutureRev);
                    }
                    if r.revision > 0 && r.revision < self.floor_for(&KeyRange::new(&r.key, &r.range_end)) {
                        return Err(StoreError::Compacted);
                    }
                }
                Some(PbTxnOpRequest::RequestPut(p)) => self.check_put_against_state(locked, p, true)?,
                Some(PbTxnOpRequest::RequestTxn(t)) => {
                    let ok = eval_compares(locked, &t.compare, i64::MAX);
                    self.check_ops(locked, if ok { &t.success } else { &t.failure }, cur)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn exec_reads<G: Deref<Target = ShardData>>(&self, locked: &Locked<G>, ops: &[PbTxnRequestOp], rev: i64) -> Vec<PbResponseOp> {
        ops.iter()
            .map(|op| {
                let resp = match &op.request {
                    Some(PbTxnOpRequest::RequestRange(r)) => {
                        let at = if r.revision > 0 { r.revision } else { rev };
                        let mut resp = self.range_locked(locked, r, at).into_response();
                        resp.header = header(rev);
                        PbTxnOpResponse::ResponseRange(resp)
                    }
                    Some(PbTxnOpRequest::RequestTxn(t)) => {
                        let ok = eval_compares(locked, &t.compare, rev);
                        let responses = self.exec_reads(locked, if ok { &t.success } else { &t.failure }, rev);
                        PbTxnOpResponse::ResponseTxn(PbTxnResponse { header: nested_header(), succeeded: ok, responses })
                    }
                    // Writes never reach the read-only path.
                    _ => PbTxnOpResponse::ResponseRange(PbRangeResponse::default()),
                };
                PbResponseOp { response: Some(resp) }
            })
            .collect()
    }
}

fn check_leases(leases: &crate::lease::LeaseTable, locked: &Locked<WriteGuard>, ops: &[PbTxnRequestOp]) -> Result<()> {
    for op in ops {
        match &op.request {
            Some(PbTxnOpRequest::RequestPut(p)) if !p.ignore_lease && p.lease != 0 => {
                if !leases.exists(p.lease) {
                    return Err(StoreError::LeaseNotFound);
                }
            }
            Some(PbTxnOpRequest::RequestTxn(t)) => {
                let ok = eval_compares(locked, &t.compare, i64::MAX);
                check_leases(leases, locked, if ok { &t.success } else { &t.failure })?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Executes a branch that may write. Reads inside it see the branch's own
/// earlier writes, like etcd's write transactions.
fn exec_writes(locked: &mut Locked<WriteGuard>, ops: &mut [PbTxnRequestOp], b: &mut WriteBatch) -> Vec<PbResponseOp> {
    let mut out = Vec::with_capacity(ops.len());
    for op in ops {
        let resp = match &mut op.request {
            Some(PbTxnOpRequest::RequestRange(r)) => {
                let read_rev = if b.events.is_empty() { b.rev - 1 } else { b.rev };
                let at = if r.revision > 0 { r.revision } else { read_rev };
                let mut resp = range_in(locked, r, at);
                resp.header = header(read_rev);
                PbTxnOpResponse::ResponseRange(resp)
            }
            Some(PbTxnOpRequest::RequestPut(p)) => {
                let data = locked.data_mut(&p.key);
                let value = take_value(&mut p.value);
                let (value, lease) = resolve_put(data, p, value);
                let prev = b.put(data, &p.key, value, lease);
                PbTxnOpResponse::ResponsePut(PbPutResponse {
                    header: header(b.rev),
                    prev_kv: if p.prev_kv { prev.map(|v| to_kv(&p.key, &v, false)) } else { None },
                })
            }
            Some(PbTxnOpRequest::RequestDeleteRange(d)) => {
                let r = KeyRange::new(&d.key, &d.range_end);
                let keys: Vec<Bytes> =
                    locked.range(&r).into_iter().filter(|(_, h)| h.latest().is_some()).map(|(k, _)| k.clone()).collect();
                let mut prevs: Vec<(Bytes, Version)> = Vec::new();
                for k in keys {
                    let data = locked.data_mut(&k);
                    if let Some(p) = b.delete(data, &k) {
                        prevs.push((k, p));
                    }
                }
                // etcd: the revision the txn will have once it ends if anything
                // changed so far (this delete included), else the current one.
                let rev = if b.events.is_empty() { b.rev - 1 } else { b.rev };
                PbTxnOpResponse::ResponseDeleteRange(PbDeleteResponse {
                    header: header(rev),
                    deleted: prevs.len() as i64,
                    prev_kvs: if d.prev_kv { prevs.iter().map(|(k, v)| to_kv(k, v, false)).collect() } else { Vec::new() },
                })
            }
            Some(PbTxnOpRequest::RequestTxn(t)) => {
                // etcd decides every nested branch against the state before the
                // txn, not after the writes that precede it.
                let ok = eval_compares(locked, &t.compare, b.rev - 1);
                let responses = exec_writes(locked, if ok { &mut t.success } else { &mut t.failure }, b);
                PbTxnOpResponse::ResponseTxn(PbTxnResponse { header: nested_header(), succeeded: ok, responses })
            }
            None => PbTxnOpResponse::ResponseRange(PbRangeResponse::default()),
        };
        out.push(PbResponseOp { response: Some(resp) });
    }
    out
}

/// The header of a txn response nested in another: etcd allocates it empty
/// and fills in only the outermost one, so it is present with revision 0.
fn nested_header() -> Option<etcd_client::proto::PbResponseHeader> {
    Some(Default::default())
}

/// A range through write guards (the store's range works on any guard kind).
fn range_in(locked: &Locked<WriteGuard>, r: &etcd_client::proto::PbRangeRequest, rev: i64) -> PbRangeResponse {
    // Store::range_locked only reads the store's lock-free fields; a throwaway
    // store is not needed because the function is pure over `locked`.
    super::kvstore_range::range_over(locked, r, rev, None).into_response()
}

/// etcd's compare semantics: every key of the compare's range must satisfy it;
/// a range with no key compares against an empty KeyValue, except for VALUE,
/// which then always fails.
pub fn eval_compares<G: Deref<Target = ShardData>>(locked: &Locked<G>, cmps: &[PbCompare], rev: i64) -> bool {
    cmps.iter().all(|c| {
        let r = KeyRange::new(&c.key, &c.range_end);
        let entries = locked.range(&r);
        let mut any = false;
        for (_, h) in entries {
            if let Some(v) = h.at(rev) {
                any = true;
                if !compare_one(c, Some(v)) {
                    return false;
                }
            }
        }
        if !any {
            if c.target == 3 {
                return false;
            }
            return compare_one(c, None);
        }
        true
    })
}

fn compare_one(c: &PbCompare, v: Option<&Version>) -> bool {
    use std::cmp::Ordering;
    let num = |f: fn(&Version) -> i64| v.map_or(0, f);
    let want_num = |u: &Option<PbTargetUnion>, pick: fn(&PbTargetUnion) -> Option<i64>| u.as_ref().and_then(pick).unwrap_or(0);
    let ord = match c.target {
        0 => num(|v| v.version).cmp(&want_num(&c.target_union, |u| if let PbTargetUnion::Version(x) = u { Some(*x) } else { None })),
        1 => num(|v| v.create_rev).cmp(&want_num(&c.target_union, |u| if let PbTargetUnion::CreateRevision(x) = u { Some(*x) } else { None })),
        2 => num(|v| v.mod_rev).cmp(&want_num(&c.target_union, |u| if let PbTargetUnion::ModRevision(x) = u { Some(*x) } else { None })),
        3 => {
            let have = v.map_or(std::borrow::Cow::Borrowed(&[][..]), |v| v.value.cow());
            let have: &[u8] = &have;
            let want: &[u8] = match &c.target_union {
                Some(PbTargetUnion::Value(x)) => x,
                _ => &[],
            };
            have.cmp(want)
        }
        4 => num(|v| v.lease).cmp(&want_num(&c.target_union, |u| if let PbTargetUnion::Lease(x) = u { Some(*x) } else { None })),
        _ => Ordering::Equal,
    };
    match c.result {
        0 => ord == Ordering::Equal,
        1 => ord == Ordering::Greater,
        2 => ord == Ordering::Less,
        3 => ord != Ordering::Equal,
        // etcd lets an unknown result through.
        _ => true,
    }
}

/// etcd's static checks, depth first in request order. The op limit is a
/// budget shared down the nesting: a txn may have at most `budget` compares,
/// success or failure ops, and its nested txns get what it leaves. As every
/// level with a nested txn spends at least one, no check ever goes below
/// MAX_TXN_OPS + 2 levels: deeper nests fail on the way down.
pub fn check_txn(req: &PbTxnRequest) -> Result<()> {
    check_txn_budget(req, MAX_TXN_OPS as i64)
}

fn check_txn_budget(req: &PbTxnRequest, budget: i64) -> Result<()> {
    let opc = req.compare.len().max(req.success.len()).max(req.failure.len()) as i64;
    if opc > budget {
        return Err(StoreError::TooManyOps);
    }
    if req.compare.iter().any(|c| c.key.is_empty()) {
        return Err(StoreError::EmptyKey);
    }
    for op in req.success.iter().chain(req.failure.iter()) {
        match &op.request {
            Some(PbTxnOpRequest::RequestRange(r)) => super::kvstore::check_range(r)?,
            Some(PbTxnOpRequest::RequestPut(p)) => check_put(p)?,
            Some(PbTxnOpRequest::RequestDeleteRange(d)) if d.key.is_empty() => return Err(StoreError::EmptyKey),
            Some(PbTxnOpRequest::RequestTxn(t)) => check_txn_budget(t, budget - opc)?,
            // An empty RequestOp: etcd answers "key not found".
            None => return Err(StoreError::KeyNotFound),
            _ => {}
        }
    }
    Ok(())
}

/// etcd's rule against a put twice to one key, or a put into a delete range,
/// on one execution path (after `check_txn`, as etcd orders them).
pub fn check_txn_intervals(req: &PbTxnRequest) -> Result<()> {
    check_intervals(&req.success)?;
    check_intervals(&req.failure)?;
    Ok(())
}

/// Delete intervals of one op list: (key, end) with etcd's end conventions.
struct Dels(Vec<(Vec<u8>, Vec<u8>)>);

impl Dels {
    /// etcd compares these intervals as plain strings: an end of "\0" is not
    /// "to the end of the keyspace" here, it is the literal (empty) [key, "\0").
    fn hits(&self, k: &[u8]) -> bool {
        self.0.iter().any(|(key, end)| if end.is_empty() { k == key.as_slice() } else { k >= key.as_slice() && k < end.as_slice() })
    }
}

/// etcd's rule: within one executed path no key is put twice, and no put
/// lands inside a delete range; the two branches of a nested txn exclude
/// each other, so they may put the same key.
fn check_intervals(ops: &[PbTxnRequestOp]) -> Result<(HashSet<Vec<u8>>, Dels)> {
    let mut dels = Dels(Vec::new());
    for op in ops {
        if let Some(PbTxnOpRequest::RequestDeleteRange(d)) = &op.request {
            dels.0.push((d.key.clone(), d.range_end.clone()));
        }
    }
    let mut puts: HashSet<Vec<u8>> = HashSet::new();
    for op in ops {
        if let Some(PbTxnOpRequest::RequestTxn(t)) = &op.request {
            let (then_puts, then_dels) = check_intervals(&t.success)?;
            let (else_puts, else_dels) = check_intervals(&t.failure)?;
            for k in &then_puts {
                if puts.contains(k) || dels.hits(k) {
                    return Err(StoreError::DuplicateKey);
                }
                puts.insert(k.clone());
            }
            for k in &else_puts {
                if (puts.contains(k) && !then_puts.contains(k)) || dels.hits(k) {
                    return Err(StoreError::DuplicateKey);
                }
                puts.insert(k.clone());
            }
            dels.0.extend(then_dels.0);
            dels.0.extend(else_dels.0);
        }
    }
    for op in ops {
        if let Some(PbTxnOpRequest::RequestPut(p)) = &op.request {
            if puts.contains(&p.key) || dels.hits(&p.key) {
                return Err(StoreError::DuplicateKey);
            }
            puts.insert(p.key.clone());
        }
    }
    Ok((puts, dels))
}

fn collect_ranges<'a>(req: &'a PbTxnRequest, out: &mut Vec<KeyRange<'a>>) {
    for c in &req.compare {
        out.push(KeyRange::new(&c.key, &c.range_end));
    }
    for op in req.success.iter().chain(req.failure.iter()) {
        match &op.request {
            Some(PbTxnOpRequest::RequestRange(r)) => out.push(KeyRange::new(&r.key, &r.range_end)),
            Some(PbTxnOpRequest::RequestPut(p)) => out.push(KeyRange::new(&p.key, b"")),
            Some(PbTxnOpRequest::RequestDeleteRange(d)) => out.push(KeyRange::new(&d.key, &d.range_end)),
            Some(PbTxnOpRequest::RequestTxn(t)) => collect_ranges(t, out),
            None => {}
        }
    }
}

/// etcd's IsTxnReadonly: only ranges at the top level (a nested txn counts as
/// a write even if it only reads). Read-only txns are not raft proposals, so
/// the proposal size limit does not apply to them.
pub fn txn_is_read_only(req: &PbTxnRequest) -> bool {
    req.success.iter().chain(req.failure.iter()).all(|op| matches!(op.request, Some(PbTxnOpRequest::RequestRange(_))))
}

fn txn_writes(req: &PbTxnRequest) -> bool {
    req.success.iter().chain(req.failure.iter()).any(|op| match &op.request {
        Some(PbTxnOpRequest::RequestPut(_)) | Some(PbTxnOpRequest::RequestDeleteRange(_)) => true,
        Some(PbTxnOpRequest::RequestTxn(t)) => txn_writes(t),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_client::proto::{PbDeleteRequest, PbPutRequest, PbRangeRequest};

    fn put(k: &str) -> PbTxnRequestOp {
        PbTxnRequestOp { request: Some(PbTxnOpRequest::RequestPut(PbPutRequest { key: k.into(), value: b"v".to_vec(), ..Default::default() })) }
    }
    fn del(k: &str) -> PbTxnRequestOp {
        PbTxnRequestOp { request: Some(PbTxnOpRequest::RequestDeleteRange(PbDeleteRequest { key: k.into(), ..Default::default() })) }
    }
    fn get(k: &str) -> PbTxnRequestOp {
        PbTxnRequestOp { request: Some(PbTxnOpRequest::RequestRange(PbRangeRequest { key: k.into(), ..Default::default() })) }
    }
    fn nested(ops: Vec<PbTxnRequestOp>) -> PbTxnRequestOp {
        PbTxnRequestOp { request: Some(PbTxnOpRequest::RequestTxn(PbTxnRequest { success: ops, ..Default::default() })) }
    }

    /// The executed branch's put values (nested ones too) move into the store: the
    /// request is left without them, the store holds them whole; the branch not
    /// taken keeps its own.
    #[test]
    fn txn_put_values_move_into_the_store() {
        let s = Store::new();
        let big = |k: &str| {
            PbTxnRequestOp { request: Some(PbTxnOpRequest::RequestPut(PbPutRequest { key: k.into(), value: vec![7; 4096], ..Default::default() })) }
        };
        let mut req = PbTxnRequest { success: vec![big("/a"), nested(vec![big("/b")])], failure: vec![big("/c")], ..Default::default() };
        s.txn_checked(&mut req).unwrap();
        let value_of = |op: &PbTxnRequestOp| match &op.request {
            Some(PbTxnOpRequest::RequestPut(p)) => p.value.len(),
            Some(PbTxnOpRequest::RequestTxn(t)) => match &t.success[0].request {
                Some(PbTxnOpRequest::RequestPut(p)) => p.value.len(),
                _ => unreachable!(),
            },
            _ => unreachable!(),
        };
        assert_eq!((value_of(&req.success[0]), value_of(&req.success[1]), value_of(&req.failure[0])), (0, 0, 4096));
        for k in ["/a", "/b"] {
            let r = s.range(&PbRangeRequest { key: k.into(), ..Default::default() }).unwrap();
            assert_eq!(r.kvs[0].value, vec![7; 4096], "{k}");
        }
    }

    /// The header revision of each response, in order; nested txns flattened
    /// after their own entry.
    fn revs(resps: &[PbResponseOp], out: &mut Vec<i64>) {
        for r in resps {
            match r.response.as_ref().unwrap() {
                PbTxnOpResponse::ResponseRange(x) => out.push(x.header.as_ref().unwrap().revision),
                PbTxnOpResponse::ResponsePut(x) => out.push(x.header.as_ref().unwrap().revision),
                PbTxnOpResponse::ResponseDeleteRange(x) => out.push(x.header.as_ref().unwrap().revision),
                PbTxnOpResponse::ResponseTxn(x) => {
                    // Present, but empty: etcd fills only the outer header.
                    assert_eq!(x.header, Some(Default::default()));
                    out.push(0);
                    revs(&x.responses, out);
                }
            }
        }
    }

    fn run(s: &Store, ops: Vec<PbTxnRequestOp>) -> (i64, Vec<i64>) {
        let resp = s.txn(&PbTxnRequest { success: ops, ..Default::default() }).unwrap();
        let mut out = Vec::new();
        revs(&resp.responses, &mut out);
        (resp.header.unwrap().revision, out)
    }

    /// `depth` levels of txn, each the only op of its parent's success branch,
    /// the innermost holding `leaf` (or nothing).
    fn nest(depth: usize, leaf: Option<PbTxnRequestOp>) -> PbTxnRequest {
        let mut t = PbTxnRequest { success: leaf.into_iter().collect(), ..Default::default() };
        for _ in 1..depth {
            t = PbTxnRequest { success: vec![PbTxnRequestOp { request: Some(PbTxnOpRequest::RequestTxn(t)) }], ..Default::default() };
        }
        t
    }

    /// etcd's checkTxnRequest passes what a level leaves of the 128-op budget
    /// down to its nested txns: one op per level reaches 128 levels, 129 with
    /// an empty innermost txn.
    #[test]
    fn op_budget_is_shared_down_the_nesting() {
        assert_eq!(check_txn(&nest(128, Some(get("k")))), Ok(()));
        assert_eq!(check_txn(&nest(129, Some(get("k")))), Err(StoreError::TooManyOps));
        assert_eq!(check_txn(&nest(129, None)), Ok(()));
        assert_eq!(check_txn(&nest(130, None)), Err(StoreError::TooManyOps));
        // Siblings spend the budget too: 101 ops leave 27 to the nested txn.
        let with = |n: usize| {
            let mut ops: Vec<PbTxnRequestOp> = (0..100).map(|i| get(&format!("k{i}"))).collect();
            ops.push(nested((0..n).map(|i| get(&format!("n{i}"))).collect()));
            PbTxnRequest { success: ops, ..Default::default() }
        };
        assert_eq!(check_txn(&with(27)), Ok(()));
        assert_eq!(check_txn(&with(28)), Err(StoreError::TooManyOps));
        // Errors come depth first in request order: the empty key before the deep nest.
        let mut t = nest(200, None);
        t.success.insert(0, get(""));
        assert_eq!(check_txn(&t), Err(StoreError::EmptyKey));
        // And the 128-level nest runs.
        let s = Store::new();
        let resp = s.txn(&nest(128, Some(put("deep")))).unwrap();
        assert_eq!(resp.header.unwrap().revision, 2);
    }

    /// etcd's storeTxnWrite: a put answers the txn's new revision; a delete or
    /// range answers it only once something changed, else the current one; a
    /// nested txn's header stays empty; the outer header is the result.
    #[test]
    fn inner_headers_carry_etcds_revisions() {
        let s = Store::new();
        s.put(&PbPutRequest { key: b"a".to_vec(), value: b"1".to_vec(), ..Default::default() }).unwrap();
        assert_eq!(s.current_rev(), 2);
        // Nothing changes: every inner header is the current revision, no bump.
        assert_eq!(run(&s, vec![del("missing"), get("a")]), (2, vec![2, 2]));
        assert_eq!(s.current_rev(), 2);
        assert_eq!(run(&s, vec![nested(vec![del("missing"), get("a")])]), (2, vec![0, 2, 2]));
        // A delete of a missing key before a write: current; after it: the new revision.
        assert_eq!(run(&s, vec![get("a"), del("missing"), put("b"), del("missing2"), get("b")]), (3, vec![2, 2, 3, 3, 3]));
        // A delete that deletes answers the new revision, and so does what follows.
        assert_eq!(run(&s, vec![del("missing"), del("a"), get("a")]), (4, vec![3, 4, 4]));
        assert_eq!(run(&s, vec![nested(vec![del("missing"), put("c")]), del("missing")]), (5, vec![0, 4, 5, 5]));
    }
}
