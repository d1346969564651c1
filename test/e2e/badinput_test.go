package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"

	"github.com/meganode/meganode/internal/storeproc"
)

const tooLarge = "etcdserver: request is too large"

// grpcTooLarge is grpc-go's message for a request above the server's receive limit, which etcd
// sets to --max-request-bytes + 512 KiB.
func grpcTooLarge(size int, maxRequestBytes int) string {
	return fmt.Sprintf("grpc: received message larger than max (%d vs. %d)", size, maxRequestBytes+512*1024)
}

func TestBadInput(t *testing.T) {
	forEach(t, func(t *testing.T, tg *target, p string) {
		ctx := ctxT(t)
		alive := func(what string) {
			t.Helper()
			_, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b(p + "alive"), Value: b("ok")})
			if err != nil {
				t.Fatalf("server not serving after %s: %v", what, err)
			}
		}
		// oversized (default --max-request-bytes is 1.5 MiB)
		req := &pb.PutRequest{Key: b(p + "big"), Value: make([]byte, 1600*1024)}
		_, err := tg.KV.Put(ctx, req)
		wantErr(t, "1.6 MiB put", err, codes.InvalidArgument, tooLarge)
		alive("1.6 MiB put")
		req = &pb.PutRequest{Key: b(p + "big"), Value: make([]byte, 2100*1024)}
		_, err = tg.KV.Put(ctx, req)
		wantErr(t, "2.1 MiB put", err, codes.ResourceExhausted, grpcTooLarge(req.Size(), 1536*1024))
		alive("2.1 MiB put")
		var ops []*pb.RequestOp
		for i := 0; i < 4; i++ {
			ops = append(ops, putOp(fmt.Sprintf("%sbig%d", p, i), strings.Repeat("x", 400*1024)))
		}
		_, err = tg.KV.Txn(ctx, &pb.TxnRequest{Success: ops})
		wantErr(t, "1.6 MiB txn", err, codes.InvalidArgument, tooLarge)
		alive("1.6 MiB txn")
		ok, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b(p + "justfits"), Value: make([]byte, 1400*1024)})
		must(t, "1.4 MiB put", err)
		_ = ok

		// empty keys
		const noKey = "etcdserver: key is not provided"
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Value: b("v")})
		wantErr(t, "put empty key", err, codes.InvalidArgument, noKey)
		_, err = tg.KV.Range(ctx, &pb.RangeRequest{})
		wantErr(t, "range empty key", err, codes.InvalidArgument, noKey)
		_, err = tg.KV.DeleteRange(ctx, &pb.DeleteRangeRequest{RangeEnd: b("z")})
		wantErr(t, "delete empty key", err, codes.InvalidArgument, noKey)
		_, err = tg.KV.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{getOp("")}})
		wantErr(t, "txn range empty key", err, codes.InvalidArgument, noKey)
		alive("empty keys")

		// range_end < key: empty, not an error
		g, err := tg.KV.Range(ctx, &pb.RangeRequest{Key: b(p + "z"), RangeEnd: b(p + "a")})
		must(t, "range_end < key", err)
		if len(g.Kvs) != 0 || g.Count != 0 {
			t.Errorf("range_end < key: %v", g)
		}
		// unknown compare target / result: etcd evaluates the compare as true
		tr, err := tg.KV.Txn(ctx, &pb.TxnRequest{Compare: []*pb.Compare{{Key: b(p + "alive"), Target: 9}}, Success: []*pb.RequestOp{getOp(p + "alive")}})
		must(t, "unknown compare target", err)
		if !tr.Succeeded {
			t.Errorf("unknown compare target: succeeded=false (etcd: true)")
		}
		tr, err = tg.KV.Txn(ctx, &pb.TxnRequest{Compare: []*pb.Compare{{Key: b(p + "alive"), Result: 9}}})
		must(t, "unknown compare result", err)
		if !tr.Succeeded {
			t.Errorf("unknown compare result: succeeded=false (etcd: true)")
		}
		// an op without a request
		_, err = tg.KV.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{}}})
		wantErr(t, "txn op without request", err, codes.InvalidArgument, "etcdserver: key not found")

		// invalid lease ids
		const noLease = "etcdserver: requested lease not found"
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: b(p + "l"), Value: b("v"), Lease: 0x7bad})
		wantErr(t, "put unknown lease", err, codes.NotFound, noLease)
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: b(p + "l"), Value: b("v"), Lease: -3})
		wantErr(t, "put negative lease", err, codes.NotFound, noLease)
		_, err = tg.Lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: 0x7bad})
		wantErr(t, "revoke unknown lease", err, codes.NotFound, noLease)
		ka, err := tg.Lease.LeaseKeepAlive(ctx)
		must(t, "keepalive stream", err)
		must(t, "keepalive send", ka.Send(&pb.LeaseKeepAliveRequest{ID: 0x7bad}))
		kr, err := ka.Recv()
		must(t, "keepalive recv", err)
		if kr.ID != 0x7bad || kr.TTL != 0 {
			t.Errorf("keepalive of unknown lease: %v (etcd: the id with TTL 0)", kr)
		}
		ka.CloseSend()
		alive("invalid leases")

		// duplicate puts
		_, err = tg.KV.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{putOp(p+"d", "1"), putOp(p+"d", "2")}})
		wantErr(t, "txn duplicate puts", err, codes.InvalidArgument, "etcdserver: duplicate key given in txn request")
		alive("duplicate puts")
	})
}

func TestMaxRequestBytesFlag(t *testing.T) {
	const max = 64 * 1024
	forEachDedicated(t, serverOpts{MaxRequestBytes: max}, func(t *testing.T, tg *target) {
		ctx := ctxT(t)
		_, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b("k"), Value: make([]byte, 60*1024)})
		must(t, "60 KiB put", err)
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: b("k"), Value: make([]byte, 70*1024)})
		wantErr(t, "70 KiB put", err, codes.InvalidArgument, tooLarge)
		req := &pb.PutRequest{Key: b("k"), Value: make([]byte, 700*1024)}
		_, err = tg.KV.Put(ctx, req)
		wantErr(t, "700 KiB put", err, codes.ResourceExhausted, grpcTooLarge(req.Size(), max))
		_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: b("k"), Value: b("small")})
		must(t, "small put after oversized ones", err)
	})
}

func TestUnknownFlagIsAnError(t *testing.T) {
	if useEtcdForMeganode() || os.Getenv("MEGANODE_E2E_ONLY") == kindEtcd {
		t.Skip("needs the store binary")
	}
	bin, err := storeproc.FindBin()
	if err != nil {
		t.Fatalf("%v", err)
	}
	port, _ := storeproc.FreePort()
	u := fmt.Sprintf("http://127.0.0.1:%d", port)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--name", "x", "--data-dir", t.TempDir(), "--listen-client-urls", u, "--advertise-client-urls", u, "--no-such-flag")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("meganode-store --no-such-flag was still running after 15s (it should exit with an error):\n%s", out.String())
	}
	if err == nil {
		t.Errorf("meganode-store --no-such-flag exited 0:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "no-such-flag") {
		t.Errorf("the error does not name the flag:\n%s", out.String())
	}
}
