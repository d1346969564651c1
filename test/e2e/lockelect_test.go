package e2e

// etcd's Lock and Election services (v3lockpb.Lock, v3electionpb.Election): the same sequences
// run against embedded etcd and the store binary, each side writes a transcript of what it was
// answered (revisions relative to the start of the sequence, lease IDs and the test prefix
// replaced by names), and the two transcripts must be equal line for line. Waiting calls run
// in goroutines; the sequence waits for their keys to be queued before going on, so both sides
// see the same order of events.

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/grpc/status"
)

// lx is one side's transcript of a lock/election sequence.
type lx struct {
	t        *testing.T
	tg       *target
	p        string
	base     int64
	cid, mid uint64
	lock     v3lockpb.LockClient
	elect    v3electionpb.ElectionClient

	mu     sync.Mutex
	leases map[int64]string
	lines  []string
}

func newLX(t *testing.T, tg *target, p string) *lx {
	// A clean prefix: the shared servers keep what an earlier run (-count) left.
	_, err := tg.KV.DeleteRange(ctxT(t), &pb.DeleteRangeRequest{Key: b(p), RangeEnd: prefixEnd(p)})
	must(t, "clear the test prefix", err)
	r, err := tg.KV.Range(ctxT(t), &pb.RangeRequest{Key: []byte("/__rev_probe")})
	must(t, "range for revision", err)
	conn := tg.Cli.ActiveConnection()
	return &lx{
		t: t, tg: tg, p: p, base: r.Header.Revision, cid: r.Header.ClusterId, mid: r.Header.MemberId,
		lock: v3lockpb.NewLockClient(conn), elect: v3electionpb.NewElectionClient(conn),
		leases: map[int64]string{0: "none"},
	}
}

func (s *lx) add(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines = append(s.lines, fmt.Sprintf(format, args...))
}

func (s *lx) rev(r int64) string { return fmt.Sprintf("@%+d", r-s.base) }

// leaseName names a lease ID by the order it first shows up in, unless named by grant.
func (s *lx) leaseName(id int64) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.leases[id]; ok {
		return n
	}
	n := fmt.Sprintf("lease#%d", len(s.leases))
	s.leases[id] = n
	return n
}

// grant grants a lease per name with the given TTL.
func (s *lx) grant(ttl int64, names ...string) []int64 {
	var ids []int64
	for _, n := range names {
		r, err := s.tg.Lease.LeaseGrant(ctxT(s.t), &pb.LeaseGrantRequest{TTL: ttl})
		must(s.t, "grant "+n, err)
		s.mu.Lock()
		s.leases[r.ID] = n
		s.mu.Unlock()
		ids = append(ids, r.ID)
	}
	return ids
}

// key shows a key with the test prefix as <p> and a trailing lease ID (in hex) by its name.
func (s *lx) key(k []byte) string {
	str := strings.Replace(string(k), s.p, "<p>", 1)
	if i := strings.LastIndexByte(str, '/'); i >= 0 {
		if id, err := strconv.ParseInt(str[i+1:], 16, 64); err == nil {
			return str[:i+1] + "<" + s.leaseName(id) + ">"
		}
	}
	return str
}

func (s *lx) hdr(h *pb.ResponseHeader) string {
	if h == nil {
		return "header=nil"
	}
	out := fmt.Sprintf("rev%s term=%d", s.rev(h.Revision), h.RaftTerm)
	if h.ClusterId != s.cid || h.MemberId != s.mid {
		out += fmt.Sprintf(" cluster/member %x/%x (KV says %x/%x)", h.ClusterId, h.MemberId, s.cid, s.mid)
	}
	return out
}

func (s *lx) kv(kv *mvccpb.KeyValue) string {
	if kv == nil {
		return "kv=nil"
	}
	return fmt.Sprintf("%s=%q create%s mod%s ver=%d lease=%s", s.key(kv.Key), kv.Value, s.rev(kv.CreateRevision),
		s.rev(kv.ModRevision), kv.Version, s.leaseName(kv.Lease))
}

func (s *lx) leader(l *v3electionpb.LeaderKey) string {
	if l == nil {
		return "leader=nil"
	}
	return fmt.Sprintf("leader{name=%s key=%s rev%s lease=%s}", s.key(l.Name), s.key(l.Key), s.rev(l.Rev), s.leaseName(l.Lease))
}

func (s *lx) err(err error) string {
	st := status.Convert(err)
	return fmt.Sprintf("error %v %q", st.Code(), st.Message())
}

func (s *lx) lockResp(r *v3lockpb.LockResponse, err error) string {
	if err != nil {
		return s.err(err)
	}
	return "key=" + s.key(r.Key) + " " + s.hdr(r.Header)
}

func (s *lx) campaignResp(r *v3electionpb.CampaignResponse, err error) string {
	if err != nil {
		return s.err(err)
	}
	return s.leader(r.Leader) + " " + s.hdr(r.Header)
}

func (s *lx) leaderResp(r *v3electionpb.LeaderResponse, err error) string {
	if err != nil {
		return s.err(err)
	}
	return s.kv(r.Kv) + " " + s.hdr(r.Header)
}

func hdrOf[T interface{ GetHeader() *pb.ResponseHeader }](s *lx, r T, err error) string {
	if err != nil {
		return s.err(err)
	}
	return s.hdr(r.GetHeader())
}

// queue lists the keys under a prefix in create order.
func (s *lx) queue(pfx string) string {
	r, err := s.tg.KV.Range(ctxT(s.t), &pb.RangeRequest{Key: b(pfx), RangeEnd: prefixEnd(pfx),
		SortOrder: pb.RangeRequest_ASCEND, SortTarget: pb.RangeRequest_CREATE})
	if err != nil {
		return s.err(err)
	}
	var out []string
	for _, kv := range r.Kvs {
		out = append(out, s.kv(kv))
	}
	return "[" + strings.Join(out, ", ") + "]"
}

// waitQueue waits until n keys are under pfx.
func (s *lx) waitQueue(pfx string, n int) {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := s.tg.KV.Range(ctxT(s.t), &pb.RangeRequest{Key: b(pfx), RangeEnd: prefixEnd(pfx), CountOnly: true})
		if err == nil && r.Count == int64(n) {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: %d keys under %s after 10s, want %d (%v)", s.tg.Kind, r.GetCount(), pfx, n, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// call is an RPC running in a goroutine.
type call[T any] struct {
	done chan struct{}
	resp T
	err  error
}

func goCall[T any](f func() (T, error)) *call[T] {
	c := &call[T]{done: make(chan struct{})}
	go func() {
		c.resp, c.err = f()
		close(c.done)
	}()
	return c
}

// waiting says whether the call is still unanswered after d.
func (c *call[T]) waiting(d time.Duration) bool {
	select {
	case <-c.done:
		return false
	case <-time.After(d):
		return true
	}
}

func (c *call[T]) wait(t *testing.T, what string) (T, error) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("%s: no answer in 15s", what)
	}
	return c.resp, c.err
}

// sameOnBoth runs a sequence on each side and compares the transcripts.
func sameOnBoth(t *testing.T, seq func(s *lx)) {
	got := map[string][]string{}
	forEach(t, func(t *testing.T, tg *target, p string) {
		s := newLX(t, tg, p)
		seq(s)
		got[tg.Kind] = s.lines
		for _, l := range s.lines {
			t.Log(l)
		}
	})
	diffLX(t, got)
}

// diffLX fails the test if the two sides' transcripts differ, showing the lines that do.
func diffLX(t *testing.T, got map[string][]string) {
	t.Helper()
	e, m := got[kindEtcd], got[kindMeganode]
	if e == nil || m == nil || reflect.DeepEqual(e, m) {
		return
	}
	var out strings.Builder
	for i := 0; i < len(e) || i < len(m); i++ {
		var a, b string
		if i < len(e) {
			a = e[i]
		}
		if i < len(m) {
			b = m[i]
		}
		if a == b {
			fmt.Fprintf(&out, "   %s\n", a)
		} else {
			fmt.Fprintf(&out, "-  etcd:     %s\n+  meganode: %s\n", a, b)
		}
	}
	t.Errorf("transcripts differ:\n%s", out.String())
}

// TestLockContention: three holders of one lock queue in revision order; each waits for the key
// queued before its own and gets the lock on Unlock or when the holder's lease is revoked.
// Locking again with the held lease answers at once. clientv3's concurrency.Mutex and the Lock
// service queue on the same keys.
func TestLockContention(t *testing.T) {
	sameOnBoth(t, func(s *lx) {
		ctx := ctxT(s.t)
		name := s.p + "lock"
		L := s.grant(60, "A", "B", "C")
		r1, err := s.lock.Lock(ctx, &v3lockpb.LockRequest{Name: b(name), Lease: L[0]})
		s.add("A locks: %s", s.lockResp(r1, err))
		if err != nil {
			return
		}
		cB := goCall(func() (*v3lockpb.LockResponse, error) {
			return s.lock.Lock(ctx, &v3lockpb.LockRequest{Name: b(name), Lease: L[1]})
		})
		s.waitQueue(name+"/", 2)
		cC := goCall(func() (*v3lockpb.LockResponse, error) {
			return s.lock.Lock(ctx, &v3lockpb.LockRequest{Name: b(name), Lease: L[2]})
		})
		s.waitQueue(name+"/", 3)
		s.add("B waits: %v, C waits: %v", cB.waiting(300*time.Millisecond), cC.waiting(0))
		s.add("queue: %s", s.queue(name+"/"))
		r, err := s.lock.Lock(ctx, &v3lockpb.LockRequest{Name: b(name), Lease: L[0]})
		s.add("A locks again: %s", s.lockResp(r, err))
		u, err := s.lock.Unlock(ctx, &v3lockpb.UnlockRequest{Key: r1.Key})
		s.add("A unlocks: %s", hdrOf(s, u, err))
		r2, err := cB.wait(s.t, "B's lock")
		s.add("B locks: %s", s.lockResp(r2, err))
		s.add("C waits: %v", cC.waiting(300*time.Millisecond))
		rv, err := s.tg.Lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: L[1]})
		s.add("B's lease revoked: %s", hdrOf(s, rv, err))
		r3, err := cC.wait(s.t, "C's lock")
		s.add("C locks: %s", s.lockResp(r3, err))
		if err != nil {
			return
		}
		u, err = s.lock.Unlock(ctx, &v3lockpb.UnlockRequest{Key: r3.Key})
		s.add("C unlocks: %s", hdrOf(s, u, err))
		u, err = s.lock.Unlock(ctx, &v3lockpb.UnlockRequest{Key: r3.Key})
		s.add("C unlocks again: %s", hdrOf(s, u, err))
		u, err = s.lock.Unlock(ctx, &v3lockpb.UnlockRequest{})
		s.add("unlock without a key: %s", hdrOf(s, u, err))
		s.add("queue: %s", s.queue(name+"/"))

		// A client-side mutex holds the lock: the service waits for it, and the other way round.
		sess, err := concurrency.NewSession(s.tg.Cli, concurrency.WithTTL(60))
		must(s.t, "session", err)
		defer sess.Close()
		s.mu.Lock()
		s.leases[int64(sess.Lease())] = "M"
		s.mu.Unlock()
		m := concurrency.NewMutex(sess, name)
		must(s.t, "mutex lock", m.Lock(ctx))
		s.add("mutex locks: key=%s %s", s.key(b(m.Key())), s.hdr(m.Header()))
		cA := goCall(func() (*v3lockpb.LockResponse, error) {
			return s.lock.Lock(ctx, &v3lockpb.LockRequest{Name: b(name), Lease: L[0]})
		})
		s.waitQueue(name+"/", 2)
		s.add("A waits for the mutex: %v", cA.waiting(300*time.Millisecond))
		must(s.t, "mutex unlock", m.Unlock(ctx))
		r4, err := cA.wait(s.t, "A's lock after the mutex")
		s.add("A locks: %s", s.lockResp(r4, err))
		if err != nil {
			return
		}
		m2 := concurrency.NewMutex(sess, name)
		cM := goCall(func() (*concurrency.Mutex, error) { return m2, m2.Lock(ctx) })
		s.waitQueue(name+"/", 2)
		s.add("the mutex waits for A: %v", cM.waiting(300*time.Millisecond))
		u, err = s.lock.Unlock(ctx, &v3lockpb.UnlockRequest{Key: r4.Key})
		s.add("A unlocks: %s", hdrOf(s, u, err))
		_, err = cM.wait(s.t, "mutex lock after A")
		if err != nil {
			s.add("mutex locks: %s", s.err(err))
			return
		}
		s.add("mutex locks: key=%s %s", s.key(b(m2.Key())), s.hdr(m2.Header()))
		must(s.t, "mutex unlock", m2.Unlock(ctx))
		s.add("queue: %s", s.queue(name+"/"))
	})
}

// TestLockLeases: a revoked, unknown or negative lease; lease 0 (a new 60 s lease); the session
// of a waiter expiring while it waits (mutex: session is expired); the holder's lease running
// out; a waiter giving up (its key is removed).
func TestLockLeases(t *testing.T) {
	sameOnBoth(t, func(s *lx) {
		ctx := ctxT(s.t)
		name := s.p + "lock"
		L := s.grant(60, "A", "B", "revoked")
		_, err := s.tg.Lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: L[2]})
		must(s.t, "revoke", err)
		for _, c := range []struct {
			what  string
			lease int64
		}{{"a revoked lease", L[2]}, {"an unknown lease", 0x7e57_0000_0001}, {"a negative lease", -1}} {
			r, err := s.lock.Lock(ctx, &v3lockpb.LockRequest{Name: b(name), Lease: c.lease})
			s.add("lock with %s: %s", c.what, s.lockResp(r, err))
		}
		s.add("queue: %s", s.queue(name+"/"))

		// Lease 0: the server grants a lease of 60 s, attaches the key and does not keep it alive.
		r, err := s.lock.Lock(ctx, &v3lockpb.LockRequest{Name: b(name)})
		s.add("lock without a lease: %s", s.lockResp(r, err))
		if err == nil {
			id, perr := strconv.ParseInt(string(r.Key[strings.LastIndexByte(string(r.Key), '/')+1:]), 16, 64)
			must(s.t, "lease of the lock key", perr)
			ttl, err := s.tg.Lease.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: id, Keys: true})
			must(s.t, "time to live", err)
			var keys []string
			for _, k := range ttl.Keys {
				keys = append(keys, s.key(k))
			}
			s.add("its lease: %s granted=%d ttl>=55:%v keys=%v", s.leaseName(id), ttl.GrantedTTL, ttl.TTL >= 55, keys)
			u, err := s.lock.Unlock(ctx, &v3lockpb.UnlockRequest{Key: r.Key})
			s.add("unlock: %s", hdrOf(s, u, err))
			_, err = s.tg.Lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: id})
			must(s.t, "revoke the granted lease", err)
		}

		// A waiter whose lease is revoked keeps waiting, then finds its key gone.
		r1, err := s.lock.Lock(ctx, &v3lockpb.LockRequest{Name: b(name), Lease: L[0]})
		s.add("A locks: %s", s.lockResp(r1, err))
		if err != nil {
			return
		}
		cB := goCall(func() (*v3lockpb.LockResponse, error) {
			return s.lock.Lock(ctx, &v3lockpb.LockRequest{Name: b(name), Lease: L[1]})
		})
		s.waitQueue(name+"/", 2)
		rv, err := s.tg.Lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: L[1]})
		s.add("B's lease revoked: %s", hdrOf(s, rv, err))
		s.add("B waits: %v, queue: %s", cB.waiting(300*time.Millisecond), s.queue(name+"/"))
		u, err := s.lock.Unlock(ctx, &v3lockpb.UnlockRequest{Key: r1.Key})
		s.add("A unlocks: %s", hdrOf(s, u, err))
		r2, err := cB.wait(s.t, "B's lock")
		s.add("B locks: %s", s.lockResp(r2, err))

		// The holder's lease expires: the next waiter gets the lock at the expiry's revision.
		S := s.grant(3, "short")
		C := s.grant(60, "C")
		r3, err := s.lock.Lock(ctx, &v3lockpb.LockRequest{Name: b(name), Lease: S[0]})
		s.add("lock with a 3 s lease: %s", s.lockResp(r3, err))
		cC := goCall(func() (*v3lockpb.LockResponse, error) {
			return s.lock.Lock(ctx, &v3lockpb.LockRequest{Name: b(name), Lease: C[0]})
		})
		s.waitQueue(name+"/", 2)
		r4, err := cC.wait(s.t, "C's lock after the expiry")
		s.add("C locks after the expiry: %s", s.lockResp(r4, err))
		if err != nil {
			return
		}

		// A waiter that gives up (deadline) leaves no key behind.
		dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err = s.lock.Lock(dctx, &v3lockpb.LockRequest{Name: b(name), Lease: L[0]})
		cancel()
		s.add("A gives up waiting: %v", status.Code(err))
		s.waitQueue(name+"/", 1)
		s.add("queue: %s at rev%s", s.queue(name+"/"), s.rev(curRev(s.t, s.tg)))
		u, err = s.lock.Unlock(ctx, &v3lockpb.UnlockRequest{Key: r4.Key})
		s.add("C unlocks: %s", hdrOf(s, u, err))
	})
}

// observer collects an Observe stream.
type observer struct {
	ch   chan *v3electionpb.LeaderResponse
	errc chan error
	stop context.CancelFunc
}

func (s *lx) observe(name string) *observer {
	ctx, cancel := context.WithCancel(context.Background())
	st, err := s.elect.Observe(ctx, &v3electionpb.LeaderRequest{Name: b(name)})
	must(s.t, "observe", err)
	o := &observer{ch: make(chan *v3electionpb.LeaderResponse, 64), errc: make(chan error, 1), stop: cancel}
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				o.errc <- err
				return
			}
			o.ch <- r
		}
	}()
	return o
}

// next records the observer's next message.
func (s *lx) next(o *observer, what string) {
	select {
	case r := <-o.ch:
		s.add("observer (%s): %s", what, s.kv(r.Kv)+" "+s.hdr(r.Header))
	case err := <-o.errc:
		s.add("observer (%s): %s", what, s.err(err))
	case <-time.After(10 * time.Second):
		s.add("observer (%s): nothing in 10s", what)
	}
}

// quiet records whether the observer sent something it should not have.
func (s *lx) quiet(o *observer) {
	select {
	case r := <-o.ch:
		s.add("observer (unexpected): %s", s.kv(r.Kv)+" "+s.hdr(r.Header))
	case <-time.After(200 * time.Millisecond):
	}
}

// TestElection: campaign, proclaim, leader, resign; the next campaigner wins when the leader
// resigns or its lease is revoked; an observer sees every leader and proclamation in order,
// including the first campaign when it started without a leader. Campaigning again with the
// leader's lease updates the value. The service and clientv3's concurrency.Election interoperate.
func TestElection(t *testing.T) {
	sameOnBoth(t, func(s *lx) {
		ctx := ctxT(s.t)
		name := s.p + "elect"
		L := s.grant(60, "A", "B", "C")
		lr, err := s.elect.Leader(ctx, &v3electionpb.LeaderRequest{Name: b(name)})
		s.add("leader before any campaign: %s", s.leaderResp(lr, err))
		o := s.observe(name)
		time.Sleep(200 * time.Millisecond) // let the observer reach its watch

		cA, err := s.elect.Campaign(ctx, &v3electionpb.CampaignRequest{Name: b(name), Lease: L[0], Value: b("a1")})
		s.add("A campaigns: %s", s.campaignResp(cA, err))
		if err != nil {
			return
		}
		s.next(o, "first leader")
		pr, err := s.elect.Proclaim(ctx, &v3electionpb.ProclaimRequest{Leader: cA.Leader, Value: b("a2")})
		s.add("A proclaims: %s", hdrOf(s, pr, err))
		s.next(o, "proclamation")
		pr, err = s.elect.Proclaim(ctx, &v3electionpb.ProclaimRequest{Leader: cA.Leader, Value: b("a2")})
		s.add("A proclaims the same value: %s", hdrOf(s, pr, err))
		s.next(o, "proclamation")

		waitB := goCall(func() (*v3electionpb.CampaignResponse, error) {
			return s.elect.Campaign(ctx, &v3electionpb.CampaignRequest{Name: b(name), Lease: L[1], Value: b("b1")})
		})
		s.waitQueue(name+"/", 2)
		s.add("B waits: %v", waitB.waiting(300*time.Millisecond))
		s.quiet(o)
		lr, err = s.elect.Leader(ctx, &v3electionpb.LeaderRequest{Name: b(name)})
		s.add("leader: %s", s.leaderResp(lr, err))
		s.add("queue: %s", s.queue(name+"/"))

		rs, err := s.elect.Resign(ctx, &v3electionpb.ResignRequest{Leader: cA.Leader})
		s.add("A resigns: %s", hdrOf(s, rs, err))
		cB, err := waitB.wait(s.t, "B's campaign")
		s.add("B campaigns: %s", s.campaignResp(cB, err))
		if err != nil {
			return
		}
		s.next(o, "second leader")
		rs, err = s.elect.Resign(ctx, &v3electionpb.ResignRequest{Leader: cA.Leader})
		s.add("A resigns again: %s", hdrOf(s, rs, err))
		pr, err = s.elect.Proclaim(ctx, &v3electionpb.ProclaimRequest{Leader: cA.Leader, Value: b("a3")})
		s.add("A proclaims after resigning: %s", hdrOf(s, pr, err))

		waitC := goCall(func() (*v3electionpb.CampaignResponse, error) {
			return s.elect.Campaign(ctx, &v3electionpb.CampaignRequest{Name: b(name), Lease: L[2], Value: b("c1")})
		})
		s.waitQueue(name+"/", 2)
		rv, err := s.tg.Lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: L[1]})
		s.add("B's lease revoked: %s", hdrOf(s, rv, err))
		cC, err := waitC.wait(s.t, "C's campaign")
		s.add("C campaigns: %s", s.campaignResp(cC, err))
		if err != nil {
			return
		}
		s.next(o, "third leader")

		again, err := s.elect.Campaign(ctx, &v3electionpb.CampaignRequest{Name: b(name), Lease: L[2], Value: b("c2")})
		s.add("C campaigns again with another value: %s", s.campaignResp(again, err))
		s.next(o, "value of the second campaign")
		again, err = s.elect.Campaign(ctx, &v3electionpb.CampaignRequest{Name: b(name), Lease: L[2], Value: b("c2")})
		s.add("C campaigns again with the same value: %s", s.campaignResp(again, err))
		s.quiet(o)

		// A waiting campaigner that gives up resigns: its key goes away.
		dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err = s.elect.Campaign(dctx, &v3electionpb.CampaignRequest{Name: b(name), Lease: L[0], Value: b("a4")})
		cancel()
		s.add("A gives up campaigning: %v", status.Code(err))
		s.waitQueue(name+"/", 1)
		s.add("queue: %s at rev%s", s.queue(name+"/"), s.rev(curRev(s.t, s.tg)))
		s.quiet(o)

		// The leader resigns with nobody waiting: the observer waits for the next put.
		rs, err = s.elect.Resign(ctx, &v3electionpb.ResignRequest{Leader: cC.Leader})
		s.add("C resigns: %s", hdrOf(s, rs, err))
		lr, err = s.elect.Leader(ctx, &v3electionpb.LeaderRequest{Name: b(name)})
		s.add("leader: %s", s.leaderResp(lr, err))
		s.quiet(o)

		// clientv3's concurrency.Election on the same election.
		sess, err := concurrency.NewSession(s.tg.Cli, concurrency.WithTTL(60))
		must(s.t, "session", err)
		defer sess.Close()
		s.mu.Lock()
		s.leases[int64(sess.Lease())] = "E"
		s.mu.Unlock()
		e := concurrency.NewElection(sess, name)
		must(s.t, "client campaign", e.Campaign(ctx, "e1"))
		s.add("client-side campaign: key=%s rev%s %s", s.key(b(e.Key())), s.rev(e.Rev()), s.hdr(e.Header()))
		s.next(o, "client-side leader")
		lr, err = s.elect.Leader(ctx, &v3electionpb.LeaderRequest{Name: b(name)})
		s.add("leader: %s", s.leaderResp(lr, err))
		pr, err = s.elect.Proclaim(ctx, &v3electionpb.ProclaimRequest{
			Leader: &v3electionpb.LeaderKey{Name: b(name), Key: b(e.Key()), Rev: e.Rev(), Lease: int64(sess.Lease())}, Value: b("e2")})
		s.add("the service proclaims for the client-side leader: %s", hdrOf(s, pr, err))
		s.next(o, "proclamation")
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		obs := e.Observe(cctx)
		if g, ok := <-obs; ok {
			s.add("client-side observer: %s %s", s.kv(g.Kvs[0]), s.hdr(g.Header))
		}
		ccancel()
		must(s.t, "client resign", e.Resign(ctx))
		s.add("client-side resign: %s", s.hdr(e.Header()))
		s.quiet(o)
		o.stop()
	})
}

// TestElectionErrors: etcd's errors, codes and messages: no leader, not leader, a missing leader
// key, a revoked lease, an empty leader key; unknown methods of either service.
func TestElectionErrors(t *testing.T) {
	sameOnBoth(t, func(s *lx) {
		ctx := ctxT(s.t)
		name := s.p + "elect"
		L := s.grant(60, "A", "revoked")
		_, err := s.tg.Lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: L[1]})
		must(s.t, "revoke", err)
		lr, err := s.elect.Leader(ctx, &v3electionpb.LeaderRequest{Name: b(name)})
		s.add("leader of an empty election: %s", s.leaderResp(lr, err))
		cr, err := s.elect.Campaign(ctx, &v3electionpb.CampaignRequest{Name: b(name), Lease: L[1], Value: b("x")})
		s.add("campaign with a revoked lease: %s", s.campaignResp(cr, err))
		pr, err := s.elect.Proclaim(ctx, &v3electionpb.ProclaimRequest{Value: b("x")})
		s.add("proclaim without a leader: %s", hdrOf(s, pr, err))
		rs, err := s.elect.Resign(ctx, &v3electionpb.ResignRequest{})
		s.add("resign without a leader: %s", hdrOf(s, rs, err))
		pr, err = s.elect.Proclaim(ctx, &v3electionpb.ProclaimRequest{Leader: &v3electionpb.LeaderKey{Name: b(name), Key: b(name + "/1"), Rev: 5, Lease: L[0]}, Value: b("x")})
		s.add("proclaim by a non-leader: %s", hdrOf(s, pr, err))
		pr, err = s.elect.Proclaim(ctx, &v3electionpb.ProclaimRequest{Leader: &v3electionpb.LeaderKey{Name: b(name), Lease: L[0]}, Value: b("x")})
		s.add("proclaim with an empty key: %s", hdrOf(s, pr, err))
		rs, err = s.elect.Resign(ctx, &v3electionpb.ResignRequest{Leader: &v3electionpb.LeaderKey{Name: b(name), Lease: L[0]}})
		s.add("resign with an empty key: %s", hdrOf(s, rs, err))
		rs, err = s.elect.Resign(ctx, &v3electionpb.ResignRequest{Leader: &v3electionpb.LeaderKey{Name: b(name), Key: b(name + "/1"), Rev: 5, Lease: L[0]}})
		s.add("resign by a non-leader: %s", hdrOf(s, rs, err))

		cA, err := s.elect.Campaign(ctx, &v3electionpb.CampaignRequest{Name: b(name), Lease: L[0], Value: b("a")})
		s.add("A campaigns: %s", s.campaignResp(cA, err))
		if err != nil {
			return
		}
		stale := &v3electionpb.LeaderKey{Name: cA.Leader.Name, Key: cA.Leader.Key, Rev: cA.Leader.Rev - 1, Lease: cA.Leader.Lease}
		pr, err = s.elect.Proclaim(ctx, &v3electionpb.ProclaimRequest{Leader: stale, Value: b("x")})
		s.add("proclaim with a stale revision: %s", hdrOf(s, pr, err))
		pr, err = s.elect.Proclaim(ctx, &v3electionpb.ProclaimRequest{Leader: &v3electionpb.LeaderKey{Name: cA.Leader.Name, Key: cA.Leader.Key, Rev: cA.Leader.Rev, Lease: L[1]}, Value: b("x")})
		s.add("proclaim with a revoked lease: %s", hdrOf(s, pr, err))
		lr, err = s.elect.Leader(ctx, &v3electionpb.LeaderRequest{Name: b(name)})
		s.add("leader: %s", s.leaderResp(lr, err))
		rs, err = s.elect.Resign(ctx, &v3electionpb.ResignRequest{Leader: cA.Leader})
		s.add("A resigns: %s", hdrOf(s, rs, err))
		lr, err = s.elect.Leader(ctx, &v3electionpb.LeaderRequest{Name: b(name)})
		s.add("leader after resigning: %s", s.leaderResp(lr, err))

		conn := s.tg.Cli.ActiveConnection()
		for _, m := range []string{"/v3lockpb.Lock/Nope", "/v3electionpb.Election/Nope"} {
			err := conn.Invoke(ctx, m, &v3lockpb.UnlockRequest{}, &v3lockpb.UnlockResponse{})
			s.add("%s: %s", m, s.err(err))
		}
	})
}

// TestObserveNewLeaders: an observer started without a leader waits for the first campaign, and
// follows leaders that replace each other, whatever ended the previous one.
func TestObserveNewLeaders(t *testing.T) {
	sameOnBoth(t, func(s *lx) {
		ctx := ctxT(s.t)
		name := s.p + "elect"
		L := s.grant(60, "A", "B", "C", "D")
		o := s.observe(name)
		defer o.stop()
		s.quiet(o)
		var leaders []*v3electionpb.LeaderKey
		for i, l := range L[:3] {
			c := goCall(func() (*v3electionpb.CampaignResponse, error) {
				return s.elect.Campaign(ctx, &v3electionpb.CampaignRequest{Name: b(name), Lease: l, Value: b(fmt.Sprintf("v%d", i))})
			})
			s.waitQueue(name+"/", i+1)
			if i == 0 {
				r, err := c.wait(s.t, "first campaign")
				s.add("campaign %d: %s", i, s.campaignResp(r, err))
				if err != nil {
					return
				}
				leaders = append(leaders, r.Leader)
				s.next(o, "first leader")
			} else {
				s.add("campaign %d waits: %v", i, c.waiting(200*time.Millisecond))
				defer func() {
					r, err := c.wait(s.t, "campaign")
					s.add("campaign %d: %s", i, s.campaignResp(r, err))
				}()
			}
		}
		// the leader's lease is revoked, the next one resigns before being elected (its key
		// goes), the last one wins
		_, err := s.elect.Resign(ctx, &v3electionpb.ResignRequest{Leader: &v3electionpb.LeaderKey{
			Name: b(name), Key: b(fmt.Sprintf("%s/%x", name, L[1])), Rev: s.createRev(fmt.Sprintf("%s/%x", name, L[1])), Lease: L[1]}})
		s.add("second campaigner resigns while waiting: %v", status.Code(err))
		s.quiet(o)
		rv, err := s.tg.Lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: L[0]})
		s.add("first leader's lease revoked: %s", hdrOf(s, rv, err))
		s.next(o, "third campaigner leads")
		pr, err := s.elect.Proclaim(ctx, &v3electionpb.ProclaimRequest{Leader: &v3electionpb.LeaderKey{
			Name: b(name), Key: b(fmt.Sprintf("%s/%x", name, L[2])), Rev: s.createRev(fmt.Sprintf("%s/%x", name, L[2])), Lease: L[2]}, Value: b("v2b")})
		s.add("proclaim: %s", hdrOf(s, pr, err))
		s.next(o, "proclamation")
		// a second observer sees the current leader at once
		o2 := s.observe(name)
		defer o2.stop()
		s.next(o2, "second observer")
		// a put to a key of the election that is not the leader's is not a proclamation
		_, err = s.tg.KV.Put(ctx, &pb.PutRequest{Key: b(name + "/zzz"), Value: b("other")})
		must(s.t, "put", err)
		s.quiet(o)
		// the leader's key deleted by hand: the key created first after it leads, lease or not
		_, err = s.tg.KV.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: b(fmt.Sprintf("%s/%x", name, L[2]))})
		must(s.t, "delete the leader key", err)
		s.next(o, "the remaining key leads")
		_, err = s.tg.KV.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: b(name + "/"), RangeEnd: prefixEnd(name + "/")})
		must(s.t, "delete all", err)
		s.quiet(o)
		_, err = s.tg.KV.Put(ctx, &pb.PutRequest{Key: b(name + "/next"), Value: b("next")})
		must(s.t, "put", err)
		s.next(o, "the first put after no leader")
	})
}

func (s *lx) createRev(key string) int64 {
	r, err := s.tg.KV.Range(ctxT(s.t), &pb.RangeRequest{Key: b(key)})
	if err != nil || len(r.Kvs) == 0 {
		return 0
	}
	return r.Kvs[0].CreateRevision
}
