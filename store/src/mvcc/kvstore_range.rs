//! Range with every etcd option: limit/more/count, revision, sort, keys_only,
//! count_only and the min/max mod/create revision filters.
use bytes::Bytes;
use etcd_client::proto::{PbRangeRequest, PbRangeResponse};

use super::key_history::Version;
use super::locked::{header, to_kv, Locked};
use super::page_counts::PageCounts;
use super::shard::{KeyRange, ShardData};

/// etcd's order of work: count every key in range, filter, sort, then cut at
/// `limit` and set `more`. With `counts`, a page of a list in key order
/// (limit, no sort, no filter) reads only its own keys and takes its count
/// from the page before it when that one is remembered (page_counts).
pub fn range_over<G: std::ops::Deref<Target = ShardData>>(
    locked: &Locked<G>,
    req: &PbRangeRequest,
    rev: i64,
    counts: Option<&PageCounts>,
) -> RangeRead {
    let r = KeyRange::new(&req.key, &req.range_end);
    let filtered = req.min_mod_revision != 0
        || req.max_mod_revision != 0
        || req.min_create_revision != 0
        || req.max_create_revision != 0;
    if let Some(counts) = counts {
        if !r.is_single() && !filtered && req.sort_order == 0 && req.sort_target == 0 && (req.limit > 0 || req.count_only) {
            return page_over(locked, req, &r, rev, counts);
        }
    }
    let entries = locked.range(&r);
    // A non-key target without an order sorts ascending; but, as in etcd, only
    // an explicit order (or a filter) makes the range fetch everything before
    // sorting: otherwise limit+1 keys are fetched in key order and sorted.
    let mut sort_order = req.sort_order;
    if req.sort_target != 0 && sort_order == 0 {
        sort_order = 1;
    }
    let sorting = sort_order != 0 && !(sort_order == 1 && req.sort_target == 0);
    let want = if req.limit > 0 && req.sort_order == 0 && !filtered { req.limit as usize + 1 } else { usize::MAX };
    let mut count = 0i64;
    let mut kvs: Vec<(&Bytes, &Version)> = Vec::new();
    for (k, h) in entries {
        if let Some(v) = h.at(rev) {
            count += 1;
            if req.count_only || kvs.len() >= want {
                continue;
            }
            kvs.push((k, v));
        }
    }
    if req.count_only {
        return RangeRead::counted(rev, count);
    }
    if filtered {
        kvs.retain(|(_, v)| {
            (req.min_mod_revision == 0 || v.mod_rev >= req.min_mod_revision)
                && (req.max_mod_revision == 0 || v.mod_rev <= req.max_mod_revision)
                && (req.min_create_revision == 0 || v.create_rev >= req.min_create_revision)
                && (req.max_create_revision == 0 || v.create_rev <= req.max_create_revision)
        });
    }
    if sorting {
        // Stable in both directions: equal elements keep key order, as Go's
        // sort does on the small inputs Kubernetes-sized ranges give it.
        let desc = sort_order == 2;
        match req.sort_target {
            1 => kvs.sort_by(|a, b| ord(a.1.version.cmp(&b.1.version), desc)),
            2 => kvs.sort_by(|a, b| ord(a.1.create_rev.cmp(&b.1.create_rev), desc)),
            3 => kvs.sort_by(|a, b| ord(a.1.mod_rev.cmp(&b.1.mod_rev), desc)),
            // By value: after the locks, where spilled values may be read (`finish`).
            4 => {
                let mut read = RangeRead::taken(rev, kvs, req.keys_only, false, count);
                read.by_value = Some((desc, req.limit));
                return read;
            }
            _ => {
                if desc {
                    kvs.reverse();
                }
            }
        }
    }
    let mut more = false;
    if req.limit > 0 && kvs.len() > req.limit as usize {
        kvs.truncate(req.limit as usize);
        more = true;
    }
    RangeRead::taken(rev, kvs, req.keys_only, more, count)
}

/// A limited range in key order (or a count): the first limit+1 live keys of
/// each shard the interval touches (their merge starts with the interval's
/// first limit+1), and the count remembered or counted once, shard by shard,
/// without collecting the interval.
fn page_over<G: std::ops::Deref<Target = ShardData>>(
    locked: &Locked<G>,
    req: &PbRangeRequest,
    r: &KeyRange<'_>,
    rev: i64,
    counts: &PageCounts,
) -> RangeRead {
    let count = match counts.lookup(rev, &req.key, &req.range_end) {
        Some(n) => n,
        None => locked.count_live(r, rev),
    };
    if req.count_only {
        return RangeRead::counted(rev, count);
    }
    let limit = req.limit as usize;
    let mut kvs = locked.first_live(r, rev, limit.saturating_add(1));
    let more = kvs.len() > limit;
    if more {
        kvs.truncate(limit);
        counts.record(rev, &req.key, &req.range_end, kvs[limit - 1].0, count - limit as i64);
    } else {
        counts.finish(rev, &req.key, &req.range_end);
    }
    RangeRead::taken(rev, kvs, req.keys_only, more, count)
}

/// A range's answer as read under the shard locks: the versions it returns, each
/// held by reference count (values are immutable once written; the packer swaps a
/// version's value for another `Value`, never changes one), turned into KeyValues —
/// packed values decoded, keys and values copied — only by `into_response`, after
/// the caller has dropped the locks. A page of 500 pods decoded under the pods'
/// read lock held their writers for as long as the decoding took (≈1–2 ms).
pub struct RangeRead {
    /// The revision read at; `into_response` puts it in the header (callers that
    /// answer with another revision, as Range does, overwrite it).
    pub rev: i64,
    kvs: Vec<(Bytes, Version)>,
    keys_only: bool,
    pub more: bool,
    pub count: i64,
    /// A sort by value still to do (descending?, the request's limit): values may be
    /// in spill files, which are read after the locks (`finish`), not under them.
    by_value: Option<(bool, i64)>,
}

impl RangeRead {
    fn counted(rev: i64, count: i64) -> Self {
        RangeRead { rev, kvs: Vec::new(), keys_only: false, more: false, count, by_value: None }
    }

    pub(crate) fn taken(rev: i64, kvs: Vec<(&Bytes, &Version)>, keys_only: bool, more: bool, count: i64) -> Self {
        let kvs = kvs.into_iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        RangeRead { rev, kvs, keys_only, more, count, by_value: None }
    }

    /// Does what had to wait for the locks to be dropped: a sort by value (stable,
    /// as range_over's other sorts), then the request's limit and `more`.
    pub fn finish(&mut self) {
        let Some((desc, limit)) = self.by_value.take() else { return };
        let values: Vec<Bytes> = self.kvs.iter().map(|(_, v)| v.value.bytes()).collect();
        let mut order: Vec<usize> = (0..self.kvs.len()).collect();
        order.sort_by(|&a, &b| ord(values[a].cmp(&values[b]), desc));
        let mut kvs: Vec<Option<(Bytes, Version)>> = std::mem::take(&mut self.kvs).into_iter().map(Some).collect();
        self.kvs = order.into_iter().map(|i| kvs[i].take().unwrap()).collect();
        if limit > 0 && self.kvs.len() > limit as usize {
            self.kvs.truncate(limit as usize);
            self.more = true;
        }
    }

    /// The keys and versions returned, in order.
    pub fn entries(&self) -> &[(Bytes, Version)] {
        &self.kvs
    }

    pub fn keys_only(&self) -> bool {
        self.keys_only
    }

    /// Keys returned.
    pub fn len(&self) -> usize {
        self.kvs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kvs.is_empty()
    }

    /// The bytes the answer will carry (keys, and values unless keys only), as
    /// written: what decoding and copying it costs is proportional to this.
    pub fn payload_bytes(&self) -> usize {
        self.kvs.iter().map(|(k, v)| k.len() + if self.keys_only { 0 } else { v.value.len() }).sum()
    }

    /// The answer: every KeyValue decoded and copied.
    pub fn into_response(mut self) -> PbRangeResponse {
        self.finish();
        let keys_only = self.keys_only;
        PbRangeResponse {
            header: header(self.rev),
            kvs: self.kvs.iter().map(|(k, v)| to_kv(k, v, keys_only)).collect(),
            more: self.more,
            count: self.count,
        }
    }
}

fn ord(o: std::cmp::Ordering, desc: bool) -> std::cmp::Ordering {
    if desc {
        o.reverse()
    } else {
        o
    }
}
