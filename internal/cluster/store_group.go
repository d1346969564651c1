package cluster

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// StoreMembers are the store components of a cluster whose store is one
// replicated group (meganode-store members or etcd members), in start order.
func (st *State) StoreMembers() []*Component {
	var out []*Component
	for i := range st.Components {
		if c := &st.Components[i]; c.Kind == BinStore || c.Kind == StoreEtcd {
			out = append(out, c)
		}
	}
	return out
}

// MemberStatus asks the member at url alone for its Status, within timeout.
func MemberStatus(ctx context.Context, url string, timeout time.Duration) (*clientv3.StatusResponse, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: timeout, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	c, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return cli.Status(c, url)
}

// SameStoreHash: every store member answers HashKV at one revision (the first
// member's current one) with one hash; else the first that differs or fails.
func (st *State) SameStoreHash(ctx context.Context) error {
	ms := st.StoreMembers()
	s, err := MemberStatus(ctx, ms[0].URL, 2*time.Second)
	if err != nil {
		return err
	}
	rev := s.Header.Revision
	var want uint32
	for i, m := range ms {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.URL}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		h, err := cli.HashKV(c, m.URL, rev)
		cancel()
		cli.Close()
		if err != nil {
			return fmt.Errorf("%s: %v", m.Name, err)
		}
		if i == 0 {
			want = h.Hash
		} else if h.Hash != want {
			return fmt.Errorf("%s: HashKV %d at revision %d, %s has %d", m.Name, h.Hash, rev, ms[0].Name, want)
		}
	}
	return nil
}
