package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestReplicatedGroupAlarms: an alarm raised or disarmed through any member goes
// through the group's log (etcd applies Alarm requests on every member): every
// member lists it and refuses writes under NOSPACE; a member restarted empty
// gets it back from a snapshot; disarming it through that member frees writes
// on all.
func TestReplicatedGroupAlarms(t *testing.T) {
	g, clis := startGroup(t, "--snapshot-count", "100")
	l := groupLeader(t, g, clis, -1)
	f, x := (l+1)%3, (l+2)%3
	ctx := ctxT(t)
	// The log behind a restarted member is cut: it will need a snapshot.
	for i := 0; i < 300; i++ {
		_, err := clis[l].Put(ctx, fmt.Sprintf("k/%03d", i), "v")
		must(t, "put", err)
	}
	must(t, "kill", g.Members[x].Kill())
	const member = 0xabc
	resp, err := pb.NewMaintenanceClient(clis[f].ActiveConnection()).Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: member, Alarm: pb.AlarmType_NOSPACE})
	must(t, "activate NOSPACE through a follower", err)
	if len(resp.Alarms) != 1 || resp.Alarms[0].MemberID != member || resp.Alarms[0].Alarm != pb.AlarmType_NOSPACE {
		t.Fatalf("ACTIVATE answered %v, want the alarm", resp.Alarms)
	}
	must(t, "restart", g.Members[x].Restart())
	want := fmt.Sprintf("memberID:%d alarm:NOSPACE ", member)
	waitStatusErrors(t, g.Endpoints(), clis, []string{want})
	waitTookSnapshot(t, g.Members[x], "the restarted member")
	for i, c := range clis {
		if _, err := c.Put(ctx, "k/more", "v"); err == nil || !strings.Contains(err.Error(), "database space exceeded") {
			t.Errorf("a put through m%d under NOSPACE: %v, want etcd's 'database space exceeded'", i, err)
		}
	}
	list, err := clis[x].AlarmList(ctx)
	must(t, "alarm list through the restarted member", err)
	if len(list.Alarms) != 1 {
		t.Errorf("alarm list: %v, want the one NOSPACE", list.Alarms)
	}
	_, err = clis[x].AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: member, Alarm: pb.AlarmType_NOSPACE})
	must(t, "disarm through the restarted member", err)
	waitStatusErrors(t, g.Endpoints(), clis, nil)
	for i, c := range clis {
		_, err := c.Put(ctx, fmt.Sprintf("k/after%d", i), "v")
		must(t, fmt.Sprintf("a put through m%d once disarmed", i), err)
	}
}

// TestReplicatedGroupQuotaAlarm: the leader's quota check raises NOSPACE for
// itself through the log (etcd's member proposes its alarm), so every member
// lists it and refuses puts as etcd's do.
func TestReplicatedGroupQuotaAlarm(t *testing.T) {
	g, clis := startGroup(t, "--quota-backend-bytes", fmt.Sprint(4<<20))
	l := groupLeader(t, g, clis, -1)
	ctx := ctxT(t)
	big := strings.Repeat("x", 256<<10)
	var err error
	for i := 0; i < 40 && err == nil; i++ {
		_, err = clis[(l+1)%3].Put(ctx, fmt.Sprintf("big/%02d", i), big)
	}
	if err == nil || !strings.Contains(err.Error(), "database space exceeded") {
		t.Fatalf("40 puts of 256 KiB under a 4 MiB quota: %v, want etcd's 'database space exceeded'", err)
	}
	st, err := clis[l].Status(ctx, g.Members[l].Endpoint)
	must(t, "leader status", err)
	waitStatusErrors(t, g.Endpoints(), clis, []string{fmt.Sprintf("memberID:%d alarm:NOSPACE ", st.Header.MemberId)})
}

// waitStatusErrors waits until each member's own Status lists exactly want
// among its errors.
func waitStatusErrors(t *testing.T, endpoints []string, clis []*clientv3.Client, want []string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var bad []string
		for i, ep := range endpoints {
			st, err := clis[i].Status(ctxT(t), ep)
			switch {
			case err != nil:
				bad = append(bad, fmt.Sprintf("m%d: %v", i, err))
			case fmt.Sprint(st.Errors) != fmt.Sprint(want) && !(len(st.Errors) == 0 && len(want) == 0):
				bad = append(bad, fmt.Sprintf("m%d: %q", i, st.Errors))
			}
		}
		if len(bad) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("members' alarms, want %q: %v", want, bad)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
