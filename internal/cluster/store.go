package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/meganode/meganode/internal/doctor"
	"github.com/meganode/meganode/internal/storeproc"
)

// Store kinds.
const (
	StoreMeganode = "meganode"
	StoreEtcd     = "etcd"
)

// shardResources is the order in which resources get a store of their own as --store-shards
// grows: the heaviest writers first (design §5: leases, events, pods).
var shardResources = []string{"", "leases", "events", "pods"}

// MaxStoreShards is one default store plus one each for leases, events and pods.
var MaxStoreShards = len(shardResources)

// storeComponents describes the store processes for shards stores.
// KWOKLeaseDurability makes node leases durable in `up` clusters. The store's
// default keeps /registry/leases/ in memory: after a store restart the leases
// are gone and the store answers watches of that prefix as compacted, so
// kube-apiserver relists. Real kubelets then recreate their lease (the lease
// controller falls back to Get/Create when an update fails); KWOK does not: its
// lease informer watches with resourceVersion=0, never sees the deletions, and
// keeps updating leases that no longer exist. --store-arg can override this
// (later flags win).
const KWOKLeaseDurability = "--durability-prefix=/registry/leases/=buffered"

func storeComponents(st *State, o *UpOptions, pki *PKI) ([]Component, error) {
	scheme, tlsArgs := "http", []string(nil)
	if o.StoreTLS {
		scheme = "https"
		tlsArgs = []string{"--cert-file", pki.StoreCert, "--key-file", pki.StoreKey, "--trusted-ca-file", pki.CACert, "--client-cert-auth"}
	}
	replicas := max(o.StoreReplicas, 1)
	var comps []Component
	for i := 0; i < o.StoreShards; i++ {
		res := shardResources[i]
		shard := "store"
		if res != "" {
			shard = "store-" + res
		}
		// A replicated store is a group of members (etcd's cluster flags), each with a
		// client and a peer port; kube-apiserver is given every member's URL.
		names, urls, peers := make([]string, replicas), make([]string, replicas), make([]string, replicas)
		var initial []string
		for r := range names {
			names[r] = shard
			if replicas > 1 {
				names[r] = fmt.Sprintf("%s-%d", shard, r)
			}
			cport, err := storeproc.FreePort()
			if err != nil {
				return nil, err
			}
			pport, err := storeproc.FreePort()
			if err != nil {
				return nil, err
			}
			urls[r] = fmt.Sprintf("%s://127.0.0.1:%d", scheme, cport)
			peers[r] = fmt.Sprintf("http://127.0.0.1:%d", pport)
			initial = append(initial, names[r]+"="+peers[r])
		}
		root := o.DataDir
		if root == "" {
			root = filepath.Join(st.Dir, "data")
		}
		for r, name := range names {
			url := urls[r]
			data := filepath.Join(root, name)
			if err := os.MkdirAll(data, 0o700); err != nil {
				return nil, err
			}
			var group []string
			if replicas > 1 {
				group = []string{"--initial-cluster", strings.Join(initial, ","), "--listen-peer-urls", peers[r], "--initial-cluster-token", shard}
			}
			c := Component{Name: name, Kind: o.Store, URL: url, DataDir: data, Log: filepath.Join(st.Dir, "logs", name+".log")}
			switch o.Store {
			case StoreMeganode:
				mport, err := storeproc.FreePort()
				if err != nil {
					return nil, err
				}
				c.Kind = BinStore
				c.MetricsURL = fmt.Sprintf("http://127.0.0.1:%d", mport)
				c.Args = []string{filepath.Join(o.BinDir, BinStore),
					"--name", name, "--data-dir", data,
					"--listen-client-urls", url, "--advertise-client-urls", url,
					"--listen-metrics-urls", c.MetricsURL}
				// A group's members keep node leases through each other (--durability
				// replicated); a single store keeps them on disk (KWOKLeaseDurability).
				if replicas == 1 {
					c.Args = append(c.Args, KWOKLeaseDurability)
				}
				c.Args = append(append(append(c.Args, group...), tlsArgs...), o.StoreArgs...)
			case StoreEtcd:
				c.MetricsURL = url // etcd serves /metrics on its client URL
				c.Args = append(append([]string{}, o.EtcdCmd...), "--data-dir", data, "--listen-client-urls", url)
				if replicas > 1 {
					c.Args = append(c.Args, "--name", name)
				}
				c.Args = append(append(append(c.Args, group...), tlsArgs...), o.StoreArgs...)
			default:
				return nil, fmt.Errorf("--store: want meganode or etcd, got %q", o.Store)
			}
			comps = append(comps, c)
		}
		sh := StoreShard{Component: names[0], Resource: res, URL: strings.Join(urls, ",")}
		if res != "" {
			sh.Override = doctor.StoreOverride(res, strings.Join(urls, ";"))
		}
		st.Shards = append(st.Shards, sh)
	}
	return comps, nil
}

// waitStore waits until the store answers a Status call (over TLS with tlsCfg).
func waitStore(ctx context.Context, c *Component, tlsCfg *tls.Config) error {
	deadline := time.Now().Add(60 * time.Second)
	addr := strings.TrimPrefix(strings.TrimPrefix(c.URL, "http://"), "https://")
	for {
		if !c.Alive() {
			return fmt.Errorf("%s exited; see %s:\n%s", c.Name, c.Log, tail(c.Log, 15))
		}
		// Until its port takes connections, a client would wait out its dial timeout: poll the
		// port first (a restart or a cut-over waits on this).
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("%s not listening at %s: %v; see %s", c.Name, c.URL, err, c.Log)
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		conn.Close()
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.URL}, DialTimeout: time.Second, Logger: zap.NewNop(), TLS: tlsCfg})
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			_, err = cli.Status(cctx, c.URL)
			cancel()
			cli.Close()
			if err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s not serving at %s: %v; see %s", c.Name, c.URL, err, c.Log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
