package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/cluster"
)

type benchAPIFailoverFlags struct {
	nodes, replicas, pods, concurrency        int
	rate                                      float64
	warmup, window, downtime, timeout, settle time.Duration
	out, stateDir, store                      string
	keep                                      bool
}

// newBenchAPIFailoverCmd: issue 36's kube-apiserver target — the store group's leader killed
// under a cluster creating pods, the API's latency per verb in the minute after.
func newBenchAPIFailoverCmd() *cobra.Command {
	f := &benchAPIFailoverFlags{}
	cmd := &cobra.Command{
		Use:   "apiserver-failover",
		Short: "kube-apiserver on a 3-member store: SIGKILL the store's leader while pods are created; API latency per verb before and after, failures, every pod checked",
		Long: `apiserver-failover starts a cluster as 'meganode up --store-replicas 3 --nodes N' does
(kube-apiserver given every member's URL, KWOK nodes, the controller-manager and kube-scheduler),
waits until every node is Ready, and creates pods at --rate per second, open loop (a create
starts on its tick whatever the earlier ones are doing). After --warmup the window before the
kill (--window long) is measured; then the store group's leader (the member whose Status names
itself) is SIGKILLed and the window after the kill is measured; the killed member restarts
--downtime after the kill, inside that window, and catches up.

Each window has kube-apiserver's own figures (apiserver_request_duration_seconds scraped at
both ends and differenced: p50/p99 per verb and per verb/resource, every client), its error
codes, its store operations, and the CPU seconds of every process; and the client's: every
create call (client-go's; its own retries on Retry-After are inside a call) and every HTTP
attempt under it, with each failure's error. A failed create is retried by the bench (a retry
answered AlreadyExists means an earlier attempt was applied and its answer lost). At the end
every acknowledged pod must be present and bound, a watch opened before the first create must
have delivered every create with resourceVersions that never go back, and the members' HashKV
must agree. Writes apiserver-failover.json, summary.txt and apiserver-failover.log to --out.`,
		Example: `  meganode bench apiserver-failover --nodes 1000 --out docs/bench/apiserver-failover
  meganode bench apiserver-failover --nodes 100 --window 30s --rate 20
  meganode bench apiserver-failover --store etcd --nodes 1000 --out /tmp/apif-etcd`,
		Args: noArgs,
		RunE: action(f, runBenchAPIFailover),
	}
	fs := cmd.Flags()
	fs.IntVar(&f.nodes, "nodes", 1000, "KWOK nodes")
	fs.StringVar(&f.store, "store", cluster.StoreMeganode, "the store group: meganode, or etcd (real etcd v3.6, its defaults, data on --state-dir's disk) for comparison")
	fs.IntVar(&f.replicas, "store-replicas", 3, "members of the store group")
	fs.Float64Var(&f.rate, "rate", 50, "pod creates per second")
	fs.IntVar(&f.pods, "pods", 0, "pods to create at most (0: --rate × (--warmup + 2 × --window), creates through both windows)")
	fs.DurationVar(&f.warmup, "warmup", 20*time.Second, "creates before the window before the kill begins")
	fs.DurationVar(&f.window, "window", time.Minute, "each measured window (before the kill, after it)")
	fs.DurationVar(&f.downtime, "downtime", 10*time.Second, "how long the killed member stays down (less than --window)")
	fs.IntVar(&f.concurrency, "concurrency", 1000, "creates in flight at most")
	fs.DurationVar(&f.timeout, "call-timeout", 30*time.Second, "deadline of each create call (client-go's retries included)")
	fs.DurationVar(&f.settle, "settle-timeout", 3*time.Minute, "how long to wait after the load for every pod to be bound")
	fs.StringVar(&f.stateDir, "state-dir", filepath.Join(os.TempDir(), "meganode-apiserver-failover"), "the cluster's state directory (pids, logs, store data)")
	fs.BoolVar(&f.keep, "keep", false, "leave the cluster running at the end")
	fs.StringVar(&f.out, "out", "", "directory for apiserver-failover.json, summary.txt and apiserver-failover.log (default: print only)")
	completeValues(cmd, "store", cluster.StoreMeganode, cluster.StoreEtcd)
	return cmd
}

func (f *benchAPIFailoverFlags) validate() error {
	if err := oneOf("store", f.store, cluster.StoreMeganode, cluster.StoreEtcd); err != nil {
		return err
	}
	if f.nodes < 1 || f.replicas < 3 || f.rate <= 0 || f.pods < 0 || f.concurrency < 1 {
		return usagef("--nodes ≥ 1, --store-replicas ≥ 3, --rate > 0, --pods ≥ 0 and --concurrency ≥ 1")
	}
	if f.window <= 0 || f.warmup < 0 || f.downtime <= 0 || f.downtime >= f.window || f.timeout <= 0 {
		return usagef("--window > 0, --warmup ≥ 0, 0 < --downtime < --window and --call-timeout > 0")
	}
	return nil
}

func runBenchAPIFailover(ctx context.Context, cmd *cobra.Command, f *benchAPIFailoverFlags) error {
	pods := f.pods
	if pods == 0 {
		pods = int(math.Ceil(f.rate * (f.warmup + 2*f.window).Seconds()))
	}
	var logw io.Writer
	if f.out != "" {
		if err := os.MkdirAll(f.out, 0o755); err != nil {
			return err
		}
		lf, err := os.Create(filepath.Join(f.out, "apiserver-failover.log"))
		if err != nil {
			return err
		}
		defer lf.Close()
		logw = lf
	}
	spec := apiFailoverSpec{Store: f.store, Nodes: f.nodes, StoreReplicas: f.replicas, Pods: pods, Rate: f.rate, Concurrency: f.concurrency,
		Warmup: f.warmup, Window: f.window, Downtime: f.downtime, CallTimeout: f.timeout, Settle: f.settle,
		StateDir: f.stateDir, Keep: f.keep, Log: logw, Progress: bench.NewProgress(os.Stderr)}
	res, err := runAPIFailover(ctx, spec)
	w := cmd.OutOrStdout()
	summary := apiFailoverSummary(res)
	fmt.Fprint(w, summary)
	if logw != nil {
		fmt.Fprint(logw, "\n"+summary)
	}
	if werr := writeBenchOut(f.out, map[string]any{"apiserver-failover.json": res}, summary); werr != nil && err == nil {
		err = werr
	}
	if f.out != "" {
		if cerr := copyRunLogs(filepath.Join(f.stateDir, "logs"), filepath.Join(f.out, "logs")); cerr != nil && err == nil {
			err = cerr
		}
	}
	return err
}

// klogProblem matches klog's warning and error lines (W1128 …, E1128 …).
var klogProblem = regexp.MustCompile(`^[WE][0-9]{4} `)

// copyRunLogs keeps the raw logs worth reading beside the results: the store members' logs
// whole (a few lines each: start, rejoin, shutdown), kube-apiserver's warnings and errors and
// its audit log's failed requests (the first 5,000 of each; the whole logs stay in the state
// directory).
func copyRunLogs(from, to string) error {
	ents, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(to, 0o755); err != nil {
		return err
	}
	for _, e := range ents {
		name := e.Name()
		b, err := os.ReadFile(filepath.Join(from, name))
		if err != nil {
			return err
		}
		switch {
		case strings.HasPrefix(name, cluster.BinStore) || strings.HasPrefix(name, "store"):
		case name == "kube-apiserver.log":
			var keep []string
			for _, l := range strings.Split(string(b), "\n") {
				if klogProblem.MatchString(l) && len(keep) < 5000 {
					keep = append(keep, l)
				}
			}
			name, b = "kube-apiserver-warnings.log", []byte(strings.Join(keep, "\n")+"\n")
		case name == "kube-apiserver-audit.log":
			var keep []string
			for _, l := range strings.Split(string(b), "\n") {
				if len(auditFailures(strings.NewReader(l))) > 0 && len(keep) < 5000 {
					keep = append(keep, l)
				}
			}
			name, b = "kube-apiserver-audit-failures.log", []byte(strings.Join(keep, "\n")+"\n")
		default:
			continue
		}
		if err := os.WriteFile(filepath.Join(to, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// msOf formats seconds as the SLO report does.
func msOf(sec float64) string {
	switch {
	case math.IsNaN(sec):
		return "-"
	case sec < 1:
		return fmt.Sprintf("%.0f ms", sec*1000)
	default:
		return fmt.Sprintf("%.2f s", sec)
	}
}

// apiFailoverSummary is the human table: the windows side by side.
func apiFailoverSummary(r *apiFailoverResult) string {
	var b strings.Builder
	s := r.Spec
	fmt.Fprintf(&b, "\nkube-apiserver on a %d-member %s group, %d KWOK nodes; pods created at %.0f/s (%d at most); windows of %s before and after SIGKILL of the store's leader\n",
		s.StoreReplicas, storeName(s.Store), s.Nodes, s.Rate, s.Pods, s.Window)
	if r.Error != "" {
		fmt.Fprintf(&b, "RUN FAILED: %s\n", r.Error)
	}
	k := r.Kill
	if !k.At.IsZero() {
		fmt.Fprintf(&b, "kill: %s (pid %d) at +%.1f s; new leader %s after %.0f ms; first create issued after the kill returned OK after %.0f ms; longest create in flight at the kill %.0f ms\n",
			k.Leader, k.Pid, k.At.Sub(r.Start).Seconds(), k.NewLeader, k.NewLeaderMs, k.FirstCreateOKMs, k.LongestAcrossMs)
		fmt.Fprintf(&b, "restart: %s up again %.1f s after the kill (pid %d), caught up %.0f ms after its restart; HashKV of the members agreed at the end: %v %s\n",
			k.Leader, k.RestartedAfterMs/1e3, k.RestartedPid, k.CaughtUpMs, k.HashAgreed, k.HashNote)
	}
	var before, after *apiFailoverWindow
	for i := range r.Windows {
		switch r.Windows[i].Name {
		case "before-kill":
			before = &r.Windows[i]
		case "after-kill":
			after = &r.Windows[i]
		}
	}
	get := func(w *apiFailoverWindow) *cluster.Report {
		if w == nil {
			return nil
		}
		return w.Server
	}
	rb, ra := get(before), get(after)

	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(&b, "\nkube-apiserver's latency per verb (apiserver_request_duration_seconds, every client; WATCH aside)")
	fmt.Fprintln(tw, "  VERB\tBEFORE n\tp50\tp99\tAFTER n\tp50\tp99\tSLO")
	for _, v := range verbRows(rb, ra) {
		a, bb := findVerb(ra, v), findVerb(rb, v)
		slo := "1 s"
		if v == "LIST" {
			slo = "5 s / 30 s"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v, cnt(bb), p(bb, 50), p(bb, 99), cnt(a), p(a, 50), p(a, 99), slo)
	}
	tw.Flush()

	fmt.Fprintln(&b, "\nper verb and resource (the 12 busiest after the kill)")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  VERB\tRESOURCE\tBEFORE n\tp50\tp99\tAFTER n\tp50\tp99")
	if ra != nil {
		for i, a := range ra.API {
			if i >= 12 {
				break
			}
			res := a.Resource
			if a.Subresource != "" {
				res += "/" + a.Subresource
			}
			var bb *cluster.APILatency
			if rb != nil {
				for j := range rb.API {
					x := &rb.API[j]
					if x.Verb == a.Verb && x.Resource == a.Resource && x.Subresource == a.Subresource && x.Scope == a.Scope {
						bb = x
					}
				}
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%.0f\t%s\t%s\n", a.Verb, res, cnt(bb), p(bb, 50), p(bb, 99), a.Count, msOf(a.P50), msOf(a.P99))
		}
	}
	tw.Flush()

	fmt.Fprintln(&b, "\nthis client's creates (client-go calls) and HTTP attempts")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  WINDOW\tWHAT\tn\tfailed\t/s\tp50\tp99\tmax")
	for _, w := range []*apiFailoverWindow{before, after} {
		if w == nil {
			continue
		}
		for _, set := range []struct {
			what string
			s    []bench.CallStats
		}{{"call", w.Calls}, {"attempt", w.Attempts}} {
			for _, c := range set.s {
				fmt.Fprintf(tw, "  %s\t%s %s %s\t%d\t%d\t%.1f\t%.0f ms\t%.0f ms\t%.0f ms\n", w.Name, set.what, c.Verb, c.Resource, c.Count, c.Errors, c.PerSec, c.P50Ms, c.P99Ms, c.MaxMs)
			}
		}
	}
	tw.Flush()

	fmt.Fprintln(&b, "\nfailures")
	listed := false
	for _, w := range []*apiFailoverWindow{before, after} {
		if w == nil {
			continue
		}
		for _, e := range w.CallErrors {
			fmt.Fprintf(&b, "  %s, client call:    %d× %s (timeout: %v)\n", w.Name, e.Count, e.Error, e.Timeout)
			listed = true
		}
		for _, e := range w.AttemptErrors {
			fmt.Fprintf(&b, "  %s, client attempt: %d× %s (timeout: %v, Retry-After: %v)\n", w.Name, e.Count, e.Error, e.Timeout, e.RetryAfter)
			listed = true
		}
		if w.Server != nil {
			for _, e := range w.Server.APIErrors {
				res := e.Resource
				if e.Subresource != "" {
					res += "/" + e.Subresource
				}
				fmt.Fprintf(&b, "  %s, kube-apiserver answered %s to %.0f× %s %s (every client)\n", w.Name, e.Code, e.Count, e.Verb, res)
				listed = true
			}
			for _, e := range w.Server.StoreErrors {
				fmt.Fprintf(&b, "  %s, kube-apiserver's store requests failed: %.0f× %s %s\n", w.Name, e.Count, e.Operation, e.Resource)
				listed = true
			}
		}
		for _, e := range w.AuditFailures {
			fmt.Fprintf(&b, "  %s, kube-apiserver's audit log: %d× %s (timeout: %v)\n", w.Name, e.Count, e.Error, e.Timeout)
			listed = true
		}
	}
	if !listed {
		fmt.Fprintln(&b, "  none")
	}

	fmt.Fprintln(&b, "\nCPU seconds per process in each window (this machine's cores are shared by all of them)")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  PROCESS\tBEFORE\tAFTER")
	for _, n := range usageNames(rb, ra) {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", n, cpuOf(rb, n), cpuOf(ra, n))
	}
	if before != nil && after != nil {
		fmt.Fprintf(tw, "  this bench (client)\t%.1f\t%.1f\n", before.BenchCPUSeconds, after.BenchCPUSeconds)
		fmt.Fprintf(tw, "  machine busy (of %d cores)\t%.1f (%.0f%%)\t%.1f (%.0f%%)\n", after.HostCores, before.HostBusyCPUSeconds, before.HostBusyPercent,
			after.HostBusyCPUSeconds, after.HostBusyPercent)
	}
	tw.Flush()

	c := r.Check
	fmt.Fprintf(&b, "\nobjects: %d pods created (%d by an attempt whose answer was lost), %d never created; at the end %d present, %d missing, %d bound, %d Running (settled %.1f s after the load)\n",
		c.Created, c.AnswerLost, c.FailedPods, c.Present, c.Missing, c.Bound, c.Running, c.SettleSeconds)
	fmt.Fprintf(&b, "watch from before the first create: %d of %d creates delivered, %d events + %d bookmarks, resourceVersions went back %d×, repeated %d×; %d restarts, %d expired (410)\n",
		c.WatchAdded, c.Created, c.Events, c.Bookmarks, c.Back, c.Repeated, c.WatchRestarts, c.WatchExpired)
	t := r.Target
	fmt.Fprintf(&b, "\ntarget (window after the kill): p99 ≤ 1 s per verb and per verb/resource — kube-apiserver %s, this client %s; only retried timeouts — %s; every object present — %s; resourceVersions never back — %s: %s\n",
		yes(t.ServerP99OK), yes(t.ClientP99OK), yes(t.OnlyRetriedTimeouts), yes(t.AllPresent), yes(t.RVOK), metStr(t.Met))
	for _, o := range t.Over {
		fmt.Fprintf(&b, "  over: %s\n", o)
	}
	for _, e := range t.Failures {
		fmt.Fprintf(&b, "  failure: %s\n", e)
	}
	timeouts := func(errs []bench.ErrorCount) (n int) {
		for _, e := range errs {
			if e.Timeout {
				n += e.Count
			}
		}
		return n
	}
	fmt.Fprintf(&b, "  timeouts: %d of this client's calls (%d HTTP attempts), each retried until its pod was created; %d in kube-apiserver's audit log (every client)\n",
		timeouts(r.CallErrors), timeouts(r.AttemptErrors), timeouts(r.AuditFailures))
	if t.Server5xx > 0 {
		fmt.Fprintf(&b, "  kube-apiserver answered %.0f requests with a 5xx after the kill (every client; its metric has the code only)\n", t.Server5xx)
	}
	return b.String()
}

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}

func metStr(ok bool) string {
	if ok {
		return "MET"
	}
	return "NOT MET"
}

func findVerb(r *cluster.Report, verb string) *cluster.APILatency {
	if r == nil {
		return nil
	}
	for i := range r.APIByVerb {
		if r.APIByVerb[i].Verb == verb {
			return &r.APIByVerb[i]
		}
	}
	return nil
}

func verbRows(rs ...*cluster.Report) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range rs {
		if r == nil {
			continue
		}
		for _, a := range r.APIByVerb {
			if !seen[a.Verb] {
				seen[a.Verb] = true
				out = append(out, a.Verb)
			}
		}
	}
	sort.Strings(out)
	return out
}

func cnt(a *cluster.APILatency) string {
	if a == nil {
		return "0"
	}
	return fmt.Sprintf("%.0f", a.Count)
}

func p(a *cluster.APILatency, q int) string {
	if a == nil {
		return "-"
	}
	if q == 50 {
		return msOf(a.P50)
	}
	return msOf(a.P99)
}

func usageNames(rs ...*cluster.Report) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range rs {
		if r == nil {
			continue
		}
		for _, u := range r.Components {
			if !seen[u.Name] {
				seen[u.Name] = true
				out = append(out, u.Name)
			}
		}
	}
	return out
}

func cpuOf(r *cluster.Report, name string) string {
	if r == nil {
		return "-"
	}
	for _, u := range r.Components {
		if u.Name == name {
			return fmt.Sprintf("%.1f", u.CPUSeconds)
		}
	}
	return "-"
}
