package scheduler

import (
	"fmt"
	"io"
	"math"
)

// ProjectionInput are the measured per-stage costs and the assumed deployment.
type ProjectionInput struct {
	Nodes, Pods, Shards, Fanout, Collectors int
	// Measured on this machine (µs of one core per pod unless said otherwise):
	ShardEvalUs   float64 // decode+snapshot+PreFilter+Filter+Score+propose for one pod on one shard of Nodes/Shards nodes
	CommitUs      float64 // winner's re-check+Reserve+assume (bind RPC excluded)
	EncodeUs      float64 // intake: pod → frame
	HopUs         float64 // one frame to one child over gRPC (per child)
	ProposalUs    float64 // one proposal at the collector over a stream (network + handling)
	DecisionUs    float64 // collector decide per pod (O(S) bookkeeping + allow/deny sends)
	CoresPerShard float64 // cores a shard process gets (Filter/Score parallelise over them)
	ParallelEff   float64 // efficiency of that parallelism (0..1)
	BindPerSec    float64 // Binding throughput of the apiserver+store (assumption: an input, not measured here)
	IntakePerSec  float64 // pod intake throughput per collector (watch or webhook) (assumption)
	HopLatencyUs  float64 // one network hop latency (for latency only)
}

// Projection is the model's answer.
type Projection struct {
	ShardRate, RelayRate, CollectorRate, IntakeRate, BindRate float64
	PodsPerSec                                                float64
	Bottleneck                                                string
	Relays, Depth                                             int
	Seconds                                                   float64
	LatencyMs                                                 float64
}

// Project: every shard evaluates every pod, so the system rate is capped by one shard's rate;
// each relay forwards every pod to Fanout children; each collector handles S proposals per pod
// for 1/C of the pods; the apiserver takes one Binding per pod. The pipeline runs at the
// slowest stage; stages overlap (pipelining), so total time ≈ P / rate.
func Project(in ProjectionInput) Projection {
	var p Projection
	p.Relays, p.Depth = TreeShape(in.Shards, in.Fanout)
	shardCores := max(in.CoresPerShard, 1) * max(min(in.ParallelEff, 1), 0.1)
	// A shard also commits the pods it wins (1/S of them on average).
	perPod := in.ShardEvalUs + in.CommitUs/float64(max(in.Shards, 1))
	p.ShardRate = 1e6 * shardCores / perPod
	p.RelayRate = 1e6 / (float64(in.Fanout) * in.HopUs)
	p.CollectorRate = 1e6 * float64(max(in.Collectors, 1)) / (float64(in.Shards)*in.ProposalUs + in.DecisionUs)
	p.IntakeRate = float64(max(in.Collectors, 1)) * 1e6 / max(in.EncodeUs, 1e-3)
	if in.IntakePerSec > 0 {
		p.IntakeRate = float64(max(in.Collectors, 1)) * math.Min(in.IntakePerSec, 1e6/max(in.EncodeUs, 1e-3))
	}
	p.BindRate = in.BindPerSec
	p.PodsPerSec, p.Bottleneck = p.ShardRate, "shard evaluation"
	for _, c := range []struct {
		r float64
		n string
	}{{p.RelayRate, "relay fan-out"}, {p.CollectorRate, "collectors"}, {p.IntakeRate, "intake"}, {p.BindRate, "apiserver binds"}} {
		if c.r > 0 && c.r < p.PodsPerSec {
			p.PodsPerSec, p.Bottleneck = c.r, c.n
		}
	}
	p.Seconds = float64(in.Pods) / p.PodsPerSec
	p.LatencyMs = (float64(p.Depth+2)*in.HopLatencyUs + in.ShardEvalUs/shardCores + in.CommitUs) / 1e3
	return p
}

// Print writes the projection with every input.
func (p Projection) Print(w io.Writer, in ProjectionInput) {
	fmt.Fprintf(w, "projection: %d nodes, %d pods, %d shards (%d nodes each), fanout %d → %d relays in %d levels, %d collectors\n",
		in.Nodes, in.Pods, in.Shards, in.Nodes/max(in.Shards, 1), in.Fanout, p.Relays, p.Depth, in.Collectors)
	fmt.Fprintf(w, "  inputs (measured here, µs per pod per core): shard eval %.1f, commit %.1f, encode %.2f, hop/child %.2f, proposal %.2f, decision %.1f\n",
		in.ShardEvalUs, in.CommitUs, in.EncodeUs, in.HopUs, in.ProposalUs, in.DecisionUs)
	lim := func(v float64) string {
		if v <= 0 {
			return "not modelled"
		}
		return fmt.Sprintf("%.0f/s", v)
	}
	fmt.Fprintf(w, "  inputs (assumed): %.0f core(s) per shard at %.0f%% efficiency, apiserver binds %s, intake %s per collector, hop latency %.0f µs\n",
		in.CoresPerShard, in.ParallelEff*100, lim(in.BindPerSec), lim(in.IntakePerSec), in.HopLatencyUs)
	fmt.Fprintf(w, "  stage rates (pods/s): shard %.0f, relay %.0f, collectors %.0f, intake %.0f, binds %s\n",
		p.ShardRate, p.RelayRate, p.CollectorRate, p.IntakeRate, lim(p.BindRate))
	fmt.Fprintf(w, "  ⇒ %.0f pods/s (bottleneck: %s): %d pods in %.0f s; per-pod latency ≈ %.1f ms + gather wait\n",
		p.PodsPerSec, p.Bottleneck, in.Pods, p.Seconds, p.LatencyMs)
}
