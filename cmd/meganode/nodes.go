package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/cluster"
)

func init() {
	register("make-nodes", "add KWOK nodes (client-go, high concurrency) to the `up` cluster", runMakeNodes)
}

func runMakeNodes(args []string) error {
	fs := flag.NewFlagSet("make-nodes", flag.ContinueOnError)
	count := fs.Int("count", 100, "nodes to add")
	conc := fs.Int("concurrency", 64, "parallel creates")
	wait := fs.Bool("wait", true, "wait until every node is Ready")
	stateDir := fs.String("state-dir", cluster.DefaultStateDir(), "state directory of the cluster")
	if ok, err := parseUpFlags(fs, args); !ok {
		return err
	}
	st, err := loadCluster(*stateDir)
	if err != nil {
		return err
	}
	cs, err := cluster.Clientset(st)
	if err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	// Continue numbering after the nodes that exist.
	l, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return err
	}
	start := 0
	for _, n := range l.Items {
		var i int
		if strings.HasPrefix(n.Name, "kwok-node-") {
			if _, err := fmt.Sscanf(n.Name, "kwok-node-%d", &i); err == nil && i+1 > start {
				start = i + 1
			}
		}
	}
	prog := bench.NewProgress(os.Stderr)
	began := time.Now()
	if err := cluster.MakeNodes(ctx, cs, cluster.NodeOptions{Count: *count, Start: start, Concurrency: *conc, Progress: prog}); err != nil {
		return err
	}
	total := len(l.Items) + *count
	if *wait {
		if err := cluster.WaitNodesReady(ctx, cs, total, 10*time.Minute, prog); err != nil {
			return err
		}
	}
	st.Nodes = total
	_ = st.Save()
	prog.Printf("%d nodes added in %.1fs (%d in the cluster)", *count, time.Since(began).Seconds(), total)
	return nil
}

// loadCluster reads the state `meganode up` left in stateDir.
func loadCluster(stateDir string) (*cluster.State, error) {
	st, err := cluster.LoadState(stateDir)
	if err != nil {
		return nil, fmt.Errorf("no cluster in %s (run `meganode up`): %w", stateDir, err)
	}
	return st, nil
}
