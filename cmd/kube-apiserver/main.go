// Command kube-apiserver is the upstream Kubernetes API server (k8s.io/kubernetes v1.36.3),
// built from the Go module so `meganode up` needs nothing but the module proxy.
// `make k8s-bins` sets the version ldflags so /version reports v1.36.3.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() { os.Exit(cli.Run(app.NewAPIServerCommand())) }
