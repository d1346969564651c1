package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
)

// useStoreBin makes the members a bench starts run bin (storeproc reads
// MEGANODE_STORE_BIN) and answers where their logs go: the command's stderr
// with storeLog, nowhere without.
func useStoreBin(cmd *cobra.Command, bin string, storeLog bool) (io.Writer, error) {
	if bin != "" {
		abs, err := filepath.Abs(bin)
		if err != nil {
			return nil, err
		}
		os.Setenv("MEGANODE_STORE_BIN", abs)
	}
	if storeLog {
		return cmd.ErrOrStderr(), nil
	}
	return nil, nil
}

// writeBenchOut writes a bench's results to dir (nothing when dir is empty): each of
// files as indented JSON under its name, and summary.txt.
func writeBenchOut(dir string, files map[string]any, summary string) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, v := range files {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(summary), 0o644)
}
