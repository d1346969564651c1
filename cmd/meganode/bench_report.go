package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meganode/meganode/internal/bench"
)

type benchReportFlags struct {
	in, md, charts string
}

// newBenchReportCmd merges results.json files and writes the markdown report, its PNG
// charts, the merged JSON and an HTML page next to the charts.
func newBenchReportCmd() *cobra.Command {
	f := &benchReportFlags{}
	cmd := &cobra.Command{
		Use:   "report",
		Short: "merge bench results into a markdown report with charts (docs/benchmarks.md)",
		Long: `report merges the results.json of bench runs (--in, directories or files) and writes the
markdown report (--md), its PNG charts, the merged results.json and an index.html in
--charts. It exits 1 when the results record a failed run.`,
		Example: `  meganode bench report --in bin/bench-results/put-buffered,bin/bench-results/lease-flood --md docs/benchmarks.md --charts docs/bench`,
		Args:    noArgs,
		RunE:    action(f, runBenchReport),
	}
	fs := cmd.Flags()
	fs.StringVar(&f.in, "in", "", "results directories or files, comma-separated")
	fs.StringVar(&f.md, "md", "", "markdown file to write (e.g. docs/benchmarks.md)")
	fs.StringVar(&f.charts, "charts", "", "directory for the PNG charts, merged results.json and index.html (default: bench/ beside --md)")
	return cmd
}

func (f *benchReportFlags) validate() error {
	if f.in == "" || f.md == "" {
		return usagef("--in and --md are required")
	}
	return nil
}

func runBenchReport(ctx context.Context, cmd *cobra.Command, f *benchReportFlags) error {
	var reps []*bench.Report
	for _, p := range strings.Split(f.in, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		r, err := bench.ReadReport(p)
		if err != nil {
			return err
		}
		reps = append(reps, r)
	}
	rep := bench.Merge(reps...)
	if f.charts == "" {
		f.charts = filepath.Join(filepath.Dir(f.md), "bench")
	}
	cs := bench.Charts(rep)
	if err := bench.WritePNGs(f.charts, cs); err != nil {
		return err
	}
	if err := rep.WriteJSON(filepath.Join(f.charts, bench.ResultsFile)); err != nil {
		return err
	}
	hf, err := os.Create(filepath.Join(f.charts, "index.html"))
	if err != nil {
		return err
	}
	bench.WriteHTML(hf, rep, cs)
	if err := hf.Close(); err != nil {
		return err
	}
	rel, err := filepath.Rel(filepath.Dir(f.md), f.charts)
	if err != nil {
		rel = f.charts
	}
	prefix := filepath.ToSlash(rel) + "/"
	mf, err := os.Create(f.md)
	if err != nil {
		return err
	}
	bench.WriteMarkdown(mf, rep, cs, prefix)
	if err := mf.Close(); err != nil {
		return err
	}
	fmt.Printf("wrote %s and %d charts in %s\n", f.md, len(cs), f.charts)
	if len(rep.Failures) > 0 {
		return fmt.Errorf("the results record %d failed run(s); see %s", len(rep.Failures), f.md)
	}
	return nil
}
