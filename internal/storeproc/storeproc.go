// Package storeproc starts the real meganode-store binary as a child process on a
// free loopback port and stops it again. Tests, bench and demo all use it so that
// every one of them talks to the same binary a user runs.
package storeproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options describe one store process. Zero values pick sensible defaults.
type Options struct {
	Bin       string   // path to meganode-store; default: $MEGANODE_STORE_BIN or <repo>/bin/meganode-store
	DataDir   string   // default: a new temporary directory
	ExtraArgs []string // passed through as they are (e.g. TLS flags, --durability)
	// ReadyTimeout bounds the wait for the ready line (default 30 s; a restart over a large
	// data directory needs longer).
	ReadyTimeout time.Duration
	Stderr       io.Writer
	Scheme       string // "http" (default) or "https"
	// Name is --name (default "meganode-test"); ClientPort, when set, is the client
	// port every start uses (a group's members keep theirs across restarts).
	Name       string
	ClientPort int
}

// Proc is a running store.
type Proc struct {
	Cmd        *exec.Cmd
	Endpoint   string // host:port for the etcd client
	URL        string // scheme://host:port
	MetricsURL string
	DataDir    string
	opts       Options
	done       chan struct{}
	waitErr    error
	stderrMu   sync.Mutex
	stderrTail []string
}

// FindBin returns the store binary to run: $MEGANODE_STORE_BIN, else bin/meganode-store
// found by walking up from the working directory to the repository root.
func FindBin() (string, error) {
	if b := os.Getenv("MEGANODE_STORE_BIN"); b != "" {
		if _, err := os.Stat(b); err != nil {
			return "", fmt.Errorf("MEGANODE_STORE_BIN=%s: %w", b, err)
		}
		return b, nil
	}
	dir, _ := os.Getwd()
	for d := dir; ; d = filepath.Dir(d) {
		cand := filepath.Join(d, "bin", "meganode-store")
		if _, err := os.Stat(cand); err == nil {
			return cand, nil
		}
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil || d == filepath.Dir(d) {
			break
		}
	}
	return "", errors.New("meganode-store binary not found: run `make store` or set MEGANODE_STORE_BIN")
}

// Start launches the store and waits until it prints that it is ready.
func Start(opts Options) (*Proc, error) {
	if opts.Bin == "" {
		b, err := FindBin()
		if err != nil {
			return nil, err
		}
		opts.Bin = b
	}
	if opts.DataDir == "" {
		d, err := os.MkdirTemp("", "meganode-store-")
		if err != nil {
			return nil, err
		}
		opts.DataDir = d
	}
	if opts.Scheme == "" {
		opts.Scheme = "http"
	}
	p := &Proc{DataDir: opts.DataDir, opts: opts}
	return p, p.start()
}

func (p *Proc) start() error {
	for try := 1; ; try++ {
		err := p.startOnce()
		// A port picked free can be taken by another process before the store binds it
		// (parallel test packages start servers too): pick again, unless the caller fixed it.
		if err == nil || try == 3 || p.opts.ClientPort != 0 || !strings.Contains(err.Error(), "Address already in use") {
			return err
		}
	}
}

func (p *Proc) startOnce() error {
	port := p.opts.ClientPort
	if port == 0 {
		var err error
		if port, err = FreePort(); err != nil {
			return err
		}
	}
	mport, err := FreePort()
	if err != nil {
		return err
	}
	p.Endpoint = fmt.Sprintf("127.0.0.1:%d", port)
	p.URL = fmt.Sprintf("%s://%s", p.opts.Scheme, p.Endpoint)
	p.MetricsURL = fmt.Sprintf("http://127.0.0.1:%d", mport)
	name := p.opts.Name
	if name == "" {
		name = "meganode-test"
	}
	args := []string{
		"--name", name,
		"--data-dir", p.DataDir,
		"--listen-client-urls", p.URL,
		"--advertise-client-urls", p.URL,
		"--listen-metrics-urls", p.MetricsURL,
	}
	args = append(args, p.opts.ExtraArgs...)
	cmd := exec.Command(p.opts.Bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if runtime.GOOS != "linux" {
		cmd.SysProcAttr = nil
	}
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	cmd.Stdout = p.opts.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	p.Cmd = cmd
	p.done = make(chan struct{})
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(errPipe)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		once := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			p.stderrMu.Lock()
			p.stderrTail = append(p.stderrTail, line)
			if len(p.stderrTail) > 50 {
				p.stderrTail = p.stderrTail[1:]
			}
			p.stderrMu.Unlock()
			if p.opts.Stderr != nil {
				fmt.Fprintln(p.opts.Stderr, line)
			}
			if strings.Contains(line, "ready to serve client requests") {
				once.Do(func() { close(ready) })
			}
		}
	}()
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	timeout := p.opts.ReadyTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	select {
	case <-ready:
		return nil
	case <-p.done:
		return fmt.Errorf("meganode-store exited before it was ready (%v):\n%s", p.waitErr, p.Tail())
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		return fmt.Errorf("meganode-store not ready after %s:\n%s", timeout, p.Tail())
	}
}

// Tail returns the last lines the store wrote to stderr.
func (p *Proc) Tail() string {
	p.stderrMu.Lock()
	defer p.stderrMu.Unlock()
	return strings.Join(p.stderrTail, "\n")
}

// Pid of the running process.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Kill sends SIGKILL and waits for the process to go: a crash, as far as the store can tell.
func (p *Proc) Kill() error {
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	return nil
}

// Stop asks the store to shut down (SIGTERM) and waits up to 10 s before killing it.
func (p *Proc) Stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		return p.Kill()
	}
	return nil
}

// Restart starts the same binary again on a new port with the same data directory.
func (p *Proc) Restart() error {
	return p.start()
}

// RestartWith starts the stopped process again with extraArgs in place of its options' ExtraArgs.
func (p *Proc) RestartWith(extraArgs []string) error {
	p.opts.ExtraArgs = extraArgs
	return p.start()
}

// Exited reports whether the process has gone, with its wait error.
func (p *Proc) Exited(ctx context.Context) (bool, error) {
	select {
	case <-p.done:
		return true, p.waitErr
	case <-ctx.Done():
		return false, nil
	}
}
