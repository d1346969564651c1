package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/meganode/meganode/internal/cluster"
)

type downFlags struct {
	stateDir string
	purge    bool
}

func newDownCmd() *cobra.Command {
	f := &downFlags{}
	cmd := &cobra.Command{
		Use:   "down",
		Short: "stop exactly the processes 'meganode up' started (pids from the state dir)",
		Long: `down stops the processes 'meganode up' recorded in --state-dir, newest first (SIGTERM,
then SIGKILL after 15 s). A pid counts only while its process start time is the one up
recorded, so a reused pid is never signalled. The store data, logs and certificates stay
unless --purge.`,
		Example: `  meganode down
  meganode down --state-dir /var/tmp/mc --purge`,
		Args: noArgs,
		RunE: action(f, func(ctx context.Context, cmd *cobra.Command, f *downFlags) error {
			stderr := cmd.ErrOrStderr()
			if err := cluster.Down(f.stateDir, func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }); err != nil {
				return err
			}
			if f.purge {
				return os.RemoveAll(f.stateDir)
			}
			fmt.Fprintln(stderr, "cluster stopped")
			return nil
		}),
	}
	stateDirFlag(cmd.Flags(), &f.stateDir)
	cmd.Flags().BoolVar(&f.purge, "purge", false, "also delete the state directory (store data, logs, certificates)")
	return cmd
}
