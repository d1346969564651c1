package cluster

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/meganode/meganode/internal/doctor"
)

// schedulerComponent builds the stock kube-scheduler's command line. Client QPS/burst go in a
// KubeSchedulerConfiguration (the --kube-api-qps flag is deprecated and ignored with --config).
func schedulerComponent(st *State, o *UpOptions, plan doctor.PlanOutput, kubeconfig string, port int) (Component, error) {
	cfg := filepath.Join(st.Dir, "kube-scheduler.yaml")
	y := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %s
  qps: %d
  burst: %d
leaderElection:
  leaderElect: false
`, kubeconfig, plan.Scheduler.KubeAPIQPS, plan.Scheduler.KubeAPIBurst)
	if err := os.WriteFile(cfg, []byte(y), 0o644); err != nil {
		return Component{}, err
	}
	args := []string{filepath.Join(o.BinDir, BinScheduler),
		"--config=" + cfg,
		"--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", port),
		"--cert-dir=" + filepath.Join(st.Dir, "scheduler"),
	}
	return Component{Name: "kube-scheduler", Kind: BinScheduler, Args: args, Env: []string{fmt.Sprintf("GOGC=%d", plan.Scheduler.GOGC)},
		URL: fmt.Sprintf("https://127.0.0.1:%d", port), Log: filepath.Join(st.Dir, "logs", "kube-scheduler.log")}, nil
}
