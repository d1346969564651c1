package cluster

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"text/tabwriter"
)

// Missing is what the table prints for a figure a stack did not yield.
const Missing = "missing"

// FormatValue prints a figure with three significant digits or so (the table's cells; the
// JSON keeps full precision, and the e2e test checks that the cells are the JSON's values).
func FormatValue(v *float64) string {
	if v == nil {
		return Missing
	}
	switch x := *v; {
	case x >= 100 || x <= -100:
		return fmt.Sprintf("%.0f", x)
	case x >= 10 || x <= -10:
		return fmt.Sprintf("%.1f", x)
	case x >= 1 || x <= -1:
		return fmt.Sprintf("%.2f", x)
	default:
		return fmt.Sprintf("%.3f", x)
	}
}

// FormatRatio prints meganode/stock as "0.42×", "–" when either value is missing.
func FormatRatio(r *float64) string {
	if r == nil {
		return "–"
	}
	return fmt.Sprintf("%.2f×", *r)
}

// RowLabel is a row's first cell: its name and unit.
func RowLabel(r CompareRow) string { return fmt.Sprintf("%s (%s)", r.Name, r.Unit) }

const tableHeader = "METRIC\tMEGANODE\tSTOCK\tMEGANODE/STOCK\tBETTER"

// Print writes the one table: a header saying what ran, one line per figure, the notes.
func (c *Comparison) Print(w io.Writer) {
	rate := "unthrottled"
	if c.QPS > 0 {
		rate = fmt.Sprintf("%.0f/s", c.QPS)
	}
	fmt.Fprintf(w, "\nmeganode vs stock — the same load on both: %d KWOK nodes, %d pods created at %s (the measured window), then a drain of %d pods\n",
		c.Nodes, c.Pods, rate, c.DrainPods)
	for _, s := range c.Stacks {
		win := "not measured"
		if s.Report != nil {
			win = fmt.Sprintf("window %.0fs", s.Report.Seconds)
		}
		fmt.Fprintf(w, "  %-8s = %s + %s (%s, run %.0fs)\n", s.Name, storeTitle(s.Store), s.Scheduler, win, s.Seconds)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, tableHeader)
	for _, r := range c.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", RowLabel(r), FormatValue(r.Meganode), FormatValue(r.Stock), FormatRatio(r.Ratio), r.Better)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nratio = meganode / stock: below 1 is better where lower is better (latency, CPU, memory), above 1 where higher is (pods/s).")
	fmt.Fprintln(w, "API p99 per verb and pod startup over the paced window (kube-apiserver's apiserver_request_duration_seconds, a pod watch);")
	fmt.Fprintln(w, "store CPU and RSS from /proc of the store process(es) over that window; pods/s and scheduler CPU from the drain (/proc of the scheduler).")
	fmt.Fprintln(w, "One run of each stack: on a small shared machine the latency rows move from run to run; make bench and meganode scheduler bench repeat and sweep.")
	for _, n := range c.Notes {
		fmt.Fprintln(w, "note:", n)
	}
}

func storeTitle(store string) string {
	if store == StoreEtcd {
		return "etcd v3.6"
	}
	return "meganode-store"
}

// WriteJSON writes comparison.json into dir and returns its path.
func (c *Comparison) WriteJSON(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, "comparison.json")
	return p, os.WriteFile(p, b, 0o644)
}

var cellGap = regexp.MustCompile(`\s{2,}`)

// ParseTable reads the table back from Print's output: each row's label → its four cells
// (meganode, stock, ratio, better). Tests use it to hold the printed table to comparison.json.
func ParseTable(out string) map[string][]string {
	rows := map[string][]string{}
	header := strings.Split(tableHeader, "\t")
	in := false
	for _, line := range strings.Split(out, "\n") {
		cells := cellGap.Split(strings.TrimSpace(line), -1)
		switch {
		case !in:
			in = len(cells) == len(header) && cells[0] == header[0] && cells[len(cells)-1] == header[len(header)-1]
		case strings.TrimSpace(line) == "":
			return rows
		case len(cells) == len(header):
			rows[cells[0]] = cells[1:]
		}
	}
	return rows
}
