package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/cluster"
	"github.com/meganode/meganode/internal/procfs"
)

// benchScaleFlags are `bench scale`'s flags: up's (the cluster of each run) and the ladder's.
type benchScaleFlags struct {
	up           upFlags
	stack        string
	ladder       string
	podsPerNode  float64
	maxLeaseRate float64
	hold         time.Duration
	nodeTimeout  time.Duration
	podTimeout   time.Duration
	concurrency  int
	qps          float64
	memFloorMiB  int
	out          string
	sizes        []int // parsed --ladder, or --nodes
	stacks       []string
}

// newBenchScaleCmd: issue 37 part 2 — N KWOK nodes and M pods through a real kube-apiserver,
// meganode and the stock stack one after the other.
func newBenchScaleCmd() *cobra.Command {
	f := &benchScaleFlags{}
	cmd := &cobra.Command{
		Use:   "scale",
		Short: "a cluster of --nodes KWOK nodes and --pods pods through a real kube-apiserver, meganode then stock: times, pods/s, API p99 vs the EKS SLOs, CPU and RSS",
		Long: `scale runs the reference's procedure on this machine: start a cluster ('meganode up' without
nodes), make --nodes KWOK nodes, wait until every node is Ready, untainted and has its Lease
(timed), create --pods pods as fast as kube-apiserver takes them (--concurrency in flight,
--qps to pace), wait until every pod has a node (timed: pods/s), then measure --hold with the
cluster quiet (the node lease renewal rate it holds), and stop the cluster. It reports the
time to all nodes Ready, the time to place all pods, pods/s, kube-apiserver's p99 per verb
over the pod window against the EKS SLOs (1 s gets and writes, 30 s lists), every component's
CPU (cores, per phase) and peak RSS (store, kube-apiserver, scheduler, KWOK…), the machine's
lowest free memory, and the placement (every pod bound once, no node over-committed).

--stack both runs meganode (meganode-store + the meganode scheduler), then the stock stack
(etcd v3.6 + kube-scheduler), each on a fresh cluster with its store data on tmpfs.
--ladder 5000,20000,50000,100000 steps the sizes (both stacks at one size, then the next) and
stops a stack at the first size it does not hold: a phase past its timeout, a process lost,
or the machine's MemAvailable below --mem-floor-mib (the run is then stopped, to keep the
machine usable). The report says the largest size each stack held and what stopped it.

Node leases: --node-lease-seconds 0 (the default) picks the lease duration so that the
renewals stay at most --max-lease-rate/s (KWOK renews at a quarter of the duration), the
same for both stacks: kube-apiserver on a 2-core machine holds ~700–800 renewals/s in all
('bench heartbeat'), so at the kubelet's 40 s lease the heartbeat alone bounds a cluster
at ~7,000 nodes here. --node-lease-seconds 40 shows where it stops each stack instead.

Writes report.json and summary.md to --out (after every run, so a stopped ladder keeps
what it measured), and each run's window reports and charts in <out>/<stack>-<nodes>/.
A figure not measured is "missing" (null in JSON), never zero. Ctrl-C stops the run and
its cluster.`,
		Example: `  meganode bench scale --nodes 5000 --pods 5000 --stack both --out /tmp/scale
  meganode bench scale --ladder 5000,20000,50000,100000 --stack both --out docs/bench/scale
  meganode bench scale --nodes 100000 --pods 100000 --stack meganode --state-dir /var/tmp/scale
  meganode bench scale --nodes 8000 --node-lease-seconds 40 --stack stock`,
		Args: noArgs,
		RunE: action(f, runBenchScale),
	}
	f.up.register(cmd)
	fs := cmd.Flags()
	setDefaults(fs, map[string]string{"nodes": "5000", "pods": "0", "node-lease-seconds": "0", "scheduler": cluster.SchedulerMeganode,
		"state-dir": filepath.Join(os.TempDir(), "meganode-scale")})
	fs.StringVar(&f.stack, "stack", "both", "meganode, stock or both (meganode first)")
	fs.StringVar(&f.ladder, "ladder", "", "node counts to step through, comma-separated (instead of --nodes); each stack stops at its first size not held")
	fs.Float64Var(&f.podsPerNode, "pods-per-node", 1, "pods per node at each size (--pods sets the count of a single --nodes run instead)")
	fs.Float64Var(&f.maxLeaseRate, "max-lease-rate", 200, "with --node-lease-seconds 0: the lease duration is the shortest (≥ 40 s) keeping renewals ≤ this many per second")
	fs.DurationVar(&f.hold, "hold", 60*time.Second, "after the pods are placed: the quiet window measuring the lease renewal rate held (0: skip)")
	fs.DurationVar(&f.nodeTimeout, "node-timeout", 0, "how long the nodes may take to be Ready with their Lease (0: 5 min + 30 ms a node)")
	fs.DurationVar(&f.podTimeout, "pod-timeout", 0, "how long the pods may take to get a node (0: 5 min + 30 ms a pod)")
	fs.IntVar(&f.concurrency, "concurrency", 32, "pod creates in flight")
	fs.Float64Var(&f.qps, "qps", 0, "pod creates per second (0: as fast as kube-apiserver takes them)")
	fs.IntVar(&f.memFloorMiB, "mem-floor-mib", 2048, "stop a run (stop: memory) when the machine's MemAvailable falls below this")
	fs.StringVar(&f.out, "out", "", "directory for report.json, summary.md and each run's reports (default <state-dir>/report)")
	completeValues(cmd, "stack", "both", cluster.StackMeganode, cluster.StackStock)
	return cmd
}

func (f *benchScaleFlags) validate() error {
	if err := oneOf("stack", f.stack, "both", cluster.StackMeganode, cluster.StackStock); err != nil {
		return err
	}
	f.stacks = []string{f.stack}
	if f.stack == "both" {
		f.stacks = []string{cluster.StackMeganode, cluster.StackStock}
	}
	if f.up.store != cluster.StoreMeganode || f.up.sched.scheduler != cluster.SchedulerMeganode {
		return usagef("--store and --scheduler: scale picks each stack's with --stack")
	}
	if f.up.record != "" || f.up.kubelets != 0 {
		return usagef("--record and --kubelets are up's, not scale's")
	}
	f.sizes = nil
	if f.ladder != "" {
		for _, s := range strings.Split(f.ladder, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n <= 0 {
				return usagef("--ladder: want positive node counts, comma-separated, got %q", f.ladder)
			}
			if len(f.sizes) > 0 && n <= f.sizes[len(f.sizes)-1] {
				return usagef("--ladder: sizes must ascend, got %q", f.ladder)
			}
			f.sizes = append(f.sizes, n)
		}
	} else {
		if f.up.nodes <= 0 {
			return usagef("--nodes must be > 0")
		}
		f.sizes = []int{f.up.nodes}
	}
	if f.podsPerNode < 0 || f.maxLeaseRate <= 0 || f.concurrency <= 0 || f.qps < 0 || f.hold < 0 || f.memFloorMiB < 0 {
		return usagef("--pods-per-node, --qps, --hold and --mem-floor-mib must be ≥ 0; --max-lease-rate and --concurrency > 0")
	}
	if f.up.nodeLease < 0 {
		return usagef("--node-lease-seconds must be ≥ 0 (0: from --max-lease-rate)")
	}
	return f.up.validate()
}

// podsAt is the pod count of a size.
func (f *benchScaleFlags) podsAt(nodes int) int {
	if f.ladder == "" && f.up.pods > 0 {
		return f.up.pods
	}
	return int(math.Round(float64(nodes) * f.podsPerNode))
}

// leaseSecondsAt is the node lease duration of a size: the flag's, or the shortest ≥ 40 s
// keeping the renewals (nodes every duration/4) at most --max-lease-rate.
func (f *benchScaleFlags) leaseSecondsAt(nodes int) int {
	if f.up.nodeLease > 0 {
		return f.up.nodeLease
	}
	return max(cluster.NodeLeaseDurationSeconds, int(math.Ceil(4*float64(nodes)/f.maxLeaseRate)))
}

func (f *benchScaleFlags) leasePolicy() string {
	if f.up.nodeLease > 0 {
		return fmt.Sprintf("duration %d s at every size (--node-lease-seconds), renewed every %.0f s", f.up.nodeLease, float64(f.up.nodeLease)/4)
	}
	return fmt.Sprintf("duration max(40 s, 4 × nodes / %.0f) s — KWOK renews every quarter of it, so the renewals stay ≤ %.0f/s at every size, the same on both stacks (the kubelet's default, 40 s, would ask nodes/10 renewals/s: above ~7,000–8,000 nodes more than kube-apiserver holds on this machine, see docs/bench/heartbeat); the controller-manager's node-monitor grace period is raised to match",
		f.maxLeaseRate, f.maxLeaseRate)
}

func runBenchScale(ctx context.Context, cmd *cobra.Command, f *benchScaleFlags) error {
	prog := bench.NewProgress(os.Stderr)
	began := time.Now()
	out := f.out
	if out == "" {
		out = filepath.Join(f.up.stateDir, "report")
	}
	rep := &cluster.ScaleReport{Started: began, Command: "meganode " + strings.Join(os.Args[1:], " "), Cores: runtime.NumCPU(),
		Sizes: f.sizes, PodsPerNode: f.podsPerNode, LeasePolicy: f.leasePolicy(), MaxLeaseRate: f.maxLeaseRate,
		MemFloorMiB: float64(f.memFloorMiB), CreateConcurrent: f.concurrency}
	if f.ladder == "" && f.up.pods > 0 {
		rep.PodsPerNode = float64(f.up.pods) / float64(f.up.nodes)
	}
	if m, err := memTotalMiB(); err == nil {
		rep.MemTotalMiB = m
	}
	dataRoot, tmpfs := tmpfsRoot()
	if tmpfs {
		defer os.RemoveAll(dataRoot)
		rep.DataOnTmpfs = true
		rep.Notes = append(rep.Notes, "both stores' data on tmpfs (/dev/shm): etcd fsyncs every commit, meganode-store writes its WAL without fsync (--durability buffered, its default)")
	}
	stopped := map[string]bool{}
	var errs []error
	for _, n := range f.sizes {
		for _, stack := range f.stacks {
			if stopped[stack] || ctx.Err() != nil {
				continue
			}
			run := runScaleOnce(ctx, f, stack, n, dataRoot, prog)
			rep.Add(run)
			if !run.Held {
				stopped[stack] = true
				prog.Printf("%s stack did not hold %d nodes (%s: %s)", stack, n, run.Stop, run.Error)
			}
			rep.FinishedSeconds = time.Since(began).Seconds()
			if err := rep.WriteFiles(out); err != nil {
				errs = append(errs, fmt.Errorf("writing the report: %w", err))
			}
		}
	}
	rep.Summary(os.Stdout)
	fmt.Printf("\nwrote %s and %s\n", filepath.Join(out, "report.json"), filepath.Join(out, "summary.md"))
	prog.Printf("scale done in %.1fs", time.Since(began).Seconds())
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	// A size not held is the result, not a failure of the command; a run that could not even
	// start its cluster at the smallest size is.
	for _, s := range rep.Stacks {
		if s.LargestHeld == nil && len(s.Runs) > 0 && s.Runs[0].Phase == "up" {
			errs = append(errs, fmt.Errorf("%s stack: %s", s.Name, s.Runs[0].Error))
		}
	}
	return errors.Join(errs...)
}

func memTotalMiB() (float64, error) {
	m, err := procfs.MemInfo()
	if err != nil {
		return 0, err
	}
	return float64(m["MemTotal"]) / (1 << 20), nil
}

// runScaleOnce is one stack at one size on a fresh cluster, stopped at the end whatever happened.
func runScaleOnce(parent context.Context, f *benchScaleFlags, stack string, nodes int, dataRoot string, prog *bench.Progress) (run cluster.ScaleRun) {
	began := time.Now()
	u := f.up
	if stack == cluster.StackMeganode {
		u.store, u.sched.scheduler = cluster.StoreMeganode, cluster.SchedulerMeganode
	} else {
		u.store, u.sched.scheduler, u.sched.intake = cluster.StoreEtcd, cluster.SchedulerKube, cluster.IntakeWatch
		u.storeArgs = nil // meganode-store's flags
	}
	pods := f.podsAt(nodes)
	u.nodes, u.pods, u.nodeLease = nodes, pods, f.leaseSecondsAt(nodes)
	u.stateDir = filepath.Join(f.up.stateDir, fmt.Sprintf("%s-%d", stack, nodes))
	run = cluster.ScaleRun{Stack: stack, Store: u.store, Scheduler: u.sched.scheduler, Nodes: nodes, Pods: pods, StateDir: u.stateDir,
		NodeLeaseSeconds: u.nodeLease, LeaseRenewEverySeconds: float64(u.nodeLease) / 4}
	run.LeaseRenewalsExpected = float64(nodes) / run.LeaseRenewEverySeconds
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	phase := "up"
	var mark cluster.CPUMark
	fail := func(err error) cluster.ScaleRun {
		run.Held, run.Phase, run.Error = false, phase, err.Error()
		cause := context.Cause(ctx)
		switch {
		case parent.Err() != nil:
			run.Stop = cluster.StopInterrupted
		case errors.Is(cause, cluster.ErrScaleMemory) || errors.Is(err, cluster.ErrScaleMemory):
			run.Stop = cluster.StopMemory
			if cause != nil {
				run.Error = cause.Error()
			}
		case errors.Is(cause, cluster.ErrScaleProcess) || errors.Is(err, cluster.ErrScaleProcess):
			run.Stop = cluster.StopProcess
			if cause != nil {
				run.Error = cause.Error()
			}
		case errors.Is(err, cluster.ErrScaleTimeout) || strings.Contains(err.Error(), "after "):
			run.Stop = cluster.StopTimeout
		default:
			run.Stop = cluster.StopError
		}
		if busy := mark.BusyCores(runtime.NumCPU()); busy != nil && run.Stop == cluster.StopTimeout {
			run.Error += fmt.Sprintf(" (machine %.2f of %d cores busy in the %s phase)", *busy, runtime.NumCPU(), phase)
		}
		return run
	}
	defer func() { run.Seconds = time.Since(began).Seconds() }()

	prog.Printf("scale, %s stack: %d KWOK nodes, %d pods on a real kube-apiserver over %s with %s; node lease %d s (renewed every %.0f s: %.0f/s)",
		stack, nodes, pods, storeName(u.store), u.sched.scheduler, u.nodeLease, run.LeaseRenewEverySeconds, run.LeaseRenewalsExpected)
	o := u.options(prog)
	o.NodesLater = true
	if dataRoot != "" {
		o.DataDir = filepath.Join(dataRoot, fmt.Sprintf("%s-%d", stack, nodes))
		defer os.RemoveAll(o.DataDir)
	}
	mark = cluster.MarkCPU()
	st, err := cluster.Up(ctx, o)
	if st != nil {
		defer func() {
			prog.Phase("stopping the cluster…")
			if derr := st.Down(15*time.Second, nil); derr != nil {
				fmt.Fprintln(os.Stderr, "down:", derr)
			}
			prog.Printf("cluster stopped; logs in %s", filepath.Join(st.Dir, "logs"))
		}()
	}
	if err != nil {
		return fail(err)
	}
	run.UpSeconds = ptrF(time.Since(began).Seconds())
	run.StoreShards = len(st.Shards)
	wd := cluster.StartWatchdog(st, cancel, int64(f.memFloorMiB)<<20, 2*time.Second)
	defer func() { run.MinMemAvailableMiB = wd.MinAvailMiB() }()
	defer wd.Stop()
	cs, err := cluster.ProtobufClientset(st)
	if err != nil {
		return fail(err)
	}

	// The nodes: made, then every one Ready, untainted and with its Lease.
	phase = "nodes"
	nw, err := cluster.StartNodeWatch(ctx, cs)
	if err != nil {
		return fail(err)
	}
	defer nw.Stop()
	rec, err := cluster.StartRecorder(ctx, st, 5*time.Second)
	if err != nil {
		return fail(err)
	}
	mark = cluster.MarkCPU()
	t0 := time.Now()
	nodeTimeout := f.nodeTimeout
	if nodeTimeout <= 0 {
		nodeTimeout = 5*time.Minute + time.Duration(nodes)*30*time.Millisecond
	}
	nctx, ncancel := context.WithTimeoutCause(ctx, nodeTimeout, fmt.Errorf("%w: the nodes were not all made in %s", cluster.ErrScaleTimeout, nodeTimeout))
	err = cluster.MakeNodes(nctx, cs, cluster.NodeOptions{Count: nodes, Concurrency: 64, Progress: prog})
	ncancel()
	if err == nil {
		run.NodesCreateSeconds = ptrF(time.Since(t0).Seconds())
		var readyAt time.Time
		readyAt, err = nw.Wait(ctx, nodes, nodeTimeout-time.Since(t0), prog)
		if !readyAt.IsZero() {
			run.NodesReadySeconds = ptrF(readyAt.Sub(t0).Seconds())
		}
	}
	readyLease, schedLease, _, leases := nw.Counts()
	run.NodesReady, run.NodesSchedulable, run.Leases = readyLease, schedLease, leases
	nrep, rerr := rec.Stop(context.WithoutCancel(ctx), nil)
	run.NodesReport = nrep
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w: %v", cluster.ErrScaleTimeout, context.Cause(nctx))
		}
		run.SetUsage(nrep, nil)
		return fail(err)
	}
	if rerr != nil {
		return fail(rerr)
	}
	run.NodesSchedulableSeconds = ptrF(time.Since(t0).Seconds())
	prog.Printf("%d nodes created in %.1fs, Ready with their Lease in %s s, untainted in %.1fs", nodes, *run.NodesCreateSeconds,
		cluster.FormatValue(run.NodesReadySeconds), *run.NodesSchedulableSeconds)

	// The pods: created, then every one with a node.
	phase = "pods"
	podTimeout := f.podTimeout
	if podTimeout <= 0 {
		podTimeout = 5*time.Minute + time.Duration(pods)*30*time.Millisecond
	}
	schedName := ""
	if u.sched.scheduler == cluster.SchedulerMeganode {
		schedName = cluster.SchedulerMeganode
	}
	mark = cluster.MarkCPU()
	rec, err = cluster.StartRecorder(ctx, st, 5*time.Second)
	if err != nil {
		return fail(err)
	}
	pr, perr := cluster.CreatePods(ctx, cs, cluster.PodOptions{Count: pods, Concurrency: f.concurrency, QPS: f.qps, Timeout: podTimeout,
		Progress: prog, SchedulerName: schedName, UntilScheduled: true})
	run.MachineCores = mark.BusyCores(runtime.NumCPU())
	prep, rerr := rec.Stop(context.WithoutCancel(ctx), pr)
	run.PodsReport = prep
	run.SetVerbs(prep)
	run.SetUsage(nrep, prep)
	if pr != nil {
		run.PodsBound = pr.Scheduled
		if pr.Scheduled > 0 {
			run.BindP99Seconds = ptrF(pr.Schedule.P99Us / 1e6)
		}
		if pr.CreateSeconds > 0 {
			run.PodsCreateSeconds = ptrF(pr.CreateSeconds)
		}
	}
	if perr != nil {
		if pr != nil && strings.Contains(perr.Error(), "after ") {
			perr = fmt.Errorf("%w: %v", cluster.ErrScaleTimeout, perr)
		}
		return fail(perr)
	}
	if rerr != nil {
		return fail(rerr)
	}
	if !pr.End.IsZero() && pr.ScheduledPerSec > 0 {
		placed := float64(pr.Scheduled) / pr.ScheduledPerSec // first create → last bind
		run.PodsPlacedSeconds, run.PodsPerSec = ptrF(placed), ptrF(pr.ScheduledPerSec)
	}
	if pl, err := cluster.CheckPlacement(ctx, cs, cluster.LoadNamespace, nodes); err == nil {
		run.Placement = pl
		if pl.Bound != pods || pl.OverCommitted > 0 {
			run.Notes = append(run.Notes, fmt.Sprintf("placement: %d of %d pods bound, %d nodes over-committed", pl.Bound, pods, pl.OverCommitted))
		}
	} else {
		run.Notes = append(run.Notes, "placement not checked: "+err.Error())
	}
	if run.PodsPerSec != nil {
		prog.Printf("%d pods placed in %.1fs = %.0f pods/s", pods, *run.PodsPlacedSeconds, *run.PodsPerSec)
	}

	// The quiet window: the lease renewals the cluster holds at this size.
	if f.hold > 0 {
		phase = "hold"
		rec, err = cluster.StartRecorder(ctx, st, 5*time.Second)
		if err != nil {
			return fail(err)
		}
		t1 := time.Now()
		elapsed := func() int64 { return int64(time.Since(t1).Seconds()) }
		prog.Start(fmt.Sprintf("measuring the lease renewals for %s", f.hold), int64(f.hold.Seconds()), 0, elapsed)
		select {
		case <-ctx.Done():
		case <-time.After(f.hold):
		}
		prog.Done()
		hrep, rerr := rec.Stop(context.WithoutCancel(ctx), nil)
		if ctx.Err() != nil {
			return fail(context.Cause(ctx))
		}
		if rerr != nil {
			return fail(rerr)
		}
		run.HoldReport = hrep
		run.HoldSeconds = ptrF(hrep.Seconds)
		run.LeaseRenewalsPerSec = ptrF(hrep.LeaseWritesPerSec)
		if run.LeaseRenewalsExpected > 0 {
			run.LeaseHeldRatio = ptrF(hrep.LeaseWritesPerSec / run.LeaseRenewalsExpected)
			if *run.LeaseHeldRatio < 0.9 {
				run.Notes = append(run.Notes, fmt.Sprintf("lease renewals %.0f/s of %.0f/s expected (%.0f %%) in the %.0f s window",
					hrep.LeaseWritesPerSec, run.LeaseRenewalsExpected, 100**run.LeaseHeldRatio, hrep.Seconds))
			}
		}
	}
	if err := context.Cause(ctx); err != nil {
		return fail(err)
	}
	run.Held = true
	return run
}

func ptrF(v float64) *float64 { return &v }
