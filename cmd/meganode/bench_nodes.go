package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/cluster"
)

// benchNodesFlags are `bench nodes`' flags.
type benchNodesFlags struct {
	kind     string
	nodes    int
	ppn      int
	store    string
	window   time.Duration
	settle   time.Duration
	qps      float64
	timeout  time.Duration
	out      string
	stateDir string
	include  []string
	kinds    []string // parsed --kind
}

func newBenchNodesCmd() *cobra.Command {
	f := &benchNodesFlags{}
	cmd := &cobra.Command{
		Use:   "nodes",
		Short: "hollow kubelets vs KWOK nodes at one size: store, watch, Event, CPU and memory load side by side",
		Long: `nodes runs the same load on N hollow kubelets (the kubelet's own code, 'up --nodes 0
--kubelets N') and on N KWOK nodes ('up --nodes N'), one after the other: for each it starts
the cluster, creates N × --pods-per-node pods as 'create-pods' does and waits until they run
(the pod phase), waits half of --settle, measures one steady --window, and stops the cluster
('down'), checking that no process is left. report.json, summary.md and charts in --out
show, per kind: store requests/s by operation and resource, store keys and bytes by
resource, watches on kube-apiserver and on the store, Events written, kube-apiserver and
store CPU and memory, pod startup latency and API p99 per verb, per node and as
kubelet/KWOK ratios. --include adds the runs of an earlier report.json (another store's).`,
		Example: `  meganode bench nodes --kind both --nodes 200 --pods-per-node 5 --qps 20 --out /tmp/nodes
  meganode bench nodes --kind kubelet --store etcd --nodes 200 --pods-per-node 5 --qps 20 --out /tmp/nodes-etcd --include /tmp/nodes/report.json`,
		Args: noArgs,
		RunE: action(f, runBenchNodes),
	}
	fs := cmd.Flags()
	fs.StringVar(&f.kind, "kind", "both", "node agent: kubelet (hollow kubelets), kwok or both (kubelet first)")
	fs.IntVar(&f.nodes, "nodes", 100, "nodes of each kind")
	fs.IntVar(&f.ppn, "pods-per-node", 5, "pods per node")
	fs.StringVar(&f.store, "store", cluster.StoreMeganode, "store under kube-apiserver: meganode or etcd")
	fs.DurationVar(&f.window, "window", 60*time.Second, "steady window measured once every pod runs")
	fs.DurationVar(&f.settle, "settle", 20*time.Second, "pause after up (and half of it after the pods run) before measuring")
	fs.Float64Var(&f.qps, "qps", 20, "pod creates per second (0: as fast as the apiserver takes them)")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Minute, "how long to wait for every pod to run")
	fs.StringVar(&f.out, "out", "", "directory for report.json, summary.md and the charts (required)")
	fs.StringVar(&f.stateDir, "state-dir", filepath.Join(os.TempDir(), "meganode-bench-nodes"), "parent of each run's cluster state directory (<dir>/<kind>-<store>)")
	fs.StringArrayVar(&f.include, "include", nil, "report.json of an earlier 'bench nodes' run whose runs to show beside these (repeatable)")
	completeValues(cmd, "kind", "both", cluster.AgentKubelet, cluster.AgentKWOK)
	completeValues(cmd, "store", cluster.StoreMeganode, cluster.StoreEtcd)
	return cmd
}

func (f *benchNodesFlags) validate() error {
	switch f.kind {
	case "both":
		f.kinds = []string{cluster.AgentKubelet, cluster.AgentKWOK}
	case cluster.AgentKubelet, cluster.AgentKWOK:
		f.kinds = []string{f.kind}
	default:
		return usagef("--kind: want kubelet, kwok or both, got %q", f.kind)
	}
	if f.nodes < 1 || f.nodes > maxKubelets {
		return usagef("--nodes must be between 1 and %d, got %d", maxKubelets, f.nodes)
	}
	if f.ppn < 1 {
		return usagef("--pods-per-node must be ≥ 1, got %d", f.ppn)
	}
	if err := oneOf("store", f.store, cluster.StoreMeganode, cluster.StoreEtcd); err != nil {
		return err
	}
	if f.window <= 0 || f.settle < 0 || f.qps < 0 || f.timeout <= 0 {
		return usagef("--window and --timeout must be > 0, --settle and --qps ≥ 0")
	}
	if f.out == "" {
		return usagef("--out is required")
	}
	return nil
}

func runBenchNodes(ctx context.Context, cmd *cobra.Command, f *benchNodesFlags) error {
	var included []*cluster.NodesRun
	for _, p := range f.include {
		old, err := cluster.ReadNodesReport(p)
		if err != nil {
			return fmt.Errorf("--include: %w", err)
		}
		for _, r := range old.Runs {
			if r.IncludedFrom == "" {
				r.IncludedFrom = p
			}
			included = append(included, r)
		}
	}
	prog := bench.NewProgress(os.Stderr)
	rep := cluster.RunNodesBench(ctx, cluster.NodesBenchOptions{Kinds: f.kinds, Nodes: f.nodes, PodsPerNode: f.ppn, Store: f.store,
		Window: f.window, QPS: f.qps, Settle: f.settle, Timeout: f.timeout, StateDir: f.stateDir, Progress: prog})
	rep.Command = append([]string{"meganode"}, os.Args[1:]...)
	rep.Runs = append(rep.Runs, included...)
	files, err := rep.WriteFiles(f.out)
	rep.WriteSummary(os.Stdout)
	for _, p := range files {
		fmt.Println("wrote", p)
	}
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, r := range rep.Runs {
		if r.IncludedFrom != "" {
			continue
		}
		if r.Error != "" {
			errs = append(errs, fmt.Errorf("%s: %s", r.Label(), r.Error))
		}
		if len(r.ProcessesLeft) > 0 {
			errs = append(errs, fmt.Errorf("%s: %d processes left after down", r.Label(), len(r.ProcessesLeft)))
		}
	}
	return errors.Join(errs...)
}
