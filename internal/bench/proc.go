package bench

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/meganode/meganode/internal/procfs"
)

// The server's cost is read from /proc of its process: on this machine the load
// generator shares the cores with the server, so CPU time per operation is the
// figure that describes the server, whatever throughput the client allows.

// clockTicks is USER_HZ, the unit of utime/stime in /proc/<pid>/stat. It is 100
// on every Linux architecture Go supports (the kernel ABI fixes it).
const clockTicks = 100

// ProcSample is one reading of a process's counters.
type ProcSample struct {
	UserTicks   uint64 // utime, all threads, including exited ones
	SystemTicks uint64 // stime
	RSSBytes    uint64 // VmRSS
	PeakRSS     uint64 // VmHWM: high-water mark of the resident set since start
	Threads     int
}

// CPUMicros is user+system CPU time in microseconds.
func (s ProcSample) CPUMicros() float64 {
	return float64(s.UserTicks+s.SystemTicks) * 1e6 / clockTicks
}

// ReadProc samples /proc/<pid>/stat and /proc/<pid>/status.
func ReadProc(pid int) (ProcSample, error) {
	var s ProcSample
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	if s.UserTicks, s.SystemTicks, err = parseStat(stat); err != nil {
		return s, err
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	s.RSSBytes, s.PeakRSS, s.Threads = parseStatus(status)
	return s, nil
}

// parseStat extracts utime and stime (fields 14 and 15) from /proc/<pid>/stat.
// The command name (field 2) is in parentheses and may itself contain spaces and
// parentheses, so fields are counted from the last ')'.
func parseStat(b []byte) (utime, stime uint64, err error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("proc stat: no command name in %q", truncate(b))
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime is field 14 → f[11], stime field 15 → f[12].
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("proc stat: %d fields after the command name", len(f))
	}
	if utime, err = strconv.ParseUint(f[11], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("proc stat utime: %w", err)
	}
	if stime, err = strconv.ParseUint(f[12], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("proc stat stime: %w", err)
	}
	return utime, stime, nil
}

// parseStatus extracts VmRSS, VmHWM (bytes) and Threads from /proc/<pid>/status.
func parseStatus(b []byte) (rss, hwm uint64, threads int) {
	f := procfs.Fields(b)
	return f["VmRSS"], f["VmHWM"], int(f["Threads"])
}

func truncate(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "…"
	}
	return string(b)
}

// ProcWatch measures a process over a window: CPU time used between Start and
// Stop, and the peak resident set (the kernel's high-water mark, and our own
// samples in case the kernel's is unavailable).
type ProcWatch struct {
	pid     int
	start   ProcSample
	ok      bool
	maxSeen uint64
}

// StartProcWatch takes the first sample; pid ≤ 0 gives a watch that measures nothing.
func StartProcWatch(pid int) *ProcWatch {
	w := &ProcWatch{pid: pid}
	if pid <= 0 {
		return w
	}
	s, err := ReadProc(pid)
	if err == nil {
		w.start, w.ok = s, true
		w.maxSeen = s.RSSBytes
	}
	return w
}

// Poll samples the resident set (call it now and then during a run).
func (w *ProcWatch) Poll() {
	if !w.ok {
		return
	}
	if s, err := ReadProc(w.pid); err == nil && s.RSSBytes > w.maxSeen {
		w.maxSeen = s.RSSBytes
	}
}

// ProcUsage is what a ProcWatch measured.
type ProcUsage struct {
	Measured  bool    `json:"measured"`
	CPUMicros float64 `json:"cpu_us"`
	UserUs    float64 `json:"user_us"`
	SystemUs  float64 `json:"system_us"`
	RSSBytes  uint64  `json:"rss_bytes"`
	PeakRSS   uint64  `json:"peak_rss_bytes"`

	// A group's members (several processes, SumUsage): the figures above are their sums
	// (PeakRSS the sum of each member's own peak), MaxMemberPeakRSS the largest member's.
	Members          []MemberUsage `json:"members,omitempty"`
	MaxMemberPeakRSS uint64        `json:"max_member_peak_rss_bytes,omitempty"`
}

// MemberUsage is one member's share of a group's ProcUsage.
type MemberUsage struct {
	Pid       int     `json:"pid"`
	CPUMicros float64 `json:"cpu_us"`
	RSSBytes  uint64  `json:"rss_bytes"`
	PeakRSS   uint64  `json:"peak_rss_bytes"`
}

// SumUsage is a group's usage from its members' (pids[i] measured us[i]): CPU time and
// memory summed over the members, each member's figures kept, the largest member's peak.
// It is measured only if every member was: a sum missing a member would understate it.
func SumUsage(pids []int, us []ProcUsage) ProcUsage {
	out := ProcUsage{Measured: len(us) > 0}
	for i, u := range us {
		out.Measured = out.Measured && u.Measured
		out.CPUMicros += u.CPUMicros
		out.UserUs += u.UserUs
		out.SystemUs += u.SystemUs
		out.RSSBytes += u.RSSBytes
		out.PeakRSS += u.PeakRSS
		out.MaxMemberPeakRSS = max(out.MaxMemberPeakRSS, u.PeakRSS)
		m := MemberUsage{CPUMicros: u.CPUMicros, RSSBytes: u.RSSBytes, PeakRSS: u.PeakRSS}
		if i < len(pids) {
			m.Pid = pids[i]
		}
		out.Members = append(out.Members, m)
	}
	if !out.Measured {
		return ProcUsage{Members: out.Members}
	}
	return out
}

// ServerWatch is a ProcWatch over the server's processes: one server's, or every member
// of a group (their usage summed by SumUsage).
type ServerWatch struct {
	pids []int
	ws   []*ProcWatch
}

// StartServerWatch starts a watch on each pid (none: a watch that measures nothing).
func StartServerWatch(pids []int) *ServerWatch {
	s := &ServerWatch{pids: pids}
	for _, p := range pids {
		s.ws = append(s.ws, StartProcWatch(p))
	}
	return s
}

// Poll samples every process's resident set.
func (s *ServerWatch) Poll() {
	for _, w := range s.ws {
		w.Poll()
	}
}

// Stop takes the final samples: one process's usage as ProcWatch's, several summed.
func (s *ServerWatch) Stop() ProcUsage {
	switch len(s.ws) {
	case 0:
		return ProcUsage{}
	case 1:
		return s.ws[0].Stop()
	}
	us := make([]ProcUsage, len(s.ws))
	for i, w := range s.ws {
		us[i] = w.Stop()
	}
	return SumUsage(s.pids, us)
}

// Stop takes the final sample.
func (w *ProcWatch) Stop() ProcUsage {
	if !w.ok {
		return ProcUsage{}
	}
	s, err := ReadProc(w.pid)
	if err != nil {
		return ProcUsage{}
	}
	peak := s.PeakRSS
	if w.maxSeen > peak {
		peak = w.maxSeen
	}
	if s.RSSBytes > peak {
		peak = s.RSSBytes
	}
	return ProcUsage{
		Measured:  true,
		CPUMicros: s.CPUMicros() - w.start.CPUMicros(),
		UserUs:    float64(s.UserTicks-w.start.UserTicks) * 1e6 / clockTicks,
		SystemUs:  float64(s.SystemTicks-w.start.SystemTicks) * 1e6 / clockTicks,
		RSSBytes:  s.RSSBytes,
		PeakRSS:   peak,
	}
}

// HostCPU is the machine-wide CPU time from /proc/stat, in ticks.
type HostCPU struct{ Busy, Total uint64 }

// ReadHostCPU reads the aggregate "cpu" line of /proc/stat.
func ReadHostCPU() (HostCPU, error) {
	c, err := procfs.ReadCPUStat()
	return hostCPU(c), err
}

// hostCPU: Busy is the time charged to processes (user, nice, system), so that busy minus the
// server and the client is other processes; interrupt and softirq time (loopback networking,
// which is neither process's) and steal are left out of it.
func hostCPU(c procfs.CPUStat) HostCPU { return HostCPU{Busy: c.Processes(), Total: c.Total()} }

// OtherCores is how many cores, on average over a window of `seconds`, were
// busy with something other than the server and the client: other builds and
// tests on a shared machine. Anything well above zero makes the figures noisy.
func OtherCores(before, after HostCPU, server, client ProcUsage, seconds float64) float64 {
	if seconds <= 0 || after.Busy < before.Busy {
		return 0
	}
	busyUs := float64(after.Busy-before.Busy) * 1e6 / clockTicks
	v := (busyUs - server.CPUMicros - client.CPUMicros) / (seconds * 1e6)
	if v < 0 {
		v = 0
	}
	return v
}

// UnlinkedBytes is what the files process pid holds open under dir, and that have no name
// any more, take (apparent size, or allocated blocks with allocatedBlocks): meganode-store
// creates its history spill files unlinked (docs/design.md, "Spilled history"), so a walk of
// its data directory does not see them, yet they take the same disk (on tmpfs, memory). A data
// directory's size adds them. 0 when /proc cannot be read.
func UnlinkedBytes(pid int, dir string, allocatedBlocks bool) int64 {
	if pid <= 0 || dir == "" {
		return 0
	}
	fds := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(fds)
	if err != nil {
		return 0
	}
	prefix := strings.TrimSuffix(dir, "/") + "/"
	var n int64
	for _, e := range ents {
		p := fds + "/" + e.Name()
		link, err := os.Readlink(p)
		if err != nil || !strings.HasPrefix(link, prefix) || !strings.HasSuffix(link, " (deleted)") {
			continue
		}
		info, err := os.Stat(p)
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		if allocatedBlocks {
			n += allocated(info)
		} else {
			n += info.Size()
		}
	}
	return n
}
