package e2e

// Lock and Election with the NOSPACE alarm raised (docs/design.md §5, "When a log write fails"):
// etcd's lock and election servers run their recipes through an in-process client whose KV and
// Lease go through the quota servers and the apply's alarm checks, so the recipe's lease grant
// and its put are refused with NOSPACE, and the error reaches the caller as a clientv3 error:
// code Unknown, "etcdserver: mvcc: database space exceeded". Deletes (Unlock, Resign) and reads
// (Leader) pass. The store, which used to skip those checks for its recipes (a Lock under NOSPACE
// was granted; on a full disk it waited for the disk), must answer the same; the full-disk case
// is in durability/diskfull_test.go.

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/grpc/codes"
)

func TestLockElectionUnderNoSpace(t *testing.T) {
	got := map[string][]string{}
	forEachDedicated(t, serverOpts{}, func(t *testing.T, tg *target) {
		s := newLX(t, tg, "/e2e/nospace/")
		ctx := ctxT(t)
		L := s.grant(60, "A", "B")
		lock, elect := s.p+"lock", s.p+"elect"
		held, err := s.lock.Lock(ctx, &v3lockpb.LockRequest{Name: b(lock), Lease: L[0]})
		s.add("A locks before the alarm: %s", s.lockResp(held, err))
		cA, err := s.elect.Campaign(ctx, &v3electionpb.CampaignRequest{Name: b(elect), Lease: L[0], Value: b("a1")})
		s.add("A campaigns before the alarm: %s", s.campaignResp(cA, err))
		if err != nil {
			return
		}
		alarm := func(what string, a pb.AlarmRequest_AlarmAction) {
			_, err := tg.Maint.Alarm(ctx, &pb.AlarmRequest{Action: a, MemberID: s.mid, Alarm: pb.AlarmType_NOSPACE})
			must(t, what, err)
		}
		alarm("activate NOSPACE", pb.AlarmRequest_ACTIVATE)
		defer alarm("deactivate NOSPACE", pb.AlarmRequest_DEACTIVATE)

		lr, err := s.lock.Lock(ctx, &v3lockpb.LockRequest{Name: b(lock + "2"), Lease: L[1]})
		s.add("B locks a free lock: %s", s.lockResp(lr, err))
		wantErr(t, "Lock under NOSPACE", err, codes.Unknown, noSpace)
		lr, err = s.lock.Lock(ctx, &v3lockpb.LockRequest{Name: b(lock + "2")})
		s.add("lock with a new session (lease 0): %s", s.lockResp(lr, err))
		lr, err = s.lock.Lock(ctx, &v3lockpb.LockRequest{Name: b(lock), Lease: L[1]})
		s.add("B locks the held lock: %s", s.lockResp(lr, err))
		lr, err = s.lock.Lock(ctx, &v3lockpb.LockRequest{Name: b(lock), Lease: L[0]})
		s.add("A locks again with its lease (no put): %s", s.lockResp(lr, err))
		cr, err := s.elect.Campaign(ctx, &v3electionpb.CampaignRequest{Name: b(elect + "2"), Lease: L[1], Value: b("b1")})
		s.add("B campaigns: %s", s.campaignResp(cr, err))
		cr, err = s.elect.Campaign(ctx, &v3electionpb.CampaignRequest{Name: b(elect), Lease: L[0], Value: b("a1")})
		s.add("A campaigns again, same value: %s", s.campaignResp(cr, err))
		pr, err := s.elect.Proclaim(ctx, &v3electionpb.ProclaimRequest{Leader: cA.Leader, Value: b("a2")})
		s.add("A proclaims: %s", hdrOf(s, pr, err))
		ld, err := s.elect.Leader(ctx, &v3electionpb.LeaderRequest{Name: b(elect)})
		s.add("leader: %s", s.leaderResp(ld, err))
		s.add("queues: %s %s", s.queue(lock+"/"), s.queue(lock+"2/"))
		ur, err := s.lock.Unlock(ctx, &v3lockpb.UnlockRequest{Key: held.Key})
		s.add("A unlocks: %s", hdrOf(s, ur, err))
		rr, err := s.elect.Resign(ctx, &v3electionpb.ResignRequest{Leader: cA.Leader})
		s.add("A resigns: %s", hdrOf(s, rr, err))

		alarm("deactivate NOSPACE", pb.AlarmRequest_DEACTIVATE)
		lr, err = s.lock.Lock(ctx, &v3lockpb.LockRequest{Name: b(lock), Lease: L[1]})
		s.add("B locks after the alarm: %s", s.lockResp(lr, err))
		got[tg.Kind] = s.lines
		for _, l := range s.lines {
			t.Log(l)
		}
	})
	diffLX(t, got)
}
