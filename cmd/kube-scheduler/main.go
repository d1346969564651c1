// Command kube-scheduler is the stock upstream scheduler (k8s.io/kubernetes v1.36.3),
// built from the Go module for `meganode up`.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() { os.Exit(cli.Run(app.NewSchedulerCommand())) }
