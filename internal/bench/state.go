package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"go.uber.org/zap"
)

// `bench state` (issue 14): a cluster's state — N nodes, N pods, N node Leases, as
// kube-apiserver stores them — loaded into one server, listed as kube-apiserver lists at
// start, watched by five apiservers' caches while the Leases are renewed, then the server
// is killed and restarted on its data. Targets run one after the other, never together.

// StateConfig says how big and how hard.
type StateConfig struct {
	Nodes         int           // objects of each kind
	Clients       int           // concurrent writers (load and lease renewals)
	Conns         int           // gRPC connections they share
	PageLimit     int           // kube-apiserver's page size
	Watchers      int           // watch streams per prefix
	WatchDuration time.Duration // lease renewals under watch
	PointWriters  int           // writers timed during the lists
	IdleDuration  time.Duration // their idle baseline
	// PointWritersIn: where they run (WritersShared, WritersConns, WritersProcess;
	// state_writers.go); WritersCmd runs them in a process (RunStateWriters).
	PointWritersIn string
	WritersCmd     []string
	SkipList       bool
	SkipWatch      bool
	SkipRestart    bool
	Log            io.Writer // progress lines; nil = none

	// Pods and Leases are the objects of those kinds; 0 means Nodes (`bench state` loads as
	// many of each, and only its load phase reads these: `bench migrate` sets them).
	Pods, Leases int
	// EtcdLease, when set, is the etcd lease object i of kind is created with (0: none), as
	// kube-apiserver attaches one to the objects it stores with a TTL. `bench state` attaches
	// none (kube-apiserver attaches none to Nodes, Pods and node Leases).
	EtcdLease func(kind string, i int) clientv3.LeaseID
}

// objects is how many objects of kind the load creates.
func (c *StateConfig) objects(kind string) int {
	switch {
	case kind == "pods" && c.Pods > 0:
		return c.Pods
	case kind == "leases" && c.Leases > 0:
		return c.Leases
	}
	return c.Nodes
}

// etcdLease is the etcd lease object i of kind is created with (0: none).
func (c *StateConfig) etcdLease(kind string, i int) clientv3.LeaseID {
	if c.EtcdLease == nil {
		return 0
	}
	return c.EtcdLease(kind, i)
}

func (c *StateConfig) normalize() {
	if c.Clients <= 0 {
		c.Clients = 64
	}
	if c.Conns <= 0 {
		c.Conns = 8
	}
	if c.Conns > c.Clients {
		c.Conns = c.Clients
	}
	if c.PageLimit <= 0 {
		c.PageLimit = 500
	}
	if c.Watchers <= 0 {
		c.Watchers = 5
	}
	if c.WatchDuration <= 0 {
		c.WatchDuration = 30 * time.Second
	}
	if c.PointWriters <= 0 {
		c.PointWriters = 4
	}
	if c.PointWritersIn == "" {
		c.PointWritersIn = WritersShared
	}
	if c.IdleDuration <= 0 {
		c.IdleDuration = 3 * time.Second
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

func (c *StateConfig) logf(format string, a ...any) { logLine(c.Log, format, a...) }

// StateReport is the whole run (results.json's "state").
type StateReport struct {
	Nodes         int            `json:"nodes"`
	Clients       int            `json:"clients"`
	Conns         int            `json:"conns"`
	PageLimit     int            `json:"page_limit"`
	Watchers      int            `json:"watchers_per_prefix"`
	WatchDuration float64        `json:"watch_duration_s"`
	Targets       []*StateTarget `json:"targets"`
}

// StateTarget is one server's figures. Failed names the first phase that failed and why;
// the phases after it that could not run are nil.
type StateTarget struct {
	Target  string        `json:"target"`
	Failed  string        `json:"failed,omitempty"`
	Load    *StateLoad    `json:"load,omitempty"`
	List    *StateList    `json:"list,omitempty"`
	Watch   *StateWatch   `json:"watch,omitempty"`
	Restart *StateRestart `json:"restart,omitempty"`
}

func (t *StateTarget) fail(phase string, err error) {
	if t.Failed == "" {
		t.Failed = fmt.Sprintf("%s: %v", phase, err)
	}
}

// RunState runs every phase against one target (started from spec) and returns its figures;
// a failure is recorded in the result, not returned, unless the server did not start at all.
func RunState(ctx context.Context, spec TargetSpec, cfg StateConfig) (*StateTarget, error) {
	cfg.normalize()
	res := &StateTarget{Target: spec.Kind}
	cfg.logf("%s: starting", spec.Kind)
	t, err := spec.Start()
	if err != nil {
		res.fail("start", err)
		return res, err
	}
	defer t.Close()
	st := &stateRun{cfg: cfg, target: t, leaseRevs: make([]int64, cfg.Nodes)}
	if err := st.connect(); err != nil {
		res.fail("connect", err)
		return res, nil
	}
	defer st.closeConns()

	res.Load, err = st.load(ctx)
	if err != nil {
		res.fail("load", err)
		return res, nil
	}
	for _, k := range res.Load.Kinds {
		if k.Kind == "pods" {
			st.podValueBytes = int64(k.BytesPerObject * float64(k.Objects))
		}
	}
	if !cfg.SkipList {
		res.List, err = st.list(ctx)
		if err != nil {
			res.fail("list", err)
		}
	}
	if !cfg.SkipWatch {
		res.Watch, err = st.watch(ctx)
		if err != nil {
			res.fail("watch", err)
		}
	}
	if !cfg.SkipRestart {
		res.Restart, err = st.restart(ctx)
		if err != nil {
			res.fail("restart", err)
		}
	}
	return res, nil
}

// stateRun is one target's run in progress.
type stateRun struct {
	cfg    StateConfig
	target *Target
	conns  []*clientv3.Client
	kcs    []*kubernetes.Client
	// leaseRevs[i] is the ModRevision of lease i as its writer last saw it (the update
	// Txn's compare); each index is owned by one writer at a time.
	leaseRevs []int64
	created   time.Time // creation time of every object
	// podValueBytes is what the pods' values weigh as written (an unpaginated list's answer).
	podValueBytes int64
}

func newClient(endpoints []string) (*clientv3.Client, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		MaxCallSendMsgSize: 8 << 20})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Get(ctx, "health"); err != nil {
		c.Close()
		return nil, fmt.Errorf("connect to %v: %w", endpoints, err)
	}
	return c, nil
}

func (st *stateRun) connect() error {
	st.closeConns()
	for i := 0; i < st.cfg.Conns; i++ {
		c, err := newClient(st.target.Endpoints)
		if err != nil {
			return err
		}
		st.conns = append(st.conns, c)
		// kube-apiserver's storage talks through etcd's kubernetes client: its Txns and Ranges.
		st.kcs = append(st.kcs, &kubernetes.Client{Client: c})
	}
	return nil
}

func (st *stateRun) closeConns() {
	CloseAll(st.conns)
	st.conns, st.kcs = nil, nil
}

// kc is the kubernetes client worker w uses.
func (st *stateRun) kc(w int) *kubernetes.Client { return st.kcs[w%len(st.kcs)] }
