package bench

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// KeyState is what one server answered at its current revision: every key (key, value by its
// SHA-256, create and mod revision, version, lease), HashKV at that revision with its
// compaction point, and every lease — the record `bench migrate` keeps of the original, for
// `meganode migrate` to check a live cluster's store against the one it was moved from.
type KeyState struct {
	a migrateAnswers
}

// ReadKeyState reads every key of the server cli is connected to (endpoint names it for
// HashKV) at its current revision, limit keys a page. Nothing but the server itself (revoking
// an expired lease) may write to it meanwhile: a lease with a minute or less left counts as
// expiring, and the target may have revoked it by the time of Compare.
func ReadKeyState(ctx context.Context, cli *clientv3.Client, endpoint string, limit int) (*KeyState, error) {
	g, err := cli.Get(ctx, "health")
	if err != nil {
		return nil, fmt.Errorf("revision of %s: %w", endpoint, err)
	}
	k := &KeyState{a: migrateAnswers{live: true}}
	if err := k.a.read(ctx, cli, endpoint, g.Header.Revision, limit); err != nil {
		return nil, fmt.Errorf("%s: %w", endpoint, err)
	}
	return k, nil
}

// Revision is the revision the keys were read at (the server's current one).
func (k *KeyState) Revision() int64 { return k.a.rev }

// Keys is how many keys the server held.
func (k *KeyState) Keys() int { return len(k.a.keys) }

// Leases is how many leases the server held.
func (k *KeyState) Leases() int { return len(k.a.leases) }

// Expiring is how many of its leases had a minute or less left when read.
func (k *KeyState) Expiring() int { return len(k.a.expiring) }

// HashKV is the server's HashKV at Revision and the compaction revision it reported.
func (k *KeyState) HashKV() (hash uint32, compacted int64) { return k.a.hash, k.a.hashCompact }

// Compare reads the same from the server cli is connected to and says where it differs (the
// checks of `bench migrate`: every key at Revision, HashKV, the compaction point, the leases,
// and the current revision). An error is a failure to read.
func (k *KeyState) Compare(ctx context.Context, cli *clientv3.Client, server, endpoint string, limit int) (*MigrateCheck, error) {
	t0 := time.Now()
	c, err := k.a.compare(ctx, cli, endpoint, limit)
	if c != nil {
		c.Server = server
		c.Seconds = time.Since(t0).Seconds()
	}
	return c, err
}

// Summary is the check in one line.
func (c *MigrateCheck) Summary() string { return c.summary() }
