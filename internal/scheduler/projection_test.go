package scheduler

import "testing"

func TestProjectionBottlenecks(t *testing.T) {
	in := ProjectionInput{Nodes: 1_000_000, Pods: 1_000_000, Shards: 256, Fanout: 10, Collectors: 16,
		ShardEvalUs: 500, CommitUs: 50, EncodeUs: 2, HopUs: 5, ProposalUs: 3, DecisionUs: 100,
		CoresPerShard: 1, ParallelEff: 1, BindPerSec: 1e9, IntakePerSec: 1e9, HopLatencyUs: 100}
	p := Project(in)
	if p.Relays != 26+3+1 || p.Depth != 3 {
		t.Fatalf("tree %d relays %d levels", p.Relays, p.Depth)
	}
	if p.Bottleneck != "shard evaluation" || p.PodsPerSec < 1990 || p.PodsPerSec > 2000 {
		t.Fatalf("%+v", p)
	}
	in.BindPerSec = 1000
	if p := Project(in); p.Bottleneck != "apiserver binds" || p.PodsPerSec != 1000 {
		t.Fatalf("%+v", p)
	}
}
