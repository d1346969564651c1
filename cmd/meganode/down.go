package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/meganode/meganode/internal/cluster"
)

func init() {
	register("down", "stop exactly the processes `meganode up` started (pids from the state dir)", runDown)
}

func runDown(args []string) error {
	fs := flag.NewFlagSet("down", flag.ContinueOnError)
	stateDir := fs.String("state-dir", cluster.DefaultStateDir(), "state directory of the cluster")
	purge := fs.Bool("purge", false, "also delete the state directory (store data, logs, certificates)")
	if ok, err := parseUpFlags(fs, args); !ok {
		return err
	}
	if err := cluster.Down(*stateDir, func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }); err != nil {
		return err
	}
	if *purge {
		return os.RemoveAll(*stateDir)
	}
	fmt.Fprintln(os.Stderr, "cluster stopped")
	return nil
}
