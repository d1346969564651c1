package e2e

// `etcdctl lock` and `etcdctl elect` sessions (etcdctl 3.6, which runs clientv3's concurrency
// recipes over KV, Lease and Watch) against etcd and the store, with equal output.
//
//	ETCDCTL_BIN   etcdctl binary (default: <repo>/bin/etcdctl, built by `make etcdctl`)

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuf) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuf) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// ctlProc is one etcdctl process.
type ctlProc struct {
	name string
	cmd  *exec.Cmd
	out  syncBuf
	done chan struct{}
	err  error
}

func (s *lx) etcdctl(bin, name string, args ...string) *ctlProc {
	p := &ctlProc{name: name, done: make(chan struct{})}
	p.cmd = exec.Command(bin, append([]string{"--endpoints=" + s.tg.Endpoint, "--dial-timeout=5s"}, args...)...)
	for _, e := range os.Environ() { // the caller's ETCDCTL_* settings would change what it does
		if !strings.HasPrefix(e, "ETCDCTL_") {
			p.cmd.Env = append(p.cmd.Env, e)
		}
	}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		s.t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	s.t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// lines waits until the process has printed at least n lines.
func (p *ctlProc) lines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for strings.Count(p.out.String(), "\n") < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d lines after 15s, want %d: %q", p.name, strings.Count(p.out.String(), "\n"), n, p.out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (p *ctlProc) running(d time.Duration) bool {
	select {
	case <-p.done:
		return false
	case <-time.After(d):
		return true
	}
}

// stop interrupts the process (etcdctl unlocks or resigns on SIGINT) and waits for it.
func (p *ctlProc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(os.Interrupt)
	p.wait(t)
}

func (p *ctlProc) wait(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("%s: still running after 15s: %q", p.name, p.out.String())
	}
}

func (p *ctlProc) exitCode() int {
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		return -1
	}
	return 0
}

var (
	ctlLeaseKey = regexp.MustCompile(`(<p>[A-Za-z]+)/([0-9a-f]+)`)
	ctlRev      = regexp.MustCompile(`rev=([0-9]+)`)
)

// output is what the process printed, with the test prefix, lease IDs and revisions named.
func (s *lx) output(p *ctlProc) string {
	o := strings.ReplaceAll(p.out.String(), s.p, "<p>")
	o = ctlLeaseKey.ReplaceAllStringFunc(o, func(m string) string {
		sub := ctlLeaseKey.FindStringSubmatch(m)
		return sub[1] + "/" + s.key(b(s.p + "x/" + sub[2]))[len("<p>x/"):]
	})
	o = ctlRev.ReplaceAllStringFunc(o, func(m string) string {
		var r int64
		fmt.Sscanf(m, "rev=%d", &r)
		return "rev" + s.rev(r)
	})
	return fmt.Sprintf("%q", o)
}

func TestEtcdctlLockElect(t *testing.T) {
	bin := etcdctlBin()
	if bin == "" {
		t.Skip("etcdctl not found: `make etcdctl` builds bin/etcdctl (or set ETCDCTL_BIN)")
	}
	sameOnBoth(t, func(s *lx) {
		lock := s.p + "L"
		first := s.etcdctl(bin, "first lock", "lock", lock)
		first.lines(s.t, 2)
		s.add("first lock holds: %s", s.output(first))
		second := s.etcdctl(bin, "second lock", "lock", lock, "--", "sh", "-c", "echo key=$ETCD_LOCK_KEY rev=$ETCD_LOCK_REV")
		s.waitQueue(lock+"/", 2)
		s.add("second lock waits: %v", second.running(300*time.Millisecond))
		first.stop(s.t)
		s.add("first lock interrupted: exit %d", first.exitCode())
		second.wait(s.t)
		s.add("second lock ran its command: exit %d %s", second.exitCode(), s.output(second))
		s.add("queue: %s", s.queue(lock+"/"))

		elect := s.p + "E"
		obs := s.etcdctl(bin, "observer", "elect", "-l", elect)
		time.Sleep(300 * time.Millisecond)
		one := s.etcdctl(bin, "candidate one", "elect", elect, "one")
		one.lines(s.t, 2)
		obs.lines(s.t, 2)
		s.add("candidate one leads: %s", s.output(one))
		two := s.etcdctl(bin, "candidate two", "elect", elect, "two")
		s.waitQueue(elect+"/", 2)
		s.add("candidate two waits: %v", two.running(300*time.Millisecond))
		one.stop(s.t)
		s.add("candidate one interrupted: exit %d %s", one.exitCode(), s.output(one))
		two.lines(s.t, 2)
		obs.lines(s.t, 4)
		s.add("candidate two leads: %s", s.output(two))
		two.stop(s.t)
		s.add("candidate two interrupted: exit %d", two.exitCode())
		time.Sleep(200 * time.Millisecond)
		obs.stop(s.t)
		s.add("observer: exit %d %s", obs.exitCode(), s.output(obs))
		s.add("queue: %s", s.queue(elect+"/"))
	})
}
