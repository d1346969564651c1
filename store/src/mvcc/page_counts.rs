//! The count of a paged list without recounting on every page.
//!
//! kube-apiserver lists a prefix in pages: Range(key, end, limit, revision R),
//! then the next page from the last key returned + "\0" at the same R, and
//! every answer carries `count`, the number of keys of [key, end) live at R.
//! Counting those on every page makes a list of N keys cost N²/limit. But the
//! set of keys live at a fixed revision R never changes: later writes are at
//! revisions above R, and a compaction at or below R keeps what a read at R
//! sees (key_history::compact), while one above R makes the read fail before
//! it gets here. So when a Range cut by its limit is answered, the keys after
//! its last key number exactly `count - limit`, for ever at R: remembered
//! here, the next page's count is a lookup and a list costs O(N) overall.
//!
//! Bounded: at most ENTRIES entries (one per list in progress, least recently
//! used evicted), keys and ends of at most MAX_KEY bytes. One short mutex, and
//! only limited ranges over an interval take it; single-key reads and writes
//! never touch it.
use std::collections::VecDeque;

use parking_lot::Mutex;

/// Lists in progress remembered at once.
pub const ENTRIES: usize = 64;
/// Longer keys or ends are not remembered (their lists just count).
pub const MAX_KEY: usize = 4096;

struct Entry {
    rev: i64,
    end: Vec<u8>,
    /// The last key the page returned.
    last: Vec<u8>,
    /// Keys of (last, end) live at rev.
    rest: i64,
}

impl Entry {
    /// Whether a range from `key` is the page after this one: `key` is the
    /// smallest key above `last` (last + "\0").
    fn next_is(&self, rev: i64, key: &[u8], end: &[u8]) -> bool {
        self.rev == rev && key.len() == self.last.len() + 1 && key[self.last.len()] == 0 && key.starts_with(&self.last) && self.end == end
    }
}

#[derive(Default)]
pub struct PageCounts {
    entries: Mutex<VecDeque<Entry>>,
}

impl PageCounts {
    /// The count of the keys of [key, end) live at `rev`, if a page before
    /// ended just below `key`.
    pub fn lookup(&self, rev: i64, key: &[u8], end: &[u8]) -> Option<i64> {
        if key.len() > MAX_KEY + 1 || end.len() > MAX_KEY {
            return None;
        }
        let mut e = self.entries.lock();
        let i = e.iter().position(|x| x.next_is(rev, key, end))?;
        let hit = e.remove(i).unwrap();
        let rest = hit.rest;
        // Most recently used last; the caller's `record` replaces it.
        e.push_back(hit);
        Some(rest)
    }

    /// Remembers that the keys of (last, end) live at `rev` number `rest`.
    /// `from` is the page's own start key: an entry whose next page it was
    /// (the one `lookup` found) is replaced, so a list holds one entry.
    pub fn record(&self, rev: i64, from: &[u8], end: &[u8], last: &[u8], rest: i64) {
        if last.len() > MAX_KEY || end.len() > MAX_KEY {
            return;
        }
        let mut e = self.entries.lock();
        e.retain(|x| !x.next_is(rev, from, end) && !(x.rev == rev && x.end == end && x.last == last));
        if e.len() >= ENTRIES {
            e.pop_front();
        }
        e.push_back(Entry { rev, end: end.to_vec(), last: last.to_vec(), rest });
    }

    /// Forgets the list whose last page started at `from` (nothing after it).
    pub fn finish(&self, rev: i64, from: &[u8], end: &[u8]) {
        self.entries.lock().retain(|x| !x.next_is(rev, from, end));
    }

    /// Forgets the lists read below `rev` (compacted: their reads now fail).
    pub fn forget_below(&self, rev: i64) {
        self.entries.lock().retain(|x| x.rev >= rev);
    }

    /// Forgets everything (the store's history was replaced).
    pub fn clear(&self) {
        self.entries.lock().clear();
    }

    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::StoreError;
    use crate::mvcc::Store;
    use etcd_client::proto::{PbDeleteRequest, PbPutRequest, PbRangeRequest, PbRangeResponse};

    fn put(s: &Store, k: &str, v: &str) {
        s.put(&PbPutRequest { key: k.into(), value: v.into(), ..Default::default() }).unwrap();
    }

    fn del(s: &Store, k: &str) {
        s.delete_range(&PbDeleteRequest { key: k.into(), ..Default::default() }).unwrap();
    }

    fn page(s: &Store, key: &[u8], end: &[u8], rev: i64, limit: i64) -> PbRangeResponse {
        s.range(&PbRangeRequest { key: key.to_vec(), range_end: end.to_vec(), revision: rev, limit, ..Default::default() }).unwrap()
    }

    /// What a Range of the same interval would count with nothing remembered.
    fn fresh(s: &Store, key: &[u8], end: &[u8], rev: i64) -> i64 {
        s.page_counts.clear();
        s.range(&PbRangeRequest { key: key.to_vec(), range_end: end.to_vec(), revision: rev, count_only: true, ..Default::default() })
            .unwrap()
            .count
    }

    /// Lists `key..end` in pages as kube-apiserver does (first page at the
    /// latest revision, the rest at its header's), writing, deleting and
    /// compacting between pages; every page's count must equal a fresh count,
    /// and the keys must be those of one unpaged Range at that revision.
    fn list_with_churn(s: &Store, key: &[u8], end: &[u8], limit: i64, compact_at: usize) -> usize {
        let first = page(s, key, end, 0, limit);
        let rev = first.header.as_ref().unwrap().revision;
        let want = s.range(&PbRangeRequest { key: key.to_vec(), range_end: end.to_vec(), revision: rev, ..Default::default() }).unwrap();
        assert_eq!(first.count, want.count);
        let mut got = first.kvs.clone();
        let mut more = first.more;
        let mut pages = 1;
        while more {
            let mut from = got.last().unwrap().key.clone();
            from.push(0);
            // The store moves on between pages.
            put(s, &format!("/registry/pods/ns/p{pages:04}x"), "new");
            put(s, &format!("/registry/nodes/n{pages:04}x"), "new");
            del(s, &format!("/registry/pods/ns/p{:04}", 500 - pages));
            del(s, &format!("/other/{:04}", pages));
            if pages == compact_at {
                s.compact(rev).unwrap();
            }
            let p = page(s, &from, end, rev, limit);
            let remembered = p.count;
            assert_eq!(remembered, fresh(s, &from, end, rev), "page {pages}");
            // The fresh count cleared the cache: read the page again with it
            // seeded the other way round (a page right after this one hits).
            let again = page(s, &from, end, rev, limit);
            assert_eq!((again.count, &again.kvs), (remembered, &p.kvs));
            assert_eq!(remembered, want.count - got.len() as i64);
            got.extend(p.kvs);
            more = p.more;
            pages += 1;
        }
        assert_eq!(got, want.kvs);
        pages
    }

    #[test]
    fn paged_counts_equal_fresh_counts() {
        let s = Store::new();
        for i in 0..500 {
            put(&s, &format!("/registry/pods/ns/p{i:04}"), "a");
            put(&s, &format!("/registry/nodes/n{i:04}"), "b");
            put(&s, &format!("/other/{i:04}"), "c");
        }
        del(&s, "/registry/pods/ns/p0007");
        // One shard, several shards with the fallback, everything.
        assert!(list_with_churn(&s, b"/registry/pods/", b"/registry/pods0", 37, 3) > 10);
        assert!(list_with_churn(&s, b"/", b"0", 101, 4) > 10);
        assert!(list_with_churn(&s, b"\0", b"\0", 250, 2) > 3);
        assert!(s.page_counts.len() <= ENTRIES);
    }

    /// Page after page against a count made without the cache, with a hit on
    /// every page after the first (the count stays exact only if the cached
    /// one is used: a wrong one shows here).
    #[test]
    fn every_later_page_hits() {
        let s = Store::new();
        for i in 0..100 {
            put(&s, &format!("/registry/pods/ns/p{i:04}"), "a");
        }
        let (key, end) = (b"/registry/pods/".to_vec(), b"/registry/pods0".to_vec());
        let first = page(&s, &key, &end, 0, 10);
        let rev = first.header.unwrap().revision;
        let mut last = first.kvs.last().unwrap().key.clone();
        for n in 1..10 {
            for i in 0..3 {
                put(&s, &format!("/registry/pods/ns/q{n}{i}"), "late");
            }
            let mut from = last.clone();
            from.push(0);
            assert_eq!(s.page_counts.lookup(rev, &from, &end), Some(100 - 10 * n));
            let p = page(&s, &from, &end, rev, 10);
            assert_eq!(p.count, 100 - 10 * n);
            assert_eq!(p.more, n < 9);
            last = p.kvs.last().unwrap().key.clone();
        }
        // The last page (no more) leaves no entry behind.
        assert!(s.page_counts.is_empty());
    }

    /// A compaction above a list's revision fails its next page as before,
    /// never answered from what was remembered.
    #[test]
    fn compaction_above_the_revision_fails_the_next_page() {
        let s = Store::new();
        for i in 0..30 {
            put(&s, &format!("/registry/pods/ns/p{i:04}"), "a");
        }
        let (key, end) = (b"/registry/pods/".to_vec(), b"/registry/pods0".to_vec());
        let first = page(&s, &key, &end, 0, 10);
        let rev = first.header.unwrap().revision;
        put(&s, "/registry/pods/ns/zz", "b");
        s.compact(rev + 1).unwrap();
        let mut from = first.kvs.last().unwrap().key.clone();
        from.push(0);
        let r = s.range(&PbRangeRequest { key: from, range_end: end, revision: rev, limit: 10, ..Default::default() });
        assert_eq!(r.err(), Some(StoreError::Compacted));
        assert!(s.page_counts.is_empty());
    }

    #[test]
    fn bounded() {
        let c = PageCounts::default();
        for i in 0..(ENTRIES as i64 * 3) {
            c.record(i, b"a", b"z", b"k", 5);
        }
        assert_eq!(c.len(), ENTRIES);
        assert_eq!(c.lookup(0, b"k\0", b"z"), None);
        assert_eq!(c.lookup(ENTRIES as i64 * 3 - 1, b"k\0", b"z"), Some(5));
        assert_eq!(c.lookup(ENTRIES as i64 * 3 - 1, b"k\0", b"y"), None);
        assert_eq!(c.lookup(ENTRIES as i64 * 3 - 1, b"k", b"z"), None);
        assert_eq!(c.lookup(ENTRIES as i64 * 3 - 1, b"k\0\0", b"z"), None);
        c.record(1, b"a", b"z", &vec![b'x'; MAX_KEY + 1], 5);
        assert_eq!(c.len(), ENTRIES);
        c.forget_below(ENTRIES as i64 * 3 - 1);
        assert_eq!(c.len(), 1);
    }
}
