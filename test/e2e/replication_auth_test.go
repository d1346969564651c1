package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestReplicatedGroupAuth: users, roles, permissions and auth on go through the
// group's log (etcd applies its auth requests on every member), so every
// member answers with the same auth state and revision; a simple token issued
// through one member is valid on the others; a user without the root role is
// refused Compact; a member restarted empty gets the auth state back from the
// group (here by a snapshot: the log behind it is cut).
func TestReplicatedGroupAuth(t *testing.T) {
	g, clis := startGroup(t, "--snapshot-count", "100")
	l := groupLeader(t, g, clis, -1)
	f := clis[(l+1)%3]
	ctx := ctxT(t)
	// Set up through a follower: each call is forwarded to the leader and applied by all.
	steps := []func() error{
		func() error { _, err := f.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := f.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := f.RoleAdd(ctx, "pods"); return err },
		func() error {
			_, err := f.RoleGrantPermission(ctx, "pods", "pods/", clientv3.GetPrefixRangeEnd("pods/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := f.UserAdd(ctx, "alice", "alicepw"); return err },
		func() error { _, err := f.UserGrantRole(ctx, "alice", "pods"); return err },
		func() error { _, err := f.AuthEnable(ctx); return err },
	}
	for i, s := range steps {
		must(t, fmt.Sprintf("auth step %d through a follower", i), s())
	}
	// Auth is on: a caller without credentials is refused as by etcd.
	if _, err := f.RoleAdd(ctx, "other"); err == nil || !strings.Contains(err.Error(), "user name is empty") {
		t.Errorf("RoleAdd without credentials: %v, want etcd's 'user name is empty'", err)
	}
	roots := make([]*clientv3.Client, 3)
	for i, m := range g.Members {
		roots[i] = authClient(t, "root", "rootpw", m.Endpoint)
	}
	waitAuthAgrees(t, roots)
	// The auth store's own answer comes back through the log, from any member.
	if _, err := roots[(l+1)%3].RoleAdd(ctx, "pods"); err == nil || !strings.Contains(err.Error(), "role name already exists") {
		t.Errorf("a second RoleAdd: %v, want etcd's 'role name already exists'", err)
	}
	// alice's token comes from member x (through the leader's log); her
	// writes in her prefix go, others are denied, on every member.
	for i, m := range g.Members {
		a := authClient(t, "alice", "alicepw", m.Endpoint)
		_, err := a.Put(ctx, fmt.Sprintf("pods/%d", i), "v")
		must(t, fmt.Sprintf("alice's put through m%d", i), err)
		if _, err := a.Put(ctx, "nodes/x", "v"); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("alice's put outside her prefix through m%d: %v, want permission denied", i, err)
		}
		r, err := a.Get(ctx, "pods/", clientv3.WithPrefix(), clientv3.WithSerializable())
		must(t, fmt.Sprintf("alice's serializable get on m%d", i), err)
		if r.Count < 1 {
			t.Errorf("alice reads %d pods on m%d", r.Count, i)
		}
		if _, err := a.Compact(ctx, r.Header.Revision); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("alice's Compact through m%d: %v, want permission denied (etcd needs root)", i, err)
		}
	}
	// A member restarted empty, after the log behind it was cut: it takes a
	// snapshot, which carries the auth state.
	x := (l + 2) % 3
	must(t, "kill", g.Members[x].Kill())
	time.Sleep(1500 * time.Millisecond)
	_, err := roots[l].UserAdd(ctx, "bob", "bobpw")
	must(t, "a user added while the member is down", err)
	for i := 0; i < 300; i++ {
		_, err := roots[l].Put(ctx, fmt.Sprintf("pods/n%03d", i), "v")
		must(t, "put", err)
	}
	must(t, "restart", g.Members[x].Restart())
	waitTookSnapshot(t, g.Members[x], "the restarted member")
	roots[x] = authClient(t, "root", "rootpw", g.Members[x].Endpoint)
	waitAuthAgrees(t, roots)
	bob := authClient(t, "bob", "bobpw", g.Members[x].Endpoint)
	if _, err := bob.Put(ctx, "pods/bob", "v"); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("bob (no role) through the restarted member: %v, want permission denied", err)
	}
}

// authClient is a client of endpoints as user (its token from Authenticate).
func authClient(t *testing.T, user, password string, endpoints ...string) *clientv3.Client {
	t.Helper()
	var c *clientv3.Client
	var err error
	// A token is valid on a member once it applied the entry that issued it;
	// a member that restarted a moment ago may not know a user yet.
	for wait := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		c, err = clientv3.New(clientv3.Config{Endpoints: endpoints, Username: user, Password: password, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err == nil || time.Now().After(wait) {
			break
		}
	}
	must(t, "client as "+user, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// waitAuthAgrees waits until every member reports auth on, the same auth
// revision and the same users.
func waitAuthAgrees(t *testing.T, clis []*clientv3.Client) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var seen []string
		for _, c := range clis {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			st, err := c.AuthStatus(ctx)
			users, err2 := c.UserList(ctx)
			cancel()
			if err != nil || err2 != nil {
				seen = append(seen, fmt.Sprintf("error %v %v", err, err2))
				continue
			}
			seen = append(seen, fmt.Sprintf("enabled=%v rev=%d users=%v", st.Enabled, st.AuthRevision, users.Users))
		}
		same := len(seen) == len(clis) && strings.HasPrefix(seen[0], "enabled=true")
		for _, s := range seen {
			same = same && s == seen[0]
		}
		if same {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("members' auth states differ: %q", seen)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
