package bench

import (
	"context"
	"crypto/rand"
	"strconv"
	"strings"
)

// Put is etcd's `benchmark put`: each op writes a val-size value to one of
// key-space-size keys of key-size bytes, chosen at random or in sequence.
type Put struct {
	cfg Config
	val string
}

// NewPut returns the put workload.
func NewPut(cfg Config) *Put {
	cfg.Normalize()
	return &Put{cfg: cfg, val: randomValue(cfg.ValSize)}
}

func (p *Put) Name() string                                        { return "put" }
func (p *Put) Setup(ctx context.Context, r *Run) error             { return nil }
func (p *Put) Finish(ctx context.Context, r *Run, _ *Result) error { return nil }

func (p *Put) Op(ctx context.Context, w *Worker) error {
	var k uint64
	if p.cfg.SequentialKeys {
		k = w.Seq % uint64(p.cfg.KeySpaceSize)
	} else {
		k = w.Rng.Uint64N(uint64(p.cfg.KeySpaceSize))
	}
	_, err := w.Cli.Put(ctx, FixedKey(k, p.cfg.KeySize), p.val)
	return err
}

// FixedKey is key number k as a key of size bytes: its decimal digits padded on
// the left with 'k' (longer than size only when size cannot hold the digits).
func FixedKey(k uint64, size int) string {
	d := strconv.FormatUint(k, 10)
	if len(d) >= size {
		return d
	}
	return strings.Repeat("k", size-len(d)) + d
}

// randomValue returns n random printable bytes (computed once per run, as etcd's
// benchmark does).
func randomValue(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}
