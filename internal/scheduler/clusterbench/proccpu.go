package clusterbench

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/meganode/meganode/internal/cluster"
)

// procSet is the cluster's processes (every component `up` started) and this bench, by name, so a
// phase's CPU can be put on the process that spent it: when the machine is saturated, that says
// which process bounds pods/s, and the whole machine's figure alone does not.
type procSet map[string]int

func clusterProcs(st *cluster.State) procSet {
	ps := procSet{"bench": os.Getpid()}
	for _, c := range st.Components {
		if c.Pid > 0 {
			ps[c.Name] = c.Pid
		}
	}
	return ps
}

// cpu is each process's user+system CPU seconds now.
func (ps procSet) cpu() map[string]float64 {
	m := make(map[string]float64, len(ps))
	for name, pid := range ps {
		m[name] = procCPU(pid)
	}
	return m
}

// spent is each process's CPU seconds between two cpu() readings, with "other" = the machine's
// CPU (machSec) that none of them spent (kernel threads, the rest), each multiplied by scale
// (1e3 / pods: ms per pod; 1 / seconds: cores busy).
func spent(before, after map[string]float64, machSec, scale float64) map[string]float64 {
	m := make(map[string]float64, len(after)+1)
	var sum float64
	for name, a := range after {
		d := a - before[name]
		sum += d
		m[name] = d * scale
	}
	m["other"] = (machSec - sum) * scale
	return m
}

// formatByProc prints "kube-apiserver 1.20, store 0.41, …", the largest first.
func formatByProc(m map[string]float64) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return m[names[i]] > m[names[j]] })
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %.2f", n, m[n])
	}
	return strings.Join(parts, ", ")
}
