package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/meganode/meganode/internal/storeproc"
)

// FailoverSpec is one failover run: a 3-member group of Kind under Writers
// writers, its leader SIGKILLed Kills times (restarted after Downtime).
type FailoverSpec struct {
	Kind     string // TargetMeganode or TargetEtcd
	Members  int
	Kills    int
	Writers  int
	Downtime time.Duration // how long a killed member stays down
	Settle   time.Duration // writes between kills
	// ProbeTimeout bounds each attempt of the write issued after a kill (retried
	// until one succeeds): the resolution of the measure, the same for both kinds
	// (a write sent to a member whose leader died waits for its own timeout).
	ProbeTimeout time.Duration
	StoreBin     string   // meganode-store
	StoreArgs    []string // every store member's extra flags (e.g. --durability=fsync)
	EtcdCmd      []string // how to run one etcd member (meganode etcd)
	DataRoot     string   // parent of the members' data dirs
	Log          io.Writer
}

// FailoverResult is what one run measured.
type FailoverResult struct {
	Kind string `json:"kind"`
	// Resumed: per kill, from the SIGKILL to the first success of a write issued after it.
	Resumed      []time.Duration `json:"resumed_ns"`
	MedianMs     float64         `json:"resumed_median_ms"`
	MaxMs        float64         `json:"resumed_max_ms"`
	Acknowledged int64           `json:"acknowledged"`
	Lost         int             `json:"lost"`
	// HashAgreed: after the last restart every member answered HashKV at one revision with one hash.
	HashAgreed bool   `json:"hash_agreed"`
	HashRev    int64  `json:"hash_revision"`
	Note       string `json:"note,omitempty"`
}

type member struct {
	name, client string
	args         []string
	cmd          *exec.Cmd
	done         chan struct{}
	log          io.Writer
}

func (m *member) start() error {
	m.cmd = exec.Command(m.args[0], m.args[1:]...)
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	errPipe, err := m.cmd.StderrPipe()
	if err != nil {
		return err
	}
	m.cmd.Stdout = m.log
	if err := m.cmd.Start(); err != nil {
		return err
	}
	m.done = make(chan struct{})
	ready := make(chan struct{})
	go func() {
		once := sync.Once{}
		sc := bufio.NewScanner(errPipe)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if m.log != nil {
				fmt.Fprintf(m.log, "%s: %s\n", m.name, sc.Text())
			}
			if strings.Contains(sc.Text(), "ready to serve client requests") {
				once.Do(func() { close(ready) })
			}
		}
	}()
	go func() { _ = m.cmd.Wait(); close(m.done) }()
	select {
	case <-ready:
		return nil
	case <-m.done:
		return fmt.Errorf("%s exited before it was ready", m.name)
	case <-time.After(60 * time.Second):
		_ = m.cmd.Process.Kill()
		return fmt.Errorf("%s not ready after 60 s", m.name)
	}
}

func (m *member) kill() {
	_ = m.cmd.Process.Signal(syscall.SIGKILL)
	<-m.done
}

// startFailoverGroup starts the members of a new group, all at once (etcd's
// members wait for each other before they serve).
func startFailoverGroup(s FailoverSpec) ([]*member, error) {
	ms := make([]*member, s.Members)
	var initial []string
	for i := range ms {
		cp, err := storeproc.FreePort()
		if err != nil {
			return nil, err
		}
		pp, err := storeproc.FreePort()
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("m%d", i)
		ms[i] = &member{name: name, client: fmt.Sprintf("127.0.0.1:%d", cp), log: s.Log}
		ms[i].args = []string{fmt.Sprintf("http://127.0.0.1:%d", pp)} // the peer URL, replaced below
		initial = append(initial, fmt.Sprintf("%s=http://127.0.0.1:%d", name, pp))
	}
	for i, m := range ms {
		peer := m.args[0]
		dir := filepath.Join(s.DataRoot, fmt.Sprintf("%s-%s", s.Kind, m.name))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		url := "http://" + m.client
		common := []string{"--name", m.name, "--data-dir", dir, "--listen-client-urls", url,
			"--listen-peer-urls", peer, "--initial-cluster", strings.Join(initial, ","), "--initial-cluster-token", "failover-" + s.Kind}
		switch s.Kind {
		case TargetMeganode:
			m.args = append(append([]string{s.StoreBin, "--advertise-client-urls", url}, common...), s.StoreArgs...)
		case TargetEtcd:
			m.args = append(append([]string{}, s.EtcdCmd...), common...)
		default:
			return nil, fmt.Errorf("unknown kind %q", s.Kind)
		}
		_ = i
	}
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Add(1)
		go func(i int, m *member) { defer wg.Done(); errs[i] = m.start() }(i, m)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			for _, m := range ms {
				if m.cmd != nil && m.cmd.Process != nil {
					m.kill()
				}
			}
			return nil, err
		}
	}
	return ms, nil
}

func newFailoverClient(endpoints ...string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

// leaderIndex asks every running member for the leader, until they agree.
func leaderIndex(ctx context.Context, ms []*member, down int) (int, error) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		ids := map[uint64]int{}
		leaders := map[uint64]bool{}
		for i, m := range ms {
			if i == down {
				continue
			}
			c, err := newFailoverClient(m.client)
			if err != nil {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := c.Status(cctx, m.client)
			cancel()
			c.Close()
			if err != nil {
				leaders[0] = true
				continue
			}
			ids[st.Header.MemberId] = i
			leaders[st.Leader] = true
		}
		if len(leaders) == 1 {
			for l := range leaders {
				if i, ok := ids[l]; ok {
					return i, nil
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return -1, fmt.Errorf("the members agree on no leader")
}

// RunFailover runs one failover measurement.
func RunFailover(ctx context.Context, s FailoverSpec) (*FailoverResult, error) {
	ms, err := startFailoverGroup(s)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, m := range ms {
			select {
			case <-m.done:
			default:
				m.kill()
			}
		}
	}()
	var eps []string
	for _, m := range ms {
		eps = append(eps, m.client)
	}
	cli, err := newFailoverClient(eps...)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	res := &FailoverResult{Kind: s.Kind}
	var acked sync.Map
	var n atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < s.Writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("failover/w%02d/%08d", w, i)
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := cli.Put(cctx, key, "v")
				cancel()
				if err == nil {
					acked.Store(key, true)
					n.Add(1)
				}
			}
		}(w)
	}
	for k := 0; k < s.Kills && ctx.Err() == nil; k++ {
		time.Sleep(s.Settle)
		l, err := leaderIndex(ctx, ms, -1)
		if err != nil {
			close(stop)
			wg.Wait()
			return nil, err
		}
		ms[l].kill()
		start := time.Now()
		for i := 0; time.Since(start) < 30*time.Second; i++ {
			key := fmt.Sprintf("failover/probe%03d/%d", k, i)
			cctx, cancel := context.WithTimeout(ctx, s.ProbeTimeout)
			_, err := cli.Put(cctx, key, "v")
			cancel()
			if err == nil {
				acked.Store(key, true)
				n.Add(1)
				break
			}
		}
		res.Resumed = append(res.Resumed, time.Since(start))
		if s.Log != nil {
			fmt.Fprintf(s.Log, "failover %s: kill %d of m%d: writes resumed after %v\n", s.Kind, k+1, l, time.Since(start).Round(time.Millisecond))
		}
		time.Sleep(s.Downtime)
		if err := ms[l].start(); err != nil {
			close(stop)
			wg.Wait()
			return nil, fmt.Errorf("restarting %s: %w", ms[l].name, err)
		}
	}
	time.Sleep(s.Settle)
	close(stop)
	wg.Wait()
	res.Acknowledged = n.Load()
	// Every acknowledged write, read back linearizably from every member.
	for _, m := range ms {
		c, err := newFailoverClient(m.client)
		if err != nil {
			return nil, err
		}
		have := map[string]bool{}
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		r, err := c.Get(cctx, "failover/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		cancel()
		c.Close()
		if err != nil {
			return nil, fmt.Errorf("reading back from %s: %w", m.name, err)
		}
		for _, kv := range r.Kvs {
			have[string(kv.Key)] = true
		}
		acked.Range(func(k, _ any) bool {
			if !have[k.(string)] {
				res.Lost++
			}
			return true
		})
	}
	res.HashAgreed, res.HashRev = hashAgree(ctx, ms)
	ds := append([]time.Duration(nil), res.Resumed...)
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	if len(ds) > 0 {
		res.MedianMs = float64(ds[len(ds)/2]) / 1e6
		if len(ds)%2 == 0 {
			res.MedianMs = float64(ds[len(ds)/2-1]+ds[len(ds)/2]) / 2e6
		}
		res.MaxMs = float64(ds[len(ds)-1]) / 1e6
	}
	return res, nil
}

// hashAgree waits (up to 60 s) until every member answers HashKV at one revision with one hash.
func hashAgree(ctx context.Context, ms []*member) (bool, int64) {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		c, err := newFailoverClient(ms[0].client)
		if err != nil {
			return false, 0
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := c.Get(cctx, "failover/", clientv3.WithCountOnly(), clientv3.WithPrefix())
		cancel()
		c.Close()
		if err == nil {
			rev := r.Header.Revision
			hashes := map[uint32]bool{}
			ok := true
			for _, m := range ms {
				c, err := newFailoverClient(m.client)
				if err != nil {
					ok = false
					break
				}
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				h, err := c.HashKV(cctx, m.client, rev)
				cancel()
				c.Close()
				if err != nil {
					ok = false
					break
				}
				hashes[h.Hash] = true
			}
			if ok && len(hashes) == 1 {
				return true, rev
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return false, 0
}
