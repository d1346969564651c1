package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/meganode/meganode/internal/cluster"
)

// TestClusterOnReplicatedStore: kube-apiserver on a 3-member store group (`meganode up
// --store-replicas 3`). ConfigMaps are created while a watch from before the first is open;
// the store's leader is SIGKILLed in the middle and creation goes on (kube-apiserver has every
// member's URL), then the member is restarted and catches up. Every object is present at the
// end, the resourceVersions the creates answered never go back, and the watch delivers every
// create once, in resourceVersion order, across the kill.
func TestClusterOnReplicatedStore(t *testing.T) {
	const (
		count   = 150
		killAt  = 50
		rnodes  = 10
		rns     = "replicated"
		timeout = 20 * time.Second
	)
	bd := binDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	st, err := cluster.Up(ctx, cluster.UpOptions{StateDir: filepath.Join(t.TempDir(), "cluster"), Store: cluster.StoreMeganode, StoreShards: 1,
		StoreReplicas: 3, Nodes: rnodes, BinDir: bd})
	tearDown(t, st)
	if err != nil {
		t.Fatalf("up: %v", err)
	}
	cs, err := cluster.Clientset(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.EnsureNamespace(ctx, cs, rns); err != nil {
		t.Fatal(err)
	}
	cms := cs.CoreV1().ConfigMaps(rns)
	first, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: first.ResourceVersion, AllowWatchBookmarks: false})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var seen []string
	var seenRVs []int64
	var mu sync.Mutex
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added {
				continue
			}
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok || !strings.HasPrefix(cm.Name, "cm-") {
				continue
			}
			rv, _ := strconv.ParseInt(cm.ResourceVersion, 10, 64)
			mu.Lock()
			seen = append(seen, cm.Name)
			seenRVs = append(seenRVs, rv)
			n := len(seen)
			mu.Unlock()
			if n == count {
				return
			}
		}
	}()

	leader, err := storeLeader(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	var lastRV int64
	var killed time.Time
	var retried int
	for i := 0; i < count; i++ {
		if i == killAt {
			if err := leader.Kill(); err != nil {
				t.Fatal(err)
			}
			killed = time.Now()
			t.Logf("killed the store's leader %s after %d creates", leader.Name, i)
		}
		name := fmt.Sprintf("cm-%03d", i)
		var rv int64
		// A create whose answer was lost in the kill may have been applied: a retry then
		// finds it (AlreadyExists) and reads it, as a controller would.
		for attempt := 0; ; attempt++ {
			c, cancel := context.WithTimeout(ctx, timeout)
			cm, err := cms.Create(c, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"i": strconv.Itoa(i)}}, metav1.CreateOptions{})
			if err != nil {
				cm, err = cms.Get(c, name, metav1.GetOptions{})
			}
			cancel()
			if err == nil {
				rv, _ = strconv.ParseInt(cm.ResourceVersion, 10, 64)
				break
			}
			retried++
			if attempt == 20 {
				t.Fatalf("create %s: %v", name, err)
			}
			time.Sleep(250 * time.Millisecond)
		}
		if rv <= lastRV {
			t.Errorf("%s: resourceVersion %d after %d: went back", name, rv, lastRV)
		}
		lastRV = rv
	}
	t.Logf("%d creates, %d attempts retried; the last one %.1f s after the kill", count, retried, time.Since(killed).Seconds())
	if err := st.Restart(leader.Name); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, 60*time.Second, "the restarted member caught up (same HashKV as the others)", func() error {
		return st.SameStoreHash(ctx)
	})
	select {
	case <-watchDone:
	case <-time.After(30 * time.Second):
		w.Stop()
		<-watchDone
	}
	l, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The controller-manager adds kube-root-ca.crt to every namespace: only ours are counted.
	listed := 0
	for _, cm := range l.Items {
		if strings.HasPrefix(cm.Name, "cm-") {
			listed++
		}
	}
	if listed != count {
		t.Errorf("%d of our ConfigMaps listed after the kill and the restart, want %d", listed, count)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != count {
		t.Errorf("the watch from before the first create delivered %d of %d creates", len(seen), count)
	}
	names := map[string]bool{}
	for i, n := range seen {
		if names[n] {
			t.Errorf("the watch delivered %s twice", n)
		}
		names[n] = true
		if i > 0 && seenRVs[i] <= seenRVs[i-1] {
			t.Errorf("the watch delivered resourceVersion %d after %d", seenRVs[i], seenRVs[i-1])
		}
	}
}

// storeLeader answers the member every member names as leader.
func storeLeader(ctx context.Context, st *cluster.State) (*cluster.Component, error) {
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, c := range st.StoreMembers() {
			s, err := cluster.MemberStatus(ctx, c.URL, 2*time.Second)
			if err == nil && s.Leader == s.Header.MemberId {
				return c, nil
			}
		}
	}
	return nil, fmt.Errorf("no store leader")
}
