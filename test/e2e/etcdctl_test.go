package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
)

// etcdctlBin is $ETCDCTL_BIN, else bin/etcdctl (`make etcdctl`) found by walking up to the repository root.
func etcdctlBin() string {
	if b := os.Getenv("ETCDCTL_BIN"); b != "" {
		return b
	}
	dir, _ := os.Getwd()
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "bin", "etcdctl")); err == nil {
			return filepath.Join(d, "bin", "etcdctl")
		}
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil || d == filepath.Dir(d) {
			return ""
		}
	}
}

var (
	tookRe     = regexp.MustCompile(`took( =)? [0-9.]+[µnm]?s`)
	compactRe  = regexp.MustCompile(`(compacted revision|^compact) [0-9]+`)
	zapLevelRe = regexp.MustCompile(`^\{"level":`)
)

// TestQuotaEtcdctl runs the operator's side of the issue with etcdctl v3.6 on both servers:
// a refused put, `alarm list`, `endpoint health`, delete + compact + defrag, `alarm disarm`, a
// put that succeeds. Outputs are compared after member ids, endpoints and timings are masked.
func TestQuotaEtcdctl(t *testing.T) {
	bin := etcdctlBin()
	if bin == "" {
		t.Skip("etcdctl not found: `make etcdctl` builds bin/etcdctl (or set ETCDCTL_BIN)")
	}
	tr := transcripts{}
	forEachDedicated(t, serverOpts{QuotaBytes: quota32}, func(t *testing.T, tg *target) {
		acked, err := fill(t, tg)
		wantErr(t, "fill", err, codes.ResourceExhausted, noSpace)
		st, err := tg.Maint.Status(ctxT(t), &pb.StatusRequest{})
		must(t, "status", err)
		mask := func(s string) string {
			s = strings.ReplaceAll(s, fmt.Sprint(st.Header.MemberId), "<member>")
			s = strings.ReplaceAll(s, fmt.Sprintf("%x", st.Header.MemberId), "<member>")
			s = strings.ReplaceAll(s, tg.Endpoint, "<endpoint>")
			s = tookRe.ReplaceAllString(s, "took <t>")
			return compactRe.ReplaceAllString(s, "$1 <rev>")
		}
		run := func(args ...string) {
			t.Helper()
			cmd := exec.Command(bin, append([]string{"--endpoints", "http://" + tg.Endpoint}, args...)...)
			var out, errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			err := cmd.Run()
			// etcdctl's own client logs (JSON, with timestamps) are not part of its answer.
			var stderr []string
			for _, l := range strings.Split(strings.TrimSpace(errOut.String()), "\n") {
				if l != "" && !zapLevelRe.MatchString(l) {
					stderr = append(stderr, l)
				}
			}
			stdout := strings.TrimSpace(out.String())
			if args[0] == "del" && stdout == fmt.Sprint(acked) {
				stdout = "<as many as were filled>" // how many fit differs (TestQuotaNoSpace)
			}
			line := fmt.Sprintf("etcdctl %s: exit %v; stdout %q; stderr %q", mask(strings.Join(args, " ")), err, mask(stdout), mask(strings.Join(stderr, "\n")))
			t.Log(line)
			tr.note(tg, line)
		}
		run("put", "/small", "v")
		run("alarm", "list")
		run("endpoint", "health")
		run("del", "--prefix", "/fill/")
		run("compact", fmt.Sprint(curRev(t, tg)))
		run("defrag")
		run("put", "/small", "v")
		run("alarm", "disarm")
		run("alarm", "list")
		run("endpoint", "health")
		run("put", "/small", "v")
	})
	tr.compare(t)
}
