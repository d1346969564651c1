package storeproc

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// handedOut are the ports FreePort and FreePortRange returned in this process. A port is checked
// by listening on it and closing it again, so until its child binds it the next check finds it
// free too: one `up` of a 3-member group takes 9 ports, and two of them once came out equal (a
// member's peer port, "address already in use"). None is handed out twice within claimFor, by
// which its child has bound it (or failed); later it may be handed out again, so a long-lived
// process (a test binary running many clusters) keeps finding free ranges.
var handedOut = struct {
	sync.Mutex
	ports map[int]time.Time
}{ports: map[int]time.Time{}}

const claimFor = 2 * time.Minute

// claim marks ports [p, p+n) handed out, unless one of them already is.
func claim(p, n int) bool {
	handedOut.Lock()
	defer handedOut.Unlock()
	now := time.Now()
	for q := p; q < p+n; q++ {
		if at, ok := handedOut.ports[q]; ok && now.Sub(at) < claimFor {
			return false
		}
	}
	for q := p; q < p+n; q++ {
		handedOut.ports[q] = now
	}
	if len(handedOut.ports) > 4096 {
		for q, at := range handedOut.ports {
			if now.Sub(at) >= claimFor {
				delete(handedOut.ports, q)
			}
		}
	}
	return true
}

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
			if claim(port, 1) {
				return port, nil
			}
		}
	}
	for range 64 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if claim(port, 1) {
			return port, nil
		}
	}
	return 0, fmt.Errorf("no loopback port this process has not handed out already after 128 tries")
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
		if ok && claim(base, n) {
			return base, nil
		}
	}
	return 0, fmt.Errorf("no free range of %d ports between %d and %d after 64 tries", n, minPort, low)
}
