package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meganode/meganode/internal/scheduler/collector"
	"github.com/meganode/meganode/internal/scheduler/intake"
	"github.com/meganode/meganode/internal/scheduler/metrics"
	"github.com/meganode/meganode/internal/scheduler/podspec"
	"github.com/meganode/meganode/internal/scheduler/relay"
	"github.com/meganode/meganode/internal/scheduler/shard"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

// Config configures the meganode scheduler.
type Config struct {
	Kubeconfig     string
	Client         kubernetes.Interface // overrides Kubeconfig (tests, simulator)
	SchedulerName  string
	Shards         int     // shard count (default 1)
	Collectors     int     // collector count (default 1)
	Fanout         int     // relay tree fanout (default 10)
	Fraction       float64 // decide when this fraction of shards answered (default 1)
	Deadline       time.Duration
	EquivalenceTTL time.Duration // default 2s; negative: off
	QueueLen       int           // per-hop bounded queue (default 1024)
	Parallelism    int           // framework parallelism per shard (default 16)
	DeadAfter      time.Duration // declare a silent shard dead after this (default 3s; negative: never)
	HealthAddr     string        // 127.0.0.1:port for /healthz and /metrics ("" = none)
	QPS            float32       // client QPS (default 5000)
	FeasibleToFind int           // per shard: stop filtering after this many feasible nodes (0: all)
	InFlight       int           // per collector: attempts between send and decision (default 64)
	BindWorkers    int           // per shard: binds/evictions in flight (default 256, shard.Config)

	// Intake is where pods come from: intake.ModeWatch ("" = watch) or intake.ModeWebhook
	// (webhook.go, intake/webhook_http.go, intake/webhook.go), with Webhook's options.
	Intake  string
	Webhook intake.WebhookOptions
	// GlobalView: "auto" (default) evaluates pods with pod (anti-)affinity or topology spread on
	// a per-shard view of the whole cluster and serialises them per constraint group; "off"
	// keeps every pod on the shard's own slice (shard/global_view.go).
	GlobalView string
	// NoEvents: record no Scheduled/FailedScheduling events (package events); the simulator
	// sets it.
	NoEvents bool
	// Scatter: shards each pod is sent to (collector/scatter.go): 0 = DefaultScatter,
	// collector.ScatterAll = every shard.
	Scatter int
	// Batch: pods of one equivalence class per frame (shard/batch.go): 0 = DefaultBatch, < 0 or
	// 1 = off.
	Batch int
	// ParallelPods: pods a shard evaluates at once (shard/worker.go): 0 = the shard's share of the
	// cores (role all: cores / shards, at least 1; role shard: every core).
	ParallelPods int
}

// DefaultScatter and DefaultBatch are the --scatter and --batch defaults.
const (
	DefaultScatter = 2
	DefaultBatch   = 32
)

// scatterWidth is d, or ScatterAll.
func (c *Config) scatterWidth() int {
	switch {
	case c.Scatter == 0:
		return DefaultScatter
	case c.Scatter < 0:
		return collector.ScatterAll
	}
	return c.Scatter
}

func (c *Config) batchSize() int {
	switch {
	case c.Batch == 0:
		return DefaultBatch
	case c.Batch < 0:
		return 1
	}
	return c.Batch
}

// inFlight is the per-collector window: 64 when every shard sees every pod (it keeps them in
// step); with d-sampling each shard sees d/S of the pods, so the window grows to keep about 8
// attempts queued per shard.
func (c *Config) inFlight() int {
	if c.InFlight > 0 {
		return c.InFlight
	}
	d := c.scatterWidth()
	if d == collector.ScatterAll || d >= c.Shards {
		return 64
	}
	return max(64, 8*c.Shards*d/max(c.Collectors, 1))
}

// globalView reports whether the global view is on; unknown values are an error.
func (c *Config) globalView() (bool, error) {
	switch c.GlobalView {
	case "", "auto":
		return true, nil
	case "off":
		return false, nil
	}
	return false, fmt.Errorf("global view: want auto or off, got %q", c.GlobalView)
}

func (c *Config) defaults() {
	if c.SchedulerName == "" {
		c.SchedulerName = podspec.DefaultSchedulerName
	}
	c.Shards = max(c.Shards, 1)
	c.Collectors = max(c.Collectors, 1)
	if c.Fanout <= 0 {
		c.Fanout = 10
	}
	if c.EquivalenceTTL == 0 {
		c.EquivalenceTTL = 2 * time.Second
	}
	if c.DeadAfter == 0 {
		c.DeadAfter = 3 * time.Second
	}
	if c.QPS <= 0 {
		c.QPS = 5000
	}
}

func (c *Config) client() (kubernetes.Interface, error) {
	if c.Client != nil {
		return c.Client, nil
	}
	return ClientFor(c.Kubeconfig, c.QPS)
}

// ClientFor builds a clientset with a high QPS: a scheduler binds at pod rate.
func ClientFor(kubeconfig string, qps float32) (kubernetes.Interface, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	rc.QPS, rc.Burst = qps, int(qps*2)
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	return kubernetes.NewForConfig(rc)
}

// System is a whole meganode scheduler in one process (role all): S shards, a relay tree,
// C collectors each with its watch intake. Hops are in-process calls with the same bounded
// queues the gRPC roles use.
type System struct {
	Cfg        Config
	Shards     []*shard.Shard
	Collectors []*collector.Collector
	Intakes    []*intake.Intake
	Root       wire.FrameSink
	Relays     int
	// Informers is the factory every role of the system shares (synced when StartAll returns).
	Informers informers.SharedInformerFactory

	liveMu sync.RWMutex
	live   []int
	ready  atomic.Bool
}

// Live returns the live shard ids.
func (s *System) Live() []int {
	s.liveMu.RLock()
	defer s.liveMu.RUnlock()
	return s.live
}

// MarkDead removes a shard from the membership: the survivors take over its nodes.
func (s *System) MarkDead(shard int) {
	s.liveMu.Lock()
	i := slices.Index(s.live, shard)
	if i < 0 || len(s.live) == 1 {
		s.liveMu.Unlock()
		return
	}
	live := slices.Delete(slices.Clone(s.live), i, i+1)
	s.live = live
	s.liveMu.Unlock()
	for _, sh := range s.Shards {
		if slices.Contains(live, sh.Index()) {
			sh.SetLive(live)
		}
	}
}

// KillShard stops a shard as if its process died (tests).
func (s *System) KillShard(i int) { s.Shards[i].Stop() }

// Ready reports whether every informer synced.
func (s *System) Ready() bool { return s.ready.Load() }

// Pending is the number of pods the intakes still track.
func (s *System) Pending() int {
	n := 0
	for _, in := range s.Intakes {
		n += in.Pending()
	}
	return n
}

// StartAll starts role all and returns once the informers have synced; it runs until ctx ends.
func StartAll(ctx context.Context, cfg Config) (*System, error) {
	cfg.defaults()
	if err := cfg.checkIntake(); err != nil {
		return nil, err
	}
	gview, err := cfg.globalView()
	if err != nil {
		return nil, err
	}
	cs, err := cfg.client()
	if err != nil {
		return nil, err
	}
	sys := &System{Cfg: cfg, live: wire.AllShards(cfg.Shards)}
	if cfg.HealthAddr != "" {
		if err := serveHealth(ctx, cfg.HealthAddr, sys.ready.Load); err != nil {
			return nil, err
		}
	}
	factory := informers.NewSharedInformerFactory(cs, 0)
	collectorSinks := make([]wire.ProposalSink, cfg.Collectors)
	shardSinks := map[int]wire.DecisionSink{}
	var lazy []*lazyProposals
	for i := range collectorSinks {
		lp := &lazyProposals{}
		lazy = append(lazy, lp)
		collectorSinks[i] = lp
	}
	var leaves []wire.FrameSink
	eq := cfg.EquivalenceTTL
	if eq < 0 {
		eq = 0
	}
	for i := range cfg.Shards {
		sh, err := shard.New(ctx, shard.Config{Index: i, Count: cfg.Shards, SchedulerName: cfg.SchedulerName, Client: cs,
			Informers: factory, Collectors: collectorSinks, QueueLen: cfg.QueueLen, Parallelism: cfg.Parallelism, EquivalenceTTL: eq,
			FeasibleToFind: cfg.FeasibleToFind, GlobalView: gview, Events: !cfg.NoEvents, BindWorkers: cfg.BindWorkers,
			ParallelPods: cmp.Or(cfg.ParallelPods, max(1, runtime.NumCPU()/cfg.Shards)), Scatter: max(cfg.scatterWidth(), 0)})
		if err != nil {
			return nil, err
		}
		sys.Shards = append(sys.Shards, sh)
		shardSinks[i] = sh
		leaves = append(leaves, sh)
	}
	sys.Root, sys.Relays = relay.BuildTree(ctx, leaves, cfg.Fanout, cfg.QueueLen)
	deadAfter := cfg.DeadAfter
	if deadAfter < 0 {
		deadAfter = 0
	}
	shardFrames := map[int]wire.FrameSink{}
	for i, sh := range sys.Shards {
		shardFrames[i] = sh
	}
	for i := range cfg.Collectors {
		var in *intake.Intake
		col := collector.New(collector.Config{Index: i, Shards: shardSinks, Live: sys.Live, Fraction: cfg.Fraction, Deadline: cfg.Deadline,
			DeadAfter: deadAfter, OnShardDead: sys.MarkDead,
			Requeue:  func(k wire.AttemptKey, d time.Duration, why string) { in.Requeue(k, d, why) },
			Finished: func(k wire.AttemptKey, node string, bound bool) { in.Finished(k, node, bound) },
			Decided:  func(k wire.AttemptKey) { in.Decided(k) }})
		in = intake.New(intake.Config{Client: cs, SchedulerName: cfg.SchedulerName, Collector: i, Collectors: cfg.Collectors, Root: sys.Root,
			InFlight: cfg.inFlight(), Source: cfg.Intake, Webhook: cfg.Webhook,
			SerializeConstrained: gview, Events: !cfg.NoEvents, Scatter: cfg.scatterWidth(), ShardSinks: shardFrames, Batch: cfg.batchSize(),
			Pods: factory.Core().V1().Pods().Informer()}, col)
		lazy[i].c = col
		sys.Collectors = append(sys.Collectors, col)
		sys.Intakes = append(sys.Intakes, in)
	}
	factory.Start(ctx.Done())
	sys.Informers = factory
	for _, sh := range sys.Shards {
		go func() { _ = sh.Run(ctx) }()
	}
	synced := factory.WaitForCacheSync(ctx.Done())
	for t, ok := range synced {
		if !ok {
			return nil, fmt.Errorf("informer %v did not sync", t)
		}
	}
	for _, sh := range sys.Shards {
		if !sh.WaitSynced(ctx) {
			return nil, ctx.Err()
		}
	}
	for i, in := range sys.Intakes {
		go func() { _ = in.Run(ctx) }()
		go sys.Collectors[i].WatchDead(ctx)
	}
	if err := startWebhookAll(ctx, cfg, sys.Intakes); err != nil {
		return nil, err
	}
	sys.ready.Store(true)
	return sys, nil
}

type lazyProposals struct{ c *collector.Collector }

func (l *lazyProposals) Propose(ctx context.Context, p wire.Proposal) error {
	return l.c.Propose(ctx, p)
}
func (l *lazyProposals) Result(ctx context.Context, r wire.CommitResult) error {
	return l.c.Result(ctx, r)
}

func serveHealth(ctx context.Context, addr string, ready func() bool) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "informers syncing", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) { metrics.Write(w) })
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	go func() { _ = srv.Serve(lis) }()
	return nil
}

// RoleConfig is what the distributed roles need beyond Config.
type RoleConfig struct {
	Index      int      // shard or collector index
	Listen     string   // 127.0.0.1:port this process serves gRPC on
	Children   []string // relay: child addresses (relays or shards)
	Collectors []string // shard: collector addresses, by index (collector with webhook intake: its peers)
	ShardAddrs []string // collector: shard addresses, by index
	Root       string   // collector: root relay (or single shard) address
}

func dialAll(ctx context.Context, addrs []string, q int) ([]*wire.Client, error) {
	var out []*wire.Client
	for _, a := range addrs {
		c, err := wire.Dial(ctx, a, q)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// RunRole runs one distributed role (shard, relay or collector) over gRPC until ctx ends.
// Membership is static in this mode: shard ids 0..Shards-1 (dead-shard takeover is role all only).
func RunRole(ctx context.Context, role string, cfg Config, rc RoleConfig) error {
	cfg.defaults()
	if err := cfg.checkIntake(); err != nil {
		return err
	}
	gview, err := cfg.globalView()
	if err != nil {
		return err
	}
	if rc.Listen == "" {
		return errors.New("--listen is required for role " + role)
	}
	lis, err := net.Listen("tcp", rc.Listen)
	if err != nil {
		return err
	}
	ready := atomic.Bool{}
	if cfg.HealthAddr != "" {
		if err := serveHealth(ctx, cfg.HealthAddr, ready.Load); err != nil {
			return err
		}
	}
	switch role {
	case "relay":
		kids, err := dialAll(ctx, rc.Children, cfg.QueueLen)
		if err != nil {
			return err
		}
		var sinks []wire.FrameSink
		for _, k := range kids {
			sinks = append(sinks, k)
		}
		ready.Store(true)
		return wire.Serve(ctx, lis, wire.Node{Frames: relay.New(ctx, fmt.Sprintf("%s", rc.Listen), sinks, cfg.QueueLen)})
	case "shard":
		cs, err := cfg.client()
		if err != nil {
			return err
		}
		cols, err := dialAll(ctx, rc.Collectors, 1)
		if err != nil {
			return err
		}
		var ps []wire.ProposalSink
		for _, c := range cols {
			ps = append(ps, c)
		}
		eq := max(cfg.EquivalenceTTL, 0)
		factory := informers.NewSharedInformerFactory(cs, 0)
		sh, err := shard.New(ctx, shard.Config{Index: rc.Index, Count: cfg.Shards, SchedulerName: cfg.SchedulerName, Client: cs,
			Informers: factory, Collectors: ps, QueueLen: cfg.QueueLen, Parallelism: cfg.Parallelism, EquivalenceTTL: eq, FeasibleToFind: cfg.FeasibleToFind,
			GlobalView: gview, Events: !cfg.NoEvents, BindWorkers: cfg.BindWorkers, ParallelPods: cmp.Or(cfg.ParallelPods, runtime.NumCPU()), Scatter: max(cfg.scatterWidth(), 0)})
		if err != nil {
			return err
		}
		factory.Start(ctx.Done())
		go func() { _ = sh.Run(ctx) }()
		sh.WaitSynced(ctx)
		ready.Store(true)
		return wire.Serve(ctx, lis, wire.Node{Frames: sh, Decisions: sh})
	case "collector":
		cs, err := cfg.client()
		if err != nil {
			return err
		}
		shards, err := dialAll(ctx, rc.ShardAddrs, max(cfg.QueueLen, 1))
		if err != nil {
			return err
		}
		root, err := wire.Dial(ctx, rc.Root, cfg.QueueLen)
		if err != nil {
			return err
		}
		sinks := map[int]wire.DecisionSink{}
		frames := map[int]wire.FrameSink{}
		for i, s := range shards {
			sinks[i] = s
			frames[i] = s
		}
		live := wire.AllShards(len(shards))
		var in *intake.Intake
		col := collector.New(collector.Config{Index: rc.Index, Shards: sinks, Live: func() []int { return live }, Fraction: cfg.Fraction,
			Deadline: cfg.Deadline,
			Requeue:  func(k wire.AttemptKey, d time.Duration, why string) { in.Requeue(k, d, why) },
			Finished: func(k wire.AttemptKey, node string, bound bool) { in.Finished(k, node, bound) },
			Decided:  func(k wire.AttemptKey) { in.Decided(k) }})
		in = intake.New(intake.Config{Client: cs, SchedulerName: cfg.SchedulerName, Collector: rc.Index, Collectors: cfg.Collectors, Root: root,
			InFlight: cfg.inFlight(), Source: cfg.Intake, Webhook: cfg.Webhook,
			SerializeConstrained: gview, Events: !cfg.NoEvents, Scatter: cfg.scatterWidth(), ShardSinks: frames, Batch: cfg.batchSize()}, col)
		go func() { _ = in.Run(ctx) }()
		forwarded, err := startWebhookCollector(ctx, cfg, rc, in)
		if err != nil {
			return err
		}
		ready.Store(true)
		return wire.Serve(ctx, lis, wire.Node{Proposals: col, Frames: forwarded})
	}
	return fmt.Errorf("unknown role %q (all, shard, relay, collector)", role)
}

// SplitAddrs splits a comma-separated address list.
func SplitAddrs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}
