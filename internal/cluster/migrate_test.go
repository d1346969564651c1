package cluster

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestMigrateSourceRefusals(t *testing.T) {
	self := Component{Name: "store", Pid: os.Getpid()}
	for _, c := range []struct {
		st   State
		want string
	}{
		{State{Store: StoreEtcd}, "not up"},
		{State{Store: StoreMeganode, Ready: true}, "already runs on meganode"},
		{State{Store: StoreEtcd, Ready: true}, "0 store(s)"},
		{State{Store: StoreEtcd, Ready: true, Shards: []StoreShard{{Component: "store", URL: "a"}, {Component: "store-leases", URL: "b"}}}, "2 store(s) (a; b)"},
		{State{Store: StoreEtcd, Ready: true, Shards: []StoreShard{{Component: "store-0", URL: "a,b,c"}}}, "--store-replicas 1"},
		{State{Store: StoreEtcd, Ready: true, Shards: []StoreShard{{Component: "store", URL: "a"}}, EtcdProxyURL: "p"}, "--record"},
		{State{Store: StoreEtcd, Ready: true, Shards: []StoreShard{{Component: "store", URL: "a"}}}, `no component "store"`},
		{State{Store: StoreEtcd, Ready: true, Shards: []StoreShard{{Component: "store", URL: "a"}}, Components: []Component{{Name: "store", Pid: -1}}}, "not running"},
	} {
		_, err := migrateSource(&c.st, StoreMeganode)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error with %q", c.st, err, c.want)
		}
	}
	st := State{Store: StoreEtcd, Ready: true, Shards: []StoreShard{{Component: "store", URL: "a"}},
		Components: []Component{{Name: "kube-apiserver"}, self}}
	if i, err := migrateSource(&st, StoreMeganode); err != nil || i != 1 {
		t.Errorf("a single running store: %d %v", i, err)
	}
}

func TestEqualCounts(t *testing.T) {
	a := map[string]int64{"nodes": 3, "pods": 10}
	if !equalCounts(a, map[string]int64{"pods": 10, "nodes": 3}) || equalCounts(a, map[string]int64{"nodes": 3, "pods": 9}) ||
		equalCounts(a, map[string]int64{"nodes": 3}) {
		t.Error("equalCounts")
	}
}

// The probe measures from the first failed request to the first answer after it.
func TestProbeMeasuresTheOutage(t *testing.T) {
	var down atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("{}"))
	}))
	defer srv.Close()
	p := startProbe(context.Background(), srv.Client(), srv.URL+"/api/v1/nodes?limit=1", 10*time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	down.Store(true)
	time.Sleep(300 * time.Millisecond)
	down.Store(false)
	a := p.wait(5 * time.Second)
	if a.FirstFailure.IsZero() || a.FirstSuccess.IsZero() || a.Seconds < 0.25 || a.Seconds > 1.5 || a.Failed < 5 || a.Polls <= a.Failed ||
		!strings.Contains(a.FirstError, "503") {
		t.Errorf("probe: %+v", a)
	}
}
