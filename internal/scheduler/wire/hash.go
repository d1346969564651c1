package wire

import "hash/fnv"

// Hash64 is FNV-1a over s: stable across processes, versions and restarts (unlike Go's map hash).
func Hash64(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}

// JumpHash maps key to a bucket in [0, buckets) with Lamping & Veach's jump consistent hash:
// when buckets grows from n to n+1 only ~1/(n+1) of the keys move, all of them to the new
// bucket, so a shard count change rebalances the minimum number of nodes.
func JumpHash(key uint64, buckets int) int {
	if buckets <= 1 {
		return 0
	}
	var b, j int64 = -1, 0
	for j < int64(buckets) {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return int(b)
}

// ShardOf is the shard that owns a node when there are shards shards.
func ShardOf(node string, shards int) int { return JumpHash(Hash64(node), shards) }

// CollectorOf is the collector that gathers the proposals for a pod.
func CollectorOf(namespace, name string, collectors int) int {
	return JumpHash(Hash64(namespace+"/"+name), collectors)
}

// mix64 is the splitmix64 finaliser: a cheap, well-spread 64-bit mix.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Owner is the live shard that owns a node: rendezvous (highest random weight) hashing of the
// node name over the live shard ids. Any shard joining or leaving moves only the nodes it
// gains or loses (1/S of them), so a killed shard's nodes spread evenly over the survivors
// and come back when it returns. live must be non-empty; ids need not be contiguous.
func Owner(node string, live []int) int {
	return OwnerOfHash(Hash64(node), live)
}

// OwnerOfHash is Owner for a node name already hashed with Hash64 (a rebalance hashes each
// node once and compares its owner under two memberships).
func OwnerOfHash(h uint64, live []int) int {
	best, bestW := -1, uint64(0)
	for _, s := range live {
		w := mix64(h ^ mix64(uint64(s)+0x9e3779b97f4a7c15))
		if best < 0 || w > bestW {
			best, bestW = s, w
		}
	}
	return best
}

// AllShards is [0, n).
func AllShards(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
