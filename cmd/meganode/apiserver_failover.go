package main

// The run of `meganode bench apiserver-failover` (issue 36's kube-apiserver target): a
// cluster as `meganode up --store-replicas 3` starts it, pods created at a steady rate, the
// store group's leader SIGKILLed and restarted, the API measured in the window before the
// kill and the window after it — by kube-apiserver's own metrics (cluster.Recorder: its
// request-duration histograms scraped at both ends and differenced) and by the client
// (every create call and every HTTP attempt under it) — then every pod checked.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/cluster"
)

// apiFailoverSpec is one run's parameters.
type apiFailoverSpec struct {
	Store         string        `json:"store"` // meganode or etcd
	Nodes         int           `json:"nodes"`
	StoreReplicas int           `json:"store_replicas"`
	Pods          int           `json:"pods"`
	Rate          float64       `json:"rate_per_sec"`
	Concurrency   int           `json:"max_in_flight"`
	Warmup        time.Duration `json:"warmup_ns"`
	Window        time.Duration `json:"window_ns"`
	Downtime      time.Duration `json:"downtime_ns"`
	CallTimeout   time.Duration `json:"call_timeout_ns"`
	Settle        time.Duration `json:"settle_timeout_ns"`
	StateDir      string        `json:"state_dir"`
	Keep          bool          `json:"-"`
	Log           io.Writer     `json:"-"` // the raw log (timestamped lines)
	Progress      *bench.Progress
}

// apiFailoverWindow is one measured window.
type apiFailoverWindow struct {
	bench.Window
	// Server: kube-apiserver's metrics over the window (every client: KWOK's leases and
	// node status, the scheduler, the controller-manager, this load), the store operations
	// it issued, the CPU of every process.
	Server *cluster.Report `json:"server"`
	// Client: the creates this bench issued (client-go's calls; client-go's own retries are
	// inside a call) and every HTTP attempt under them.
	Calls         []bench.CallStats  `json:"client_calls"`
	Attempts      []bench.CallStats  `json:"client_http_attempts"`
	CallErrors    []bench.ErrorCount `json:"client_call_errors,omitempty"`
	AttemptErrors []bench.ErrorCount `json:"client_attempt_errors,omitempty"`
	// AuditFailures: every client's requests kube-apiserver answered with a code ≥ 400 but
	// 404, from its audit log, by client, verb, resource, code, reason and message.
	AuditFailures []bench.ErrorCount `json:"audit_failures,omitempty"`
	// The machine: busy (user+nice+system) CPU seconds over all cores, the cores' count, and
	// this bench's own CPU (the load generator shares the cores).
	HostBusyCPUSeconds float64 `json:"host_busy_cpu_seconds"`
	HostCores          int     `json:"host_cores"`
	HostBusyPercent    float64 `json:"host_busy_percent"`
	BenchCPUSeconds    float64 `json:"bench_cpu_seconds"`
}

// apiFailoverKill is what happened to the store's leader.
type apiFailoverKill struct {
	At        time.Time `json:"at"`
	Leader    string    `json:"leader"`
	Pid       int       `json:"pid"`
	NewLeader string    `json:"new_leader,omitempty"`
	// From the SIGKILL: the surviving members name a new leader; the first create issued
	// after the kill returns successfully.
	NewLeaderMs      float64 `json:"new_leader_ms"`
	FirstCreateOKMs  float64 `json:"first_create_ok_after_kill_ms"`
	LongestAcrossMs  float64 `json:"longest_create_across_kill_ms"`
	RestartedAfterMs float64 `json:"restarted_after_ms"`
	RestartedPid     int     `json:"restarted_pid"`
	// The restarted member's applied index reached the leader's index at its restart.
	CaughtUpMs float64 `json:"caught_up_after_restart_ms"`
	// At the end every member answered HashKV at one revision with the same hash.
	HashAgreed bool   `json:"hash_agreed"`
	HashNote   string `json:"hash_note,omitempty"`
}

// apiFailoverCheck is the end's check of the objects and of the watch.
type apiFailoverCheck struct {
	Created         int `json:"created"`       // creates that succeeded (by an answer, or AlreadyExists on a retry)
	AnswerLost      int `json:"answer_lost"`   // of those: a retry found the object an earlier, failed attempt had created
	FailedPods      int `json:"failed_pods"`   // pods never created after every retry
	Present         int `json:"present"`       // created pods listed at the end (a quorum read)
	Missing         int `json:"missing"`       // created, acknowledged, absent at the end
	Bound           int `json:"bound"`         // present pods with spec.nodeName
	Running         int `json:"running"`       // present pods Running
	Unexpected      int `json:"unexpected"`    // listed pods this run never saw acknowledged
	WatchAdded      int `json:"watch_added"`   // created pods whose ADDED event the watch delivered
	WatchMissing    int `json:"watch_missing"` // created pods the watch never delivered
	WatchRestarts   int `json:"watch_restarts"`
	WatchExpired    int `json:"watch_expired"` // 410 Gone: the watch could not resume (a gap)
	WatchErrors     int `json:"watch_errors"`
	bench.RVOrder   `json:"watch_rv_order"`
	SettleSeconds   float64 `json:"settle_seconds"` // from the end of creation until every pod was bound (or the timeout)
	LastListRV      string  `json:"last_list_resource_version"`
	WatchFirstIssue string  `json:"watch_first_issue,omitempty"`
}

// apiFailoverResult is the whole run (apiserver-failover.json).
type apiFailoverResult struct {
	Spec     apiFailoverSpec      `json:"spec"`
	Start    time.Time            `json:"start"` // the first create
	Kill     apiFailoverKill      `json:"kill"`
	Windows  []apiFailoverWindow  `json:"windows"` // before, after
	Check    apiFailoverCheck     `json:"check"`
	Timeline []bench.TimelineStep `json:"create_timeline"` // per second, from 10 s before the kill to the window's end
	// Over the whole run.
	CallErrors    []bench.ErrorCount `json:"client_call_errors_all,omitempty"`
	AttemptErrors []bench.ErrorCount `json:"client_attempt_errors_all,omitempty"`
	AuditFailures []bench.ErrorCount `json:"audit_failures_all,omitempty"`
	Target        apiFailoverTarget  `json:"target"`
	Error         string             `json:"error,omitempty"`
}

// apiFailoverTarget is issue 36's target, judged on the window after the kill.
type apiFailoverTarget struct {
	// Every verb's p99 and every verb and resource's (kube-apiserver's histogram, all clients;
	// LIST and WATCH aside) ≤ 1 s, and the client's creates' p99 ≤ 1 s.
	ServerP99OK bool     `json:"server_p99_per_verb_and_resource_le_1s"`
	ClientP99OK bool     `json:"client_create_p99_le_1s"`
	Over        []string `json:"over,omitempty"`
	// No request of this client failed with anything but a timeout that was retried (by
	// client-go on Retry-After, or by this bench); no pod failed.
	OnlyRetriedTimeouts bool     `json:"only_retried_timeouts"`
	Failures            []string `json:"failures,omitempty"`
	// kube-apiserver's answers ≥ 500 to every client in the window after the kill (its metric
	// carries the code only: a 500 may be a ServerTimeout, which client-go retries).
	Server5xx float64 `json:"server_5xx_after_kill"`
	// Every acknowledged pod present at the end; the watch's resourceVersions never went back.
	AllPresent bool `json:"all_present"`
	RVOK       bool `json:"watch_rv_never_back"`
	Met        bool `json:"met"`
}

// callLog collects samples from many goroutines.
type callLog struct {
	mu sync.Mutex
	s  []bench.CallSample
}

func (l *callLog) add(c bench.CallSample) {
	l.mu.Lock()
	l.s = append(l.s, c)
	l.mu.Unlock()
}

func (l *callLog) all() []bench.CallSample {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]bench.CallSample(nil), l.s...)
}

func (s apiFailoverSpec) logf(format string, a ...any) {
	line := fmt.Sprintf("%s "+format, append([]any{time.Now().Format("15:04:05.000")}, a...)...)
	if s.Log != nil {
		fmt.Fprintln(s.Log, line)
	}
	s.Progress.Printf("%s", line)
}

// storeLeader is the member that answers Status as its own leader, skipping down.
func storeLeader(ctx context.Context, st *cluster.State, down string, within time.Duration) (*cluster.Component, error) {
	for deadline := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
		for _, c := range st.StoreMembers() {
			if c.Name == down {
				continue
			}
			s, err := cluster.MemberStatus(ctx, c.URL, time.Second)
			if err == nil && s.Leader != 0 && s.Leader == s.Header.MemberId {
				return c, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("no store member answers as leader after %s", within)
		}
	}
}

// podLoad creates pods at a steady rate, open loop: a create starts on its tick whatever the
// ones before it are doing (up to Concurrency in flight), so a stall shows in the latencies
// instead of slowing the load.
type podLoad struct {
	spec       apiFailoverSpec
	cs         kubernetes.Interface
	ns, run    string
	calls      *callLog
	inFlight   chan struct{}
	mu         sync.Mutex
	created    map[string]bool
	answerLost atomic.Int64
	failed     atomic.Int64
	issued     atomic.Int64
	wg         sync.WaitGroup
}

func (l *podLoad) name(i int) string { return fmt.Sprintf("apif-%s-%06d", l.run, i) }

// run issues creates until Pods are issued or stop closes; it returns when every create
// issued has finished.
func (l *podLoad) runLoad(ctx context.Context, start time.Time, stop <-chan struct{}) {
	every := time.Duration(float64(time.Second) / l.spec.Rate)
	for i := 0; i < l.spec.Pods; i++ {
		at := start.Add(time.Duration(i) * every)
		select {
		case <-ctx.Done():
			l.wg.Wait()
			return
		case <-stop:
			l.wg.Wait()
			return
		case <-time.After(time.Until(at)):
		}
		select {
		case l.inFlight <- struct{}{}:
		case <-ctx.Done():
			l.wg.Wait()
			return
		}
		l.issued.Add(1)
		l.wg.Add(1)
		go func(i int) {
			defer func() { <-l.inFlight; l.wg.Done() }()
			l.create(ctx, i)
		}(i)
	}
	l.wg.Wait()
}

// create creates pod i, retrying any failure (after 200 ms) until it succeeds, the context
// ends or 50 attempts failed; a retry answered AlreadyExists means an earlier attempt was
// applied and its answer lost.
func (l *podLoad) create(ctx context.Context, i int) {
	name := l.name(i)
	for attempt := 0; attempt < 50 && ctx.Err() == nil; attempt++ {
		c, cancel := context.WithTimeout(ctx, l.spec.CallTimeout)
		start := time.Now()
		_, err := l.cs.CoreV1().Pods(l.ns).Create(c, cluster.PodObject(l.ns, name, l.run), metav1.CreateOptions{})
		s := bench.CallSample{Start: start, Dur: time.Since(start), Verb: "POST", Resource: "pods"}
		cancel()
		if err != nil && attempt > 0 && apierrors.IsAlreadyExists(err) {
			l.answerLost.Add(1)
			err = nil
		}
		if err == nil {
			l.calls.add(s)
			l.mu.Lock()
			l.created[name] = true
			l.mu.Unlock()
			return
		}
		s.Err, s.Timeout = classifyErr(err)
		var st apierrors.APIStatus
		if errors.As(err, &st) {
			s.Code = int(st.Status().Code)
		}
		l.calls.add(s)
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	l.failed.Add(1)
}

func (l *podLoad) createdSet() map[string]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]bool, len(l.created))
	for k := range l.created {
		out[k] = true
	}
	return out
}

// podWatch follows the load's pods from before the first create: resourceVersions in order,
// every create's ADDED, resumed from the last resourceVersion when the stream ends.
type podWatch struct {
	logf     func(string, ...any)
	mu       sync.Mutex
	order    bench.RVOrder
	added    map[string]bool
	bound    map[string]bool
	restarts int
	expired  int
	errs     int
	issue    string
}

func (w *podWatch) run(ctx context.Context, cs kubernetes.Interface, ns, selector, rv string) {
	for ctx.Err() == nil {
		wi, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			w.mu.Lock()
			w.errs++
			if w.issue == "" {
				w.issue = "watch: " + err.Error()
			}
			w.mu.Unlock()
			time.Sleep(500 * time.Millisecond)
			continue
		}
		for ev := range wi.ResultChan() {
			w.mu.Lock()
			switch ev.Type {
			case watch.Error:
				w.errs++
				if st, ok := ev.Object.(*metav1.Status); ok {
					if w.issue == "" {
						w.issue = fmt.Sprintf("watch error %d %s: %s", st.Code, st.Reason, st.Message)
					}
					if st.Code == http.StatusGone {
						// Cannot resume: relist (the objects between are not delivered: a gap).
						w.expired++
						if l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector}); err == nil {
							rv = l.ResourceVersion
						}
					}
				}
			case watch.Bookmark:
				if p, ok := ev.Object.(*corev1.Pod); ok {
					v, _ := strconv.ParseInt(p.ResourceVersion, 10, 64)
					w.order.Observe(v, true, "bookmark")
					rv = p.ResourceVersion
				}
			default:
				if p, ok := ev.Object.(*corev1.Pod); ok {
					v, _ := strconv.ParseInt(p.ResourceVersion, 10, 64)
					w.order.Observe(v, false, fmt.Sprintf("%s %s", ev.Type, p.Name))
					rv = p.ResourceVersion
					if ev.Type == watch.Added {
						w.added[p.Name] = true
					}
					if p.Spec.NodeName != "" {
						w.bound[p.Name] = true
					}
				}
			}
			w.mu.Unlock()
		}
		if ctx.Err() == nil {
			w.mu.Lock()
			w.restarts++
			last := w.order.Last
			w.mu.Unlock()
			w.logf("the pods' watch ended (resourceVersion %d): resuming from %s", last, rv)
		}
	}
}

func (w *podWatch) boundCount(names map[string]bool) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for k := range names {
		if w.bound[k] {
			n++
		}
	}
	return n
}

// windowMeter measures one window: kube-apiserver's metrics (a cluster.Recorder), the
// machine's CPU and this bench's.
type windowMeter struct {
	name  string
	from  time.Time
	rec   *cluster.Recorder
	host  bench.HostCPU
	self  *bench.ProcWatch
	extra map[string]*bench.ProcWatch // processes started during the window (the restarted member)
}

func startWindow(ctx context.Context, st *cluster.State, name string) (*windowMeter, error) {
	m := &windowMeter{name: name, extra: map[string]*bench.ProcWatch{}}
	m.host, _ = bench.ReadHostCPU()
	m.self = bench.StartProcWatch(os.Getpid())
	m.from = time.Now()
	rec, err := cluster.StartRecorder(ctx, st, 5*time.Second)
	if err != nil {
		return nil, err
	}
	m.rec = rec
	return m, nil
}

func (m *windowMeter) stop(ctx context.Context) (apiFailoverWindow, error) {
	to := time.Now()
	rep, err := m.rec.Stop(ctx, nil)
	host, _ := bench.ReadHostCPU()
	self := m.self.Stop()
	w := apiFailoverWindow{Window: bench.Window{Name: m.name, From: m.from, To: to}, Server: rep, HostCores: cpuCount()}
	if err != nil {
		return w, err
	}
	for name, pw := range m.extra {
		u := pw.Stop()
		if u.Measured {
			sec := rep.Seconds
			rep.Components = append(rep.Components, cluster.Usage{Name: name + " (restarted)", CPUSeconds: u.CPUMicros / 1e6,
				CPUPercent: 100 * u.CPUMicros / 1e6 / sec, RSSMiB: float64(u.RSSBytes) / (1 << 20), PeakRSSMiB: float64(u.PeakRSS) / (1 << 20)})
		}
	}
	if host.Total > m.host.Total {
		w.HostBusyCPUSeconds = float64(host.Busy-m.host.Busy) / 100
		w.HostBusyPercent = 100 * float64(host.Busy-m.host.Busy) / float64(host.Total-m.host.Total)
	}
	w.BenchCPUSeconds = self.CPUMicros / 1e6
	return w, nil
}

// clientSide fills in the window's client figures (once every call has returned: a call
// belongs to the window it started in) and kube-apiserver's failures its log names.
func (w *apiFailoverWindow) clientSide(calls, attempts, audit []bench.CallSample) {
	w.Calls = bench.SummarizeCalls(calls, w.Window)
	w.Attempts = bench.SummarizeCalls(attempts, w.Window)
	w.CallErrors = bench.CountErrors(calls, w.Window)
	w.AttemptErrors = bench.CountErrors(attempts, w.Window)
	w.AuditFailures = bench.CountErrors(audit, w.Window)
}

// cpuCount is the cores /proc/stat lists.
func cpuCount() int {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "cpu") && len(l) > 3 && l[3] >= '0' && l[3] <= '9' {
			n++
		}
	}
	return n
}

// runAPIFailover is the run. It returns what it measured even when a step failed.
func runAPIFailover(ctx context.Context, s apiFailoverSpec) (res *apiFailoverResult, err error) {
	res = &apiFailoverResult{Spec: s}
	defer func() {
		if err != nil {
			res.Error = err.Error()
		}
	}()
	s.logf("up: %d KWOK nodes, %s group of %d members (meganode up --store %s --store-replicas %d), state in %s", s.Nodes, storeName(s.Store), s.StoreReplicas, s.Store, s.StoreReplicas, s.StateDir)
	began := time.Now()
	// Every request's answer goes to kube-apiserver's audit log: the failures of every client
	// are read from it at the end.
	auditFlags, auditLog, err := auditArgs(s.StateDir)
	if err != nil {
		return res, err
	}
	var st *cluster.State
	for attempt := 1; ; attempt++ {
		st, err = cluster.Up(ctx, cluster.UpOptions{StateDir: s.StateDir, Store: s.Store, StoreReplicas: s.StoreReplicas,
			Nodes: s.Nodes, Pods: s.Pods, APIServerArgs: auditFlags, Progress: s.Progress})
		// A free port picked for a member can be taken, before the member binds it, as the
		// local port of a connection another process (or member) opens: start again.
		if err == nil || attempt == 3 || !strings.Contains(err.Error(), "Address already in use") {
			break
		}
		s.logf("up failed (a port taken before its member bound it), starting again: %s", strings.SplitN(err.Error(), "\n", 2)[0])
	}
	if st != nil && !s.Keep {
		defer func() {
			if derr := st.Down(15*time.Second, nil); derr != nil {
				s.logf("down: %v", derr)
			}
		}()
	}
	if err != nil {
		return res, err
	}
	var ms []string
	for _, c := range st.StoreMembers() {
		ms = append(ms, fmt.Sprintf("%s pid %d %s", c.Name, c.Pid, c.URL))
	}
	s.logf("cluster up in %.1f s, %d nodes Ready; store members: %s", time.Since(began).Seconds(), st.Nodes, strings.Join(ms, "; "))

	// The load's client records every HTTP attempt; the watch and the checks use another.
	attempts := &callLog{}
	cfg, err := cluster.RESTConfig(st)
	if err != nil {
		return res, err
	}
	cfg.Timeout = 0 // each create has its own deadline (CallTimeout)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &attemptRecorder{next: rt, log: attempts} })
	loadCS, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return res, err
	}
	// The watch's and the checks' client: no overall timeout (it would end the watch).
	wcfg, err := cluster.RESTConfig(st)
	if err != nil {
		return res, err
	}
	wcfg.Timeout = 0
	cs, err := kubernetes.NewForConfig(wcfg)
	if err != nil {
		return res, err
	}
	ns := cluster.LoadNamespace
	if err := cluster.EnsureNamespace(ctx, cs, ns); err != nil {
		return res, err
	}
	run := fmt.Sprintf("%x", time.Now().UnixNano()%(1<<32))
	selector := cluster.LoadLabel + "=" + run
	first, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return res, err
	}
	pw := &podWatch{logf: s.logf, added: map[string]bool{}, bound: map[string]bool{}}
	wctx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); pw.run(wctx, cs, ns, selector, first.ResourceVersion) }()
	defer func() { stopWatch(); <-watchDone }()

	load := &podLoad{spec: s, cs: loadCS, ns: ns, run: run, calls: &callLog{}, inFlight: make(chan struct{}, s.Concurrency), created: map[string]bool{}}
	stopLoad := make(chan struct{})
	loadDone := make(chan struct{})
	res.Start = time.Now()
	go func() { defer close(loadDone); load.runLoad(ctx, res.Start, stopLoad) }()
	stopLoadOnce := sync.OnceFunc(func() { close(stopLoad) })
	defer func() { stopLoadOnce(); <-loadDone }()
	s.logf("creating %d pods at %.0f/s (run %s); warm-up %s, then the window before the kill (%s)", s.Pods, s.Rate, run, s.Warmup, s.Window)

	sleepUntil := func(t time.Time) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(t)):
			return nil
		}
	}
	// One line a second to the raw log until `until`: the creates that returned in that second.
	ticker := func(until time.Time) {
		for t := time.Now().Truncate(time.Second).Add(time.Second); ctx.Err() == nil; t = t.Add(time.Second) {
			if !t.Before(until) {
				_ = sleepUntil(until)
				return
			}
			_ = sleepUntil(t)
			var ok, failed int
			var longest time.Duration
			for _, c := range load.calls.all() {
				if e := c.End(); !e.Before(t.Add(-time.Second)) && e.Before(t) {
					if c.Err == "" {
						ok++
					} else {
						failed++
					}
					longest = max(longest, c.Dur)
				}
			}
			if s.Log != nil {
				fmt.Fprintf(s.Log, "%s t=%+.0fs creates returned in the last second: %d ok, %d failed, longest %.0f ms; issued %d, created %d\n",
					t.Format("15:04:05.000"), t.Sub(res.Start).Seconds(), ok, failed, float64(longest)/1e6, load.issued.Load(), len(load.createdSet()))
			}
		}
	}
	if err := sleepUntil(res.Start.Add(s.Warmup)); err != nil {
		return res, err
	}
	before, err := startWindow(ctx, st, "before-kill")
	if err != nil {
		return res, err
	}
	s.logf("window before the kill starts")
	ticker(before.from.Add(s.Window))
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	leader, err := storeLeader(ctx, st, "", 15*time.Second)
	if err != nil {
		return res, err
	}
	wb, err := before.stop(context.WithoutCancel(ctx))
	res.Windows = append(res.Windows, wb)
	if err != nil {
		return res, err
	}
	// The window after the kill takes its first scrape before it: while a member is down,
	// kube-apiserver's /metrics waits up to a second per storage for its size (a Status to a
	// random member, the dead one among them), some 20 s in all.
	after, err := startWindow(ctx, st, "after-kill")
	if err != nil {
		return res, err
	}

	// The kill: its moment is the signal's (Kill returns once the process is gone).
	res.Kill.Leader, res.Kill.Pid = leader.Name, leader.Pid
	kill := time.Now()
	if err := leader.Kill(); err != nil {
		return res, err
	}
	// The windows meet at the kill: a call belongs to the window it returned in.
	res.Kill.At, after.from, res.Windows[0].To = kill, kill, kill
	s.logf("SIGKILL store leader %s (pid %d) at %s; window after the kill starts", leader.Name, leader.Pid, kill.Format("15:04:05.000"))
	newLeader := make(chan struct{})
	go func() {
		defer close(newLeader)
		if nl, err := storeLeader(ctx, st, leader.Name, 30*time.Second); err == nil {
			res.Kill.NewLeader, res.Kill.NewLeaderMs = nl.Name, float64(time.Since(kill))/1e6
			s.logf("new store leader %s, %.0f ms after the kill", nl.Name, res.Kill.NewLeaderMs)
		} else {
			s.logf("%v", err)
		}
	}()
	restarted, caughtUp := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(caughtUp)
		restartedOnce := sync.OnceFunc(func() { close(restarted) })
		defer restartedOnce()
		if err := sleepUntil(kill.Add(s.Downtime)); err != nil {
			return
		}
		<-newLeader
		var target uint64
		if nl := st.Component(res.Kill.NewLeader); nl != nil {
			if ls, err := cluster.MemberStatus(ctx, nl.URL, time.Second); err == nil {
				target = ls.RaftIndex
			}
		}
		if err := st.Restart(leader.Name); err != nil {
			s.logf("restart %s: %v", leader.Name, err)
			return
		}
		c := st.Component(leader.Name)
		res.Kill.RestartedAfterMs, res.Kill.RestartedPid = float64(time.Since(kill))/1e6, c.Pid
		after.extra[c.Name] = bench.StartProcWatch(c.Pid)
		restartedOnce()
		s.logf("restarted %s (pid %d), %.1f s after the kill; catching up to raft index %d", c.Name, c.Pid, res.Kill.RestartedAfterMs/1e3, target)
		restartAt := time.Now()
		for deadline := restartAt.Add(2 * time.Minute); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(50 * time.Millisecond) {
			ms, err := cluster.MemberStatus(ctx, c.URL, time.Second)
			if err == nil && ms.Leader != 0 && ms.RaftAppliedIndex >= target {
				res.Kill.CaughtUpMs = float64(time.Since(restartAt)) / 1e6
				s.logf("%s caught up (applied index %d ≥ %d) %.0f ms after its restart", c.Name, ms.RaftAppliedIndex, target, res.Kill.CaughtUpMs)
				return
			}
		}
		s.logf("%s did not catch up within 2 minutes", c.Name)
	}()
	ticker(kill.Add(s.Window))
	<-restarted // the restart is inside the window (validate: Downtime < Window)
	wa, err := after.stop(context.WithoutCancel(ctx))
	res.Windows = append(res.Windows, wa)
	if err != nil {
		return res, err
	}
	s.logf("window after the kill ends; stopping the load")
	stopLoadOnce()
	<-loadDone
	loadEnd := time.Now()

	calls := load.calls.all()
	if d, ok := bench.FirstSuccessAfter(calls, kill, "POST"); ok {
		res.Kill.FirstCreateOKMs = float64(d) / 1e6
	}
	res.Kill.LongestAcrossMs = float64(bench.LongestAcross(calls, kill, "POST")) / 1e6
	res.Timeline = bench.CallTimeline(calls, "POST", kill, -10*time.Second, s.Window, time.Second)
	whole := bench.Window{Name: "run", From: res.Start, To: time.Now().Add(time.Hour)}
	res.CallErrors = bench.CountErrors(calls, whole)
	res.AttemptErrors = bench.CountErrors(attempts.all(), whole)
	var audit []bench.CallSample
	if f, err := os.Open(auditLog); err == nil {
		audit = auditFailures(f)
		f.Close()
	} else {
		s.logf("audit log: %v", err)
	}
	res.AuditFailures = bench.CountErrors(audit, whole)
	for i := range res.Windows {
		res.Windows[i].clientSide(calls, attempts.all(), audit)
	}

	// The end: every pod bound (or the settle timeout), a quorum list, the watch, HashKV.
	created := load.createdSet()
	chk := &res.Check
	chk.Created, chk.AnswerLost, chk.FailedPods = len(created), int(load.answerLost.Load()), int(load.failed.Load())
	s.logf("%d pods created (%d found created by an earlier attempt whose answer was lost), %d failed; waiting until every one is bound", chk.Created, chk.AnswerLost, chk.FailedPods)
	for deadline := loadEnd.Add(s.Settle); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(500 * time.Millisecond) {
		if pw.boundCount(created) == len(created) {
			break
		}
	}
	chk.SettleSeconds = time.Since(loadEnd).Seconds()
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return res, fmt.Errorf("final list: %w", err)
	}
	chk.LastListRV = list.ResourceVersion
	present := map[string]bool{}
	for _, p := range list.Items {
		present[p.Name] = true
		if !created[p.Name] {
			chk.Unexpected++
		}
		if p.Spec.NodeName != "" {
			chk.Bound++
		}
		if p.Status.Phase == corev1.PodRunning {
			chk.Running++
		}
	}
	chk.Present = len(list.Items) - chk.Unexpected
	for n := range created {
		if !present[n] {
			chk.Missing++
		}
	}
	time.Sleep(2 * time.Second) // the watch's last events
	pw.mu.Lock()
	for n := range created {
		if pw.added[n] {
			chk.WatchAdded++
		}
	}
	chk.WatchMissing = len(created) - chk.WatchAdded
	chk.WatchRestarts, chk.WatchExpired, chk.WatchErrors, chk.RVOrder, chk.WatchFirstIssue = pw.restarts, pw.expired, pw.errs, pw.order, pw.issue
	pw.mu.Unlock()
	<-caughtUp
	var herr error
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(500 * time.Millisecond) {
		if herr = st.SameStoreHash(ctx); herr == nil {
			break
		}
	}
	res.Kill.HashAgreed = herr == nil
	if herr != nil {
		res.Kill.HashNote = herr.Error()
	}
	s.logf("end: %d present, %d missing, %d bound, %d Running; watch: %d of %d ADDED, %d restarts, %d expired, resourceVersions never back: %v; HashKV agreed: %v",
		chk.Present, chk.Missing, chk.Bound, chk.Running, chk.WatchAdded, chk.Created, chk.WatchRestarts, chk.WatchExpired, chk.RVOrder.OK(), res.Kill.HashAgreed)
	res.Target = judgeAPIFailover(res)
	return res, nil
}

// sloVerbs are the verbs the 1 s SLO covers (EKS: gets and writes; LIST has 5 s/30 s).
var sloVerbs = map[string]bool{"GET": true, "POST": true, "PUT": true, "PATCH": true, "DELETE": true, "APPLY": true}

// judgeAPIFailover judges issue 36's target on the window after the kill.
func judgeAPIFailover(r *apiFailoverResult) apiFailoverTarget {
	t := apiFailoverTarget{ServerP99OK: true, ClientP99OK: true, OnlyRetriedTimeouts: true}
	var after *apiFailoverWindow
	for i := range r.Windows {
		if r.Windows[i].Name == "after-kill" {
			after = &r.Windows[i]
		}
	}
	if after == nil || after.Server == nil {
		t.ServerP99OK, t.ClientP99OK, t.OnlyRetriedTimeouts = false, false, false
		t.Failures = append(t.Failures, "no window after the kill was measured")
		return t
	}
	// Per verb over every resource, and per verb and resource (the SLO's own pairs: a few slow
	// creates of one resource hide in the verb's total).
	for _, a := range append(append([]cluster.APILatency(nil), after.Server.APIByVerb...), after.Server.API...) {
		if sloVerbs[a.Verb] && a.P99 > cluster.SLOMutatingSeconds {
			t.ServerP99OK = false
			what := a.Verb
			if a.Resource != "" || a.Subresource != "" {
				what += " " + strings.TrimSuffix(a.Resource+"/"+a.Subresource, "/")
			}
			t.Over = append(t.Over, fmt.Sprintf("kube-apiserver %s p99 %.2f s", what, a.P99))
		}
	}
	for _, c := range after.Calls {
		if c.P99Ms > 1000*cluster.SLOMutatingSeconds {
			t.ClientP99OK = false
			t.Over = append(t.Over, fmt.Sprintf("client %s %s p99 %.0f ms", c.Verb, c.Resource, c.P99Ms))
		}
	}
	for _, set := range []struct {
		who  string
		errs []bench.ErrorCount
	}{{"this client's calls", r.CallErrors}, {"this client's HTTP attempts", r.AttemptErrors}, {"kube-apiserver's audit log (every client)", r.AuditFailures}} {
		for _, e := range set.errs {
			if !e.Timeout {
				t.OnlyRetriedTimeouts = false
				t.Failures = append(t.Failures, fmt.Sprintf("%s: %d× %s", set.who, e.Count, e.Error))
			}
		}
	}
	if r.Check.FailedPods > 0 {
		t.OnlyRetriedTimeouts = false
		t.Failures = append(t.Failures, fmt.Sprintf("%d pods never created", r.Check.FailedPods))
	}
	for _, e := range after.Server.APIErrors {
		if code, _ := strconv.Atoi(e.Code); code >= 500 {
			t.Server5xx += e.Count
		}
	}
	t.AllPresent = r.Check.Missing == 0 && r.Check.FailedPods == 0
	t.RVOK = r.Check.RVOrder.OK() && r.Check.WatchExpired == 0
	t.Met = t.ServerP99OK && t.ClientP99OK && t.OnlyRetriedTimeouts && t.AllPresent && t.RVOK
	return t
}
