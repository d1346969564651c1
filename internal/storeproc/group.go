package storeproc

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Group is a replicated store group of real processes on loopback: member i is
// named m<i>, keeps its client and peer ports and its data directory across
// restarts, and is started with etcd's cluster flags naming every member.
type Group struct {
	Members []*Proc
	// InitialCluster is the --initial-cluster the members were started with
	// (m0=http://127.0.0.1:P0,...).
	InitialCluster string
}

// StartGroup starts n members with extraArgs each (e.g. --heartbeat-interval)
// and waits until every one is ready to serve.
func StartGroup(n int, extraArgs []string, stderr io.Writer) (*Group, error) {
	return StartGroupWith(GroupOptions{Members: n, ExtraArgs: extraArgs, Stderr: stderr})
}

// GroupOptions describe a group for StartGroupWith; zero values as Options'.
type GroupOptions struct {
	Members   int
	Bin       string   // as Options.Bin
	ExtraArgs []string // every member's, after the cluster flags
	Stderr    io.Writer
	Scheme    string // client URLs' scheme: "http" (default) or "https"
	// PeerScheme is the peer URLs' scheme: "http" (default) or "https" (peer
	// TLS: ExtraArgs then carry --peer-cert-file and the like, or --peer-auto-tls).
	PeerScheme string
	// DataRoot, when set, holds member i's data directory DataRoot/m<i>; else each
	// member gets a temporary directory.
	DataRoot     string
	ReadyTimeout time.Duration // each member's, as Options.ReadyTimeout
	Token        string        // --initial-cluster-token; "" keeps the store's default
}

// StartGroupWith starts o.Members members at once and waits until every one is
// ready to serve; if one failed, the others are stopped once every start has
// returned, and its error (with its log's tail) is returned.
func StartGroupWith(o GroupOptions) (*Group, error) {
	n := o.Members
	peers := make([]string, n)
	clients := make([]int, n)
	peerScheme := o.PeerScheme
	if peerScheme == "" {
		peerScheme = "http"
	}
	for i := range peers {
		pp, err := FreePort()
		if err != nil {
			return nil, err
		}
		cp, err := FreePort()
		if err != nil {
			return nil, err
		}
		peers[i] = fmt.Sprintf("m%d=%s://127.0.0.1:%d", i, peerScheme, pp)
		clients[i] = cp
	}
	g := &Group{Members: make([]*Proc, n), InitialCluster: strings.Join(peers, ",")}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range g.Members {
		peerURL := strings.SplitN(peers[i], "=", 2)[1]
		args := []string{"--initial-cluster", strings.Join(peers, ","), "--listen-peer-urls", peerURL}
		if o.Token != "" {
			args = append(args, "--initial-cluster-token", o.Token)
		}
		args = append(args, o.ExtraArgs...)
		opts := Options{Bin: o.Bin, Name: fmt.Sprintf("m%d", i), ClientPort: clients[i], ExtraArgs: args, Stderr: o.Stderr,
			Scheme: o.Scheme, ReadyTimeout: o.ReadyTimeout}
		if o.DataRoot != "" {
			opts.DataDir = filepath.Join(o.DataRoot, opts.Name)
			if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
				return nil, err
			}
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			g.Members[i], errs[i] = Start(opts)
		}(i)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			g.Stop()
			return nil, fmt.Errorf("member m%d: %w", i, err)
		}
	}
	return g, nil
}

// Join starts a member named name at peerURL that joins the running group
// (etcd's --initial-cluster-state existing) after a MemberAdd of peerURL; it is
// not one of g.Members.
func (g *Group) Join(name, peerURL string, extraArgs []string, stderr io.Writer) (*Proc, error) {
	args := append([]string{
		"--initial-cluster", g.InitialCluster + "," + name + "=" + peerURL,
		"--initial-cluster-state", "existing",
		"--listen-peer-urls", peerURL,
	}, extraArgs...)
	return Start(Options{Name: name, ExtraArgs: args, Stderr: stderr})
}

// Endpoints of every member, for a client given them all.
func (g *Group) Endpoints() []string {
	out := make([]string, len(g.Members))
	for i, m := range g.Members {
		out[i] = m.Endpoint
	}
	return out
}

// Stop stops every member still running.
func (g *Group) Stop() {
	for _, m := range g.Members {
		if m != nil && m.Cmd != nil {
			_ = m.Stop()
		}
	}
}
