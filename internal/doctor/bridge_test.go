package doctor

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
	"time"
)

// The bridge probe tests run the real probe: they need root (CI runs as root).
// Without root they fail, loudly, rather than skip.

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this integration test runs the real bridge probe and needs root (CAP_NET_ADMIN): run `sudo go test ./internal/doctor/` — CI runs as root; it is not skipped on purpose")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("the bridge probe needs iproute2's ip command: %v", err)
	}
}

// netnsList is `ip netns list`, names only, sorted.
func netnsList(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v: %s", err, out)
	}
	var names []string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	sort.Strings(names)
	return names
}

// hostLinks is the interfaces of the test's own network namespace.
func hostLinks(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("ip", "-o", "link", "show").CombinedOutput()
	if err != nil {
		t.Fatalf("ip link: %v: %s", err, out)
	}
	var names []string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			names = append(names, strings.TrimSuffix(f[1], ":"))
		}
	}
	sort.Strings(names)
	return names
}

func assertNothingLeft(t *testing.T, ns string, nsBefore, linksBefore []string) {
	t.Helper()
	if NetnsExists(ns) {
		t.Errorf("namespace %s left behind", ns)
	}
	if after := netnsList(t); strings.Join(after, ",") != strings.Join(nsBefore, ",") {
		t.Errorf("ip netns list changed: before %v, after %v", nsBefore, after)
	}
	if after := hostLinks(t); strings.Join(after, ",") != strings.Join(linksBefore, ",") {
		t.Errorf("interfaces changed: before %v, after %v", linksBefore, after)
	}
}

func TestBridgeProbe(t *testing.T) {
	requireRoot(t)
	nsBefore, linksBefore := netnsList(t), hostLinks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var progress []int
	res, err := ProbeBridge(ctx, BridgeProbeOptions{OnProgress: func(n int) { progress = append(progress, n) }})
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	t.Logf("probe: %+v, progress %v", res, progress)
	// BR_PORT_BITS = 10: 1024 port numbers. Port 0 is reserved by the kernel
	// (find_portno), so 1023 veths attach and the 1024th gets EXFULL.
	if res.PortNumbers != 1024 || res.PortBits != 10 {
		t.Errorf("port numbers %d (2^%d), want 1024 (BR_PORT_BITS=10)", res.PortNumbers, res.PortBits)
	}
	if res.Ports != 1023 {
		t.Errorf("attached %d ports, want 1023", res.Ports)
	}
	if res.Refusal != "Exchange full" {
		t.Errorf("refusal %q, want the kernel's EXFULL", res.Refusal)
	}
	if !res.CleanedUp || res.Namespace != fmt.Sprintf("meganode-probe-%d", os.Getpid()) {
		t.Errorf("cleanup %v, namespace %q", res.CleanedUp, res.Namespace)
	}
	if len(progress) == 0 || progress[len(progress)-1] != 1023 {
		t.Errorf("progress %v", progress)
	}
	assertNothingLeft(t, res.Namespace, nsBefore, linksBefore)
}

func TestBridgeProbeRefusesExistingNamespace(t *testing.T) {
	requireRoot(t)
	ns := fmt.Sprintf("meganode-probe-test-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	defer exec.Command("ip", "netns", "delete", ns).Run()
	_, err := ProbeBridge(context.Background(), BridgeProbeOptions{Namespace: ns})
	if err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("err %v", err)
	}
	if !NetnsExists(ns) {
		t.Fatal("the probe deleted a namespace it did not create")
	}
}

func TestBridgeProbeCancelled(t *testing.T) {
	requireRoot(t)
	nsBefore, linksBefore := netnsList(t), hostLinks(t)
	ctx, cancel := context.WithCancel(context.Background())
	res, err := ProbeBridge(ctx, BridgeProbeOptions{Chunk: 16, OnProgress: func(n int) {
		if n >= 64 {
			cancel()
		}
	}})
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("err %v", err)
	}
	if !res.CleanedUp {
		t.Error("not cleaned up after cancel")
	}
	assertNothingLeft(t, res.Namespace, nsBefore, linksBefore)
}

func TestBridgeProbeBadIP(t *testing.T) {
	requireRoot(t)
	nsBefore, linksBefore := netnsList(t), hostLinks(t)
	// A fake `ip` that creates the namespace but fails everything else: the
	// probe must still delete what was created.
	dir := t.TempDir()
	fake := dir + "/ip"
	script := "#!/bin/sh\ncase \"$1\" in netns) exec ip \"$@\";; esac\necho 'RTNETLINK answers: Operation not permitted' >&2\nexit 2\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	res, err := ProbeBridge(context.Background(), BridgeProbeOptions{IP: fake, Namespace: fmt.Sprintf("meganode-probe-bad-%d", os.Getpid())})
	if err == nil || !strings.Contains(err.Error(), "creating bridge") {
		t.Fatalf("err %v", err)
	}
	if !res.CleanedUp {
		t.Error("not cleaned up after error")
	}
	assertNothingLeft(t, res.Namespace, nsBefore, linksBefore)
}

// TestBridgeProbeSignal runs the probe in a child process (this test binary
// re-executed) and interrupts it with SIGINT and SIGTERM mid-probe: the child
// must delete its namespace before exiting.
func TestBridgeProbeSignal(t *testing.T) {
	requireRoot(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			nsBefore, linksBefore := netnsList(t), hostLinks(t)
			cmd := exec.Command(os.Args[0], "-test.run=^TestProbeHelperProcess$")
			cmd.Env = append(os.Environ(), "MEGANODE_PROBE_HELPER=1")
			stdout, _ := cmd.StdoutPipe()
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			ns := fmt.Sprintf("meganode-probe-%d", cmd.Process.Pid)
			sc := bufio.NewScanner(stdout)
			started := false
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "progress ") {
					started = true
					break
				}
			}
			if !started {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("helper never reported progress: %s", stderr.String())
			}
			if !NetnsExists(ns) {
				t.Errorf("namespace %s not there mid-probe", ns)
			}
			cmd.Process.Signal(sig)
			go func() {
				for sc.Scan() {
				}
			}()
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				t.Logf("helper exited: %v; stderr: %s", err, stderr.String())
			case <-time.After(30 * time.Second):
				cmd.Process.Kill()
				t.Fatal("helper did not exit within 30 s of the signal")
			}
			if !strings.Contains(stderr.String(), "interrupted") || !strings.Contains(stderr.String(), "cleaned up: true") {
				t.Errorf("helper did not report an interrupted, cleaned-up probe: %s", stderr.String())
			}
			assertNothingLeft(t, ns, nsBefore, linksBefore)
		})
	}
}

// TestProbeHelperProcess is the child of TestBridgeProbeSignal: the probe as the
// CLI runs it (context cancelled on SIGINT/SIGTERM), slowed down so the parent
// can interrupt it.
func TestProbeHelperProcess(t *testing.T) {
	if os.Getenv("MEGANODE_PROBE_HELPER") != "1" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	res, err := ProbeBridge(ctx, BridgeProbeOptions{Chunk: 8, OnProgress: func(n int) {
		fmt.Printf("progress %d\n", n)
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}})
	fmt.Fprintf(os.Stderr, "probe result: %v; cleaned up: %v\n", err, res.CleanedUp)
	os.Exit(0)
}

func TestHostBridges(t *testing.T) {
	m := fstest.MapFS{
		"sys/class/net/eth0/address":       {Data: []byte("x")},
		"sys/class/net/cni0/brif/veth1":    {Data: []byte("")},
		"sys/class/net/cni0/brif/veth2":    {Data: []byte("")},
		"sys/class/net/docker0/brif/vethx": {Data: []byte("")},
	}
	got, err := HostBridges(m)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != (HostBridge{"cni0", 2}) || got[1] != (HostBridge{"docker0", 1}) {
		t.Errorf("bridges %+v", got)
	}
}

func TestRefusal(t *testing.T) {
	if m, ok := refusal("Command failed -:2048\nRTNETLINK answers: Exchange full\n"); !ok || m != "Exchange full" {
		t.Errorf("%q %v", m, ok)
	}
	if _, ok := refusal("RTNETLINK answers: File exists\n"); ok {
		t.Error("other errors are not refusals")
	}
}
