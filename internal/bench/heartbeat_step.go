package bench

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// `bench heartbeat` (issue 37, part 3): node Lease renewals through kube-apiserver at a stepped
// rate until the lease PUT p99 passes the SLO. This file is the per-step verdict and the
// ceiling; heartbeat_load.go drives the renewals, heartbeat_run.go the steps, and
// heartbeat_report.go writes the report.

// HeartbeatP99Limit is the API SLO a step must hold: lease PUT p99 ≤ 1 s.
const HeartbeatP99Limit = 1000.0 // ms

// HeartbeatMinAchieved is the share of the asked rate a step must achieve to hold.
const HeartbeatMinAchieved = 0.95

// HeartbeatRenewSeconds is the kubelet's renewal interval (a quarter of its 40 s lease): a
// rate of R renewals/s keeps R × 10 nodes alive.
const HeartbeatRenewSeconds = 10

// ProcStep is one process's use over a step's measured window.
type ProcStep struct {
	Name       string  `json:"name"`
	Pid        int     `json:"pid"`
	CPUSeconds float64 `json:"cpu_seconds"`
	Cores      float64 `json:"cores"` // CPUSeconds / window
	// CPUMsPerRenewal: CPUSeconds × 1000 / renewals done in the window (missing when none).
	CPUMsPerRenewal *float64 `json:"cpu_ms_per_renewal,omitempty"`
	RSSBytes        uint64   `json:"rss_bytes"`      // at the window's end
	PeakRSSBytes    uint64   `json:"peak_rss_bytes"` // VmHWM: since the process started
}

// ServerLatency is kube-apiserver's apiserver_request_duration_seconds for PUT leases over a
// window (scraped at both ends and differenced; quantiles interpolated inside its buckets).
type ServerLatency struct {
	Count float64 `json:"count"`
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
}

// HeartbeatStep is one rate step.
type HeartbeatStep struct {
	AskedPerSec    float64 `json:"asked_per_sec"`
	AchievedPerSec float64 `json:"achieved_per_sec"` // renewals that succeeded in the window, per second
	WindowSeconds  float64 `json:"window_seconds"`
	Renewals       int     `json:"renewals"`  // succeeded in the window
	Dispatched     int     `json:"started"`   // renewals started in the window
	Skipped        int     `json:"skipped"`   // due while that lease's previous renewal was still in flight: not sent
	Errors         int     `json:"errors"`    // renewals that failed (their PUT and, on conflict, GET retries)
	Conflicts      int     `json:"conflicts"` // PUTs answered 409 (then GET and PUT again, as the kubelet)
	Gets           int     `json:"gets"`
	Unfinished     int     `json:"unfinished"` // started in the window, not returned by the drain's deadline
	// Lease PUT latency as this client saw it: every PUT started in the window (failed ones too).
	Puts     int     `json:"puts"`
	PutP50Ms float64 `json:"put_p50_ms"`
	PutP99Ms float64 `json:"put_p99_ms"`
	PutMaxMs float64 `json:"put_max_ms"`
	// Server is kube-apiserver's own figure; nil when it could not be scraped (missing, not zero).
	Server      *ServerLatency `json:"apiserver_put_leases,omitempty"`
	ServerError string         `json:"apiserver_metrics_error,omitempty"`
	ErrorKinds  []ErrorCount   `json:"error_kinds,omitempty"`
	Procs       []ProcStep     `json:"procs"`
	// The machine over the window (/proc/stat): cores busy in all, and busy outside Procs.
	HostBusyCores  float64 `json:"host_busy_cores"`
	HostOtherCores float64 `json:"host_other_cores"`
	Held           bool    `json:"held"`
	Verdict        string  `json:"verdict"` // "held", or why not
}

// Judge sets Held and Verdict: a step holds when its lease PUT p99 ≤ limitMs, no renewal
// failed, none was left unfinished, and it achieved ≥ 95 % of the asked rate.
func (s *HeartbeatStep) Judge(limitMs float64) {
	var why []string
	if s.Puts == 0 {
		why = append(why, "no PUT returned")
	} else if s.PutP99Ms > limitMs {
		why = append(why, fmt.Sprintf("PUT p99 %.0f ms > %.0f ms", s.PutP99Ms, limitMs))
	}
	if s.Errors > 0 {
		why = append(why, fmt.Sprintf("%d renewals failed", s.Errors))
	}
	if s.Unfinished > 0 {
		why = append(why, fmt.Sprintf("%d renewals unfinished", s.Unfinished))
	}
	if s.AskedPerSec > 0 && s.AchievedPerSec < HeartbeatMinAchieved*s.AskedPerSec {
		why = append(why, fmt.Sprintf("achieved %.0f/s < 95%% of %.0f/s", s.AchievedPerSec, s.AskedPerSec))
	}
	s.Held = len(why) == 0
	if s.Held {
		s.Verdict = "held"
	} else {
		s.Verdict = strings.Join(why, "; ")
	}
}

// Proc is the named process of the step (nil when absent).
func (s *HeartbeatStep) Proc(name string) *ProcStep {
	for i := range s.Procs {
		if s.Procs[i].Name == name {
			return &s.Procs[i]
		}
	}
	return nil
}

// Process names in a heartbeat step, besides the cluster's others (controller-manager, …).
const (
	HeartbeatAPIServer = "kube-apiserver"
	HeartbeatStore     = "store"     // every store process summed (one store here)
	HeartbeatGenerator = "generator" // this process: the renewals' client
)

// HeartbeatCeiling is what a store's run found.
type HeartbeatCeiling struct {
	// Found: some step held and a later one did not (or the last step asked held: then the
	// ceiling is at least that, and AtLeast says so). Missing when the first step failed.
	Found   bool `json:"found"`
	AtLeast bool `json:"at_least"` // every step held: the ceiling is above the highest rate asked
	// PerSec: the achieved rate of the highest step held; AskedPerSec: what it asked.
	PerSec      float64 `json:"per_sec"`
	AskedPerSec float64 `json:"asked_per_sec"`
	Nodes       float64 `json:"nodes"` // PerSec × 10 s (the kubelet's renewal interval)
	// FirstFailed: the asked rate of the first step that did not hold, and why.
	FirstFailedPerSec float64 `json:"first_failed_per_sec,omitempty"`
	FirstFailedWhy    string  `json:"first_failed_why,omitempty"`
	// CPU per renewal of each process at the highest held step (ms), and the ceiling a
	// zero-cost generator would reach: cores / (kube-apiserver + store CPU per renewal).
	CPUMsPerRenewal map[string]float64 `json:"cpu_ms_per_renewal,omitempty"`
	ServerCPUMs     float64            `json:"server_cpu_ms_per_renewal"` // kube-apiserver + store
	ZeroCostPerSec  float64            `json:"zero_cost_generator_per_sec"`
	ZeroCostNodes   float64            `json:"zero_cost_generator_nodes"`
	// APIServerOnlyPerSec: cores / kube-apiserver's CPU per renewal, the ceiling with a zero-cost
	// store and generator too: what no store can lift.
	APIServerOnlyPerSec float64 `json:"apiserver_only_per_sec"`
	Cores               int     `json:"cores"`
	// Bound names the process that spends the most CPU per renewal among kube-apiserver, the
	// store and the generator, and BoundNote says whether the machine was saturated.
	Bound     string `json:"bound"`
	BoundNote string `json:"bound_note"`
}

// Ceiling finds the highest held step of steps (in the order run: ascending rates; the run
// stops at the first that fails) and the CPU figures there.
func Ceiling(steps []HeartbeatStep, cores int) HeartbeatCeiling {
	c := HeartbeatCeiling{Cores: cores}
	best := -1
	for i, s := range steps {
		if !s.Held {
			if c.FirstFailedPerSec == 0 {
				c.FirstFailedPerSec, c.FirstFailedWhy = s.AskedPerSec, s.Verdict
			}
			break
		}
		best = i
	}
	if best < 0 {
		return c
	}
	b := steps[best]
	c.Found = true
	c.AtLeast = best == len(steps)-1
	c.PerSec, c.AskedPerSec = b.AchievedPerSec, b.AskedPerSec
	c.Nodes = c.PerSec * HeartbeatRenewSeconds
	c.CPUMsPerRenewal = map[string]float64{}
	for _, p := range b.Procs {
		if p.CPUMsPerRenewal != nil {
			c.CPUMsPerRenewal[p.Name] = *p.CPUMsPerRenewal
		}
	}
	c.ServerCPUMs = c.CPUMsPerRenewal[HeartbeatAPIServer] + c.CPUMsPerRenewal[HeartbeatStore]
	if c.ServerCPUMs > 0 && cores > 0 {
		c.ZeroCostPerSec = float64(cores) * 1000 / c.ServerCPUMs
		c.ZeroCostNodes = c.ZeroCostPerSec * HeartbeatRenewSeconds
	}
	if a := c.CPUMsPerRenewal[HeartbeatAPIServer]; a > 0 && cores > 0 {
		c.APIServerOnlyPerSec = float64(cores) * 1000 / a
	}
	c.Bound, c.BoundNote = boundOf(steps, best, cores)
	return c
}

// boundOf names the process with the largest CPU per renewal among the three that do the work,
// at the first failed step if there is one (where the machine ran out), else at the highest held.
func boundOf(steps []HeartbeatStep, best, cores int) (string, string) {
	at := best
	if best+1 < len(steps) {
		at = best + 1
	}
	s := steps[at]
	type share struct {
		name  string
		cores float64
	}
	var xs []share
	for _, n := range []string{HeartbeatAPIServer, HeartbeatStore, HeartbeatGenerator} {
		if p := s.Proc(n); p != nil {
			xs = append(xs, share{n, p.Cores})
		}
	}
	if len(xs) == 0 {
		return "", "no process figures"
	}
	sort.SliceStable(xs, func(i, j int) bool { return xs[i].cores > xs[j].cores })
	var busy string
	if cores > 0 {
		frac := s.HostBusyCores / float64(cores)
		if frac >= 0.9 {
			busy = fmt.Sprintf("the machine was saturated (%.2f of %d cores busy)", s.HostBusyCores, cores)
		} else {
			busy = fmt.Sprintf("the machine was not saturated (%.2f of %d cores busy): latency, not CPU, ended it", s.HostBusyCores, cores)
		}
	}
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%s %.2f", x.name, x.cores)
	}
	note := fmt.Sprintf("at %.0f/s asked, cores busy: %s; %s", s.AskedPerSec, strings.Join(parts, ", "), busy)
	return xs[0].name, note
}

// HeartbeatRatio is a/b, NaN-safe: 0 when either is missing.
func HeartbeatRatio(a, b float64) float64 {
	if a <= 0 || b <= 0 || math.IsNaN(a) || math.IsNaN(b) {
		return 0
	}
	return a / b
}
