package etcdproxy

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/meganode/meganode/internal/etcdref"
	"github.com/meganode/meganode/internal/storeproc"
)

// startProxy serves a proxy to target on a free loopback port, recording into path.
func startProxy(t *testing.T, target, path string) (endpoint string, p *Proxy, stop func()) {
	t.Helper()
	rec, err := CreateRecorder(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err = New(target, rec)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, l) }()
	var once bool
	stop = func() {
		if once {
			return
		}
		once = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		p.Close()
		if err := rec.Close(); err != nil {
			t.Errorf("recorder: %v", err)
		}
	}
	t.Cleanup(stop)
	return l.Addr().String(), p, stop
}

func client(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func waitFor(t *testing.T, what string, d time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// workload drives every service through the proxy the way kube-apiserver does, and a few
// things it does not (snapshot, delete-range, member list). It is deterministic apart from
// lease IDs and timing, so its recording replays into any fresh store.
func workload(t *testing.T, p *Proxy, cli *clientv3.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	// A watch on a prefix from now, and one with prev_kv, as the apiserver's watch cache does.
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	wch := cli.Watch(wctx, "/registry/pods/", clientv3.WithPrefix(), clientv3.WithPrevKV())
	wctx2, wcancel2 := context.WithCancel(ctx)
	wch2 := cli.Watch(wctx2, "/registry/configmaps/", clientv3.WithPrefix(), clientv3.WithRev(1))
	time.Sleep(200 * time.Millisecond) // both watches are created before the writes

	for i := range 5 {
		must(cli.Put(ctx, fmt.Sprintf("/registry/pods/ns/p%d", i), fmt.Sprintf("v%d", i)))
	}
	must(cli.Put(ctx, "/registry/configmaps/ns/a", "1"))
	// A create as the apiserver does it: compare create_revision == 0, put, else get.
	key := "/registry/configmaps/ns/b"
	txn := func() *clientv3.TxnResponse {
		r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, "x")).Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if !txn().Succeeded {
		t.Fatal("first create failed")
	}
	if txn().Succeeded {
		t.Fatal("second create succeeded")
	}
	// An update guarded by mod_revision.
	g, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	mr := g.Kvs[0].ModRevision
	if r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", mr)).
		Then(clientv3.OpPut(key, "y", clientv3.WithPrevKV())).Else(clientv3.OpGet(key)).Commit(); err != nil || !r.Succeeded {
		t.Fatalf("update: %v %v", r, err)
	}
	must(cli.Get(ctx, "/registry/pods/", clientv3.WithPrefix(), clientv3.WithLimit(2)))
	must(cli.Get(ctx, "/registry/pods/", clientv3.WithPrefix(), clientv3.WithCountOnly()))
	must(cli.Get(ctx, "/registry/pods/", clientv3.WithPrefix(), clientv3.WithRev(3)))
	must(cli.Delete(ctx, "/registry/pods/ns/p4", clientv3.WithPrevKV()))
	must(cli.Delete(ctx, "/registry/nothing"))

	// Leases: grant, attach, keep alive through the stream, time-to-live, list.
	lg, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	must(cli.Put(ctx, "/registry/events/ns/e1", "ev", clientv3.WithLease(lg.ID)))
	ka, err := cli.KeepAliveOnce(ctx, lg.ID)
	if err != nil || ka.TTL <= 0 {
		t.Fatalf("keepalive: %v %v", ka, err)
	}
	kctx, kcancel := context.WithCancel(ctx)
	kch, err := cli.KeepAlive(kctx, lg.ID)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-kch:
		if r == nil || r.ID != lg.ID {
			t.Fatalf("keepalive stream: %v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no keepalive response")
	}
	kcancel()
	must(cli.TimeToLive(ctx, lg.ID, clientv3.WithAttachedKeys()))
	must(cli.Leases(ctx))
	lg2, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	must(cli.Put(ctx, "/registry/events/ns/e2", "ev", clientv3.WithLease(lg2.ID)))
	must(cli.Revoke(ctx, lg2.ID))
	if _, err := cli.Put(ctx, "/registry/events/ns/e3", "ev", clientv3.WithLease(lg2.ID)); err == nil {
		t.Fatal("put with a revoked lease succeeded")
	}

	// Maintenance and cluster.
	must(cli.Status(ctx, cli.Endpoints()[0]))
	must(cli.MemberList(ctx))
	must(cli.AlarmList(ctx))
	sr, err := cli.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, sr)
	if err != nil || n == 0 {
		t.Fatalf("snapshot: %d bytes, %v", n, err)
	}
	sr.Close()
	must(cli.Put(ctx, "/registry/pods/ns/last", "z"))
	must(cli.Compact(ctx, 4))
	if _, err := cli.Get(ctx, "/registry/pods/", clientv3.WithPrefix(), clientv3.WithRev(2)); err == nil {
		t.Fatal("a read at a compacted revision succeeded")
	}

	// Both watches saw their events.
	want := map[string]int{"/registry/pods/": 7, "/registry/configmaps/": 3}
	got := map[string]int{}
	for _, c := range []struct {
		prefix string
		ch     clientv3.WatchChan
	}{{"/registry/pods/", wch}, {"/registry/configmaps/", wch2}} {
		deadline := time.After(10 * time.Second)
		for got[c.prefix] < want[c.prefix] {
			select {
			case r := <-c.ch:
				if err := r.Err(); err != nil {
					t.Fatal(err)
				}
				got[c.prefix] += len(r.Events)
			case <-deadline:
				t.Fatalf("watch %s: %d of %d events", c.prefix, got[c.prefix], want[c.prefix])
			}
		}
	}
	// Cancelling the client side ends the upstream streams.
	wcancel()
	wcancel2()
	cli.Close()
	waitFor(t, "all proxied streams to end", 10*time.Second, func() bool { return p.Active() == 0 })
}

func TestProxyRecordsEtcdTraffic(t *testing.T) {
	ref, err := etcdref.Start(etcdref.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	ep, p, stop := startProxy(t, ref.Endpoint, path)
	workload(t, p, client(t, ep))
	stop()

	lines, err := ReadRecording(path)
	if err != nil {
		t.Fatal(err)
	}
	checkRecording(t, lines)

	// The recording of etcd replays into a fresh etcd without a mismatch.
	ref2, err := etcdref.Start(etcdref.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ref2.Close()
	sum, err := Replay(context.Background(), lines, ReplayOptions{Endpoint: ref2.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	sum.Print(&b, 20)
	t.Logf("replay into a fresh etcd:\n%s", b.String())
	if len(sum.Mismatches) != 0 || sum.Replayed() < 30 || sum.WatchEvents < 10 {
		t.Fatalf("replay into etcd: %d mismatches, %d calls, %d events", len(sum.Mismatches), sum.Replayed(), sum.WatchEvents)
	}
}

// checkRecording checks every line is well formed and every service is in it.
func checkRecording(t *testing.T, lines []Line) {
	t.Helper()
	byMethod := map[string]map[string]int{}
	streams := map[uint64]string{}
	for i, l := range lines {
		if l.Time.IsZero() || l.Stream == 0 || l.Method == "" {
			t.Fatalf("line %d incomplete: %+v", i+1, l)
		}
		if m, ok := streams[l.Stream]; ok && m != l.Method {
			t.Fatalf("line %d: stream %d is %s and %s", i+1, l.Stream, m, l.Method)
		}
		streams[l.Stream] = l.Method
		if byMethod[l.Method] == nil {
			byMethod[l.Method] = map[string]int{}
		}
		byMethod[l.Method][l.Dir]++
		if l.Dir == DirReq && len(l.Msg) == 0 && l.Method != MethodStatus && l.Method != MethodMemberList && l.Method != MethodSnapshot && l.Method != MethodLeaseLeases {
			t.Fatalf("line %d: request without a message: %+v", i+1, l)
		}
	}
	for _, m := range []string{MethodRange, MethodPut, MethodDeleteRange, MethodTxn, MethodCompact, MethodWatch, MethodLeaseGrant,
		MethodLeaseRevoke, MethodLeaseKeepAlive, MethodLeaseTimeToLive, MethodLeaseLeases, MethodStatus, MethodSnapshot, MethodMemberList, MethodAlarm} {
		if byMethod[m][DirReq] == 0 || byMethod[m][DirResp] == 0 {
			t.Errorf("%s: %v in the recording, want requests and responses", m, byMethod[m])
		}
	}
	if byMethod[MethodWatch][DirEnd] == 0 || byMethod[MethodLeaseKeepAlive][DirEnd] == 0 || byMethod[MethodSnapshot][DirEnd] == 0 {
		t.Errorf("streams without an end line: %v %v %v", byMethod[MethodWatch], byMethod[MethodLeaseKeepAlive], byMethod[MethodSnapshot])
	}
	// A failed call is recorded with its status.
	var compacted bool
	for _, l := range lines {
		if l.Method == MethodRange && l.Error != nil && l.Error.Code == uint32(codes.OutOfRange) && strings.Contains(l.Error.Message, "compacted") {
			compacted = true
		}
	}
	if !compacted {
		t.Error("the Range on a compacted revision is not recorded with its OutOfRange status")
	}
	t.Logf("%d lines, %d streams, methods: %v", len(lines), len(streams), byMethod)
}

func TestReplayEtcdRecordingIntoMeganodeStore(t *testing.T) {
	bin, err := storeproc.FindBin()
	if err != nil {
		t.Fatalf("this test needs bin/meganode-store (`make store`): %v", err)
	}
	ref, err := etcdref.Start(etcdref.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	ep, p, stop := startProxy(t, ref.Endpoint, path)
	workload(t, p, client(t, ep))
	stop()
	lines, err := ReadRecording(path)
	if err != nil {
		t.Fatal(err)
	}

	st, err := storeproc.Start(storeproc.Options{Bin: bin})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { st.Stop(); os.RemoveAll(st.DataDir) }()
	sum, err := Replay(context.Background(), lines, ReplayOptions{Endpoint: st.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	sum.Print(&b, 20)
	t.Logf("replay of an etcd recording into meganode-store:\n%s", b.String())
	if len(sum.Mismatches) != 0 {
		t.Fatalf("%d mismatches", len(sum.Mismatches))
	}
	if sum.Replayed() < 30 || sum.WatchEvents < 10 || len(sum.RevisionGaps) != 0 {
		t.Fatalf("replayed %d calls, %d events, gaps %v", sum.Replayed(), sum.WatchEvents, sum.RevisionGaps)
	}
}

// KV/RangeStream is not in the v3.6 Go API: the proxy forwards it as bytes and records the
// chunks decoded.
func TestProxyForwardsRangeStreamToMeganodeStore(t *testing.T) {
	st, err := storeproc.Start(storeproc.Options{})
	if err != nil {
		t.Fatalf("this test needs bin/meganode-store (`make store`): %v", err)
	}
	defer func() { st.Stop(); os.RemoveAll(st.DataDir) }()
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	ep, _, stop := startProxy(t, st.Endpoint, path)
	cli := client(t, ep)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 3 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/rs/%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := grpc.NewClient("passthrough:///"+ep, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, MethodRangeStream, grpc.ForceCodecV2(codec{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(&pb.RangeRequest{Key: []byte("/rs/"), RangeEnd: []byte("/rs0")}); err != nil {
		t.Fatal(err)
	}
	_ = cs.CloseSend()
	var kvs int
	for {
		var f frame
		err := cs.RecvMsg(&f)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("RangeStream through the proxy: %v", status.Convert(err))
		}
		rr, err := RangeStreamChunk(f.b)
		if err != nil {
			t.Fatal(err)
		}
		kvs += len(rr.Kvs)
	}
	if kvs != 3 {
		t.Fatalf("RangeStream: %d keys, want 3", kvs)
	}
	stop()
	lines, err := ReadRecording(path)
	if err != nil {
		t.Fatal(err)
	}
	var req, resp int
	for _, l := range lines {
		if l.Method == MethodRangeStream {
			switch l.Dir {
			case DirReq:
				req++
				if !strings.Contains(string(l.Msg), `"key"`) {
					t.Errorf("RangeStream request not decoded: %s", l.Msg)
				}
			case DirResp:
				resp++
				if !strings.Contains(string(l.Msg), `"rangeResponse"`) {
					t.Errorf("RangeStream response not decoded: %s", l.Msg)
				}
			}
		}
	}
	if req != 1 || resp == 0 {
		t.Fatalf("RangeStream in the recording: %d requests, %d responses", req, resp)
	}
}

// A response that differs from the recorded one is reported, and only that one.
func TestReplayReportsAChangedResponse(t *testing.T) {
	ref, err := etcdref.Start(etcdref.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	ep, p, stop := startProxy(t, ref.Endpoint, path)
	workload(t, p, client(t, ep))
	stop()
	lines, err := ReadRecording(path)
	if err != nil {
		t.Fatal(err)
	}
	// Change the value the first successful Range returned.
	changed := false
	for i, l := range lines {
		if l.Method == MethodRange && l.Dir == DirResp && l.Error == nil && strings.Contains(string(l.Msg), `"value"`) {
			var rr pb.RangeResponse
			if err := unmarshal(l.Msg, &rr); err != nil {
				t.Fatal(err)
			}
			rr.Kvs[0].Value = []byte("tampered")
			lines[i].Msg = []byte(show(&rr, 1<<20))
			changed = true
			break
		}
	}
	if !changed {
		t.Fatal("no Range response with a value in the recording")
	}
	ref2, err := etcdref.Start(etcdref.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ref2.Close()
	sum, err := Replay(context.Background(), lines, ReplayOptions{Endpoint: ref2.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Mismatches) != 1 || sum.Mismatches[0].Method != MethodRange || !strings.Contains(sum.Mismatches[0].Recorded, base64Of("tampered")) {
		var b bytes.Buffer
		sum.Print(&b, 10)
		t.Fatalf("want exactly the tampered Range reported:\n%s", b.String())
	}
}

func base64Of(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
