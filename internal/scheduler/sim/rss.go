package sim

import (
	"bufio"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
)

// memStatus is this process's resident set now and its peak so far, in bytes, from
// /proc/self/status (VmRSS, VmHWM); elsewhere the peak is getrusage's ru_maxrss and now is 0.
func memStatus() (now, peak uint64) {
	f, err := os.Open("/proc/self/status")
	if err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if !ok || (k != "VmRSS" && k != "VmHWM") {
				continue
			}
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				continue
			}
			if k == "VmRSS" {
				now = kb << 10
			} else {
				peak = kb << 10
			}
		}
		if peak > 0 {
			return now, peak
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		peak = uint64(ru.Maxrss) << 10 // kilobytes on Linux
	}
	return now, peak
}

// writeHeapProfile writes the heap profile of the live objects (after a GC) to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	runtime.GC()
	return pprof.Lookup("heap").WriteTo(f, 0)
}
