package storeproc

import (
	"net"
	"strconv"
	"testing"
)

// FreePort's ports lie below the kernel's ephemeral range, where no outgoing connection can
// take them, and are free to bind.
func TestFreePortBelowEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	for range 20 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if p < minPort || p >= low {
			t.Fatalf("port %d outside [%d, %d)", p, minPort, low)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d: %v", p, err)
		}
		l.Close()
	}
}

// FreePortRange's block lies below the ephemeral range and every port of it binds; a block
// larger than the range below the ephemeral ports is refused.
func TestFreePortRange(t *testing.T) {
	low := ephemeralLow()
	base, err := FreePortRange(200)
	if err != nil {
		t.Fatal(err)
	}
	if base < minPort || base+200 > low {
		t.Fatalf("range %d–%d outside [%d, %d)", base, base+199, minPort, low)
	}
	for p := base; p < base+200; p++ {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d of the range: %v", p, err)
		}
		l.Close()
	}
	if _, err := FreePortRange(low); err == nil {
		t.Fatalf("a range of %d ports below %d accepted", low, low)
	}
	if _, err := FreePortRange(0); err == nil {
		t.Fatal("an empty range accepted")
	}
}

// No port is handed out twice in a process, though each is free again as soon as it is checked:
// a group's members, started after all their ports are taken, would otherwise share one.
func TestFreePortNeverTwice(t *testing.T) {
	seen := map[int]bool{}
	t.Cleanup(func() { // the other tests look for free ranges in the same process
		handedOut.Lock()
		defer handedOut.Unlock()
		for p := range seen {
			delete(handedOut.ports, p)
		}
	})
	for range 300 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
	base, err := FreePortRange(50)
	if err != nil {
		t.Fatal(err)
	}
	for p := base; p < base+50; p++ {
		if seen[p] {
			t.Fatalf("range [%d, %d) holds %d, handed out before", base, base+50, p)
		}
	}
}
