package linearizability

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meganode/meganode/internal/storeproc"
)

// peerProxy stands between the members' peer connections: every member
// advertises the proxy's port as its peer URL and listens on its own, so the
// test can cut a member off (its peer connections closed, new ones refused)
// without stopping it. The member a connection comes from is read from the
// store's peer handshake (design §10: magic, cluster ID, from, to).
type peerProxy struct {
	mu    sync.Mutex
	cut   map[uint64]bool
	conns map[net.Conn][2]uint64 // from, to
	lns   []net.Listener
}

func newPeerProxy() *peerProxy {
	return &peerProxy{cut: map[uint64]bool{}, conns: map[net.Conn][2]uint64{}}
}

// serve forwards connections arriving at ln to target, the member whose ID is to
// (learned once the member runs: toID).
func (p *peerProxy) serve(ln net.Listener, target string, toID func() uint64) {
	p.mu.Lock()
	p.lns = append(p.lns, ln)
	p.mu.Unlock()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go p.pipe(c, target, toID())
	}
}

func (p *peerProxy) pipe(c net.Conn, target string, to uint64) {
	hs := make([]byte, 32)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, hs); err != nil {
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	from := binary.BigEndian.Uint64(hs[16:24])
	p.mu.Lock()
	refused := p.cut[from] || p.cut[to]
	p.mu.Unlock()
	if refused {
		c.Close()
		return
	}
	s, err := net.DialTimeout("tcp", target, time.Second)
	if err != nil {
		c.Close()
		return
	}
	if _, err := s.Write(hs); err != nil {
		c.Close()
		s.Close()
		return
	}
	p.mu.Lock()
	p.conns[c] = [2]uint64{from, to}
	p.conns[s] = [2]uint64{from, to}
	p.mu.Unlock()
	done := func() {
		c.Close()
		s.Close()
		p.mu.Lock()
		delete(p.conns, c)
		delete(p.conns, s)
		p.mu.Unlock()
	}
	go func() { _, _ = io.Copy(s, c); done() }()
	_, _ = io.Copy(c, s)
	done()
}

// setCut cuts member id off (every peer connection from or to it closed, new
// ones refused) or heals it.
func (p *peerProxy) setCut(id uint64, cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut[id] = cut
	if !cut {
		delete(p.cut, id)
		return
	}
	for c, ft := range p.conns {
		if ft[0] == id || ft[1] == id {
			c.Close()
		}
	}
}

func (p *peerProxy) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ln := range p.lns {
		ln.Close()
	}
	for c := range p.conns {
		c.Close()
	}
}

// storeGroup is three store members behind a peer proxy; its faults rotate
// through killing the leader (SIGKILL, restarted on its data dir: it rejoins
// empty and catches up), cutting the leader off for a while, and restarting a
// follower.
type storeGroup struct {
	t       testing.TB
	members []*storeproc.Proc
	ids     []uint64
	proxy   *peerProxy
	faults  int
	log     []string
}

func (g *storeGroup) Endpoint() string { return g.members[0].Endpoint }
func (g *storeGroup) Endpoints() []string {
	var out []string
	for _, m := range g.members {
		out = append(out, m.Endpoint)
	}
	return out
}
func (g *storeGroup) Kill() error  { panic("a group's faults are Fault") }
func (g *storeGroup) Start() error { panic("a group's faults are Fault") }

func startStoreGroup(t *testing.T, extraArgs ...string) *storeGroup {
	t.Helper()
	if _, err := storeproc.FindBin(); err != nil {
		t.Fatalf("%v (run `make store`)", err)
	}
	g := &storeGroup{t: t, proxy: newPeerProxy(), ids: make([]uint64, 3)}
	t.Cleanup(g.proxy.close)
	var cluster []string
	listen := make([]string, 3)
	for i := 0; i < 3; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lp, err := storeproc.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		listen[i] = fmt.Sprintf("127.0.0.1:%d", lp)
		cluster = append(cluster, fmt.Sprintf("m%d=http://%s", i, ln.Addr()))
		i := i
		go g.proxy.serve(ln, listen[i], func() uint64 { return g.ids[i] })
	}
	var stderr io.Writer
	if os.Getenv("MEGANODE_STORE_LOG") == "1" {
		stderr = os.Stderr
	}
	g.members = make([]*storeproc.Proc, 3)
	errs := make([]error, 3)
	// Fixed client ports: a restarted member is where the clients look for it.
	clientPorts := make([]int, 3)
	for i := range clientPorts {
		p, err := storeproc.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		clientPorts[i] = p
	}
	var wg sync.WaitGroup
	for i := range g.members {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			g.members[i], errs[i] = storeproc.Start(storeproc.Options{Name: fmt.Sprintf("m%d", i), ClientPort: clientPorts[i], DataDir: t.TempDir(), Stderr: stderr, ExtraArgs: append([]string{
				"--initial-cluster", strings.Join(cluster, ","),
				"--initial-advertise-peer-urls", strings.SplitN(cluster[i], "=", 2)[1],
				"--listen-peer-urls", "http://" + listen[i]}, extraArgs...)})
		}(i)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member m%d: %v", i, err)
		}
		m := g.members[i]
		t.Cleanup(func() { _ = m.Stop() })
	}
	for i, m := range g.members {
		st := g.status(m.Endpoint)
		if st == nil {
			t.Fatalf("member m%d answers no status", i)
		}
		g.ids[i] = st.Header.MemberId
	}
	return g
}

func (g *storeGroup) status(ep string) *clientv3.StatusResponse {
	cli, err := newClient(ep)
	if err != nil {
		return nil
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := cli.Status(ctx, ep)
	if err != nil {
		return nil
	}
	return st
}

// leader answers the index of the member every reachable member names as
// leader, waiting up to 10 s for one.
func (g *storeGroup) leader() (int, error) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for i, m := range g.members {
			if st := g.status(m.Endpoint); st != nil && st.Leader == g.ids[i] {
				return i, nil
			}
		}
	}
	return 0, fmt.Errorf("no leader after 10 s")
}

// Fault runs the next fault and answers the revision the group serves after it.
func (g *storeGroup) Fault() (int64, error) {
	l, err := g.leader()
	if err != nil {
		return 0, err
	}
	kind := g.faults % 3
	g.faults++
	switch kind {
	case 0:
		g.log = append(g.log, fmt.Sprintf("killed the leader m%d, restarted it 300 ms later", l))
		if err := g.members[l].Kill(); err != nil {
			return 0, err
		}
		time.Sleep(300 * time.Millisecond)
		if err := g.members[l].Restart(); err != nil {
			return 0, err
		}
	case 1:
		g.proxy.setCut(g.ids[l], true)
		// The others must elect one of them while it is cut off: else the cut cut nothing.
		next := -1
		for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			for i, m := range g.members {
				if st := g.status(m.Endpoint); i != l && next < 0 && st != nil && st.Leader == g.ids[i] {
					next = i
				}
			}
		}
		g.proxy.setCut(g.ids[l], false)
		if next < 0 {
			return 0, fmt.Errorf("the leader m%d was cut off for 1.5 s and the others elected none of them", l)
		}
		g.log = append(g.log, fmt.Sprintf("cut the leader m%d off for 1.5 s; m%d was elected meanwhile", l, next))
	case 2:
		f := (l + 1) % 3
		g.log = append(g.log, fmt.Sprintf("killed the follower m%d and restarted it", f))
		if err := g.members[f].Kill(); err != nil {
			return 0, err
		}
		if err := g.members[f].Restart(); err != nil {
			return 0, err
		}
	}
	// One fault at a time, as `replicated` promises: the next comes once every
	// member has caught up with the group again (a member that restarted, or
	// one whose uncommitted writes as a deposed leader made it start again).
	if err := g.healed(); err != nil {
		return 0, err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: g.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := cli.Get(ctx, sentinel)
	if err != nil {
		return 0, fmt.Errorf("probe after the fault: %w", err)
	}
	return r.Header.Revision, nil
}

// healed waits until every member names the same leader and has applied what
// the leader had committed when the wait began.
func (g *storeGroup) healed() error {
	deadline := time.Now().Add(30 * time.Second)
	var target uint64
	for ; time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		l, err := g.leader()
		if err != nil {
			return err
		}
		if target == 0 {
			st := g.status(g.members[l].Endpoint)
			if st == nil {
				continue
			}
			target = st.RaftIndex
		}
		ok := true
		for _, m := range g.members {
			st := g.status(m.Endpoint)
			ok = ok && st != nil && st.Leader == g.ids[l] && st.RaftAppliedIndex >= target
		}
		if ok {
			return nil
		}
	}
	return fmt.Errorf("the group did not heal within 30 s")
}

// TestGroupLinearizable: 8 clients, each given the three members' endpoints,
// against a 3-member store group (durability `replicated`: nothing on disk)
// while the leader is killed and restarted, the leader is cut off from its
// peers by the proxy, and a follower is restarted. Every check of the single
// store holds, porcupine included; nothing acknowledged may vanish, and every
// watcher (moved to another member by its client when its member dies)
// delivers every revision once, in order. Serializable gets are not in the
// mix: on a follower they may be stale, as etcd's are.
func TestGroupLinearizable(t *testing.T) {
	groupLinearizable(t, startStoreGroup(t))
}

// TestGroupLinearizableFsync: the same faults on a group with --durability
// fsync, whose members keep raft's log on disk (docs/design.md §10): a killed
// member restarts from its log and snapshot (or, behind its leader's log,
// discards it and rejoins by snapshot), and a snapshot is saved every 500
// entries while the load runs.
func TestGroupLinearizableFsync(t *testing.T) {
	groupLinearizable(t, startStoreGroup(t, "--durability", "fsync", "--snapshot-count", "500"))
}

func groupLinearizable(t *testing.T, g *storeGroup) {
	cfg := loadConfig{Clients: envInt("MEGANODE_LIN_CLIENTS", 8), Duration: envDuration("MEGANODE_LIN_GROUP_DURATION", 8*time.Second),
		Keys: 16, Watchers: 3, Seed: time.Now().UnixNano(), NoSerializable: true}
	faults := envInt("MEGANODE_LIN_GROUP_FAULTS", 3)
	var at []time.Duration
	for i := 1; i <= faults; i++ {
		at = append(at, cfg.Duration*time.Duration(i)/time.Duration(faults+1))
	}
	t.Logf("%d clients, %v, %d faults at %v, seed %d", cfg.Clients, cfg.Duration, faults, at, cfg.Seed)
	h := runLoad(t, g, cfg, at)
	for _, f := range g.log {
		t.Log(f)
	}
	requireClean(t, h)
}
