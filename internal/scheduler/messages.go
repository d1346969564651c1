package scheduler

import "context"

// Proposal is a shard's answer for one attempt: its best node and that node's total framework
// score, or Feasible=false when no node of the shard fits.
type Proposal struct {
	Key      AttemptKey `json:"key"`
	Shard    int        `json:"shard"`
	Node     string     `json:"node,omitempty"`
	Score    int64      `json:"score"`
	Feasible bool       `json:"feasible"`
	Reason   string     `json:"reason,omitempty"` // why nothing fits (first plugin message)
	// Preemption: nothing fits, but evicting these lower-priority pods would (preempt.go).
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
