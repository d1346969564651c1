package k8s

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meganode/meganode/internal/cluster"
)

const (
	quotaBytes = 32 << 20
	noSpace    = "etcdserver: mvcc: database space exceeded"
)

// kubectlMessage is what kubectl prints for an error from the server
// (k8s.io/kubectl/pkg/cmd/util.StandardErrorMessage, copied to keep kubectl out of this build).
func kubectlMessage(err error) string {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return "error: " + err.Error()
	}
	s := st.Status()
	switch {
	case s.Reason == metav1.StatusReasonUnauthorized:
		return fmt.Sprintf("error: You must be logged in to the server (%s)", s.Message)
	case len(s.Reason) > 0:
		return fmt.Sprintf("Error from server (%s): %s", s.Reason, err.Error())
	default:
		return fmt.Sprintf("Error from server: %s", err.Error())
	}
}

// answer is what a client of kube-apiserver sees: HTTP code, reason, message, kubectl's line.
func answer(err error) string {
	if err == nil {
		return "OK"
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		s := st.Status()
		return fmt.Sprintf("%d %s reason=%q message=%q; kubectl: %s", s.Code, s.Status, s.Reason, s.Message, kubectlMessage(err))
	}
	return "not a Status: " + err.Error()
}

// TestKubernetesIntegrationQuota starts a real kube-apiserver (with controller-manager, scheduler
// and KWOK, through `meganode up`) on etcd and on meganode-store, both with
// --quota-backend-bytes=32 MiB, fills the store past its quota with an etcd client, and checks that
// kube-apiserver's clients get the same answers from both: creates, updates and event creates
// (which take a lease) refused with etcd's message as an internal error, reads and deletes
// served; and after delete + compact + defragment + `alarm disarm`, creates work again.
func TestKubernetesIntegrationQuota(t *testing.T) {
	if !full() {
		t.Skip("part of `make test-k8s` (MEGANODE_K8S_FULL=1): starts kube-apiserver on etcd and on the store")
	}
	bd, err := cluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.CheckBins(bd, cluster.StoreMeganode); err != nil {
		t.Fatalf("needs the binaries `make build k8s-bins` makes: %v", err)
	}
	answers := map[string][]string{}
	for _, kind := range []string{cluster.StoreEtcd, cluster.StoreMeganode} {
		t.Run(kind, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
			defer cancel()
			st, err := cluster.Up(ctx, cluster.UpOptions{StateDir: filepath.Join(t.TempDir(), "cluster"), Store: kind, StoreShards: 1,
				BinDir: bd, StoreArgs: []string{fmt.Sprintf("--quota-backend-bytes=%d", quotaBytes)}})
			if st != nil {
				defer func() { _ = st.Down(10*time.Second, nil) }()
			}
			if err != nil {
				t.Fatalf("up on %s: %v", kind, err)
			}
			cs, err := cluster.Clientset(st)
			if err != nil {
				t.Fatal(err)
			}
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{st.Shards[0].URL}, Logger: zap.NewNop(), DialTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			rec := func(what string, err error) string {
				a := answer(err)
				answers[kind] = append(answers[kind], what+": "+a)
				t.Logf("%s: %s", what, a)
				return a
			}
			cm := func(name string) *corev1.ConfigMap {
				return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": "v"}}
			}
			cms := cs.CoreV1().ConfigMaps("default")
			_, err = cms.Create(ctx, cm("before"), metav1.CreateOptions{})
			rec("create before the store is full", err)

			filled, ferr := fillStore(ctx, cli)
			t.Logf("%s: %d puts of 768 KiB acknowledged, then %v", kind, filled, ferr)
			if status.Convert(ferr).Message() != noSpace {
				t.Fatalf("filling the store: %v", ferr)
			}

			_, err = cms.Create(ctx, cm("after"), metav1.CreateOptions{})
			if got := rec("create", err); !strings.Contains(got, "kubectl: Error from server: "+noSpace) {
				t.Errorf("create on a full store: %s", got)
			}
			c, err := cms.Get(ctx, "before", metav1.GetOptions{})
			rec("get", err)
			if err == nil {
				c.Data["k"] = "w"
				_, err = cms.Update(ctx, c, metav1.UpdateOptions{})
				rec("update", err)
			}
			_, err = cms.List(ctx, metav1.ListOptions{})
			rec("list", err)
			_, err = cs.CoreV1().Events("default").Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "ev"},
				InvolvedObject: corev1.ObjectReference{Kind: "ConfigMap", Namespace: "default", Name: "before"}, Reason: "Test", Message: "m"},
				metav1.CreateOptions{})
			rec("event create (a leased key)", err)
			err = cms.Delete(ctx, "before", metav1.DeleteOptions{})
			rec("delete", err)

			// The operator's way out: free space, compact, defragment, disarm.
			must := func(what string, err error) {
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
			}
			_, err = cli.Delete(ctx, "/filler/", clientv3.WithPrefix())
			must("delete filler", err)
			g, err := cli.Get(ctx, "/filler/x")
			must("get revision", err)
			_, err = cli.Compact(ctx, g.Header.Revision, clientv3.WithCompactPhysical())
			must("compact", err)
			_, err = cli.Defragment(ctx, st.Shards[0].URL)
			must("defragment", err)
			_, err = cli.AlarmDisarm(ctx, &clientv3.AlarmMember{})
			must("alarm disarm", err)
			_, err = cms.Create(ctx, cm("after"), metav1.CreateOptions{})
			rec("create after compact, defragment and disarm", err)
		})
	}
	e, m := answers[cluster.StoreEtcd], answers[cluster.StoreMeganode]
	if e == nil || m == nil {
		return
	}
	if strings.Join(e, "\n") != strings.Join(m, "\n") {
		t.Errorf("kube-apiserver answered differently:\n--- on etcd:\n%s\n--- on meganode-store:\n%s", strings.Join(e, "\n"), strings.Join(m, "\n"))
	}
}

// fillStore puts 768 KiB values under /filler/ until the store refuses one (at most 80).
func fillStore(ctx context.Context, cli *clientv3.Client) (int, error) {
	val := string(bytes.Repeat([]byte("x"), 768<<10))
	for i := 0; i < 80; i++ {
		if _, err := cli.Put(ctx, fmt.Sprintf("/filler/%03d", i), val); err != nil {
			return i, err
		}
	}
	return 80, nil
}
