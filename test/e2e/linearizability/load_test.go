package linearizability

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// loadConfig describes one run.
type loadConfig struct {
	Clients  int
	Duration time.Duration
	Keys     int
	Watchers int
	Seed     int64
	// Planted bug (tests of the checker only): this fraction of gets is answered
	// from the client's cached earlier response to the same get, not by the server.
	StaleReads float64
	// NoSerializable makes serializable gets linearizable ones (a group's
	// followers may answer serializable gets from behind, as etcd's do).
	NoSerializable bool
}

const (
	testPrefix = "/registry/linz/" // its own shard; the store tests make it fsync
	sentinel   = testPrefix + "~end"
	opTimeout  = 3 * time.Second
)

// cluster is the server under test as the load sees it.
type cluster interface {
	Endpoint() string
	// Kill SIGKILLs the server; Start starts it again on the same data (maybe on another endpoint).
	Kill() error
	Start() error
}

// group is a cluster of several members: clients get every endpoint, and the
// load's faults are the group's own (Fault), during which clients go on.
type group interface {
	cluster
	Endpoints() []string
	// Fault runs the next fault and answers the revision served after it.
	Fault() (int64, error)
}

type runner struct {
	cfg  loadConfig
	srv  cluster
	t0   time.Time
	keys []string

	mu   sync.Mutex
	ops  []Op
	clis []*clientv3.Client

	upMu   sync.Mutex
	upCond *sync.Cond
	down   bool
}

func newClient(endpoint string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

func (r *runner) now() int64 { return time.Since(r.t0).Nanoseconds() }

func (r *runner) client(t testing.TB) *clientv3.Client {
	var cli *clientv3.Client
	var err error
	if g, ok := r.srv.(group); ok {
		cli, err = clientv3.New(clientv3.Config{Endpoints: g.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	} else {
		cli, err = newClient(r.srv.Endpoint())
	}
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.clis = append(r.clis, cli)
	r.mu.Unlock()
	return cli
}

func (r *runner) waitUp() {
	r.upMu.Lock()
	for r.down {
		r.upCond.Wait()
	}
	r.upMu.Unlock()
}

func (r *runner) setDown(d bool) {
	r.upMu.Lock()
	r.down = d
	r.upMu.Unlock()
	r.upCond.Broadcast()
}

// restart kills and restarts the server and points every client at it; the
// clients' calls in flight fail (unknown outcome) and the next ones wait.
func (r *runner) restart() (int64, error) {
	if g, ok := r.srv.(group); ok {
		return g.Fault()
	}
	err := r.srv.Kill() // under load: the calls in flight now are the unknown ones
	r.setDown(true)
	defer r.setDown(false)
	if err != nil {
		return 0, err
	}
	if err := r.srv.Start(); err != nil {
		return 0, err
	}
	// The revision the store resumed at, read before the clients (whose retries
	// could write) are pointed at it.
	probe, err := newClient(r.srv.Endpoint())
	if err != nil {
		return 0, err
	}
	defer probe.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, err := probe.Get(ctx, sentinel)
	if err != nil {
		return 0, fmt.Errorf("probe after restart: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.clis {
		c.SetEndpoints(r.srv.Endpoint())
	}
	return g.Header.Revision, nil
}

// runLoad drives cfg.Clients clients and cfg.Watchers watchers against srv for
// cfg.Duration, restarting the server at each of restartAt (offsets into the run),
// and returns the recorded history.
func runLoad(t testing.TB, srv cluster, cfg loadConfig, restartAt []time.Duration) *History {
	r := &runner{cfg: cfg, srv: srv}
	r.upCond = sync.NewCond(&r.upMu)
	for i := 0; i < cfg.Keys; i++ {
		r.keys = append(r.keys, fmt.Sprintf("%sk%02d", testPrefix, i))
	}
	defer func() {
		for _, c := range r.clis {
			c.Close()
		}
	}()
	clis := make([]*clientv3.Client, cfg.Clients)
	for i := range clis {
		clis[i] = r.client(t)
	}
	r.t0 = time.Now()

	watches := make([]WatchLog, cfg.Watchers)
	var wwg sync.WaitGroup
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	for i := range watches {
		watches[i].Name = fmt.Sprintf("watcher%d", i)
		cli := r.client(t)
		wwg.Add(1)
		go func(w *WatchLog) {
			defer wwg.Done()
			w.Events = watchUntilSentinel(wctx, cli, func(err error) { w.Name += fmt.Sprintf(" (ended: %v)", err) })
		}(&watches[i])
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, cli := range clis {
		wg.Add(1)
		go func(id int, cli *clientv3.Client) {
			defer wg.Done()
			r.drive(id, cli, stop)
		}(i, cli)
	}
	var restarts []Restart
	for _, at := range restartAt {
		time.Sleep(time.Until(r.t0.Add(at)))
		kill := r.now()
		resume, err := r.restart()
		restarts = append(restarts, Restart{At: kill, Took: r.now() - kill, Resume: resume})
		if err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("restart at %v: %v", at, err)
		}
	}
	time.Sleep(time.Until(r.t0.Add(cfg.Duration)))
	close(stop)
	wg.Wait()

	// The sentinel ends every watch: each must deliver everything before it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := clis[0].Put(ctx, sentinel, "end"); err != nil {
		t.Fatalf("sentinel put: %v", err)
	}
	done := make(chan struct{})
	go func() { wwg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		wcancel() // a watcher that never saw the sentinel: its log shows how far it got
		<-done
	}
	// The store's own account of its writes: a fresh watch from revision 1.
	final := watchUntilSentinel(ctx, r.client(t), func(err error) { t.Fatalf("final watch from revision 1: %v", err) })
	return &History{Keys: r.keys, Prefix: testPrefix, Ops: r.ops, Watches: watches, Final: final, Restarts: restarts}
}

// watchUntilSentinel watches the test prefix from revision 1 until the sentinel's event.
func watchUntilSentinel(ctx context.Context, cli *clientv3.Client, fail func(error)) []Event {
	var out []Event
	for resp := range cli.Watch(ctx, testPrefix, clientv3.WithPrefix(), clientv3.WithRev(1)) {
		if err := resp.Err(); err != nil {
			fail(err)
			return out
		}
		for _, e := range resp.Events {
			if string(e.Kv.Key) == sentinel {
				return out
			}
			ev := Event{Key: string(e.Kv.Key), Value: string(e.Kv.Value), ModRev: e.Kv.ModRevision, Delete: e.Type == clientv3.EventTypeDelete}
			if ev.Delete {
				ev.Value = ""
			}
			out = append(out, ev)
		}
	}
	fail(ctx.Err())
	return out
}

// drive is one client: random ops on the key universe until stop.
func (r *runner) drive(id int, cli *clientv3.Client, stop <-chan struct{}) {
	rng := rand.New(rand.NewSource(r.cfg.Seed*1000 + int64(id)))
	lastMod := map[string]int64{} // the newest mod revision this client saw per key
	cache := map[string]Op{}      // planted bug: earlier get responses
	for seq := 0; ; seq++ {
		select {
		case <-stop:
			return
		default:
		}
		r.waitUp()
		op := Op{Client: id, Key: r.keys[rng.Intn(len(r.keys))]}
		switch p := rng.Intn(100); {
		case p < 20:
			op.Kind = opGet
		case p < 30 && r.cfg.NoSerializable:
			op.Kind = opGet
		case p < 30:
			op.Kind = opGetSerial
		case p < 50:
			op.Kind, op.Value = opPut, fmt.Sprintf("c%d-%d", id, seq)
		case p < 55:
			op.Kind = opDelete
		case p < 88:
			op.Kind, op.Value, op.Expect = opTxn, fmt.Sprintf("c%d-%d", id, seq), lastMod[op.Key]
			if rng.Intn(5) == 0 && op.Expect > 0 { // a stale expectation, as a kube-apiserver with an old cache sends
				op.Expect = rng.Int63n(op.Expect)
			}
		default:
			op.Kind, op.Key = opRange, testPrefix
		}
		if c, ok := cache[op.Key]; ok && op.Kind == opGet && rng.Float64() < r.cfg.StaleReads {
			c.Client, c.Call = id, r.now()
			c.Return = r.now()
			r.record(c)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		op.Call = r.now()
		err := do(ctx, cli, &op)
		op.Return = r.now()
		cancel()
		if err != nil {
			op.Err, op.Return = err.Error(), unknownReturn
			r.record(op)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		r.record(op)
		switch op.Kind {
		case opGet, opGetSerial:
			cache[op.Key] = op
			lastMod[op.Key] = op.Got.ModRev
		case opPut:
			lastMod[op.Key] = op.Rev
		case opDelete:
			lastMod[op.Key] = 0
		case opTxn:
			if op.Succeeded {
				lastMod[op.Key] = op.Rev
			} else {
				lastMod[op.Key] = op.Got.ModRev
			}
		case opRange:
			for _, k := range r.keys {
				lastMod[k] = 0
			}
			for _, kv := range op.KVs {
				lastMod[kv.Key] = kv.ModRev
			}
		}
	}
}

func (r *runner) record(op Op) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

// do issues op and fills in its outcome.
func do(ctx context.Context, cli *clientv3.Client, op *Op) error {
	switch op.Kind {
	case opGet, opGetSerial:
		var opts []clientv3.OpOption
		if op.Kind == opGetSerial {
			opts = append(opts, clientv3.WithSerializable())
		}
		resp, err := cli.Get(ctx, op.Key, opts...)
		if err != nil {
			return err
		}
		op.Rev = resp.Header.Revision
		if len(resp.Kvs) > 0 {
			kv := resp.Kvs[0]
			op.Found, op.Got = true, KV{Key: string(kv.Key), Value: string(kv.Value), ModRev: kv.ModRevision}
		}
	case opPut:
		resp, err := cli.Put(ctx, op.Key, op.Value)
		if err != nil {
			return err
		}
		op.Rev = resp.Header.Revision
	case opDelete:
		resp, err := cli.Delete(ctx, op.Key)
		if err != nil {
			return err
		}
		op.Rev, op.Deleted = resp.Header.Revision, resp.Deleted
	case opTxn:
		resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(op.Key), "=", op.Expect)).
			Then(clientv3.OpPut(op.Key, op.Value)).Else(clientv3.OpGet(op.Key)).Commit()
		if err != nil {
			return err
		}
		op.Rev, op.Succeeded = resp.Header.Revision, resp.Succeeded
		if !resp.Succeeded {
			if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
				op.Found, op.Got = true, KV{Key: string(kvs[0].Key), Value: string(kvs[0].Value), ModRev: kvs[0].ModRevision}
			}
		}
	case opRange:
		resp, err := cli.Get(ctx, testPrefix, clientv3.WithPrefix())
		if err != nil {
			return err
		}
		op.Rev = resp.Header.Revision
		for _, kv := range resp.Kvs {
			op.KVs = append(op.KVs, KV{Key: string(kv.Key), Value: string(kv.Value), ModRev: kv.ModRevision})
		}
	}
	return nil
}
