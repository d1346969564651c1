package model

import (
	"slices"

	"gonum.org/v1/gonum/stat"
)

// Run simulates in (zero fields defaulted, see Input) until every pod is bound and returns what
// it measured. It panics if in.Validate fails. Same Input (Seed included) → same Result.
func Run(in Input) Result {
	if err := in.Validate(); err != nil {
		panic("model: " + err.Error())
	}
	m := newSim(in.withDefaults())
	m.run()
	return m.result()
}

// result turns the finished simulation into a Result.
func (m *sim) result() Result {
	in := m.in
	r := Result{
		Input: in, Bound: len(m.bound), Relays: m.tree.relays, Depth: m.tree.depth,
		Attempts: m.attempts, Widened: m.widened, Evaluations: m.evals, EvaluatedPods: m.evalPods,
		Redos: m.redos, Events: m.events,
	}
	if r.Bound > 0 {
		slices.Sort(m.bound)
		r.Seconds = m.bound[len(m.bound)-1] / 1e6
		r.PodsPerSec = float64(r.Bound) / max(r.Seconds, 1e-12)
		r.P50Seconds = quantile(m.bound, 0.50) / 1e6
		r.P90Seconds = quantile(m.bound, 0.90) / 1e6
		r.P99Seconds = quantile(m.bound, 0.99) / 1e6
		sum := 0.0
		for _, l := range m.lat {
			sum += l
		}
		r.LatencyMeanMs = sum / float64(len(m.lat)) / 1e3
		slices.Sort(m.lat)
		r.LatencyP99Ms = quantile(m.lat, 0.99) / 1e3
	}

	// Capacity per stage: its own cores when dedicated, and never more than the pool.
	var busy, conc [numStages]float64
	for i := range m.st {
		busy[m.st[i].stage] += m.st[i].busy
		conc[m.st[i].stage] += float64(m.st[i].conc)
	}
	total := 0.0
	for st := range numStages {
		total += busy[st]
		if conc[st] == 0 {
			continue
		}
		cores := conc[st]
		if m.pool != nil {
			cores = min(cores, float64(in.Cores))
		}
		r.Stages = append(r.Stages, m.stage(stageNames[st], busy[st], cores))
	}
	if in.BindPerSec > 0 {
		r.Stages = append(r.Stages, m.stage("binds", m.bindBusy, 1))
	}
	if m.pool != nil {
		r.Cores = in.Cores
		r.Stages = append(r.Stages, m.stage("cpu pool", total, float64(in.Cores)))
	} else {
		r.Cores = int(conc[stCollectors] + conc[stRelays] + conc[stShards])
	}
	best := -1.0
	for _, s := range r.Stages {
		if s.Utilisation > best {
			best, r.Bottleneck = s.Utilisation, s.Name
		}
	}
	return r
}

func (m *sim) stage(name string, busyUs, cores float64) Stage {
	s := Stage{Name: name, BusySeconds: busyUs / 1e6, Cores: cores}
	if span := m.bound; len(span) > 0 && cores > 0 {
		s.Utilisation = s.BusySeconds / (cores * span[len(span)-1] / 1e6)
	}
	return s
}

// quantile of sorted xs: the smallest value with at least q of the values at or below it
// (gonum's empirical quantile; exact, over every simulated pod).
func quantile(xs []float64, q float64) float64 { return stat.Quantile(q, stat.Empirical, xs, nil) }
