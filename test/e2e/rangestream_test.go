package e2e

// KV/RangeStream (etcd v3.7). The reference here is etcd v3.6 (go.mod), which has no RangeStream:
// its side checks that etcd answers Unimplemented, and the store's streams are compared with the
// store's own Range at the same revision — the property etcd v3.7 defines RangeStream by ("the
// result of proto.Merge() on all responses is the Range response").

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/meganode/meganode/internal/etcdproxy"
)

const methodRangeStream = "/etcdserverpb.KV/RangeStream"

// rawFrame is a message received undecoded (with rawCodec, exactness_test.go): the v3.6 Go API
// has no RangeStreamResponse.
type rawFrame struct{ b []byte }

func (f *rawFrame) Unmarshal(data []byte) error {
	f.b = append([]byte(nil), data...)
	return nil
}

// rangeStream is an open RangeStream call.
type rangeStream struct{ cs grpc.ClientStream }

func openRangeStream(ctx context.Context, conn grpc.ClientConnInterface, req *pb.RangeRequest) (*rangeStream, error) {
	cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, methodRangeStream,
		grpc.ForceCodec(rawCodec{}), grpc.MaxCallRecvMsgSize(64<<20))
	if err != nil {
		return nil, err
	}
	if err := cs.SendMsg(req); err != nil {
		return nil, err
	}
	if err := cs.CloseSend(); err != nil {
		return nil, err
	}
	return &rangeStream{cs}, nil
}

// next is the next chunk, io.EOF at the end.
func (s *rangeStream) next() (*pb.RangeResponse, error) {
	var f rawFrame
	if err := s.cs.RecvMsg(&f); err != nil {
		return nil, err
	}
	return etcdproxy.RangeStreamChunk(f.b)
}

// all reads the rest of the stream.
func (s *rangeStream) all() ([]*pb.RangeResponse, error) {
	var out []*pb.RangeResponse
	for {
		c, err := s.next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, c)
	}
}

// merged is what proto.Merge of the chunks gives, after checking etcd's chunk layout: kvs
// disjoint and in order, header, more and count on the last chunk only.
func merged(t *testing.T, chunks []*pb.RangeResponse) *pb.RangeResponse {
	t.Helper()
	if len(chunks) == 0 {
		t.Fatalf("RangeStream: no chunk")
	}
	out := &pb.RangeResponse{}
	for i, c := range chunks {
		last := i == len(chunks)-1
		if !last && (c.Header != nil || c.More || c.Count != 0) {
			t.Fatalf("chunk %d of %d carries header/more/count: %v %v %d", i, len(chunks), c.Header, c.More, c.Count)
		}
		out.Kvs = append(out.Kvs, c.Kvs...)
	}
	l := chunks[len(chunks)-1]
	if l.Header == nil {
		t.Fatalf("last chunk has no header")
	}
	out.Header, out.More, out.Count = l.Header, l.More, l.Count
	return out
}

// smallWindowConn is a connection whose HTTP/2 windows stay at 64 KiB (setting them turns off
// gRPC-Go's window growth): a client that stops reading lets the server run at most that far ahead.
func smallWindowConn(t *testing.T, endpoint string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	must(t, "dial", err)
	t.Cleanup(func() { conn.Close() })
	return conn
}

// storeSide is the store alone; etcd v3.6's side checks only that RangeStream is Unimplemented there.
func storeSide(t *testing.T, fn func(t *testing.T, tg *target)) {
	forEach(t, func(t *testing.T, tg *target, _ string) {
		if tg.Real == "etcd" {
			s, err := openRangeStream(ctxT(t), tg.Cli.ActiveConnection(), &pb.RangeRequest{Key: b("a")})
			if err == nil {
				_, err = s.next()
			}
			if status.Code(err) != codes.Unimplemented {
				t.Fatalf("etcd v3.6 RangeStream: want Unimplemented, got %v", err)
			}
			if tg.Kind == kindMeganode {
				t.Skip("MEGANODE_E2E_TARGET=etcd: etcd v3.6 has no RangeStream to compare with Range")
			}
			return
		}
		fn(t, tg)
	})
}

// putMany writes n keys p<i> with values of val(i), 100 puts per Txn.
func putMany(t *testing.T, tg *target, p string, n int, val func(i int) string) {
	t.Helper()
	ctx := ctxT(t)
	var ops []*pb.RequestOp
	flush := func() {
		if len(ops) > 0 {
			_, err := tg.KV.Txn(ctx, &pb.TxnRequest{Success: ops})
			must(t, "load txn", err)
			ops = nil
		}
	}
	for i := 0; i < n; i++ {
		ops = append(ops, putOp(fmt.Sprintf("%s%06d", p, i), val(i)))
		if len(ops) == 100 || len(val(i))*len(ops) > 1<<20 {
			flush()
		}
	}
	flush()
}

func TestRangeStreamEqualsRange(t *testing.T) {
	storeSide(t, func(t *testing.T, tg *target) {
		p := "/e2e/rangestream/eq/"
		big, small := p+"big/", p+"small/"
		putMany(t, tg, big, 50000, func(i int) string { return strings.Repeat(strconv.Itoa(i%10), 60+i%80) })
		putMany(t, tg, small, 5, func(i int) string { return "v" + strconv.Itoa(i) })
		// An older revision with different contents: the stream must read at the revision asked.
		old := curRev(t, tg)
		putMany(t, tg, big, 300, func(i int) string { return "changed" })
		_, err := tg.KV.DeleteRange(ctxT(t), &pb.DeleteRangeRequest{Key: b(big + "000400"), RangeEnd: b(big + "000500")})
		must(t, "delete", err)
		conn := tg.Cli.ActiveConnection()
		reqs := map[string]*pb.RangeRequest{}
		for _, pfx := range []string{big, small} {
			for _, l := range []int64{0, 1, 3, 7, 500, 49999, 50000, 60000} {
				for _, rev := range []int64{0, old} {
					reqs[fmt.Sprintf("%s limit=%d rev=%d", pfx, l, rev)] = &pb.RangeRequest{Key: b(pfx), RangeEnd: prefixEnd(pfx), Limit: l, Revision: rev}
					reqs[fmt.Sprintf("%s limit=%d rev=%d keys_only", pfx, l, rev)] = &pb.RangeRequest{Key: b(pfx), RangeEnd: prefixEnd(pfx), Limit: l, Revision: rev, KeysOnly: true}
					reqs[fmt.Sprintf("%s limit=%d rev=%d count_only", pfx, l, rev)] = &pb.RangeRequest{Key: b(pfx), RangeEnd: prefixEnd(pfx), Limit: l, Revision: rev, CountOnly: true}
				}
			}
		}
		reqs["from the middle, serializable, sort by key ascending"] = &pb.RangeRequest{Key: b(big + "012345"), RangeEnd: prefixEnd(big), Serializable: true, SortOrder: pb.RangeRequest_ASCEND}
		reqs["open end"] = &pb.RangeRequest{Key: b(small), RangeEnd: []byte{0}}
		reqs["single key"] = &pb.RangeRequest{Key: b(small + "000003")}
		reqs["missing key"] = &pb.RangeRequest{Key: b(small + "x")}
		reqs["empty interval"] = &pb.RangeRequest{Key: b(small + "2"), RangeEnd: b(small + "1")}
		multi := 0
		for name, req := range reqs {
			s, err := openRangeStream(ctxT(t), conn, req)
			must(t, name, err)
			chunks, err := s.all()
			must(t, name, err)
			got := merged(t, chunks)
			want, err := tg.KV.Range(ctxT(t), req, grpc.MaxCallRecvMsgSize(64<<20))
			must(t, name, err)
			if got.Header.Revision != want.Header.Revision {
				t.Errorf("%s: header revision %d, Range's %d", name, got.Header.Revision, want.Header.Revision)
			}
			if got.Count != want.Count || got.More != want.More || len(got.Kvs) != len(want.Kvs) {
				t.Fatalf("%s: count %d more %v %d keys; Range: count %d more %v %d keys", name, got.Count, got.More, len(got.Kvs), want.Count, want.More, len(want.Kvs))
			}
			for i := range got.Kvs {
				if !reflect.DeepEqual(got.Kvs[i], want.Kvs[i]) {
					t.Fatalf("%s: kv %d: %v, Range's %v", name, i, got.Kvs[i], want.Kvs[i])
				}
			}
			if req.CountOnly && len(chunks) != 1 {
				t.Errorf("%s: %d chunks, want 1", name, len(chunks))
			}
			if len(chunks) > 1 {
				multi++
			}
			for i, c := range chunks {
				if n := c.Size(); n > 4<<20 {
					t.Errorf("%s: chunk %d is %d bytes", name, i, n)
				}
			}
		}
		if multi < 10 {
			t.Fatalf("only %d of %d streams came in more than one chunk", multi, len(reqs))
		}
		// etcd v3.7 refuses what cannot stream without reading everything first.
		for _, req := range []*pb.RangeRequest{
			{Key: b(small), RangeEnd: prefixEnd(small), SortOrder: pb.RangeRequest_DESCEND},
			{Key: b(small), RangeEnd: prefixEnd(small), SortOrder: pb.RangeRequest_ASCEND, SortTarget: pb.RangeRequest_MOD},
		} {
			s, err := openRangeStream(ctxT(t), conn, req)
			if err == nil {
				_, err = s.next()
			}
			wantErr(t, "sorted RangeStream", err, codes.Unimplemented, "RangeStream does not support custom sort orders")
		}
		s, err := openRangeStream(ctxT(t), conn, &pb.RangeRequest{Key: b(small), RangeEnd: prefixEnd(small), MinModRevision: 2})
		if err == nil {
			_, err = s.next()
		}
		wantErr(t, "filtered RangeStream", err, codes.Unimplemented, "RangeStream does not support revision filters")
	})
}

// A stream reads every chunk at its revision, as etcd v3.7 does (each chunk is a Range at the
// pinned revision): a compaction at that revision leaves it whole; one past it fails the next
// chunk with etcd's compacted error.
func TestRangeStreamAcrossCompaction(t *testing.T) {
	storeSide(t, func(t *testing.T, tg *target) {
		p := "/e2e/rangestream/compact/"
		value := strings.Repeat("v", 1000)
		putMany(t, tg, p, 4000, func(int) string { return value })
		ctx := ctxT(t)
		rev := curRev(t, tg)
		all := &pb.RangeRequest{Key: b(p), RangeEnd: prefixEnd(p)}
		want, err := tg.KV.Range(ctx, all, grpc.MaxCallRecvMsgSize(64<<20))
		must(t, "range", err)
		conn := smallWindowConn(t, tg.Proc.Endpoint)
		change := func() {
			_, err := tg.KV.Put(ctx, &pb.PutRequest{Key: b(p + "000000"), Value: b("new")})
			must(t, "put", err)
			_, err = tg.KV.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: b(p + "003999")})
			must(t, "delete", err)
			_, err = tg.KV.Put(ctx, &pb.PutRequest{Key: b(p + "zz"), Value: b("new")})
			must(t, "put", err)
		}

		// Compacted at its revision: the stream goes on and equals Range at that revision.
		s, err := openRangeStream(ctx, conn, all)
		must(t, "open", err)
		first, err := s.next()
		must(t, "first chunk", err)
		change()
		_, err = tg.KV.Compact(ctx, &pb.CompactionRequest{Revision: rev})
		must(t, "compact at the stream's revision", err)
		rest, err := s.all()
		must(t, "stream after compaction at its revision", err)
		got := merged(t, append([]*pb.RangeResponse{first}, rest...))
		if got.Count != want.Count || len(got.Kvs) != len(want.Kvs) || !reflect.DeepEqual(got.Kvs[0], want.Kvs[0]) || !reflect.DeepEqual(got.Kvs[3999], want.Kvs[3999]) {
			t.Fatalf("stream across Compact(%d): count %d, %d keys; want %d, %d", rev, got.Count, len(got.Kvs), want.Count, len(want.Kvs))
		}
		if got.Header.Revision != rev {
			t.Errorf("header revision %d, want the stream's start %d", got.Header.Revision, rev)
		}

		// Compacted past its revision: the next chunk read fails with etcd's error.
		s, err = openRangeStream(ctx, conn, &pb.RangeRequest{Key: b(p), RangeEnd: prefixEnd(p), Revision: rev})
		must(t, "open", err)
		first, err = s.next()
		must(t, "first chunk", err)
		_, err = tg.KV.Compact(ctx, &pb.CompactionRequest{Revision: rev + 2})
		must(t, "compact past the stream's revision", err)
		rest, err = s.all()
		n := len(first.Kvs)
		for _, c := range rest {
			n += len(c.Kvs)
		}
		if n >= 4000 {
			t.Fatalf("the stream ended whole (%d keys) although its revision was compacted after the first chunk", n)
		}
		wantErr(t, "stream after compaction past its revision", err, codes.OutOfRange, errCompacted)

		// A stream that starts at a compacted revision fails before any chunk.
		s, err = openRangeStream(ctx, conn, &pb.RangeRequest{Key: b(p), RangeEnd: prefixEnd(p), Revision: rev})
		if err == nil {
			_, err = s.next()
		}
		wantErr(t, "stream at a compacted revision", err, codes.OutOfRange, errCompacted)
	})
}

// vmRSS is a process's resident set in bytes, from /proc/<pid>/status.
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	must(t, "open status", err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			must(t, "parse VmRSS", err)
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// A reader that stops after the first chunk of a 200 MB prefix does not make the store hold the
// result: the store's RSS grows by far less than the result while the reader is stalled.
func TestRangeStreamStalledReaderMemory(t *testing.T) {
	if useEtcdForMeganode() {
		t.Skip("MEGANODE_E2E_TARGET=etcd: etcd v3.6 has no RangeStream")
	}
	tg, err := startServer(kindMeganode, serverOpts{})
	must(t, "start store", err)
	defer tg.Close()
	const keys, size = 2000, 100 << 10 // 200 MiB of values
	p := "/registry/configmaps/stall/"
	value := strings.Repeat("x", size)
	putMany(t, tg, p, keys, func(int) string { return value })
	// The watch log's copies of the load are the same values; nothing else runs.
	time.Sleep(300 * time.Millisecond)
	before := vmRSS(t, tg.Proc.Pid())

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := openRangeStream(ctx, smallWindowConn(t, tg.Proc.Endpoint), &pb.RangeRequest{Key: b(p), RangeEnd: prefixEnd(p)})
	must(t, "open", err)
	first, err := s.next()
	must(t, "first chunk", err)
	var peak int64
	for range 20 { // 2 s stalled
		time.Sleep(100 * time.Millisecond)
		peak = max(peak, vmRSS(t, tg.Proc.Pid()))
	}
	growth := peak - before
	const bound = 40 << 20
	t.Logf("store RSS %d MiB before, peak %d MiB while the reader is stalled (+%d MiB; result %d MiB)",
		before>>20, peak>>20, growth>>20, keys*size>>20)
	if growth > bound {
		t.Fatalf("store RSS grew %d MiB while a RangeStream reader stalled; want <= %d MiB (the result is %d MiB)",
			growth>>20, bound>>20, keys*size>>20)
	}
	// The reader resumes and gets everything.
	rest, err := s.all()
	must(t, "rest of the stream", err)
	got := merged(t, append([]*pb.RangeResponse{first}, rest...))
	if len(got.Kvs) != keys || got.Count != keys || len(got.Kvs[keys-1].Value) != size {
		t.Fatalf("stream after the stall: %d keys, count %d", len(got.Kvs), got.Count)
	}
}

// With auth on, a stream is permitted or refused as the Range of the same request and token
// (Range is compared with etcd in auth_test.go).
func TestRangeStreamAuth(t *testing.T) {
	if useEtcdForMeganode() {
		t.Skip("MEGANODE_E2E_TARGET=etcd: etcd v3.6 has no RangeStream")
	}
	tg, err := startServer(kindMeganode, serverOpts{})
	must(t, "start store", err)
	defer tg.Close()
	s := newAuthSide(t, tg, transcripts{})
	root, alice := s.enableWithUsers()
	for i := range 30 {
		s.put(root, "root put", &pb.PutRequest{Key: b(fmt.Sprintf("/a/%02d", i)), Value: b("v")})
	}
	conn := tg.Cli.ActiveConnection()
	refused, streamed := 0, int64(0)
	for _, c := range []struct {
		who, token, key, end string
	}{
		{"alice", alice, "/a/", "/a0"},
		{"alice", alice, "/b/", "/b0"},
		{"root", root, "/", "\x00"},
		{"nobody", "", "/a/", "/a0"},
		{"a bad token", "bad", "/a/", "/a0"},
	} {
		req := &pb.RangeRequest{Key: b(c.key), RangeEnd: b(c.end)}
		want, werr := tg.KV.Range(s.as(c.token), req)
		st, err := openRangeStream(s.as(c.token), conn, req)
		var chunks []*pb.RangeResponse
		if err == nil {
			chunks, err = st.all()
		}
		what := fmt.Sprintf("%s streams [%q, %q)", c.who, c.key, c.end)
		if werr != nil {
			wantErr(t, what, err, status.Code(werr), status.Convert(werr).Message())
			refused++
			continue
		}
		must(t, what, err)
		got := merged(t, chunks)
		if got.Count != want.Count || len(got.Kvs) != len(want.Kvs) {
			t.Errorf("%s: count %d, %d keys; Range: %d, %d", what, got.Count, len(got.Kvs), want.Count, len(want.Kvs))
		}
		streamed += got.Count
	}
	if refused != 3 || streamed < 60 {
		t.Fatalf("%d requests refused (want 3: alice outside her roles, no token, a bad token), %d keys streamed (want >= 60)", refused, streamed)
	}
}
