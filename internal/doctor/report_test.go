package doctor

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestHostReportAndFix(t *testing.T) {
	f := kernelDefaults()
	f.Sysctl["net.netfilter.nf_conntrack_max"] = "65536"
	r := NewHostReport(f, node(1024))
	if r.Problems() == 0 || r.Summary[StatusFail] == 0 {
		t.Fatalf("1024 pods on kernel defaults should fail: %+v", r.Summary)
	}
	content, n := FixContent(r.Checks, FixHeader(r, time.Unix(0, 0)))
	for _, w := range []string{
		"# Written by `meganode doctor host --fix` on 1970-01-01T00:00:00Z",
		"net.ipv4.neigh.default.gc_thresh1 = 1024\n",
		"net.ipv4.neigh.default.gc_thresh2 = 4096\n",
		"net.ipv4.neigh.default.gc_thresh3 = 8192\n",
		"net.ipv6.neigh.default.gc_thresh3 = 8192\n",
		"-net.netfilter.nf_conntrack_max = 131072\n",
		"# net.ipv4.neigh.default.gc_thresh3: ipv4 neighbour table gc_thresh3 (was 1024)\n",
	} {
		if !strings.Contains(content, w) {
			t.Errorf("fix content lacks %q:\n%s", w, content)
		}
	}
	if n != 7 {
		t.Errorf("%d settings, want 7 (6 gc_thresh + conntrack max)", n)
	}
	path := filepath.Join(t.TempDir(), "sysctl.d", "90-meganode.conf")
	if err := WriteFileAtomic(path, content); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || string(b) != content {
		t.Fatalf("written %q, %v", b, err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", st.Mode())
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Errorf("temporary file left: %v", ents)
	}

	var tbl bytes.Buffer
	r.WriteTable(&tbl)
	for _, w := range []string{"FAIL", "net.ipv4.neigh.default.gc_thresh3", "sources:", "kernel-neigh", "pods-per-node"} {
		if !strings.Contains(tbl.String(), w) {
			t.Errorf("table lacks %q", w)
		}
	}
	var js bytes.Buffer
	if err := WriteJSON(&js, r); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Checks []Check `json:"checks"`
	}
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Checks) != len(r.Checks) || len(back.Checks[0].Sources) == 0 {
		t.Errorf("json: %v", err)
	}
}

func TestFixContentNothing(t *testing.T) {
	r := NewHostReport(kernelDefaults(), node(110))
	if c, n := FixContent(r.Checks, "# h\n"); c != "" || n != 0 {
		t.Errorf("nothing to fix, got %d: %q", n, c)
	}
}

func TestSourcesCatalogue(t *testing.T) {
	for _, id := range SourceIDs() {
		s := Sources[id]
		if s.ID != id || s.Title == "" || s.Where == "" {
			t.Errorf("source %q incomplete: %+v", id, s)
		}
	}
	p := Plan(PlanInput{Nodes: 1000, Pods: 1000})
	for _, ids := range [][]string{p.Store.Sources, p.APIServer.Sources, p.ControllerManager.Sources, p.Kubelet.Sources, p.Scheduler.Sources, p.Addresses.Sources} {
		if len(ids) == 0 {
			t.Error("plan section without sources")
		}
		for _, id := range ids {
			if _, ok := Sources[id]; !ok {
				t.Errorf("plan cites unknown source %q", id)
			}
		}
	}
}
