package e2e

// --quota-backend-bytes and the alarms (NOSPACE, CORRUPT): each test runs on a store and on an etcd
// started with the same quota, checks etcd's answers on both, and compares the two transcripts of
// answers line by line (what legitimately differs — how many puts fit, member ids, sizes — is kept
// out of the transcripts and logged instead).

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	quota32  = 32 << 20
	fillSize = 768 << 10
	noSpace  = "etcdserver: mvcc: database space exceeded"
	corrupt  = "etcdserver: corrupt cluster"
)

// transcripts holds, per side, one line per answer.
type transcripts map[string][]string

func outcome(err error) string {
	if err == nil {
		return "OK"
	}
	st := status.Convert(err)
	return fmt.Sprintf("%v %q", st.Code(), st.Message())
}

func (tr transcripts) add(tg *target, what string, err error) {
	tr[tg.Kind] = append(tr[tg.Kind], what+": "+outcome(err))
}

func (tr transcripts) note(tg *target, line string) {
	tr[tg.Kind] = append(tr[tg.Kind], line)
}

// compare fails the test where the two sides answered differently (when both ran).
func (tr transcripts) compare(t *testing.T) {
	t.Helper()
	e, m := tr[kindEtcd], tr[kindMeganode]
	if e == nil || m == nil {
		return
	}
	if testing.Verbose() {
		t.Logf("answers (etcd's, then whether the store's differ below):\n  %s", strings.Join(e, "\n  "))
	}
	for i := 0; i < len(e) || i < len(m); i++ {
		var a, b string
		if i < len(e) {
			a = e[i]
		}
		if i < len(m) {
			b = m[i]
		}
		if a != b {
			t.Errorf("answer %d differs:\n  etcd:     %s\n  meganode: %s", i, a, b)
		}
	}
}

// fillMax bounds fill: 160 puts of 768 KiB, 120 MiB.
const fillMax = 160

// fill puts 768 KiB values under /fill/ until a put is refused (at most fillMax: 120 MiB); it returns
// how many were acknowledged and the refusal. etcd checks its quota against its file's size, which
// moves only when a batched commit lands (every 100 ms): right after a defragment, a fast machine
// put all of an 80-put bound (60 MiB) into etcd before one did.
func fill(t *testing.T, tg *target) (int, error) {
	ctx := ctxT(t)
	val := bytes.Repeat([]byte("x"), fillSize)
	for i := 0; i < fillMax; i++ {
		if _, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b(fmt.Sprintf("/fill/%03d", i)), Value: val}); err != nil {
			return i, err
		}
	}
	return fillMax, nil
}

func alarmsOf(ms []*pb.AlarmMember) string {
	var out []string
	for _, m := range ms {
		out = append(out, fmt.Sprintf("%d/%v", m.MemberID, m.Alarm))
	}
	sort.Strings(out) // etcd lists them in its map's order
	return "[" + strings.Join(out, " ") + "]"
}

// healthURL is where the side serves etcd's /health: etcd on its client URL, the store on its
// metrics URL.
func healthURL(tg *target) string {
	if tg.Proc != nil {
		return tg.Proc.MetricsURL + "/health"
	}
	return "http://" + tg.Endpoint + "/health"
}

func getHealth(t *testing.T, tg *target, query string) string {
	t.Helper()
	resp, err := http.Get(healthURL(tg) + query)
	must(t, "GET /health", err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
}

func putOpLease(k, v string, lease int64) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: b(k), Value: b(v), Lease: lease}}}
}

// TestQuotaNoSpace is the scenario: 768 KiB puts against a 32 MiB quota until NOSPACE;
// what is then refused and what still works; and compaction + defragment + disarm bringing writes back.
func TestQuotaNoSpace(t *testing.T) {
	tr := transcripts{}
	forEachDedicated(t, serverOpts{QuotaBytes: quota32}, func(t *testing.T, tg *target) {
		ctx := ctxT(t)
		st, err := tg.Maint.Status(ctx, &pb.StatusRequest{})
		must(t, "status", err)
		if st.DbSizeQuota != quota32 {
			t.Errorf("status dbSizeQuota %d, want %d", st.DbSizeQuota, quota32)
		}
		member := st.Header.MemberId
		lease, err := tg.Lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 600})
		must(t, "lease grant", err)
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: b("/keep"), Value: b("v"), Lease: lease.ID})
		must(t, "put with lease", err)
		wctx, wcancel := context.WithCancel(ctx)
		defer wcancel()
		wch := tg.Cli.Watch(wctx, "/fill/", clientv3.WithPrefix(), clientv3.WithFilterPut())

		acked, err := fill(t, tg)
		tr.add(tg, "put 768 KiB until refused", err)
		st, _ = tg.Maint.Status(ctx, &pb.StatusRequest{})
		t.Logf("%s: %d puts of 768 KiB (%.1f MiB) acknowledged under a 32 MiB quota, then %v; dbSize %.1f MiB, in use %.1f MiB",
			tg.Real, acked, float64(acked*fillSize)/(1<<20), outcome(err), float64(st.DbSize)/(1<<20), float64(st.DbSizeInUse)/(1<<20))
		wantErr(t, "put past the quota", err, codes.ResourceExhausted, noSpace)
		// etcd compares the quota with its file's size, which grows when its batched commits
		// land (every 100 ms), so it may acknowledge more than fits (here 37 to 49 of these).
		// The store's accounted size moves with each write: all puts fit in 32 MiB but the
		// one that would not (42 × 768 KiB plus the per-item overheads).
		if tg.Real == "meganode-store" && (int64(acked)*fillSize >= quota32 || int64(acked+2)*fillSize < quota32) {
			t.Errorf("%d puts of 768 KiB acknowledged under a 32 MiB quota", acked)
		}

		// The alarm is raised for this member, listed by the Alarm RPC, the client's AlarmList and Status.
		al, err := tg.Maint.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_GET})
		must(t, "alarm get", err)
		if want := fmt.Sprintf("[%d/NOSPACE]", member); alarmsOf(al.Alarms) != want {
			t.Errorf("alarms %s, want %s", alarmsOf(al.Alarms), want)
		}
		if al.Header == nil || al.Header.MemberId != member || al.Header.ClusterId == 0 {
			t.Errorf("alarm response header %v", al.Header)
		}
		cal, err := tg.Cli.AlarmList(ctx)
		must(t, "clientv3 alarm list", err)
		if len(cal.Alarms) != 1 || cal.Alarms[0].MemberID != member || cal.Alarms[0].Alarm != pb.AlarmType_NOSPACE {
			t.Errorf("clientv3 alarm list: %v", cal.Alarms)
		}
		st, err = tg.Maint.Status(ctx, &pb.StatusRequest{})
		must(t, "status under alarm", err)
		if want := fmt.Sprintf("memberID:%d alarm:NOSPACE ", member); len(st.Errors) != 1 || st.Errors[0] != want {
			t.Errorf("status errors %q, want [%q]", st.Errors, want)
		}
		tr.note(tg, "health under NOSPACE: "+getHealth(t, tg, ""))
		tr.note(tg, "health excluding NOSPACE: "+getHealth(t, tg, "?exclude=NOSPACE"))

		// Refused: Put, a Txn with a put on either branch or in a nested txn, LeaseGrant.
		keepIsThere := []*pb.Compare{{Key: b("/keep"), Target: pb.Compare_VERSION, Result: pb.Compare_GREATER, TargetUnion: &pb.Compare_Version{Version: 0}}}
		refused := []struct {
			what string
			call func() error
		}{
			{"put small", func() error { _, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b("/small"), Value: b("v")}); return err }},
			{"put 768 KiB", func() error {
				_, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b("/big"), Value: bytes.Repeat([]byte("y"), fillSize)})
				return err
			}},
			{"put over an existing key", func() error { _, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b("/keep"), Value: b("w")}); return err }},
			{"txn put", func() error {
				_, err := tg.KV.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{putOp("/t", "v")}})
				return err
			}},
			{"txn put on the branch not taken", func() error {
				_, err := tg.KV.Txn(ctx, &pb.TxnRequest{Compare: keepIsThere, Success: []*pb.RequestOp{getOp("/keep")}, Failure: []*pb.RequestOp{putOp("/t", "v")}})
				return err
			}},
			{"txn with a put in a nested txn", func() error {
				_, err := tg.KV.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{txnOp(&pb.TxnRequest{Success: []*pb.RequestOp{putOp("/t", "v")}})}})
				return err
			}},
			{"kube-apiserver's create txn", func() error {
				_, err := tg.KV.Txn(ctx, &pb.TxnRequest{
					Compare: []*pb.Compare{{Key: b("/registry/configmaps/default/x"), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: 0}}},
					Success: []*pb.RequestOp{putOp("/registry/configmaps/default/x", "{}")}})
				return err
			}},
			{"lease grant", func() error { _, err := tg.Lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 60}); return err }},
			// The quota is checked before the request's own checks: a put that cannot fit is
			// refused for space even when it has no key, a txn even when it has too many ops.
			{"put of 768 KiB without a key", func() error {
				_, err := tg.KV.Put(ctx, &pb.PutRequest{Value: bytes.Repeat([]byte("y"), fillSize)})
				return err
			}},
			{"txn of 129 ops, one putting 768 KiB", func() error {
				ops := []*pb.RequestOp{putOp("/big", strings.Repeat("y", fillSize))}
				for i := 0; i < 128; i++ {
					ops = append(ops, getOp("/keep"))
				}
				_, err := tg.KV.Txn(ctx, &pb.TxnRequest{Success: ops})
				return err
			}},
		}
		for _, r := range refused {
			err := r.call()
			tr.add(tg, r.what, err)
			wantErr(t, r.what+" under NOSPACE", err, codes.ResourceExhausted, noSpace)
		}
		_, err = tg.Cli.Put(ctx, "/small", "v")
		tr.note(tg, fmt.Sprintf("clientv3 put: %v", err))
		if err == nil || err.Error() != noSpace {
			t.Errorf("clientv3 put under NOSPACE: %v", err)
		}

		// Let through: reads, read-only and delete-only txns, deletes, watches, lease revoke,
		// compaction, defragment, hashes.
		rr, err := tg.KV.Range(ctx, &pb.RangeRequest{Key: b("/fill/"), RangeEnd: prefixEnd("/fill/"), CountOnly: true})
		tr.add(tg, "range", err)
		if err == nil && rr.Count != int64(acked) {
			t.Errorf("range count %d, want %d", rr.Count, acked)
		}
		_, err = tg.KV.Txn(ctx, &pb.TxnRequest{Compare: keepIsThere, Success: []*pb.RequestOp{getOp("/keep")}})
		tr.add(tg, "read-only txn", err)
		_, err = tg.KV.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{delOp("/nothing", ""), txnOp(&pb.TxnRequest{Success: []*pb.RequestOp{getOp("/keep")}})}})
		tr.add(tg, "txn without puts", err)
		dr, err := tg.KV.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: b("/fill/"), RangeEnd: prefixEnd("/fill/")})
		tr.add(tg, "delete range", err)
		if err == nil && dr.Deleted != int64(acked) {
			t.Errorf("deleted %d, want %d", dr.Deleted, acked)
		}
		deletes := 0
		timeout := time.After(10 * time.Second)
		for deletes < acked {
			select {
			case wr := <-wch:
				must(t, "watch", wr.Err())
				for _, ev := range wr.Events {
					if ev.Type == mvccpb.DELETE {
						deletes++
					}
				}
			case <-timeout:
				t.Fatalf("watch delivered %d of %d deletes", deletes, acked)
			}
		}
		tr.note(tg, "watch delivers the deletes")
		_, err = tg.Lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: lease.ID})
		tr.add(tg, "lease revoke", err)
		g, err := tg.KV.Range(ctx, &pb.RangeRequest{Key: b("/keep")})
		must(t, "range after revoke", err)
		if len(g.Kvs) != 0 {
			t.Errorf("the revoked lease's key is still there")
		}
		rev := curRev(t, tg)
		_, err = tg.KV.Compact(ctx, &pb.CompactionRequest{Revision: rev, Physical: true})
		tr.add(tg, "compact", err)
		_, err = tg.Maint.Defragment(ctx, &pb.DefragmentRequest{})
		tr.add(tg, "defragment", err)
		_, err = tg.Maint.HashKV(ctx, &pb.HashKVRequest{Revision: rev})
		tr.add(tg, "hashkv", err)

		// Space is free again (etcd's file shrinks at the defragment; the store freed it at the
		// compaction) but the alarm stays until it is disarmed: writes are still refused.
		st, err = tg.Maint.Status(ctx, &pb.StatusRequest{})
		must(t, "status after compaction", err)
		t.Logf("%s: after delete, compact, defragment: dbSize %.2f MiB, in use %.2f MiB", tg.Real, float64(st.DbSize)/(1<<20), float64(st.DbSizeInUse)/(1<<20))
		if st.DbSize >= quota32/2 {
			t.Errorf("dbSize %d after deleting everything, compacting and defragmenting", st.DbSize)
		}
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: b("/small"), Value: b("v")})
		tr.add(tg, "put with space free, alarm still raised", err)
		wantErr(t, "put before disarm", err, codes.ResourceExhausted, noSpace)

		// etcdctl alarm disarm: the client lists the alarms and deactivates each.
		dis, err := tg.Cli.AlarmDisarm(ctx, &clientv3.AlarmMember{})
		must(t, "alarm disarm", err)
		if want := fmt.Sprintf("[%d/NOSPACE]", member); alarmsOf(dis.Alarms) != want {
			t.Errorf("disarmed %s, want %s", alarmsOf(dis.Alarms), want)
		}
		cal, err = tg.Cli.AlarmList(ctx)
		must(t, "alarm list after disarm", err)
		st, _ = tg.Maint.Status(ctx, &pb.StatusRequest{})
		if len(cal.Alarms) != 0 || len(st.Errors) != 0 {
			t.Errorf("after disarm: alarms %v, status errors %q", cal.Alarms, st.Errors)
		}
		tr.note(tg, "health after disarm: "+getHealth(t, tg, ""))
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: b("/small"), Value: b("v")})
		tr.add(tg, "put after disarm", err)
		must(t, "put after compaction, defragment and disarm", err)
		_, err = tg.KV.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{putOp("/t", "v")}})
		tr.add(tg, "txn put after disarm", err)
		_, err = tg.Lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 60})
		tr.add(tg, "lease grant after disarm", err)

		// Filling again raises the alarm again.
		n, err := fill(t, tg)
		tr.add(tg, "fill again", err)
		wantErr(t, "put past the quota again", err, codes.ResourceExhausted, noSpace)
		if tg.Real == "meganode-store" && n != acked {
			t.Errorf("second fill acknowledged %d puts, first %d", n, acked)
		}
		al, err = tg.Maint.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_GET, Alarm: pb.AlarmType_NOSPACE})
		tr.add(tg, "alarm get NOSPACE", err)
		tr.note(tg, "alarms: "+strings.ReplaceAll(alarmsOf(al.GetAlarms()), fmt.Sprint(member), "<member>"))
	})
	tr.compare(t)
}

// TestAlarmAPI drives the Alarm RPC directly with the store far below its quota: etcd's
// ACTIVATE / GET / DEACTIVATE semantics (any member id, NONE ignored, a second activation
// answered, disarming someone else's alarm a no-op) and the appliers behind the alarms —
// NOSPACE refuses Put, LeaseGrant and a Txn with a put after the request's own checks and
// before any check against the state; CORRUPT refuses every write.
func TestAlarmAPI(t *testing.T) {
	tr := transcripts{}
	forEachDedicated(t, serverOpts{QuotaBytes: quota32}, func(t *testing.T, tg *target) {
		ctx := ctxT(t)
		alarm := func(what string, action pb.AlarmRequest_AlarmAction, member uint64, typ pb.AlarmType) []*pb.AlarmMember {
			t.Helper()
			r, err := tg.Maint.Alarm(ctx, &pb.AlarmRequest{Action: action, MemberID: member, Alarm: typ})
			tr.add(tg, what, err)
			if err != nil {
				return nil
			}
			tr.note(tg, "  -> "+alarmsOf(r.Alarms))
			return r.Alarms
		}
		lease, err := tg.Lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 600})
		must(t, "lease grant", err)
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: b("/a"), Value: b("v")})
		must(t, "put", err)

		alarm("get on a fresh server", pb.AlarmRequest_GET, 0, pb.AlarmType_NONE)
		alarm("activate NONE", pb.AlarmRequest_ACTIVATE, 5, pb.AlarmType_NONE)
		alarm("activate NOSPACE for member 0", pb.AlarmRequest_ACTIVATE, 0, pb.AlarmType_NOSPACE)
		alarm("activate NOSPACE for member 12345", pb.AlarmRequest_ACTIVATE, 12345, pb.AlarmType_NOSPACE)
		alarm("activate it again", pb.AlarmRequest_ACTIVATE, 12345, pb.AlarmType_NOSPACE)
		if got := alarm("get all", pb.AlarmRequest_GET, 0, pb.AlarmType_NONE); alarmsOf(got) != "[0/NOSPACE 12345/NOSPACE]" {
			t.Errorf("alarms %s", alarmsOf(got))
		}
		alarm("get NOSPACE", pb.AlarmRequest_GET, 0, pb.AlarmType_NOSPACE)
		alarm("get CORRUPT", pb.AlarmRequest_GET, 0, pb.AlarmType_CORRUPT)
		st, err := tg.Maint.Status(ctx, &pb.StatusRequest{})
		must(t, "status", err)
		errs := append([]string(nil), st.Errors...)
		sort.Strings(errs)
		tr.note(tg, fmt.Sprintf("status errors %q", errs))

		// Capped: the request's own checks first, then NOSPACE, before lease, key and TTL checks.
		capped := []struct {
			what string
			call func() error
		}{
			{"put", func() error { _, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b("/b"), Value: b("v")}); return err }},
			{"put without a key", func() error { _, err := tg.KV.Put(ctx, &pb.PutRequest{Value: b("v")}); return err }},
			{"put ignore_value with a value", func() error {
				_, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b("/a"), Value: b("v"), IgnoreValue: true})
				return err
			}},
			{"put ignore_value of a missing key", func() error {
				_, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b("/missing"), IgnoreValue: true})
				return err
			}},
			{"put with a missing lease", func() error {
				_, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b("/b"), Value: b("v"), Lease: 424242})
				return err
			}},
			{"txn put", func() error {
				_, err := tg.KV.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{putOp("/b", "v")}})
				return err
			}},
			{"txn putting one key twice", func() error {
				_, err := tg.KV.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{putOp("/b", "v"), putOp("/b", "w")}})
				return err
			}},
			{"txn put with a missing lease", func() error {
				_, err := tg.KV.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{putOpLease("/b", "v", 424242)}})
				return err
			}},
			{"txn delete only", func() error {
				_, err := tg.KV.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{delOp("/nothing", "")}})
				return err
			}},
			{"read-only txn", func() error {
				_, err := tg.KV.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{getOp("/a")}})
				return err
			}},
			{"lease grant", func() error { _, err := tg.Lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 60}); return err }},
			{"lease grant of an existing id", func() error {
				_, err := tg.Lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: lease.ID, TTL: 60})
				return err
			}},
			{"lease grant with a too large TTL", func() error {
				_, err := tg.Lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 9000000000000})
				return err
			}},
			{"range", func() error { _, err := tg.KV.Range(ctx, &pb.RangeRequest{Key: b("/a")}); return err }},
			{"delete", func() error { _, err := tg.KV.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: b("/nothing")}); return err }},
			{"compact", func() error {
				_, err := tg.KV.Compact(ctx, &pb.CompactionRequest{Revision: curRev(t, tg)})
				return err
			}},
		}
		for _, c := range capped {
			tr.add(tg, "NOSPACE: "+c.what, c.call())
		}

		alarm("deactivate another member's", pb.AlarmRequest_DEACTIVATE, 999, pb.AlarmType_NOSPACE)
		alarm("deactivate member 0's", pb.AlarmRequest_DEACTIVATE, 0, pb.AlarmType_NOSPACE)
		alarm("deactivate it again", pb.AlarmRequest_DEACTIVATE, 0, pb.AlarmType_NOSPACE)
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: b("/b"), Value: b("v")})
		tr.add(tg, "put with one NOSPACE left", err)
		alarm("deactivate member 12345's", pb.AlarmRequest_DEACTIVATE, 12345, pb.AlarmType_NOSPACE)
		alarm("get after disarming", pb.AlarmRequest_GET, 0, pb.AlarmType_NONE)
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: b("/b"), Value: b("v")})
		tr.add(tg, "put after disarming", err)
		must(t, "put after disarming", err)

		// CORRUPT refuses every write; reads go on.
		alarm("activate CORRUPT", pb.AlarmRequest_ACTIVATE, 1, pb.AlarmType_CORRUPT)
		lease2, err := tg.Lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 600})
		tr.add(tg, "CORRUPT: lease grant", err)
		corrupted := []struct {
			what string
			call func() error
		}{
			{"put", func() error { _, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b("/b"), Value: b("v")}); return err }},
			{"put without a key", func() error { _, err := tg.KV.Put(ctx, &pb.PutRequest{Value: b("v")}); return err }},
			{"delete", func() error { _, err := tg.KV.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: b("/nothing")}); return err }},
			{"delete without a key", func() error { _, err := tg.KV.DeleteRange(ctx, &pb.DeleteRangeRequest{}); return err }},
			{"txn delete only", func() error {
				_, err := tg.KV.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{delOp("/nothing", "")}})
				return err
			}},
			{"read-only txn", func() error {
				_, err := tg.KV.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{getOp("/a")}})
				return err
			}},
			{"range", func() error { _, err := tg.KV.Range(ctx, &pb.RangeRequest{Key: b("/a")}); return err }},
			{"compact", func() error {
				_, err := tg.KV.Compact(ctx, &pb.CompactionRequest{Revision: curRev(t, tg)})
				return err
			}},
			{"lease revoke", func() error { _, err := tg.Lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: lease.ID}); return err }},
		}
		for _, c := range corrupted {
			tr.add(tg, "CORRUPT: "+c.what, c.call())
		}
		wantErr(t, "put under CORRUPT", corrupted[0].call(), codes.DataLoss, corrupt)
		_ = lease2
		alarm("deactivate CORRUPT", pb.AlarmRequest_DEACTIVATE, 1, pb.AlarmType_CORRUPT)
		_, err = tg.Lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: lease.ID})
		tr.add(tg, "lease revoke after CORRUPT is disarmed", err)
		must(t, "lease revoke after CORRUPT is disarmed", err)
	})
	tr.compare(t)
}

// TestQuotaMetricsAndDefault: the store's own side of the quota — the metrics etcd exports for it,
// and the default quota taken from the machine when no --quota-backend-bytes is given.
func TestQuotaMetricsAndDefault(t *testing.T) {
	if useEtcdForMeganode() || os.Getenv("MEGANODE_E2E_ONLY") == kindEtcd {
		t.Skip("meganode-store only")
	}
	t.Run("metrics", func(t *testing.T) {
		tg, err := startServer(kindMeganode, serverOpts{QuotaBytes: quota32})
		must(t, "start", err)
		defer tg.Close()
		ctx := ctxT(t)
		_, ferr := fill(t, tg)
		wantErr(t, "fill", ferr, codes.ResourceExhausted, noSpace)
		st, err := tg.Maint.Status(ctx, &pb.StatusRequest{})
		must(t, "status", err)
		m := scrape(t, tg.Proc.MetricsURL)
		want := map[string]string{
			"etcd_server_quota_backend_bytes":         fmt.Sprint(quota32),
			"etcd_mvcc_db_total_size_in_bytes":        fmt.Sprint(st.DbSize),
			"etcd_mvcc_db_total_size_in_use_in_bytes": fmt.Sprint(st.DbSizeInUse),
			fmt.Sprintf(`etcd_debugging_server_alarms{alarm_type="NOSPACE",server_id="%x"}`, st.Header.MemberId): "1",
		}
		for k, v := range want {
			if m[k] != v {
				t.Errorf("metric %s = %q, want %q", k, m[k], v)
			}
		}
		var parts int64
		for _, p := range []string{"kv", "leases", "watch_log", "watchers"} {
			var n int64
			fmt.Sscan(m[fmt.Sprintf(`meganode_accounted_bytes{part="%s"}`, p)], &n)
			parts += n
		}
		if parts != st.DbSize {
			t.Errorf("accounted parts sum to %d, dbSize %d", parts, st.DbSize)
		}
	})
	// Alarms live in memory (etcd persists them): a restart comes back without NOSPACE but with
	// the accounted size of what it recovered, so the first write that does not fit raises it again.
	t.Run("restart", func(t *testing.T) {
		tg, err := startServer(kindMeganode, serverOpts{QuotaBytes: quota32})
		must(t, "start", err)
		defer tg.Close()
		acked, ferr := fill(t, tg)
		wantErr(t, "fill", ferr, codes.ResourceExhausted, noSpace)
		before, err := tg.Maint.Status(ctxT(t), &pb.StatusRequest{})
		must(t, "status", err)
		tg.Cli.Close()
		must(t, "stop", tg.Proc.Stop())
		must(t, "restart", tg.Proc.Restart())
		tg.Endpoint = tg.Proc.Endpoint
		reconnect(t, tg)
		ctx := ctxT(t)
		after, err := tg.Maint.Status(ctx, &pb.StatusRequest{})
		must(t, "status after restart", err)
		al, err := tg.Cli.AlarmList(ctx)
		must(t, "alarm list after restart", err)
		t.Logf("%d puts filled the store; accounted %d bytes before the restart, %d after (the watch log starts empty)", acked, before.DbSize, after.DbSize)
		if len(al.Alarms) != 0 || len(after.Errors) != 0 {
			t.Errorf("alarms after restart: %v %q", al.Alarms, after.Errors)
		}
		if after.DbSize > before.DbSize || after.DbSize < before.DbSize-int64(acked+10)*1024 {
			t.Errorf("accounted size %d after restart, %d before", after.DbSize, before.DbSize)
		}
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: b("/big"), Value: bytes.Repeat([]byte("y"), fillSize)})
		wantErr(t, "a put that does not fit after restart", err, codes.ResourceExhausted, noSpace)
		al, err = tg.Cli.AlarmList(ctx)
		must(t, "alarm list", err)
		if len(al.Alarms) != 1 || al.Alarms[0].Alarm != pb.AlarmType_NOSPACE {
			t.Errorf("alarms after the refused put: %v", al.Alarms)
		}
	})
	t.Run("default-from-machine", func(t *testing.T) {
		tg, err := startServer(kindMeganode, serverOpts{})
		must(t, "start", err)
		defer tg.Close()
		st, err := tg.Maint.Status(ctxT(t), &pb.StatusRequest{})
		must(t, "status", err)
		if st.DbSizeQuota <= 0 {
			t.Fatalf("default quota %d", st.DbSizeQuota)
		}
		log := tg.Proc.Tail()
		line := ""
		for _, l := range strings.Split(log, "\n") {
			if strings.Contains(l, "quota ") && strings.Contains(l, "% of") {
				line = l
			}
		}
		if line == "" {
			t.Fatalf("no quota line at start:\n%s", log)
		}
		t.Logf("default quota %d bytes: %s", st.DbSizeQuota, line)
		if ram := memTotal(t); st.DbSizeQuota > ram/2 {
			t.Errorf("default quota %d is more than half the RAM (%d)", st.DbSizeQuota, ram)
		}
	})
	t.Run("disabled", func(t *testing.T) {
		tg, err := startServer(kindMeganode, serverOpts{QuotaBytes: -1})
		must(t, "start", err)
		defer tg.Close()
		st, err := tg.Maint.Status(ctxT(t), &pb.StatusRequest{})
		must(t, "status", err)
		if st.DbSizeQuota != -1 {
			t.Errorf("dbSizeQuota %d with the quota disabled (etcd reports the flag's value)", st.DbSizeQuota)
		}
	})
}

func scrape(t *testing.T, url string) map[string]string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	must(t, "GET /metrics", err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	out := map[string]string{}
	for _, l := range strings.Split(string(body), "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if i := strings.LastIndexByte(l, ' '); i > 0 {
			out[l[:i]] = l[i+1:]
		}
	}
	return out
}

func memTotal(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	must(t, "meminfo", err)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "MemTotal:") {
			var kb int64
			fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(strings.TrimPrefix(l, "MemTotal:")), " kB"), &kb)
			return kb * 1024
		}
	}
	t.Fatal("no MemTotal")
	return 0
}
