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
