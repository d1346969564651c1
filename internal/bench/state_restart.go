package bench

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// StateRestart is the restart phase: SIGKILL, then the same server started again on the
// same data directory with its default durability: time until it says it is ready, until
// the first full paged list of the pods is answered, and what it holds afterwards
// (meganode-store keeps /registry/leases/ in memory only by default: leases come back empty,
// as kubelets re-create them on their next heartbeat).
type StateRestart struct {
	ReadySeconds     float64          `json:"ready_seconds"`      // kill → ready line
	FirstListSeconds float64          `json:"first_list_seconds"` // kill → last page of the first full pod list
	ListAttempts     int              `json:"list_attempts"`
	RSSBytes         uint64           `json:"rss_bytes"` // after the list
	Counts           map[string]int64 `json:"counts"`    // keys per kind after the restart
}

func (st *stateRun) restart(ctx context.Context) (*StateRestart, error) {
	res := &StateRestart{Counts: map[string]int64{}}
	st.closeConns()
	t0 := time.Now()
	if err := st.target.KillRestart(); err != nil {
		return nil, err
	}
	res.ReadySeconds = time.Since(t0).Seconds()
	st.cfg.logf("%s: killed and restarted: ready after %.2f s", st.target.Name, res.ReadySeconds)
	if err := st.connect(); err != nil {
		return res, err
	}
	// The first list: retried until a whole one is answered, as a starting apiserver retries.
	var lastErr error
	for time.Since(t0) < ReadyTimeout {
		res.ListAttempts++
		r := StateListRun{Prefix: PodPrefix}
		lctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		lastErr = st.pagedList(lctx, st.kc(0), &r)
		cancel()
		if lastErr == nil {
			res.FirstListSeconds = time.Since(t0).Seconds()
			res.Counts["pods"] = r.Keys
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if lastErr != nil {
		return res, fmt.Errorf("no full list of the pods after %d attempts: %w", res.ListAttempts, lastErr)
	}
	for _, kind := range []string{"nodes", "leases"} {
		g, err := st.conns[0].Get(ctx, statePrefix(kind), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return res, err
		}
		res.Counts[kind] = g.Count
	}
	res.RSSBytes = rssBytes(st.target.Pid)
	st.cfg.logf("%s: first full pod list after %.2f s (%d pods); holds %d nodes, %d leases; RSS %s", st.target.Name,
		res.FirstListSeconds, res.Counts["pods"], res.Counts["nodes"], res.Counts["leases"], FmtBytes(float64(res.RSSBytes)))
	if n := int64(st.cfg.Nodes); res.Counts["pods"] != n || res.Counts["nodes"] != n {
		return res, fmt.Errorf("after the restart: %d pods and %d nodes, want %d of each", res.Counts["pods"], res.Counts["nodes"], n)
	}
	return res, nil
}
