package cluster

import (
	"math"
	"sort"
)

// The demo's comparison: the product (meganode-store + the meganode scheduler) and the stock
// stack (etcd v3.6 + kube-scheduler) under the same load, one row per figure, each with both
// values and their ratio. A figure one stack did not yield is missing (nil), never zero: a
// zero would read as "infinitely better" in a ratio.

// Stack names in a Comparison.
const (
	StackMeganode = "meganode"
	StackStock    = "stock"
)

// StackRun is one stack's demo run: the report of its paced window and its drain.
type StackRun struct {
	Name      string    `json:"name"`      // StackMeganode | StackStock
	Store     string    `json:"store"`     // meganode | etcd
	Scheduler string    `json:"scheduler"` // SchedulerMeganode | SchedulerKube
	StateDir  string    `json:"state_dir"`
	Seconds   float64   `json:"seconds"` // up → down
	Report    *Report   `json:"report,omitempty"`
	Drain     *DrainRun `json:"drain,omitempty"`
	Error     string    `json:"error,omitempty"` // why the run stopped early (its figures are then missing)
}

// Which direction of a row is better.
const (
	BetterLower  = "lower"
	BetterHigher = "higher"
)

// CompareRow is one figure of both stacks. Ratio is meganode/stock.
type CompareRow struct {
	Name     string   `json:"name"`
	Unit     string   `json:"unit"`
	Better   string   `json:"better"` // BetterLower | BetterHigher
	Meganode *float64 `json:"meganode"`
	Stock    *float64 `json:"stock"`
	Ratio    *float64 `json:"ratio"`
}

// Comparison is what the demo prints and writes as comparison.json.
type Comparison struct {
	Nodes     int          `json:"nodes"`
	Pods      int          `json:"pods"`       // paced pods (the measured window)
	QPS       float64      `json:"create_qps"` // their creation rate (0 = unthrottled)
	DrainPods int          `json:"drain_pods"`
	Stacks    []StackRun   `json:"stacks"` // meganode, then stock
	Rows      []CompareRow `json:"rows"`
	Notes     []string     `json:"notes,omitempty"`
}

// Compare builds the rows from the two runs (either may have failed part way).
func Compare(nodes, pods int, qps float64, drainPods int, mega, stock StackRun) *Comparison {
	c := &Comparison{Nodes: nodes, Pods: pods, QPS: qps, DrainPods: drainPods, Stacks: []StackRun{mega, stock}}
	add := func(name, unit, better string, get func(StackRun) *float64) {
		r := CompareRow{Name: name, Unit: unit, Better: better, Meganode: get(mega), Stock: get(stock)}
		if r.Meganode != nil && r.Stock != nil && *r.Stock != 0 {
			r.Ratio = ptr(*r.Meganode / *r.Stock)
		}
		c.Rows = append(c.Rows, r)
	}
	for _, verb := range verbs(mega.Report, stock.Report) {
		add("API p99 "+verb, "ms", BetterLower, func(s StackRun) *float64 {
			if a := verbRow(s.Report, verb); a != nil {
				return ms(a.P99)
			}
			return nil
		})
	}
	add("pod startup p99", "ms", BetterLower, func(s StackRun) *float64 {
		// A p99 of the pods that ran, when some did not, would flatter the stack: missing instead.
		if s.Report == nil || s.Report.Pods == nil || s.Report.Pods.Count == 0 || s.Report.Pods.Running < s.Report.Pods.Count {
			return nil
		}
		return ms(s.Report.Pods.StartupP99Sec)
	})
	add("pods scheduled in the drain", "pods/s", BetterHigher, func(s StackRun) *float64 {
		if s.Drain == nil || s.Drain.PodsPerSec == 0 {
			return nil
		}
		return ptr(s.Drain.PodsPerSec)
	})
	add("store CPU in the paced window", "CPU s", BetterLower, func(s StackRun) *float64 {
		if u := storeUsage(s.Report); u != nil {
			return ptr(u.CPUSeconds)
		}
		return nil
	})
	add("store peak RSS", "MiB", BetterLower, func(s StackRun) *float64 {
		if u := storeUsage(s.Report); u != nil {
			return ptr(u.PeakRSSMiB)
		}
		return nil
	})
	add("scheduler CPU per pod in the drain", "ms", BetterLower, func(s StackRun) *float64 {
		if s.Drain == nil || s.Drain.PodsPerSec == 0 {
			return nil
		}
		return ptr(s.Drain.CPUMsPerPod)
	})
	for _, s := range c.Stacks {
		if s.Error != "" {
			c.Notes = append(c.Notes, s.Name+" stack: "+s.Error)
		}
		if s.Report != nil {
			for _, n := range s.Report.Notes {
				c.Notes = append(c.Notes, s.Name+" stack: "+n)
			}
		}
	}
	return c
}

// Complete reports whether every row has both values (the e2e test's check).
func (c *Comparison) Complete() bool {
	for _, r := range c.Rows {
		if r.Meganode == nil || r.Stock == nil {
			return false
		}
	}
	return len(c.Rows) > 0
}

// verbs lists the API verbs either stack served in its window, the busiest (both added) first.
func verbs(reports ...*Report) []string {
	count := map[string]float64{}
	for _, r := range reports {
		if r == nil {
			continue
		}
		for _, a := range r.APIByVerb {
			count[a.Verb] += a.Count
		}
	}
	return busiestFirst(count)
}

// busiestFirst lists count's names, the largest count first (ties by name).
func busiestFirst(count map[string]float64) []string {
	out := make([]string, 0, len(count))
	for v := range count {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool {
		if count[out[i]] != count[out[j]] {
			return count[out[i]] > count[out[j]]
		}
		return out[i] < out[j]
	})
	return out
}

func verbRow(r *Report, verb string) *APILatency {
	if r == nil {
		return nil
	}
	for i := range r.APIByVerb {
		if a := &r.APIByVerb[i]; a.Verb == verb && a.Count > 0 && !math.IsNaN(a.P99) {
			return a
		}
	}
	return nil
}

// storeUsage adds up the store processes of a report (one per store shard): CPU and peak RSS.
// Nil when a store was not measured (exited or restarted in the window).
func storeUsage(r *Report) *Usage {
	if r == nil || len(r.StoreNames) == 0 {
		return nil
	}
	sum := &Usage{Name: "stores"}
	for _, name := range r.StoreNames {
		var u *Usage
		for i := range r.Components {
			if r.Components[i].Name == name {
				u = &r.Components[i]
			}
		}
		if u == nil {
			return nil
		}
		sum.CPUSeconds += u.CPUSeconds
		sum.PeakRSSMiB += u.PeakRSSMiB
		sum.RSSMiB += u.RSSMiB
	}
	return sum
}

func ptr(v float64) *float64 { return &v }

func ms(seconds float64) *float64 {
	if math.IsNaN(seconds) || math.IsInf(seconds, 0) {
		return nil
	}
	return ptr(seconds * 1e3)
}
