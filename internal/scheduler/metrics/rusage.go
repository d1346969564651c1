package metrics

import "syscall"

type runtimeRusage struct{}

// cpu is user+system CPU seconds of this process so far.
func (runtimeRusage) cpu() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

// CPUSeconds is user+system CPU seconds of this process so far.
func CPUSeconds() float64 {
	var ru runtimeRusage
	return ru.cpu()
}
