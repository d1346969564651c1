// Package intake is a collector's source of pods and its retry loop: a field-selected watch on
// unscheduled pods (intake.go) or the validating admission webhook with a periodic LIST
// (webhook_http.go, webhook.go). It encodes each of its pods once into a frame, sends it to the
// d shards its collector picks or down the relay tree (scatter.go), in batches of one class
// (batch.go), one attempt per constraint group at a time (groups.go), and keeps every pod until
// it is bound or gone: the collector hands requeues and results back through its callbacks.
// It records FailedScheduling events. It sits above the collector (it asks it which shards to
// send to and registers each attempt with it) and below the root package, which wires intakes
// to collectors.
package intake
