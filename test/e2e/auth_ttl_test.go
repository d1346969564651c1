package e2e

// etcd's --auth-token-ttl end to end: a simple token lives for the TTL after it was issued or
// last used, then every request with it is refused; a new Authenticate gives a working one.

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"testing"
	"time"
)

func TestAuthTokenTTL(t *testing.T) {
	tr := transcripts{}
	// etcd sweeps expired simple tokens once a second: a token lives TTL to TTL + 1 s unused.
	const ttl = 2
	forEachDedicated(t, serverOpts{AuthTokenTTL: ttl}, func(t *testing.T, tg *target) {
		s := newAuthSide(t, tg, tr)
		root, alice := s.enableWithUsers()
		s.get(alice, "alice get /a/1 at once", "/a/1", "")
		// Each use starts the TTL again: 3 uses 1.2 s apart outlive the TTL from the login.
		for i := 0; i < 3; i++ {
			time.Sleep(1200 * time.Millisecond)
			s.get(alice, "alice get /a/1 1.2 s after her last use", "/a/1", "")
		}
		time.Sleep(4 * time.Second)
		s.get(alice, "alice get /a/1 4 s after her last use", "/a/1", "")
		s.status(root)
		s.put(root, "root put, about 8 s after his login (never used)", &pb.PutRequest{Key: b("/a/1"), Value: b("v")})
		root = s.login("root", "rootpw")
		s.put(root, "root put with a new token", &pb.PutRequest{Key: b("/a/1"), Value: b("v")})
	})
	tr.compare(t)
}
