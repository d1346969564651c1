package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/meganode/meganode/internal/storeproc"
)

// `bench catch-up` (issue 36's catch-up target): a 3-member meganode-store group holds
// `bench state`'s data (N nodes, N pods, N node Leases, loaded as kube-apiserver creates
// them, then compacted); a learner is added (MemberAdd --learner) and started with
// --initial-cluster-state existing; the time until it serves — its raft log applied up to
// the leader's index at the add, and a serializable read of the last Lease answered — and
// its memory against the leader's.

// CatchUpSpec says which sizes.
type CatchUpSpec struct {
	Nodes    []int // objects of each kind, one run per size
	Clients  int   // load writers
	StoreBin string
	Log      io.Writer // progress lines
	StoreLog io.Writer // the members' own logs (nil: none)
}

// CatchUpRun is one size's figures.
type CatchUpRun struct {
	Nodes       int     `json:"nodes"`
	Objects     int64   `json:"objects"`
	ValueBytes  int64   `json:"value_bytes"`
	LoadSeconds float64 `json:"load_seconds"`
	// From the learner's process start: its ready line, and serving (caught up).
	ReadySeconds   float64 `json:"ready_seconds"`
	ServingSeconds float64 `json:"serving_seconds"`
	// The leader's raft index when the learner was added, and the learner's applied index
	// when it served.
	TargetIndex  uint64 `json:"target_index"`
	AppliedIndex uint64 `json:"applied_index"`
	// Resident and anonymous memory once the learner's memory settled.
	LeaderRSS   uint64  `json:"leader_rss_bytes"`
	LeaderAnon  uint64  `json:"leader_anon_bytes"`
	LearnerRSS  uint64  `json:"learner_rss_bytes"`
	LearnerAnon uint64  `json:"learner_anon_bytes"`
	LearnerPeak uint64  `json:"learner_peak_rss_bytes"`
	AnonRatio   float64 `json:"learner_to_leader_anon"`
	// How long after serving the learner's value packer was done (two passes, idle).
	SettleSeconds float64 `json:"memory_settled_after_seconds"`
	LearnerCPU    float64 `json:"learner_cpu_seconds"`
	LeaderCPU     float64 `json:"leader_cpu_seconds_during_catch_up"`
	Failed        string  `json:"failed,omitempty"`
	ServedValue   int     `json:"served_value_bytes"`
	LearnerLines  string  `json:"learner_log_tail,omitempty"`
}

func (s CatchUpSpec) logf(format string, a ...any) { logLine(s.Log, format, a...) }

// logLine writes one progress line, with the time, to w (nothing when w is nil).
func logLine(w io.Writer, format string, a ...any) {
	if w != nil {
		fmt.Fprintf(w, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, a...)...)
	}
}

// RunCatchUp runs every size in turn, each on a fresh group.
func RunCatchUp(ctx context.Context, s CatchUpSpec, onRun func(*CatchUpRun)) ([]*CatchUpRun, error) {
	var runs []*CatchUpRun
	for _, n := range s.Nodes {
		r, err := catchUpOnce(ctx, s, n)
		if r != nil {
			runs = append(runs, r)
			if onRun != nil {
				onRun(r)
			}
		}
		if err != nil {
			return runs, err
		}
	}
	return runs, nil
}

func catchUpOnce(ctx context.Context, s CatchUpSpec, nodes int) (*CatchUpRun, error) {
	res := &CatchUpRun{Nodes: nodes}
	g, leader, err := startGroupWithLeader(ctx, s.StoreLog)
	if err != nil {
		return nil, err
	}
	defer g.Stop()
	cfg := StateConfig{Nodes: nodes, Clients: s.Clients, Log: s.Log}
	cfg.normalize()
	st := &stateRun{cfg: cfg, target: &Target{Name: "meganode (3 members)", Endpoints: g.Endpoints(), Pid: leader.Pid()}, leaseRevs: make([]int64, nodes)}
	if err := st.connect(); err != nil {
		return nil, err
	}
	defer st.closeConns()
	t0 := time.Now()
	load, err := st.load(ctx)
	if err != nil {
		res.Failed = fmt.Sprintf("load: %v", err)
		return res, nil
	}
	res.LoadSeconds = time.Since(t0).Seconds()
	res.Objects, res.ValueBytes = load.Objects, load.ValueBytes
	cli := st.conns[0]

	lst, err := cli.Status(ctx, leader.Endpoint)
	if err != nil {
		return res, err
	}
	res.TargetIndex = lst.RaftIndex
	pp, err := storeproc.FreePort()
	if err != nil {
		return res, err
	}
	peer := fmt.Sprintf("http://127.0.0.1:%d", pp)
	if _, err := cli.MemberAddAsLearner(ctx, []string{peer}); err != nil {
		return res, fmt.Errorf("member add: %w", err)
	}
	lastKey := StateKey("leases", nodes-1)
	leaderWatch := StartProcWatch(leader.Pid())
	start := time.Now()
	learner, err := g.Join("m3", peer, nil, s.StoreLog)
	if err != nil {
		res.Failed = fmt.Sprintf("learner start: %v", err)
		return res, nil
	}
	defer learner.Stop()
	res.ReadySeconds = time.Since(start).Seconds()
	s.logf("learner ready in %.1f s; catching up to raft index %d", res.ReadySeconds, res.TargetIndex)
	// The learner may be too busy loading to take a connection within the dial timeout:
	// connected to in the loop, as a client would retry.
	var lc *clientv3.Client
	defer func() {
		if lc != nil {
			lc.Close()
		}
	}()
	for {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		if time.Since(start) > 10*time.Minute {
			res.Failed = "the learner did not catch up within 10 minutes"
			res.LearnerLines = learner.Tail()
			return res, nil
		}
		if lc == nil {
			// Dialled only: newClient's linearizable check read is one a learner refuses.
			if lc, err = clientv3.New(clientv3.Config{Endpoints: []string{learner.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}); err != nil {
				lc = nil
				time.Sleep(100 * time.Millisecond)
				continue
			}
		}
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		ls, err := lc.Status(c, learner.Endpoint)
		var got *clientv3.GetResponse
		if err == nil && ls.RaftAppliedIndex >= res.TargetIndex {
			got, err = lc.Get(c, lastKey, clientv3.WithSerializable())
		}
		cancel()
		if got != nil && len(got.Kvs) == 1 {
			res.ServingSeconds = time.Since(start).Seconds()
			res.AppliedIndex = ls.RaftAppliedIndex
			res.ServedValue = len(got.Kvs[0].Value)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	lu := leaderWatch.Stop()
	res.LeaderCPU = lu.CPUMicros / 1e6
	s.logf("learner serving in %.1f s (applied index %d)", res.ServingSeconds, res.AppliedIndex)
	// Memory once the learner settles: its value packer compresses what the
	// snapshot brought (as the leader's did after the load), then stops.
	// Settled: two packer passes since serving, the last one idle (as `bench state` waits for
	// the leader's after the load); without the packer's metrics, memory steady for 2 s.
	settle := time.Now()
	if m, err := storeMetrics(learner.Endpoint); err == nil && m["meganode_packer_passes_total"] > 0 {
		passes := m["meganode_packer_passes_total"]
		for time.Since(settle) < 15*time.Minute && ctx.Err() == nil {
			time.Sleep(500 * time.Millisecond)
			if m, err = storeMetrics(learner.Endpoint); err != nil || (m["meganode_packer_passes_total"] >= passes+2 && m["meganode_packer_idle"] == 1) {
				break
			}
		}
	} else {
		var last uint64
		for time.Since(settle) < 3*time.Second || (time.Since(settle) < 2*time.Minute && !within(anonBytes(learner.Pid()), last, 0.01)) {
			last = anonBytes(learner.Pid())
			time.Sleep(2 * time.Second)
		}
	}
	time.Sleep(time.Second) // let freed memory settle before reading RSS
	res.SettleSeconds = time.Since(settle).Seconds()
	if ps, err := ReadProc(learner.Pid()); err == nil {
		res.LearnerCPU = ps.CPUMicros() / 1e6
		res.LearnerRSS, res.LearnerPeak = ps.RSSBytes, ps.PeakRSS
	}
	res.LearnerAnon = anonBytes(learner.Pid())
	res.LeaderRSS, res.LeaderAnon = rssBytes(leader.Pid()), anonBytes(leader.Pid())
	if res.LeaderAnon > 0 {
		res.AnonRatio = float64(res.LearnerAnon) / float64(res.LeaderAnon)
	}
	return res, nil
}

func within(a, b uint64, frac float64) bool {
	if b == 0 {
		return false
	}
	d := float64(a) - float64(b)
	return d*d <= frac*frac*float64(b)*float64(b)
}

// startGroupWithLeader starts a fresh 3-member group and answers it with its leader.
func startGroupWithLeader(ctx context.Context, log io.Writer) (*storeproc.Group, *storeproc.Proc, error) {
	g, err := storeproc.StartGroup(3, nil, log)
	if err != nil {
		return nil, nil, err
	}
	leader, err := groupLeaderProc(ctx, g)
	if err != nil {
		g.Stop()
		return nil, nil, err
	}
	return g, leader, nil
}

// groupLeaderProc answers the member every member names as leader.
func groupLeaderProc(ctx context.Context, g *storeproc.Group) (*storeproc.Proc, error) {
	cli, err := newClient(g.Endpoints())
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, m := range g.Members {
			c, cancel := context.WithTimeout(ctx, time.Second)
			st, err := cli.Status(c, m.Endpoint)
			cancel()
			if err == nil && st.Leader == st.Header.MemberId {
				return m, nil
			}
		}
	}
	return nil, fmt.Errorf("the group elected no leader within 15 s")
}

// CatchUpModel is serving time = Fixed + PerObject × objects, fitted by least squares on
// the runs given.
type CatchUpModel struct {
	FixedSeconds     float64 `json:"fixed_seconds"`
	PerObjectMicros  float64 `json:"per_object_us"`
	FittedOn         []int   `json:"fitted_on_nodes"`
	AnonBytesPerObj  float64 `json:"leader_anon_bytes_per_object"`
	AnonFixedBytes   float64 `json:"leader_anon_fixed_bytes"`
	PredictedNodes   int     `json:"checked_nodes,omitempty"`
	PredictedSeconds float64 `json:"predicted_seconds,omitempty"`
	MeasuredSeconds  float64 `json:"measured_seconds,omitempty"`
	ErrorPercent     float64 `json:"error_percent,omitempty"`
}

// FitCatchUp fits the model on runs and, if check is one of the sizes not fitted on,
// compares its prediction with that run.
func FitCatchUp(fit []*CatchUpRun, check *CatchUpRun) CatchUpModel {
	var m CatchUpModel
	xs, ys, as := make([]float64, 0, len(fit)), make([]float64, 0, len(fit)), make([]float64, 0, len(fit))
	for _, r := range fit {
		xs = append(xs, float64(r.Objects))
		ys = append(ys, r.ServingSeconds)
		as = append(as, float64(r.LeaderAnon))
		m.FittedOn = append(m.FittedOn, r.Nodes)
	}
	b, a := linearFit(xs, ys)
	m.PerObjectMicros, m.FixedSeconds = b*1e6, a
	bm, am := linearFit(xs, as)
	m.AnonBytesPerObj, m.AnonFixedBytes = bm, am
	if check != nil {
		m.PredictedNodes = check.Nodes
		m.PredictedSeconds = m.Predict(check.Objects)
		m.MeasuredSeconds = check.ServingSeconds
		if check.ServingSeconds > 0 {
			m.ErrorPercent = 100 * (m.PredictedSeconds - check.ServingSeconds) / check.ServingSeconds
		}
	}
	return m
}

// Predict answers the serving time for a group holding objects.
func (m CatchUpModel) Predict(objects int64) float64 {
	return m.FixedSeconds + m.PerObjectMicros*float64(objects)/1e6
}

// linearFit is least squares y = b·x + a (one point: through the origin).
func linearFit(xs, ys []float64) (b, a float64) {
	n := float64(len(xs))
	if n == 0 {
		return 0, 0
	}
	if n == 1 {
		if xs[0] == 0 {
			return 0, ys[0]
		}
		return ys[0] / xs[0], 0
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	d := n*sxx - sx*sx
	if math.Abs(d) < 1e-12 {
		return 0, sy / n
	}
	b = (n*sxy - sx*sy) / d
	return b, (sy - b*sx) / n
}
