package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	clisnapshot "go.etcd.io/etcd/client/v3/snapshot"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/migrate"
	"github.com/meganode/meganode/internal/storeproc"
)

// MigrateOptions configure Migrate. Zero values take defaults.
type MigrateOptions struct {
	To        string   // StoreMeganode or StoreEtcd: the store the cluster moves to
	BinDir    string   // default: BinDir()
	EtcdCmd   []string // how to run real etcd; default: <bin>/meganode etcd
	StoreArgs []string // extra flags for the new store process
	// WorkDir holds the snapshot files; default <state-dir>/migrate/<to>-<time>.
	WorkDir string
	// Verify reads every key of the source store once kube-apiserver is stopped and compares
	// the target with it (keys, values, revisions, HashKV, compaction, leases) before
	// kube-apiserver starts on it: the API is down for that time too.
	Verify    bool
	PageLimit int // keys per Range page of the verification (5000)
	// PollInterval is the availability probe's period: GET /api/v1/nodes?limit=1 (100 ms).
	PollInterval time.Duration
	// APIServerGrace is how long kube-apiserver gets to exit after SIGTERM before SIGKILL
	// (5 s). It stops taking connections at once, but waits up to 60 s for open watches to
	// end; killed, it writes nothing more either, and the snapshot is taken only once it is gone.
	APIServerGrace time.Duration
	// CheckPods pods are created once kube-apiserver serves from the new store, and must be
	// scheduled and Running (the scheduler, controllers and KWOK carry on).
	CheckPods int
	Progress  *bench.Progress
}

// Migration steps, in order.
const (
	StepStopAPIServer  = "stop kube-apiserver"
	StepReadSource     = "read the source's keys (verify)"
	StepSnapshotEtcd   = "etcd snapshot save"
	StepExportStore    = "meganode store export"
	StepStopSource     = "stop the source store"
	StepImport         = "meganode store import"
	StepEtcdutlRestore = "etcdutl snapshot restore"
	StepStartTarget    = "start the target store"
	StepCheckTarget    = "check the target's keys (verify)"
	StepStartAPIServer = "start kube-apiserver until /readyz"
)

// MigrateStep is one timed step of a migration.
type MigrateStep struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
	Note    string  `json:"note,omitempty"`
}

// Availability is what a client polling kube-apiserver saw during the cut-over.
type Availability struct {
	Probe        string    `json:"probe"`
	Interval     float64   `json:"interval_seconds"`
	Polls        int       `json:"polls"`
	Failed       int       `json:"failed"`
	FirstFailure time.Time `json:"first_failure"` // when the first failed request was sent
	FirstSuccess time.Time `json:"first_success"` // the first success after it, when it was answered
	Seconds      float64   `json:"unavailable_seconds"`
	FirstError   string    `json:"first_error,omitempty"`
}

// WatchOutcome is what happened to a watch a client held from before the cut-over.
type WatchOutcome struct {
	Resource string `json:"resource"`
	// StartRV is the resourceVersion it was opened at (a list's, before the cut-over); Events
	// came before its stream ended (EndedBy), LastRV is the last one's.
	StartRV string `json:"start_rv"`
	Events  int    `json:"events"`
	LastRV  string `json:"last_rv"`
	EndedBy string `json:"ended_by"`
	// Reopened at LastRV once the API serves from the new store: Result is "resumed" (an
	// event came) or "410 Gone" (client-go's reflector relists), Detail the event or status.
	Result string `json:"result"`
	Detail string `json:"detail"`
}

// PodsAfter is the pods created after the cut-over.
type PodsAfter struct {
	Count     int     `json:"count"`
	Scheduled int     `json:"scheduled"`
	Running   int     `json:"running"`
	Seconds   float64 `json:"seconds"` // created → every one Running
	// The slowest pod's creation → bound and creation → Running: how long the scheduler and
	// KWOK took to carry on (their watches back off after a kube-apiserver restart).
	ScheduleMaxSeconds float64 `json:"schedule_max_seconds"`
	StartupMaxSeconds  float64 `json:"startup_max_seconds"`
}

// MigrateResult is one migration's record.
type MigrateResult struct {
	From          string        `json:"from"`
	To            string        `json:"to"`
	StateDir      string        `json:"state_dir"`
	SourceURL     string        `json:"source_url"`
	TargetURL     string        `json:"target_url"`
	SourceDataDir string        `json:"source_data_dir"` // kept: the way back if anything is wrong
	TargetDataDir string        `json:"target_data_dir"`
	Snapshot      string        `json:"snapshot"`
	SnapshotBytes int64         `json:"snapshot_bytes"`
	Revision      int64         `json:"revision"` // the source's, once kube-apiserver was stopped
	Steps         []MigrateStep `json:"steps"`
	StepsSeconds  float64       `json:"steps_seconds"` // the steps' sum: kube-apiserver stopped → ready again
	Availability  Availability  `json:"availability"`
	// Check: the target against the source, key by key (Verify).
	Check *bench.MigrateCheck `json:"check,omitempty"`
	// Object counts through the API just before kube-apiserver was stopped and once it served again.
	CountsBefore map[string]int64 `json:"counts_before"`
	CountsAfter  map[string]int64 `json:"counts_after"`
	CountsEqual  bool             `json:"counts_equal"`
	// A ConfigMap written once the API serves again: its resourceVersion is above Revision.
	NewWriteRV int64 `json:"new_write_rv"`
	RVAdvanced bool  `json:"rv_advanced"`
	// Watches held from before the cut-over: of every Lease (a busy stream: node heartbeats)
	// and of ConfigMaps (a quiet one).
	Watches     []*WatchOutcome `json:"watches,omitempty"`
	Pods        *PodsAfter      `json:"pods_after,omitempty"`
	RolledBack  bool            `json:"rolled_back,omitempty"`
	Error       string          `json:"error,omitempty"`
	StartedAt   time.Time       `json:"started_at"`
	WallSeconds float64         `json:"wall_seconds"`
}

// OK reports whether every check that ran passed.
func (r *MigrateResult) OK() bool {
	return r.Error == "" && (r.Check == nil || r.Check.Equal) && r.CountsEqual && r.RVAdvanced &&
		(r.Pods == nil || (r.Pods.Scheduled == r.Pods.Count && r.Pods.Running == r.Pods.Count))
}

// CountedResources are the kinds counted through the API before and after a cut-over.
var CountedResources = []string{"nodes", "pods", "leases", "namespaces", "configmaps", "secrets", "serviceaccounts", "services"}

// MigrateNamespace holds what Migrate creates to check the cluster (a ConfigMap, pods).
const MigrateNamespace = "meganode-migrate"

func (o *MigrateOptions) normalize(st *State) error {
	switch o.To {
	case StoreMeganode, StoreEtcd:
	default:
		return fmt.Errorf("--to: want meganode (store) or etcd, got %q", o.To)
	}
	if o.PageLimit <= 0 {
		o.PageLimit = 5000
	}
	if o.APIServerGrace <= 0 {
		o.APIServerGrace = 5 * time.Second
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 100 * time.Millisecond
	}
	var err error
	if o.BinDir == "" {
		if o.BinDir, err = BinDir(); err != nil {
			return err
		}
	}
	if o.To == StoreEtcd && len(o.EtcdCmd) == 0 {
		self := filepath.Join(o.BinDir, "meganode")
		if _, err := os.Stat(self); err != nil {
			if self, err = os.Executable(); err != nil {
				return err
			}
		}
		o.EtcdCmd = []string{self, "etcd"}
	}
	if o.To == StoreMeganode {
		if _, err := os.Stat(filepath.Join(o.BinDir, BinStore)); err != nil {
			return fmt.Errorf("%s: %w (run `make store`)", filepath.Join(o.BinDir, BinStore), err)
		}
	}
	if o.WorkDir == "" {
		o.WorkDir = filepath.Join(st.Dir, "migrate", fmt.Sprintf("%s-%s", o.To, time.Now().UTC().Format("20060102T150405")))
	}
	return os.MkdirAll(o.WorkDir, 0o700)
}

// migrateSource finds the one store a cluster runs on and checks it can be moved.
func migrateSource(st *State, to string) (int, error) {
	if !st.Ready {
		return 0, fmt.Errorf("the cluster in %s is not up (run `meganode up`)", st.Dir)
	}
	if st.Store == to {
		return 0, fmt.Errorf("the cluster in %s already runs on %s", st.Dir, to)
	}
	if len(st.Shards) != 1 || strings.Contains(st.Shards[0].URL, ",") {
		var urls []string
		for _, sh := range st.Shards {
			urls = append(urls, sh.URL)
		}
		return 0, fmt.Errorf("migrate moves a cluster on one store process; this one has %d store(s) (%s): start it with --store-shards 1 --store-replicas 1",
			len(st.Shards), strings.Join(urls, "; "))
	}
	if st.EtcdProxyURL != "" {
		return 0, fmt.Errorf("migrate does not move a cluster started with --record")
	}
	for i := range st.Components {
		if st.Components[i].Name == st.Shards[0].Component {
			if !st.Components[i].Alive() {
				return 0, fmt.Errorf("%s is not running", st.Components[i].Name)
			}
			return i, nil
		}
	}
	return 0, fmt.Errorf("no component %q in %s", st.Shards[0].Component, st.Dir)
}

// Migrate moves a running `up` cluster from its store to the other kind (etcd → meganode-store
// or back) with every key at its revisions: kube-apiserver is stopped (nothing else writes to
// the store), the source's snapshot is taken (etcd's `snapshot save`, or `meganode store
// export`), the source stopped, the snapshot converted (`meganode store import`, or etcdutl's
// restore), the target started on it, and kube-apiserver started on the target with the same
// flags otherwise. A probe polls the API all the while. On a failure after kube-apiserver was
// stopped the cluster is rolled back onto the source (its data directory is never touched).
func Migrate(ctx context.Context, st *State, o MigrateOptions) (res *MigrateResult, err error) {
	prog := o.Progress
	res = &MigrateResult{From: st.Store, To: o.To, StateDir: st.Dir, StartedAt: time.Now()}
	defer func() {
		res.WallSeconds = time.Since(res.StartedAt).Seconds()
		if err != nil {
			res.Error = err.Error()
		}
	}()
	srcIdx, err := migrateSource(st, o.To)
	if err != nil {
		return res, err
	}
	if err := o.normalize(st); err != nil {
		return res, err
	}
	api := st.Component("kube-apiserver")
	if api == nil || !api.Alive() {
		return res, fmt.Errorf("kube-apiserver of %s is not running", st.Dir)
	}
	src := st.Components[srcIdx]
	res.SourceURL, res.SourceDataDir = src.URL, src.DataDir
	pki := PKIIn(filepath.Join(st.Dir, "pki"))
	var storeTLS *tls.Config
	useTLS := strings.HasPrefix(src.URL, "https://")
	if useTLS {
		if storeTLS, err = pki.StoreClientTLS(); err != nil {
			return res, err
		}
	}
	admin, err := AdminHTTPClient(st)
	if err != nil {
		return res, err
	}
	cs, err := Clientset(st)
	if err != nil {
		return res, err
	}
	if err := EnsureNamespace(ctx, cs, MigrateNamespace); err != nil {
		return res, err
	}

	// The target's component: a store of the other kind on a free port and a new data dir
	// beside the source's (kept as it is).
	base := filepath.Dir(src.DataDir)
	if strings.HasPrefix(filepath.Base(base), "migrated-") { // moved before: beside that one
		base = filepath.Dir(base)
	}
	root := filepath.Join(base, fmt.Sprintf("migrated-%s-%s", o.To, time.Now().UTC().Format("20060102T150405")))
	uo := UpOptions{Store: o.To, StoreShards: 1, StoreReplicas: 1, BinDir: o.BinDir, EtcdCmd: o.EtcdCmd, StoreArgs: o.StoreArgs,
		StoreTLS: useTLS, DataDir: root}
	tmp := &State{Dir: st.Dir}
	comps, err := storeComponents(tmp, &uo, pki)
	if err != nil {
		return res, err
	}
	target, shard := comps[0], tmp.Shards[0]
	target.Name, shard.Component = src.Name, src.Name
	target.Log = src.Log
	res.TargetURL, res.TargetDataDir = target.URL, target.DataDir
	var peer string
	if o.To == StoreEtcd {
		pport, err := storeproc.FreePort()
		if err != nil {
			return res, err
		}
		peer = fmt.Sprintf("http://127.0.0.1:%d", pport)
		target.Args = append(target.Args, "--name", target.Name, "--listen-peer-urls", peer, "--initial-cluster", target.Name+"="+peer)
	}
	oldAPIArgs := append([]string(nil), api.Args...)
	newAPIArgs := append([]string(nil), api.Args...)
	replaced := false
	for i, a := range newAPIArgs {
		if strings.HasPrefix(a, "--etcd-servers=") {
			newAPIArgs[i], replaced = "--etcd-servers="+target.URL, true
		}
	}
	if !replaced {
		return res, fmt.Errorf("kube-apiserver's command line has no --etcd-servers=")
	}

	// Before: the object counts, and a watch held across the cut-over.
	prog.Phase("counting objects through the API…")
	if res.CountsBefore, err = countObjects(ctx, cs); err != nil {
		return res, err
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	var watches []*heldWatch
	for _, r := range heldResources {
		h, err := holdWatch(wctx, cs, r)
		if err != nil {
			return res, err
		}
		watches = append(watches, h)
	}

	probe := startProbe(ctx, admin, st.APIServerURL+"/api/v1/nodes?limit=1", o.PollInterval)
	defer probe.stop()

	step := func(name string, do func(s *MigrateStep) error) error {
		prog.Phase(name + "…")
		s := MigrateStep{Name: name}
		t0 := time.Now()
		err := do(&s)
		s.Seconds = time.Since(t0).Seconds()
		res.Steps = append(res.Steps, s)
		res.StepsSeconds += s.Seconds
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		prog.Printf("  %-38s %7.2f s  %s", name, s.Seconds, s.Note)
		return nil
	}

	// From here on a failure rolls back onto the source.
	sourceStopped, targetStarted, committed := false, false, false
	defer func() {
		if err == nil || committed {
			return
		}
		prog.Printf("migration failed (%v): rolling back onto %s", err, src.Name)
		res.RolledBack = true
		rbErr := func() error {
			if targetStarted {
				_ = st.Components[srcIdx].Stop(15 * time.Second)
			}
			st.Components[srcIdx] = src
			if sourceStopped {
				c := &st.Components[srcIdx]
				if err := c.start(); err != nil {
					return err
				}
				if err := waitStore(ctx, c, storeTLS); err != nil {
					return err
				}
			}
			a := st.Component("kube-apiserver")
			if err := a.Stop(30 * time.Second); err != nil {
				return err
			}
			a.Args = oldAPIArgs
			if err := a.start(); err != nil {
				return err
			}
			if err := st.Save(); err != nil {
				return err
			}
			return waitHealthy(ctx, a, admin, a.URL+"/readyz", 180*time.Second)
		}()
		if rbErr != nil {
			err = fmt.Errorf("%w; rolling back failed too: %v", err, rbErr)
		}
	}()

	// 1. Nothing may write to the source once its snapshot is taken: stop kube-apiserver.
	if err = step(StepStopAPIServer, func(s *MigrateStep) error {
		t0 := time.Now()
		if err := api.Stop(o.APIServerGrace); err != nil {
			return err
		}
		if time.Since(t0) >= o.APIServerGrace {
			s.Note = fmt.Sprintf("SIGTERM, SIGKILL after %s (open watches hold its graceful shutdown)", o.APIServerGrace)
		} else {
			s.Note = "SIGTERM"
		}
		return nil
	}); err != nil {
		return res, err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{src.URL}, DialTimeout: 5 * time.Second, TLS: storeTLS,
		Logger: zap.NewNop(), MaxCallRecvMsgSize: 64 << 20})
	if err != nil {
		return res, err
	}
	defer cli.Close()
	g, err := cli.Get(ctx, "health")
	if err != nil {
		return res, fmt.Errorf("%s: %w", src.URL, err)
	}
	res.Revision = g.Header.Revision
	var want *bench.KeyState
	if o.Verify {
		if err = step(StepReadSource, func(s *MigrateStep) error {
			var err error
			if want, err = bench.ReadKeyState(ctx, cli, src.URL, o.PageLimit); err != nil {
				return err
			}
			h, c := want.HashKV()
			s.Note = fmt.Sprintf("%d keys at revision %d, HashKV %d (compacted at %d), %d leases (%d expiring within a minute)",
				want.Keys(), want.Revision(), h, c, want.Leases(), want.Expiring())
			// Only the store itself, revoking an expired lease, may write now.
			if want.Revision() != res.Revision && want.Expiring() == 0 {
				return fmt.Errorf("the source moved from revision %d to %d with kube-apiserver stopped: something else writes to it", res.Revision, want.Revision())
			}
			return nil
		}); err != nil {
			return res, err
		}
	}

	// 2. The source's snapshot, as an etcd snapshot file either way.
	res.Snapshot = filepath.Join(o.WorkDir, "etcd.db")
	if o.To == StoreMeganode {
		err = step(StepSnapshotEtcd, func(s *MigrateStep) error {
			if _, err := clisnapshot.SaveWithVersion(ctx, zap.NewNop(), clientv3.Config{Endpoints: []string{src.URL}, DialTimeout: 5 * time.Second,
				TLS: storeTLS}, res.Snapshot); err != nil {
				return err
			}
			res.SnapshotBytes = fileSize(res.Snapshot)
			s.Note = fmt.Sprintf("%s (%s)", res.Snapshot, mib(res.SnapshotBytes))
			return nil
		})
	} else {
		err = step(StepExportStore, func(s *MigrateStep) error {
			r, err := migrate.Export(ctx, cli, res.Snapshot, 10*time.Second)
			if err != nil {
				return err
			}
			res.SnapshotBytes = r.Write.Bytes
			s.Note = fmt.Sprintf("%s (%s), revision %d", res.Snapshot, mib(res.SnapshotBytes), r.Head.Rev)
			return nil
		})
	}
	if err != nil {
		return res, err
	}
	// The last revision before the cut-over: the snapshot's (the store may have revoked an
	// expired lease since the first read).
	if g, err := cli.Get(ctx, "health"); err == nil && g.Header.Revision > res.Revision {
		res.Revision = g.Header.Revision
	}
	cli.Close()

	// 3. The source stopped (its data directory stays), the snapshot converted.
	if err = step(StepStopSource, func(s *MigrateStep) error {
		sourceStopped = true
		s.Note = "data kept in " + src.DataDir
		return st.Components[srcIdx].Stop(30 * time.Second)
	}); err != nil {
		return res, err
	}
	if o.To == StoreMeganode {
		snap := filepath.Join(o.WorkDir, "store.snap")
		if err = step(StepImport, func(s *MigrateStep) error {
			r, err := migrate.Import(res.Snapshot, snap, migrate.ReadOptions{})
			if err != nil {
				return err
			}
			st := r.Snapshot.Stats()
			s.Note = fmt.Sprintf("%s (%s): revision %d, %d keys", snap, mib(r.Bytes), r.Snapshot.Rev, st.LiveKeys)
			return nil
		}); err != nil {
			return res, err
		}
		target.Args = append(target.Args, "--restore-from", snap)
	} else {
		if err = step(StepEtcdutlRestore, func(s *MigrateStep) error {
			_ = os.Remove(target.DataDir) // created empty; etcdutl makes it
			if err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{SnapshotPath: res.Snapshot, Name: target.Name,
				OutputDataDir: target.DataDir, PeerURLs: []string{peer}, InitialCluster: target.Name + "=" + peer,
				InitialClusterToken: "etcd-cluster"}); err != nil {
				return err
			}
			s.Note = "into " + target.DataDir
			return nil
		}); err != nil {
			return res, err
		}
	}

	// 4. The target started on it, checked against the source.
	if err = step(StepStartTarget, func(s *MigrateStep) error {
		st.Components[srcIdx] = target
		c := &st.Components[srcIdx]
		targetStarted = true
		if err := c.start(); err != nil {
			return err
		}
		if err := st.Save(); err != nil {
			return err
		}
		s.Note = fmt.Sprintf("%s pid %d on %s", c.Kind, c.Pid, c.URL)
		return waitStore(ctx, c, storeTLS)
	}); err != nil {
		return res, err
	}
	if want != nil {
		if err = step(StepCheckTarget, func(s *MigrateStep) error {
			tcli, err := clientv3.New(clientv3.Config{Endpoints: []string{target.URL}, DialTimeout: 5 * time.Second, TLS: storeTLS,
				Logger: zap.NewNop(), MaxCallRecvMsgSize: 64 << 20})
			if err != nil {
				return err
			}
			defer tcli.Close()
			c, err := want.Compare(ctx, tcli, o.To, target.URL, o.PageLimit)
			res.Check = c
			if err != nil {
				return err
			}
			s.Note = c.Summary()
			if !c.Equal {
				return fmt.Errorf("the target differs from the source: %s", c.Summary())
			}
			return nil
		}); err != nil {
			return res, err
		}
	}

	// 5. kube-apiserver on the target, with its other flags as they were.
	if err = step(StepStartAPIServer, func(s *MigrateStep) error {
		api := st.Component("kube-apiserver")
		api.Args = newAPIArgs
		if err := api.start(); err != nil {
			return err
		}
		s.Note = fmt.Sprintf("pid %d, --etcd-servers=%s", api.Pid, target.URL)
		return waitHealthy(ctx, api, admin, api.URL+"/readyz", 180*time.Second)
	}); err != nil {
		return res, err
	}
	st.Store = o.To
	st.Shards[0] = shard
	if err = st.Save(); err != nil {
		return res, err
	}
	committed = true
	res.Availability = probe.wait(30 * time.Second)
	prog.Printf("  API unavailable %.2f s (%d of %d polls failed, every %s: %s)", res.Availability.Seconds, res.Availability.Failed,
		res.Availability.Polls, o.PollInterval, res.Availability.Probe)

	// After: the same counts, a write above every revision before, the watch, new pods.
	// A failure from here on is reported, not rolled back: the cluster serves from the target.
	after := func() error {
		var err error
		if res.CountsAfter, err = countObjects(ctx, cs); err != nil {
			return err
		}
		res.CountsEqual = equalCounts(res.CountsBefore, res.CountsAfter)
		cm, err := writeCheckConfigMap(ctx, cs)
		if err != nil {
			return err
		}
		res.NewWriteRV = cm
		res.RVAdvanced = cm > res.Revision
		for _, h := range watches {
			res.Watches = append(res.Watches, h.reopen(ctx, cs, 20*time.Second))
		}
		if o.CheckPods > 0 {
			prog.Phase(fmt.Sprintf("creating %d pods on the migrated cluster…", o.CheckPods))
			t0 := time.Now()
			run, err := CreatePods(ctx, cs, PodOptions{Namespace: MigrateNamespace, Count: o.CheckPods, Timeout: 3 * time.Minute})
			res.Pods = &PodsAfter{Count: o.CheckPods, Seconds: time.Since(t0).Seconds()}
			if run != nil {
				res.Pods.Scheduled, res.Pods.Running = run.Scheduled, run.Running
				res.Pods.ScheduleMaxSeconds, res.Pods.StartupMaxSeconds = run.Schedule.MaxUs/1e6, run.Startup.MaxUs/1e6
			}
			if err != nil {
				return fmt.Errorf("pods after the cut-over: %w", err)
			}
		}
		return nil
	}
	if aerr := after(); aerr != nil {
		res.Error = aerr.Error()
		return res, aerr
	}
	return res, nil
}

func equalCounts(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// probe polls one URL every interval; a request not answered 200 within 2 s (or not answered
// at all) is a failure from when it was sent.
type probe struct {
	mu     sync.Mutex
	a      Availability
	done   chan struct{}
	cancel context.CancelFunc
	once   sync.Once
}

func startProbe(ctx context.Context, client *http.Client, url string, every time.Duration) *probe {
	ctx, cancel := context.WithCancel(ctx)
	p := &probe{a: Availability{Probe: "GET " + strings.TrimPrefix(url, "https://"), Interval: every.Seconds()}, done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(p.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			sent := time.Now()
			rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
			code, body, err := get(rctx, client, url)
			rcancel()
			if ctx.Err() != nil {
				return
			}
			p.mu.Lock()
			p.a.Polls++
			if err != nil || code != http.StatusOK {
				p.a.Failed++
				if p.a.FirstFailure.IsZero() {
					p.a.FirstFailure = sent
					if err != nil {
						p.a.FirstError = err.Error()
					} else {
						p.a.FirstError = fmt.Sprintf("HTTP %d: %.200s", code, strings.TrimSpace(body))
					}
				}
			} else if !p.a.FirstFailure.IsZero() && p.a.FirstSuccess.IsZero() {
				p.a.FirstSuccess = time.Now()
				p.a.Seconds = p.a.FirstSuccess.Sub(p.a.FirstFailure).Seconds()
			}
			p.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return p
}

// wait waits (at most timeout) for the first success after a failure and returns the record.
func (p *probe) wait(timeout time.Duration) Availability {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		ok := !p.a.FirstSuccess.IsZero()
		p.mu.Unlock()
		if ok {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.a
}

func (p *probe) stop() {
	p.once.Do(func() {
		p.cancel()
		<-p.done
	})
}
