package doctor

import (
	"math/big"
	"net/netip"
	"testing"
)

func TestCeilLog2(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		want int
	}{{0, 0}, {1, 0}, {2, 1}, {3, 2}, {4, 2}, {5, 3}, {1024, 10}, {1025, 11}, {65536, 16}, {1_000_000, 20}, {1 << 20, 20}, {1<<20 + 1, 21}} {
		if got := CeilLog2(c.n); got != c.want {
			t.Errorf("CeilLog2(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

func TestAddrCount(t *testing.T) {
	for _, c := range []struct {
		bits, len int
		want      string
	}{
		{32, 8, "16777216"}, {32, 28, "16"}, {32, 32, "1"}, {32, 33, "0"},
		{128, 64, "18446744073709551616"}, {128, 80, "281474976710656"}, {128, 96, "4294967296"}, {128, 128, "1"},
	} {
		if got := AddrCount(c.bits, c.len).String(); got != c.want {
			t.Errorf("AddrCount(%d, /%d) = %s, want %s", c.bits, c.len, got, c.want)
		}
	}
}

// The design brief's figure: a /8 gives 15 addresses per node at 1M nodes.
func TestIPv4Exhaustion(t *testing.T) {
	for _, c := range []struct {
		cidr            string
		nodes           uint64
		share, pods     string
		nodeLen, usable int
		ipamFits        bool
	}{
		{"10.0.0.0/8", 1_000_000, "16", "15", 28, 13, false},
		{"10.0.0.0/8", 5_000, "3355", "3354", 21, 2045, true},
		{"10.0.0.0/8", 65_536, "256", "255", 24, 253, true},
		{"10.0.0.0/8", 65_537, "255", "254", 25, 125, false},
		{"10.244.0.0/16", 256, "256", "255", 24, 253, true},
		{"10.0.0.0/8", 20_000_000, "0", "0", 0, 0, false}, // more nodes than addresses
	} {
		p := netip.MustParsePrefix(c.cidr)
		if got := PerNodeShare(p, c.nodes).String(); got != c.share {
			t.Errorf("%s/%d nodes: share %s, want %s", c.cidr, c.nodes, got, c.share)
		}
		if got := PodAddrsPerNode(p, c.nodes).String(); got != c.pods {
			t.Errorf("%s/%d nodes: pod addrs %s, want %s", c.cidr, c.nodes, got, c.pods)
		}
		l, err := NodePrefixLen(p, c.nodes)
		if c.nodeLen == 0 {
			if err == nil {
				t.Errorf("%s/%d nodes: NodePrefixLen = /%d, want error", c.cidr, c.nodes, l)
			}
			continue
		}
		if err != nil || l != c.nodeLen {
			t.Errorf("%s/%d nodes: NodePrefixLen = /%d, %v; want /%d", c.cidr, c.nodes, l, err, c.nodeLen)
		}
		if got := HostLocalUsable(32, l); got.Int64() != int64(c.usable) {
			t.Errorf("HostLocalUsable(/%d) = %s, want %d", l, got, c.usable)
		}
		if got := NodeIPAMFits(p.Bits(), l); got != c.ipamFits {
			t.Errorf("NodeIPAMFits(/%d, /%d) = %v, want %v", p.Bits(), l, got, c.ipamFits)
		}
	}
}

func TestIPv6ClusterPrefix(t *testing.T) {
	for _, c := range []struct {
		nodeLen int
		nodes   uint64
		want    int
		ipam    bool
	}{
		{64, 1_000_000, 44, false}, {80, 1_000_000, 60, false}, {96, 1_000_000, 76, false},
		{64, 65_536, 48, true}, {64, 65_537, 47, false}, {64, 5_000, 51, true}, {64, 1, 64, false},
	} {
		got, err := ClusterPrefixLen(c.nodeLen, c.nodes)
		if err != nil || got != c.want {
			t.Errorf("ClusterPrefixLen(/%d, %d) = /%d, %v; want /%d", c.nodeLen, c.nodes, got, err, c.want)
		}
		if ok := NodeIPAMFits(got, c.nodeLen); ok != c.ipam {
			t.Errorf("NodeIPAMFits(/%d, /%d) = %v, want %v", got, c.nodeLen, ok, c.ipam)
		}
	}
	if _, err := ClusterPrefixLen(4, 1_000_000); err == nil {
		t.Error("ClusterPrefixLen(/4, 1M) should fail")
	}
}

func TestHostLocalUsableIPv6(t *testing.T) {
	if got := HostLocalUsable(128, 120).Int64(); got != 254 {
		t.Errorf("HostLocalUsable(128, /120) = %d, want 254", got)
	}
	if got := HostLocalUsable(32, 31).Int64(); got != 0 {
		t.Errorf("HostLocalUsable(32, /31) = %d, want 0", got)
	}
}

func TestNthSubnet(t *testing.T) {
	for _, c := range []struct {
		cluster string
		nodeLen int
		index   uint64
		want    string
	}{
		{"10.0.0.0/8", 28, 0, "10.0.0.0/28"},
		{"10.0.0.0/8", 28, 1, "10.0.0.16/28"},
		{"10.0.0.0/8", 28, 999_999, "10.244.35.240/28"},
		{"10.0.0.0/8", 28, 1<<20 - 1, "10.255.255.240/28"},
		{"10.1.2.3/8", 24, 5, "10.0.5.0/24"}, // cluster is masked first
		{"fd00::/44", 64, 0, "fd00::/64"},
		{"fd00::/44", 64, 1, "fd00:0:0:1::/64"},
		{"fd00::/44", 64, 999_999, "fd00:0:f:423f::/64"},
		{"fd00::/60", 80, 999_999, "fd00:0:0:f:423f::/80"},
		{"fd00::/76", 96, 999_999, "fd00::f:423f:0:0/96"},
		{"2001:db8::/32", 128, 1, "2001:db8::1/128"},
	} {
		got, err := NthSubnet(netip.MustParsePrefix(c.cluster), c.nodeLen, new(big.Int).SetUint64(c.index))
		if err != nil || got.String() != c.want {
			t.Errorf("NthSubnet(%s, /%d, %d) = %s, %v; want %s", c.cluster, c.nodeLen, c.index, got, err, c.want)
		}
	}
	for _, c := range []struct {
		cluster string
		nodeLen int
		index   int64
	}{
		{"10.0.0.0/8", 28, 1 << 20}, // one past the end
		{"10.0.0.0/8", 4, 0},        // node prefix shorter than the cluster's
		{"10.0.0.0/8", 33, 0},
		{"fd00::/44", 64, -1},
	} {
		if got, err := NthSubnet(netip.MustParsePrefix(c.cluster), c.nodeLen, big.NewInt(c.index)); err == nil {
			t.Errorf("NthSubnet(%s, /%d, %d) = %s, want error", c.cluster, c.nodeLen, c.index, got)
		}
	}
}

func TestHuman(t *testing.T) {
	for _, c := range []struct {
		n    *big.Int
		want string
	}{
		{big.NewInt(15), "15"},
		{AddrCount(128, 96), "4294967296"},
		{AddrCount(128, 64), "2^64"},
		{new(big.Int).Sub(AddrCount(128, 64), big.NewInt(1)), "2^64-1"},
		{AddrCount(128, 80), "2^48"},
		{big.NewInt(3_000_000_000_000), "3e+12"},
	} {
		if got := Human(c.n); got != c.want {
			t.Errorf("Human(%s) = %s, want %s", c.n, got, c.want)
		}
	}
}
