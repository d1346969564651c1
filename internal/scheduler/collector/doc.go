// Package collector gathers the shards' proposals for the pods that hash to it and decides:
// the best score wins (random tie-break) once enough live shards answered or a deadline passed,
// a batch's slots are merged best next slot first, and when no shard has a feasible node the
// globally cheapest preemption candidate wins. It follows each winner's bind to its end and
// hands requeues back to its intake through callbacks. It also picks the d shards a sampled pod
// goes to (scatter.go). It knows shards only as wire.DecisionSink, so it depends on the wire
// and nothing else of the scheduler.
package collector
