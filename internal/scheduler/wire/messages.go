package wire

import (
	"cmp"
	"context"
)

// Proposal is a shard's answer for one attempt: its best node and that node's total framework
// score, or Feasible=false when no node of the shard fits.
type Proposal struct {
	Key      AttemptKey `json:"key"`
	Shard    int        `json:"shard"`
	Node     string     `json:"node,omitempty"`
	Score    int64      `json:"score"`
	Pods     int        `json:"pods,omitempty"` // on Node when it was scored: among equal scores the emptier node wins
	Feasible bool       `json:"feasible"`
	Reason   string     `json:"reason,omitempty"` // why nothing fits (first plugin message)
	// Preemption: nothing fits, but evicting these lower-priority pods would (shard/preempt.go).
	Preemption *PreemptionCandidate `json:"preemption,omitempty"`
	// PreemptWait: no new preemption for this pod this round, from any shard: the victims of its
	// earlier preemption are still terminating, or a node of this shard fits it after all.
	PreemptWait bool `json:"preemptWait,omitempty"`
	// Slots: for a batch (Header.Batch), the shard's placements in the order it reserved them
	// (each one filtered with the earlier ones assumed); Node/Score are the first slot's. The
	// collector may take any prefix of a shard's slots, never a slot without those before it.
	Slots []Slot `json:"slots,omitempty"`
}

// Slot is one reserved placement of a batch proposal.
type Slot struct {
	Node  string `json:"n"`
	Score int64  `json:"s"`
	// Pods the node held before this slot's reservation: among equal scores the collector
	// takes the slot on the emptier node, as a shard ranks its own (shard.bestOf).
	Pods int `json:"p,omitempty"`
}

// Decision is the collector's answer to a shard that proposed a node.
type Decision struct {
	Key       AttemptKey `json:"key"`
	Allow     bool       `json:"allow"`
	Collector int        `json:"collector"`
	Preempt   bool       `json:"preempt,omitempty"` // allow = evict the proposed victims (no bind)
	// Assign: for a batch, the batch members (indices into Header.Batch) that the shard's first
	// len(Assign) slots get; its other slots are released. Allow is len(Assign) > 0.
	Assign []int `json:"assign,omitempty"`
}

// CommitResult is the winner's report after its bind attempt.
type CommitResult struct {
	Key      AttemptKey `json:"key"`
	Shard    int        `json:"shard"`
	Node     string     `json:"node"`
	Bound    bool       `json:"bound"`
	Conflict bool       `json:"conflict"` // node no longer fits (capacity taken): requeue
	Gone     bool       `json:"gone"`     // pod deleted or already bound by someone else: done
	Error    string     `json:"error,omitempty"`
	// Preempted: victims evicted and the pod nominated to Node; requeue it to bind there.
	Preempted bool `json:"preempted,omitempty"`
}

// FrameSink takes frames (relays and shards). Send blocks when the receiver's queue is full:
// that is the back-pressure of the scatter tree.
type FrameSink interface {
	Send(ctx context.Context, frame []byte) error
}

// ProposalSink is a collector as seen by shards.
type ProposalSink interface {
	Propose(ctx context.Context, p Proposal) error
	Result(ctx context.Context, r CommitResult) error
}

// DecisionSink is a shard as seen by collectors.
type DecisionSink interface {
	Decide(ctx context.Context, d Decision) error
}

// Placement is a pod the collector saw bound; frames of constrained pods carry the latest ones
// (Header.Placed) so every shard's global view includes them even before its informer does.
type Placement struct {
	UID       string `json:"uid"`
	Namespace string `json:"ns"`
	Name      string `json:"name"`
	Node      string `json:"node"`
	Attempt   int    `json:"attempt"`
}

// PreemptionCost orders preemption candidates as kube-scheduler's pickOneNodeForPreemption
// does, criterion by criterion: fewest PDB violations, lowest highest-victim priority, smallest
// sum of victim priorities (each shifted by 2^31, as kube-scheduler does, so that the count of
// negative-priority victims still weighs), fewest victims, latest start of the earliest-started
// highest-priority victim.
type PreemptionCost struct {
	PDBViolations   int64 `json:"pdb"`
	HighestPriority int32 `json:"highest"`
	SumPriorities   int64 `json:"sum"`
	Victims         int   `json:"victims"`
	EarliestStart   int64 `json:"start"` // unix nanoseconds
}

// Compare is negative when c is cheaper than o, zero on a tie.
func (c PreemptionCost) Compare(o PreemptionCost) int {
	return cmp.Or(
		cmp.Compare(c.PDBViolations, o.PDBViolations),
		cmp.Compare(c.HighestPriority, o.HighestPriority),
		cmp.Compare(c.SumPriorities, o.SumPriorities),
		cmp.Compare(c.Victims, o.Victims),
		cmp.Compare(o.EarliestStart, c.EarliestStart), // later start is cheaper
	)
}

// PreemptionCandidate is a shard's best preemption: evicting Victims (namespace/name, most
// important first) from Node makes the pod fit there.
type PreemptionCandidate struct {
	Node    string         `json:"node"`
	Cost    PreemptionCost `json:"cost"`
	Victims []string       `json:"victims"`
}
