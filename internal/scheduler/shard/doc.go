// Package shard is one shard of the scheduler: the unmodified kube-scheduler framework (default
// profile, every default plugin) over the shard's slice of the nodes, fed by informers filtered
// by ownership (informers.go, framework.go). It evaluates the pods the relays or the collector
// send it (evaluate.go; K at once, worker.go; a batch from one pass, batch.go; pods with
// cross-node constraints on a view of the whole cluster, global_view.go), reserves its best node
// and proposes it to the pod's collector, binds when allowed (commit.go), and proposes and
// carries out preemptions across shards (preempt.go, nominator.go). Filter verdicts of
// equivalent pods are reused (equivalence.go). measure.go times a shard's stages for the
// simulator's model; it needs the shard's internals, so it lives here.
//
// A shard talks to the rest only through the wire: frames in (wire.FrameSink), proposals and
// bind results out (wire.ProposalSink), decisions in (wire.DecisionSink).
package shard
