package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"time"

	"k8s.io/client-go/kubernetes"
)

// HeartbeatProc is a process (or a group summed under one name) whose CPU a step measures.
type HeartbeatProc struct {
	Name string
	Pids []int
}

// HeartbeatTarget is a running cluster to renew leases on: kube-apiserver over one store.
type HeartbeatTarget struct {
	Store   string                 // meganode | etcd
	Clients []kubernetes.Interface // one connection each; leases are spread over them
	// Procs: kube-apiserver, the store (HeartbeatStore), the cluster's other processes; the
	// generator (this process) is added by RunHeartbeat.
	Procs []HeartbeatProc
	// ServerPUT, when set, reads kube-apiserver's lease PUT histogram at a window's start and
	// returns the reading of the window (at its end).
	ServerPUT func(ctx context.Context) (func(ctx context.Context) (*ServerLatency, error), error)
}

// HeartbeatConfig is a run's shape.
type HeartbeatConfig struct {
	Leases            int
	Rates             []float64 // renewals/s, ascending
	Step              time.Duration
	Warmup            time.Duration // at each rate before its window
	Drain             time.Duration // after a window, for its renewals to return
	CreateConcurrency int
	P99LimitMs        float64
	Progress          *Progress
}

// HeartbeatStoreRun is one store's run.
type HeartbeatStoreRun struct {
	Store       string           `json:"store"`
	Leases      int              `json:"leases"`
	Connections int              `json:"connections"`
	Steps       []HeartbeatStep  `json:"steps"`
	Ceiling     HeartbeatCeiling `json:"ceiling"`
	Error       string           `json:"error,omitempty"`
}

// RunHeartbeat creates the leases and steps the rate until a step does not hold.
func RunHeartbeat(ctx context.Context, cfg HeartbeatConfig, t HeartbeatTarget) HeartbeatStoreRun {
	run := HeartbeatStoreRun{Store: t.Store, Leases: cfg.Leases, Connections: len(t.Clients)}
	prog := cfg.Progress
	load, err := NewHeartbeatLoad(ctx, t.Clients, cfg.Leases, cfg.CreateConcurrency, prog)
	if err != nil {
		run.Error = err.Error()
		return run
	}
	procs := append(append([]HeartbeatProc{}, t.Procs...), HeartbeatProc{Name: HeartbeatGenerator, Pids: []int{os.Getpid()}})
	for _, rate := range cfg.Rates {
		if ctx.Err() != nil {
			run.Error = "interrupted"
			break
		}
		s := heartbeatStep(ctx, cfg, t, load, procs, rate)
		run.Steps = append(run.Steps, s)
		prog.Printf("  %s %6.0f/s asked: %6.0f/s achieved, PUT p50 %s p99 %s max %s, %d errors, %s; %s",
			t.Store, s.AskedPerSec, s.AchievedPerSec, hbMs(s.PutP50Ms), hbMs(s.PutP99Ms), hbMs(s.PutMaxMs), s.Errors, hbCores(s), s.Verdict)
		if !s.Held {
			break
		}
	}
	run.Ceiling = Ceiling(run.Steps, runtime.NumCPU())
	return run
}

func hbCores(s HeartbeatStep) string {
	out := ""
	for i, p := range s.Procs {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%s %.2f", p.Name, p.Cores)
	}
	return "cores: " + out
}

func hbMs(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.2f s", v/1000)
	}
	return fmt.Sprintf("%.1f ms", v)
}

// heartbeatStep runs one rate and measures it.
func heartbeatStep(ctx context.Context, cfg HeartbeatConfig, t HeartbeatTarget, load *HeartbeatLoad, procs []HeartbeatProc, rate float64) HeartbeatStep {
	s := HeartbeatStep{AskedPerSec: rate}
	before := make([][]ProcSample, len(procs))
	after := make([][]ProcSample, len(procs))
	var hostBefore, hostAfter HostCPU
	var serverEnd func(context.Context) (*ServerLatency, error)
	var serverErr error
	var tFrom, tTo time.Time
	read := func(dst [][]ProcSample) {
		for i, p := range procs {
			dst[i] = make([]ProcSample, len(p.Pids))
			for j, pid := range p.Pids {
				dst[i][j], _ = ReadProc(pid)
			}
		}
	}
	atFrom := func() {
		if t.ServerPUT != nil {
			serverEnd, serverErr = t.ServerPUT(ctx)
		}
		tFrom = time.Now()
		hostBefore, _ = ReadHostCPU()
		read(before)
	}
	atTo := func() {
		read(after)
		hostAfter, _ = ReadHostCPU()
		tTo = time.Now()
		if serverEnd != nil {
			lat, err := serverEnd(ctx)
			if err != nil {
				serverErr = err
			} else {
				s.Server = lat
			}
		}
	}
	label := fmt.Sprintf("%s: %.0f renewals/s over %d leases", t.Store, rate, load.Leases())
	r := load.runStep(ctx, rate, cfg.Warmup, cfg.Step, cfg.Drain, cfg.Progress, label, atFrom, atTo)
	r.fill(&s)
	if serverErr != nil {
		s.ServerError = serverErr.Error()
	}
	sec := tTo.Sub(tFrom).Seconds()
	var procSum float64
	for i, p := range procs {
		ps := ProcStep{Name: p.Name}
		if len(p.Pids) > 0 {
			ps.Pid = p.Pids[0]
		}
		for j := range p.Pids {
			if j >= len(before[i]) || j >= len(after[i]) {
				continue
			}
			ps.CPUSeconds += (after[i][j].CPUMicros() - before[i][j].CPUMicros()) / 1e6
			ps.RSSBytes += after[i][j].RSSBytes
			ps.PeakRSSBytes += after[i][j].PeakRSS
		}
		procSum += ps.CPUSeconds
		if sec > 0 {
			ps.Cores = ps.CPUSeconds / sec
		}
		if s.Renewals > 0 {
			v := ps.CPUSeconds * 1000 / float64(s.Renewals)
			ps.CPUMsPerRenewal = &v
		}
		s.Procs = append(s.Procs, ps)
	}
	if sec > 0 && hostAfter.Total > hostBefore.Total {
		busy := float64(hostAfter.Busy-hostBefore.Busy) / clockTicks
		s.HostBusyCores = busy / sec
		s.HostOtherCores = max(busy-procSum, 0) / sec
	}
	limit := cfg.P99LimitMs
	if limit <= 0 {
		limit = HeartbeatP99Limit
	}
	s.Judge(limit)
	return s
}
