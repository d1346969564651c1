// Package procfs reads Linux's /proc "Key: value [kB]" files (a process's status,
// the machine's meminfo) for the commands and benches that report memory. It is a
// leaf: the scheduler's simulator and the benches share it without importing each other.
package procfs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Fields parses a "Key: value [kB]" file: each key's leading number, in bytes
// where the line says kB. Lines without a number are left out.
func Fields(b []byte) map[string]uint64 {
	out := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue
		}
		if len(f) > 1 && strings.EqualFold(f[1], "kB") {
			n *= 1024
		}
		out[k] = n
	}
	return out
}

// Status is /proc/<pid>/status as Fields (pid 0: this process): VmRSS, VmHWM
// (the resident set's peak) and RssAnon in bytes, Threads as a count.
func Status(pid int) (map[string]uint64, error) {
	path := "/proc/self/status"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/status", pid)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Fields(b), nil
}

// MemInfo is /proc/meminfo as Fields: MemTotal, MemAvailable and the rest, in bytes.
func MemInfo() (map[string]uint64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return nil, err
	}
	return Fields(b), nil
}

// CPUStat is /proc/stat's aggregate "cpu" line: the machine's CPU time since boot, all cores,
// in clock ticks (USER_HZ, 100 on Linux). Guest time is left out: the kernel counts it in
// User and Nice already.
type CPUStat struct{ User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal uint64 }

// Processes is the time charged to processes (user, nice, system): interrupt and softirq time
// (loopback networking, which is no one process's) and steal are not in it.
func (c CPUStat) Processes() uint64 { return c.User + c.Nice + c.System }

// Busy is every state but idle and iowait.
func (c CPUStat) Busy() uint64 { return c.Processes() + c.IRQ + c.SoftIRQ + c.Steal }

// Total is every state.
func (c CPUStat) Total() uint64 { return c.Busy() + c.Idle + c.IOWait }

// ReadCPUStat reads /proc/stat's "cpu" line.
func ReadCPUStat() (CPUStat, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return CPUStat{}, err
	}
	return ParseCPUStat(b)
}

// ParseCPUStat parses the first line of /proc/stat: "cpu user nice system idle iowait irq
// softirq steal [guest guest_nice]" (kernels before 2.6.33 stop at fewer: those are zero).
func ParseCPUStat(b []byte) (CPUStat, error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		if len(line) > 80 {
			line = line[:80]
		}
		return CPUStat{}, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var v [8]uint64
	for i := range min(len(f)-1, len(v)) {
		n, err := strconv.ParseUint(f[i+1], 10, 64)
		if err != nil {
			return CPUStat{}, fmt.Errorf("/proc/stat: %w", err)
		}
		v[i] = n
	}
	return CPUStat{User: v[0], Nice: v[1], System: v[2], Idle: v[3], IOWait: v[4], IRQ: v[5], SoftIRQ: v[6], Steal: v[7]}, nil
}
