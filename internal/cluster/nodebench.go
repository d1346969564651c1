package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/meganode/meganode/internal/bench"
)

// `meganode bench nodes` (issue 39): the reference's kubelet-vs-KWOK experiment at one size.
// For each kind of node agent it starts a cluster with Up (as `meganode up` does: N KWOK nodes,
// or N hollow kubelets and no KWOK node), creates N×P pods with CreatePods (as `meganode
// create-pods` does) while measuring that phase, lets the cluster settle, measures one steady
// window, and stops the cluster with Down, checking that no process is left; then the next
// kind. One kind at a time, so that neither takes the other's cores.

// Node agents of the bench.
const (
	AgentKubelet = "kubelet" // hollow kubelets (`up --nodes 0 --kubelets N`)
	AgentKWOK    = "kwok"    // KWOK nodes (`up --nodes N`)
)

// NodesBenchOptions configure RunNodesBench.
type NodesBenchOptions struct {
	Kinds       []string // AgentKubelet and/or AgentKWOK, run in this order
	Nodes       int
	PodsPerNode int
	Store       string        // StoreMeganode or StoreEtcd
	Window      time.Duration // the steady window
	QPS         float64       // pod creates per second (0: as fast as the apiserver takes them)
	// Settle is the pause after up (before the pods) and after the pods run (before the steady
	// window): startup work (certificates, informers' first lists, node status) is not steady.
	Settle   time.Duration
	Timeout  time.Duration // for the pods to run
	StateDir string        // parent of each run's state directory (<StateDir>/<kind>-<store>)
	Progress *bench.Progress
}

// NodesRun is one kind's run.
type NodesRun struct {
	Kind        string  `json:"kind"`
	Store       string  `json:"store"`
	Nodes       int     `json:"nodes"`
	PodsPerNode int     `json:"pods_per_node"`
	StateDir    string  `json:"state_dir"`
	UpSeconds   float64 `json:"up_seconds"` // `up` until every node is Ready
	// PodPhase is the window from the first pod create until every pod runs; Steady the
	// window after, every pod Running.
	PodPhase *NodesWindow `json:"pod_phase,omitempty"`
	Steady   *NodesWindow `json:"steady,omitempty"`
	// Keys are the store's keys and bytes by resource at the end of the steady window.
	Keys          []KeyCount `json:"store_keys"`
	PerNode       *PerNode   `json:"per_node,omitempty"`
	ProcessesLeft []string   `json:"processes_left_after_down"`
	Error         string     `json:"error,omitempty"`
	IncludedFrom  string     `json:"included_from,omitempty"` // a run read from an earlier report.json
}

// Label names the run in tables and charts: "kubelet (meganode)".
func (r *NodesRun) Label() string { return fmt.Sprintf("%s (%s)", r.Kind, r.Store) }

// RunNodesBench runs every kind of o.Kinds in turn; a failed kind is recorded in its run
// (Error) and the next one still runs.
func RunNodesBench(ctx context.Context, o NodesBenchOptions) *NodesReport {
	rep := &NodesReport{Start: time.Now().UTC(), Cores: runtime.NumCPU(), Nodes: o.Nodes, PodsPerNode: o.PodsPerNode,
		Store: o.Store, WindowSeconds: o.Window.Seconds(), CreateQPS: o.QPS}
	for _, kind := range o.Kinds {
		if ctx.Err() != nil {
			rep.Runs = append(rep.Runs, &NodesRun{Kind: kind, Store: o.Store, Nodes: o.Nodes, PodsPerNode: o.PodsPerNode, Error: "not run: interrupted"})
			continue
		}
		rep.Runs = append(rep.Runs, runNodesKind(ctx, o, kind))
	}
	return rep
}

func runNodesKind(ctx context.Context, o NodesBenchOptions, kind string) (run *NodesRun) {
	prog := o.Progress
	run = &NodesRun{Kind: kind, Store: o.Store, Nodes: o.Nodes, PodsPerNode: o.PodsPerNode,
		StateDir: filepath.Join(o.StateDir, kind+"-"+o.Store)}
	up := UpOptions{StateDir: run.StateDir, Store: o.Store, Progress: prog}
	if kind == AgentKubelet {
		up.Kubelets = o.Nodes
	} else {
		up.Nodes = o.Nodes
	}
	prog.Printf("== %s: up with %d %s nodes on %s", run.Label(), o.Nodes, kind, o.Store)
	began := time.Now()
	st, err := Up(ctx, up)
	if err != nil {
		run.Error = "up: " + err.Error()
		run.ProcessesLeft = ProcessesUnder(run.StateDir)
		return run
	}
	run.UpSeconds = time.Since(began).Seconds()
	run.StateDir = st.Dir
	defer func() {
		prog.Phase(fmt.Sprintf("%s: down…", run.Label()))
		if err := Down(st.Dir, nil); err != nil {
			run.Error = strings.TrimPrefix(run.Error+"; down: "+err.Error(), "; ")
		}
		run.ProcessesLeft = ProcessesUnder(st.Dir)
		prog.Printf("%s: down, %d processes left", run.Label(), len(run.ProcessesLeft))
	}()
	if err := sleepCtx(ctx, o.Settle); err != nil {
		run.Error = err.Error()
		return run
	}
	cs, err := Clientset(st)
	if err != nil {
		run.Error = err.Error()
		return run
	}

	// The pod phase: what `meganode create-pods` measures, plus the store-side figures.
	prog.Printf("%s: creating %d pods (%g/s) and waiting until they run", run.Label(), o.Nodes*o.PodsPerNode, o.QPS)
	probe, err := startNodesProbe(ctx, st)
	if err != nil {
		run.Error = "pod phase: " + err.Error()
		return run
	}
	rec, err := StartRecorder(ctx, st, 5*time.Second)
	if err != nil {
		run.Error = "pod phase: " + err.Error()
		return run
	}
	pods, perr := CreatePods(ctx, cs, PodOptions{Count: o.Nodes * o.PodsPerNode, QPS: o.QPS, Timeout: o.Timeout, Progress: prog})
	slo, err := rec.Stop(context.WithoutCancel(ctx), pods)
	if err != nil {
		run.Error = "pod phase: " + err.Error()
		return run
	}
	run.PodPhase = probe.stop(context.WithoutCancel(ctx), slo)
	if perr != nil {
		run.Error = "create-pods: " + perr.Error()
		return run
	}
	if err := sleepCtx(ctx, o.Settle/2); err != nil {
		run.Error = err.Error()
		return run
	}

	// The steady window: every pod Running, nothing created.
	prog.Phase(fmt.Sprintf("%s: steady window of %s…", run.Label(), o.Window))
	if probe, err = startNodesProbe(ctx, st); err != nil {
		run.Error = "steady window: " + err.Error()
		return run
	}
	if rec, err = StartRecorder(ctx, st, 5*time.Second); err != nil {
		run.Error = "steady window: " + err.Error()
		return run
	}
	werr := sleepCtx(ctx, o.Window)
	if slo, err = rec.Stop(context.WithoutCancel(ctx), nil); err != nil {
		run.Error = "steady window: " + err.Error()
		return run
	}
	run.Steady = probe.stop(context.WithoutCancel(ctx), slo)
	if werr != nil {
		run.Error = "steady window: " + werr.Error()
		return run
	}
	if run.Keys, err = StoreKeys(context.WithoutCancel(ctx), st); err != nil {
		run.Error = "store keys: " + err.Error()
	}
	run.PerNode = perNode(run)
	prog.Printf("%s: steady %.0f store writes/s, %.0f watches on kube-apiserver, %.1f Events/s",
		run.Label(), run.Steady.StoreWritesPerSec, run.Steady.APIWatches, run.Steady.EventsPerSec)
	return run
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// ProcessesUnder lists the processes (pid and command line) whose command line names dir:
// after Down, none of the cluster's should be left. Zombies are skipped (their parent reaps them).
func ProcessesUnder(dir string) []string {
	out := []string{}
	if dir == "" {
		return out
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		cmd := strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
		if !strings.Contains(cmd, dir) {
			continue
		}
		if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil && strings.Contains(string(st), ") Z") {
			continue
		}
		out = append(out, e.Name()+": "+cmd)
	}
	return out
}

// errNoStore: the state has no store to read keys from.
var errNoStore = errors.New("no store in the cluster state")
