package doctor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"sort"
	"strings"
	"time"
)

// The Linux bridge numbers its ports with BR_PORT_BITS = 10 bits: 1024 port
// numbers, of which port 0 is reserved, so 1023 interfaces attach and the next
// one gets EXFULL ("Exchange full"). With a bridge CNI that is the real ceiling
// on pods per node, whatever maxPods says.
const (
	BridgePortBits    = 10
	BridgePortNumbers = 1 << BridgePortBits   // 1024
	BridgeMaxPorts    = BridgePortNumbers - 1 // 1023 attachable
)

// ErrNotRoot is returned by ProbeBridge without root.
var ErrNotRoot = errors.New("doctor bridge --probe needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN to create a network namespace): run it as root or with sudo")

// BridgeProbeOptions tune the probe.
type BridgeProbeOptions struct {
	// Namespace to create; default meganode-probe-<pid>. It must not exist.
	Namespace string
	// MaxPorts stops the probe if the kernel has not refused by then (default 65536).
	MaxPorts int
	// Chunk is how many veth pairs one `ip -batch` run adds (default 512).
	Chunk int
	// IP is the iproute2 binary (default "ip" from PATH).
	IP string
	// OnProgress, if set, is called with the number of attached ports after each chunk.
	OnProgress func(ports int)
}

// BridgeProbeResult is what the probe measured.
type BridgeProbeResult struct {
	Namespace string `json:"namespace"`
	// Ports is how many veths were attached when the kernel refused the next one.
	Ports int `json:"ports"`
	// Refusal is the kernel's answer to the port after the last ("Exchange full").
	Refusal string `json:"refusal"`
	// PortNumbers is the port-number space that implies: Ports + 1 (port 0 is reserved).
	PortNumbers int `json:"port_numbers"`
	// PortBits is log2(PortNumbers) when it is a power of two (10 on Linux), else 0.
	PortBits  int     `json:"port_bits"`
	Seconds   float64 `json:"seconds"`
	CleanedUp bool    `json:"cleaned_up"`
}

// ProbeBridge creates a network namespace of its own, a bridge in it, and
// attaches veth pairs (both ends inside the namespace) until the kernel refuses.
// The namespace, and with it every interface, is deleted before it returns,
// whatever happens: error, or ctx cancelled (the CLI cancels on SIGINT/SIGTERM).
func ProbeBridge(ctx context.Context, o BridgeProbeOptions) (res BridgeProbeResult, err error) {
	if os.Geteuid() != 0 {
		return res, ErrNotRoot
	}
	if o.Namespace == "" {
		o.Namespace = fmt.Sprintf("meganode-probe-%d", os.Getpid())
	}
	if o.MaxPorts <= 0 {
		o.MaxPorts = 65536
	}
	if o.Chunk <= 0 {
		o.Chunk = 512
	}
	if o.IP == "" {
		o.IP = "ip"
	}
	if _, err := exec.LookPath(o.IP); err != nil {
		return res, fmt.Errorf("the probe needs iproute2's `ip` command: %w", err)
	}
	res.Namespace = o.Namespace
	start := time.Now()

	if NetnsExists(o.Namespace) {
		return res, fmt.Errorf("network namespace %s already exists; not touching it", o.Namespace)
	}
	if out, err := runIP(ctx, o.IP, nil, "netns", "add", o.Namespace); err != nil {
		// `ip netns add` removes what it created when it fails; make sure.
		_ = deleteNetns(o.IP, o.Namespace)
		return res, fmt.Errorf("ip netns add %s: %v: %s", o.Namespace, err, out)
	}
	defer func() {
		if derr := deleteNetns(o.IP, o.Namespace); derr != nil {
			err = errors.Join(err, derr)
			return
		}
		res.CleanedUp = true
	}()

	const br = "mnbr0"
	if out, err := runIP(ctx, o.IP, nil, "-n", o.Namespace, "link", "add", br, "type", "bridge"); err != nil {
		if ierr := ctx.Err(); ierr != nil {
			return res, fmt.Errorf("probe interrupted: %w", ierr)
		}
		return res, fmt.Errorf("creating bridge: %v: %s", err, out)
	}

	attached := 0
	for next := 0; attached < o.MaxPorts; {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("probe interrupted after %d ports: %w", attached, err)
		}
		n := o.Chunk
		if next+n > o.MaxPorts+1 {
			n = o.MaxPorts + 1 - next
		}
		var script bytes.Buffer
		for i := next; i < next+n; i++ {
			fmt.Fprintf(&script, "link add mnv%d type veth peer name mnp%d\nlink set mnv%d master %s\n", i, i, i, br)
		}
		next += n
		// Without -force, ip stops at the first failing command.
		out, runErr := runIP(ctx, o.IP, &script, "-n", o.Namespace, "-batch", "-")
		if cerr := ctx.Err(); cerr != nil {
			return res, fmt.Errorf("probe interrupted: %w", cerr)
		}
		count, cerr := BridgePorts(ctx, o.IP, o.Namespace, br)
		if cerr != nil {
			if ierr := ctx.Err(); ierr != nil {
				return res, fmt.Errorf("probe interrupted: %w", ierr)
			}
			return res, cerr
		}
		attached = count
		if o.OnProgress != nil {
			o.OnProgress(attached)
		}
		if runErr != nil {
			if msg, ok := refusal(out); ok {
				res.Ports = attached
				res.Refusal = msg
				res.PortNumbers = attached + 1
				if k := CeilLog2(uint64(res.PortNumbers)); 1<<k == res.PortNumbers {
					res.PortBits = k
				}
				res.Seconds = time.Since(start).Seconds()
				return res, nil
			}
			return res, fmt.Errorf("ip -batch failed after %d ports: %v: %s", attached, runErr, strings.TrimSpace(out))
		}
	}
	res.Ports = attached
	res.Seconds = time.Since(start).Seconds()
	return res, fmt.Errorf("the kernel accepted %d ports without refusing; stopped (raise MaxPorts to go on)", attached)
}

// refusal recognises the kernel's "bridge full" answer in ip's output.
func refusal(out string) (string, bool) {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "Exchange full") {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "RTNETLINK answers:")), true
		}
	}
	return "", false
}

// BridgePorts counts the interfaces enslaved to bridge br in namespace ns.
func BridgePorts(ctx context.Context, ip, ns, br string) (int, error) {
	out, err := runIP(ctx, ip, nil, "-n", ns, "-o", "link", "show", "master", br)
	if err != nil {
		return 0, fmt.Errorf("listing ports of %s: %v: %s", br, err, out)
	}
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.TrimSpace(l) != "" {
			n++
		}
	}
	return n, nil
}

func runIP(ctx context.Context, ip string, stdin *bytes.Buffer, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, ip, args...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	return out.String(), err
}

// deleteNetns deletes the namespace (and every interface in it) with a context
// of its own, so that it runs even when the probe's context was cancelled.
func deleteNetns(ip, ns string) error {
	if !NetnsExists(ns) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := runIP(ctx, ip, nil, "netns", "delete", ns)
	if err != nil && NetnsExists(ns) {
		return fmt.Errorf("cleanup: ip netns delete %s: %v: %s", ns, err, out)
	}
	return nil
}

// NetnsDir is where `ip netns` keeps named namespaces.
const NetnsDir = "/run/netns"

// NetnsExists reports whether a named network namespace exists.
func NetnsExists(name string) bool {
	_, err := os.Stat(path.Join(NetnsDir, name))
	return err == nil
}

// HostBridge is a bridge on the running host and how full it is.
type HostBridge struct {
	Name  string `json:"name"`
	Ports int    `json:"ports"`
}

// HostBridges lists the bridges in the current network namespace with their
// port counts (/sys/class/net/<br>/brif).
func HostBridges(fsys fs.FS) ([]HostBridge, error) {
	ents, err := fs.ReadDir(fsys, "sys/class/net")
	if err != nil {
		return nil, err
	}
	var out []HostBridge
	for _, e := range ents {
		brif, err := fs.ReadDir(fsys, "sys/class/net/"+e.Name()+"/brif")
		if err != nil {
			continue
		}
		out = append(out, HostBridge{Name: e.Name(), Ports: len(brif)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// StaleProbeNamespaces lists meganode-probe-<pid> namespaces whose process is
// gone (a probe killed with SIGKILL cannot clean up).
func StaleProbeNamespaces() []string {
	ents, err := os.ReadDir(NetnsDir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "meganode-probe-%d", &pid); err != nil || fmt.Sprintf("meganode-probe-%d", pid) != e.Name() {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			out = append(out, e.Name())
		}
	}
	return out
}
