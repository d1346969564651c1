package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	clisnapshot "go.etcd.io/etcd/client/v3/snapshot"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/meganode/meganode/internal/procfs"
	"github.com/meganode/meganode/internal/storeproc"
)

// `bench migrate` (issue 38's first target): `bench state`'s objects loaded into a real etcd
// 3.6, moved etcd → meganode-store → etcd with the tools a user runs — etcdctl's snapshot save,
// `meganode store import`, `meganode-store --restore-from`, `meganode store export`, etcdutl's
// snapshot status and restore, etcd started on the restored directory — each step timed, and
// every key (key, value, create and mod revision, version, lease), HashKV at the current
// revision, the compaction point and the leases (ID, granted TTL, attached keys) checked at
// each end against what the original etcd answered.
//
// Memory decides how large a run fits: the original etcd keeps its backend on tmpfs (at 1M
// nodes about 10 GiB), and the converters hold the whole state in memory while they convert
// (docs/design.md §11). So the original's answers are read once, right after its snapshot is
// saved, and kept as one record per key with the value's SHA-256 (about 130 bytes a key); then
// that etcd is stopped and its data removed before anything else runs. The snapshot files go
// to SnapshotDir (disk: their pages are page cache the kernel can drop, not tmpfs).

// MigrateConfig says how big and where.
type MigrateConfig struct {
	Nodes, Pods, Leases int // objects of each kind (Pods, Leases 0: as many as Nodes)
	// EtcdLeases real etcd leases are granted before the load and attached to the node Lease
	// objects in consecutive batches (0: none, as `bench state`).
	EtcdLeases int
	Clients    int // load writers
	Conns      int // connections they share
	PageLimit  int // keys per page of the checks' Range
	// DataRoot is the parent of the servers' data directories (tmpfs, as `bench state`);
	// SnapshotDir of the snapshot files (disk).
	DataRoot, SnapshotDir string
	StoreBin              string
	StoreArgs             []string // extra flags for meganode-store
	EtcdQuota             int64    // etcd's --quota-backend-bytes
	// Meganode is the meganode binary that runs `store import`, `store export` and `etcd`
	// (normally this process's own executable).
	Meganode  string
	Log       io.Writer // progress lines
	ServerLog io.Writer // the servers' own logs (nil: kept for errors only)
}

func (c *MigrateConfig) normalize() {
	if c.Pods <= 0 {
		c.Pods = c.Nodes
	}
	if c.Leases <= 0 {
		c.Leases = c.Nodes
	}
	c.EtcdLeases = min(c.EtcdLeases, c.Leases)
	if c.Clients <= 0 {
		c.Clients = 64
	}
	if c.Conns <= 0 {
		c.Conns = 8
	}
	if c.PageLimit <= 0 {
		c.PageLimit = 5000
	}
	if c.SnapshotDir == "" {
		c.SnapshotDir = os.TempDir()
	}
}

func (c *MigrateConfig) logf(format string, a ...any) { logLine(c.Log, format, a...) }

// Migrate step names, in the order they run.
const (
	StepLoad          = "load etcd"
	StepSave          = "etcd snapshot save"
	StepReadSource    = "read the original etcd (for the checks)"
	StepImport        = "meganode store import"
	StepStoreStart    = "meganode-store --restore-from, until it serves"
	StepExport        = "meganode store export"
	StepEtcdutlStatus = "etcdutl snapshot status"
	StepEtcdutlRest   = "etcdutl snapshot restore"
	StepEtcdStart     = "etcd on the restored data dir, until it serves"
)

// MigrateStep is one step's figures.
type MigrateStep struct {
	Step    string  `json:"step"`
	Seconds float64 `json:"seconds"`
	// Bytes is the file the step wrote (a snapshot), or the data directory a server then had.
	Bytes int64 `json:"bytes,omitempty"`
	Keys  int64 `json:"keys,omitempty"`
	// The process that did the step (a converter, or the server started): its peak resident
	// set, the peak of its anonymous part (sampled every 100 ms; RSS also counts the pages of a
	// file it maps, which the kernel can drop) and its CPU time.
	Process    string  `json:"process,omitempty"`
	PeakRSS    uint64  `json:"peak_rss_bytes,omitempty"`
	PeakAnon   uint64  `json:"peak_anon_bytes,omitempty"`
	CPUSeconds float64 `json:"cpu_seconds,omitempty"`
	// HostMemPeak is the machine's memory in use at its highest during the step: MemTotal −
	// MemAvailable, sampled every 100 ms (tmpfs counts, page cache does not).
	HostMemPeak uint64 `json:"host_mem_peak_bytes"`
	Note        string `json:"note,omitempty"`
}

// MigrateCheck is one server's answers against the original etcd's.
type MigrateCheck struct {
	Server  string  `json:"server"`
	Seconds float64 `json:"seconds"`
	// Revision is the server's current revision (a Range's header), WantRevision the original's.
	Revision     int64 `json:"revision"`
	WantRevision int64 `json:"want_revision"`
	// Every key at WantRevision, by paginated Range, in key order: key, value (its SHA-256 and
	// length), create and mod revision, version, lease.
	Keys            int64    `json:"keys"`
	WantKeys        int64    `json:"want_keys"`
	KeyMismatches   int64    `json:"key_mismatches"`
	FirstMismatches []string `json:"first_mismatches,omitempty"`
	KeysEqual       bool     `json:"keys_equal"`
	// HashKV at WantRevision, and the compaction revision it reports.
	HashKV              uint32 `json:"hashkv"`
	WantHashKV          uint32 `json:"want_hashkv"`
	HashKVEqual         bool   `json:"hashkv_equal"`
	CompactRevision     int64  `json:"compact_revision"`
	WantCompactRevision int64  `json:"want_compact_revision"`
	// RefusesCompacted: a Range just below the compaction revision is answered "compacted".
	RefusesCompacted bool `json:"refuses_compacted"`
	// Leases: IDs, granted TTLs and attached keys; every remaining TTL within (0, granted].
	Leases          int      `json:"leases"`
	WantLeases      int      `json:"want_leases"`
	LeaseMismatches []string `json:"lease_mismatches,omitempty"`
	// ExpiringLeases (a live cluster's store, `meganode migrate`): leases of the original with
	// at most a minute left, which the target may have revoked since (not a mismatch).
	ExpiringLeases    int   `json:"expiring_leases,omitempty"`
	LeasesEqual       bool  `json:"leases_equal"`
	KeysWithLease     int64 `json:"keys_with_lease"`
	WantKeysWithLease int64 `json:"want_keys_with_lease"`
	Equal             bool  `json:"equal"` // all of the above
	// The server's peak resident set since it started and its anonymous memory, after the check.
	ServerPeakRSS uint64 `json:"server_peak_rss_bytes"`
	ServerAnon    uint64 `json:"server_anon_bytes"`
}

// MigrateResult is one run.
type MigrateResult struct {
	Meta       Meta  `json:"meta"`
	Nodes      int   `json:"nodes"`
	Pods       int   `json:"pods"`
	Leases     int   `json:"leases"`
	EtcdLeases int   `json:"etcd_leases"`
	Objects    int64 `json:"objects"`
	ValueBytes int64 `json:"value_bytes"`
	// The original etcd's current and compaction revisions once loaded.
	Revision        int64           `json:"revision"`
	CompactRevision int64           `json:"compact_revision"`
	Steps           []*MigrateStep  `json:"steps"`
	Checks          []*MigrateCheck `json:"checks"`
	// Into the store (snapshot save + import + start) and back (export + etcdutl restore +
	// etcd start): the steps' seconds summed, what a cut-over's copy would take.
	ToStoreSeconds float64 `json:"to_store_seconds"`
	ToEtcdSeconds  float64 `json:"to_etcd_seconds"`
	Equal          bool    `json:"equal"` // every check equal
	Failed         string  `json:"failed,omitempty"`
	// HostMemBaseline is the machine's memory in use before the run (as HostMemPeak).
	HostMemBaseline uint64 `json:"host_mem_baseline_bytes"`
}

func (r *MigrateResult) step(name string) *MigrateStep {
	for _, s := range r.Steps {
		if s.Step == name {
			return s
		}
	}
	return nil
}

// RunMigrate runs one size. A failing step is recorded in the result (Failed) with the
// steps before it; the error is returned too.
func RunMigrate(ctx context.Context, cfg MigrateConfig, meta Meta) (*MigrateResult, error) {
	cfg.normalize()
	res := &MigrateResult{Meta: meta, Nodes: cfg.Nodes, Pods: cfg.Pods, Leases: cfg.Leases, EtcdLeases: cfg.EtcdLeases,
		HostMemBaseline: hostMemInUse()}
	m := &migrateRun{cfg: cfg, res: res}
	defer m.cleanup()
	err := m.run(ctx)
	if err != nil {
		res.Failed = err.Error()
	}
	for _, name := range []string{StepSave, StepImport, StepStoreStart} {
		if s := res.step(name); s != nil {
			res.ToStoreSeconds += s.Seconds
		}
	}
	for _, name := range []string{StepExport, StepEtcdutlRest, StepEtcdStart} {
		if s := res.step(name); s != nil {
			res.ToEtcdSeconds += s.Seconds
		}
	}
	res.Equal = err == nil && len(res.Checks) == 2
	for _, c := range res.Checks {
		res.Equal = res.Equal && c.Equal
	}
	return res, err
}

// migrateRun is a run in progress: what it started, to be stopped and removed at the end.
type migrateRun struct {
	cfg      MigrateConfig
	res      *MigrateResult
	cleanups []func()
}

func (m *migrateRun) onCleanup(f func()) { m.cleanups = append(m.cleanups, f) }

func (m *migrateRun) cleanup() {
	for i := len(m.cleanups) - 1; i >= 0; i-- {
		m.cleanups[i]()
	}
	m.cleanups = nil
}

// timeStep runs one step, timing it and sampling the machine's memory meanwhile (and the
// anonymous memory of the process the step names with sampler.watch).
func (m *migrateRun) timeStep(name string, do func(s *MigrateStep, sampler *memSampler) error) (*MigrateStep, error) {
	s := &MigrateStep{Step: name}
	m.res.Steps = append(m.res.Steps, s)
	m.cfg.logf("%s ...", name)
	sm := startMemSampler()
	t0 := time.Now()
	err := do(s, sm)
	s.Seconds = time.Since(t0).Seconds()
	host, anon := sm.stop()
	s.HostMemPeak = host
	s.PeakAnon = max(s.PeakAnon, anon)
	if err != nil {
		return s, fmt.Errorf("%s: %w", name, err)
	}
	line := fmt.Sprintf("%s: %.2f s", name, s.Seconds)
	if s.Bytes > 0 {
		line += ", " + FmtBytes(float64(s.Bytes))
	}
	if s.PeakAnon > 0 {
		line += fmt.Sprintf(", %s peak RSS %s (anonymous %s)", s.Process, FmtBytes(float64(s.PeakRSS)), FmtBytes(float64(s.PeakAnon)))
	}
	m.cfg.logf("%s; host memory in use at most %s", line, FmtBytes(float64(host)))
	return s, nil
}

func (m *migrateRun) run(ctx context.Context) error {
	cfg := m.cfg
	work, err := os.MkdirTemp(cfg.SnapshotDir, "meganode-bench-migrate-")
	if err != nil {
		return err
	}
	m.onCleanup(func() { os.RemoveAll(work) })
	etcdSpec := TargetSpec{Kind: TargetEtcd, EtcdDataRoot: cfg.DataRoot, Log: cfg.ServerLog,
		EtcdCmd:  []string{cfg.Meganode, "etcd"},
		EtcdArgs: []string{"--quota-backend-bytes", strconv.FormatInt(cfg.EtcdQuota, 10)}}

	// 1. The original: a fresh etcd with `bench state`'s objects.
	var src *Target
	m.onCleanup(func() { src.Close() })
	want := &migrateAnswers{}
	if _, err := m.timeStep(StepLoad, func(s *MigrateStep, sampler *memSampler) error {
		var err error
		if src, err = etcdSpec.Start(); err != nil {
			return err
		}
		sampler.watch(src.Pid)
		s.Process = "etcd"
		if err := m.load(ctx, src, s); err != nil {
			return err
		}
		s.PeakRSS, s.PeakAnon = serverMemory(src.Pid)
		s.Bytes = dataDirBytes(src)
		return nil
	}); err != nil {
		return err
	}
	cli, err := newClient(src.Endpoints)
	if err != nil {
		return err
	}
	defer cli.Close()

	// 2. Its snapshot, as `etcdctl snapshot save` takes it.
	etcdSnap := filepath.Join(work, "etcd.db")
	if _, err := m.timeStep(StepSave, func(s *MigrateStep, _ *memSampler) error {
		if _, err := clisnapshot.SaveWithVersion(ctx, zap.NewNop(), clientv3.Config{Endpoints: src.Endpoints,
			DialTimeout: 5 * time.Second}, etcdSnap); err != nil {
			return err
		}
		s.Bytes = fileBytes(etcdSnap)
		return nil
	}); err != nil {
		return err
	}

	// What the original answers, kept for both checks; then it is stopped and its data removed.
	if _, err := m.timeStep(StepReadSource, func(s *MigrateStep, _ *memSampler) error {
		if err := want.read(ctx, cli, src.Endpoints[0], m.res.Revision, cfg.PageLimit); err != nil {
			return err
		}
		s.Keys = int64(len(want.keys))
		s.Note = fmt.Sprintf("HashKV %d at revision %d (compaction %d), %d leases, %d keys with a lease",
			want.hash, want.rev, want.hashCompact, len(want.leases), want.keysWithLease)
		return nil
	}); err != nil {
		return err
	}
	if want.compacted != m.res.CompactRevision || int64(len(want.keys)) != m.res.Objects {
		return fmt.Errorf("the original etcd answers %d keys compacted at %d; %d were loaded, compacted at %d",
			len(want.keys), want.compacted, m.res.Objects, m.res.CompactRevision)
	}
	cli.Close()
	src.Close()

	// 3. Into the store's snapshot.
	storeSnap := filepath.Join(work, "store.snap")
	if err := m.runConverter(ctx, StepImport, storeSnap, "store", "import", "--from", etcdSnap, "--out", storeSnap); err != nil {
		return err
	}
	os.Remove(etcdSnap) // read: its disk space (10 GB at 1M nodes) is the export's

	// 4. The store started from it.
	storeDir, err := dataDir(cfg.DataRoot, "meganode-bench-migrate-store-")
	if err != nil {
		return err
	}
	m.onCleanup(func() { os.RemoveAll(storeDir) })
	var store *storeproc.Proc
	m.onCleanup(func() {
		if store != nil {
			store.Stop()
		}
	})
	if _, err := m.timeStep(StepStoreStart, func(s *MigrateStep, sampler *memSampler) error {
		var err error
		// storeproc.Start returns at the ready line, which the store prints once it serves.
		store, err = storeproc.Start(storeproc.Options{Bin: cfg.StoreBin, DataDir: storeDir, Stderr: cfg.ServerLog,
			ExtraArgs: append([]string{"--restore-from", storeSnap}, cfg.StoreArgs...), ReadyTimeout: ReadyTimeout})
		if err != nil {
			store = nil
			return err
		}
		sampler.watch(store.Pid())
		s.Process = "meganode-store"
		s.PeakRSS, s.PeakAnon = serverMemory(store.Pid())
		s.Bytes = dirBytes(storeDir)
		return nil
	}); err != nil {
		return err
	}

	os.Remove(storeSnap) // restored from
	// 5. The store against the original.
	if err := m.check(ctx, "meganode-store restored from etcd's snapshot", []string{store.Endpoint}, store.Pid(), want); err != nil {
		return err
	}

	// 6. Out again: the store's export, etcdutl's status and restore, etcd on the result.
	exported := filepath.Join(work, "export.db")
	if err := m.runConverter(ctx, StepExport, exported, "store", "export", "--endpoints", store.URL, "--out", exported); err != nil {
		return err
	}
	store.Stop()
	os.RemoveAll(storeDir)
	if _, err := m.timeStep(StepEtcdutlStatus, func(s *MigrateStep, _ *memSampler) error {
		st, err := snapshot.NewV3(zap.NewNop()).Status(exported)
		if err != nil {
			return err
		}
		s.Keys, s.Bytes = int64(st.TotalKey), st.TotalSize
		s.Note = fmt.Sprintf("revision %d, %d keys, storage version %s", st.Revision, st.TotalKey, st.Version)
		if st.Revision != want.rev || int64(st.TotalKey) != int64(len(want.keys)) {
			return fmt.Errorf("%s: revision %d with %d keys, want %d with %d", exported, st.Revision, st.TotalKey, want.rev, len(want.keys))
		}
		return nil
	}); err != nil {
		return err
	}
	restoredRoot, err := dataDir(cfg.DataRoot, "meganode-bench-migrate-etcd-")
	if err != nil {
		return err
	}
	m.onCleanup(func() { os.RemoveAll(restoredRoot) })
	restored := filepath.Join(restoredRoot, "etcd")
	peerPort, err := storeproc.FreePort()
	if err != nil {
		return err
	}
	const memberName = "restored"
	peer := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	if _, err := m.timeStep(StepEtcdutlRest, func(s *MigrateStep, _ *memSampler) error {
		if err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{SnapshotPath: exported, Name: memberName,
			OutputDataDir: restored, PeerURLs: []string{peer}, InitialCluster: memberName + "=" + peer,
			InitialClusterToken: "etcd-cluster"}); err != nil {
			return err
		}
		s.Bytes = dirBytes(restored)
		return nil
	}); err != nil {
		return err
	}
	var back *etcdProc
	m.onCleanup(func() {
		if back != nil {
			back.stop()
		}
	})
	if _, err := m.timeStep(StepEtcdStart, func(s *MigrateStep, sampler *memSampler) error {
		port, err := storeproc.FreePort()
		if err != nil {
			return err
		}
		back, err = etcdSpec.launchEtcdAt("", restored, port,
			[]string{"--name", memberName, "--listen-peer-urls", peer, "--initial-cluster", memberName + "=" + peer}, ReadyTimeout)
		if err != nil {
			back = nil
			return err
		}
		sampler.watch(back.cmd.Process.Pid)
		s.Process = "etcd"
		s.PeakRSS, s.PeakAnon = serverMemory(back.cmd.Process.Pid)
		s.Bytes = dirBytes(restored)
		return nil
	}); err != nil {
		return err
	}

	// 7. etcd, back from the store, against the original.
	return m.check(ctx, "etcd restored from the store's export", []string{back.ep}, back.cmd.Process.Pid, want)
}

// serverMemory is a running server's peak resident set so far (VmHWM) and its anonymous part now.
func serverMemory(pid int) (peakRSS, anon uint64) {
	if p, err := ReadProc(pid); err == nil {
		peakRSS = p.PeakRSS
	}
	return peakRSS, anonBytes(pid)
}

func fileBytes(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// load grants the etcd leases, creates `bench state`'s objects with its loader (kube-apiserver's
// create Txn), and compacts at the revision the nodes ended at — as kube-apiserver's compactor
// compacts at a revision some minutes old, not at the head — so that the compaction point is
// carried across while HashKV at the current revision covers every object.
func (m *migrateRun) load(ctx context.Context, t *Target, s *MigrateStep) error {
	cfg := m.cfg
	sc := StateConfig{Nodes: cfg.Nodes, Pods: cfg.Pods, Leases: cfg.Leases, Clients: cfg.Clients, Conns: cfg.Conns, Log: cfg.Log}
	sc.normalize()
	st := &stateRun{cfg: sc, target: t, leaseRevs: make([]int64, cfg.Leases), created: time.Now()}
	if err := st.connect(); err != nil {
		return err
	}
	defer st.closeConns()
	cli := st.conns[0]
	leases := make([]clientv3.LeaseID, cfg.EtcdLeases)
	for j := range leases {
		// kube-apiserver gives its TTL'd objects an hour's lease; each a different TTL here, so
		// that a TTL carried to the wrong lease shows.
		g, err := cli.Grant(ctx, MigrateLeaseTTL(j))
		if err != nil {
			return fmt.Errorf("grant lease %d: %w", j, err)
		}
		leases[j] = g.ID
	}
	if len(leases) > 0 {
		st.cfg.EtcdLease = func(kind string, i int) clientv3.LeaseID {
			if kind != "leases" {
				return 0
			}
			return leases[i*len(leases)/cfg.Leases]
		}
	}
	var compactAt int64
	for _, kind := range StateKinds {
		k := st.loadKind(ctx, kind)
		m.res.Objects += k.Objects
		m.res.ValueBytes += int64(k.BytesPerObject * float64(k.Objects))
		cfg.logf("etcd: %d %s in %.1f s (%.0f/s, %.0f B each, %d errors)", k.Objects, kind, k.Seconds, k.ObjectsPerSec, k.BytesPerObject, k.Errors)
		if k.Errors > 0 {
			return fmt.Errorf("%s: %d of %d creates failed, first: %s", kind, k.Errors, sc.objects(kind), k.FirstError)
		}
		g, err := cli.Get(ctx, "health")
		if err != nil {
			return err
		}
		if compactAt == 0 {
			compactAt = g.Header.Revision
		}
		m.res.Revision = g.Header.Revision
	}
	if _, err := cli.Compact(ctx, compactAt, clientv3.WithCompactPhysical()); err != nil {
		return fmt.Errorf("compact at %d: %w", compactAt, err)
	}
	m.res.CompactRevision = compactAt
	s.Keys = m.res.Objects
	s.Note = fmt.Sprintf("%d objects, %s of values, %d etcd leases; revision %d, compacted at %d", m.res.Objects,
		FmtBytes(float64(m.res.ValueBytes)), len(leases), m.res.Revision, compactAt)
	return nil
}

// MigrateLeaseTTL is the TTL of the j-th etcd lease `bench migrate` grants: an hour, as
// kube-apiserver's event leases, plus j mod 60 seconds.
func MigrateLeaseTTL(j int) int64 { return 3600 + int64(j%60) }

// runConverter runs `meganode ARGS…` (store import or export) as a process of its own to its
// end, as a user would: its time, its peak resident set and CPU time from the kernel's
// accounting of the child, its peak anonymous memory sampled, and the size of the file out.
func (m *migrateRun) runConverter(ctx context.Context, name, out string, args ...string) error {
	_, err := m.timeStep(name, func(s *MigrateStep, sampler *memSampler) error {
		c := exec.CommandContext(ctx, m.cfg.Meganode, args...)
		var stdout, stderr bytes.Buffer
		c.Stdout, c.Stderr = &stdout, &stderr
		if err := c.Start(); err != nil {
			return err
		}
		sampler.watch(c.Process.Pid)
		err := c.Wait()
		sampler.watch(0)
		s.Process = "meganode " + strings.Join(args[:2], " ")
		if ru, ok := c.ProcessState.SysUsage().(*syscall.Rusage); ok {
			s.PeakRSS = uint64(ru.Maxrss) * 1024 // kilobytes on Linux
			s.CPUSeconds = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
		}
		s.Note = strings.TrimSpace(stdout.String())
		if err != nil {
			return fmt.Errorf("%v: %s", err, strings.TrimSpace(stderr.String()))
		}
		s.Bytes = fileBytes(out)
		return nil
	})
	return err
}

// check reads every key, HashKV and the leases from the server at endpoints (process pid) and
// compares them with the original etcd's answers.
func (m *migrateRun) check(ctx context.Context, server string, endpoints []string, pid int, want *migrateAnswers) error {
	m.cfg.logf("check %s ...", server)
	t0 := time.Now()
	cli, err := newClient(endpoints)
	if err != nil {
		return fmt.Errorf("check %s: %w", server, err)
	}
	defer cli.Close()
	c, err := want.compare(ctx, cli, endpoints[0], m.cfg.PageLimit)
	if c != nil {
		c.Server = server
		c.Seconds = time.Since(t0).Seconds()
		c.ServerPeakRSS, c.ServerAnon = serverMemory(pid)
		m.res.Checks = append(m.res.Checks, c)
		m.cfg.logf("check %s in %.1f s: %s", server, c.Seconds, c.summary())
	}
	if err != nil {
		return fmt.Errorf("check %s: %w", server, err)
	}
	return nil
}

// summary is the check in one line.
func (c *MigrateCheck) summary() string {
	eq := func(ok bool) string {
		if ok {
			return "equal"
		}
		return "DIFFERENT"
	}
	s := fmt.Sprintf("revision %d (want %d); %d keys (want %d), %d with a lease (want %d): %s, %d mismatches; HashKV %d (want %d): %s; compaction %d (want %d), refused below: %v; %d leases (want %d): %s",
		c.Revision, c.WantRevision, c.Keys, c.WantKeys, c.KeysWithLease, c.WantKeysWithLease, eq(c.KeysEqual), c.KeyMismatches,
		c.HashKV, c.WantHashKV, eq(c.HashKVEqual), c.CompactRevision, c.WantCompactRevision, c.RefusesCompacted, c.Leases, c.WantLeases, eq(c.LeasesEqual))
	if c.ExpiringLeases > 0 {
		s += fmt.Sprintf(" (%d of them expiring: the target may have revoked them since)", c.ExpiringLeases)
	}
	for _, mm := range append(c.FirstMismatches, c.LeaseMismatches...) {
		s += "; " + mm
	}
	return s
}

// memSampler samples, every 100 ms until stopped, the machine's memory in use and the
// anonymous memory of the process it watches (none until watch names one), keeping the
// highest of each.
type memSampler struct {
	pid        atomic.Int64
	stopCh     chan struct{}
	done       chan struct{}
	host, anon atomic.Uint64
}

func startMemSampler() *memSampler {
	s := &memSampler{stopCh: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			s.sample()
			select {
			case <-s.stopCh:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// watch makes pid the process whose anonymous memory is sampled (0: none).
func (s *memSampler) watch(pid int) { s.pid.Store(int64(pid)) }

func (s *memSampler) sample() {
	s.host.Store(max(s.host.Load(), hostMemInUse()))
	if p := int(s.pid.Load()); p > 0 {
		s.anon.Store(max(s.anon.Load(), anonBytes(p)))
	}
}

func (s *memSampler) stop() (host, anon uint64) {
	close(s.stopCh)
	<-s.done
	s.sample()
	return s.host.Load(), s.anon.Load()
}

// hostMemInUse is MemTotal − MemAvailable from /proc/meminfo (0 if unreadable).
func hostMemInUse() uint64 {
	f, err := procfs.MemInfo()
	if err != nil {
		return 0
	}
	total, avail := f["MemTotal"], f["MemAvailable"]
	if avail > total {
		return 0
	}
	return total - avail
}
