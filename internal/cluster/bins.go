package cluster

import (
	"fmt"
	"os"
	"path/filepath"
)

// The binaries `make k8s-bins` (and `make store`) put in bin/.
const (
	BinStore      = "meganode-store"
	BinAPIServer  = "kube-apiserver"
	BinCM         = "kube-controller-manager"
	BinScheduler  = "kube-scheduler"
	BinKwok       = "kwok"
	KwokStagesDir = "kwok-stages"
)

// BinDir finds the directory holding the built binaries: $MEGANODE_BIN_DIR, the directory of
// the running executable if it holds kube-apiserver, else bin/ found by walking up from the
// working directory to the repository root (go.mod).
func BinDir() (string, error) {
	if d := os.Getenv("MEGANODE_BIN_DIR"); d != "" {
		return d, nil
	}
	if exe, err := os.Executable(); err == nil {
		d := filepath.Dir(exe)
		if _, err := os.Stat(filepath.Join(d, BinAPIServer)); err == nil {
			return d, nil
		}
	}
	wd, _ := os.Getwd()
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, "bin"), nil
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	return "", fmt.Errorf("cannot find bin/: set MEGANODE_BIN_DIR or run from the repository")
}

// CheckBins reports every binary `up` needs that is missing from dir.
func CheckBins(dir string, store string) error {
	need := []string{BinAPIServer, BinCM, BinScheduler, BinKwok, KwokStagesDir}
	if store == StoreMeganode {
		need = append([]string{BinStore}, need...)
	}
	var missing []string
	for _, n := range need {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing in %s: %v — build them with `make store k8s-bins` (first build of the Kubernetes binaries takes several minutes)", dir, missing)
	}
	return nil
}
