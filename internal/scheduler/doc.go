// Package scheduler is the meganode scheduler: sharded scatter/gather scheduling on the
// unmodified kube-scheduler framework (k8s.io/kubernetes v1.36.3 used as a library).
//
// Nodes are documents and a pod is a query (design.md §4):
//
//	intake (watch or admission webhook, per collector) ──frame──► d shards picked per pod (collector/scatter.go),
//	                                                    or the relay tree (fanout F) ──frame──► every shard
//	shard: PreFilter/Filter/Score over its slice of nodes ──Proposal{node,score}──► collector(hash ns/name)
//	collector: best score wins (ties to the emptier node, then at random), once a fraction of shards answered or a deadline passed
//	          ──Decision{allow|deny}──► shards; the winner re-checks, Reserves, assumes and binds
//	winner ──CommitResult──► collector: success ends the pod; a conflict requeues it (never dropped)
//	no feasible node anywhere: the shards propose preemption candidates, the globally cheapest one's
//	shard evicts its victims and nominates the pod, which is requeued (shard/preempt.go)
//
// Each role is a package of its own; this one wires them together: Config, StartAll (role all:
// every role in one process, the hops in-process calls with the same bounded queues) and RunRole
// (one role per process over gRPC), and the roles' webhook wiring (webhook.go). The packages,
// lowest in the import graph first:
//
//	metrics            per-component counters and latency histograms (/metrics)
//	podspec            pod classification the roles share (node-local signature, owner, constraints)
//	events             Scheduled and FailedScheduling events
//	fakeapi            the fake apiserver of the tests and the simulator
//	wire               frames, control messages, hashing (node → shard, pod → collector), gRPC
//	relay              the scatter tree
//	collector          gather/decide, batch merge, d-shard picking, the cross-shard preemption choice
//	shard              the framework over a slice of the nodes: evaluate, reserve, propose, bind, preempt
//	intake             watch or webhook intake, batches, constraint groups, retries
//	scheduler (this)   Config, StartAll, RunRole
//	sim, clusterbench  the in-process simulator; the benchmark on `up` clusters
//	model              the discrete-event model the projection runs on
//	schedtest          what the packages' tests share
//
// NOTES.md has the design, the measurements and the layout.
package scheduler
