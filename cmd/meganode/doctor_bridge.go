package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meganode/meganode/internal/doctor"
)

// doctorBridgeFlags are `doctor bridge`'s flags.
type doctorBridgeFlags struct {
	probe  bool
	pods   int
	chunk  int
	asJSON bool
}

func newDoctorBridgeCmd() *cobra.Command {
	f := &doctorBridgeFlags{}
	cmd := &cobra.Command{
		Use:   "bridge",
		Short: "list bridges and their ports; --probe measures the kernel's bridge port limit (root)",
		Long: `bridge lists the host's Linux bridges and their ports against the kernel's port limit
(BR_PORT_BITS: 1023 ports), the ceiling on pods per node with a bridge CNI whatever maxPods
says. --probe measures the limit: it creates a network namespace of its own, a bridge and
veth pairs until the kernel refuses, then deletes the namespace (also on SIGINT/SIGTERM).
Exit 1 when a bridge is nearly full, --pods-per-node does not fit, or a killed probe left a
namespace behind.`,
		Example: `  meganode doctor bridge
  meganode doctor bridge --probe --json
  meganode doctor bridge --pods-per-node 2000`,
		Args: noArgs,
		RunE: action(f, func(ctx context.Context, cmd *cobra.Command, f *doctorBridgeFlags) error {
			return f.run(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr())
		}),
	}
	fs := cmd.Flags()
	fs.BoolVar(&f.probe, "probe", false, "measure the bridge port limit: create a network namespace, a bridge and veth pairs until the kernel refuses (root; cleans up, also on SIGINT/SIGTERM)")
	fs.IntVar(&f.pods, "pods-per-node", 0, "report a problem if this many pods per node do not fit on one bridge")
	fs.IntVar(&f.chunk, "chunk", 512, "veth pairs per 'ip -batch' run")
	fs.BoolVar(&f.asJSON, "json", false, "print JSON")

	return cmd
}

func (f *doctorBridgeFlags) validate() error {
	if f.pods < 0 || f.chunk <= 0 {
		return usagef("--pods-per-node must be ≥ 0 and --chunk > 0")
	}
	return nil
}

func (f *doctorBridgeFlags) run(ctx context.Context, stdout, stderr io.Writer) error {
	type out struct {
		KernelLimit  int                       `json:"kernel_port_limit"`
		PortBits     int                       `json:"br_port_bits"`
		HostBridges  []doctor.HostBridge       `json:"host_bridges"`
		Probe        *doctor.BridgeProbeResult `json:"probe,omitempty"`
		StaleProbeNS []string                  `json:"stale_probe_namespaces,omitempty"`
		PodsPerNode  int                       `json:"pods_per_node,omitempty"`
		Problems     []string                  `json:"problems"`
	}
	o := out{KernelLimit: doctor.BridgeMaxPorts, PortBits: doctor.BridgePortBits, PodsPerNode: f.pods, Problems: []string{}}
	o.HostBridges, _ = doctor.HostBridges(doctor.HostFS())
	if o.HostBridges == nil {
		o.HostBridges = []doctor.HostBridge{}
	}
	o.StaleProbeNS = doctor.StaleProbeNamespaces()

	if f.probe {
		ctx, stop := context.WithCancel(ctx) // cancelled on SIGINT/SIGTERM (action): the probe cleans up
		defer stop()
		if !f.asJSON {
			fmt.Fprintf(stderr, "probing: namespace meganode-probe-%d, attaching veth pairs to a bridge until the kernel refuses ...\n", os.Getpid())
		}
		res, err := doctor.ProbeBridge(ctx, doctor.BridgeProbeOptions{Chunk: f.chunk})
		stop()
		if err != nil {
			if res.CleanedUp || res.Namespace == "" || !doctor.NetnsExists(res.Namespace) {
				return fmt.Errorf("bridge probe: %w (nothing left behind)", err)
			}
			return fmt.Errorf("bridge probe: %w", err)
		}
		o.Probe = &res
		o.KernelLimit = res.Ports
	}
	limit := o.KernelLimit
	for _, b := range o.HostBridges {
		if b.Ports*10 >= limit*9 {
			o.Problems = append(o.Problems, fmt.Sprintf("bridge %s has %d of %d ports in use", b.Name, b.Ports, limit))
		}
	}
	if f.pods > limit {
		o.Problems = append(o.Problems, fmt.Sprintf("%d pods per node do not fit on one bridge (%d ports): use more nodes or a CNI without a bridge", f.pods, limit))
	}
	if len(o.StaleProbeNS) > 0 {
		o.Problems = append(o.Problems, fmt.Sprintf("namespaces left by killed probes: %s (remove with: ip netns delete NAME)", strings.Join(o.StaleProbeNS, ", ")))
	}

	if f.asJSON {
		if err := doctor.WriteJSON(stdout, o); err != nil {
			return err
		}
	} else {
		if o.Probe != nil {
			r := o.Probe
			fmt.Fprintf(stdout, "bridge port limit (measured): %d ports attached, the next refused with %q\n", r.Ports, r.Refusal)
			fmt.Fprintf(stdout, "  = %d port numbers (port 0 is reserved) = 2^%d: BR_PORT_BITS = %d\n", r.PortNumbers, r.PortBits, r.PortBits)
			fmt.Fprintf(stdout, "  probe took %.2f s in namespace %s; cleaned up: %v\n", r.Seconds, r.Namespace, r.CleanedUp)
		} else {
			fmt.Fprintf(stdout, "bridge port limit (kernel constant, not measured): %d ports (BR_PORT_BITS=%d: %d port numbers, port 0 reserved); measure with --probe\n",
				doctor.BridgeMaxPorts, doctor.BridgePortBits, doctor.BridgePortNumbers)
		}
		fmt.Fprintln(stdout, "this is the ceiling on pods per node with a bridge CNI, whatever maxPods says [sources: kernel-bridge, pods-per-node, design-6]")
		if len(o.HostBridges) == 0 {
			fmt.Fprintln(stdout, "host bridges: none")
		}
		for _, b := range o.HostBridges {
			fmt.Fprintf(stdout, "host bridge %s: %d/%d ports\n", b.Name, b.Ports, limit)
		}
		for _, p := range o.Problems {
			fmt.Fprintln(stdout, "PROBLEM: "+p)
		}
	}
	if len(o.Problems) > 0 {
		return fmt.Errorf("%d problem(s) found", len(o.Problems))
	}
	return nil
}
