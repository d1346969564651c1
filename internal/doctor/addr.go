package doctor

import (
	"fmt"
	"math/big"
	"math/bits"
	"net/netip"
)

// Address arithmetic for pod address planning (design brief §6). Counts are
// *big.Int because an IPv6 /64 holds 2^64 addresses, one more than uint64 can.

// AddrCount is the number of addresses in a prefix of length prefixLen in a
// family of addrBits bits (32 or 128): 2^(addrBits-prefixLen).
func AddrCount(addrBits, prefixLen int) *big.Int {
	if prefixLen < 0 || prefixLen > addrBits {
		return big.NewInt(0)
	}
	return new(big.Int).Lsh(big.NewInt(1), uint(addrBits-prefixLen))
}

// PrefixAddrCount is AddrCount for a netip.Prefix.
func PrefixAddrCount(p netip.Prefix) *big.Int {
	return AddrCount(p.Addr().BitLen(), p.Bits())
}

// CeilLog2 is the number of bits needed to number n distinct things
// (CeilLog2(1)=0, CeilLog2(2)=1, CeilLog2(1_000_000)=20).
func CeilLog2(n uint64) int {
	if n <= 1 {
		return 0
	}
	return bits.Len64(n - 1)
}

// FloorLog2 is the largest k with 2^k <= n (n > 0); -1 for n = 0.
func FloorLog2(n *big.Int) int {
	if n.Sign() <= 0 {
		return -1
	}
	return n.BitLen() - 1
}

// PerNodeShare is how many addresses of the cluster range each of nodes gets
// when it is divided evenly, ignoring CIDR alignment: floor(|range| / nodes).
// 10.0.0.0/8 over 1,000,000 nodes gives 16.
func PerNodeShare(cluster netip.Prefix, nodes uint64) *big.Int {
	if nodes == 0 {
		return big.NewInt(0)
	}
	return new(big.Int).Quo(PrefixAddrCount(cluster), new(big.Int).SetUint64(nodes))
}

// PodAddrsPerNode is the number of pod addresses each node can hand out from an
// even share of the cluster range: the share minus the one address the node keeps
// for itself (its bridge/gateway address). A /8 at 1,000,000 nodes gives 15.
func PodAddrsPerNode(cluster netip.Prefix, nodes uint64) *big.Int {
	s := PerNodeShare(cluster, nodes)
	if s.Sign() > 0 {
		s.Sub(s, big.NewInt(1))
	}
	return s
}

// NodePrefixLen is the longest per-node prefix length that still gives every one
// of nodes its own aligned block inside cluster: cluster.Bits() + ceil(log2 nodes).
func NodePrefixLen(cluster netip.Prefix, nodes uint64) (int, error) {
	l := cluster.Bits() + CeilLog2(nodes)
	if l > cluster.Addr().BitLen() {
		return 0, fmt.Errorf("%s cannot be split into %d node blocks", cluster, nodes)
	}
	return l, nil
}

// ClusterPrefixLen is the shortest-needed cluster prefix length (the largest
// number) whose range holds nodes blocks of length nodeLen: nodeLen - ceil(log2 nodes).
// A /64 per node for 1,000,000 nodes needs a /44.
func ClusterPrefixLen(nodeLen int, nodes uint64) (int, error) {
	l := nodeLen - CeilLog2(nodes)
	if l < 0 {
		return 0, fmt.Errorf("no prefix holds %d blocks of /%d", nodes, nodeLen)
	}
	return l, nil
}

// HostLocalUsable is how many pod addresses the CNI host-local IPAM hands out
// from one IPv4 node block of length nodeLen: all addresses minus the network
// address, the broadcast address and the gateway (the bridge's own address).
// For IPv6 there is no broadcast, so minus the subnet-router anycast address and
// the gateway.
func HostLocalUsable(addrBits, nodeLen int) *big.Int {
	n := AddrCount(addrBits, nodeLen)
	reserved := int64(3)
	if addrBits == 128 {
		reserved = 2
	}
	if n.Cmp(big.NewInt(reserved)) <= 0 {
		return big.NewInt(0)
	}
	return n.Sub(n, big.NewInt(reserved))
}

// NthSubnet is the index-th block of length nodeLen inside cluster (index 0 is
// the first). It errors when the block would fall outside the cluster range.
func NthSubnet(cluster netip.Prefix, nodeLen int, index *big.Int) (netip.Prefix, error) {
	cluster = cluster.Masked()
	addrBits := cluster.Addr().BitLen()
	if nodeLen < cluster.Bits() || nodeLen > addrBits {
		return netip.Prefix{}, fmt.Errorf("node prefix /%d does not fit in %s", nodeLen, cluster)
	}
	if index.Sign() < 0 || index.BitLen() > nodeLen-cluster.Bits() {
		return netip.Prefix{}, fmt.Errorf("block %s of /%d is outside %s", index, nodeLen, cluster)
	}
	base := new(big.Int).SetBytes(cluster.Addr().AsSlice())
	off := new(big.Int).Lsh(index, uint(addrBits-nodeLen))
	base.Add(base, off)
	buf := make([]byte, addrBits/8)
	base.FillBytes(buf)
	a, ok := netip.AddrFromSlice(buf)
	if !ok {
		return netip.Prefix{}, fmt.Errorf("bad address bytes %x", buf)
	}
	return netip.PrefixFrom(a, nodeLen), nil
}

// NodeIPAMMaxDiff is how many bits longer a node CIDR may be than the cluster
// CIDR for kube-controller-manager's range allocator (--allocate-node-cidrs):
// its bitmap holds at most 2^16 = 65,536 node CIDRs per cluster CIDR.
const NodeIPAMMaxDiff = 16

// NodeIPAMFits reports whether kube-controller-manager can allocate node CIDRs
// of length nodeLen from a cluster CIDR of length clusterLen.
func NodeIPAMFits(clusterLen, nodeLen int) bool {
	return nodeLen > clusterLen && nodeLen-clusterLen <= NodeIPAMMaxDiff
}

// Human formats a big count compactly: exact below 10^12, else as 2^k when it
// is a power of two, else in scientific notation.
func Human(n *big.Int) string {
	if n.Cmp(big.NewInt(1_000_000_000_000)) < 0 {
		return n.String()
	}
	if k := FloorLog2(n); new(big.Int).Lsh(big.NewInt(1), uint(k)).Cmp(n) == 0 {
		return fmt.Sprintf("2^%d", k)
	}
	if m := new(big.Int).Add(n, big.NewInt(1)); new(big.Int).Lsh(big.NewInt(1), uint(FloorLog2(m))).Cmp(m) == 0 {
		return fmt.Sprintf("2^%d-1", FloorLog2(m))
	}
	f, _ := new(big.Float).SetInt(n).Float64()
	return fmt.Sprintf("%.3g", f)
}
