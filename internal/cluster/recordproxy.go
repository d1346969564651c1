package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/meganode/meganode/internal/storeproc"
)

// ProxyName is the component `up --record` puts between kube-apiserver and the default store.
const ProxyName = "etcd-proxy"

// proxyComponent runs `meganode etcd-proxy` in front of the default store, recording into
// o.Record. Only the default store is proxied; shards named in --etcd-servers-overrides are not.
func proxyComponent(st *State, o *UpOptions) (Component, error) {
	var target string
	for _, sh := range st.Shards {
		if sh.Resource == "" {
			target = sh.URL
		}
	}
	if target == "" {
		return Component{}, fmt.Errorf("--record: no default store")
	}
	rec, err := filepath.Abs(o.Record)
	if err != nil {
		return Component{}, err
	}
	if err := os.MkdirAll(filepath.Dir(rec), 0o755); err != nil {
		return Component{}, err
	}
	cmd := o.ProxyCmd
	if len(cmd) == 0 {
		self, err := os.Executable()
		if err != nil {
			return Component{}, err
		}
		cmd = []string{self, "etcd-proxy"}
	}
	port, err := storeproc.FreePort()
	if err != nil {
		return Component{}, err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	args := append(append([]string{}, cmd...), "--listen", strings.TrimPrefix(url, "http://"), "--target", target, "--record", rec)
	return Component{Name: ProxyName, Kind: ProxyName, Args: args, URL: url,
		Log: filepath.Join(st.Dir, "logs", ProxyName+".log")}, nil
}
