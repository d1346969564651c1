package main

import (
	"encoding/json"
	"os"
	"path/filepath"
)

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
