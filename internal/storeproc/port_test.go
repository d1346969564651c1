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
