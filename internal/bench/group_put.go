package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// GroupPutSpec: etcd's benchmark tool's put against a fresh 3-member group of each
// kind, alternated round by round, at each client count (issue 36's first target).
type GroupPutSpec struct {
	Kinds     []string
	Clients   []int
	Rounds    int
	Total     int // puts per run
	ValSize   int
	KeySpace  int
	Benchmark string // etcd's tools/benchmark binary
	StoreBin  string
	StoreArgs []string // every store member's extra flags (e.g. --durability=fsync)
	EtcdCmd   []string
	DataRoot  string
	Log       io.Writer
}

// GroupPutRun is one benchmark run against one fresh group.
type GroupPutRun struct {
	Kind    string  `json:"kind"`
	Clients int     `json:"clients"`
	Round   int     `json:"round"`
	PutsSec float64 `json:"puts_per_sec"`
	P99Ms   float64 `json:"p99_ms"`
	P999Ms  float64 `json:"p99_9_ms"`
	MaxMs   float64 `json:"max_ms"`
	Errors  int     `json:"errors"`
	// CPU of every member (user+system), summed, per put.
	CPUMicrosPut float64 `json:"server_cpu_us_per_put"`
	Report       string  `json:"benchmark_report"`
}

// RunGroupPut runs every (round, clients, kind), the kinds' order swapped each round.
func RunGroupPut(ctx context.Context, s GroupPutSpec, onRun func(*GroupPutRun)) ([]*GroupPutRun, error) {
	var runs []*GroupPutRun
	for r := 0; r < s.Rounds; r++ {
		kinds := append([]string(nil), s.Kinds...)
		if r%2 == 1 {
			for i, j := 0, len(kinds)-1; i < j; i, j = i+1, j-1 {
				kinds[i], kinds[j] = kinds[j], kinds[i]
			}
		}
		for _, c := range s.Clients {
			for _, k := range kinds {
				if ctx.Err() != nil {
					return runs, ctx.Err()
				}
				run, err := groupPutOnce(ctx, s, k, c, r)
				if err != nil {
					return runs, fmt.Errorf("%s, %d clients, round %d: %w", k, c, r+1, err)
				}
				runs = append(runs, run)
				if onRun != nil {
					onRun(run)
				}
			}
		}
	}
	return runs, nil
}

func groupPutOnce(ctx context.Context, s GroupPutSpec, kind string, clients, round int) (*GroupPutRun, error) {
	dir := filepath.Join(s.DataRoot, fmt.Sprintf("%s-%d-%d", kind, clients, round))
	defer os.RemoveAll(dir)
	ms, err := startFailoverGroup(FailoverSpec{Kind: kind, Members: 3, StoreBin: s.StoreBin, StoreArgs: s.StoreArgs, EtcdCmd: s.EtcdCmd, DataRoot: dir, Log: s.Log})
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, m := range ms {
			m.kill()
		}
	}()
	if _, err := leaderIndex(ctx, ms, -1); err != nil {
		return nil, err
	}
	var eps []string
	for _, m := range ms {
		eps = append(eps, m.client)
	}
	cpu := func() (float64, error) {
		var sum float64
		for _, m := range ms {
			p, err := ReadProc(m.cmd.Process.Pid)
			if err != nil {
				return 0, err
			}
			sum += p.CPUMicros()
		}
		return sum, nil
	}
	before, err := cpu()
	if err != nil {
		return nil, err
	}
	conns := max(clients/10, 1)
	args := []string{"--endpoints=" + strings.Join(eps, ","), fmt.Sprintf("--conns=%d", conns), fmt.Sprintf("--clients=%d", clients),
		"put", "--key-size=8", fmt.Sprintf("--val-size=%d", s.ValSize), fmt.Sprintf("--total=%d", s.Total), fmt.Sprintf("--key-space-size=%d", s.KeySpace)}
	out, err := exec.CommandContext(ctx, s.Benchmark, args...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("benchmark %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	after, err := cpu()
	if err != nil {
		return nil, err
	}
	var smp SoakSample
	if err := ParseBenchmarkReport(string(out), &smp); err != nil {
		return nil, err
	}
	return &GroupPutRun{Kind: kind, Clients: clients, Round: round + 1, PutsSec: smp.OpsPerSec, P99Ms: smp.P99Ms, P999Ms: smp.P999Ms,
		MaxMs: smp.MaxMs, Errors: smp.Errors, CPUMicrosPut: (after - before) / float64(s.Total), Report: "benchmark " + strings.Join(args, " ") + "\n" + string(out)}, nil
}

// GroupPutMedian is the median of the runs of one kind at one client count.
type GroupPutMedian struct {
	Kind         string  `json:"kind"`
	Clients      int     `json:"clients"`
	Runs         int     `json:"runs"`
	PutsSec      float64 `json:"puts_per_sec"`
	P999Ms       float64 `json:"p99_9_ms"`
	MaxMs        float64 `json:"max_ms"`
	CPUMicrosPut float64 `json:"server_cpu_us_per_put"`
}

// GroupPutMedians gives the medians per (kind, clients).
func GroupPutMedians(runs []*GroupPutRun) []GroupPutMedian {
	type key struct {
		kind    string
		clients int
	}
	by := map[key][]*GroupPutRun{}
	var order []key
	for _, r := range runs {
		k := key{r.Kind, r.Clients}
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], r)
	}
	med := func(rs []*GroupPutRun, f func(*GroupPutRun) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		sort.Float64s(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	var out []GroupPutMedian
	for _, k := range order {
		rs := by[k]
		out = append(out, GroupPutMedian{Kind: k.kind, Clients: k.clients, Runs: len(rs),
			PutsSec:      med(rs, func(r *GroupPutRun) float64 { return r.PutsSec }),
			P999Ms:       med(rs, func(r *GroupPutRun) float64 { return r.P999Ms }),
			MaxMs:        med(rs, func(r *GroupPutRun) float64 { return r.MaxMs }),
			CPUMicrosPut: med(rs, func(r *GroupPutRun) float64 { return r.CPUMicrosPut })})
	}
	return out
}
