package cluster

import (
	"context"
	"crypto/tls"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// ShardClient is an etcd client to one store shard of the cluster (its endpoints, with the
// cluster's store client certificate when they are https).
func ShardClient(st *State, sh StoreShard) (*clientv3.Client, error) {
	eps := strings.Split(sh.URL, ",")
	var tlsCfg *tls.Config
	if strings.HasPrefix(eps[0], "https://") {
		var err error
		if tlsCfg, err = PKIIn(st.Dir).StoreClientTLS(); err != nil {
			return nil, err
		}
	}
	return clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), TLS: tlsCfg})
}

// KeyCount is how many keys a resource has in the store and their size (keys + values).
type KeyCount struct {
	Resource string `json:"resource"`
	Keys     int64  `json:"keys"`
	Bytes    int64  `json:"bytes"`
}

// registryPrefix is where kube-apiserver keeps every object (its --etcd-prefix default).
const registryPrefix = "/registry/"

// StoreKeys ranges over /registry/ on every store of the cluster (pages of 1000, values
// included: their size is the point) and counts keys and bytes by resource, largest first.
func StoreKeys(ctx context.Context, st *State) ([]KeyCount, error) {
	if len(st.Shards) == 0 {
		return nil, errNoStore
	}
	by := map[string]*KeyCount{}
	for _, sh := range st.Shards {
		cli, err := ShardClient(st, sh)
		if err != nil {
			return nil, err
		}
		err = countKeys(ctx, cli, by)
		cli.Close()
		if err != nil {
			return nil, err
		}
	}
	out := make([]KeyCount, 0, len(by))
	for _, k := range by {
		out = append(out, *k)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Keys != out[j].Keys {
			return out[i].Keys > out[j].Keys
		}
		return out[i].Resource < out[j].Resource
	})
	return out, nil
}

func countKeys(ctx context.Context, cli *clientv3.Client, by map[string]*KeyCount) error {
	end := clientv3.GetPrefixRangeEnd(registryPrefix)
	key := registryPrefix
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(1000)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev)) // one consistent view over the pages
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		resp, err := cli.Get(cctx, key, opts...)
		cancel()
		if err != nil {
			return err
		}
		rev = resp.Header.Revision
		for _, kv := range resp.Kvs {
			res := KeyResource(string(kv.Key))
			k := by[res]
			if k == nil {
				k = &KeyCount{Resource: res}
				by[res] = k
			}
			k.Keys++
			k.Bytes += int64(len(kv.Key) + len(kv.Value))
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// KeyResource is the resource of a kube-apiserver key: /registry/pods/ns/name → pods,
// /registry/apiregistration.k8s.io/apiservices/name → apiservices.apiregistration.k8s.io
// (kube-apiserver puts a group's name first for some groups).
func KeyResource(key string) string {
	p := strings.Split(strings.TrimPrefix(key, registryPrefix), "/")
	switch {
	case len(p) > 1 && strings.Contains(p[0], "."):
		return p[1] + "." + p[0]
	case p[0] == "minions": // kube-apiserver keeps Nodes under their old name
		return "nodes"
	}
	return p[0]
}
