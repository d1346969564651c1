package e2e

import (
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// TestMemberStateRestart: what etcd keeps of its member in its backend survives a restart on both
// sides — the peer URLs MemberUpdate set (MemberList after the restart shows them, not the
// flag's) and an enabled downgrade (Status' downgrade_info); a cancelled one stays cancelled.
func TestMemberStateRestart(t *testing.T) {
	tr := transcripts{}
	forEachDedicated(t, serverOpts{}, func(t *testing.T, tg *target) {
		state := func(what string) {
			ctx := ctxT(t)
			st, err := tg.Maint.Status(ctx, &pb.StatusRequest{})
			must(t, "status", err)
			ml, err := tg.Cluster.MemberList(ctx, &pb.MemberListRequest{})
			must(t, "member list", err)
			for _, m := range ml.Members {
				if m.ID == st.Header.MemberId {
					tr.note(tg, fmt.Sprintf("%s: peer URLs %v, downgrade %v", what, m.PeerURLs, st.DowngradeInfo))
				}
			}
		}
		ctx := ctxT(t)
		st, err := tg.Maint.Status(ctx, &pb.StatusRequest{})
		must(t, "status", err)
		_, err = tg.Cluster.MemberUpdate(ctx, &pb.MemberUpdateRequest{ID: st.Header.MemberId, PeerURLs: []string{"http://127.0.0.1:1", "http://127.0.0.2:1"}})
		tr.add(tg, "member update", err)
		_, err = tg.Maint.Downgrade(ctx, &pb.DowngradeRequest{Action: pb.DowngradeRequest_ENABLE, Version: "3.5"})
		tr.add(tg, "downgrade enable 3.5", err)
		state("before the restart")
		restart(t, tg, serverOpts{})
		state("after the restart")
		_, err = tg.Maint.Downgrade(ctxT(t), &pb.DowngradeRequest{Action: pb.DowngradeRequest_CANCEL})
		tr.add(tg, "downgrade cancel", err)
		restart(t, tg, serverOpts{})
		state("after the cancel and a second restart")
	})
	tr.compare(t)
}
