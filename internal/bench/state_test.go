package bench

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestStateObjects(t *testing.T) {
	now := time.Date(2026, 11, 25, 1, 2, 3, 0, time.UTC)
	keys := map[string]bool{}
	for _, kind := range StateKinds {
		for i := 0; i < 3000; i++ {
			k := StateKey(kind, i)
			if !strings.HasPrefix(k, statePrefix(kind)) || keys[k] {
				t.Fatalf("%s %d: key %q repeated or outside %s", kind, i, k, statePrefix(kind))
			}
			keys[k] = true
		}
		b, err := EncodeState(StateObject(kind, 7, now))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte("k8s\x00")) {
			t.Fatalf("%s: no k8s\\x00 envelope: %q", kind, b[:8])
		}
		var unk runtime.Unknown
		if err := unk.Unmarshal(b[4:]); err != nil {
			t.Fatal(err)
		}
		obj, err := DecodeState(b)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		switch o := obj.(type) {
		case *corev1.Node:
			if kind != "nodes" || unk.Kind != "Node" || unk.APIVersion != "v1" || o.Name != NodeName(7) || len(o.Status.Conditions) != 5 ||
				o.Status.Capacity.Cpu().String() != "8" || len(o.ManagedFields) != 3 || len(b) < 2000 {
				t.Fatalf("node: %s %d B %+v", unk.TypeMeta, len(b), o.ObjectMeta)
			}
		case *corev1.Pod:
			if kind != "pods" || unk.Kind != "Pod" || StateKey("pods", 7) != PodPrefix+o.Namespace+"/"+o.Name ||
				o.Spec.NodeName != NodeName(7) || o.Status.Phase != corev1.PodRunning || len(o.Spec.Containers) != 1 || len(b) < 2000 {
				t.Fatalf("pod: %s %d B %+v", unk.TypeMeta, len(b), o.ObjectMeta)
			}
		case *coordinationv1.Lease:
			if kind != "leases" || unk.Kind != "Lease" || o.Name != NodeName(7) || len(b) > 1000 {
				t.Fatalf("lease: %s %d B", unk.TypeMeta, len(b))
			}
		default:
			t.Fatalf("%s decoded to %T", kind, obj)
		}
		if obj.(interface{ GetResourceVersion() string }).GetResourceVersion() != "" {
			t.Fatalf("%s: stored objects carry no resourceVersion", kind)
		}
	}
	if StateKey("nodes", 3) != "/registry/minions/node-0000003" || StateKey("leases", 3) != "/registry/leases/kube-node-lease/node-0000003" ||
		!strings.HasPrefix(StateKey("pods", 3), "/registry/pods/team-03/web-") {
		t.Fatalf("keys: %s %s %s", StateKey("nodes", 3), StateKey("leases", 3), StateKey("pods", 3))
	}
}

// TestBenchState runs every phase at 2,000 of each kind against the real store binary and real
// etcd (`bin/meganode etcd`, its own process: it is SIGKILLed and restarted) and checks the counts.
func TestBenchState(t *testing.T) {
	if testing.Short() {
		t.Skip("starts meganode-store and etcd")
	}
	storeBin, meganode := serverBins(t)
	const n = 2000
	cfg := StateConfig{Nodes: n, Clients: 16, Conns: 4, Watchers: 2, WatchDuration: 2 * time.Second, IdleDuration: time.Second}
	rep := &StateReport{Nodes: n, PageLimit: 500, Watchers: 2}
	// The point writers in their own process (`meganode bench state-writers`) against the
	// store, on the load's connections (writer 0 on the lister's) against etcd.
	writersIn := map[string]string{TargetMeganode: WritersProcess, TargetEtcd: WritersShared}
	for _, kind := range []string{TargetMeganode, TargetEtcd} {
		spec := TargetSpec{Kind: kind, StoreBin: storeBin, EtcdCmd: []string{meganode, "etcd"}}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		cfg := cfg
		cfg.PointWritersIn, cfg.WritersCmd = writersIn[kind], []string{meganode, "bench", "state-writers"}
		res, err := RunState(ctx, spec, cfg)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		rep.Targets = append(rep.Targets, res)
		checkStateTarget(t, res, n, 2)
	}
	var buf bytes.Buffer
	WriteStateTable(&buf, rep)
	out := buf.String()
	if !strings.Contains(out, "| Unimplemented") || strings.Contains(out, "not run") || strings.Contains(out, "FAILED") {
		t.Fatalf("table:\n%s", out)
	}
	// results.json carries the state run through `bench report`'s reader and its markdown.
	path := filepath.Join(t.TempDir(), ResultsFile)
	if err := (&Report{State: rep}).WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadReport(path)
	if err != nil || back.State == nil || len(back.State.Targets) != 2 || back.State.Targets[1].Load.Kinds[2].Objects != n {
		t.Fatalf("results.json round trip: %v %+v", err, back)
	}
	buf.Reset()
	WriteMarkdown(&buf, Merge(back), nil, "bench/")
	if !strings.Contains(buf.String(), "## State at scale") {
		t.Fatal("the benchmark page has no state section")
	}
}

func checkStateTarget(t *testing.T, r *StateTarget, n int, watchers int) {
	t.Helper()
	etcd := r.Target == TargetEtcd
	if r.Failed != "" || r.Load == nil || r.List == nil || r.Watch == nil || r.Restart == nil {
		t.Fatalf("%s: failed %q or a phase missing: %+v", r.Target, r.Failed, r)
	}
	l := r.Load
	if len(l.Kinds) != 3 || l.Objects != int64(3*n) || l.RSSBytes == 0 || l.AnonBytes == 0 || l.AnonBytes > l.RSSBytes || l.DataDirBytes == 0 || l.ServerCPUPerObjUs <= 0 ||
		(etcd && (l.EtcdDBBytes == 0 || l.EtcdDBBytesBefore == 0)) || (!etcd && l.EtcdDBBytes != 0) {
		t.Fatalf("%s load: %+v", r.Target, l)
	}
	for _, k := range l.Kinds {
		if k.Objects != int64(n) || k.Errors != 0 || k.BytesPerObject < 200 || k.ObjectsPerSec <= 0 || k.CreateP99Us <= 0 {
			t.Fatalf("%s load of %s: %+v", r.Target, k.Kind, k)
		}
	}
	pages := (n + 499) / 500
	if len(r.List.Paged) != 3 {
		t.Fatalf("%s: %d paged lists", r.Target, len(r.List.Paged))
	}
	for _, p := range r.List.Paged {
		if p.Keys != int64(n) || p.Pages != pages || p.Error != "" || p.Seconds <= 0 {
			t.Fatalf("%s paged list: %+v", r.Target, p)
		}
	}
	if u := r.List.Unpaged; u.Keys != int64(n) || u.Pages != 1 || u.Error != "" {
		t.Fatalf("%s unpaginated: %+v", r.Target, u)
	}
	s := r.List.Stream
	if etcd != s.Unsupported || (!etcd && (s.Keys != int64(n) || s.Pages < 1)) || s.Error != "" {
		t.Fatalf("%s RangeStream (etcd 3.6 has none): %+v", r.Target, s)
	}
	if r.List.IdleWrites == 0 || r.List.ListWrites == 0 || r.List.WriteErrors != 0 || r.List.IdleWriteP99Us <= 0 {
		t.Fatalf("%s point writes: %+v", r.Target, r.List)
	}
	// Per phase: idle, paged, unpaginated, stream; each write counted once (the stream
	// of 2,000 pods may be too short for a write to start in it).
	ph := r.List.WritePhases
	if len(ph) != 4 || ph[0].Phase != "idle" || ph[0].Writes != r.List.IdleWrites || ph[1].Phase != "paged" || ph[1].Writes == 0 ||
		ph[1].P99Us <= 0 || ph[1].Writes+ph[2].Writes+ph[3].Writes != r.List.ListWrites {
		t.Fatalf("%s point writes per phase: %+v", r.Target, ph)
	}
	w := r.Watch
	// No conflicts: the lease revisions the point writers moved came back to the bench
	// (from their process, too).
	if w.Conflicts != 0 {
		t.Fatalf("%s watch: %d conflicts after the point writers (%s)", r.Target, w.Conflicts, r.List.PointWritersIn)
	}
	if w.Writes == 0 || w.Missing != 0 || w.Unexpected != 0 || w.Events != w.Writes*int64(watchers) || w.Watchers != 3*watchers ||
		w.DelayP99Us <= 0 || w.DelayP99Us < w.DelayP50Us {
		t.Fatalf("%s watch: %+v", r.Target, w)
	}
	rs := r.Restart
	leases := rs.Counts["leases"]
	if rs.ReadySeconds <= 0 || rs.FirstListSeconds < rs.ReadySeconds || rs.Counts["pods"] != int64(n) || rs.Counts["nodes"] != int64(n) ||
		(etcd && leases != int64(n)) || (!etcd && leases != 0 && leases != int64(n)) {
		t.Fatalf("%s restart: %+v", r.Target, rs)
	}
}

// TestBenchStateReportsFailure: etcd with a backend quota too small for the state fails the
// load; the result says so (phase, etcd's error) and the phases that could not run are absent,
// and the table shows them as failed and not run rather than leaving the rows out.
func TestBenchStateReportsFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	_, meganode := serverBins(t)
	spec := TargetSpec{Kind: TargetEtcd, EtcdCmd: []string{meganode, "etcd"}, EtcdArgs: []string{"--quota-backend-bytes", "4194304"}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := RunState(ctx, spec, StateConfig{Nodes: 2000, Clients: 8, Conns: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.Failed, "load: nodes:") || !strings.Contains(res.Failed, "database space exceeded") ||
		res.Load == nil || res.Load.Kinds[0].Errors == 0 || res.Load.Kinds[0].Objects >= 2000 || res.List != nil || res.Watch != nil || res.Restart != nil {
		t.Fatalf("failed %q: %+v", res.Failed, res)
	}
	var buf bytes.Buffer
	WriteStateTable(&buf, &StateReport{Nodes: 2000, Targets: []*StateTarget{res}})
	if out := buf.String(); !strings.Contains(out, "FAILED after") || !strings.Contains(out, "not run") || !strings.Contains(out, "database space exceeded") {
		t.Fatalf("table:\n%s", out)
	}
}
