package bench

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Progress shows how a run is going: on a terminal a bar redrawn in place
// (github.com/schollz/progressbar), otherwise a plain line every few seconds
// (CI logs, make output piped to a file), which a bar library does not do: its
// redraws would land in the log as one line each. A nil *Progress prints nothing.
type Progress struct {
	w        io.Writer
	tty      bool
	interval time.Duration // how often a non-terminal gets a line (and the bar is fed)

	mu      sync.Mutex
	bar     *progressbar.ProgressBar // the bar of the running phase, on a terminal
	stop    chan struct{}
	stopped chan struct{}
}

// NewProgress writes to f, as a bar if f is a terminal.
func NewProgress(f *os.File) *Progress {
	return NewProgressWriter(f, term.IsTerminal(int(f.Fd())) && os.Getenv("TERM") != "dumb")
}

// NewProgressWriter writes to w; tty selects the redrawn bar.
func NewProgressWriter(w io.Writer, tty bool) *Progress {
	iv := 5 * time.Second
	if tty {
		iv = 200 * time.Millisecond
	}
	return &Progress{w: w, tty: tty, interval: iv}
}

// clearLine wipes a bar or phase message being shown; p.mu is held.
func (p *Progress) clearLine() {
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

// Phase announces a step that is not measured (start-up, setup, drain).
func (p *Progress) Phase(msg string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		p.clearLine()
		fmt.Fprint(p.w, msg)
	} else {
		fmt.Fprintln(p.w, msg)
	}
}

// Printf prints a line of its own (clearing a bar being drawn; the bar comes back
// at its next update).
func (p *Progress) Printf(format string, a ...any) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLine()
	fmt.Fprintf(p.w, format, a...)
	if !strings.HasSuffix(format, "\n") {
		fmt.Fprintln(p.w)
	}
}

// Start shows progress of a measured phase until Done; count reads the number of
// completed operations. The fraction done comes from total ops or, when total is
// 0, from the time elapsed of dur.
func (p *Progress) Start(label string, total int64, dur time.Duration, count func() int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.stop = make(chan struct{})
	p.stopped = make(chan struct{})
	stop, stopped := p.stop, p.stopped
	byTime := total <= 0
	if p.tty {
		p.clearLine()
		limit := total
		if byTime {
			limit = -1 // a spinner with the elapsed time, unless a duration gives the end
			if dur > 0 {
				limit = dur.Milliseconds()
			}
		}
		opts := []progressbar.Option{
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription(label),
			progressbar.OptionSetWidth(30),
			progressbar.OptionUseANSICodes(true),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionClearOnFinish(),
			progressbar.OptionSetRenderBlankState(true),
		}
		if !byTime {
			opts = append(opts, progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("ops"))
		}
		p.bar = progressbar.NewOptions64(limit, opts...)
	}
	bar := p.bar
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
			inst := 0.0
			if dt := now.Sub(lastT).Seconds(); dt > 0 {
				inst = float64(n-lastN) / dt
			}
			lastN, lastT = n, now
			p.mu.Lock()
			switch {
			case final:
				if bar != nil {
					_ = bar.Finish() // clears the bar
					p.clearLine()
				}
				avg := 0.0
				if el > 0 {
					avg = float64(n) / el.Seconds()
				}
				fmt.Fprintf(p.w, "%s done: %d ops in %.1fs, %s ops/s\n", label, n, el.Seconds(), HumanRate(avg))
			case bar != nil && byTime:
				bar.Describe(fmt.Sprintf("%s %d ops, %s ops/s", label, n, HumanRate(inst)))
				_ = bar.Set64(min(el.Milliseconds(), max(bar.GetMax64()-1, 0)))
			case bar != nil:
				_ = bar.Set64(min(n, total))
			default:
				frac := 0.0
				if !byTime {
					frac = float64(n) / float64(total)
				} else if dur > 0 {
					frac = el.Seconds() / dur.Seconds()
				}
				fmt.Fprintf(p.w, "%s %3.0f%% %.0fs %d ops, %s ops/s now\n", label, min(frac, 1)*100, el.Seconds(), n, HumanRate(inst))
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
	p.mu.Lock()
	p.bar = nil
	p.mu.Unlock()
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
