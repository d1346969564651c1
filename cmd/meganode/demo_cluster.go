package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/cluster"
)

// runClusterDemo: up (store, apiserver, controller-manager, scheduler, KWOK, nodes), pods under
// measurement, the SLO report, down. Sized for a 2-core machine by default.
func runClusterDemo(ctx context.Context, cmd *cobra.Command, d *demoFlags) error {
	f := &d.up
	prog := bench.NewProgress(os.Stderr)
	began := time.Now()
	prog.Printf("meganode demo: %d KWOK nodes and %d pods on a real kube-apiserver v1.36.3 over %s-store", f.nodes, f.pods, f.store)
	st, err := cluster.Up(ctx, f.options(prog))
	if err != nil {
		return err
	}
	if !d.keep {
		defer func() {
			prog.Phase("stopping the cluster…")
			if err := st.Down(15*time.Second, nil); err != nil {
				fmt.Fprintln(os.Stderr, "down:", err)
			}
			prog.Printf("cluster stopped (%d processes); logs in %s", len(st.Components), filepath.Join(st.Dir, "logs"))
		}()
	}
	prog.Printf("control plane and %d nodes up in %.1fs", st.Nodes, time.Since(began).Seconds())
	rep, perr := measurePods(ctx, st, cluster.PodOptions{Count: f.pods, Deployment: d.deployment, QPS: d.qps, Timeout: 8 * time.Minute, Progress: prog})
	if rep != nil {
		dir := d.out
		if dir == "" {
			dir = filepath.Join(st.Dir, "report")
		}
		printReport(rep, dir)
	}
	if perr != nil {
		return perr
	}
	if d.keep {
		prog.Printf("cluster left running: export KUBECONFIG=%s; meganode down --state-dir %s", st.Kubeconfig, st.Dir)
	}
	prog.Printf("demo done in %.1fs", time.Since(began).Seconds())
	return nil
}
