package cluster

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/meganode/meganode/internal/doctor"
)

// ServiceClusterIPRange is the service range; 10.96.0.1 is in the serving certificate.
const ServiceClusterIPRange = "10.96.0.0/16"

// apiServerComponent builds kube-apiserver's command line: everything on 127.0.0.1, certificate
// auth from the generated PKI, the flags loopback needs (toolchain.md) and the large-cluster flags
// from the sizing plan (inflight limits, watch cache, feature gates, GOGC/GOMEMLIMIT).
func apiServerComponent(st *State, o *UpOptions, pki *PKI, plan doctor.PlanOutput, port int) Component {
	url := fmt.Sprintf("https://127.0.0.1:%d", port)
	var servers string
	var overrides []string
	for _, sh := range st.Shards {
		if sh.Resource == "" {
			servers = sh.URL
		} else {
			overrides = append(overrides, sh.Override)
		}
	}
	if st.EtcdProxyURL != "" {
		servers = st.EtcdProxyURL
	}
	args := []string{filepath.Join(o.BinDir, BinAPIServer),
		"--etcd-servers=" + servers,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", port),
		"--tls-cert-file=" + pki.ServerCert, "--tls-private-key-file=" + pki.ServerKey,
		"--client-ca-file=" + pki.CACert,
		"--requestheader-client-ca-file=" + pki.FrontProxyCA,
		"--requestheader-allowed-names=" + FrontProxyClientName,
		"--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + pki.FrontProxyCert, "--proxy-client-key-file=" + pki.ProxyKey,
		"--service-account-key-file=" + pki.SAPub, "--service-account-signing-key-file=" + pki.SAKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=" + ServiceClusterIPRange,
		"--endpoint-reconciler-type=none", // a loopback advertise address fails Endpoints validation
		authorizationMode(o),
		"--allow-privileged=true",
		"--cert-dir=" + filepath.Join(st.Dir, "apiserver"),
	}
	if o.Kubelets > 0 {
		// Hollow kubelets are admitted as real ones are (kubeadm's defaults).
		args = append(args, "--enable-admission-plugins=NodeRestriction")
	}
	if len(overrides) > 0 {
		args = append(args, "--etcd-servers-overrides="+strings.Join(overrides, ","))
	}
	if o.StoreTLS {
		args = append(args, "--etcd-cafile="+pki.CACert, "--etcd-certfile="+pki.StoreClientCert, "--etcd-keyfile="+pki.StoreClientKey)
	}
	// Large-cluster flags from the plan, minus the store endpoints (ours are on free ports).
	for _, f := range plan.APIServer.Flags {
		if strings.HasPrefix(f, "--etcd-servers") {
			continue
		}
		args = append(args, f)
	}
	args = append(args, o.APIServerArgs...)
	return Component{Name: "kube-apiserver", Kind: BinAPIServer, Args: args, Env: plan.APIServer.Env, URL: url,
		Log: filepath.Join(st.Dir, "logs", "kube-apiserver.log")}
}

// authorizationMode: RBAC; with hollow kubelets (`up --kubelets`) the Node authorizer first, which
// authorizes each kubelet's requests by the objects bound to its node, as in a kubeadm cluster.
func authorizationMode(o *UpOptions) string {
	if o.Kubelets > 0 {
		return "--authorization-mode=Node,RBAC"
	}
	return "--authorization-mode=RBAC"
}
