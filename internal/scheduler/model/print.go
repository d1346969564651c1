package model

import (
	"fmt"
	"io"
)

// Print writes a compact summary: the scenario, the outcome, and every stage's load, so a
// projection can be read (and checked) without the JSON.
func (r Result) Print(w io.Writer) {
	in := r.Input
	scatter := fmt.Sprintf("all (fanout %d: %d relays in %d levels)", in.Fanout, r.Relays, r.Depth)
	if in.sampled() {
		scatter = fmt.Sprintf("d-sampled d=%d (widen %.3g, all %.3g)", in.D, in.WidenFraction, in.AllFraction)
	}
	cores := "dedicated cores"
	if in.Cores > 0 {
		cores = fmt.Sprintf("shared pool of %d cores", in.Cores)
	}
	window := fmt.Sprint(in.Window)
	if in.Window < 0 {
		window = "unlimited"
	}
	fmt.Fprintf(w, "model: %d pods, %d shards × %d workers, %d collectors (window %s), batch %d, fraction %.3g, %s, %s\n",
		in.Pods, in.Shards, in.Workers, in.Collectors, window, in.Batch, in.Fraction, scatter, cores)
	fmt.Fprintf(w, "  costs µs: encode %.3g, hop %.3g, eval %.3g (batch %.3g + %.3g/pod), proposal %.3g, decision %.3g, commit %.3g, api %.3g; conflict %.3g\n",
		in.EncodeUs, in.HopUs, in.EvalUs, in.BatchFirstUs, in.BatchNextUs, in.ProposalUs, in.DecisionUs, in.CommitUs, in.ApiUs, in.ConflictProb)
	binds := "unlimited"
	if in.BindPerSec > 0 {
		binds = fmt.Sprintf("%.0f/s", in.BindPerSec)
	}
	fmt.Fprintf(w, "  binds %s + %.3g µs, hop latency %.3g µs, noise cv %.3g, stalls %.3g × %.3g µs, seed %d\n",
		binds, in.BindLatencyUs, in.HopLatencyUs, in.CV, in.StallProb, in.StallUs, in.Seed)
	fmt.Fprintf(w, "  ⇒ %d pods bound in %.3f s = %.0f pods/s (50%% by %.3f s, 90%% by %.3f s, 99%% by %.3f s); latency mean %.2f ms, p99 %.2f ms\n",
		r.Bound, r.Seconds, r.PodsPerSec, r.P50Seconds, r.P90Seconds, r.P99Seconds, r.LatencyMeanMs, r.LatencyP99Ms)
	fmt.Fprintf(w, "  %d attempts, %d widened, %d evaluations (%d pod-evaluations, %d redone), %d cores, %d events\n",
		r.Attempts, r.Widened, r.Evaluations, r.EvaluatedPods, r.Redos, r.Cores, r.Events)
	for _, s := range r.Stages {
		mark := ""
		if s.Name == r.Bottleneck {
			mark = "  ← bottleneck"
		}
		fmt.Fprintf(w, "  %-10s %10.3f busy s on %6.0f cores: %5.1f%%%s\n", s.Name, s.BusySeconds, s.Cores, 100*s.Utilisation, mark)
	}
}
