package e2e

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// TestPackedValuesReadBack: values the store keeps packed (a zstd dictionary per resource
// prefix, store/src/mvcc/packer.rs) read back as written, everywhere etcd hands a value out.
// Many similar objects (pods, configmaps) and some random ones are written, updated, deleted
// and compacted; once the store's packer reports it is done (metrics), every key's Range, the
// prefix paged at one revision, keys-only and count-only, a watch from the first revision with
// prevKV, HashKV, and Txn compares on each value give the same answers as etcd's — again after
// a SIGKILL and restart of the store (which loads the packed values from its checkpoints; etcd's
// transcript repeats its reads without a restart). The store packed values and holds less
// anonymous memory than a store with --value-compression=false given the same writes.
func TestPackedValuesReadBack(t *testing.T) {
	tr := transcripts{}
	rss := map[bool]int64{}
	write := func(t *testing.T, tg *target) {
		ctx := ctxT(t)
		rng := rand.New(rand.NewSource(14))
		put := func(k string, v []byte) {
			_, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b(k), Value: v})
			must(t, "put "+k, err)
		}
		for i := 0; i < 3000; i++ {
			if i%10 == 7 {
				v := make([]byte, 1500)
				rng.Read(v)
				put(fmt.Sprintf("/registry/pods/ns%d/p%05d", i%3, i), v)
			} else {
				put(fmt.Sprintf("/registry/pods/ns%d/p%05d", i%3, i), podLike(i, 0))
			}
			if i < 1500 {
				put(fmt.Sprintf("/registry/configmaps/kube-system/c%05d", i), []byte(strings.Repeat(fmt.Sprintf("data: key-%d value-of-config ", i%50), 30)))
			}
		}
		for i := 0; i < 3000; i += 17 {
			put(fmt.Sprintf("/registry/pods/ns%d/p%05d", i%3, i), podLike(i, 1))
		}
		_, err := tg.KV.Compact(ctx, &pb.CompactionRequest{Revision: 3000, Physical: true})
		must(t, "compact", err)
		for i := 5; i < 3000; i += 101 {
			_, err := tg.KV.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: b(fmt.Sprintf("/registry/pods/ns%d/p%05d", i%3, i))})
			must(t, "delete", err)
		}
		// Compacted at the head (the watch log then refers to no value the history holds),
		// then a few more writes whose events carry the values before them as prevKV.
		_, err = tg.KV.Compact(ctx, &pb.CompactionRequest{Revision: curRev(t, tg), Physical: true})
		must(t, "compact at the head", err)
		for i := 1; i < 3000; i += 29 {
			put(fmt.Sprintf("/registry/pods/ns%d/p%05d", i%3, i), podLike(i, 2))
		}
	}
	// Small checkpoints: the store rewrites a prefix's checkpoint once it has packed it.
	forEachDedicated(t, serverOpts{ExtraStoreArgs: []string{"--wal-checkpoint-bytes=1048576"}}, func(t *testing.T, tg *target) {
		write(t, tg)
		var out []string
		if tg.Proc != nil {
			waitPacked(t, tg, 2500)
		}
		rev := curRev(t, tg)
		out = append(out, packedReads(t, tg, "written", rev)...)
		if tg.Proc != nil {
			// The checkpoint round after the packing (every 5 s) writes the values packed.
			packed := storeMetrics(t, tg)["meganode_values_compressed_total"]
			c0 := storeMetrics(t, tg)["meganode_wal_checkpoints_total"]
			for i := 0; i < 40 && storeMetrics(t, tg)["meganode_wal_checkpoints_total"] == c0; i++ {
				time.Sleep(200 * time.Millisecond)
			}
			must(t, "kill", tg.Proc.Kill())
			must(t, "restart", tg.Proc.Restart())
			// A restart listens on a new port, and its revisions continue above a floor
			// (reads below are at the revision written before it).
			tg.Endpoint = tg.Proc.Endpoint
			reconnect(t, tg)
			waitPacked(t, tg, 0)
			// Memory is compared after a restart on both stores: loaded from their data, with
			// no garbage of the writes (freed pages, the watch log) in either.
			rss[true] = rssAnon(t, tg.Proc.Pid())
			// Loaded packed from the checkpoints: the new process packs only what its log replayed.
			if again := storeMetrics(t, tg)["meganode_values_compressed_total"]; again*2 > packed {
				t.Errorf("after the restart the packer packed %v values again of %v: the checkpoints did not keep them packed", again, packed)
			}
		}
		out = append(out, packedReads(t, tg, "after a restart", rev)...)
		tr[tg.Kind] = out
	})
	tr.compare(t)
	if _, ok := rss[true]; ok {
		tg, err := startServer(kindMeganode, serverOpts{ExtraStoreArgs: []string{"--value-compression=false"}})
		must(t, "start an unpacked store", err)
		defer tg.Close()
		write(t, tg)
		time.Sleep(time.Second)
		must(t, "kill the unpacked store", tg.Proc.Kill())
		must(t, "restart the unpacked store", tg.Proc.Restart())
		time.Sleep(time.Second)
		rss[false] = rssAnon(t, tg.Proc.Pid())
		t.Logf("anonymous RSS after the same writes: %d KiB packed, %d KiB unpacked", rss[true]>>10, rss[false]>>10)
		// ≈ 6.5 MB of the 11 MB of values written shrink several times over.
		if rss[true] > rss[false]-3<<20 {
			t.Errorf("packing saved %d KiB of anonymous memory, want ≥ 3 MiB", (rss[false]-rss[true])>>10)
		}
	}
}

// podLike is a Pod-sized object (≈ 2.7 KB) whose bytes are mostly shared with the others'.
func podLike(i, gen int) []byte {
	var sb strings.Builder
	sb.WriteString("k8s\x00\n\x0b\n\x02v1\x12\x03Pod")
	for part := 0; part < 24; part++ {
		fmt.Fprintf(&sb, "part%d labels app=web tier=frontend image=registry.k8s.io/pause:3.9 node=node-%d uid=%016x gen=%d;", part, i%97, uint64(i)*0x9e3779b97f4a7c15+uint64(part), gen)
	}
	return []byte(sb.String())
}

func sum(v []byte) string {
	h := sha256.Sum256(v)
	return fmt.Sprintf("%d:%x", len(v), h[:6])
}

// packedReads is one side's transcript of every way a value is read.
func packedReads(t *testing.T, tg *target, when string, rev int64) []string {
	ctx := ctxT(t)
	var out []string
	kvLine := func(kv *mvccpb.KeyValue) string {
		return fmt.Sprintf("%s c%d m%d v%d %s", kv.Key, kv.CreateRevision, kv.ModRevision, kv.Version, sum(kv.Value))
	}
	watchFrom := rev - 103 // the 104 writes after the compaction at the head
	for _, p := range []string{"/registry/pods/", "/registry/configmaps/"} {
		// Paged as kube-apiserver pages a list, at the first page's revision.
		key, n := []byte(p), 0
		for {
			r, err := tg.KV.Range(ctx, &pb.RangeRequest{Key: key, RangeEnd: prefixEnd(p), Limit: 500, Revision: rev})
			must(t, "page", err)
			for _, kv := range r.Kvs {
				out = append(out, when+" page: "+kvLine(kv))
				// The single key read, and a Txn that compares its value and reads it.
				one, err := tg.KV.Range(ctx, &pb.RangeRequest{Key: kv.Key})
				must(t, "get", err)
				tx, err := tg.KV.Txn(ctx, &pb.TxnRequest{
					Compare: []*pb.Compare{{Key: kv.Key, Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Value{Value: kv.Value}}},
					Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: kv.Key}}}},
				})
				must(t, "txn", err)
				got := tx.Responses[0].GetResponseRange().Kvs[0]
				if kvLine(one.Kvs[0]) != kvLine(kv) || !tx.Succeeded || kvLine(got) != kvLine(kv) {
					out = append(out, fmt.Sprintf("%s MISMATCH %s: get %s txn %v %s", when, kv.Key, kvLine(one.Kvs[0]), tx.Succeeded, kvLine(got)))
				}
			}
			n += len(r.Kvs)
			if !r.More {
				break
			}
			key = append(append([]byte{}, r.Kvs[len(r.Kvs)-1].Key...), 0)
		}
		ko, err := tg.KV.Range(ctx, &pb.RangeRequest{Key: b(p), RangeEnd: prefixEnd(p), KeysOnly: true, Revision: rev})
		must(t, "keys only", err)
		co, err := tg.KV.Range(ctx, &pb.RangeRequest{Key: b(p), RangeEnd: prefixEnd(p), CountOnly: true, Revision: rev})
		must(t, "count only", err)
		empty := 0
		for _, kv := range ko.Kvs {
			if len(kv.Value) == 0 {
				empty++
			}
		}
		out = append(out, fmt.Sprintf("%s %s: %d paged, %d keys-only (%d without a value), count %d", when, p, n, len(ko.Kvs), empty, co.Count))
		if p != "/registry/pods/" {
			continue
		}
		// Sorted by value (the pods' values are all different: etcd orders equal values of
		// a large result as Go's unstable sort leaves them).
		sv, err := tg.KV.Range(ctx, &pb.RangeRequest{Key: b(p), RangeEnd: prefixEnd(p), Revision: rev, SortTarget: pb.RangeRequest_VALUE, SortOrder: pb.RangeRequest_DESCEND, Limit: 5})
		must(t, "sorted by value", err)
		for _, kv := range sv.Kvs {
			out = append(out, when+" by value: "+kvLine(kv))
		}
	}
	// Every event since the last compaction, with its previous value (from the packed history);
	// the pods only: a watch over all of /registry/ would reach the prefixes the store keeps in
	// memory only (/registry/leases/, /registry/events/), whose history a restart ends.
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	ws, err := tg.Watch.Watch(wctx)
	must(t, "watch", err)
	must(t, "watch create", ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
		Key: b("/registry/pods/"), RangeEnd: prefixEnd("/registry/pods/"), StartRevision: watchFrom, PrevKv: true}}}))
	events := 0
	for events < int(rev-watchFrom+1) {
		r, err := ws.Recv()
		if err != nil {
			t.Fatalf("%s: watch from %d to %d: %d events, then %v", when, watchFrom, rev, events, err)
		}
		if r.CompactRevision != 0 || r.Canceled {
			t.Fatalf("%s: watch from %d: compacted %d, canceled %v (%s)", when, watchFrom, r.CompactRevision, r.Canceled, r.CancelReason)
		}
		for _, ev := range r.Events {
			events++
			line := fmt.Sprintf("%s event %s %s", when, ev.Type, kvLine(ev.Kv))
			if ev.PrevKv != nil {
				line += " prev " + kvLine(ev.PrevKv)
			}
			out = append(out, line)
		}
	}
	h, err := tg.Maint.HashKV(ctx, &pb.HashKVRequest{Revision: rev})
	must(t, "hashkv", err)
	out = append(out, fmt.Sprintf("%s hashkv %d at %d, compacted %d", when, h.Hash, h.HashRevision, h.CompactRevision))
	return out
}

// waitPacked waits until the store's packer has packed at least min values and found nothing
// left to do.
func waitPacked(t *testing.T, tg *target, min int64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		m := storeMetrics(t, tg)
		if m["meganode_values_compressed_total"] >= float64(min) && m["meganode_packer_idle"] == 1 && m["meganode_packer_passes_total"] >= 2 {
			t.Logf("packed %v values: %v → %v bytes", m["meganode_values_compressed_total"], m[`meganode_value_compressed_bytes_total{form="raw"}`], m[`meganode_value_compressed_bytes_total{form="stored"}`])
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("packer not done after 60 s: %v", m)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func storeMetrics(t *testing.T, tg *target) map[string]float64 {
	t.Helper()
	m := map[string]float64{}
	for k, v := range scrape(t, tg.Proc.MetricsURL) {
		if f, err := strconv.ParseFloat(v, 64); err == nil && strings.HasPrefix(k, "meganode_") {
			m[k] = f
		}
	}
	return m
}

func rssAnon(t *testing.T, pid int) int64 {
	t.Helper()
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	must(t, "status", err)
	for _, l := range strings.Split(string(st), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "RssAnon:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			must(t, "RssAnon", err)
			return kb << 10
		}
	}
	t.Fatal("no RssAnon")
	return 0
}
