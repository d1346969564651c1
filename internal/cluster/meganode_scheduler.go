package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// Schedulers `up` can run.
const (
	SchedulerKube     = "kube-scheduler" // the stock kube-scheduler (default)
	SchedulerMeganode = "meganode"       // `meganode scheduler` (sharded scatter/gather)
	// KindMeganodeScheduler is the Component kind of `meganode scheduler`.
	KindMeganodeScheduler = "meganode-scheduler"
	// MeganodeSchedulerName is the spec.schedulerName the meganode scheduler serves by default.
	MeganodeSchedulerName = "meganode"
)

// meganodeSchedulerBinary is bin/meganode, else this executable (when it is meganode itself).
func meganodeSchedulerBinary(binDir string) (string, error) {
	p := filepath.Join(binDir, "meganode")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("--scheduler meganode needs %s: build it with `make meganode`", p)
}

// meganodeSchedulerComponent runs `meganode scheduler --role all` with the scheduler's kubeconfig
// (system:kube-scheduler has the RBAC a scheduler needs: watch pods/nodes, create bindings).
// It replaces kube-scheduler, so it serves spec.schedulerName=meganode and default-scheduler
// (create-pods and demo work unchanged); o.SchedulerArgs may override --scheduler-name.
func meganodeSchedulerComponent(st *State, o *UpOptions, kubeconfig string, port int) (Component, error) {
	bin, err := meganodeSchedulerBinary(o.BinDir)
	if err != nil {
		return Component{}, err
	}
	args := []string{bin, "scheduler", "--role=all", "--kubeconfig=" + kubeconfig,
		"--shards=" + strconv.Itoa(max(o.SchedulerShards, 1)), "--healthz=" + fmt.Sprintf("127.0.0.1:%d", port),
		"--scheduler-name=" + MeganodeSchedulerName + ",default-scheduler"}
	args = append(args, o.SchedulerArgs...)
	return Component{Name: "meganode-scheduler", Kind: KindMeganodeScheduler, Args: args, Env: []string{"GOGC=400"},
		URL: fmt.Sprintf("http://127.0.0.1:%d", port), Log: filepath.Join(st.Dir, "logs", "meganode-scheduler.log")}, nil
}

// WithScheduler returns o running the given scheduler ("" = stock kube-scheduler).
func (o UpOptions) WithScheduler(kind string, shards int, args []string) UpOptions {
	o.Scheduler, o.SchedulerShards, o.SchedulerArgs = kind, shards, args
	return o
}
