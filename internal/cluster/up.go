package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/doctor"
	"github.com/meganode/meganode/internal/storeproc"
)

// UpOptions configure Up. Zero values take defaults.
type UpOptions struct {
	StateDir    string
	Store       string // meganode (default) | etcd
	StoreShards int    // 0: as many as the sizing plan asks for (1–4)
	// StoreReplicas: members of each store's replicated group (etcd's cluster flags;
	// kube-apiserver gets every member's URL); 0 or 1: one process per store.
	StoreReplicas int
	Nodes         int // KWOK nodes to create once the control plane is healthy (also sizes the plan)
	// Kubelets: hollow kubelets (bin/kubemark, the kubelet's code over a fake runtime: kubelets.go)
	// to start beside the KWOK nodes; each registers its own Node. KubeletProbes runs their real prober.
	Kubelets      int
	KubeletProbes bool
	Pods          int      // sizes the plan only
	BinDir        string   // default: BinDir()
	EtcdCmd       []string // how to run real etcd; default: <bin>/meganode etcd
	StoreArgs     []string // extra flags for every store process
	// StoreTLS: the stores serve https with client-certificate auth (--trusted-ca-file,
	// --client-cert-auth) and kube-apiserver connects with a certificate of the cluster CA
	// (--etcd-cafile, --etcd-certfile, --etcd-keyfile), as a kubeadm control plane runs etcd.
	StoreTLS bool
	// DataDir holds the stores' data (one directory per store); default <state-dir>/data. The
	// demo's comparison puts it on tmpfs for both stacks, etcd's best case as in `make bench`.
	DataDir       string
	APIServerArgs []string // extra kube-apiserver flags
	// Scheduler: SchedulerKube ("" = default) or SchedulerMeganode (`meganode scheduler`, SchedulerShards shards).
	Scheduler       string
	SchedulerShards int
	SchedulerArgs   []string // extra `meganode scheduler` flags
	// SchedulerIntake: with SchedulerMeganode, IntakeWatch ("" = watch) or IntakeWebhook (the
	// scheduler serves a validating admission webhook that `up` registers: webhook.go).
	SchedulerIntake string
	Record          string // with a file name: run `meganode etcd-proxy --record` between kube-apiserver and the default store
	// NodeLeaseSeconds is the KWOK nodes' lease duration (renewed every quarter of it; 0 = 40 s as the
	// kubelet). Longer leases cut lease writes for benchmarks of other things at large node counts;
	// the plan raises the controller-manager's --node-monitor-grace-period to match.
	NodeLeaseSeconds int
	// NodeSizes: KWOK node i gets NodeSizes[i % len(NodeSizes)]; empty = every node
	// DefaultNodeSize (8 CPU, 32 GiB), as `up` always made them.
	NodeSizes []NodeSize
	// NodesLater: Nodes sizes the plan (the apiserver's and controller-manager's flags) but Up
	// creates none; the caller makes and times them (`bench scale`).
	NodesLater bool
	ProxyCmd   []string // how to run the proxy; default: this executable with "etcd-proxy"
	Progress   *bench.Progress
}

// DefaultStateDir is where `up` keeps pids, certificates, logs and store data.
func DefaultStateDir() string { return filepath.Join(os.TempDir(), "meganode-cluster") }

// Plan is the sizing plan `up` takes its flags from.
func (o *UpOptions) Plan() doctor.PlanOutput {
	return doctor.Plan(doctor.PlanInput{Nodes: max(o.Nodes+o.Kubelets, 1), Pods: o.Pods,
		LeaseDurationSeconds: o.nodeLeaseSeconds(), KubeMinor: doctor.DefaultKubeMinor})
}

func (o *UpOptions) nodeLeaseSeconds() int {
	if o.NodeLeaseSeconds > 0 {
		return o.NodeLeaseSeconds
	}
	return NodeLeaseDurationSeconds
}

// Up starts the control plane and, with o.Nodes > 0, creates the nodes. On failure it stops
// whatever it had started.
func Up(ctx context.Context, o UpOptions) (st *State, err error) {
	prog := o.Progress
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir()
	}
	if o.Store == "" {
		o.Store = StoreMeganode
	}
	if o.Store != StoreMeganode && o.Store != StoreEtcd {
		return nil, fmt.Errorf("--store: want meganode or etcd, got %q", o.Store)
	}
	switch o.SchedulerIntake {
	case "", IntakeWatch:
	case IntakeWebhook:
		if o.Scheduler != SchedulerMeganode {
			return nil, fmt.Errorf("--intake %s needs --scheduler %s", IntakeWebhook, SchedulerMeganode)
		}
	default:
		return nil, fmt.Errorf("--intake: want %s or %s, got %q", IntakeWatch, IntakeWebhook, o.SchedulerIntake)
	}
	if o.BinDir == "" {
		if o.BinDir, err = BinDir(); err != nil {
			return nil, err
		}
	}
	if err := CheckBins(o.BinDir, o.Store); err != nil {
		return nil, err
	}
	if o.Nodes < 0 || o.Kubelets < 0 {
		return nil, fmt.Errorf("--nodes and --kubelets must be ≥ 0")
	}
	if o.Kubelets > 0 {
		if _, err := os.Stat(filepath.Join(o.BinDir, BinKubemark)); err != nil {
			return nil, fmt.Errorf("missing in %s: %s — build it with `make k8s-bins`", o.BinDir, BinKubemark)
		}
	}
	if o.Store == StoreEtcd && len(o.EtcdCmd) == 0 {
		self := filepath.Join(o.BinDir, "meganode")
		if _, err := os.Stat(self); err != nil {
			if self, err = os.Executable(); err != nil {
				return nil, err
			}
		}
		o.EtcdCmd = []string{self, "etcd"}
	}
	plan := o.Plan()
	if o.StoreShards <= 0 {
		o.StoreShards = len(plan.Store.Shards)
	}
	if o.StoreShards > MaxStoreShards {
		return nil, fmt.Errorf("--store-shards: at most %d (default store + leases, events, pods)", MaxStoreShards)
	}
	if old, err := LoadState(o.StateDir); err == nil && len(old.Running()) > 0 {
		return nil, fmt.Errorf("a cluster from %s is still running (%d processes): run `meganode down --state-dir %s` first",
			o.StateDir, len(old.Running()), o.StateDir)
	}
	for _, d := range []string{"data", "logs", "pki", "apiserver", "controller-manager", "scheduler", kubeletsDir} {
		if err := os.RemoveAll(filepath.Join(o.StateDir, d)); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(o.StateDir, 0o755); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(o.StateDir)
	if err != nil {
		return nil, err
	}
	st = &State{Dir: abs, Store: o.Store, StartedAt: time.Now(), Kubeconfig: filepath.Join(abs, "kubeconfig")}
	defer func() {
		if err != nil {
			prog.Printf("up failed: stopping what was started (logs stay in %s/logs)", st.Dir)
			_ = st.Down(5*time.Second, nil)
		}
	}()
	launch := func(c Component) (*Component, error) {
		st.Components = append(st.Components, c)
		p := &st.Components[len(st.Components)-1]
		if err := p.start(); err != nil {
			return nil, err
		}
		return p, st.Save()
	}

	prog.Phase("generating certificates…")
	pki, err := GeneratePKI(filepath.Join(abs, "pki"))
	if err != nil {
		return st, err
	}

	if o.StoreReplicas > 1 && o.Record != "" {
		return st, fmt.Errorf("--record proxies one store process: use it without --store-replicas")
	}
	if o.StoreTLS && o.Record != "" {
		return st, fmt.Errorf("--record does not proxy TLS: use it without --store-tls")
	}
	var storeTLS *tls.Config
	if o.StoreTLS {
		if storeTLS, err = pki.StoreClientTLS(); err != nil {
			return st, err
		}
	}
	stores, err := storeComponents(st, &o, pki)
	if err != nil {
		return st, err
	}
	// Every store process first, then the wait: a member of a group serves once
	// the others are up (etcd's members wait for their quorum before serving).
	first := len(st.Components)
	for _, c := range stores {
		prog.Phase(fmt.Sprintf("starting %s (%s) on %s…", c.Name, o.Store, c.URL))
		if _, err := launch(c); err != nil {
			return st, err
		}
	}
	for i := range stores {
		p := &st.Components[first+i]
		if err := waitStore(ctx, p, storeTLS); err != nil {
			return st, err
		}
		prog.Printf("  %-24s pid %-7d %s", p.Name, p.Pid, p.URL)
	}

	if o.Record != "" {
		pc, err := proxyComponent(st, &o)
		if err != nil {
			return st, err
		}
		prog.Phase(fmt.Sprintf("starting %s recording to %s…", pc.Name, o.Record))
		p, err := launch(pc)
		if err != nil {
			return st, err
		}
		if err := waitStore(ctx, p, nil); err != nil {
			return st, err
		}
		st.EtcdProxyURL, st.RecordFile = p.URL, p.Args[len(p.Args)-1]
		prog.Printf("  %-24s pid %-7d %s → %s", p.Name, p.Pid, p.URL, st.Shards[0].URL)
	}

	ports := make([]int, 4)
	for i := range ports {
		if ports[i], err = storeproc.FreePort(); err != nil {
			return st, err
		}
	}
	api := apiServerComponent(st, &o, pki, plan, ports[0])
	st.APIServerURL = api.URL
	prog.Phase("starting kube-apiserver…")
	apiP, err := launch(api)
	if err != nil {
		return st, err
	}
	admin, err := AdminHTTPClient(st)
	if err != nil {
		return st, err
	}
	if err := waitHealthy(ctx, apiP, admin, api.URL+"/readyz", 180*time.Second); err != nil {
		return st, err
	}
	prog.Printf("  %-24s pid %-7d %s", apiP.Name, apiP.Pid, apiP.URL)

	kc := func(name, crt, key, user string) (string, error) {
		p := filepath.Join(abs, name)
		return p, WriteKubeconfig(p, api.URL, pki.CACert, crt, key, user)
	}
	if _, err := kc("kubeconfig", pki.AdminCert, pki.AdminKey, "meganode-admin"); err != nil {
		return st, err
	}
	cmKC, err := kc("controller-manager.kubeconfig", pki.CMCert, pki.CMKey, "system:kube-controller-manager")
	if err != nil {
		return st, err
	}
	schedKC, err := kc("scheduler.kubeconfig", pki.SchedCert, pki.SchedKey, "system:kube-scheduler")
	if err != nil {
		return st, err
	}

	cm := controllerManagerComponent(st, &o, pki, plan, cmKC, ports[1])
	var sched Component
	var webhook *schedulerWebhook
	switch o.Scheduler {
	case "", SchedulerKube:
		sched, err = schedulerComponent(st, &o, plan, schedKC, ports[2])
	case SchedulerMeganode:
		sched, err = meganodeSchedulerComponent(st, &o, schedKC, ports[2])
		if err == nil && o.SchedulerIntake == IntakeWebhook {
			var port int
			if port, err = storeproc.FreePort(); err == nil {
				webhook, err = addSchedulerWebhook(&sched, pki, port)
			}
		}
	default:
		err = fmt.Errorf("--scheduler: want %s or %s, got %q", SchedulerKube, SchedulerMeganode, o.Scheduler)
	}
	if err != nil {
		return st, err
	}
	kw, err := kwokComponent(st, &o, st.Kubeconfig, ports[3])
	if err != nil {
		return st, err
	}
	var started []*Component
	for _, c := range []Component{cm, sched, kw} {
		prog.Phase(fmt.Sprintf("starting %s…", c.Name))
		p, err := launch(c)
		if err != nil {
			return st, err
		}
		started = append(started, p)
	}
	for _, p := range started {
		prog.Phase(fmt.Sprintf("waiting for %s…", p.Name))
		if err := waitHealthy(ctx, p, insecureClient, p.URL+"/healthz", 90*time.Second); err != nil {
			return st, err
		}
		prog.Printf("  %-24s pid %-7d %s", p.Name, p.Pid, p.URL)
	}
	if webhook != nil {
		prog.Phase("registering the scheduler's admission webhook…")
		cs, err := Clientset(st)
		if err != nil {
			return st, err
		}
		if err := registerSchedulerWebhook(ctx, cs, webhook); err != nil {
			return st, err
		}
		prog.Printf("  %-24s %s", SchedulerWebhookName, webhook.URL)
	}
	if o.Kubelets > 0 {
		kubelets, err := kubeletComponents(st, &o, pki)
		if err != nil {
			return st, err
		}
		prog.Phase(fmt.Sprintf("starting %d hollow kubelets (%s) on ports %s…", o.Kubelets, BinKubemark,
			strings.TrimPrefix(kubelets[0].URL, "http://127.0.0.1:")+"–"+strings.TrimPrefix(kubelets[len(kubelets)-1].URL, "http://127.0.0.1:")))
		if err := startKubelets(st, kubelets); err != nil {
			return st, err
		}
		st.Kubelets = o.Kubelets
		if err := waitKubeletsServing(ctx, st, max(3*time.Minute, time.Duration(o.Kubelets)*time.Second)); err != nil {
			return st, err
		}
	}
	st.Ready = true
	if err := st.Save(); err != nil {
		return st, err
	}
	nodes := o.Nodes
	if o.NodesLater {
		nodes = 0
	}
	if nodes > 0 || o.Kubelets > 0 {
		cs, err := Clientset(st)
		if err != nil {
			return st, err
		}
		if nodes > 0 {
			if err := MakeNodes(ctx, cs, NodeOptions{Count: nodes, Sizes: o.NodeSizes, Progress: prog}); err != nil {
				return st, err
			}
			st.Nodes = nodes
		}
		want := nodes + o.Kubelets
		if err := WaitNodesReady(ctx, cs, want, max(5*time.Minute, time.Duration(nodes)*40*time.Millisecond+time.Duration(o.Kubelets)*time.Second), prog); err != nil {
			return st, err
		}
	}
	return st, st.Save()
}

// Down stops the cluster recorded in dir.
func Down(dir string, log func(string, ...any)) error {
	st, err := LoadState(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("no cluster recorded in %s", dir)
		}
		return err
	}
	return st.Down(15*time.Second, log)
}
