package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
)

// StateLoad is the load phase: every kind created with kube-apiserver's create Txn
// (If ModRevision(k) = 0 Then Put(k, v); no Else — Create in k8s.io/apiserver's etcd3 store).
type StateLoad struct {
	Kinds             []StateKindLoad `json:"kinds"`
	Objects           int64           `json:"objects"`
	Seconds           float64         `json:"seconds"`
	ObjectsPerSec     float64         `json:"objects_per_sec"`
	ServerCPUPerObjUs float64         `json:"server_cpu_per_object_us"`
	ValueBytes        int64           `json:"value_bytes"` // the values clients wrote, summed
	// After the load, history compacted at the latest revision (and etcd defragmented, as an
	// operator would): the server's resident set and its data directory (on tmpfs: memory too).
	RSSBytes uint64 `json:"rss_bytes"`
	// AnonBytes is the anonymous part of the resident set (RssAnon): RSS also counts the
	// pages of files the server maps (etcd's db on tmpfs), which DataDirBytes already counts.
	AnonBytes          uint64  `json:"rss_anon_bytes"`
	DataDirBytes       int64   `json:"data_dir_bytes"`
	DataDirBytesBefore int64   `json:"data_dir_bytes_before_compaction"`
	EtcdDBBytes        int64   `json:"etcd_db_bytes,omitempty"`
	EtcdDBBytesBefore  int64   `json:"etcd_db_bytes_before_defrag,omitempty"`
	CompactSeconds     float64 `json:"compact_seconds"`
	DefragSeconds      float64 `json:"defrag_seconds,omitempty"`
	// meganode-store: after the compaction, the wait until its background packer (values
	// packed with a zstd dictionary per prefix) found nothing left to pack — its part of
	// "compacted", as the defragmentation is etcd's — and the server CPU in that wait.
	PackWaitSeconds float64 `json:"pack_wait_seconds,omitempty"`
	PackWaitCPUUs   float64 `json:"pack_wait_cpu_us,omitempty"`
	// The packer's own counters then: values packed, their bytes as written and as stored,
	// and its busy time since the start (load included).
	ValuesPacked      int64   `json:"values_packed,omitempty"`
	PackedRawBytes    int64   `json:"packed_raw_bytes,omitempty"`
	PackedStoredBytes int64   `json:"packed_stored_bytes,omitempty"`
	PackerBusySeconds float64 `json:"packer_busy_seconds,omitempty"`
}

// StateKindLoad is one kind's load.
type StateKindLoad struct {
	Kind              string  `json:"kind"`
	Prefix            string  `json:"prefix"`
	Objects           int64   `json:"objects"`
	BytesPerObject    float64 `json:"bytes_per_object"` // encoded value, as written
	Seconds           float64 `json:"seconds"`
	ObjectsPerSec     float64 `json:"objects_per_sec"`
	ServerCPUPerObjUs float64 `json:"server_cpu_per_object_us"`
	CreateP50Us       float64 `json:"create_p50_us"`
	CreateP99Us       float64 `json:"create_p99_us"`
	Errors            int64   `json:"errors"`
	FirstError        string  `json:"first_error,omitempty"`
}

func (st *stateRun) load(ctx context.Context) (*StateLoad, error) {
	res := &StateLoad{}
	st.created = time.Now()
	start := time.Now()
	pw := StartProcWatch(st.target.Pid)
	var firstErr error
	for _, kind := range StateKinds {
		k := st.loadKind(ctx, kind)
		res.Kinds = append(res.Kinds, k)
		res.Objects += k.Objects
		res.ValueBytes += int64(k.BytesPerObject * float64(k.Objects))
		st.cfg.logf("%s: %d %s in %.1f s (%.0f/s, %.0f B each, %.1f µs server CPU each, %d errors)", st.target.Name,
			k.Objects, kind, k.Seconds, k.ObjectsPerSec, k.BytesPerObject, k.ServerCPUPerObjUs, k.Errors)
		if k.Errors > 0 {
			firstErr = fmt.Errorf("%s: %d of %d creates failed, first: %s", kind, k.Errors, st.cfg.objects(kind), k.FirstError)
			break
		}
	}
	use := pw.Stop()
	res.Seconds = time.Since(start).Seconds()
	if res.Seconds > 0 {
		res.ObjectsPerSec = float64(res.Objects) / res.Seconds
	}
	if res.Objects > 0 {
		res.ServerCPUPerObjUs = use.CPUMicros / float64(res.Objects)
	}
	if firstErr != nil {
		res.RSSBytes, res.AnonBytes = rssBytes(st.target.Pid), anonBytes(st.target.Pid)
		res.DataDirBytes = dataDirBytes(st.target)
		return res, firstErr
	}
	return res, st.compact(ctx, res)
}

// loadKind creates the objects of kind (cfg.objects) with cfg.Clients writers.
func (st *stateRun) loadKind(ctx context.Context, kind string) StateKindLoad {
	n := st.cfg.objects(kind)
	res := StateKindLoad{Kind: kind, Prefix: statePrefix(kind)}
	var next, done, bytes, errs atomic.Int64
	var mu sync.Mutex
	hist := NewHistogram()
	var wg sync.WaitGroup
	pw := StartProcWatch(st.target.Pid)
	start := time.Now()
	for w := 0; w < st.cfg.Clients; w++ {
		wg.Add(1)
		go func(kc *kubernetes.Client) {
			defer wg.Done()
			h := NewHistogram()
			defer func() { mu.Lock(); hist.Merge(h); mu.Unlock() }()
			for ctx.Err() == nil && errs.Load() == 0 {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				val, err := EncodeState(StateObject(kind, i, st.created))
				if err == nil {
					t0 := time.Now()
					var resp kubernetes.PutResponse
					resp, err = kc.OptimisticPut(ctx, StateKey(kind, i), val, 0, kubernetes.PutOptions{LeaseID: st.cfg.etcdLease(kind, i)})
					h.Record(time.Since(t0))
					if err == nil && !resp.Succeeded {
						err = errors.New("create Txn did not succeed: the key exists")
					}
					if err == nil && kind == "leases" {
						st.leaseRevs[i] = resp.Revision
					}
				}
				if err != nil {
					if errs.Add(1) == 1 {
						mu.Lock()
						res.FirstError = err.Error()
						mu.Unlock()
					}
					return
				}
				bytes.Add(int64(len(val)))
				done.Add(1)
			}
		}(st.kc(w))
	}
	wg.Wait()
	use := pw.Stop()
	res.Seconds = time.Since(start).Seconds()
	res.Objects, res.Errors = done.Load(), errs.Load()
	if res.Errors == 0 && ctx.Err() != nil {
		res.Errors, res.FirstError = 1, ctx.Err().Error()
	}
	if res.Objects > 0 {
		res.BytesPerObject = float64(bytes.Load()) / float64(res.Objects)
		res.ServerCPUPerObjUs = use.CPUMicros / float64(res.Objects)
	}
	if res.Seconds > 0 {
		res.ObjectsPerSec = float64(res.Objects) / res.Seconds
	}
	s := hist.Summary()
	res.CreateP50Us, res.CreateP99Us = s.P50Us, s.P99Us
	return res
}

// compact compacts history at the latest revision (and defragments etcd), measuring the
// data directory and etcd's db file before and after, then the resident set.
func (st *stateRun) compact(ctx context.Context, res *StateLoad) error {
	res.DataDirBytesBefore = dataDirBytes(st.target)
	res.EtcdDBBytesBefore = etcdDBBytes(st.target)
	cli := st.conns[0]
	g, err := cli.Get(ctx, "health")
	if err != nil {
		return err
	}
	t0 := time.Now()
	if _, err := cli.Compact(ctx, g.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		return fmt.Errorf("compact: %w", err)
	}
	res.CompactSeconds = time.Since(t0).Seconds()
	if st.target.Name == TargetEtcd {
		t0 = time.Now()
		if _, err := cli.Defragment(ctx, st.target.Endpoints[0]); err != nil {
			return fmt.Errorf("defragment: %w", err)
		}
		res.DefragSeconds = time.Since(t0).Seconds()
	} else if err := st.waitPacked(ctx, res); err != nil {
		st.cfg.logf("%s: %v", st.target.Name, err)
	}
	time.Sleep(time.Second) // let freed memory settle before reading RSS
	res.DataDirBytes = dataDirBytes(st.target)
	res.EtcdDBBytes = etcdDBBytes(st.target)
	res.RSSBytes = rssBytes(st.target.Pid)
	res.AnonBytes = anonBytes(st.target.Pid)
	st.cfg.logf("%s: compacted in %.1f s; RSS %s (anonymous %s), data dir %s (before %s), etcd db %s (before defrag %s)", st.target.Name,
		res.CompactSeconds, FmtBytes(float64(res.RSSBytes)), FmtBytes(float64(res.AnonBytes)), FmtBytes(float64(res.DataDirBytes)), FmtBytes(float64(res.DataDirBytesBefore)),
		FmtBytes(float64(res.EtcdDBBytes)), FmtBytes(float64(res.EtcdDBBytesBefore)))
	return nil
}

func rssBytes(pid int) uint64 {
	s, err := ReadProc(pid)
	if err != nil {
		return 0
	}
	return s.RSSBytes
}

// anonBytes is RssAnon from /proc/<pid>/status, 0 if unknown.
func anonBytes(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.ParseUint(f[0], 10, 64)
				return n * 1024
			}
		}
	}
	return 0
}

// dirBytes is the space the files under dir take (allocated blocks: tmpfs pages).
// dataDirBytes is the blocks a target's data directory takes, its unlinked open files included.
func dataDirBytes(t *Target) int64 {
	return dirBytes(t.DataDir) + UnlinkedBytes(t.Pid, t.DataDir, true)
}

func dirBytes(dir string) int64 {
	if dir == "" {
		return 0
	}
	var n int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			n += allocated(info)
		}
		return nil
	})
	return n
}

// etcdDBBytes is the size of etcd's bbolt file (member/snap/db), 0 for other targets.
func etcdDBBytes(t *Target) int64 {
	if t.Name != TargetEtcd || t.DataDir == "" {
		return 0
	}
	info, err := os.Stat(filepath.Join(t.DataDir, "member", "snap", "db"))
	if err != nil {
		return 0
	}
	return info.Size()
}

// waitPacked waits until meganode-store's packer has made two passes since now and the
// last found nothing to pack (its metrics on the client port; a store without them, or with
// --value-compression=false, is not waited for).
func (st *stateRun) waitPacked(ctx context.Context, res *StateLoad) error {
	m, err := storeMetrics(st.target.Endpoints[0])
	if err != nil || m["meganode_packer_passes_total"] == 0 {
		return nil
	}
	passes := m["meganode_packer_passes_total"]
	t0 := time.Now()
	pw := StartProcWatch(st.target.Pid)
	defer func() {
		res.PackWaitSeconds = time.Since(t0).Seconds()
		res.PackWaitCPUUs = pw.Stop().CPUMicros
		res.ValuesPacked = int64(m["meganode_values_compressed_total"])
		res.PackedRawBytes = int64(m[`meganode_value_compressed_bytes_total{form="raw"}`])
		res.PackedStoredBytes = int64(m[`meganode_value_compressed_bytes_total{form="stored"}`])
		res.PackerBusySeconds = m["meganode_packer_busy_seconds_total"]
		st.cfg.logf("%s: packer done %.1f s after the compaction (%.1f s server CPU meanwhile): %d values packed, %s -> %s, busy %.1f s in all",
			st.target.Name, res.PackWaitSeconds, res.PackWaitCPUUs/1e6, res.ValuesPacked, FmtBytes(float64(res.PackedRawBytes)), FmtBytes(float64(res.PackedStoredBytes)), res.PackerBusySeconds)
	}()
	for {
		if m["meganode_packer_passes_total"] >= passes+2 && m["meganode_packer_idle"] == 1 {
			return nil
		}
		if time.Since(t0) > 30*time.Minute {
			return fmt.Errorf("packer still busy after %s", time.Since(t0))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if m, err = storeMetrics(st.target.Endpoints[0]); err != nil {
			return err
		}
	}
}

// storeMetrics reads meganode-store's meganode_* series from /metrics on its client port.
func storeMetrics(endpoint string) (map[string]float64, error) {
	resp, err := http.Get("http://" + endpoint + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "meganode_") {
			i := strings.LastIndexByte(l, ' ')
			if v, err := strconv.ParseFloat(l[i+1:], 64); err == nil {
				m[l[:i]] = v
			}
		}
	}
	return m, sc.Err()
}
