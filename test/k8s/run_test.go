package k8s

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/meganode/meganode/internal/storeproc"
)

// suite is one Kubernetes integration test package and the tests of it we run.
type suite struct {
	pkg   string // import path under k8s.io/kubernetes/test/integration
	run   string // -test.run pattern
	quick bool   // part of `make test`; the rest run in `make test-k8s`
}

var suites = []suite{
	// Writes and reads every built-in resource (and CRDs) through a real
	// apiserver and checks the exact etcd key and encoding of each.
	{pkg: "etcd", run: "TestEtcdStoragePath$|TestCrossGroupStorage$|TestOverlappingCustomResource", quick: true},
	// List/watch behaviour of the apiserver's storage layer: chunked lists with
	// continue tokens, resource versions, watch cache consistency.
	{pkg: "apiserver", run: "TestAPIListChunking$|TestListOptions$|TestListResourceVersion0$|TestMetadataClient$|TestWatchCacheConsistentRead", quick: false},
}

func full() bool { return os.Getenv("MEGANODE_K8S_FULL") != "" }

func goBin() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}

// build compiles the integration test package (cached by the go build cache).
func build(t *testing.T, pkg, out string) {
	t.Helper()
	cmd := exec.Command(goBin(), "test", "-c", "-tags", "k8sintegration", "-o", out, "k8s.io/kubernetes/test/integration/"+pkg)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("building k8s.io/kubernetes/test/integration/%s: %v", pkg, err)
	}
}

// workdir mirrors the bit of the kubernetes repository layout the tests read
// relative to their directory: the k8s.io/api serialization fixtures.
func workdir(t *testing.T, pkg string) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "test", "integration", pkg)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(goBin(), "list", "-m", "-f", "{{.Dir}}", "k8s.io/api").Output()
	if err != nil {
		t.Fatalf("locating k8s.io/api: %v", err)
	}
	api := strings.TrimSpace(string(out))
	if err := os.MkdirAll(filepath.Join(root, "staging", "src", "k8s.io"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(api, filepath.Join(root, "staging", "src", "k8s.io", "api")); err != nil {
		t.Fatal(err)
	}
	return dir
}

var resultLine = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+)`)

func TestKubernetesIntegrationOnMeganodeStore(t *testing.T) {
	bins := t.TempDir()
	total := map[string]int{}
	for _, s := range suites {
		if !s.quick && !full() {
			continue
		}
		s := s
		t.Run(s.pkg, func(t *testing.T) {
			bin := filepath.Join(bins, s.pkg+".test")
			build(t, s.pkg, bin)
			store, err := storeproc.Start(storeproc.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Stop()
			ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "-test.v", "-test.run", s.run, "-test.timeout", "25m")
			cmd.Dir = workdir(t, s.pkg)
			cmd.Env = append(os.Environ(), "KUBE_INTEGRATION_ETCD_URL=http://"+store.Endpoint)
			logPath := filepath.Join(os.TempDir(), fmt.Sprintf("meganode-k8s-%s.log", s.pkg))
			logf, err := os.Create(logPath)
			if err != nil {
				t.Fatal(err)
			}
			defer logf.Close()
			stdout, _ := cmd.StdoutPipe()
			cmd.Stderr = logf
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			counts := map[string]int{}
			var failed []string
			sc := bufio.NewScanner(stdout)
			sc.Buffer(make([]byte, 1<<20), 1<<24)
			for sc.Scan() {
				line := sc.Text()
				fmt.Fprintln(logf, line)
				if m := resultLine.FindStringSubmatch(line); m != nil {
					counts[m[1]]++
					if m[1] == "FAIL" {
						failed = append(failed, m[2])
					}
				}
			}
			err = cmd.Wait()
			t.Logf("k8s.io/kubernetes/test/integration/%s (%s) on meganode-store: %d passed, %d failed, %d skipped (log: %s)",
				s.pkg, s.run, counts["PASS"], counts["FAIL"], counts["SKIP"], logPath)
			for k, v := range counts {
				total[k] += v
			}
			if len(failed) > 0 {
				t.Fatalf("failed: %s", strings.Join(failed, ", "))
			}
			if err != nil {
				t.Fatalf("test binary: %v (log: %s)", err, logPath)
			}
			if counts["PASS"] == 0 {
				t.Fatalf("no Kubernetes test ran (pattern %q)", s.run)
			}
		})
	}
	t.Logf("Kubernetes integration tests on meganode-store: %d passed, %d failed, %d skipped", total["PASS"], total["FAIL"], total["SKIP"])
}
