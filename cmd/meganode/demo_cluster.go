package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/cluster"
)

// withoutFlag removes a boolean flag (given as name or name=true) from args.
func withoutFlag(args []string, name string) ([]string, bool) {
	var out []string
	found := false
	for _, a := range args {
		if a == name || a == name+"=true" || a == "-"+name[2:] {
			found = true
			continue
		}
		out = append(out, a)
	}
	return out, found
}

// runClusterDemo: up (store, apiserver, controller-manager, scheduler, KWOK, nodes), pods under
// measurement, the SLO report, down. Sized for a 2-core machine by default.
func runClusterDemo(args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	f := addUpFlags(fs, 1000, 2000)
	deploy := fs.Bool("deployment", false, "create the pods through a Deployment")
	qps := fs.Float64("qps", 50, "pod creates per second (the SLO is measured below saturation; 0 = unthrottled)")
	keep := fs.Bool("keep", false, "leave the cluster running (stop it with `meganode down`)")
	out := fs.String("out", "", "directory for report.json and charts (default <state-dir>/report)")
	_ = fs.Bool("store-only", false, "run the store-only demo instead")
	if ok, err := parseUpFlags(fs, args); !ok {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	prog := bench.NewProgress(os.Stderr)
	began := time.Now()
	prog.Printf("meganode demo: %d KWOK nodes and %d pods on a real kube-apiserver v1.36.3 over %s-store", *f.nodes, *f.pods, *f.store)
	st, err := cluster.Up(ctx, f.options(prog))
	if err != nil {
		return err
	}
	if !*keep {
		defer func() {
			prog.Phase("stopping the cluster…")
			if err := st.Down(15*time.Second, nil); err != nil {
				fmt.Fprintln(os.Stderr, "down:", err)
			}
			prog.Printf("cluster stopped (%d processes); logs in %s", len(st.Components), filepath.Join(st.Dir, "logs"))
		}()
	}
	prog.Printf("control plane and %d nodes up in %.1fs", st.Nodes, time.Since(began).Seconds())
	rep, perr := measurePods(ctx, st, cluster.PodOptions{Count: *f.pods, Deployment: *deploy, QPS: *qps, Timeout: 8 * time.Minute, Progress: prog})
	if rep != nil {
		dir := *out
		if dir == "" {
			dir = filepath.Join(st.Dir, "report")
		}
		printReport(rep, dir)
	}
	if perr != nil {
		return perr
	}
	if *keep {
		prog.Printf("cluster left running: export KUBECONFIG=%s; meganode down --state-dir %s", st.Kubeconfig, st.Dir)
	}
	prog.Printf("demo done in %.1fs", time.Since(began).Seconds())
	return nil
}
