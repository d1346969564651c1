// Package scheduler is the meganode scheduler: sharded scatter/gather scheduling on the
// unmodified kube-scheduler framework (k8s.io/kubernetes v1.36.3 used as a library).
//
// Nodes are documents and a pod is a query (design.md §4):
//
//	intake (watch or admission webhook, per collector) ──frame──► d shards picked per pod (scatter.go),
//	                                                    or the relay tree (fanout F) ──frame──► every shard
//	shard: PreFilter/Filter/Score over its slice of nodes ──Proposal{node,score}──► collector(hash ns/name)
//	collector: best score wins (random tie-break), once a fraction of shards answered or a deadline passed
//	          ──Decision{allow|deny}──► shards; the winner re-checks, Reserves, assumes and binds
//	winner ──CommitResult──► collector: success ends the pod; a conflict requeues it (never dropped)
//	no feasible node anywhere: the shards propose preemption candidates, the globally cheapest one's
//	shard evicts its victims and nominates the pod, which is requeued (preempt.go, nominator.go)
//
// One concern per file: hash.go (node→shard, pod→collector), envelope.go (the frame relays
// forward without decoding), wire.go (gRPC with a raw/JSON codec, no protoc), relay.go (scatter
// tree, bounded queues), shard*.go (framework, informers, evaluation, commit), global_view.go
// (per-shard view of the whole cluster for pod affinity/anti-affinity and topology spread),
// equivalence.go, collector.go (gather/decide, stragglers), preempt.go and nominator.go
// (preemption across shards), intake.go (watch), intake_groups.go
// (one in-flight attempt per constraint group), webhook.go (validating admission webhook:
// AdmissionReview in, allowed out, pods offered or forwarded to their collector),
// intake_webhook.go (the webhook intake's store, gone confirmation and reconcile LIST; its
// consistency story is on webhookStore and in NOTES.md), metrics.go, run.go (roles),
// simulate.go and projection.go (in-process simulator and the N-node projection), scatter.go
// (d-sampled scatter and widening), batch.go, batch_collector.go and intake_batch.go (pods of one
// class placed from one Filter+Score pass), worker.go (K pods evaluated at once per shard),
// model/ (the discrete-event model the projection runs on).
package scheduler
