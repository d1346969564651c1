// Command meganode is the front door to everything that is not the store itself:
// load generators (bench), the local scale-test cluster (up, demo, down and the
// commands that work on it), the meganode scheduler, and host and cluster planning
// (doctor). The command tree is cobra's (kubectl's conventions): one file per command
// group beside this one, each with a new…Cmd constructor that root below assembles.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
)

// version is set at link time (`make meganode` and `make images`: -X main.version=VERSION-<git describe>).
var version = "dev"

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command line and returns the exit code; every error is one line on
// stderr (no usage dump): exit 2 for a usage error, 1 for a failed run.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err != nil {
		line, code := errorLine(cmd, err)
		fmt.Fprintln(stderr, line)
		return code
	}
	return exitOK
}

// newRootCmd assembles the tree; help and the completion scripts go to stdout.
func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "meganode",
		Short: "benchmarks, a local scale-test cluster, the meganode scheduler and cluster sizing around meganode-store",
		Long: `meganode runs everything around meganode-store (the etcd v3 API store in store/):

  a local Kubernetes control plane on meganode-store or etcd with KWOK nodes (up, demo,
  make-nodes, create-pods, delete-pods, report, down), side-by-side load against
  meganode-store and real etcd (bench), the sharded meganode scheduler (scheduler),
  an etcd traffic recorder (etcd-proxy), host checks and cluster sizing (doctor), and
  moving a cluster's data from etcd into the store and back with its revisions (store).

Every command takes --help. Errors are one line on stderr; the exit code is 0 when the
command did its work, 1 when it failed (or doctor found problems), 2 for a usage error.`,
		Example: `  meganode up --nodes 100 && meganode create-pods --count 200 && meganode down
  meganode demo --nodes 1000 --pods 2000
  meganode bench put --target both --clients 1,16,100
  meganode doctor plan --nodes 1000000
  meganode help scheduler bench
  source <(meganode completion bash)`,
		Version:               version, // --version
		Args:                  subcommandArgs,
		RunE:                  func(cmd *cobra.Command, args []string) error { return cmd.Help() },
		DisableFlagsInUseLine: true,
		SilenceErrors:         true, // run prints the one line
		SilenceUsage:          true, // no usage dump on errors
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(flagError)
	root.SetHelpCommand(newHelpCmd())
	root.AddCommand(
		newUpCmd(), newDownCmd(), newDemoCmd(), newMakeNodesCmd(), newCreatePodsCmd(), newDeletePodsCmd(), newReportCmd(),
		newBenchCmd(), newSchedulerCmd(), newDoctorCmd(), newEtcdProxyCmd(), newEtcdCmd(), newStoreCmd(), newMigrateCmd(),
	)
	// cobra's completion command (bash, zsh, fish, powershell), made now rather than at
	// Execute so that a shell it does not know is an error, not its help with exit 0.
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			c.Args, c.DisableFlagsInUseLine = subcommandArgs, true
			c.RunE = func(cmd *cobra.Command, args []string) error { return cmd.Help() }
			c.Example = "  source <(meganode completion bash)\n  meganode completion zsh > \"${fpath[1]}/_meganode\"\n  meganode completion fish > ~/.config/fish/completions/meganode.fish"
		}
	}
	return root
}

// newHelpCmd replaces cobra's help command, which shows the root's help with exit 0 for a
// command that does not exist.
func newHelpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "help about any command",
		Long:  "help prints the description, flags and examples of the command named by its arguments.",
		Example: `  meganode help up
  meganode help scheduler bench`,
		ValidArgsFunction: func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			cmd, _, err := c.Root().Find(args)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var out []cobra.Completion
			for _, sub := range cmd.Commands() {
				if sub.IsAvailableCommand() {
					out = append(out, cobra.CompletionWithDesc(sub.Name(), sub.Short))
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if err != nil {
				return usageError{msg: err.Error()}
			}
			if len(rest) > 0 {
				return usagef("unknown command %q under %q", rest[0], cmd.CommandPath())
			}
			return cmd.Help()
		},
	}
}
