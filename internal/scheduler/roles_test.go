package scheduler

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/meganode/meganode/internal/scheduler/fakeapi"
	"github.com/meganode/meganode/internal/scheduler/metrics"
	"github.com/meganode/meganode/internal/scheduler/podspec"
	"github.com/meganode/meganode/internal/scheduler/schedtest"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// The distributed roles over gRPC on loopback: 3 shards, 2 relays under a root relay
// (fanout 2), 1 collector with its intake; a fake clientset stands in for the apiserver.
func TestRolesOverGRPC(t *testing.T) {
	metrics.Reset()
	var objs []runtime.Object
	var nodeList []corev1.Node
	for i := range 9 {
		n := fakeapi.Node(fmt.Sprintf("r-%d", i), 1000, 4096, 110, nil)
		objs = append(objs, n)
		nodeList = append(nodeList, *n)
	}
	cs := fakeapi.NewClient(objs...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := Config{Client: cs, Shards: 3, Deadline: 200 * time.Millisecond}
	shardAddrs := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
	colAddr, relayA, relayB, root := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	run := roleRunner(ctx, t, cfg)
	for i, a := range shardAddrs {
		run("shard", RoleConfig{Index: i, Listen: a, Collectors: []string{colAddr}})
	}
	run("relay", RoleConfig{Listen: relayA, Children: shardAddrs[:2]})
	run("relay", RoleConfig{Listen: relayB, Children: shardAddrs[2:]})
	run("relay", RoleConfig{Listen: root, Children: []string{relayA, relayB}})
	run("collector", RoleConfig{Index: 0, Listen: colAddr, ShardAddrs: shardAddrs, Root: root})
	time.Sleep(500 * time.Millisecond) // informers sync, streams connect (they retry anyway)
	// 3 pods of 300m per node: 27 fit; 40 race.
	for i := range 40 {
		schedtest.CreatePods(t, cs, fakeapi.Pod("default", fmt.Sprintf("g-%02d", i), podspec.DefaultSchedulerName, 300, 64))
	}
	got := schedtest.WaitBound(t, cs, "default", 27, 30*time.Second)
	time.Sleep(500 * time.Millisecond)
	got = schedtest.WaitBound(t, cs, "default", 0, 0)
	bound := 0
	for _, p := range got {
		if p.Spec.NodeName != "" {
			bound++
		}
	}
	checkNoOvercommit(t, nodeList, got)
	if bound != 27 {
		t.Fatalf("bound %d over gRPC roles, want 27", bound)
	}
}

// roleRunner starts a role of cfg on a goroutine per call; an error before ctx ends fails t.
func roleRunner(ctx context.Context, t *testing.T, cfg Config) func(role string, rc RoleConfig) {
	return func(role string, rc RoleConfig) {
		go func() {
			if err := RunRole(ctx, role, cfg, rc); err != nil && ctx.Err() == nil {
				t.Errorf("%s: %v", role, err)
			}
		}()
	}
}
