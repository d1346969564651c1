package doctor

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"gonum.org/v1/gonum/stat"
)

// FsyncResult is a measured fsync latency distribution of a directory.
type FsyncResult struct {
	Dir       string  `json:"dir"`
	Samples   int     `json:"samples"`
	BlockSize int     `json:"block_size"`
	P50ms     float64 `json:"p50_ms"`
	P99ms     float64 `json:"p99_ms"`
	Maxms     float64 `json:"max_ms"`
	Meanms    float64 `json:"mean_ms"`
}

// FsyncOptions bound the measurement.
type FsyncOptions struct {
	Samples   int           // default 200
	BlockSize int           // default 2300 B: etcd's recommended fio check writes 2300-byte blocks
	MaxTime   time.Duration // stop early after this long (default 5 s), keeping ≥ 10 samples
}

// MeasureFsync appends BlockSize bytes to a temporary file in dir and
// fdatasyncs it, Samples times, like a write-ahead log committing one record at
// a time. The file is removed afterwards.
func MeasureFsync(dir string, o FsyncOptions) (*FsyncResult, error) {
	if o.Samples <= 0 {
		o.Samples = 200
	}
	if o.BlockSize <= 0 {
		o.BlockSize = 2300
	}
	if o.MaxTime <= 0 {
		o.MaxTime = 5 * time.Second
	}
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("store data directory: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("store data directory %s is not a directory", dir)
	}
	f, err := os.CreateTemp(dir, ".meganode-doctor-fsync-*")
	if err != nil {
		return nil, fmt.Errorf("creating a test file in %s: %w", dir, err)
	}
	name := f.Name()
	defer os.Remove(name)
	defer f.Close()

	buf := make([]byte, o.BlockSize)
	for i := range buf {
		buf[i] = byte(i)
	}
	lat := make([]time.Duration, 0, o.Samples)
	start := time.Now()
	for i := 0; i < o.Samples; i++ {
		if _, err := f.Write(buf); err != nil {
			return nil, fmt.Errorf("writing %s: %w", name, err)
		}
		t := time.Now()
		if err := fdatasync(f); err != nil {
			return nil, fmt.Errorf("fdatasync %s: %w", name, err)
		}
		lat = append(lat, time.Since(t))
		if len(lat) >= 10 && time.Since(start) > o.MaxTime {
			break
		}
	}
	abs, _ := filepath.Abs(dir)
	return summarise(abs, o.BlockSize, lat), nil
}

func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}

func summarise(dir string, block int, lat []time.Duration) *FsyncResult {
	r := &FsyncResult{Dir: dir, Samples: len(lat), BlockSize: block}
	if len(lat) == 0 {
		return r
	}
	ms := make([]float64, len(lat))
	for i, d := range lat {
		ms[i] = float64(d) / float64(time.Millisecond)
	}
	sort.Float64s(ms)
	// Nearest-rank percentiles over every sample (gonum's empirical quantile).
	r.P50ms = stat.Quantile(0.50, stat.Empirical, ms, nil)
	r.P99ms = stat.Quantile(0.99, stat.Empirical, ms, nil)
	r.Maxms = ms[len(ms)-1]
	r.Meanms = stat.Mean(ms, nil)
	return r
}
