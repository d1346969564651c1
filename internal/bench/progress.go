package bench

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// Progress shows how a run is going: a bar redrawn in place on a terminal, a
// plain line every few seconds otherwise (CI logs, make output piped to a file).
// A nil *Progress prints nothing.
type Progress struct {
	w        io.Writer
	tty      bool
	interval time.Duration

	mu      sync.Mutex
	stop    chan struct{}
	stopped chan struct{}
}

// NewProgress writes to f, as a bar if f is a terminal.
func NewProgress(f *os.File) *Progress {
	tty := false
	if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 && os.Getenv("TERM") != "dumb" {
		tty = true
	}
	return NewProgressWriter(f, tty)
}

// NewProgressWriter writes to w; tty selects the redrawn bar.
func NewProgressWriter(w io.Writer, tty bool) *Progress {
	iv := 5 * time.Second
	if tty {
		iv = 200 * time.Millisecond
	}
	return &Progress{w: w, tty: tty, interval: iv}
}

// Phase announces a step that is not measured (start-up, setup, drain).
func (p *Progress) Phase(msg string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", msg)
	} else {
		fmt.Fprintln(p.w, msg)
	}
}

// Printf prints a line of its own (clearing a bar being drawn).
func (p *Progress) Printf(format string, a ...any) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, format, a...)
	if !strings.HasSuffix(format, "\n") {
		fmt.Fprintln(p.w)
	}
}

// Start shows progress of a measured phase until Done; count reads the number of
// completed operations. The fraction done comes from total ops or from time.
func (p *Progress) Start(label string, total int64, dur time.Duration, count func() int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.stop = make(chan struct{})
	p.stopped = make(chan struct{})
	stop, stopped := p.stop, p.stopped
	p.mu.Unlock()
	start := time.Now()
	go func() {
		defer close(stopped)
		tk := time.NewTicker(p.interval)
		defer tk.Stop()
		var lastN int64
		lastT := start
		for {
			final := false
			select {
			case <-stop:
				final = true
			case <-tk.C:
			}
			now := time.Now()
			n := count()
			el := now.Sub(start)
			frac := 0.0
			if total > 0 {
				frac = float64(n) / float64(total)
			} else if dur > 0 {
				frac = el.Seconds() / dur.Seconds()
			}
			if final {
				frac = 1
			}
			if frac > 1 {
				frac = 1
			}
			inst := 0.0
			if dt := now.Sub(lastT).Seconds(); dt > 0 {
				inst = float64(n-lastN) / dt
			}
			avg := 0.0
			if el > 0 {
				avg = float64(n) / el.Seconds()
			}
			lastN, lastT = n, now
			p.mu.Lock()
			if p.tty {
				fmt.Fprintf(p.w, "\r\033[K%s %s %3.0f%% %6.1fs %10d ops %9s ops/s", label, bar(frac, 30), frac*100,
					el.Seconds(), n, HumanRate(inst))
				if final {
					fmt.Fprintf(p.w, "\r\033[K%s done: %d ops in %.1fs, %s ops/s\n", label, n, el.Seconds(), HumanRate(avg))
				}
			} else if final {
				fmt.Fprintf(p.w, "%s done: %d ops in %.1fs, %s ops/s\n", label, n, el.Seconds(), HumanRate(avg))
			} else {
				fmt.Fprintf(p.w, "%s %3.0f%% %.0fs %d ops, %s ops/s now\n", label, frac*100, el.Seconds(), n, HumanRate(inst))
			}
			p.mu.Unlock()
			if final {
				return
			}
		}
	}()
}

// Done ends the phase begun by Start.
func (p *Progress) Done() {
	if p == nil {
		return
	}
	p.mu.Lock()
	stop, stopped := p.stop, p.stopped
	p.stop = nil
	p.mu.Unlock()
	if stop == nil {
		return
	}
	close(stop)
	<-stopped
}

func bar(frac float64, width int) string {
	n := int(frac*float64(width) + 0.5)
	if n > width {
		n = width
	}
	return "[" + strings.Repeat("█", n) + strings.Repeat("·", width-n) + "]"
}

// HumanRate formats a rate like 23.4K.
func HumanRate(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fK", v/1e3)
	case v >= 1e3:
		return fmt.Sprintf("%.2fK", v/1e3)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}
