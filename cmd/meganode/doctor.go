package main

// meganode doctor: check a host for its role, probe the bridge port limit, and
// size a cluster. The logic lives in internal/doctor; this file is flags and
// output. Exit codes: 0 ok, 1 problems found (or the probe failed), 2 usage.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/meganode/meganode/internal/doctor"
)

func init() {
	register("doctor", "check hosts (host), probe the bridge port limit (bridge), size a cluster (plan)", runDoctor)
}

const doctorUsage = `usage: meganode doctor <host|bridge|plan> [flags]

  host    read this host's sysctls, limits, kernel and store disk and compare them
          with what the role needs (--role control-plane|store|node); --fix writes
          a sysctl drop-in
  bridge  list bridges and their ports; --probe measures the kernel's bridge port
          limit in a network namespace of its own (root)
  plan    size a cluster: stores and --etcd-servers-overrides, apiservers and
          their flags, controller-manager, kubelet, scheduler shards, addresses

exit codes: 0 ok, 1 problems found, 2 usage
run 'meganode doctor <command> -h' for its flags
`

// errUsage makes runDoctor exit 2.
type errUsage struct {
	msg  string
	full bool // print the whole doctor usage
}

func (e errUsage) Error() string { return e.msg }

func runDoctor(args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, doctorUsage)
		os.Exit(2)
	}
	var err error
	switch args[0] {
	case "host":
		err = doctorHost(args[1:], os.Stdout, os.Stderr)
	case "bridge":
		err = doctorBridge(args[1:], os.Stdout, os.Stderr)
	case "plan":
		err = doctorPlan(args[1:], os.Stdout, os.Stderr)
	case "-h", "--help", "help":
		fmt.Fprint(os.Stdout, doctorUsage)
		return nil
	default:
		err = errUsage{msg: fmt.Sprintf("unknown doctor command %q", args[0]), full: true}
	}
	var ue errUsage
	if errors.As(err, &ue) {
		if ue.full {
			fmt.Fprintf(os.Stderr, "meganode doctor: %s\n\n%s", ue.msg, doctorUsage)
		} else {
			fmt.Fprintf(os.Stderr, "meganode doctor %s: %s (see 'meganode doctor %s -h')\n", args[0], ue.msg, args[0])
		}
		os.Exit(2)
	}
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

// parseFlags parses and turns flag errors and stray arguments into usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(os.Stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage{msg: err.Error()}
	}
	if fs.NArg() > 0 {
		return errUsage{msg: fmt.Sprintf("unexpected arguments: %s", strings.Join(fs.Args(), " "))}
	}
	return nil
}

func doctorHost(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("doctor host", flag.ContinueOnError)
	def := doctor.DefaultParams()
	role := fs.String("role", string(def.Role), "what the host is for: control-plane, store or node")
	pods := fs.Int("pods-per-node", def.PodsPerNode, "pods this node will run (role node)")
	nodes := fs.Int("nodes", def.Nodes, "nodes in the cluster (sizes apiserver connections)")
	apiservers := fs.Int("apiservers", 0, "apiservers sharing the nodes' connections (0: as `doctor plan` sizes it)")
	cpus := fs.Int("cpus", 0, "CPUs to size per-core settings for (0: this host's)")
	pid := fs.Int("pid", 0, "read the open-file/process limits of this running process (e.g. the apiserver) instead of this shell's")
	dataDir := fs.String("data-dir", "/var/lib/meganode", "store data directory whose fsync latency is measured (role store)")
	noFsync := fs.Bool("no-fsync", false, "do not measure fsync latency")
	asJSON := fs.Bool("json", false, "print JSON")
	fix := fs.Bool("fix", false, "write the recommended sysctls to --fix-file (prints exactly what it wrote; does not apply them)")
	fixFile := fs.String("fix-file", "/etc/sysctl.d/90-meganode.conf", "drop-in file --fix writes")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	r, err := doctor.ParseRole(*role)
	if err != nil {
		return errUsage{msg: err.Error()}
	}
	if *pods <= 0 || *nodes <= 0 || *apiservers < 0 || *cpus < 0 {
		return errUsage{msg: "--pods-per-node and --nodes must be > 0; --apiservers and --cpus ≥ 0"}
	}
	p := doctor.Params{Role: r, PodsPerNode: *pods, Nodes: *nodes, APIServers: *apiservers, CPUs: *cpus}

	facts, err := doctor.Gather(doctor.HostFS(), *pid)
	if err != nil {
		return err
	}
	if r == doctor.RoleStore && !*noFsync {
		if !*asJSON {
			fmt.Fprintf(stderr, "measuring fsync latency in %s ...\n", *dataDir)
		}
		res, err := doctor.MeasureFsync(*dataDir, doctor.FsyncOptions{})
		if err != nil {
			facts.FsyncErr = err.Error()
		} else {
			facts.Fsync = res
		}
	} else if *noFsync {
		facts.FsyncErr = "not measured (--no-fsync)"
	}

	rep := doctor.NewHostReport(facts, p)
	if *fix {
		content, n := doctor.FixContent(rep.Checks, doctor.FixHeader(rep, time.Now()))
		rep.Fix = &doctor.FixResult{Path: *fixFile, Content: content, Keys: n}
		if n > 0 {
			if err := doctor.WriteFileAtomic(*fixFile, content); err != nil {
				return fmt.Errorf("--fix: writing %s: %w", *fixFile, err)
			}
			rep.Fix.Written = true
		}
	}
	if *asJSON {
		if err := doctor.WriteJSON(stdout, rep); err != nil {
			return err
		}
	} else {
		rep.WriteTable(stdout)
	}
	if rep.Fix != nil {
		if rep.Fix.Written {
			if *asJSON {
				fmt.Fprintf(stderr, "--fix: wrote %d setting(s) to %s (content in the JSON's fix.content); apply with: sysctl -p %s\n", rep.Fix.Keys, rep.Fix.Path, rep.Fix.Path)
			} else {
				fmt.Fprintf(stdout, "\n--fix: wrote %d setting(s) to %s:\n%s\napply with: sysctl -p %s   (limits such as LimitNOFILE are not sysctls: see the 'do:' lines)\n",
					rep.Fix.Keys, rep.Fix.Path, indent(rep.Fix.Content), rep.Fix.Path)
			}
		} else {
			fmt.Fprintf(stderr, "--fix: no sysctl to change; %s not written\n", rep.Fix.Path)
		}
	}
	if n := rep.Problems(); n > 0 {
		return fmt.Errorf("%d problem(s) found", n)
	}
	return nil
}

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = "    " + l
	}
	return strings.Join(lines, "\n")
}

func doctorBridge(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("doctor bridge", flag.ContinueOnError)
	probe := fs.Bool("probe", false, "measure the bridge port limit: create a network namespace, a bridge and veth pairs until the kernel refuses (root; cleans up, also on SIGINT/SIGTERM)")
	pods := fs.Int("pods-per-node", 0, "report a problem if this many pods per node do not fit on one bridge")
	chunk := fs.Int("chunk", 512, "veth pairs per `ip -batch` run")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *pods < 0 || *chunk <= 0 {
		return errUsage{msg: "--pods-per-node must be ≥ 0 and --chunk > 0"}
	}
	type out struct {
		KernelLimit  int                       `json:"kernel_port_limit"`
		PortBits     int                       `json:"br_port_bits"`
		HostBridges  []doctor.HostBridge       `json:"host_bridges"`
		Probe        *doctor.BridgeProbeResult `json:"probe,omitempty"`
		StaleProbeNS []string                  `json:"stale_probe_namespaces,omitempty"`
		PodsPerNode  int                       `json:"pods_per_node,omitempty"`
		Problems     []string                  `json:"problems"`
	}
	o := out{KernelLimit: doctor.BridgeMaxPorts, PortBits: doctor.BridgePortBits, PodsPerNode: *pods, Problems: []string{}}
	o.HostBridges, _ = doctor.HostBridges(doctor.HostFS())
	if o.HostBridges == nil {
		o.HostBridges = []doctor.HostBridge{}
	}
	o.StaleProbeNS = doctor.StaleProbeNamespaces()

	if *probe {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		if !*asJSON {
			fmt.Fprintf(stderr, "probing: namespace meganode-probe-%d, attaching veth pairs to a bridge until the kernel refuses ...\n", os.Getpid())
		}
		res, err := doctor.ProbeBridge(ctx, doctor.BridgeProbeOptions{Chunk: *chunk})
		stop()
		if err != nil {
			if res.CleanedUp || res.Namespace == "" || !doctor.NetnsExists(res.Namespace) {
				return fmt.Errorf("bridge probe: %w (nothing left behind)", err)
			}
			return fmt.Errorf("bridge probe: %w", err)
		}
		o.Probe = &res
		o.KernelLimit = res.Ports
	}
	limit := o.KernelLimit
	for _, b := range o.HostBridges {
		if b.Ports*10 >= limit*9 {
			o.Problems = append(o.Problems, fmt.Sprintf("bridge %s has %d of %d ports in use", b.Name, b.Ports, limit))
		}
	}
	if *pods > limit {
		o.Problems = append(o.Problems, fmt.Sprintf("%d pods per node do not fit on one bridge (%d ports): use more nodes or a CNI without a bridge", *pods, limit))
	}
	if len(o.StaleProbeNS) > 0 {
		o.Problems = append(o.Problems, fmt.Sprintf("namespaces left by killed probes: %s (remove with: ip netns delete NAME)", strings.Join(o.StaleProbeNS, ", ")))
	}

	if *asJSON {
		if err := doctor.WriteJSON(stdout, o); err != nil {
			return err
		}
	} else {
		if o.Probe != nil {
			r := o.Probe
			fmt.Fprintf(stdout, "bridge port limit (measured): %d ports attached, the next refused with %q\n", r.Ports, r.Refusal)
			fmt.Fprintf(stdout, "  = %d port numbers (port 0 is reserved) = 2^%d: BR_PORT_BITS = %d\n", r.PortNumbers, r.PortBits, r.PortBits)
			fmt.Fprintf(stdout, "  probe took %.2f s in namespace %s; cleaned up: %v\n", r.Seconds, r.Namespace, r.CleanedUp)
		} else {
			fmt.Fprintf(stdout, "bridge port limit (kernel constant, not measured): %d ports (BR_PORT_BITS=%d: %d port numbers, port 0 reserved); measure with --probe\n",
				doctor.BridgeMaxPorts, doctor.BridgePortBits, doctor.BridgePortNumbers)
		}
		fmt.Fprintln(stdout, "this is the ceiling on pods per node with a bridge CNI, whatever maxPods says [sources: kernel-bridge, pods-per-node, design-6]")
		if len(o.HostBridges) == 0 {
			fmt.Fprintln(stdout, "host bridges: none")
		}
		for _, b := range o.HostBridges {
			fmt.Fprintf(stdout, "host bridge %s: %d/%d ports\n", b.Name, b.Ports, limit)
		}
		for _, p := range o.Problems {
			fmt.Fprintln(stdout, "PROBLEM: "+p)
		}
	}
	if len(o.Problems) > 0 {
		return fmt.Errorf("%d problem(s) found", len(o.Problems))
	}
	return nil
}

func doctorPlan(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("doctor plan", flag.ContinueOnError)
	nodes := fs.Int("nodes", 0, "nodes in the cluster (required)")
	pods := fs.Int("pods", 0, "pods in the cluster")
	bench := fs.String("bench-json", "", "`meganode bench` JSON result (lease-flood preferred) from the target machine: the store capacity to plan with (default: the committed docs/benchmarks.md run)")
	simJSON := fs.String("simulate-json", "", "`meganode scheduler simulate --json` output: the scheduler shapes, costs and cores to size shards from (default: the committed docs/bench/scheduler-sim/run-100k.json)")
	storeWPS := fs.Float64("store-writes-per-sec", 0, "store write throughput to plan with (overrides --bench-json)")
	cores := fs.Int("cores", 0, "CPU cores per node (maxPods guideline min(110, 10 × cores))")
	format := fs.String("format", "table", "output: table, yaml, flags or json")
	asJSON := fs.Bool("json", false, "same as --format json")
	lease := fs.Int("lease-duration", doctor.DefaultLeaseDurationSeconds, "kubelet nodeLeaseDurationSeconds (renewed every 1/4)")
	podRate := fs.Float64("pods-per-second", 0, "pod creation/scheduling rate (0: pods / --schedule-seconds)")
	schedSecs := fs.Float64("schedule-seconds", doctor.DefaultScheduleSeconds, "time to place all pods (sizes scheduler shards)")
	mem := fs.Float64("apiserver-memory", 0, "memory per apiserver in GiB (0: estimated from nodes)")
	host := fs.String("store-host", doctor.DefaultStoreHost, "host of the stores in the flags")
	port := fs.Int("store-port", doctor.DefaultStoreBasePort, "port of the default store; events, leases, pods get +1, +2, +3")
	cidr := fs.String("pod-cidr", doctor.DefaultPodCIDRv4, "IPv4 pod range to check")
	kver := fs.String("kube-version", "1.36", "Kubernetes version (feature gates and flags differ)")
	bridgePorts := fs.Int("bridge-ports", doctor.BridgeMaxPorts, "bridge port limit (from `doctor bridge --probe`)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *asJSON {
		*format = "json"
	}
	switch *format {
	case "table", "yaml", "flags", "json":
	default:
		return errUsage{msg: fmt.Sprintf("--format %q: want table, yaml, flags or json", *format)}
	}
	minor, err := kubeMinor(*kver)
	if err != nil {
		return errUsage{msg: err.Error()}
	}
	in := doctor.PlanInput{Nodes: *nodes, Pods: *pods, CoresPerNode: *cores, LeaseDurationSeconds: *lease,
		PodsPerSecond: *podRate, ScheduleSeconds: *schedSecs, APIServerMemoryGiB: *mem, StoreHost: *host,
		StoreBasePort: *port, PodCIDRv4: *cidr, KubeMinor: minor, BridgePorts: *bridgePorts}
	if *bench != "" {
		data, err := os.ReadFile(*bench)
		if err != nil {
			return fmt.Errorf("--bench-json: %w", err)
		}
		ops, desc, err := doctor.StoreThroughput(data)
		if err != nil {
			return fmt.Errorf("--bench-json %s: %w", *bench, err)
		}
		in.StoreWritesPerSec, in.StoreSource = ops, desc+" ("+*bench+")"
	}
	if *simJSON != "" {
		data, err := os.ReadFile(*simJSON)
		if err != nil {
			return fmt.Errorf("--simulate-json: %w", err)
		}
		projs, err := doctor.SimulateProjections(data)
		if err != nil {
			return fmt.Errorf("--simulate-json %s: %w", *simJSON, err)
		}
		in.SimProjections, in.SimSource = projs, fmt.Sprintf("measured: %d projections from %s", len(projs), *simJSON)
	}
	if *storeWPS > 0 {
		in.StoreWritesPerSec, in.StoreSource = *storeWPS, "given: --store-writes-per-sec"
	}
	if err := in.Validate(); err != nil {
		return errUsage{msg: err.Error()}
	}
	plan := doctor.Plan(in)
	switch *format {
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
		if *format != "table" {
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
