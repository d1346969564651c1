package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// SoakConfig is the soak (issue 18): etcd's own `benchmark put` against each
// target for Duration, cut into consecutive runs of Chunk so that every minute
// gets its own p99 from etcd's own report; each run compacts once with the
// tool's --compact-interval (CompactInterval < Chunk).
type SoakConfig struct {
	BenchmarkBin    string        // etcd's tools/benchmark binary
	Duration        time.Duration // whole soak
	Chunk           time.Duration // one benchmark run: one sample (61 s: a minute, plus the second in which it compacts)
	Rate            int           // puts per second per target
	Clients, Conns  int
	KeySize         int
	ValSize         int
	KeySpace        int
	CompactInterval time.Duration
	Log             io.Writer // the tool's raw output, prefixed by target and minute
}

// SoakSample is one chunk (≈ one minute) of one target.
type SoakSample struct {
	Minute       int     `json:"minute"`
	Requests     int     `json:"requests"`
	Errors       int     `json:"errors"`
	OpsPerSec    float64 `json:"ops_per_sec"`
	P50Ms        float64 `json:"p50_ms"`
	P99Ms        float64 `json:"p99_ms"`
	P999Ms       float64 `json:"p99_9_ms"`
	MaxMs        float64 `json:"max_ms"`
	RSSMaxBytes  uint64  `json:"rss_max_bytes"`  // highest of the 5-second RSS readings in the minute
	RSSEndBytes  uint64  `json:"rss_end_bytes"`  // at the end of the minute
	DataDirBytes int64   `json:"data_dir_bytes"` // at the end of the minute
	DataDirMax   int64   `json:"data_dir_max_bytes"`
	CPUMicrosOp  float64 `json:"server_cpu_us_per_op"`
}

// SoakResult is one target's soak.
type SoakResult struct {
	Target  string        `json:"target"`
	Samples []*SoakSample `json:"samples"`
	Err     string        `json:"error,omitempty"`
}

// The lines of etcd's report (pkg/report) the soak reads.
var (
	reSlowest  = regexp.MustCompile(`Slowest:\s+([0-9.]+) secs`)
	reRPS      = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	rePct      = regexp.MustCompile(`(?m)^\s*([0-9.]+)% in ([0-9.]+) secs`)
	reErrCount = regexp.MustCompile(`(?m)^\s*\[(\d+)\]\s`)
)

// ParseBenchmarkReport reads etcd benchmark's summary into s.
func ParseBenchmarkReport(out string, s *SoakSample) error {
	m := reSlowest.FindStringSubmatch(out)
	if m == nil {
		return fmt.Errorf("no Slowest line in the benchmark's report")
	}
	s.MaxMs = secsToMs(m[1])
	if m := reRPS.FindStringSubmatch(out); m != nil {
		s.OpsPerSec, _ = strconv.ParseFloat(m[1], 64)
	}
	for _, m := range rePct.FindAllStringSubmatch(out, -1) {
		switch m[1] {
		case "50":
			s.P50Ms = secsToMs(m[2])
		case "99":
			s.P99Ms = secsToMs(m[2])
		case "99.9":
			s.P999Ms = secsToMs(m[2])
		}
	}
	if i := strings.Index(out, "Error distribution:"); i >= 0 {
		for _, m := range reErrCount.FindAllStringSubmatch(out[i:], -1) {
			n, _ := strconv.Atoi(m[1])
			s.Errors += n
		}
	}
	return nil
}

func secsToMs(s string) float64 {
	v, _ := strconv.ParseFloat(s, 64)
	return math.Round(v*1e6) / 1e3 // the report's 4 decimals: whole microseconds
}

// DirSize is the bytes the files under dir take (apparent sizes).
func DirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// Soak loads t until ctx ends or cfg.Duration passed; onSample sees each minute.
func Soak(ctx context.Context, t *Target, cfg SoakConfig, onSample func(*SoakSample)) *SoakResult {
	res := &SoakResult{Target: t.Name}
	chunks := int(math.Ceil(float64(cfg.Duration) / float64(cfg.Chunk)))
	for i := 0; i < chunks && ctx.Err() == nil; i++ {
		s, err := soakChunk(ctx, t, cfg, i+1)
		if s != nil {
			res.Samples = append(res.Samples, s)
			if onSample != nil {
				onSample(s)
			}
		}
		if err != nil {
			res.Err = fmt.Sprintf("minute %d: %v", i+1, err)
			break
		}
	}
	return res
}

func soakChunk(ctx context.Context, t *Target, cfg SoakConfig, minute int) (*SoakSample, error) {
	total := int(float64(cfg.Rate) * cfg.Chunk.Seconds())
	args := []string{
		"--endpoints", strings.Join(t.Endpoints, ","), "--clients", strconv.Itoa(cfg.Clients), "--conns", strconv.Itoa(cfg.Conns),
		"put", "--key-size", strconv.Itoa(cfg.KeySize), "--val-size", strconv.Itoa(cfg.ValSize),
		"--key-space-size", strconv.Itoa(cfg.KeySpace), "--rate", strconv.Itoa(cfg.Rate), "--total", strconv.Itoa(total),
		"--compact-interval", cfg.CompactInterval.String(),
	}
	cmd := exec.CommandContext(ctx, cfg.BenchmarkBin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	s := &SoakSample{Minute: minute, Requests: total}
	var mu sync.Mutex
	poll := func() {
		mu.Lock()
		defer mu.Unlock()
		if t.Pid > 0 {
			if p, err := ReadProc(t.Pid); err == nil {
				s.RSSMaxBytes = max(s.RSSMaxBytes, p.RSSBytes)
				s.RSSEndBytes = p.RSSBytes
			}
		}
		if t.DataDir != "" {
			s.DataDirBytes = DirSize(t.DataDir) + UnlinkedBytes(t.Pid, t.DataDir, false)
			s.DataDirMax = max(s.DataDirMax, s.DataDirBytes)
		}
	}
	var before ProcSample
	if t.Pid > 0 {
		before, _ = ReadProc(t.Pid)
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			poll()
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	var report strings.Builder
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		report.WriteString(sc.Text() + "\n")
	}
	werr := cmd.Wait()
	close(stop)
	<-polled
	poll()
	if t.Pid > 0 {
		if after, err := ReadProc(t.Pid); err == nil {
			s.CPUMicrosOp = (after.CPUMicros() - before.CPUMicros()) / float64(total)
		}
	}
	if cfg.Log != nil {
		fmt.Fprintf(cfg.Log, "--- %s minute %d: benchmark %s\n%s", t.Name, minute, strings.Join(args, " "), report.String())
		if werr != nil && stderr.Len() > 0 { // its progress bar otherwise
			fmt.Fprintf(cfg.Log, "--- %s minute %d stderr:\n%s\n", t.Name, minute, lastLines(stderr.String(), 20))
		}
	}
	if werr != nil {
		return s, fmt.Errorf("benchmark: %v: %s", werr, lastLines(stderr.String(), 10))
	}
	return s, ParseBenchmarkReport(report.String(), s)
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// SoakCharts draws RSS, data dir and latency per minute for every target.
func SoakCharts(results []*SoakResult) []NamedChart {
	n := 0
	for _, r := range results {
		n = max(n, len(r.Samples))
	}
	x := make([]string, n)
	for i := range x {
		x[i] = strconv.Itoa(i + 1)
	}
	values := func(r *SoakResult, f func(*SoakSample) float64) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = math.NaN()
			if i < len(r.Samples) {
				v[i] = f(r.Samples[i])
			}
		}
		return v
	}
	mib := func(v float64) string { return fmt.Sprintf("%.0f MiB", v) }
	ms := func(v float64) string { return fmt.Sprintf("%.0f ms", v) }
	rss := &Chart{Title: "Soak: server RSS per minute (max of 5 s readings)", XLabel: "minute", YLabel: "RSS", X: x, Format: mib}
	disk := &Chart{Title: "Soak: data directory size at the end of each minute", XLabel: "minute", YLabel: "bytes", X: x, Format: mib}
	lat := &Chart{Title: "Soak: put latency per minute (etcd benchmark: p99 solid, max dashed)", XLabel: "minute", YLabel: "latency",
		X: x, Format: ms, LogY: true}
	for _, r := range results {
		c := targetColor(r.Target)
		rss.Series = append(rss.Series, Series{Name: r.Target, Color: c, Values: values(r, func(s *SoakSample) float64 { return float64(s.RSSMaxBytes) / (1 << 20) })})
		disk.Series = append(disk.Series, Series{Name: r.Target, Color: c, Values: values(r, func(s *SoakSample) float64 { return float64(s.DataDirBytes) / (1 << 20) })})
		lat.Series = append(lat.Series,
			Series{Name: r.Target + " p99", Color: c, Values: values(r, func(s *SoakSample) float64 { return s.P99Ms })},
			Series{Name: r.Target + " max", Color: c, Dashed: true, Values: values(r, func(s *SoakSample) float64 { return s.MaxMs })})
	}
	return []NamedChart{{"soak-rss", "soak", rss}, {"soak-data-dir", "soak", disk}, {"soak-latency", "soak", lat}}
}

// SoakSummary is the verdict lines for a soak: first-quarter vs worst-minute RSS,
// data-dir range, and the latency tails per target.
func SoakSummary(results []*SoakResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-9s %7s %8s %12s %12s %9s %13s %9s %9s %9s %9s %7s\n", "target", "minutes", "ops/s",
		"RSS q1 max", "RSS max", "max/q1", "data dir", "p99 max", "p99.9 max", "max", "µs/op", "errors")
	for _, r := range results {
		if len(r.Samples) == 0 {
			fmt.Fprintf(&b, "%-9s no samples (%s)\n", r.Target, r.Err)
			continue
		}
		q := max(1, len(r.Samples)/4)
		var q1, all uint64
		var dmin, dmax int64 = math.MaxInt64, 0
		var p99, p999, mx, ops, cpu float64
		errs := 0
		for i, s := range r.Samples {
			if i < q {
				q1 = max(q1, s.RSSMaxBytes)
			}
			all = max(all, s.RSSMaxBytes)
			dmin, dmax = min(dmin, s.DataDirBytes), max(dmax, s.DataDirMax)
			p99, p999, mx = max(p99, s.P99Ms), max(p999, s.P999Ms), max(mx, s.MaxMs)
			ops += s.OpsPerSec
			cpu += s.CPUMicrosOp
			errs += s.Errors
		}
		k := float64(len(r.Samples))
		fmt.Fprintf(&b, "%-9s %7d %8.0f %8.0f MiB %8.0f MiB %8.2fx %4.0f-%4.0f MiB %6.1f ms %6.1f ms %6.1f ms %9.1f %7d\n", r.Target, len(r.Samples),
			ops/k, float64(q1)/(1<<20), float64(all)/(1<<20), float64(all)/float64(q1), float64(dmin)/(1<<20), float64(dmax)/(1<<20),
			p99, p999, mx, cpu/k, errs)
		if r.Err != "" {
			fmt.Fprintf(&b, "%-9s stopped: %s\n", r.Target, r.Err)
		}
	}
	return b.String()
}

// WriteSoakOutputs writes soak.json, summary.txt and the PNG charts into dir.
func WriteSoakOutputs(dir string, meta any, results []*SoakResult) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(map[string]any{"meta": meta, "results": results}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "soak.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(SoakSummary(results)), 0o644); err != nil {
		return err
	}
	return WritePNGs(dir, SoakCharts(results))
}
