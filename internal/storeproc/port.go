package storeproc

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// FreePort returns a loopback port nobody listens on, for a server that a child process will
// bind. It is taken below the kernel's ephemeral range (net.ipv4.ip_local_port_range), where the
// kernel picks the source port of every outgoing connection and the port of `listen :0`: a port
// from that range, free when checked, can go to any outgoing connection on the machine before
// the child binds it — under make test's parallel packages a kube-scheduler of `up` lost its
// port so ("bind: address already in use"). Below the range only another caller of FreePort
// can take it, and each candidate is checked by listening on it. When no such port is found
// (or the range cannot be read), the kernel's choice is the fallback.
func FreePort() (int, error) {
	low := ephemeralLow()
	for range 64 {
		if low <= minPort+1 {
			break
		}
		port := minPort + rand.IntN(low-minPort)
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			l.Close()
			return port, nil
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// minPort keeps FreePort above the well-known and most registered service ports.
const minPort = 10000

// ephemeralLow is the first port of the kernel's ephemeral range (32768 if it cannot be read,
// Linux's default).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	var low, high int
	if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &low, &high); err != nil || low <= 0 {
		return 32768
	}
	return low
}

// FreePortRange returns the first of n consecutive loopback ports nobody listens on, taken below
// the kernel's ephemeral range as FreePort's are (each checked by listening on it): a block for
// n children that each bind one port of it, e.g. `up --kubelets`' hollow nodes.
func FreePortRange(n int) (int, error) {
	low := ephemeralLow()
	if n <= 0 || low-minPort <= n {
		return 0, fmt.Errorf("no range of %d ports between %d and %d", n, minPort, low)
	}
	for range 64 {
		base := minPort + rand.IntN(low-minPort-n)
		ok := true
		for p := base; p < base+n && ok; p++ {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return base, nil
		}
	}
	return 0, fmt.Errorf("no free range of %d ports between %d and %d after 64 tries", n, minPort, low)
}
