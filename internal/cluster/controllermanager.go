package cluster

import (
	"fmt"
	"path/filepath"

	"github.com/meganode/meganode/internal/doctor"
)

// controllerManagerComponent builds kube-controller-manager's command line: its own client
// certificate, no leader election (one instance; a lost election would make it exit while the
// store restarts), raised client QPS and sync concurrency from the plan.
func controllerManagerComponent(st *State, o *UpOptions, pki *PKI, plan doctor.PlanOutput, kubeconfig string, port int) Component {
	args := []string{filepath.Join(o.BinDir, BinCM),
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", port),
		"--cert-dir=" + filepath.Join(st.Dir, "controller-manager"),
		"--leader-elect=false",
		"--service-account-private-key-file=" + pki.SAKey,
		"--root-ca-file=" + pki.CACert,
		"--cluster-signing-cert-file=" + pki.CACert, "--cluster-signing-key-file=" + pki.CAKey,
		"--use-service-account-credentials=true", // each controller under its own service account, as kubeadm runs it
	}
	args = append(args, plan.ControllerManager.Flags...)
	return Component{Name: "kube-controller-manager", Kind: BinCM, Args: args,
		URL: fmt.Sprintf("https://127.0.0.1:%d", port), Log: filepath.Join(st.Dir, "logs", "kube-controller-manager.log")}
}
