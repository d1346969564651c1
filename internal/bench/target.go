package bench

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/meganode/meganode/internal/storeproc"
	"github.com/meganode/meganode/internal/testcerts"
)

// Target kinds.
const (
	TargetMeganode = "meganode"
	TargetEtcd     = "etcd"
)

// DefaultDataRoot is where servers keep their data unless told otherwise: tmpfs,
// etcd's best case.
const DefaultDataRoot = "/dev/shm"

// TargetSpec says how to get one server to load.
type TargetSpec struct {
	Kind string // TargetMeganode or TargetEtcd (also the label in the results)

	// Endpoints of a server that is already running: nothing is started. Pid, if
	// known, lets the server's CPU and memory be measured.
	Endpoints []string
	Pid       int

	StoreBin      string   // meganode-store; default storeproc.FindBin
	StoreArgs     []string // extra flags for meganode-store (e.g. --durability=fsync)
	StoreDataRoot string   // parent of the store's fresh data directory; default DefaultDataRoot

	// EtcdCmd runs real etcd as its own process: EtcdCmd[0] is an executable
	// (normally this meganode binary) and the rest its leading arguments (normally
	// "etcd"); --data-dir and --listen-client-urls are appended.
	EtcdCmd      []string
	EtcdArgs     []string
	EtcdDataRoot string // parent of etcd's fresh data directory; default DefaultDataRoot

	Log io.Writer // where the server's own log goes; nil keeps only a tail for errors

	// TLS: with certificates, the server serves https with client-certificate auth (the
	// same etcd-style flags for both: --cert-file, --key-file, --trusted-ca-file,
	// --client-cert-auth) and the load's clients present the client certificate. Every
	// member of a group serves the same certificates.
	TLS *testcerts.Paths

	// Members: with more than one, a group on loopback started with etcd's cluster flags
	// (--name m<i>, --initial-cluster, --listen-peer-urls, --initial-cluster-token; peers
	// speak plain http) — meganode-store's replicated group or an etcd cluster; the load's
	// clients get every member's endpoint, as kube-apiserver would. 0 or 1: one server.
	Members int
}

// Name of the target in the results: its kind, with the members of a group.
func (s TargetSpec) Name() string { return TargetName(s.Kind, s.Members) }

// TargetName is how results name a target: "meganode" or "etcd" for one server,
// "meganode (3 members)" for a group.
func TargetName(kind string, members int) string {
	if members <= 1 {
		return kind
	}
	return fmt.Sprintf("%s (%d members)", kind, members)
}

// targetKind takes TargetName apart: the kind, and the members (1 for one server).
func targetKind(name string) (kind string, members int) {
	k, rest, ok := strings.Cut(name, " (")
	if !ok {
		return name, 1
	}
	if _, err := fmt.Sscanf(rest, "%d members)", &members); err != nil || members < 1 {
		return name, 1
	}
	return k, members
}

// Target is a server under load.
type Target struct {
	Name      string
	Endpoints []string
	Pid       int         // the server's process; 0 for a group (Pids)
	DataDir   string      // a group's: the parent of its members' data directories
	TLS       *tls.Config // the clients' TLS (nil: plaintext)
	close     func() error
	crash     func() error // SIGKILL, then start again on DataDir (sets Endpoints and Pid)

	// Pids of a group's members, in member order (nil for one server: Pid).
	Pids    []int
	Members int // a group's members (0 for one server)
}

// ReadyTimeout is how long a (re)started server may take to say it is ready.
const ReadyTimeout = 10 * time.Minute

// ServerPids are the processes whose CPU and memory are the server's: a group's members,
// or the one server's (none when unknown).
func (t *Target) ServerPids() []int {
	if len(t.Pids) > 0 {
		return t.Pids
	}
	if t.Pid > 0 {
		return []int{t.Pid}
	}
	return nil
}

// KillRestart kills the server with SIGKILL, as a crash would, and starts it again on the
// same data directory (on a new port: Endpoints and Pid change). It returns once the new
// process says it is ready to serve clients. A group refuses it: a restarted member
// catches up from its peers, which measures something else than one server's restart
// (`meganode bench failover` kills a group's leader under load and measures that).
func (t *Target) KillRestart() error {
	if t == nil || t.crash == nil {
		return errors.New("this target was not started here: it cannot be restarted")
	}
	return t.crash()
}

// Close stops the server if this package started it and removes its data.
func (t *Target) Close() error {
	if t == nil || t.close == nil {
		return nil
	}
	err := t.close()
	t.close = nil
	return err
}

// Start brings the target up (or just wraps --endpoints).
func (s TargetSpec) Start() (*Target, error) {
	var clientTLS *tls.Config
	if s.TLS != nil {
		var err error
		if clientTLS, err = s.TLS.ClientTLS(true); err != nil {
			return nil, err
		}
	}
	if len(s.Endpoints) > 0 {
		if s.Members > 1 {
			return nil, fmt.Errorf("%s: a group of %d members is started here, not given as endpoints", s.Name(), s.Members)
		}
		return &Target{Name: s.Kind, Endpoints: s.Endpoints, Pid: s.Pid, TLS: clientTLS}, nil
	}
	var t *Target
	var err error
	switch {
	case s.Kind == TargetMeganode && s.Members > 1:
		t, err = s.startStoreGroup()
	case s.Kind == TargetMeganode:
		t, err = s.startStore()
	case s.Kind == TargetEtcd && s.Members > 1:
		t, err = s.startEtcdGroup()
	case s.Kind == TargetEtcd:
		t, err = s.startEtcd()
	default:
		return nil, fmt.Errorf("unknown target %q (want %s or %s)", s.Kind, TargetMeganode, TargetEtcd)
	}
	if t != nil {
		t.TLS = clientTLS
	}
	return t, err
}

// tlsArgs are the server flags for s.TLS (none without it).
func (s TargetSpec) tlsArgs() []string {
	if s.TLS == nil {
		return nil
	}
	return s.TLS.StoreArgs(true)
}

func dataDir(root, prefix string) (string, error) {
	if root == "" {
		root = DefaultDataRoot
		if st, err := os.Stat(root); err != nil || !st.IsDir() {
			root = os.TempDir()
		}
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	return os.MkdirTemp(root, prefix)
}

func (s TargetSpec) startStore() (*Target, error) {
	dir, err := dataDir(s.StoreDataRoot, "meganode-bench-store-")
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if s.TLS != nil {
		scheme = "https"
	}
	args := append(s.tlsArgs(), s.StoreArgs...)
	p, err := storeproc.Start(storeproc.Options{Bin: s.StoreBin, DataDir: dir, ExtraArgs: args, Stderr: s.Log, ReadyTimeout: ReadyTimeout, Scheme: scheme})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	t := &Target{
		Name: TargetMeganode, Endpoints: []string{p.Endpoint}, Pid: p.Pid(), DataDir: dir,
		close: func() error {
			err := p.Stop()
			os.RemoveAll(dir)
			return err
		},
	}
	t.crash = func() error {
		_ = p.Kill()
		if err := p.Restart(); err != nil {
			return err
		}
		t.Endpoints, t.Pid = []string{p.Endpoint}, p.Pid()
		return nil
	}
	return t, nil
}

// groupReadyTimeout bounds a fresh group's start (its members wait for each other).
const groupReadyTimeout = 60 * time.Second

// groupToken is the groups' --initial-cluster-token.
const groupToken = "meganode-bench"

// groupCrash is a group's answer to KillRestart.
func groupCrash(name string) func() error {
	return func() error {
		return fmt.Errorf("%s: kill and restart of a group is not supported here (a restarted member catches up "+
			"from its peers; 'meganode bench failover' kills a group's leader under load)", name)
	}
}

// startStoreGroup starts a meganode-store group of s.Members members (its default
// durability is replicated; a group refuses buffered and fsync with its own error, which
// comes back here with the member's log tail).
func (s TargetSpec) startStoreGroup() (*Target, error) {
	dir, err := dataDir(s.StoreDataRoot, "meganode-bench-store-")
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if s.TLS != nil {
		scheme = "https"
	}
	g, err := storeproc.StartGroupWith(storeproc.GroupOptions{Members: s.Members, Bin: s.StoreBin,
		ExtraArgs: append(s.tlsArgs(), s.StoreArgs...), Stderr: s.Log, Scheme: scheme, DataRoot: dir,
		ReadyTimeout: groupReadyTimeout, Token: groupToken})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	pids := make([]int, len(g.Members))
	for i, m := range g.Members {
		pids[i] = m.Pid()
	}
	return &Target{
		Name: s.Name(), Endpoints: g.Endpoints(), Pids: pids, Members: s.Members, DataDir: dir,
		close: func() error {
			g.Stop()
			os.RemoveAll(dir)
			return nil
		},
		crash: groupCrash(s.Name()),
	}, nil
}

// startEtcdGroup starts an etcd cluster of s.Members members, all at once (a new
// cluster's members wait for each other before they serve).
func (s TargetSpec) startEtcdGroup() (*Target, error) {
	s, dir, err := s.etcdSetup()
	if err != nil {
		return nil, err
	}
	n := s.Members
	clients := make([]int, n)
	initial := make([]string, n)
	peers := make([]string, n)
	for i := range clients {
		if clients[i], err = storeproc.FreePort(); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		pp, err := storeproc.FreePort()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		peers[i] = fmt.Sprintf("http://127.0.0.1:%d", pp)
		initial[i] = fmt.Sprintf("m%d=%s", i, peers[i])
	}
	procs := make([]*etcdProc, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range procs {
		name := fmt.Sprintf("m%d", i)
		cluster := []string{"--name", name, "--listen-peer-urls", peers[i], "--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-token", groupToken}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			procs[i], errs[i] = s.launchEtcdAt(name, filepath.Join(dir, name), clients[i], cluster, groupReadyTimeout)
		}(i)
	}
	wg.Wait()
	stopAll := func() {
		for _, p := range procs {
			if p != nil {
				p.stop()
			}
		}
	}
	for i, err := range errs {
		if err != nil {
			stopAll()
			os.RemoveAll(dir)
			return nil, fmt.Errorf("member m%d: %w", i, err)
		}
	}
	t := &Target{Name: s.Name(), Members: n, DataDir: dir, crash: groupCrash(s.Name())}
	for _, p := range procs {
		t.Endpoints = append(t.Endpoints, p.ep)
		t.Pids = append(t.Pids, p.cmd.Process.Pid)
	}
	t.close = func() error {
		stopAll()
		os.RemoveAll(dir)
		return nil
	}
	return t, nil
}

// ReadyLine is what a server prints once it serves clients (etcd's own wording).
const ReadyLine = "ready to serve client requests"

// etcdSetup fills in the default etcd command (this binary's `etcd`) and makes
// a fresh data directory under EtcdDataRoot.
func (s TargetSpec) etcdSetup() (TargetSpec, string, error) {
	if len(s.EtcdCmd) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return s, "", err
		}
		s.EtcdCmd = []string{exe, "etcd"}
	}
	dir, err := dataDir(s.EtcdDataRoot, "meganode-bench-etcd-")
	return s, dir, err
}

func (s TargetSpec) startEtcd() (*Target, error) {
	s, dir, err := s.etcdSetup()
	if err != nil {
		return nil, err
	}
	p, err := s.launchEtcd(dir, 60*time.Second)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	t := &Target{Name: TargetEtcd, Endpoints: []string{p.ep}, Pid: p.cmd.Process.Pid, DataDir: dir}
	t.close = func() error {
		p.stop()
		os.RemoveAll(dir)
		return nil
	}
	t.crash = func() error {
		p.kill()
		np, err := s.launchEtcd(dir, ReadyTimeout)
		if err != nil {
			return err
		}
		p = np
		t.Endpoints, t.Pid = []string{p.ep}, p.cmd.Process.Pid
		return nil
	}
	return t, nil
}

// etcdProc is one etcd process.
type etcdProc struct {
	ep   string
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *etcdProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

func (p *etcdProc) stop() {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			p.kill()
		}
	}
}

// launchEtcd runs etcd on dir (fresh or not) on a free port and waits for its ready line.
func (s TargetSpec) launchEtcd(dir string, timeout time.Duration) (*etcdProc, error) {
	port, err := storeproc.FreePort()
	if err != nil {
		return nil, err
	}
	return s.launchEtcdAt("", dir, port, nil, timeout)
}

// launchEtcdAt runs etcd on dir with client port `port` and the cluster flags `cluster`
// (none for one server) and waits for its ready line; name, if set, prefixes its log lines.
func (s TargetSpec) launchEtcdAt(name, dir string, port int, cluster []string, timeout time.Duration) (*etcdProc, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ep := fmt.Sprintf("127.0.0.1:%d", port)
	args := append([]string{}, s.EtcdCmd[1:]...)
	scheme := "http"
	if s.TLS != nil {
		scheme = "https"
	}
	args = append(args, "--data-dir", dir, "--listen-client-urls", scheme+"://"+ep)
	args = append(append(append(args, cluster...), s.tlsArgs()...), s.EtcdArgs...)
	cmd := exec.Command(s.EtcdCmd[0], args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	tail := &lineTail{}
	ready := make(chan struct{})
	p := &etcdProc{ep: ep, cmd: cmd, done: make(chan struct{})}
	var waitErr error
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		var once sync.Once
		for sc.Scan() {
			line := sc.Text()
			tail.add(line)
			if s.Log != nil {
				if name != "" {
					line = name + ": " + line
				}
				fmt.Fprintln(s.Log, line)
			}
			if strings.Contains(line, ReadyLine) {
				once.Do(func() { close(ready) })
			}
		}
	}()
	go func() { waitErr = cmd.Wait(); close(p.done) }()
	select {
	case <-ready:
	case <-p.done:
		return nil, fmt.Errorf("etcd exited before it was ready (%v):\n%s", waitErr, tail.String())
	case <-time.After(timeout):
		p.stop()
		return nil, fmt.Errorf("etcd not ready after %s:\n%s", timeout, tail.String())
	}
	return p, nil
}

type lineTail struct {
	mu    sync.Mutex
	lines []string
}

func (t *lineTail) add(l string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, l)
	if len(t.lines) > 40 {
		t.lines = t.lines[1:]
	}
}

func (t *lineTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}
