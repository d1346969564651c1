package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"

	"github.com/meganode/meganode/internal/cluster"
)

// TestMigrateCutover moves a running cluster (real kube-apiserver, controller-manager,
// kube-scheduler, KWOK) from etcd to meganode-store and back with `meganode migrate`'s code:
// each time every key of the target equals the source's (values, revisions, HashKV, leases),
// the object counts through the API are the same before and after, a new write's
// resourceVersion is above every one before, new pods are scheduled and Running, and watches
// held from before are either resumed or answered 410 Gone (logged: which). A client-go
// informer started before the first cut-over ends up with every pod, through both. Before each
// cut-over the source is compacted: the target keeps the compaction point (it refuses a read
// below it, as the source did) besides every revision above it. Last, a cut-over to a store
// that cannot start is rolled back onto etcd, which serves again.
func TestMigrateCutover(t *testing.T) {
	bd := binDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const nodes, pods, checkPods = 3, 10, 3
	stateDir := filepath.Join(t.TempDir(), "cluster")
	began := time.Now()
	st, err := cluster.Up(ctx, cluster.UpOptions{StateDir: stateDir, Store: cluster.StoreEtcd, StoreShards: 1, Nodes: nodes, BinDir: bd})
	tearDown(t, st)
	if err != nil {
		t.Fatalf("up --store etcd: %v", err)
	}
	t.Logf("up on etcd with %d nodes in %.1fs", nodes, time.Since(began).Seconds())
	cs, err := cluster.Clientset(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.EnsureNamespace(ctx, cs, ns); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.CreatePods(ctx, cs, cluster.PodOptions{Namespace: ns, Count: pods, Timeout: 2 * time.Minute}); err != nil {
		t.Fatalf("pods: %v", err)
	}

	// An informer held through both cut-overs: client-go relists where its watch gets 410.
	inf := informers.NewSharedInformerFactory(cs, 0)
	podInf := inf.Core().V1().Pods()
	podInf.Informer()
	ictx, icancel := context.WithCancel(ctx)
	defer icancel()
	inf.Start(ictx.Done())
	inf.WaitForCacheSync(ictx.Done())

	for _, to := range []string{cluster.StoreMeganode, cluster.StoreEtcd} {
		compacted := compactStore(ctx, t, st)
		t0 := time.Now()
		res, err := cluster.Migrate(ctx, st, cluster.MigrateOptions{To: to, BinDir: bd, Verify: true, CheckPods: checkPods, APIServerGrace: 2 * time.Second})
		if err != nil {
			t.Fatalf("migrate --to %s: %v (result %+v)", to, err, res)
		}
		t.Logf("migrate %s → %s in %.1fs: API unavailable %.2f s (%d of %d polls failed); steps:", res.From, res.To,
			time.Since(t0).Seconds(), res.Availability.Seconds, res.Availability.Failed, res.Availability.Polls)
		for _, s := range res.Steps {
			t.Logf("  %-38s %6.2f s  %s", s.Name, s.Seconds, s.Note)
		}
		if !res.OK() {
			t.Errorf("migrate --to %s: a check failed: %+v", to, res)
		}
		if res.Check == nil || !res.Check.Equal || res.Check.Keys == 0 || res.Check.Revision != res.Revision {
			t.Errorf("migrate --to %s: target vs source: %+v", to, res.Check)
		} else if res.Check.CompactRevision < compacted || !res.Check.RefusesCompacted {
			t.Errorf("migrate --to %s: the source was compacted at %d; the target at %d, refusing a read below it: %v",
				to, compacted, res.Check.CompactRevision, res.Check.RefusesCompacted)
		}
		if !res.CountsEqual || res.CountsAfter["nodes"] != nodes || res.CountsAfter["pods"] < pods {
			t.Errorf("migrate --to %s: counts %v → %v", to, res.CountsBefore, res.CountsAfter)
		}
		if !res.RVAdvanced || res.NewWriteRV <= res.Revision {
			t.Errorf("migrate --to %s: a write after the cut-over got resourceVersion %d, the source was at %d", to, res.NewWriteRV, res.Revision)
		}
		if res.Pods == nil || res.Pods.Scheduled != checkPods || res.Pods.Running != checkPods {
			t.Fatalf("migrate --to %s: pods after the cut-over: %+v", to, res.Pods)
		}
		t.Logf("  %d pods after the cut-over Running in %.1f s (slowest bound after %.1f s, Running after %.1f s)",
			checkPods, res.Pods.Seconds, res.Pods.ScheduleMaxSeconds, res.Pods.StartupMaxSeconds)
		if res.Availability.FirstFailure.IsZero() || res.Availability.FirstSuccess.IsZero() || res.Availability.Seconds <= 0 {
			t.Errorf("migrate --to %s: the probe saw no outage and recovery: %+v", to, res.Availability)
		}
		if len(res.Watches) != 2 {
			t.Errorf("migrate --to %s: %d watches reported", to, len(res.Watches))
		}
		for _, w := range res.Watches {
			t.Logf("  watch of %s held from %s (last %s, %d events, %s): reopened → %s: %s", w.Resource, w.StartRV, w.LastRV, w.Events, w.EndedBy, w.Result, w.Detail)
			if w.Result != "resumed" && w.Result != "410 Gone" {
				t.Errorf("migrate --to %s: watch of %s: %s (%s), want resumed or 410 Gone", to, w.Resource, w.Result, w.Detail)
			}
		}
		if st.Store != to || st.Component("store").Kind != map[string]string{cluster.StoreMeganode: cluster.BinStore, cluster.StoreEtcd: cluster.StoreEtcd}[to] {
			t.Errorf("migrate --to %s: state says store %s, component kind %s", to, st.Store, st.Component("store").Kind)
		}
		saved, err := cluster.LoadState(stateDir)
		if err != nil || saved.Store != to || saved.Shards[0].URL != res.TargetURL {
			t.Errorf("migrate --to %s: saved state %+v %v", to, saved, err)
		}
		if _, ok := cluster.Health(ctx, st); !ok {
			h, _ := cluster.Health(ctx, st)
			t.Errorf("migrate --to %s: components not healthy: %v", to, h)
		}
	}

	// The informer followed: every pod the API lists, it has.
	waitFor(ctx, t, 60*time.Second, "the informer held through both cut-overs has every pod", func() error {
		l, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		got, err := podInf.Lister().List(labels.Everything())
		if err != nil {
			return err
		}
		if len(got) != len(l.Items) || len(l.Items) != pods+2*checkPods {
			return fmt.Errorf("informer %d pods, API %d, want %d", len(got), len(l.Items), pods+2*checkPods)
		}
		return nil
	})

	// A target that does not start: the cluster is rolled back onto etcd and serves again.
	// Last: each kube-apiserver restart lengthens client-go's reflector backoff (up to 60 s with
	// its jitter, reset after 2 minutes without a failure), which new pods would wait out.
	res, err := cluster.Migrate(ctx, st, cluster.MigrateOptions{To: cluster.StoreMeganode, BinDir: bd, Verify: true,
		StoreArgs: []string{"--no-such-flag"}, APIServerGrace: 2 * time.Second})
	if err == nil || !res.RolledBack {
		t.Fatalf("migrate to a store that cannot start: err %v, rolled back %v", err, res.RolledBack)
	}
	t.Logf("a failed cut-over rolled back: %v", err)
	saved, err := cluster.LoadState(stateDir)
	if err != nil || saved.Store != cluster.StoreEtcd || st.Store != cluster.StoreEtcd || st.Component("store").Kind != cluster.StoreEtcd {
		t.Fatalf("after the rollback: state %+v %v", saved, err)
	}
	waitFor(ctx, t, 60*time.Second, "the cluster serves again on etcd after the rollback", func() error {
		if h, ok := cluster.Health(ctx, st); !ok {
			return fmt.Errorf("%v", h)
		}
		l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(l.Items) != pods {
			return fmt.Errorf("%d pods", len(l.Items))
		}
		return nil
	})
}

// compactStore compacts the cluster's store (its only shard) a few revisions below its current
// one, physically, as kube-apiserver's compactor does: the revision compacted at.
func compactStore(ctx context.Context, t *testing.T, st *cluster.State) int64 {
	t.Helper()
	cli, err := cluster.ShardClient(st, st.Shards[0])
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	resp, err := cli.Get(ctx, "compact-probe")
	if err != nil {
		t.Fatal(err)
	}
	rev := resp.Header.Revision - 5
	if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("compact at %d: %v", rev, err)
	}
	t.Logf("source compacted at revision %d", rev)
	return rev
}
