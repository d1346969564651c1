package sim

import (
	"os"
	"runtime"
	"runtime/pprof"
	"syscall"

	"github.com/meganode/meganode/internal/procfs"
)

// memStatus is this process's resident set now and its peak so far, in bytes, from
// /proc/self/status (VmRSS, VmHWM); elsewhere the peak is getrusage's ru_maxrss and now is 0.
func memStatus() (now, peak uint64) {
	if f, err := procfs.Status(0); err == nil && f["VmHWM"] > 0 {
		return f["VmRSS"], f["VmHWM"]
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		peak = uint64(ru.Maxrss) << 10 // kilobytes on Linux
	}
	return 0, peak
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
