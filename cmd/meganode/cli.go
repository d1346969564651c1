package main

// The command tree's shared parts: how errors become one line and an exit code, how a
// command's flags reach its run function (and a dry run for tests), group commands.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit codes of every command: 0 done, 1 the run failed (or found problems), 2 usage.
const (
	exitOK      = 0
	exitFailed  = 1
	exitUsage   = 2
	helpHintFmt = " (see '%s --help')"
)

// usageError is a mistake in the command line (unknown command or flag, bad value, missing
// flag): exit 2 and a pointer to the command's help.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{msg: fmt.Sprintf(format, a...)} }

// flagError makes pflag's parse errors usage errors.
func flagError(_ *cobra.Command, err error) error { return usageError{msg: err.Error()} }

// errorLine is the one line printed for err: the command, the error, and for usage errors
// where to read more. Multi-line error texts are joined so that stderr gets one line.
func errorLine(cmd *cobra.Command, err error) (string, int) {
	path := "meganode"
	if cmd != nil {
		path = cmd.CommandPath()
	}
	msg := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", " ; ")), " ")
	var ue usageError
	if errors.As(err, &ue) || isCobraUsage(err) {
		return fmt.Sprintf("%s: %s"+helpHintFmt, path, msg, path), exitUsage
	}
	return fmt.Sprintf("%s: %s", path, msg), exitFailed
}

// isCobraUsage recognises the usage errors cobra makes itself (the completion command's
// argument check, required flags); flag errors come through flagError.
func isCobraUsage(err error) bool {
	s := err.Error()
	for _, p := range []string{"required flag", "unknown command"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// noArgs is the Args check of a command that takes flags only.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q", args[0])
	}
	return nil
}

// subcommandArgs is the Args check of a command with subcommands: any word left is a
// subcommand that does not exist.
func subcommandArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q", args[0])
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf("; did you mean %q?", s[0])
	}
	return usageError{msg: msg}
}

// group makes a command whose work is in its subcommands: alone it prints its help.
func group(use, short, long, example string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short, Long: long, Example: example, Args: subcommandArgs,
		RunE:                  func(cmd *cobra.Command, args []string) error { return cmd.Help() },
		DisableFlagsInUseLine: true, // its usage line is "meganode doctor [command]", not "… [flags]"
	}
	c.AddCommand(subs...)
	return c
}

// validator is implemented by flag sets that check their values before the run.
type validator interface{ validate() error }

type dryRunKey struct{}

// withDryRun returns a context under which a command parses and validates its flags, hands
// them to capture and returns without running (tests, and the Makefile parse check).
func withDryRun(ctx context.Context, capture func(cmd *cobra.Command, opts any)) context.Context {
	return context.WithValue(ctx, dryRunKey{}, capture)
}

// action is a command's RunE: validate the flags (a failure is a usage error), then run
// with a context cancelled on SIGINT/SIGTERM — or, under withDryRun, hand the flags over.
func action[T any](opts *T, run func(ctx context.Context, cmd *cobra.Command, opts *T) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if v, ok := any(opts).(validator); ok {
			if err := v.validate(); err != nil {
				var ue usageError
				if !errors.As(err, &ue) {
					err = usageError{msg: err.Error()}
				}
				return err
			}
		}
		if capture, ok := cmd.Context().Value(dryRunKey{}).(func(*cobra.Command, any)); ok && capture != nil {
			capture(cmd, opts)
			return nil
		}
		ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return run(ctx, cmd, opts)
	}
}

// oneOf checks an enumerated flag value.
func oneOf(flag, v string, allowed ...string) error {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return usagef("--%s: want %s, got %q", flag, strings.Join(allowed, ", "), v)
}

// completeValues registers shell completion of an enumerated flag's values.
func completeValues(cmd *cobra.Command, flag string, values ...string) {
	_ = cmd.RegisterFlagCompletionFunc(flag, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
}

// setDefaults overrides registered defaults (the value and what --help shows), for commands
// that share flags but not their defaults (bench workloads, demo).
func setDefaults(fs *pflag.FlagSet, defaults map[string]string) {
	for name, v := range defaults {
		f := fs.Lookup(name)
		if f == nil {
			panic("setDefaults: no flag " + name)
		}
		if err := f.Value.Set(v); err != nil {
			panic(fmt.Sprintf("setDefaults: --%s=%s: %v", name, v, err))
		}
		f.DefValue = v
	}
}
