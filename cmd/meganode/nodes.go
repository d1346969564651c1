package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/cluster"
)

type makeNodesFlags struct {
	count, concurrency int
	wait               bool
	stateDir           string
}

func newMakeNodesCmd() *cobra.Command {
	f := &makeNodesFlags{}
	cmd := &cobra.Command{
		Use:   "make-nodes",
		Short: "add KWOK nodes (client-go, high concurrency) to the 'up' cluster",
		Long: `make-nodes creates --count more KWOK nodes on the cluster 'meganode up' started (numbered
after the kwok-node-N that exist), --concurrency at a time, and with --wait (the default)
waits until every node in the cluster is Ready.`,
		Example: `  meganode make-nodes --count 1000
  meganode make-nodes --count 10000 --concurrency 128 --wait=false`,
		Args: noArgs,
		RunE: action(f, runMakeNodes),
	}
	fs := cmd.Flags()
	fs.IntVar(&f.count, "count", 100, "nodes to add")
	fs.IntVar(&f.concurrency, "concurrency", 64, "parallel creates")
	fs.BoolVar(&f.wait, "wait", true, "wait until every node is Ready")
	stateDirFlag(fs, &f.stateDir)
	return cmd
}

func runMakeNodes(ctx context.Context, cmd *cobra.Command, f *makeNodesFlags) error {
	st, err := loadCluster(f.stateDir)
	if err != nil {
		return err
	}
	cs, err := cluster.Clientset(st)
	if err != nil {
		return err
	}
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
	if err := cluster.MakeNodes(ctx, cs, cluster.NodeOptions{Count: f.count, Start: start, Concurrency: f.concurrency, Progress: prog}); err != nil {
		return err
	}
	total := len(l.Items) + f.count
	if f.wait {
		if err := cluster.WaitNodesReady(ctx, cs, total, 10*time.Minute, prog); err != nil {
			return err
		}
	}
	st.Nodes = total
	_ = st.Save()
	prog.Printf("%d nodes added in %.1fs (%d in the cluster)", f.count, time.Since(began).Seconds(), total)
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
