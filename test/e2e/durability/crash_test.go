// Package durability proves the store's durability promises against the real
// binary: SIGKILL at random moments under concurrent writers, then restart and
// check every acknowledged write per prefix mode, revision monotonicity and
// gap-free watch resumption; plus torn-tail, bit-flip and restart-equivalence tests.
package durability

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/meganode/meganode/internal/storeproc"
)

// Prefix modes used by the crash test: the default is buffered.
var storeArgs = []string{
	"--durability=buffered",
	"--durability-prefix=/registry/secrets/=fsync",
}

const (
	bufferedPrefix = "/registry/pods/"
	fsyncPrefix    = "/registry/secrets/"
	nonePrefix     = "/registry/events/"
)

type acked struct {
	key, value string
	rev        int64
}

func client(t *testing.T, p *storeproc.Proc) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{p.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// killAndRestart SIGKILLs the store, starts it again on its data dir and returns a new client.
func killAndRestart(t *testing.T, p *storeproc.Proc) *clientv3.Client {
	t.Helper()
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	return client(t, p)
}

func kills() int {
	if v, err := strconv.Atoi(os.Getenv("MEGANODE_CRASH_KILLS")); err == nil && v > 0 {
		return v
	}
	return 20
}

func TestCrashRecovery(t *testing.T) {
	p, err := storeproc.Start(storeproc.Options{DataDir: t.TempDir(), ExtraArgs: storeArgs})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	t.Logf("kills: %d", kills())
	var all []acked // every acknowledged durable write so far
	var maxRev int64
	for round := 0; round < kills(); round++ {
		cli := client(t, p)
		ctx, cancel := context.WithCancel(context.Background())
		// A watcher over all of /registry/, like a kube-apiserver watch cache.
		var lastSeen int64
		var wmu sync.Mutex
		wch := cli.Watch(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithRev(maxRev+1))
		go func() {
			for r := range wch {
				for _, e := range r.Events {
					wmu.Lock()
					if e.Kv.ModRevision > lastSeen {
						lastSeen = e.Kv.ModRevision
					}
					wmu.Unlock()
				}
			}
		}()
		var mu sync.Mutex
		var round_ []acked
		var preKillErrs []error // a put refused while the store was up: a defect, not a crash
		killing := make(chan struct{})
		firstAck := make(chan struct{})
		var firstAckOnce sync.Once
		var wg sync.WaitGroup
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				prefix := []string{bufferedPrefix, fsyncPrefix, nonePrefix}[w%3]
				for i := 0; ctx.Err() == nil; i++ {
					k := fmt.Sprintf("%sns/r%d-w%d-%d", prefix, round, w, i)
					v := fmt.Sprintf("v-%d-%d-%d", round, w, i)
					resp, err := cli.Put(ctx, k, v)
					if err != nil {
						select {
						case <-killing: // the store was killed under us: unacknowledged
						default:
							mu.Lock()
							preKillErrs = append(preKillErrs, fmt.Errorf("writer %d put %s: %w", w, k, err))
							mu.Unlock()
						}
						return
					}
					if prefix != nonePrefix {
						mu.Lock()
						round_ = append(round_, acked{k, v, resp.Header.Revision})
						mu.Unlock()
						firstAckOnce.Do(func() { close(firstAck) })
					}
				}
			}(w)
		}
		// The kill lands at a random moment once writes are flowing: the first durable
		// acknowledgement starts the clock, so a slow first dial or restart on a loaded
		// CI machine cannot leave a round with nothing to check.
		select {
		case <-firstAck:
		case <-time.After(20 * time.Second):
		}
		time.Sleep(time.Duration(50+rng.Intn(300)) * time.Millisecond)
		// Writes acknowledged after this point race with the kill and are checked
		// too (they were acknowledged).
		close(killing)
		if err := p.Kill(); err != nil {
			t.Fatal(err)
		}
		cancel()
		wg.Wait()
		cli.Close()
		wmu.Lock()
		seen := lastSeen
		wmu.Unlock()
		all = append(all, round_...)
		if len(preKillErrs) > 0 {
			t.Fatalf("round %d: puts refused while the store was up (%d): %v", round, len(preKillErrs), preKillErrs)
		}
		if len(round_) == 0 {
			t.Fatalf("round %d: no write acknowledged in 20 s before the kill", round)
		}
		if err := p.Restart(); err != nil {
			t.Fatalf("round %d: restart: %v", round, err)
		}
		cli = client(t, p)
		checkAcked(t, cli, round, all)
		// Memory-only prefixes come back empty.
		g, err := cli.Get(context.Background(), nonePrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if g.Count != 0 {
			t.Fatalf("round %d: %s has %d keys after restart, want 0", round, nonePrefix, g.Count)
		}
		// Revisions keep increasing: nothing handed out before is reused.
		for _, a := range round_ {
			if a.rev > maxRev {
				maxRev = a.rev
			}
		}
		pr, err := cli.Put(context.Background(), "/registry/configmaps/ns/probe", strconv.Itoa(round))
		if err != nil {
			t.Fatal(err)
		}
		if pr.Header.Revision <= maxRev || pr.Header.Revision <= seen {
			t.Fatalf("round %d: revision after restart %d not above %d (acked) / %d (watched)", round, pr.Header.Revision, maxRev, seen)
		}
		checkWatchResume(t, cli, round, seen, round_)
		maxRev = pr.Header.Revision
		cli.Close()
	}
	t.Logf("%d acknowledged durable writes checked over %d kills", len(all), kills())
}

func checkAcked(t *testing.T, cli *clientv3.Client, round int, all []acked) {
	t.Helper()
	ctx := context.Background()
	for _, prefix := range []string{bufferedPrefix, fsyncPrefix} {
		g, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		have := map[string][2]interface{}{}
		for _, kv := range g.Kvs {
			have[string(kv.Key)] = [2]interface{}{string(kv.Value), kv.ModRevision}
		}
		missing := 0
		for _, a := range all {
			if !strings.HasPrefix(a.key, prefix) {
				continue
			}
			h, ok := have[a.key]
			if !ok || h[0] != a.value || h[1] != a.rev {
				missing++
				if missing <= 5 {
					t.Errorf("round %d: acknowledged %s=%s@%d, after restart %v (present %v)", round, a.key, a.value, a.rev, h, ok)
				}
			}
		}
		if missing > 0 {
			t.Fatalf("round %d: %d acknowledged writes under %s lost", round, missing, prefix)
		}
	}
}

// A watch resumed from the last revision the old watcher saw must deliver every
// acknowledged durable write after it, in revision order, on each durable
// prefix; on the memory-only prefix the history is gone, so the resumed watch
// must be told it was compacted (and relist) rather than silently miss events.
func checkWatchResume(t *testing.T, cli *clientv3.Client, round int, seen int64, acks []acked) {
	t.Helper()
	want := map[string]int64{}
	for _, a := range acks {
		if a.rev > seen {
			want[a.key] = a.rev
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cur, err := cli.Get(ctx, "/registry/configmaps/ns/probe")
	if err != nil {
		t.Fatal(err)
	}
	end := cur.Header.Revision
	for _, prefix := range []string{bufferedPrefix, fsyncPrefix} {
		wch := cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(seen+1), clientv3.WithProgressNotify())
		last := seen
		cli.RequestProgress(ctx)
		for done := false; !done; {
			r, ok := <-wch
			if !ok || r.Err() != nil {
				t.Fatalf("round %d: resumed watch on %s from %d ended at %d of %d: %v", round, prefix, seen+1, last, end, r.Err())
			}
			for _, e := range r.Events {
				if e.Kv.ModRevision < last {
					t.Fatalf("round %d: resumed watch went back from %d to %d", round, last, e.Kv.ModRevision)
				}
				last = e.Kv.ModRevision
				if rev, ok := want[string(e.Kv.Key)]; ok && rev == e.Kv.ModRevision {
					delete(want, string(e.Kv.Key))
				}
			}
			// Caught up once a response (events or progress) reaches the revision we read.
			done = r.Header.Revision >= end && (len(r.Events) == 0 || last >= end || r.IsProgressNotify())
			if !done && len(r.Events) == 0 {
				cli.RequestProgress(ctx)
			}
		}
	}
	if seen > 0 {
		wch := cli.Watch(ctx, nonePrefix, clientv3.WithPrefix(), clientv3.WithRev(seen))
		r := <-wch
		if r.CompactRevision == 0 {
			t.Fatalf("round %d: a watch on memory-only %s from before the restart was not told to relist: %+v", round, nonePrefix, r)
		}
	}
	if len(want) > 0 {
		t.Fatalf("round %d: resumed watch from %d missed %d acknowledged writes", round, seen+1, len(want))
	}
}
