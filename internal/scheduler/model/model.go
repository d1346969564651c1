// Package model is a discrete-event simulation (DES) of meganode's scheduling pipeline:
// intake → scatter (relay tree or d sampled shards) → shard evaluation → proposals → collector
// decision → commit on the winning shard → bind at the apiserver.
//
// It exists to project throughput and latency to sizes this 2-core machine cannot run (1M pods
// on 1M nodes) from per-stage costs measured here, and to say which stage saturates first. The
// closed-form projection in package scheduler (Project) assumes a perfect pipeline running at
// its slowest stage; this model adds what that misses: queueing, the in-flight window, waiting
// for the slowest of S shards (the tail at scale), power-of-two-choices imbalance, batching,
// widening re-sends, and a shared CPU pool for checking against in-process runs.
//
// The package is stdlib only (no Kubernetes imports) so it builds and tests in seconds.
//
// Time is float64 microseconds inside the simulation; results are in seconds or milliseconds as
// their names say. Every approximation is documented where it is made; in short:
//
//   - Dedicated cores (Cores == 0) book a job when it reaches its station instead of simulating
//     start events: a FIFO station with K identical workers starts a job at max(arrival,
//     earliest free worker), which depends only on earlier arrivals, so this is exact.
//   - Scatter "all" with dedicated cores is aggregated (aggregate.go): relay hops are booked
//     when the frame enters the tree (exact), all S evaluations in one event when the frame
//     reaches its first shard (a FIFO inversion against commits within the spread of leaf
//     arrivals), and the S proposals are at most 5 collector jobs (exact CPU, decisions late by
//     at most a quarter of the answers' spread). Exact turns this off; a test keeps the two
//     within a few %.
//   - Noise: a 4096-entry quantile table of the lognormal; an aggregated job of k services gets
//     CV/√k and Poisson(k·StallProb) stalls (noise.go). Stalls are per service, as specified,
//     whatever its length: 1 µs proposal handlings stall as often as 300 µs evaluations, and
//     zero-cost services never do.
//   - Power of two choices sees the exact, global count of sampled pods outstanding per shard
//     (a real collector sees its own or stale counts); all-frames are not counted (scatter.go).
//   - A collector's encode job also pays the first hops (D, or 1 to the root) and all its frames
//     leave when it ends. A batch costs B·EncodeUs to encode, is one frame, one attempt of the
//     window, one decision; its pods are dealt to the answering shards one by one at random.
//   - Placement is not modelled: the winner of a pod is a uniformly random shard among the
//     answers counted, nothing is infeasible except the WidenFraction of sampled attempts, and
//     commits always succeed. Deny messages to losers are in DecisionUs.
//   - A collision (ConflictProb) is possible only when another job of the shard runs when an
//     evaluation starts; the evaluation is redone at once on the same worker, at most once.
//   - Binds: one global FIFO rate limit then a fixed latency; ApiUs (pool only) runs for a
//     commit's pods together once the last passed the limit.
//   - The shared pool is non-preemptive FIFO over ready jobs; a job keeps its core to the end.
//   - Pods go to collectors and classes by a hash of their index; a collector's batches take
//     classes round-robin.
package model

import (
	"errors"
	"fmt"
	"math"
)

// Scatter modes.
const (
	ScatterAll     = "all"       // every frame goes down the relay tree to all S shards
	ScatterSampled = "d-sampled" // every frame goes straight to D shards picked by power of two choices
)

// Defaults applied by Run to zero fields, taken from the implementation's own defaults where it
// has one (--inflight 64, relay fanout 10).
const (
	DefaultWindow = 64
	DefaultFanout = 10
	DefaultD      = 2
)

// Input is one scenario: the deployment shape, per-stage CPU costs (µs of one core) and the
// noise. Zero values get the defaults documented per field.
type Input struct {
	Pods       int `json:"pods"`              // P, all pending at t=0
	Shards     int `json:"shards"`            // S (default 1)
	Workers    int `json:"workers_per_shard"` // K parallel evaluations per shard (default 1)
	Collectors int `json:"collectors"`        // C (default 1); pods are split over them by hash
	// Window is the in-flight attempts per collector (0 → DefaultWindow, < 0 → unlimited). An
	// attempt holds its slot from the moment its frame is queued for encoding until the
	// collector's final decision; a batch is one attempt (one frame, one decision), not B, so a
	// window of W keeps up to W·B pods in flight, as the real window counts frames.
	Window int `json:"window"`
	Fanout int `json:"fanout"` // F of the relay tree (0 → DefaultFanout, < 2 → 2)

	Scatter string `json:"scatter"` // ScatterAll (default) or ScatterSampled ("sampled" also accepted)
	// D is how many shards a sampled frame goes to (0 → DefaultD, clamped to S).
	D int `json:"d"`
	// WidenFraction of sampled attempts find nothing feasible in their D shards; after that
	// decision they are re-sent to all S shards through the relay tree (keeping their window slot).
	WidenFraction float64 `json:"widen_fraction"`
	// AllFraction of sampled attempts go to all shards from the start (e.g. affinity pods).
	AllFraction float64 `json:"all_fraction"`

	// Batch is B: up to B pods of one equivalence class travel as one frame (0 or 1 → off).
	Batch int `json:"batch"`
	// Classes is the number of equivalence classes the pods fall into (hash of the pod; 0 → 1).
	Classes int `json:"classes"`
	// Fraction is the straggler cut: the collector decides when ⌈Fraction·targets⌉ proposals
	// were handled (0 → 1, i.e. wait for all). Late proposals still cost ProposalUs.
	Fraction float64 `json:"fraction"`

	EncodeUs     float64 `json:"encode_us"`      // collector CPU per pod: pod → frame (a batch costs B·EncodeUs)
	HopUs        float64 `json:"hop_us"`         // CPU per frame per child sent (collector → shard/root, relay → child)
	EvalUs       float64 `json:"eval_us"`        // shard CPU for one pod's evaluation
	BatchFirstUs float64 `json:"batch_first_us"` // shard CPU for the first pod of a batch (0 → EvalUs)
	BatchNextUs  float64 `json:"batch_next_us"`  // shard CPU for each further pod of a batch
	// ConflictProb: when an evaluation starts while another job of the same shard is running
	// (K > 1), with this probability it collides and is redone at once (EvalUs more CPU).
	ConflictProb float64 `json:"conflict_prob"`
	ProposalUs   float64 `json:"proposal_us"` // collector CPU per proposal received
	DecisionUs   float64 `json:"decision_us"` // collector CPU per decision (one per attempt)
	CommitUs     float64 `json:"commit_us"`   // winning shard's CPU per pod committed
	// ReleaseUs is an answering shard's CPU per pod (or batch slot) it proposed and did not win:
	// Unreserve and forget the assumed pod or placeholder (0: not modelled).
	ReleaseUs float64 `json:"release_us"`
	// ApiUs is CPU per bound pod of the in-process fake apiserver (Binding + watch fan-out). It
	// only exists with a shared pool (Cores > 0); with dedicated cores the apiserver is outside
	// the scheduler's cores and modelled only by BindPerSec and BindLatencyUs.
	ApiUs float64 `json:"api_us"`
	// ApiConcurrency is how many of the pool's cores the fake apiserver's work can use at once
	// (0 → Cores): the client-go fake serialises every write under one tracker lock and each
	// informer delivers its events on one goroutine, so it is measured (MeasureFakeAPI), not assumed.
	ApiConcurrency int `json:"api_concurrency,omitempty"`

	BindPerSec    float64 `json:"bind_per_sec"`    // apiserver Binding rate limit, global FIFO (0 → unlimited)
	BindLatencyUs float64 `json:"bind_latency_us"` // fixed bind round trip after the rate limit (not CPU)
	HopLatencyUs  float64 `json:"hop_latency_us"`  // network delay of every message (frame hop, proposal, decision)

	// CV is the coefficient of variation of the lognormal factor (mean 1) every service time is
	// multiplied by; StallProb is the chance a service takes StallUs more (a GC pause).
	CV        float64 `json:"cv"`
	StallProb float64 `json:"stall_prob"`
	StallUs   float64 `json:"stall_us"`

	// Cores > 0 puts all CPU work in one pool of that many cores (FIFO over ready jobs), each
	// component still limited to its own concurrency (shard K, relay and collector 1); this is
	// how the in-process runs on this machine behave. 0 gives every component dedicated cores.
	Cores int `json:"cores"`
	// Exact simulates every relay hop, evaluation and proposal as its own event even in scatter
	// "all" with dedicated cores (slow; used to check the aggregated path). Always on with Cores > 0.
	Exact bool `json:"exact"`

	Seed uint64 `json:"seed"` // all randomness derives from it: same Input → same Result
}

// Stage is one stage's CPU (or, for binds, apiserver) occupancy.
type Stage struct {
	Name        string  `json:"name"`         // collectors, relays, shards, binds, apiserver, cpu pool
	BusySeconds float64 `json:"busy_seconds"` // CPU-seconds (binds: seconds the rate limiter was occupied)
	Cores       float64 `json:"cores"`        // capacity it had (pool: min(own concurrency, Cores))
	Utilisation float64 `json:"utilisation"`  // BusySeconds / (Cores · makespan)
}

// Result is what one Run measured in simulated time.
type Result struct {
	Input      Input   `json:"input"`        // with defaults applied
	Seconds    float64 `json:"seconds"`      // makespan: last pod bound
	PodsPerSec float64 `json:"pods_per_sec"` // Bound / Seconds
	Bound      int     `json:"bound"`
	P50Seconds float64 `json:"p50_bound_seconds"` // time by which 50% of the pods were bound
	P90Seconds float64 `json:"p90_bound_seconds"`
	P99Seconds float64 `json:"p99_bound_seconds"`
	// Pod latency from its frame leaving the collector (first send) to its bind completing.
	LatencyMeanMs float64 `json:"latency_mean_ms"`
	LatencyP99Ms  float64 `json:"latency_p99_ms"`

	Stages     []Stage `json:"stages"`
	Bottleneck string  `json:"bottleneck"` // the stage with the highest utilisation
	Cores      int     `json:"cores"`      // dedicated: S·K + relays + C; pool: Cores
	Relays     int     `json:"relays"`     // relays of the tree (0 when no frame can take it)
	Depth      int     `json:"depth"`      // relay levels

	Attempts      int64 `json:"attempts"`       // frames sent by the intake (a batch is one)
	Widened       int64 `json:"widened"`        // attempts re-sent to all shards
	Evaluations   int64 `json:"evaluations"`    // evaluation passes (a batch is one), redos excluded
	EvaluatedPods int64 `json:"evaluated_pods"` // pod-evaluations (a batch of b counts b)
	Redos         int64 `json:"redos"`          // evaluations redone after a collision
	Events        int64 `json:"events"`         // DES events processed (a cost measure of the run)
}

// withDefaults returns the input with zero fields replaced by their defaults.
func (in Input) withDefaults() Input {
	if in.Shards <= 0 {
		in.Shards = 1
	}
	if in.Workers <= 0 {
		in.Workers = 1
	}
	if in.Collectors <= 0 {
		in.Collectors = 1
	}
	if in.Window == 0 {
		in.Window = DefaultWindow
	}
	if in.Fanout == 0 {
		in.Fanout = DefaultFanout
	}
	if in.Fanout < 2 {
		in.Fanout = 2
	}
	switch in.Scatter {
	case "":
		in.Scatter = ScatterAll
	case "sampled":
		in.Scatter = ScatterSampled
	}
	if in.D <= 0 {
		in.D = DefaultD
	}
	in.D = min(in.D, in.Shards)
	if in.Batch <= 0 {
		in.Batch = 1
	}
	if in.Classes <= 0 {
		in.Classes = 1
	}
	if in.Fraction <= 0 {
		in.Fraction = 1
	}
	if in.BatchFirstUs <= 0 {
		in.BatchFirstUs = in.EvalUs
	}
	return in
}

// Validate reports inputs the model cannot run. Run panics on them, so callers taking user
// input should call it first.
func (in Input) Validate() error {
	in = in.withDefaults()
	var errs []error
	if in.Pods < 0 {
		errs = append(errs, errors.New("pods < 0"))
	}
	if in.Scatter != ScatterAll && in.Scatter != ScatterSampled {
		errs = append(errs, fmt.Errorf("scatter %q: want %q or %q", in.Scatter, ScatterAll, ScatterSampled))
	}
	type field struct {
		name string
		v    float64
	}
	for _, f := range []field{{"widen_fraction", in.WidenFraction}, {"all_fraction", in.AllFraction},
		{"conflict_prob", in.ConflictProb}, {"stall_prob", in.StallProb}, {"fraction", in.Fraction}} {
		if !(f.v >= 0 && f.v <= 1) {
			errs = append(errs, fmt.Errorf("%s %v not in [0,1]", f.name, f.v))
		}
	}
	for _, f := range []field{{"encode_us", in.EncodeUs}, {"hop_us", in.HopUs}, {"eval_us", in.EvalUs},
		{"batch_first_us", in.BatchFirstUs}, {"batch_next_us", in.BatchNextUs}, {"proposal_us", in.ProposalUs},
		{"decision_us", in.DecisionUs}, {"commit_us", in.CommitUs}, {"release_us", in.ReleaseUs}, {"api_us", in.ApiUs}, {"bind_per_sec", in.BindPerSec},
		{"bind_latency_us", in.BindLatencyUs}, {"hop_latency_us", in.HopLatencyUs}, {"cv", in.CV}, {"stall_us", in.StallUs}} {
		if !(f.v >= 0) || math.IsInf(f.v, 0) {
			errs = append(errs, fmt.Errorf("%s %v: want a finite value ≥ 0", f.name, f.v))
		}
	}
	if in.Cores < 0 {
		errs = append(errs, errors.New("cores < 0"))
	}
	return errors.Join(errs...)
}

// sampled reports whether attempts start in d-sampled mode (before AllFraction).
func (in Input) sampled() bool { return in.Scatter == ScatterSampled }

// usesTree reports whether any frame can go down the relay tree; if not, no relays exist.
func (in Input) usesTree() bool {
	return !in.sampled() || in.AllFraction > 0 || in.WidenFraction > 0
}

// evalUs is the shard CPU of one evaluation pass over a frame of b pods.
func (in Input) evalUs(b int) float64 {
	if b <= 1 {
		return in.EvalUs
	}
	return in.BatchFirstUs + float64(b-1)*in.BatchNextUs
}

// needed is how many proposals of `targets` the collector waits for before deciding.
func (in Input) needed(targets int) int {
	return min(max(int(math.Ceil(in.Fraction*float64(targets)-1e-9)), 1), targets)
}
