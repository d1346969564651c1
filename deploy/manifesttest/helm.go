package manifesttest

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// RepoRoot is the directory of the main module's go.mod above the working directory.
func RepoRoot(t *testing.T) string {
	t.Helper()
	d, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && bytes.Contains(b, []byte("module github.com/meganode/meganode\n")) {
			return d
		}
		if filepath.Dir(d) == d {
			t.Fatal("no github.com/meganode/meganode go.mod above the working directory")
		}
		d = filepath.Dir(d)
	}
}

// Chart is the path of deploy/helm/meganode.
func Chart(t *testing.T) string {
	t.Helper()
	return filepath.Join(RepoRoot(t), "deploy", "helm", "meganode")
}

// Helm runs `helm template RELEASE CHART --namespace NS ARGS...` with the helm the Makefile
// builds (bin/helm, `make helm`; MEGANODE_HELM overrides it) and returns the rendered stream;
// with wantErr the render must fail, and its error output is returned.
func Helm(t *testing.T, release, namespace string, wantErr bool, args ...string) []byte {
	t.Helper()
	helm := os.Getenv("MEGANODE_HELM")
	if helm == "" {
		helm = filepath.Join(RepoRoot(t), "bin", "helm")
	}
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("%v (build helm with `make helm`, or set MEGANODE_HELM)", err)
	}
	// Read the chart here too: `go test` caches a result by the files the test process opened,
	// and helm reads the chart in a process of its own, so an edited chart would get the cached
	// result of the one before.
	if err := filepath.WalkDir(Chart(t), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			_, err = os.ReadFile(p)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	cmd := exec.Command(helm, append([]string{"template", release, Chart(t), "--namespace", namespace}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	err := cmd.Run()
	switch {
	case wantErr && err == nil:
		t.Fatalf("helm template %v: rendered, want an error", args)
	case wantErr:
		return errOut.Bytes()
	case err != nil:
		t.Fatalf("helm template %v: %v\n%s", args, err, errOut.Bytes())
	}
	return out.Bytes()
}
