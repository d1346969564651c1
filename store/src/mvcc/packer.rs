//! The background packer (docs/design.md §1, "Packed values"): off the request path, one
//! thread per store trains a zstd dictionary per resource prefix once the prefix holds enough
//! values, then walks the prefix in small steps and puts a value's packed form in place of
//! its raw bytes when that saves bytes. Writes keep storing raw bytes; a later pass picks
//! them up. Each step reads a few hundred keys under the shard's read lock, compresses
//! with no lock held, and swaps the results in under a write lock held for the swaps alone.
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::key_history::KeyHistory;
use super::kvstore::{Shard, Store};
use super::value::{Compressor, Dict, Value};

/// A prefix gets a dictionary once it holds this many keys and this many accounted bytes.
pub const MIN_KEYS: usize = 1000;
pub const MIN_BYTES: usize = 1 << 20;
/// Values shorter than this are left raw (a frame's header and the dictionary buy nothing).
const MIN_VALUE: usize = 64;
/// A packed value must be this much smaller than the raw one.
const MIN_SAVING: usize = 16;
/// Keys read per read-lock hold, and so values swapped per write-lock hold (at most).
const STEP: usize = 256;
/// Training: at most this many sample values and bytes, a dictionary of this size.
const SAMPLES: usize = 2000;
const SAMPLE_BYTES: usize = 4 << 20;
const DICT_BYTES: usize = 64 << 10;

pub use super::pack_stats::PackStats;

/// Per shard: the writes seen by the last pass, the revision up to which every version
/// was tried with the current dictionary, and (for a prefix whose values did not shrink)
/// the write count at which training is tried again.
#[derive(Default, Clone, Copy)]
struct Seen {
    puts: u64,
    done_rev: i64,
    retrain_at: u64,
    /// Written bytes packed since the shard's `packed` flag was last set.
    packed_since: u64,
}

pub struct Packer {
    c: Compressor,
    seen: HashMap<usize, Seen>,
    /// Fraction of one core the packer may use while it works (it sleeps the rest).
    pub duty: f64,
    /// Don't sleep between steps (tests).
    pub unpaced: bool,
}

impl Default for Packer {
    fn default() -> Self {
        Packer { c: Compressor::new(), seen: HashMap::new(), duty: 0.5, unpaced: false }
    }
}

impl Packer {
    /// A packer that never sleeps (tests, tools).
    pub fn unpaced() -> Self {
        Packer { unpaced: true, ..Default::default() }
    }

    /// Runs passes until the process ends: one every second, at the lowest priority.
    pub fn spawn(store: Arc<Store>, duty: f64) -> std::io::Result<()> {
        std::thread::Builder::new().name("packer".into()).spawn(move || {
            // Below the other background work: serving threads, then compaction and
            // checkpoints, always come first.
            crate::background::lower_this_thread_to(19);
            let mut p = Packer { duty, ..Default::default() };
            loop {
                p.pass(&store);
                std::thread::sleep(Duration::from_secs(1));
            }
        })?;
        Ok(())
    }

    /// One pass over every resource prefix written since the last; returns whether any
    /// prefix needed a visit.
    pub fn pass(&mut self, store: &Store) -> bool {
        let mut visited = false;
        for s in store.all_shards() {
            if s.prefix.is_empty() {
                continue; // keys outside resource prefixes: too mixed for one dictionary
            }
            let (puts, len, bytes, dict) = {
                let d = s.data.read();
                (d.puts, d.len(), d.bytes, d.dict.clone())
            };
            // Every shard once (its loaded values too), then those written since.
            let mut seen = match self.seen.get(&s.id) {
                Some(seen) if seen.puts == puts => continue,
                Some(seen) => *seen,
                None => Seen::default(),
            };
            visited = true;
            let start_rev = store.committed_rev();
            let dict = match dict {
                Some(d) => d,
                None if len >= MIN_KEYS && bytes >= MIN_BYTES && puts >= seen.retrain_at => match self.train(store, &s) {
                    Some(d) => {
                        s.data.write().dict = Some(d.clone());
                        seen.done_rev = 0;
                        d
                    }
                    None => {
                        seen.retrain_at = puts.saturating_mul(2).max(puts + MIN_KEYS as u64);
                        seen.puts = puts;
                        self.seen.insert(s.id, seen);
                        continue;
                    }
                },
                None => {
                    seen.puts = puts;
                    self.seen.insert(s.id, seen);
                    continue;
                }
            };
            seen.packed_since += self.pack_shard(store, &s, &dict, seen.done_rev);
            if seen.packed_since >= (bytes as u64 / 4).max(MIN_BYTES as u64) {
                s.packed.store(true, Ordering::Relaxed);
                seen.packed_since = 0;
            }
            seen.puts = puts;
            seen.done_rev = start_rev;
            self.seen.insert(s.id, seen);
        }
        store.packing.passes.fetch_add(1, Ordering::Relaxed);
        store.packing.idle.store(!visited, Ordering::Relaxed);
        visited
    }

    /// Sleeps so that the time spent working stays at `duty` of the time passing.
    fn pace(&self, store: &Store, worked: Duration) {
        store.packing.busy_us.fetch_add(worked.as_micros() as u64, Ordering::Relaxed);
        if !self.unpaced && self.duty < 1.0 {
            std::thread::sleep(worked.mul_f64((1.0 - self.duty) / self.duty.max(0.01)));
        }
    }

    /// A dictionary for the shard's values, or None when the values do not shrink by a
    /// tenth with it. Samples are spread over the key order; one value in ten is held out
    /// to choose between a trained dictionary and one made of sample values.
    fn train(&mut self, store: &Store, s: &Shard) -> Option<Arc<Dict>> {
        let t = Instant::now();
        let every = (s.data.read().len() / SAMPLES).max(1);
        let (mut samples, mut held_out, mut size) = (Vec::new(), Vec::new(), 0usize);
        let mut i = 0usize;
        let sample = |_: &Bytes, h: &KeyHistory, _: &mut Vec<()>| {
            i += 1;
            if i % every != 0 {
                return;
            }
            if let Some(Value::Raw(b)) = h.latest().map(|v| &v.value) {
                if b.len() >= MIN_VALUE {
                    if (i / every) % 10 == 9 {
                        held_out.push(b.clone());
                    } else if size < SAMPLE_BYTES {
                        size += b.len();
                        samples.push(b.clone());
                    }
                }
            }
        };
        let _ = s.walk(STEP * 16, sample, |_| Ok::<(), Infallible>(()));
        if samples.len() < 100 || held_out.is_empty() {
            return None;
        }
        let mut candidates = Vec::new();
        if let Ok(d) = zstd::dict::from_samples(&samples, DICT_BYTES) {
            candidates.push(("trained", Dict::new(&d)));
        }
        // The newest-looking samples' bytes, last ones nearest the end (zstd prefers those).
        let mut raw = Vec::with_capacity(DICT_BYTES);
        for b in samples.iter().rev() {
            if raw.len() + b.len() > DICT_BYTES {
                break;
            }
            raw.extend_from_slice(b);
        }
        candidates.push(("samples", Dict::new(&raw)));
        let raw_total: usize = held_out.iter().map(|b| b.len()).sum();
        let mut best: Option<(&str, Arc<Dict>, usize)> = None;
        for (name, d) in candidates {
            let total: usize = held_out.iter().map(|b| self.c.compress(&d, b).unwrap_or(b.len())).sum();
            eprintln!(
                "meganode-store: packer: {} dictionary {name} ({} B): {} held-out values {raw_total} B -> {total} B",
                String::from_utf8_lossy(&s.prefix),
                d.content.len(),
                held_out.len()
            );
            if best.as_ref().map_or(true, |b| total < b.2) {
                best = Some((name, d, total));
            }
        }
        self.pace(store, t.elapsed());
        let (_, d, total) = best?;
        if total * 10 > raw_total * 9 {
            return None;
        }
        store.packing.dicts.fetch_add(1, Ordering::Relaxed);
        Some(d)
    }

    /// Packs every raw version of the shard written after `done_rev` that shrinks;
    /// returns the written bytes of the values packed.
    fn pack_shard(&mut self, store: &Store, s: &Shard, dict: &Arc<Dict>, done_rev: i64) -> u64 {
        let mut total = 0;
        let mut packed: Vec<(Bytes, i64, Bytes, Value)> = Vec::with_capacity(STEP);
        let raw_after = |k: &Bytes, h: &KeyHistory, todo: &mut Vec<(Bytes, i64, Bytes)>| {
            for v in h.versions() {
                if let Value::Raw(b) = &v.value {
                    if v.mod_rev > done_rev && b.len() >= MIN_VALUE {
                        todo.push((k.clone(), v.mod_rev, b.clone()));
                    }
                }
            }
        };
        let _ = s.walk(STEP, raw_after, |todo| {
            if todo.is_empty() {
                return Ok::<(), Infallible>(());
            }
            let t = Instant::now();
            for (k, rev, raw) in todo.drain(..) {
                if let Some(v) = self.c.pack(dict, &raw, MIN_SAVING) {
                    packed.push((k, rev, raw, v));
                }
            }
            if !packed.is_empty() {
                let (mut n, mut raw_bytes, mut stored) = (0u64, 0u64, 0u64);
                let mut d = s.data.write();
                for (k, rev, raw, v) in packed.drain(..) {
                    let Some(h) = d.get_mut(&k) else { continue };
                    // The same version, still raw (compaction may have removed it).
                    if let Some(slot) = h.versions_mut().iter_mut().find(|x| x.mod_rev == rev) {
                        if matches!(&slot.value, Value::Raw(b) if b.as_ptr() == raw.as_ptr() && b.len() == raw.len()) {
                            raw_bytes += raw.len() as u64;
                            stored += v.stored_len() as u64;
                            slot.value = v;
                            n += 1;
                        }
                    }
                }
                drop(d);
                total += raw_bytes;
                store.packing.packed.fetch_add(n, Ordering::Relaxed);
                store.packing.raw_bytes.fetch_add(raw_bytes, Ordering::Relaxed);
                store.packing.stored_bytes.fetch_add(stored, Ordering::Relaxed);
            }
            self.pace(store, t.elapsed());
            Ok(())
        });
        if total > 0 {
            // The raw buffers freed go back to the system now, not at the allocator's leisure.
            super::kvstore::release_free_memory();
        }
        total
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use etcd_client::proto::PbPutRequest;

    /// A Kubernetes-like object: most bytes shared with the others of its kind.
    pub fn object(i: usize) -> Vec<u8> {
        let mut v = b"k8s\0\n\x0b\n\x02v1\x12\x03Pod".to_vec();
        for part in 0..12 {
            v.extend_from_slice(format!("part{part}:labels app=web tier=frontend image=registry.k8s.io/pause:3.9 node=node-{} uid={:016x};", i % 97, (i as u64).wrapping_mul(0x9e3779b97f4a7c15 + part)).as_bytes());
        }
        v
    }

    fn random(i: usize, n: usize) -> Vec<u8> {
        let mut x = (i as u64 + 1).wrapping_mul(0x9e3779b97f4a7c15);
        (0..n).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        }).collect()
    }

    /// Pods (similar) and secrets (random): every value reads back the same after a pass;
    /// the pods are packed, the random values are not, and the secrets get no dictionary.
    #[test]
    fn a_pass_packs_similar_values_and_leaves_random_ones() {
        let s = Store::new();
        for i in 0..1500 {
            let put = |k: String, v: Vec<u8>| s.put(&PbPutRequest { key: k.into_bytes(), value: v, ..Default::default() }).unwrap();
            put(format!("/registry/pods/ns/p{i:05}"), if i % 10 == 3 { random(i, 900) } else { object(i) });
            put(format!("/registry/secrets/ns/s{i:05}"), random(i + 7, 1000));
        }
        let before = s.dump();
        let mut p = Packer::unpaced();
        assert!(p.pass(&s));
        let (n, raw, stored) = (s.packing.packed.load(Ordering::Relaxed), s.packing.raw_bytes.load(Ordering::Relaxed), s.packing.stored_bytes.load(Ordering::Relaxed));
        // Every similar pod; of the random tenth only those a dictionary made of sample
        // values happens to contain whole.
        assert!((1350..1400).contains(&n), "{n} packed");
        assert!(stored * 4 < raw, "{raw} -> {stored}");
        assert_eq!(s.packing.dicts.load(Ordering::Relaxed), 1);
        assert_eq!(s.dump(), before);
        assert!(!p.pass(&s), "nothing written since");
        assert!(s.packing.idle.load(Ordering::Relaxed));
        // A later write is picked up by the next pass; the earlier ones are not tried again.
        s.put(&PbPutRequest { key: b"/registry/pods/ns/p00003".to_vec(), value: object(3), ..Default::default() }).unwrap();
        assert!(p.pass(&s));
        assert_eq!(s.packing.packed.load(Ordering::Relaxed), n + 1);
    }

    fn pods(s: &Store, gen: usize) {
        for i in 0..1500 {
            let v = if i % 10 == 3 { random(i + gen, 900) } else { object(i + gen) };
            s.put(&PbPutRequest { key: format!("/registry/pods/ns/p{i:05}").into_bytes(), value: v, ..Default::default() }).unwrap();
        }
    }

    /// Every read path answers the same from a packed store as from the same store unpacked:
    /// Range (plain, paged, keys-only, count-only, sorted by value, at an old revision),
    /// RangeStream's chunks, Txn compares on values and their range ops, watch catch-up events
    /// with prevKV, HashKV, the snapshot's bytes.
    #[test]
    fn every_read_answers_as_unpacked() {
        use etcd_client::proto::{PbCompare, PbRangeRequest, PbTargetUnion, PbTxnOpRequest, PbTxnRequest, PbTxnRequestOp as PbRequestOp};
        let (packed, plain) = (Store::new(), Store::new());
        for s in [&packed, &plain] {
            pods(s, 0);
            pods(s, 5); // a second version of each
        }
        let mut p = Packer::unpaced();
        p.pass(&packed);
        assert!(packed.packing.packed.load(Ordering::Relaxed) >= 2700);
        let rev = packed.current_rev();
        let range = |req: PbRangeRequest| -> Vec<_> { [&packed, &plain].iter().map(|s| s.range(&req).unwrap()).collect() };
        let (k, end) = (b"/registry/pods/".to_vec(), b"/registry/pods0".to_vec());
        for req in [
            PbRangeRequest { key: k.clone(), range_end: end.clone(), ..Default::default() },
            PbRangeRequest { key: k.clone(), range_end: end.clone(), limit: 500, ..Default::default() },
            PbRangeRequest { key: k.clone(), range_end: end.clone(), keys_only: true, ..Default::default() },
            PbRangeRequest { key: k.clone(), range_end: end.clone(), count_only: true, ..Default::default() },
            PbRangeRequest { key: k.clone(), range_end: end.clone(), sort_target: 4, sort_order: 2, limit: 20, ..Default::default() },
            PbRangeRequest { key: k.clone(), range_end: end.clone(), revision: rev - 1500, ..Default::default() },
            PbRangeRequest { key: b"/registry/pods/ns/p00042".to_vec(), ..Default::default() },
        ] {
            let got = range(req);
            assert_eq!(got[0], got[1]);
        }
        let chunk = |s: &Store| {
            let c = s.range_chunk(&k, &end, rev, 300, false).unwrap();
            let more = c.more;
            (c.into_response().kvs, more)
        };
        assert_eq!(chunk(&packed), chunk(&plain));
        for i in [0usize, 3, 42, 1499] {
            let key = format!("/registry/pods/ns/p{i:05}").into_bytes();
            let value = plain.range(&PbRangeRequest { key: key.clone(), ..Default::default() }).unwrap().kvs[0].value.clone();
            let txn = PbTxnRequest {
                compare: vec![PbCompare { key: key.clone(), target: 3, result: 0, target_union: Some(PbTargetUnion::Value(value)), ..Default::default() }],
                success: vec![PbRequestOp { request: Some(PbTxnOpRequest::RequestRange(PbRangeRequest { key: key.clone(), ..Default::default() })) }],
                ..Default::default()
            };
            let (a, b) = (packed.txn(&txn).unwrap(), plain.txn(&txn).unwrap());
            assert!(a.succeeded);
            assert_eq!(a.responses, b.responses);
        }
        let events = |s: &Store| s.events_between(b"/registry/", b"/registry0", 2, rev, usize::MAX).unwrap().0;
        let (a, b) = (events(&packed), events(&plain));
        assert_eq!(a.len(), 3000);
        for (x, y) in a.iter().zip(&b) {
            assert_eq!((&x.key, &x.kv, &x.prev), (&y.key, &y.kv, &y.prev));
        }
        assert!(a.iter().any(|e| e.prev.as_ref().map_or(false, |p| p.value.is_packed())), "prevKV read from packed history");
        assert_eq!(packed.hash_kv(0), plain.hash_kv(0));
        assert_eq!(packed.hash_kv(rev - 100), plain.hash_kv(rev - 100));
        assert_eq!(crate::snapshot::encode(&packed), crate::snapshot::encode(&plain));
    }

    /// Passes running beside writes, deletes and compactions leave the state the same
    /// writes leave with no packer (every version, every value's bytes).
    #[test]
    fn passes_beside_writes_and_compaction_change_nothing() {
        use etcd_client::proto::PbDeleteRequest;
        let run = |s: &Store| {
            for i in 0..12_000usize {
                let k = format!("/registry/pods/ns/p{:05}", (i * 7919) % 2000).into_bytes();
                if i % 13 == 0 {
                    s.delete_range(&PbDeleteRequest { key: k, ..Default::default() }).unwrap();
                } else {
                    let v = if i % 9 == 0 { random(i, 700) } else { object(i) };
                    s.put(&PbPutRequest { key: k, value: v, ..Default::default() }).unwrap();
                }
                if i % 1500 == 1400 {
                    s.compact(s.current_rev() - 700).unwrap();
                }
            }
        };
        let plain = Store::new();
        run(&plain);
        let packed = Arc::new(Store::new());
        let stop = Arc::new(AtomicBool::new(false));
        let bg = {
            let (s, stop) = (packed.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut p = Packer::unpaced();
                while !stop.load(Ordering::Relaxed) {
                    p.pass(&s);
                }
                p.pass(&s);
            })
        };
        run(&packed);
        stop.store(true, Ordering::Relaxed);
        bg.join().unwrap();
        assert!(packed.packing.packed.load(Ordering::Relaxed) > 1000, "{}", packed.packing.packed.load(Ordering::Relaxed));
        assert_eq!(packed.dump(), plain.dump());
        assert_eq!(packed.accounted(), plain.accounted(), "quota counts written bytes");
        assert_eq!(packed.hash_kv(0), plain.hash_kv(0));
    }
}
