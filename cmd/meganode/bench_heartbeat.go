package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/cluster"
)

type benchHeartbeatFlags struct {
	store               string
	leases, conns       int
	rates               string
	step, warmup, drain time.Duration
	stateDir, dataDir   string
	out                 string
	createConcurrency   int
	parsedRates         []float64
	stores              []string
	apiserverArgs       []string
	storeArgs           []string
}

// newBenchHeartbeatCmd: issue 37's heartbeat ceiling — node Lease renewals through
// kube-apiserver at a stepped rate, meganode-store against etcd.
func newBenchHeartbeatCmd() *cobra.Command {
	f := &benchHeartbeatFlags{}
	cmd := &cobra.Command{
		Use:   "heartbeat",
		Short: "the heartbeat ceiling: node Lease renewals/s kube-apiserver + store hold with lease PUT p99 ≤ 1 s, meganode vs etcd",
		Long: `heartbeat starts a cluster as 'meganode up --nodes 0' does (the store, kube-apiserver, the
controller-manager, kube-scheduler and an idle KWOK; no node agents), creates --leases node Leases
in kube-node-lease through kube-apiserver, and renews them as the kubelet does (an Update of its
cached Lease with renewTime set, a Get and a new Update on conflict; client-go, protobuf, no
client-side rate limit, --conns connections) at each rate of --rates in turn, spread evenly over
the leases. Each step runs --warmup unmeasured, then --step measured: achieved renewals/s, lease
PUT latency p50/p99/max (this client's, and kube-apiserver's apiserver_request_duration_seconds
for PUT leases), failed renewals, and CPU (cores, ms per renewal) and RSS of kube-apiserver, the
store, the generator (this process) and the cluster's other processes, from /proc. Stepping stops
at the first step with p99 > 1 s, a failed renewal, or < 95 % of the asked rate achieved.

The ceiling is the highest rate held, also given as nodes at the kubelet's 10 s renewal (× 10),
with the ceiling a zero-cost generator would reach (cores / CPU per renewal of kube-apiserver +
store) and the process that spent the most CPU. --store both runs meganode, then etcd (never at
once; each cluster stopped before the next) and reports the ratio. Both stores keep their data
on tmpfs (--data-dir). Writes heartbeat.json, summary.txt and PNG charts to --out.`,
		Example: `  meganode bench heartbeat --store both --leases 10000 --rates 500,1000,2000,3000 --out docs/bench/heartbeat
  meganode bench heartbeat --store meganode --leases 1000 --rates 100,200 --step 20s --warmup 5s`,
		Args: noArgs,
		RunE: action(f, runBenchHeartbeat),
	}
	fs := cmd.Flags()
	fs.StringVar(&f.store, "store", "both", "meganode, etcd or both (meganode first, then etcd)")
	fs.IntVar(&f.leases, "leases", 10000, "node Leases renewed (each at most once a second: the highest rate is at most this)")
	fs.StringVar(&f.rates, "rates", "250,500,1000,1500,2000,3000,4000,6000,8000", "total renewals/s of each step, comma-separated (run in ascending order)")
	fs.DurationVar(&f.step, "step", time.Minute, "measured length of each step")
	fs.DurationVar(&f.warmup, "warmup", 10*time.Second, "unmeasured renewals at each rate before its step")
	fs.DurationVar(&f.drain, "drain", 30*time.Second, "after each step, how long its renewals get to return (those still out count as unfinished)")
	fs.IntVar(&f.conns, "conns", 32, "client connections (client-go clientsets of their own transport) the leases are spread over")
	fs.IntVar(&f.createConcurrency, "create-concurrency", 64, "Lease creates in flight while setting up")
	fs.StringVar(&f.stateDir, "state-dir", filepath.Join(os.TempDir(), "meganode-heartbeat"), "the clusters' state directory (<dir>/<store>: pids, logs)")
	fs.StringVar(&f.dataDir, "data-dir", "/dev/shm", "parent of the stores' data (tmpfs: etcd's best case; a disk path to compare with fsync)")
	fs.StringArrayVar(&f.apiserverArgs, "apiserver-arg", nil, "extra kube-apiserver flag (repeatable; both stores)")
	fs.StringArrayVar(&f.storeArgs, "store-arg", nil, "extra meganode-store flag (repeatable; not given to etcd)")
	fs.StringVar(&f.out, "out", "", "directory for heartbeat.json, summary.txt and the charts (default: print only)")
	completeValues(cmd, "store", "both", cluster.StoreMeganode, cluster.StoreEtcd)
	return cmd
}

func (f *benchHeartbeatFlags) validate() error {
	switch f.store {
	case "both":
		f.stores = []string{cluster.StoreMeganode, cluster.StoreEtcd}
	case cluster.StoreMeganode, cluster.StoreEtcd:
		f.stores = []string{f.store}
	default:
		return usagef("--store: want meganode, etcd or both, got %q", f.store)
	}
	if f.leases < 1 || f.conns < 1 || f.createConcurrency < 1 {
		return usagef("--leases, --conns and --create-concurrency must be ≥ 1")
	}
	if f.step <= 0 || f.warmup < 0 || f.drain <= 0 {
		return usagef("--step and --drain must be > 0, --warmup ≥ 0")
	}
	rates, err := parseRates(f.rates)
	if err != nil {
		return usagef("--rates: %v", err)
	}
	if top := rates[len(rates)-1]; top > float64(f.leases) {
		return usagef("--rates: %g/s renews each of %d leases more than once a second: at most %d/s (raise --leases)", top, f.leases, f.leases)
	}
	f.parsedRates = rates
	return nil
}

// parseRates parses a comma list of positive rates, sorted ascending without repeats.
func parseRates(s string) ([]float64, error) {
	var out []float64
	seen := map[float64]bool{}
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || v <= 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			return nil, fmt.Errorf("%q is not a positive number", p)
		}
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty")
	}
	sort.Float64s(out)
	return out, nil
}

func runBenchHeartbeat(ctx context.Context, cmd *cobra.Command, f *benchHeartbeatFlags) error {
	prog := bench.NewProgress(os.Stderr)
	// The generator shares the cores with the servers: spend less of them on GC.
	debug.SetGCPercent(400)
	rep := &bench.HeartbeatReport{Command: append([]string{"meganode"}, os.Args[1:]...), Started: time.Now(), Cores: runtime.NumCPU(),
		Leases: f.leases, Rates: f.parsedRates, StepSeconds: f.step.Seconds(), WarmupSeconds: f.warmup.Seconds(), P99LimitMs: bench.HeartbeatP99Limit}
	rep.Notes = append(rep.Notes,
		"the generator uses the cluster's admin identity (system:masters: API Priority and Fairness exempts it), so kube-apiserver's own limits, not APF's queues, are measured; kubelets renew as system:node:<name> in the system-node-high priority level",
		"the Leases carry no ownerReference to a Node (no Node objects exist: the garbage collector would delete them); otherwise the kubelet's object",
		"kube-apiserver's PUT leases histogram counts every client's lease PUTs (the controller-manager's and scheduler's leader-election leases add about one per second) and its quantiles are interpolated within its buckets")
	var errs []string
	for _, store := range f.stores {
		if ctx.Err() != nil {
			rep.Runs = append(rep.Runs, bench.HeartbeatStoreRun{Store: store, Leases: f.leases, Error: "not run: interrupted"})
			continue
		}
		run := heartbeatOnStore(ctx, f, store, prog)
		if run.Error != "" {
			errs = append(errs, store+": "+run.Error)
		}
		rep.Runs = append(rep.Runs, run)
	}
	rep.Finish()
	summary := rep.Summary()
	fmt.Fprint(cmd.OutOrStdout(), "\n"+summary)
	if f.out != "" {
		if err := bench.WriteHeartbeat(f.out, rep); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "\nwrote %s (heartbeat.json, summary.txt, heartbeat-p99.png, heartbeat-achieved.png)\n", f.out)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// heartbeatOnStore starts a cluster on store, runs the steps and stops the cluster.
func heartbeatOnStore(ctx context.Context, f *benchHeartbeatFlags, store string, prog *bench.Progress) bench.HeartbeatStoreRun {
	run := bench.HeartbeatStoreRun{Store: store, Leases: f.leases, Connections: f.conns}
	data := filepath.Join(f.dataDir, fmt.Sprintf("meganode-heartbeat-%d", os.Getpid()), store)
	defer os.RemoveAll(filepath.Dir(data))
	o := cluster.UpOptions{StateDir: filepath.Join(f.stateDir, store), Store: store, StoreShards: 1, Nodes: 0,
		DataDir: data, APIServerArgs: f.apiserverArgs, Progress: prog}
	if store == cluster.StoreMeganode {
		o.StoreArgs = f.storeArgs
	}
	prog.Printf("== %s: starting kube-apiserver on %s (no nodes)", store, store)
	began := time.Now()
	st, err := cluster.Up(ctx, o)
	if err != nil {
		run.Error = "up: " + err.Error()
		return run
	}
	defer func() {
		prog.Phase(fmt.Sprintf("stopping the %s cluster…", store))
		if err := st.Down(15*time.Second, nil); err != nil {
			prog.Printf("stopping the %s cluster: %v", store, err)
		}
		prog.Printf("  %s cluster stopped", store)
	}()
	prog.Printf("  cluster up in %.1fs (state and logs in %s)", time.Since(began).Seconds(), st.Dir)
	t, err := heartbeatTarget(st, store, f.conns)
	if err != nil {
		run.Error = err.Error()
		return run
	}
	cfg := bench.HeartbeatConfig{Leases: f.leases, Rates: f.parsedRates, Step: f.step, Warmup: f.warmup, Drain: f.drain,
		CreateConcurrency: f.createConcurrency, P99LimitMs: bench.HeartbeatP99Limit, Progress: prog}
	return bench.RunHeartbeat(ctx, cfg, t)
}

// heartbeatTarget: conns clientsets of their own connection (a Proxy func keeps client-go from
// sharing one cached transport), speaking protobuf as the kubelet does; the cluster's processes;
// kube-apiserver's lease PUT histogram.
func heartbeatTarget(st *cluster.State, store string, conns int) (bench.HeartbeatTarget, error) {
	t := bench.HeartbeatTarget{Store: store}
	base, err := cluster.RESTConfig(st)
	if err != nil {
		return t, err
	}
	base.ContentType = "application/vnd.kubernetes.protobuf"
	base.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	base.UserAgent = "meganode-heartbeat"
	for i := 0; i < conns; i++ {
		c := rest.CopyConfig(base)
		c.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
		cs, err := kubernetes.NewForConfig(c)
		if err != nil {
			return t, err
		}
		t.Clients = append(t.Clients, cs)
	}
	var storePids []int
	var others []bench.HeartbeatProc
	for _, c := range st.Components {
		switch {
		case c.Pid <= 0:
		case c.Name == cluster.BinAPIServer:
			t.Procs = append(t.Procs, bench.HeartbeatProc{Name: bench.HeartbeatAPIServer, Pids: []int{c.Pid}})
		case c.Kind == store || c.Kind == cluster.BinStore: // etcd's kind is "etcd", meganode-store's its binary
			storePids = append(storePids, c.Pid)
		default:
			others = append(others, bench.HeartbeatProc{Name: c.Name, Pids: []int{c.Pid}})
		}
	}
	t.Procs = append(t.Procs, bench.HeartbeatProc{Name: bench.HeartbeatStore, Pids: storePids})
	t.Procs = append(t.Procs, others...)
	admin, err := cluster.AdminHTTPClient(st)
	if err != nil {
		return t, err
	}
	metricsURL := st.APIServerURL + "/metrics"
	const family = "apiserver_request_duration_seconds"
	scrape := func(ctx context.Context) (*cluster.Hist, error) {
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		snap, err := cluster.Scrape(c, admin, metricsURL, family)
		if err != nil {
			return nil, err
		}
		return snap.Histograms(family, "verb", "resource")["PUT|leases"], nil
	}
	t.ServerPUT = func(ctx context.Context) (func(context.Context) (*bench.ServerLatency, error), error) {
		before, err := scrape(ctx)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) (*bench.ServerLatency, error) {
			after, err := scrape(ctx)
			if err != nil {
				return nil, err
			}
			if after == nil {
				return nil, fmt.Errorf("no PUT leases in %s", family)
			}
			prev := map[string]*cluster.Hist{}
			if before != nil {
				prev["x"] = before
			}
			d := cluster.Delta(map[string]*cluster.Hist{"x": after}, prev)["x"]
			if d == nil || d.Count() == 0 {
				return &bench.ServerLatency{}, nil
			}
			p50, p99 := d.Quantile(0.5), d.Quantile(0.99)
			if math.IsNaN(p50) || math.IsNaN(p99) {
				return nil, fmt.Errorf("PUT leases quantiles not computable")
			}
			return &bench.ServerLatency{Count: d.Count(), P50Ms: p50 * 1000, P99Ms: p99 * 1000}, nil
		}, nil
	}
	return t, nil
}
