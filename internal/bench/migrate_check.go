package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sort"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// keyRecord is what a server answered for one key: every field of its KeyValue, the value by
// its length and SHA-256 (the original's answers are kept this way so that the original can be
// stopped before the conversion: see migrate.go).
type keyRecord struct {
	key                               string
	createRev, modRev, version, lease int64
	valueLen                          int
	valueSum                          [sha256.Size]byte
}

func recordOf(kv *mvccpb.KeyValue) keyRecord {
	return keyRecord{key: string(kv.Key), createRev: kv.CreateRevision, modRev: kv.ModRevision, version: kv.Version,
		lease: kv.Lease, valueLen: len(kv.Value), valueSum: sha256.Sum256(kv.Value)}
}

// diff names the fields in which got differs from r ("" when none).
func (r *keyRecord) diff(got *keyRecord) string {
	var d []string
	if got.createRev != r.createRev {
		d = append(d, fmt.Sprintf("create revision %d, want %d", got.createRev, r.createRev))
	}
	if got.modRev != r.modRev {
		d = append(d, fmt.Sprintf("mod revision %d, want %d", got.modRev, r.modRev))
	}
	if got.version != r.version {
		d = append(d, fmt.Sprintf("version %d, want %d", got.version, r.version))
	}
	if got.lease != r.lease {
		d = append(d, fmt.Sprintf("lease %x, want %x", got.lease, r.lease))
	}
	if got.valueLen != r.valueLen || got.valueSum != r.valueSum {
		d = append(d, fmt.Sprintf("value of %d bytes differs from the original's %d", got.valueLen, r.valueLen))
	}
	if len(d) == 0 {
		return ""
	}
	return fmt.Sprintf("key %q: %v", r.key, d)
}

// leaseRecord is a lease as TimeToLive answers it: its granted TTL and attached keys (their
// count and the SHA-256 of the sorted keys).
type leaseRecord struct {
	granted int64
	left    int64 // TTL left when read (not compared)
	keys    int
	keysSum [sha256.Size]byte
}

// migrateAnswers is what the original etcd answered.
type migrateAnswers struct {
	rev, compacted int64 // the revision the keys were read at; the compaction HashKV reported
	keys           []keyRecord
	hash           uint32
	hashCompact    int64
	leases         map[int64]leaseRecord
	keysWithLease  int64
	// live: the server is a live cluster's store (`meganode migrate`), whose leases expire on
	// their own: one with at most expiringTTL seconds left is expiring — not an error when
	// read, and the target may have revoked it (and moved its revision past rev) by the check.
	live     bool
	expiring map[int64]bool
}

// expiringTTL is how close to its expiry a live store's lease counts as expiring (a cut-over's
// steps between the read and the check take seconds).
const expiringTTL = 60

// rangeAll reads every key at rev with paginated Range (limit keys a page, each page from the
// key after the last one), calling f for each in key order.
func rangeAll(ctx context.Context, cli *clientv3.Client, rev int64, limit int, f func(kv *mvccpb.KeyValue)) error {
	from := "\x00"
	for {
		r, err := cli.Get(ctx, from, clientv3.WithFromKey(), clientv3.WithRev(rev), clientv3.WithLimit(int64(limit)))
		if err != nil {
			return fmt.Errorf("range from %q at %d: %w", from, rev, err)
		}
		for _, kv := range r.Kvs {
			f(kv)
		}
		if !r.More || len(r.Kvs) == 0 {
			return nil
		}
		from = string(r.Kvs[len(r.Kvs)-1].Key) + "\x00"
	}
}

// readLeases answers every lease with its record, and checks that each has TTL left.
func readLeases(ctx context.Context, cli *clientv3.Client) (map[int64]leaseRecord, map[int64]string, error) {
	ls, err := cli.Leases(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("leases: %w", err)
	}
	out := make(map[int64]leaseRecord, len(ls.Leases))
	bad := map[int64]string{}
	for _, l := range ls.Leases {
		t, err := cli.TimeToLive(ctx, l.ID, clientv3.WithAttachedKeys())
		if err != nil {
			return nil, nil, fmt.Errorf("lease %x: %w", l.ID, err)
		}
		if t.TTL <= 0 || t.TTL > t.GrantedTTL {
			bad[int64(l.ID)] = fmt.Sprintf("lease %x: %d s left of %d", l.ID, t.TTL, t.GrantedTTL)
		}
		sort.Slice(t.Keys, func(i, j int) bool { return bytes.Compare(t.Keys[i], t.Keys[j]) < 0 })
		h := sha256.New()
		for _, k := range t.Keys {
			h.Write(k)
			h.Write([]byte{0})
		}
		rec := leaseRecord{granted: t.GrantedTTL, left: t.TTL, keys: len(t.Keys)}
		h.Sum(rec.keysSum[:0])
		out[int64(l.ID)] = rec
	}
	return out, bad, nil
}

// read takes the original's answers at rev: every key, HashKV, the leases.
func (a *migrateAnswers) read(ctx context.Context, cli *clientv3.Client, endpoint string, rev int64, limit int) error {
	a.rev = rev
	var prev string
	var order error
	err := rangeAll(ctx, cli, rev, limit, func(kv *mvccpb.KeyValue) {
		r := recordOf(kv)
		if len(a.keys) > 0 && r.key <= prev && order == nil {
			order = fmt.Errorf("keys out of order: %q after %q", r.key, prev)
		}
		prev = r.key
		if r.lease != 0 {
			a.keysWithLease++
		}
		a.keys = append(a.keys, r)
	})
	if err == nil {
		err = order
	}
	if err != nil {
		return err
	}
	h, err := cli.HashKV(ctx, endpoint, rev)
	if err != nil {
		return fmt.Errorf("hashkv at %d: %w", rev, err)
	}
	a.hash, a.hashCompact, a.compacted = h.Hash, h.CompactRevision, h.CompactRevision
	var bad map[int64]string
	if a.leases, bad, err = readLeases(ctx, cli); err != nil {
		return err
	}
	if a.live {
		a.expiring = map[int64]bool{}
		for id, l := range a.leases {
			if l.left <= expiringTTL {
				a.expiring[id] = true
				delete(bad, id)
			}
		}
	}
	if v := sortedValues(bad); len(v) > 0 {
		return fmt.Errorf("the original etcd's %s", v[0])
	}
	return nil
}

// maxListed bounds the mismatches a check lists (all are counted).
const maxListed = 5

// compare reads the same from the server cli is connected to and compares. An error is a
// failure to read; differences are in the check.
func (a *migrateAnswers) compare(ctx context.Context, cli *clientv3.Client, endpoint string, limit int) (*MigrateCheck, error) {
	c := &MigrateCheck{WantRevision: a.rev, WantKeys: int64(len(a.keys)), WantHashKV: a.hash,
		WantCompactRevision: a.hashCompact, WantLeases: len(a.leases), WantKeysWithLease: a.keysWithLease}
	mismatch := func(s string) {
		c.KeyMismatches++
		if len(c.FirstMismatches) < maxListed {
			c.FirstMismatches = append(c.FirstMismatches, s)
		}
	}
	g, err := cli.Get(ctx, "health")
	if err != nil {
		return nil, err
	}
	c.Revision = g.Header.Revision
	// One pass over both key lists in key order: a key only one side has is missing or extra.
	next := 0
	err = rangeAll(ctx, cli, a.rev, limit, func(kv *mvccpb.KeyValue) {
		got := recordOf(kv)
		c.Keys++
		if got.lease != 0 {
			c.KeysWithLease++
		}
		for next < len(a.keys) && a.keys[next].key < got.key {
			mismatch(fmt.Sprintf("key %q missing", a.keys[next].key))
			next++
		}
		if next < len(a.keys) && a.keys[next].key == got.key {
			if d := a.keys[next].diff(&got); d != "" {
				mismatch(d)
			}
			next++
			return
		}
		mismatch(fmt.Sprintf("key %q not in the original", got.key))
	})
	if err != nil {
		return c, err
	}
	for ; next < len(a.keys); next++ {
		mismatch(fmt.Sprintf("key %q missing", a.keys[next].key))
	}
	c.KeysEqual = c.KeyMismatches == 0 && c.Keys == c.WantKeys && c.KeysWithLease == c.WantKeysWithLease

	h, err := cli.HashKV(ctx, endpoint, a.rev)
	if err != nil {
		return c, fmt.Errorf("hashkv at %d: %w", a.rev, err)
	}
	c.HashKV, c.CompactRevision = h.Hash, h.CompactRevision
	c.HashKVEqual = c.HashKV == c.WantHashKV && c.CompactRevision == c.WantCompactRevision
	if a.compacted > 1 {
		_, err := cli.Get(ctx, "health", clientv3.WithRev(a.compacted-1))
		c.RefusesCompacted = errors.Is(err, rpctypes.ErrCompacted)
	}

	got, bad, err := readLeases(ctx, cli)
	if err != nil {
		return c, err
	}
	c.Leases = len(got)
	c.ExpiringLeases = len(a.expiring)
	for id := range a.expiring {
		delete(bad, id)
	}
	c.LeaseMismatches = sortedValues(bad)
	for id, w := range a.leases {
		g, ok := got[id]
		switch {
		case !ok && a.expiring[id]:
			// Expired and revoked in the target since the read: as the source would have.
		case !ok:
			c.LeaseMismatches = append(c.LeaseMismatches, fmt.Sprintf("lease %x missing", id))
		case g.granted != w.granted:
			c.LeaseMismatches = append(c.LeaseMismatches, fmt.Sprintf("lease %x: granted %d s, want %d", id, g.granted, w.granted))
		case g.keys != w.keys || g.keysSum != w.keysSum:
			c.LeaseMismatches = append(c.LeaseMismatches, fmt.Sprintf("lease %x: %d keys attached, want %d (or other keys)", id, g.keys, w.keys))
		}
	}
	for id := range got {
		if _, ok := a.leases[id]; !ok {
			c.LeaseMismatches = append(c.LeaseMismatches, fmt.Sprintf("lease %x not in the original", id))
		}
	}
	c.LeasesEqual = len(c.LeaseMismatches) == 0
	if len(c.LeaseMismatches) > maxListed {
		c.LeaseMismatches = append(c.LeaseMismatches[:maxListed], fmt.Sprintf("… %d in all", len(c.LeaseMismatches)))
	}
	// A live store's target may have revoked an expiring lease since: a revision of its own.
	revisionOK := c.Revision == c.WantRevision || (len(a.expiring) > 0 && c.Revision > c.WantRevision)
	c.Equal = revisionOK && c.KeysEqual && c.HashKVEqual && c.LeasesEqual &&
		(a.compacted <= 1 || c.RefusesCompacted)
	return c, nil
}

// sortedValues lists a map's values in key order.
func sortedValues(m map[int64]string) []string {
	ids := make([]int64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		out = append(out, m[id])
	}
	return out
}
