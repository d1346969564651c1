package doctor

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// Host facts are read through an fs.FS rooted at "/" (os.DirFS("/") for the
// running host, fstest.MapFS in tests), so every rule can be unit-tested with
// made-up /proc and /sys contents.

// Unlimited is how an "unlimited" rlimit is represented.
const Unlimited = math.MaxUint64

// Limit is one resource limit (soft and hard) as /proc/<pid>/limits shows it.
type Limit struct {
	Soft uint64 `json:"soft"`
	Hard uint64 `json:"hard"`
}

func (l Limit) String() string {
	return fmtLimit(l.Soft) + "/" + fmtLimit(l.Hard)
}

func fmtLimit(v uint64) string {
	if v == Unlimited {
		return "unlimited"
	}
	return strconv.FormatUint(v, 10)
}

// Facts is everything the host rules look at.
type Facts struct {
	// Sysctl holds the value of every readable key of HostSysctls, whitespace
	// normalised ("32768 60999"). A missing key means the file is absent (module
	// not loaded, IPv6 disabled, ...).
	Sysctl map[string]string `json:"sysctl"`
	// NoFile and NProc are the limits of LimitsPID (0: this process).
	NoFile    *Limit `json:"nofile,omitempty"`
	NProc     *Limit `json:"nproc,omitempty"`
	LimitsPID int    `json:"limits_pid"`
	// KernelRelease is /proc/sys/kernel/osrelease.
	KernelRelease string `json:"kernel_release"`
	// CPUs is the number of online CPUs (/sys/devices/system/cpu/online).
	CPUs int `json:"cpus"`
	// Fsync is the measured fsync latency of the store data directory, if measured.
	Fsync *FsyncResult `json:"fsync,omitempty"`
	// FsyncErr is why it could not be measured.
	FsyncErr string `json:"fsync_error,omitempty"`
}

// HostSysctls are the sysctl keys the rules read.
var HostSysctls = []string{
	"net.ipv4.neigh.default.gc_thresh1",
	"net.ipv4.neigh.default.gc_thresh2",
	"net.ipv4.neigh.default.gc_thresh3",
	"net.ipv6.neigh.default.gc_thresh1",
	"net.ipv6.neigh.default.gc_thresh2",
	"net.ipv6.neigh.default.gc_thresh3",
	"net.netfilter.nf_conntrack_max",
	"net.netfilter.nf_conntrack_buckets",
	"net.core.somaxconn",
	"net.ipv4.tcp_max_syn_backlog",
	"net.ipv4.ip_local_port_range",
	"fs.file-max",
	"fs.nr_open",
	"kernel.pid_max",
	"kernel.osrelease",
}

// SysctlPath is the path (relative to "/") of a sysctl key.
func SysctlPath(key string) string {
	return "proc/sys/" + strings.ReplaceAll(key, ".", "/")
}

// HostFS is the running host's root.
func HostFS() fs.FS { return os.DirFS("/") }

// Gather reads the facts from fsys. pid selects whose limits are read
// (/proc/<pid>/limits); 0 means this process (/proc/self/limits).
func Gather(fsys fs.FS, pid int) (*Facts, error) {
	f := &Facts{Sysctl: map[string]string{}, LimitsPID: pid}
	for _, k := range HostSysctls {
		b, err := fs.ReadFile(fsys, SysctlPath(k))
		if err != nil {
			continue
		}
		f.Sysctl[k] = strings.Join(strings.Fields(string(b)), " ")
	}
	f.KernelRelease = f.Sysctl["kernel.osrelease"]
	delete(f.Sysctl, "kernel.osrelease")

	who := "self"
	if pid > 0 {
		who = strconv.Itoa(pid)
	}
	b, err := fs.ReadFile(fsys, "proc/"+who+"/limits")
	if err != nil {
		if pid > 0 {
			return nil, fmt.Errorf("reading limits of pid %d: %w", pid, err)
		}
	} else {
		lim, err := ParseLimits(b)
		if err != nil {
			return nil, err
		}
		if l, ok := lim["Max open files"]; ok {
			f.NoFile = &l
		}
		if l, ok := lim["Max processes"]; ok {
			f.NProc = &l
		}
	}

	f.CPUs = runtime.NumCPU()
	if b, err := fs.ReadFile(fsys, "sys/devices/system/cpu/online"); err == nil {
		if n, err := CountCPUList(strings.TrimSpace(string(b))); err == nil && n > 0 {
			f.CPUs = n
		}
	}
	return f, nil
}

// ParseLimits parses /proc/<pid>/limits into name → Limit.
func ParseLimits(b []byte) (map[string]Limit, error) {
	out := map[string]Limit{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	first := true
	for sc.Scan() {
		line := sc.Text()
		if first {
			first = false
			if strings.HasPrefix(line, "Limit") {
				continue
			}
		}
		// Columns are fixed-width: name (26 chars) then soft, hard, units.
		if len(line) < 27 {
			continue
		}
		name := strings.TrimSpace(line[:26])
		fields := strings.Fields(line[26:])
		if len(fields) < 2 {
			continue
		}
		soft, err1 := parseLimitValue(fields[0])
		hard, err2 := parseLimitValue(fields[1])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("limits line %q: bad value", line)
		}
		out[name] = Limit{Soft: soft, Hard: hard}
	}
	return out, sc.Err()
}

func parseLimitValue(s string) (uint64, error) {
	if s == "unlimited" {
		return Unlimited, nil
	}
	return strconv.ParseUint(s, 10, 64)
}

// CountCPUList counts the CPUs in a kernel CPU list such as "0-3,8,10-11".
func CountCPUList(s string) (int, error) {
	n := 0
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, found := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0, fmt.Errorf("cpu list %q: %w", s, err)
		}
		b := a
		if found {
			if b, err = strconv.Atoi(hi); err != nil {
				return 0, fmt.Errorf("cpu list %q: %w", s, err)
			}
		}
		if b < a {
			return 0, fmt.Errorf("cpu list %q: bad range", s)
		}
		n += b - a + 1
	}
	return n, nil
}

// KernelVersion extracts major, minor from a release string like
// "6.18.44-fc-v669" or "5.15.0-105-generic".
func KernelVersion(release string) (major, minor int, err error) {
	s := release
	if i := strings.IndexFunc(s, func(r rune) bool { return r != '.' && (r < '0' || r > '9') }); i >= 0 {
		s = s[:i]
	}
	parts := strings.Split(s, ".")
	if len(parts) < 2 {
		return 0, 0, fmt.Errorf("kernel release %q: no major.minor", release)
	}
	if major, err = strconv.Atoi(parts[0]); err != nil {
		return 0, 0, fmt.Errorf("kernel release %q: %w", release, err)
	}
	if minor, err = strconv.Atoi(parts[1]); err != nil {
		return 0, 0, fmt.Errorf("kernel release %q: %w", release, err)
	}
	return major, minor, nil
}

// sysctlUint reads a single-number sysctl. ok is false when absent or unparsable.
func (f *Facts) sysctlUint(key string) (uint64, bool) {
	v, ok := f.Sysctl[key]
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, false
	}
	return n, true
}
