package scheduler

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/cluster"
)

// BenchOptions configure the scheduler benchmark on `up` clusters (a command, not a test).
type BenchOptions struct {
	Nodes, Pods  int
	Shards       []int // meganode runs; the stock kube-scheduler runs first unless NoStock
	NoStock      bool
	LatencyPods  int     // paced phase: pods created at LatencyQPS, creation → bound measured
	LatencyQPS   float64 // default 100
	StateDir     string
	BinDir       string
	SchedulerArg []string        // extra meganode scheduler flags
	NodeLeaseSec int             // KWOK node lease duration (0 = 40 s); longer keeps lease writes from drowning the apiserver at 10K nodes
	ProfileDir   string          // meganode runs: a CPU profile of the scheduler (first ProfileSec of the drain) and its /metrics after it are written here
	ProfileSec   int             // default 15
	Progress     *bench.Progress `json:"-"`
}

// BenchRow is one scheduler's result.
type BenchRow struct {
	Scheduler     string        `json:"scheduler"`
	Shards        int           `json:"shards,omitempty"`
	Pods          int           `json:"pods"`
	DrainSeconds  float64       `json:"drain_seconds"` // pre-created pods: scheduler resumed → last bound
	PodsPerSec    float64       `json:"pods_per_sec"`
	CPUMsPerPod   float64       `json:"cpu_ms_per_pod"` // scheduler process CPU during the drain / pods
	Latency       bench.Latency `json:"latency"`        // paced phase: creation → bound
	LatencyQPS    float64       `json:"latency_qps"`
	UtilMean      float64       `json:"util_mean"`   // mean over nodes of requested CPU / allocatable
	UtilStddev    float64       `json:"util_stddev"` // spread of that (lower = more even)
	UtilMax       float64       `json:"util_max"`
	EmptyNodes    int           `json:"empty_nodes"`
	Unscheduled   int           `json:"unscheduled"`
	SchedulerName string        `json:"-"`
}

const benchNS = "sched-bench"

// RunBench runs the stock scheduler and meganode with each shard count, one cluster each.
func RunBench(ctx context.Context, o BenchOptions) ([]BenchRow, error) {
	if o.LatencyQPS <= 0 {
		o.LatencyQPS = 100
	}
	type run struct {
		kind   string
		shards int
	}
	var runs []run
	if !o.NoStock {
		runs = append(runs, run{cluster.SchedulerKube, 0})
	}
	for _, s := range o.Shards {
		runs = append(runs, run{cluster.SchedulerMeganode, s})
	}
	var rows []BenchRow
	for _, r := range runs {
		row, err := benchOne(ctx, o, r.kind, r.shards)
		if err != nil {
			return rows, fmt.Errorf("%s (%d shards): %w", r.kind, r.shards, err)
		}
		rows = append(rows, *row)
	}
	return rows, nil
}

func benchOne(ctx context.Context, o BenchOptions, kind string, shards int) (*BenchRow, error) {
	prog := o.Progress
	label := kind
	if kind == cluster.SchedulerMeganode {
		label = fmt.Sprintf("meganode/%d", shards)
	}
	prog.Printf("== %s: up with %d nodes", label, o.Nodes)
	// A fresh state directory per run: certificates and data never mix between clusters.
	dir := filepath.Join(o.StateDir, strings.ReplaceAll(label, "/", "-"))
	st, err := cluster.Up(ctx, cluster.UpOptions{StateDir: dir, Nodes: o.Nodes, Pods: o.Pods, BinDir: o.BinDir,
		Scheduler: kind, SchedulerShards: shards, SchedulerArgs: o.SchedulerArg, NodeLeaseSeconds: o.NodeLeaseSec})
	if st != nil {
		defer func() { _ = st.Down(10*time.Second, nil) }()
	}
	if err != nil {
		return nil, err
	}
	cs, err := cluster.Clientset(st)
	if err != nil {
		return nil, err
	}
	if err := cluster.EnsureNamespace(ctx, cs, benchNS); err != nil {
		return nil, err
	}
	var sched *cluster.Component
	for i := range st.Components {
		if c := &st.Components[i]; c.Kind == cluster.BinScheduler || c.Kind == cluster.KindMeganodeScheduler {
			sched = c
		}
	}
	if sched == nil {
		return nil, fmt.Errorf("no scheduler component")
	}
	row := &BenchRow{Scheduler: label, Shards: shards, Pods: o.Pods, LatencyQPS: o.LatencyQPS}

	// Phase 1, throughput: pause the scheduler (SIGSTOP), create every pod, resume, time the drain.
	if err := syscall.Kill(sched.Pid, syscall.SIGSTOP); err != nil {
		return nil, err
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = syscall.Kill(sched.Pid, syscall.SIGCONT)
		}
	}()
	prog.Printf("   creating %d pods with the scheduler paused", o.Pods)
	if err := createBenchPods(ctx, cs, "drain", o.Pods); err != nil {
		return nil, err
	}
	cpu0 := procCPU(sched.Pid)
	t0 := time.Now()
	_ = syscall.Kill(sched.Pid, syscall.SIGCONT)
	resumed = true
	profDone := make(chan struct{})
	if o.ProfileDir != "" && kind == cluster.SchedulerMeganode {
		go func() {
			defer close(profDone)
			if err := fetchProfile(ctx, sched.URL, o.ProfileSec, filepath.Join(o.ProfileDir, strings.ReplaceAll(label, "/", "-")+".pprof")); err != nil {
				prog.Printf("   profile: %v", err)
			}
		}()
	} else {
		close(profDone)
	}
	defer func() { <-profDone }()
	n, err := waitAllBound(ctx, cs, o.Pods, 10*time.Minute)
	el := time.Since(t0)
	cpu := procCPU(sched.Pid) - cpu0
	if err != nil {
		return nil, fmt.Errorf("drain: %d of %d bound: %w", n, o.Pods, err)
	}
	row.DrainSeconds, row.PodsPerSec, row.CPUMsPerPod = el.Seconds(), float64(o.Pods)/el.Seconds(), cpu*1e3/float64(o.Pods)
	if o.ProfileDir != "" && kind == cluster.SchedulerMeganode {
		if err := saveURL(ctx, sched.URL+"/metrics", filepath.Join(o.ProfileDir, strings.ReplaceAll(label, "/", "-")+".metrics")); err != nil {
			prog.Printf("   metrics: %v", err)
		}
	}
	if err := utilisation(ctx, cs, row); err != nil {
		return nil, err
	}
	prog.Printf("   drained %d pods in %.2fs = %.0f pods/s, %.2f ms CPU/pod, utilisation mean %.3f stddev %.4f max %.3f, %d empty nodes",
		o.Pods, el.Seconds(), row.PodsPerSec, row.CPUMsPerPod, row.UtilMean, row.UtilStddev, row.UtilMax, row.EmptyNodes)

	// Phase 2, latency: paced creation, creation → bound.
	if o.LatencyPods > 0 {
		r, err := cluster.CreatePods(ctx, cs, cluster.PodOptions{Namespace: benchNS + "-lat", Count: o.LatencyPods, QPS: o.LatencyQPS,
			Timeout: 5 * time.Minute})
		if err != nil {
			return nil, fmt.Errorf("latency phase: %w", err)
		}
		row.Latency = r.Schedule
		prog.Printf("   latency at %.0f pods/s: p50 %.1f ms, p99 %.1f ms", o.LatencyQPS, r.Schedule.P50Us/1e3, r.Schedule.P99Us/1e3)
	}
	return row, nil
}

func createBenchPods(ctx context.Context, cs kubernetes.Interface, prefix string, n int) error {
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	next := make(chan int)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				p := cluster.PodObject(benchNS, fmt.Sprintf("%s-%06d", prefix, i), prefix)
				if _, err := cs.CoreV1().Pods(benchNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
					select {
					case errc <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// waitAllBound counts bound pods of benchNS from one LIST and then a watch, so the wait adds
// one list and a stream of events to the apiserver, not a 10K-pod LIST every poll (which on
// this 2-core machine took apiserver CPU from both schedulers).
func waitAllBound(ctx context.Context, cs kubernetes.Interface, want int, timeout time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	bound := map[string]bool{}
	for ctx.Err() == nil {
		pl, err := cs.CoreV1().Pods(benchNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		clear(bound)
		for _, p := range pl.Items {
			bound[p.Name] = p.Spec.NodeName != ""
		}
		if countTrue(bound) >= want {
			return countTrue(bound), nil
		}
		w, err := cs.CoreV1().Pods(benchNS).Watch(ctx, metav1.ListOptions{ResourceVersion: pl.ResourceVersion, AllowWatchBookmarks: true})
		if err != nil {
			continue
		}
		n := countTrue(bound)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			was := bound[p.Name]
			now := p.Spec.NodeName != "" && ev.Type != "DELETED"
			bound[p.Name] = now
			if now && !was {
				n++
			} else if was && !now {
				n--
			}
			if n >= want {
				w.Stop()
				return n, nil
			}
		}
		w.Stop() // the watch ended (timeout, expiry): list again
	}
	return countTrue(bound), fmt.Errorf("timeout")
}

func countTrue(m map[string]bool) int {
	n := 0
	for _, v := range m {
		if v {
			n++
		}
	}
	return n
}

// utilisation: requested CPU / allocatable per node, over every node.
func utilisation(ctx context.Context, cs kubernetes.Interface, row *BenchRow) error {
	nl, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	pl, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	req := map[string]int64{}
	for _, p := range pl.Items {
		if p.Spec.NodeName == "" {
			if p.Namespace == benchNS {
				row.Unscheduled++
			}
			continue
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, c := range p.Spec.Containers {
			req[p.Spec.NodeName] += c.Resources.Requests.Cpu().MilliValue()
		}
	}
	var us []float64
	for _, n := range nl.Items {
		u := float64(req[n.Name]) / float64(max(n.Status.Allocatable.Cpu().MilliValue(), 1))
		us = append(us, u)
		if req[n.Name] == 0 {
			row.EmptyNodes++
		}
		row.UtilMax = math.Max(row.UtilMax, u)
	}
	for _, u := range us {
		row.UtilMean += u / float64(len(us))
	}
	for _, u := range us {
		row.UtilStddev += (u - row.UtilMean) * (u - row.UtilMean) / float64(len(us))
	}
	row.UtilStddev = math.Sqrt(row.UtilStddev)
	return nil
}

// fetchProfile saves the scheduler's /debug/pprof/profile for sec seconds (default 15) to path.
func fetchProfile(ctx context.Context, base string, sec int, path string) error {
	if sec <= 0 {
		sec = 15
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return saveURL(ctx, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, sec), path)
}

// saveURL writes the body of a GET to path.
func saveURL(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", req.URL, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// procCPU is the user+system CPU seconds of pid.
func procCPU(pid int) float64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// PrintBench writes the table.
func PrintBench(w io.Writer, o BenchOptions, rows []BenchRow) {
	fmt.Fprintf(w, "\nscheduler benchmark: %d pods (pre-created, then the scheduler resumed) on %d KWOK nodes; latency: %d pods created at %.0f/s\n",
		o.Pods, o.Nodes, o.LatencyPods, o.LatencyQPS)
	fmt.Fprintf(w, "%-16s %9s %9s %11s %9s %9s %9s %9s %9s %6s\n", "scheduler", "pods/s", "drain s", "CPU ms/pod", "p50 ms", "p99 ms", "util mean", "util sd", "util max", "empty")
	for _, r := range rows {
		fmt.Fprintf(w, "%-16s %9.0f %9.2f %11.2f %9.1f %9.1f %9.4f %9.4f %9.4f %6d\n", r.Scheduler, r.PodsPerSec, r.DrainSeconds, r.CPUMsPerPod,
			r.Latency.P50Us/1e3, r.Latency.P99Us/1e3, r.UtilMean, r.UtilStddev, r.UtilMax, r.EmptyNodes)
	}
}
