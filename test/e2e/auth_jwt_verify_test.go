package e2e

// etcd's JWT with the public key only (--auth-token jwt,pub-key=F,sign-method=M, no priv-key): the
// member verifies tokens another member (here: itself before a restart) signed, and cannot issue
// any — Authenticate is refused with etcd's unmapped verify-only error.

import (
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

func TestAuthJWTVerifyOnly(t *testing.T) {
	priv, pub := writeRSAKeys(t, t.TempDir())
	full := serverOpts{AuthToken: fmt.Sprintf("jwt,pub-key=%s,priv-key=%s,sign-method=RS256,ttl=10m", pub, priv)}
	verify := serverOpts{AuthToken: fmt.Sprintf("jwt,pub-key=%s,sign-method=RS256,ttl=10m", pub)}
	tr := transcripts{}
	forEachDedicated(t, full, func(t *testing.T, tg *target) {
		s := newAuthSide(t, tg, tr)
		root, alice := s.enableWithUsers()
		s.put(root, "root put /a/1", &pb.PutRequest{Key: b("/a/1"), Value: b("v")})
		// The same data directory with the public key only.
		restart(t, tg, verify)
		s = newAuthSide(t, tg, tr)
		s.restarted = true
		s.get(alice, "alice's signed token, verified with the public key", "/a/1", "")
		s.put(alice, "alice put /a/1 (read only)", &pb.PutRequest{Key: b("/a/1"), Value: b("v")})
		s.get(alice+"x", "a tampered token", "/a/1", "")
		s.status(root)
		s.login("alice", "alicepw")
		s.login("alice", "wrong")
		_, err := s.auth.RoleAdd(s.as(root), &pb.AuthRoleAddRequest{Name: "extra"})
		s.rec("root adds a role", err)
		s.get(alice, "alice's token after the change", "/a/1", "")
	})
	tr.compare(t)
}

// TestAuthJWTPrivateKeyOnly: --auth-token jwt with priv-key alone. etcd derives the public key from
// the private one; so does the store: tokens it signs verify, tampered ones do not, and after a
// restart with the public key alone the old tokens still verify (the derived key was the right one).
func TestAuthJWTPrivateKeyOnly(t *testing.T) {
	priv, pub := writeRSAKeys(t, t.TempDir())
	signOnly := serverOpts{AuthToken: fmt.Sprintf("jwt,priv-key=%s,sign-method=RS256,ttl=10m", priv)}
	verify := serverOpts{AuthToken: fmt.Sprintf("jwt,pub-key=%s,sign-method=RS256,ttl=10m", pub)}
	tr := transcripts{}
	forEachDedicated(t, signOnly, func(t *testing.T, tg *target) {
		s := newAuthSide(t, tg, tr)
		root, alice := s.enableWithUsers()
		s.put(root, "root put /a/1", &pb.PutRequest{Key: b("/a/1"), Value: b("v")})
		s.get(alice, "alice's token, verified with the derived key", "/a/1", "")
		s.get(alice+"x", "a tampered token", "/a/1", "")
		restart(t, tg, verify)
		s = newAuthSide(t, tg, tr)
		s.restarted = true
		s.get(alice, "alice's token, verified with the public key file", "/a/1", "")
	})
	tr.compare(t)
}
