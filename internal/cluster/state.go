// Package cluster runs a local Kubernetes control plane on meganode-store (or real etcd):
// store processes, kube-apiserver, kube-controller-manager, kube-scheduler, KWOK and hollow
// kubelets (kubelets.go), each a detached process whose id is recorded in a state directory
// so `meganode down` stops exactly what `meganode up` started. It also drives load (nodes, pods) and measures the
// Kubernetes scalability SLOs.
package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Component is one process `up` started.
type Component struct {
	Name       string   `json:"name"` // store, store-leases, kube-apiserver, …
	Kind       string   `json:"kind"` // meganode-store | etcd | kube-apiserver | kube-controller-manager | kube-scheduler | kwok | kubemark
	Pid        int      `json:"pid"`
	StartTicks uint64   `json:"start_ticks"` // /proc/<pid>/stat starttime: tells a recycled pid apart
	Args       []string `json:"args"`        // argv, binary first
	Env        []string `json:"env,omitempty"`
	Log        string   `json:"log"`
	URL        string   `json:"url,omitempty"`         // client URL (stores) or serving URL
	MetricsURL string   `json:"metrics_url,omitempty"` // stores
	DataDir    string   `json:"data_dir,omitempty"`
}

// StoreShard is one store and the resources kube-apiserver keeps in it.
type StoreShard struct {
	Component string `json:"component"`
	Resource  string `json:"resource"` // "" for the default store
	URL       string `json:"url"`
	Override  string `json:"override,omitempty"` // --etcd-servers-overrides entry
}

// State is what `up` recorded.
type State struct {
	Dir          string       `json:"dir"`
	Store        string       `json:"store"` // meganode | etcd
	Nodes        int          `json:"nodes"`
	Kubelets     int          `json:"kubelets,omitempty"` // hollow kubelets (`up --kubelets`)
	APIServerURL string       `json:"apiserver_url"`
	Kubeconfig   string       `json:"kubeconfig"`
	Shards       []StoreShard `json:"shards"`
	EtcdProxyURL string       `json:"etcd_proxy_url,omitempty"` // `up --record`: kube-apiserver's --etcd-servers
	RecordFile   string       `json:"record_file,omitempty"`
	Components   []Component  `json:"components"`
	StartedAt    time.Time    `json:"started_at"`
	Ready        bool         `json:"ready"`
}

const stateFile = "state.json"

// LoadState reads dir/state.json.
func LoadState(dir string) (*State, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, stateFile), err)
	}
	return &s, nil
}

// Save writes the state atomically.
func (s *State) Save() error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(s.Dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(s.Dir, stateFile))
}

// Component returns the named component.
func (s *State) Component(name string) *Component {
	for i := range s.Components {
		if s.Components[i].Name == name {
			return &s.Components[i]
		}
	}
	return nil
}

// procStart reads starttime (field 22) and the state letter of /proc/<pid>/stat.
func procStart(pid int) (ticks uint64, state byte, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, errors.New("bad stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, 0, errors.New("short stat")
	}
	t, err := strconv.ParseUint(f[19], 10, 64)
	return t, f[0][0], err
}

// Alive reports whether the recorded process still runs (same pid, same start time, not a zombie).
func (c *Component) Alive() bool {
	if c.Pid <= 0 {
		return false
	}
	t, st, err := procStart(c.Pid)
	return err == nil && st != 'Z' && st != 'X' && (c.StartTicks == 0 || t == c.StartTicks)
}

// start runs the component detached (its own process group, stdin from /dev/null, output
// appended to its log) and records pid and start time. The process outlives the caller.
func (c *Component) start() error {
	if err := os.MkdirAll(filepath.Dir(c.Log), 0o755); err != nil {
		return err
	}
	lf, err := os.OpenFile(c.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer lf.Close()
	fmt.Fprintf(lf, "\n=== %s %s\n", time.Now().Format(time.RFC3339), strings.Join(c.Args, " "))
	cmd := exec.Command(c.Args[0], c.Args[1:]...)
	cmd.Env = append(os.Environ(), c.Env...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", c.Name, err)
	}
	c.Pid = cmd.Process.Pid
	c.StartTicks, _, _ = procStart(c.Pid)
	go func() { _ = cmd.Wait() }() // reap it if we are still around when it exits
	return nil
}

// Stop sends SIGTERM to the recorded process and SIGKILL after grace; a pid that is no longer
// the recorded process is left alone.
func (c *Component) Stop(grace time.Duration) error {
	if !c.Alive() {
		return nil
	}
	_ = syscall.Kill(c.Pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !c.Alive() {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return c.Kill()
}

// Kill sends SIGKILL and waits for the process to go.
func (c *Component) Kill() error {
	if !c.Alive() {
		return nil
	}
	_ = syscall.Kill(c.Pid, syscall.SIGKILL)
	for i := 0; i < 200 && c.Alive(); i++ {
		time.Sleep(25 * time.Millisecond)
	}
	if c.Alive() {
		return fmt.Errorf("%s (pid %d) survived SIGKILL", c.Name, c.Pid)
	}
	return nil
}

// Restart starts the component again with the same arguments (same ports, same data directory)
// after stopping it if it still runs, and records the new pid.
func (s *State) Restart(name string) error {
	c := s.Component(name)
	if c == nil {
		return fmt.Errorf("no component %q", name)
	}
	if err := c.Stop(10 * time.Second); err != nil {
		return err
	}
	if err := c.start(); err != nil {
		return err
	}
	return s.Save()
}

// Down stops every recorded process, newest first, and reports what it stopped.
func (s *State) Down(grace time.Duration, log func(string, ...any)) error {
	var errs []error
	if err := stopKubelets(s, grace, log); err != nil {
		errs = append(errs, err)
	}
	for i := len(s.Components) - 1; i >= 0; i-- {
		c := &s.Components[i]
		if !c.Alive() {
			continue
		}
		if log != nil {
			log("stopping %s (pid %d)", c.Name, c.Pid)
		}
		if err := c.Stop(grace); err != nil {
			errs = append(errs, err)
		}
	}
	s.Ready = false
	if err := s.Save(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Running lists the recorded processes that still run.
func (s *State) Running() []Component {
	var out []Component
	for _, c := range s.Components {
		if c.Alive() {
			out = append(out, c)
		}
	}
	return out
}
