package main

// meganode doctor: check a host for its role, probe the bridge port limit, and
// size a cluster. The logic lives in internal/doctor; this file is flags and
// output. Exit codes: 0 ok, 1 problems found (or the probe failed), 2 usage.

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meganode/meganode/internal/doctor"
)

func newDoctorCmd() *cobra.Command {
	return group("doctor",
		"check hosts (host), probe the bridge port limit (bridge), size a cluster (plan)",
		`doctor checks a host for its role, measures the Linux bridge's port limit, and sizes a
cluster from measured figures (docs/doctor.md):

  host    read this host's sysctls, limits, kernel and store disk and compare them
          with what the role needs (--role control-plane|store|node); --fix writes
          a sysctl drop-in
  bridge  list bridges and their ports; --probe measures the kernel's bridge port
          limit in a network namespace of its own (root)
  plan    size a cluster: stores and --etcd-servers-overrides, apiservers and
          their flags, controller-manager, kubelet, scheduler shards, addresses

Exit codes: 0 ok, 1 problems found, 2 usage.`,
		`  meganode doctor host --role store --data-dir /var/lib/meganode
  meganode doctor bridge --probe
  meganode doctor plan --nodes 1000000 --pods 10000000`,
		newDoctorHostCmd(), newDoctorBridgeCmd(), newDoctorPlanCmd())
}

// doctorHostFlags are `doctor host`'s flags.
type doctorHostFlags struct {
	role       string
	pods       int
	nodes      int
	apiservers int
	cpus       int
	pid        int
	dataDir    string
	noFsync    bool
	asJSON     bool
	fix        bool
	fixFile    string
}

func newDoctorHostCmd() *cobra.Command {
	f := &doctorHostFlags{}
	cmd := &cobra.Command{
		Use:   "host",
		Short: "check this host's sysctls, limits, kernel and store disk for its role",
		Long: `host reads this host's sysctls, process limits (this shell's, or --pid of a running
apiserver or store), kernel and CPUs and compares them with what --role needs at --nodes
nodes and --pods-per-node pods; for --role store it measures fsync latency in --data-dir.
--fix writes every failing sysctl to a drop-in (--fix-file) and prints exactly what it
wrote; it never applies anything. Exit 1 when a check warns or fails.`,
		Example: `  meganode doctor host --role node --pods-per-node 250
  meganode doctor host --role control-plane --nodes 5000 --pid $(pgrep -n kube-apiserver)
  meganode doctor host --role store --data-dir /var/lib/meganode --json
  meganode doctor host --role node --fix --fix-file /etc/sysctl.d/90-meganode.conf`,
		Args: noArgs,
		RunE: action(f, func(ctx context.Context, cmd *cobra.Command, f *doctorHostFlags) error {
			return f.run(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr())
		}),
	}
	fs := cmd.Flags()
	def := doctor.DefaultParams()
	fs.StringVar(&f.role, "role", string(def.Role), "what the host is for: control-plane, store or node")
	fs.IntVar(&f.pods, "pods-per-node", def.PodsPerNode, "pods this node will run (role node)")
	fs.IntVar(&f.nodes, "nodes", def.Nodes, "nodes in the cluster (sizes apiserver connections)")
	fs.IntVar(&f.apiservers, "apiservers", 0, "apiservers sharing the nodes' connections (0: as 'doctor plan' sizes it)")
	fs.IntVar(&f.cpus, "cpus", 0, "CPUs to size per-core settings for (0: this host's)")
	fs.IntVar(&f.pid, "pid", 0, "read the open-file/process limits of this running process (e.g. the apiserver) instead of this shell's")
	fs.StringVar(&f.dataDir, "data-dir", "/var/lib/meganode", "store data directory whose fsync latency is measured (role store)")
	fs.BoolVar(&f.noFsync, "no-fsync", false, "do not measure fsync latency")
	fs.BoolVar(&f.asJSON, "json", false, "print JSON")
	fs.BoolVar(&f.fix, "fix", false, "write the recommended sysctls to --fix-file (prints exactly what it wrote; does not apply them)")
	fs.StringVar(&f.fixFile, "fix-file", "/etc/sysctl.d/90-meganode.conf", "drop-in file --fix writes")
	completeValues(cmd, "role", "node", "control-plane", "store")
	return cmd
}

func (f *doctorHostFlags) validate() error {
	if f.pods <= 0 || f.nodes <= 0 || f.apiservers < 0 || f.cpus < 0 {
		return usagef("--pods-per-node and --nodes must be > 0; --apiservers and --cpus ≥ 0")
	}
	if _, err := doctor.ParseRole(f.role); err != nil {
		return usageError{msg: err.Error()}
	}
	return nil
}

func (f *doctorHostFlags) run(ctx context.Context, stdout, stderr io.Writer) error {
	r, err := doctor.ParseRole(f.role)
	if err != nil {
		return usageError{msg: err.Error()}
	}
	p := doctor.Params{Role: r, PodsPerNode: f.pods, Nodes: f.nodes, APIServers: f.apiservers, CPUs: f.cpus}

	facts, err := doctor.Gather(doctor.HostFS(), f.pid)
	if err != nil {
		return err
	}
	if r == doctor.RoleStore && !f.noFsync {
		if !f.asJSON {
			fmt.Fprintf(stderr, "measuring fsync latency in %s ...\n", f.dataDir)
		}
		res, err := doctor.MeasureFsync(f.dataDir, doctor.FsyncOptions{})
		if err != nil {
			facts.FsyncErr = err.Error()
		} else {
			facts.Fsync = res
		}
	} else if f.noFsync {
		facts.FsyncErr = "not measured (--no-fsync)"
	}

	rep := doctor.NewHostReport(facts, p)
	if f.fix {
		content, n := doctor.FixContent(rep.Checks, doctor.FixHeader(rep, time.Now()))
		rep.Fix = &doctor.FixResult{Path: f.fixFile, Content: content, Keys: n}
		if n > 0 {
			if err := doctor.WriteFileAtomic(f.fixFile, content); err != nil {
				return fmt.Errorf("--fix: writing %s: %w", f.fixFile, err)
			}
			rep.Fix.Written = true
		}
	}
	if f.asJSON {
		if err := doctor.WriteJSON(stdout, rep); err != nil {
			return err
		}
	} else {
		rep.WriteTable(stdout)
	}
	if rep.Fix != nil {
		if rep.Fix.Written {
			if f.asJSON {
				fmt.Fprintf(stderr, "--fix: wrote %d setting(s) to %s (content in the JSON's fix.content); apply with: sysctl -p %s\n", rep.Fix.Keys, rep.Fix.Path, rep.Fix.Path)
			} else {
				fmt.Fprintf(stdout, "\n--fix: wrote %d setting(s) to %s:\n%s\napply with: sysctl -p %s   (limits such as LimitNOFILE are not sysctls: see the 'do:' lines)\n",
					rep.Fix.Keys, rep.Fix.Path, indent(rep.Fix.Content), rep.Fix.Path)
			}
		} else {
			fmt.Fprintf(stderr, "--fix: no sysctl to change; %s not written\n", rep.Fix.Path)
		}
	}
	if n := rep.Problems(); n > 0 {
		return fmt.Errorf("%d problem(s) found", n)
	}
	return nil
}

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = "    " + l
	}
	return strings.Join(lines, "\n")
}
