// Package wire is what the scheduler's roles say to each other and how: the frame a pod travels
// in (envelope.go: a small JSON header and the pod's protobuf bytes, which relays forward
// without decoding), the control messages and the sinks each role implements (messages.go:
// Proposal, Decision, CommitResult and the payloads they carry), the hashing every role must
// agree on (hash.go: node → shard, pod → collector) and the gRPC transport without protoc
// (wire.go). It sits below every role: shards, relays, collectors and intakes import it and
// never each other for these.
package wire
