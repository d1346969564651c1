package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meganode/meganode/internal/doctor"
)

// doctorPlanFlags are `doctor plan`'s flags.
type doctorPlanFlags struct {
	nodes       int
	pods        int
	bench       string
	simJSON     string
	storeWPS    float64
	cores       int
	format      string
	asJSON      bool
	lease       int
	podRate     float64
	schedSecs   float64
	mem         float64
	host        string
	port        int
	cidr        string
	kver        string
	bridgePorts int
	replicas    int
	nodeAgent   string // --node-agent: doctor.NodeAgentKWOK or doctor.NodeAgentKubelet
	nodesJSON   string // --nodes-json: a `bench nodes` report.json (implies --node-agent kubelet)
	agentSet    bool   // --node-agent given on the command line
}

func newDoctorPlanCmd() *cobra.Command {
	f := &doctorPlanFlags{}
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "size a cluster: stores, apiservers and their flags, controller-manager, kubelet, scheduler shards",
		Long: `plan sizes a cluster of --nodes nodes and --pods pods: stores and --etcd-servers-overrides,
apiservers and their flags, controller-manager, kubelet, scheduler shards and cores, and the
address ranges. The store's capacity comes from a 'meganode bench' result (--bench-json, or
the committed docs/benchmarks.md run), the scheduler's from 'meganode scheduler simulate
--json' (--simulate-json, or the committed run); every line says which figure it used.
Exit 1 when a target cannot be met.`,
		Example: `  meganode doctor plan --nodes 1000000
  meganode doctor plan --nodes 5000 --pods 150000 --format flags
  meganode doctor plan --nodes 100000 --pods 1000000 --store-replicas 3
  meganode doctor plan --nodes 100000 --bench-json bin/bench-results/lease-flood/results.json --simulate-json /tmp/sim.json
  meganode doctor plan --nodes 5000 --pods 150000 --node-agent kubelet
  meganode doctor plan --nodes 5000 --pods 150000 --nodes-json /tmp/nodes/report.json`,
		Args: noArgs,
		RunE: action(f, func(ctx context.Context, cmd *cobra.Command, f *doctorPlanFlags) error {
			return f.run(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr())
		}),
	}
	fs := cmd.Flags()
	fs.IntVar(&f.nodes, "nodes", 0, "nodes in the cluster (required)")
	fs.IntVar(&f.pods, "pods", 0, "pods in the cluster")
	fs.StringVar(&f.bench, "bench-json", "", "'meganode bench' JSON result (lease-flood preferred) from the target machine: the store capacity to plan with (default: the committed docs/benchmarks.md run)")
	fs.StringVar(&f.simJSON, "simulate-json", "", "'meganode scheduler simulate --json' output: the scheduler shapes, costs and cores to size shards from (default: the committed docs/bench/scheduler-sim/run-100k.json)")
	fs.Float64Var(&f.storeWPS, "store-writes-per-sec", 0, "store write throughput to plan with (overrides --bench-json)")
	fs.IntVar(&f.cores, "cores", 0, "CPU cores per node (maxPods guideline min(110, 10 × cores))")
	fs.StringVar(&f.format, "format", "table", "output: table, yaml, flags or json")
	fs.BoolVar(&f.asJSON, "json", false, "same as --format json")
	fs.IntVar(&f.lease, "lease-duration", doctor.DefaultLeaseDurationSeconds, "kubelet nodeLeaseDurationSeconds (renewed every 1/4)")
	fs.Float64Var(&f.podRate, "pods-per-second", 0, "pod creation/scheduling rate (0: pods / --schedule-seconds)")
	fs.Float64Var(&f.schedSecs, "schedule-seconds", doctor.DefaultScheduleSeconds, "time to place all pods (sizes scheduler shards)")
	fs.Float64Var(&f.mem, "apiserver-memory", 0, "memory per apiserver in GiB (0: estimated from nodes)")
	fs.StringVar(&f.host, "store-host", doctor.DefaultStoreHost, "host of the stores in the flags")
	fs.IntVar(&f.port, "store-port", doctor.DefaultStoreBasePort, "port of the default store; events, leases, pods get +1, +2, +3")
	fs.StringVar(&f.cidr, "pod-cidr", doctor.DefaultPodCIDRv4, "IPv4 pod range to check")
	fs.StringVar(&f.kver, "kube-version", "1.36", "Kubernetes version (feature gates and flags differ)")
	fs.IntVar(&f.bridgePorts, "bridge-ports", doctor.BridgeMaxPorts, "bridge port limit (from 'doctor bridge --probe')")
	fs.IntVar(&f.replicas, "store-replicas", 1, "members of each store's replicated group (as 'meganode up --store-replicas'): memory and cores per member and in total; odd (3 tolerates one member's loss)")
	fs.StringVar(&f.nodeAgent, "node-agent", doctor.NodeAgentKWOK, "per-node figures to size with: kwok (the plan's own, as the demo's KWOK nodes) or kubelet (store writes, watches and Events per node measured on hollow kubelets by 'meganode bench nodes')")
	fs.StringVar(&f.nodesJSON, "nodes-json", "", "'meganode bench nodes' report.json from the target machine: its kubelet run's per-node figures (implies --node-agent kubelet; default: the committed docs/bench/kubelets/side-by-side run)")
	completeValues(cmd, "format", "table", "yaml", "flags", "json")
	completeValues(cmd, "node-agent", doctor.NodeAgentKWOK, doctor.NodeAgentKubelet)
	cmd.PreRun = func(cmd *cobra.Command, _ []string) { f.agentSet = cmd.Flags().Changed("node-agent") }
	return cmd
}

func (f *doctorPlanFlags) validate() error {
	if f.asJSON {
		f.format = "json"
	}
	if err := oneOf("format", f.format, "table", "yaml", "flags", "json"); err != nil {
		return err
	}
	if _, err := kubeMinor(f.kver); err != nil {
		return usageError{msg: err.Error()}
	}
	if f.replicas < 1 {
		return usagef("--store-replicas must be ≥ 1")
	}
	if err := oneOf("node-agent", f.nodeAgent, doctor.NodeAgentKWOK, doctor.NodeAgentKubelet); err != nil {
		return err
	}
	if f.nodesJSON != "" {
		if f.agentSet && f.nodeAgent != doctor.NodeAgentKubelet {
			return usagef("--nodes-json holds kubelet figures: not with --node-agent %s", f.nodeAgent)
		}
		f.nodeAgent = doctor.NodeAgentKubelet
	}
	return nil
}

func (f *doctorPlanFlags) run(ctx context.Context, stdout, stderr io.Writer) error {
	minor, err := kubeMinor(f.kver)
	if err != nil {
		return usageError{msg: err.Error()}
	}
	in := doctor.PlanInput{Nodes: f.nodes, Pods: f.pods, CoresPerNode: f.cores, LeaseDurationSeconds: f.lease,
		PodsPerSecond: f.podRate, ScheduleSeconds: f.schedSecs, APIServerMemoryGiB: f.mem, StoreHost: f.host,
		StoreBasePort: f.port, PodCIDRv4: f.cidr, KubeMinor: minor, BridgePorts: f.bridgePorts, StoreReplicas: f.replicas}
	if f.bench != "" {
		data, err := os.ReadFile(f.bench)
		if err != nil {
			return fmt.Errorf("--bench-json: %w", err)
		}
		ops, desc, err := doctor.StoreThroughput(data)
		if err != nil {
			return fmt.Errorf("--bench-json %s: %w", f.bench, err)
		}
		in.StoreWritesPerSec, in.StoreSource = ops, desc+" ("+f.bench+")"
	}
	if f.simJSON != "" {
		data, err := os.ReadFile(f.simJSON)
		if err != nil {
			return fmt.Errorf("--simulate-json: %w", err)
		}
		projs, err := doctor.SimulateProjections(data)
		if err != nil {
			return fmt.Errorf("--simulate-json %s: %w", f.simJSON, err)
		}
		in.SimProjections, in.SimSource = projs, fmt.Sprintf("measured: %d projections from %s", len(projs), f.simJSON)
	}
	switch {
	case f.nodesJSON != "":
		data, err := os.ReadFile(f.nodesJSON)
		if err != nil {
			return fmt.Errorf("--nodes-json: %w", err)
		}
		fig, err := doctor.NodeAgentFromReport(data, "measured: "+f.nodesJSON)
		if err != nil {
			return fmt.Errorf("--nodes-json %s: %w", f.nodesJSON, err)
		}
		in.NodeAgent = &fig
	case f.nodeAgent == doctor.NodeAgentKubelet:
		fig := doctor.DefaultKubeletFigures
		in.NodeAgent = &fig
	}
	if f.storeWPS > 0 {
		in.StoreWritesPerSec, in.StoreSource = f.storeWPS, "given: --store-writes-per-sec"
	}
	if err := in.Validate(); err != nil {
		return usageError{msg: err.Error()}
	}
	plan := doctor.Plan(in)
	switch f.format {
	case "json":
		if err := doctor.WriteJSON(stdout, plan); err != nil {
			return err
		}
	case "yaml":
		fmt.Fprint(stdout, plan.YAMLText())
	case "flags":
		fmt.Fprint(stdout, plan.FlagsText())
	default:
		plan.WriteTable(stdout)
	}
	if len(plan.Problems) > 0 {
		if f.format != "table" {
			for _, p := range plan.Problems {
				fmt.Fprintln(stderr, "problem: "+p)
			}
		}
		return fmt.Errorf("%d problem(s) found", len(plan.Problems))
	}
	return nil
}

func kubeMinor(v string) (int, error) {
	s := strings.TrimPrefix(v, "v")
	parts := strings.Split(s, ".")
	if len(parts) < 2 || parts[0] != "1" {
		return 0, fmt.Errorf("--kube-version %q: want 1.N", v)
	}
	m, err := strconv.Atoi(parts[1])
	if err != nil || m <= 0 {
		return 0, fmt.Errorf("--kube-version %q: want 1.N", v)
	}
	return m, nil
}
