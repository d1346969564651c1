package e2e

// etcd's Auth on both servers: user and role CRUD, the root rules, enable/disable, Authenticate,
// and the permission checks of Range, Put, DeleteRange, Txn, Watch, Lease and Maintenance with a
// user's token, no token and a bad token. Each side runs the same steps on a dedicated server; the
// transcripts of answers (codes, messages, the fields that matter) are compared line by line.

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/grpc/metadata"

	"github.com/meganode/meganode/internal/etcdref"
	"github.com/meganode/meganode/internal/testcerts"
)

// authSide drives one server with raw gRPC clients; calls carry whatever token is set.
type authSide struct {
	t    *testing.T
	tg   *target
	tr   transcripts
	auth pb.AuthClient
	// restarted: the store resumes past a reserved revision block (docs/design.md §5), so header
	// revisions are logged, not compared.
	restarted bool
}

func newAuthSide(t *testing.T, tg *target, tr transcripts) *authSide {
	return &authSide{t: t, tg: tg, tr: tr, auth: pb.NewAuthClient(tg.Cli.ActiveConnection())}
}

// as is a context carrying token (none when empty).
func (s *authSide) as(token string) context.Context {
	ctx := ctxT(s.t)
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "token", token)
	}
	return ctx
}

func (s *authSide) rec(what string, err error) {
	s.t.Helper()
	s.tr.add(s.tg, what, err)
}

func (s *authSide) note(format string, args ...any) {
	s.tr.note(s.tg, fmt.Sprintf(format, args...))
}

func (s *authSide) login(user, pw string) string {
	s.t.Helper()
	r, err := s.auth.Authenticate(ctxT(s.t), &pb.AuthenticateRequest{Name: user, Password: pw})
	s.rec("authenticate "+user, err)
	if err != nil {
		return ""
	}
	if r.Token == "" || r.Header == nil || r.Header.Revision == 0 {
		s.t.Errorf("authenticate %s: token %q header %v", user, r.Token, r.Header)
	}
	return r.Token
}

func (s *authSide) status(token string) {
	s.t.Helper()
	r, err := s.auth.AuthStatus(s.as(token), &pb.AuthStatusRequest{})
	s.rec("auth status", err)
	if err == nil && s.restarted {
		s.note("  enabled %v auth revision %d", r.Enabled, r.AuthRevision)
		s.t.Logf("auth status header revision %d", r.Header.Revision)
	} else if err == nil {
		s.note("  enabled %v auth revision %d header revision %d", r.Enabled, r.AuthRevision, r.Header.Revision)
	}
}

func (s *authSide) get(token, what, key, end string) {
	s.t.Helper()
	r, err := s.tg.KV.Range(s.as(token), &pb.RangeRequest{Key: b(key), RangeEnd: b(end)})
	s.rec(what, err)
	if err == nil {
		s.note("  %d keys", r.Count)
	}
}

func (s *authSide) put(token, what string, r *pb.PutRequest) {
	s.t.Helper()
	_, err := s.tg.KV.Put(s.as(token), r)
	s.rec(what, err)
}

func (s *authSide) del(token, what string, r *pb.DeleteRangeRequest) {
	s.t.Helper()
	_, err := s.tg.KV.DeleteRange(s.as(token), r)
	s.rec(what, err)
}

func (s *authSide) txn(token, what string, r *pb.TxnRequest) {
	s.t.Helper()
	resp, err := s.tg.KV.Txn(s.as(token), r)
	s.rec(what, err)
	if err == nil {
		s.note("  succeeded %v, %d responses", resp.Succeeded, len(resp.Responses))
	}
}

// watch opens a stream with token, asks for one watch and records the first answer.
func (s *authSide) watch(token, what, key, end string) {
	s.t.Helper()
	ctx, cancel := context.WithCancel(s.as(token))
	defer cancel()
	w, err := s.tg.Watch.Watch(ctx)
	must(s.t, "watch stream", err)
	must(s.t, "watch create", w.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: b(key), RangeEnd: b(end)}}}))
	r, err := w.Recv()
	s.rec(what, err)
	if err == nil {
		s.note("  created %v canceled %v id %d reason %q", r.Created, r.Canceled, r.WatchId, r.CancelReason)
	}
}

func perm(t authpb.Permission_Type, key, end string) *authpb.Permission {
	return &authpb.Permission{PermType: t, Key: b(key), RangeEnd: b(end)}
}

func cmpVersion(key string) *pb.Compare {
	return &pb.Compare{Key: b(key), Target: pb.Compare_VERSION, Result: pb.Compare_GREATER, TargetUnion: &pb.Compare_Version{Version: 0}}
}

func opPut(k, v string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: b(k), Value: b(v)}}}
}

func opGet(k string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: b(k)}}}
}

func opDel(k string, prev bool) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: b(k), PrevKv: prev}}}
}

// setupUsers creates root (with the root role), alice (roles ro, rw), svc (no password) and the
// roles' permissions; the transcript gets each answer.
func (s *authSide) setupUsers() {
	ctx := ctxT(s.t)
	a := s.auth
	_, err := a.UserAdd(ctx, &pb.AuthUserAddRequest{Name: "root", Password: "rootpw"})
	s.rec("user add root", err)
	_, err = a.UserGrantRole(ctx, &pb.AuthUserGrantRoleRequest{User: "root", Role: "root"})
	s.rec("grant root to root (no such role needed)", err)
	_, err = a.RoleAdd(ctx, &pb.AuthRoleAddRequest{Name: "ro"})
	s.rec("role add ro", err)
	_, err = a.RoleAdd(ctx, &pb.AuthRoleAddRequest{Name: "rw"})
	s.rec("role add rw", err)
	for _, g := range []struct {
		role string
		p    *authpb.Permission
	}{
		{"ro", perm(authpb.READ, "/a/", "/a0")},
		{"ro", perm(authpb.READ, "/z", "\x00")},
		{"rw", perm(authpb.READWRITE, "/b/x", "")},
		{"rw", perm(authpb.WRITE, "/w/", "/w0")},
	} {
		_, err = a.RoleGrantPermission(ctx, &pb.AuthRoleGrantPermissionRequest{Name: g.role, Perm: g.p})
		s.rec(fmt.Sprintf("grant %v [%q, %q) to %s", g.p.PermType, g.p.Key, g.p.RangeEnd, g.role), err)
	}
	_, err = a.UserAdd(ctx, &pb.AuthUserAddRequest{Name: "alice", Password: "alicepw"})
	s.rec("user add alice", err)
	for _, r := range []string{"rw", "ro"} {
		_, err = a.UserGrantRole(ctx, &pb.AuthUserGrantRoleRequest{User: "alice", Role: r})
		s.rec("grant "+r+" to alice", err)
	}
	_, err = a.UserAdd(ctx, &pb.AuthUserAddRequest{Name: "svc", Options: &authpb.UserAddOptions{NoPassword: true}})
	s.rec("user add svc (no password)", err)
}

// enableWithUsers sets the users up (setupUsers), enables auth and returns root's and alice's tokens.
func (s *authSide) enableWithUsers() (root, alice string) {
	s.t.Helper()
	s.setupUsers()
	_, err := s.auth.AuthEnable(ctxT(s.t), &pb.AuthEnableRequest{})
	s.rec("enable", err)
	return s.login("root", "rootpw"), s.login("alice", "alicepw")
}

func TestAuth(t *testing.T) {
	tr := transcripts{}
	forEachDedicated(t, serverOpts{}, func(t *testing.T, tg *target) {
		s := newAuthSide(t, tg, tr)
		a := s.auth
		ctx := ctxT(t)
		s.status("")
		_, err := a.AuthEnable(ctx, &pb.AuthEnableRequest{})
		s.rec("enable without root", err)
		_, err = a.UserAdd(ctx, &pb.AuthUserAddRequest{Name: "root", Password: "x"})
		s.rec("user add root", err)
		_, err = a.AuthEnable(ctx, &pb.AuthEnableRequest{})
		s.rec("enable with root lacking the root role", err)
		_, err = a.UserDelete(ctx, &pb.AuthUserDeleteRequest{Name: "root"})
		s.rec("user delete root (auth off)", err)
		_, err = a.UserAdd(ctx, &pb.AuthUserAddRequest{Name: "", Password: "x"})
		s.rec("user add empty name", err)
		s.setupUsers()
		_, err = a.UserAdd(ctx, &pb.AuthUserAddRequest{Name: "alice", Password: "x"})
		s.rec("user add alice again", err)
		_, err = a.RoleAdd(ctx, &pb.AuthRoleAddRequest{Name: ""})
		s.rec("role add empty", err)
		_, err = a.RoleAdd(ctx, &pb.AuthRoleAddRequest{Name: "ro"})
		s.rec("role add ro again", err)
		_, err = a.UserGrantRole(ctx, &pb.AuthUserGrantRoleRequest{User: "alice", Role: "nope"})
		s.rec("grant missing role", err)
		_, err = a.UserGrantRole(ctx, &pb.AuthUserGrantRoleRequest{User: "nobody", Role: "ro"})
		s.rec("grant to missing user", err)
		_, err = a.RoleGrantPermission(ctx, &pb.AuthRoleGrantPermissionRequest{Name: "ro"})
		s.rec("grant no permission", err)
		_, err = a.RoleGrantPermission(ctx, &pb.AuthRoleGrantPermissionRequest{Name: "ro", Perm: perm(authpb.READ, "b", "a")})
		s.rec("grant inverted range", err)
		_, err = a.RoleGrantPermission(ctx, &pb.AuthRoleGrantPermissionRequest{Name: "nope", Perm: perm(authpb.READ, "a", "")})
		s.rec("grant to missing role", err)
		ug, err := a.UserGet(ctx, &pb.AuthUserGetRequest{Name: "alice"})
		s.rec("user get alice", err)
		if err == nil {
			s.note("  roles %v header revision %d", ug.Roles, ug.Header.Revision)
		}
		ul, err := a.UserList(ctx, &pb.AuthUserListRequest{})
		s.rec("user list", err)
		if err == nil {
			s.note("  users %v", ul.Users)
		}
		rl, err := a.RoleList(ctx, &pb.AuthRoleListRequest{})
		s.rec("role list", err)
		if err == nil {
			s.note("  roles %v", rl.Roles)
		}
		rg, err := a.RoleGet(ctx, &pb.AuthRoleGetRequest{Role: "ro"})
		s.rec("role get ro", err)
		if err == nil {
			s.note("  perms %v", rg.Perm)
		}
		_, err = a.RoleGet(ctx, &pb.AuthRoleGetRequest{Role: "root"})
		s.rec("role get root (never added)", err)
		s.status("")

		_, err = a.AuthEnable(ctx, &pb.AuthEnableRequest{})
		s.rec("enable", err)
		s.status("")
		s.login("root", "bad")
		s.login("nobody", "x")
		s.login("svc", "")
		root := s.login("root", "rootpw")
		alice := s.login("alice", "alicepw")
		s.status(root)
		s.status(alice)
		_, err = a.AuthEnable(s.as(root), &pb.AuthEnableRequest{})
		s.rec("enable again", err)

		// Root's data first, as root.
		s.put(root, "root put /a/1", &pb.PutRequest{Key: b("/a/1"), Value: b("v")})
		s.put(root, "root put /c", &pb.PutRequest{Key: b("/c"), Value: b("v")})
		s.put("", "put without token", &pb.PutRequest{Key: b("/a/1"), Value: b("v")})
		s.put("bad.1", "put with a bad token", &pb.PutRequest{Key: b("/a/1"), Value: b("v")})
		s.get("", "get without token", "/a/1", "")
		s.get("bad.1", "get with a bad token", "/a/1", "")
		s.get(alice, "alice get /a/1", "/a/1", "")
		s.get(alice, "alice get prefix /a/", "/a/", "/a0")
		s.get(alice, "alice get /a/ to /a1 (past her range)", "/a/", "/a1")
		s.get(alice, "alice get /c", "/c", "")
		s.get(alice, "alice get from /z", "/z", "\x00")
		s.get(alice, "alice get from /y", "/y", "\x00")
		s.get(alice, "alice get /b/x (readwrite)", "/b/x", "")
		s.put(alice, "alice put /a/1 (read only)", &pb.PutRequest{Key: b("/a/1"), Value: b("v")})
		s.put(alice, "alice put /b/x", &pb.PutRequest{Key: b("/b/x"), Value: b("v")})
		s.put(alice, "alice put /b/x prev_kv", &pb.PutRequest{Key: b("/b/x"), Value: b("v2"), PrevKv: true})
		s.put(alice, "alice put /w/1 (write only)", &pb.PutRequest{Key: b("/w/1"), Value: b("v")})
		s.put(alice, "alice put /w/1 prev_kv", &pb.PutRequest{Key: b("/w/1"), Value: b("v"), PrevKv: true})
		s.get(alice, "alice get /w/1", "/w/1", "")
		s.del(alice, "alice delete /w/ prefix prev_kv", &pb.DeleteRangeRequest{Key: b("/w/"), RangeEnd: b("/w0"), PrevKv: true})
		s.del(alice, "alice delete /w/ prefix", &pb.DeleteRangeRequest{Key: b("/w/"), RangeEnd: b("/w0")})
		s.del(alice, "alice delete /a/1", &pb.DeleteRangeRequest{Key: b("/a/1")})
		s.del("", "delete without token", &pb.DeleteRangeRequest{Key: b("/a/1")})

		s.txn(alice, "alice txn: compare /a/1, put /b/x", &pb.TxnRequest{Compare: []*pb.Compare{cmpVersion("/a/1")}, Success: []*pb.RequestOp{opPut("/b/x", "t")}})
		s.txn(alice, "alice txn: compare /c", &pb.TxnRequest{Compare: []*pb.Compare{cmpVersion("/c")}, Success: []*pb.RequestOp{opPut("/b/x", "t")}})
		s.txn(alice, "alice txn: get /c on failure", &pb.TxnRequest{Failure: []*pb.RequestOp{opGet("/c")}})
		s.txn(alice, "alice txn: get /a/1, delete /w/1", &pb.TxnRequest{Success: []*pb.RequestOp{opGet("/a/1"), opDel("/w/1", false)}})
		s.txn(alice, "alice txn: delete /w/1 prev_kv", &pb.TxnRequest{Success: []*pb.RequestOp{opDel("/w/1", true)}})
		s.txn(alice, "alice txn: nested put /a/2", &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: []*pb.RequestOp{opPut("/a/2", "x")}}}}}})
		s.txn("", "txn without token", &pb.TxnRequest{Success: []*pb.RequestOp{opGet("/a/1")}})
		s.txn(root, "root txn", &pb.TxnRequest{Success: []*pb.RequestOp{opGet("/c"), opPut("/d", "x")}})

		s.watch(alice, "alice watch /a/ prefix", "/a/", "/a0")
		s.watch(alice, "alice watch /c", "/c", "")
		s.watch(alice, "alice watch from /z", "/z", "\x00")
		s.watch("", "watch without token", "/a/", "/a0")
		s.watch("bad.1", "watch with a bad token", "/a/", "/a0")
		s.watch(root, "root watch everything", "\x00", "\x00")

		// Leases: anyone may grant; revoking needs write on every attached key.
		_, err = s.tg.Lease.LeaseGrant(s.as(""), &pb.LeaseGrantRequest{TTL: 60})
		s.rec("lease grant without token", err)
		l, err := s.tg.Lease.LeaseGrant(s.as(alice), &pb.LeaseGrantRequest{ID: 7001, TTL: 60})
		s.rec("alice lease grant", err)
		if err == nil {
			s.note("  id %d ttl %d", l.ID, l.TTL)
		}
		s.put(alice, "alice put /w/l with her lease", &pb.PutRequest{Key: b("/w/l"), Value: b("v"), Lease: 7001})
		_, err = s.tg.Lease.LeaseTimeToLive(s.as(alice), &pb.LeaseTimeToLiveRequest{ID: 7001, Keys: true})
		s.rec("alice time-to-live with keys (write-only key)", err)
		_, err = s.tg.Lease.LeaseTimeToLive(s.as(alice), &pb.LeaseTimeToLiveRequest{ID: 7001})
		s.rec("alice time-to-live", err)
		_, err = s.tg.Lease.LeaseRevoke(s.as(alice), &pb.LeaseRevokeRequest{ID: 7001})
		s.rec("alice revokes her lease (keys she may write)", err)
		_, err = s.tg.Lease.LeaseGrant(s.as(alice), &pb.LeaseGrantRequest{ID: 7002, TTL: 60})
		s.rec("alice lease grant", err)
		s.put(root, "root put /c with alice's lease", &pb.PutRequest{Key: b("/c"), Value: b("v"), Lease: 7002})
		s.put(alice, "alice put /b/x with a lease holding /c", &pb.PutRequest{Key: b("/b/x"), Value: b("v"), Lease: 7002})
		_, err = s.tg.Lease.LeaseRevoke(s.as(alice), &pb.LeaseRevokeRequest{ID: 7002})
		s.rec("alice revokes a lease holding /c", err)
		_, err = s.tg.Lease.LeaseRevoke(s.as(""), &pb.LeaseRevokeRequest{ID: 7002})
		s.rec("revoke without token", err)
		_, err = s.tg.Lease.LeaseLeases(s.as(alice), &pb.LeaseLeasesRequest{})
		s.rec("alice lists leases (one holds /c)", err)
		_, err = s.tg.Lease.LeaseRevoke(s.as(root), &pb.LeaseRevokeRequest{ID: 7002})
		s.rec("root revokes it", err)
		_, err = s.tg.Lease.LeaseLeases(s.as(alice), &pb.LeaseLeasesRequest{})
		s.rec("alice lists leases", err)

		// Maintenance: Status and alarm listing for any user, the rest for root.
		_, err = s.tg.Maint.Status(s.as(""), &pb.StatusRequest{})
		s.rec("status without token", err)
		_, err = s.tg.Maint.Status(s.as(alice), &pb.StatusRequest{})
		s.rec("alice status", err)
		_, err = s.tg.Maint.Defragment(s.as(alice), &pb.DefragmentRequest{})
		s.rec("alice defragment", err)
		_, err = s.tg.Maint.Defragment(s.as(root), &pb.DefragmentRequest{})
		s.rec("root defragment", err)
		_, err = s.tg.Maint.HashKV(s.as(alice), &pb.HashKVRequest{})
		s.rec("alice hashkv", err)
		_, err = s.tg.Maint.Alarm(s.as(alice), &pb.AlarmRequest{Action: pb.AlarmRequest_GET})
		s.rec("alice alarm list", err)
		_, err = s.tg.Maint.Alarm(s.as(alice), &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, Alarm: pb.AlarmType_NOSPACE})
		s.rec("alice alarm disarm", err)
		_, err = s.tg.KV.Compact(s.as("bad.1"), &pb.CompactionRequest{Revision: 1})
		s.rec("compact with a bad token", err)
		_, err = s.tg.KV.Compact(s.as(alice), &pb.CompactionRequest{Revision: 1})
		s.rec("alice compacts", err)
		_, err = s.tg.KV.Compact(s.as(""), &pb.CompactionRequest{Revision: 1})
		s.rec("compact without token", err)
		_, err = s.tg.KV.Compact(s.as(root), &pb.CompactionRequest{Revision: 1})
		s.rec("root compacts", err)

		// Who may manage auth.
		_, err = a.UserAdd(s.as(alice), &pb.AuthUserAddRequest{Name: "eve", Password: "x"})
		s.rec("alice adds a user", err)
		_, err = a.UserAdd(s.as(""), &pb.AuthUserAddRequest{Name: "eve", Password: "x"})
		s.rec("user add without token", err)
		_, err = a.UserGet(s.as(alice), &pb.AuthUserGetRequest{Name: "alice"})
		s.rec("alice gets herself", err)
		_, err = a.UserGet(s.as(alice), &pb.AuthUserGetRequest{Name: "root"})
		s.rec("alice gets root", err)
		_, err = a.RoleGet(s.as(alice), &pb.AuthRoleGetRequest{Role: "ro"})
		s.rec("alice gets her role", err)
		_, err = a.RoleList(s.as(alice), &pb.AuthRoleListRequest{})
		s.rec("alice lists roles", err)
		_, err = a.UserDelete(s.as(root), &pb.AuthUserDeleteRequest{Name: "root"})
		s.rec("delete root while enabled", err)
		_, err = a.UserRevokeRole(s.as(root), &pb.AuthUserRevokeRoleRequest{Name: "root", Role: "root"})
		s.rec("revoke root from root while enabled", err)
		_, err = a.RoleDelete(s.as(root), &pb.AuthRoleDeleteRequest{Role: "root"})
		s.rec("delete role root while enabled", err)

		// Changes take effect at once; a password change or a deletion voids the user's tokens.
		_, err = a.UserRevokeRole(s.as(root), &pb.AuthUserRevokeRoleRequest{Name: "alice", Role: "ro"})
		s.rec("revoke ro from alice", err)
		_, err = a.UserRevokeRole(s.as(root), &pb.AuthUserRevokeRoleRequest{Name: "alice", Role: "ro"})
		s.rec("revoke ro from alice again", err)
		s.get(alice, "alice get /a/1 without ro", "/a/1", "")
		_, err = a.RoleRevokePermission(s.as(root), &pb.AuthRoleRevokePermissionRequest{Role: "rw", Key: b("/b/x")})
		s.rec("revoke /b/x from rw", err)
		_, err = a.RoleRevokePermission(s.as(root), &pb.AuthRoleRevokePermissionRequest{Role: "rw", Key: b("/b/x")})
		s.rec("revoke /b/x from rw again", err)
		s.put(alice, "alice put /b/x after the revoke", &pb.PutRequest{Key: b("/b/x"), Value: b("v")})
		_, err = a.UserChangePassword(s.as(root), &pb.AuthUserChangePasswordRequest{Name: "alice", Password: "new"})
		s.rec("change alice's password", err)
		s.put(alice, "alice's old token after the change", &pb.PutRequest{Key: b("/w/2"), Value: b("v")})
		s.login("alice", "alicepw")
		alice = s.login("alice", "new")
		s.put(alice, "alice's new token", &pb.PutRequest{Key: b("/w/2"), Value: b("v")})
		_, err = a.RoleDelete(s.as(root), &pb.AuthRoleDeleteRequest{Role: "rw"})
		s.rec("delete role rw", err)
		ug, err = a.UserGet(s.as(root), &pb.AuthUserGetRequest{Name: "alice"})
		s.rec("user get alice", err)
		if err == nil {
			s.note("  roles %v", ug.Roles)
		}
		_, err = a.UserDelete(s.as(root), &pb.AuthUserDeleteRequest{Name: "alice"})
		s.rec("delete alice", err)
		s.get(alice, "alice's token after her deletion", "/a/1", "")
		_, err = a.UserDelete(s.as(root), &pb.AuthUserDeleteRequest{Name: "alice"})
		s.rec("delete alice again", err)
		s.status(root)

		_, err = a.AuthDisable(s.as(alice), &pb.AuthDisableRequest{})
		s.rec("disable with a dead token", err)
		_, err = a.AuthDisable(s.as(root), &pb.AuthDisableRequest{})
		s.rec("disable", err)
		s.status("")
		s.get("", "get without token, auth off", "/a/1", "")
		s.get(root, "get with root's old token, auth off", "/a/1", "")
		s.login("root", "rootpw")
		_, err = a.UserDelete(ctx, &pb.AuthUserDeleteRequest{Name: "root"})
		s.rec("delete root, auth off", err)
	})
	tr.compare(t)
}

// restart stops the side's server and starts it again on the same data
// directory with the options o (the ones it ran with, or new ones).
func restart(t *testing.T, tg *target, o serverOpts) {
	t.Helper()
	tg.Cli.Close()
	if tg.Proc != nil {
		must(t, "stop", tg.Proc.Stop())
		must(t, "restart", tg.Proc.RestartWith(storeArgs(o)))
		tg.Endpoint = tg.Proc.Endpoint
	} else {
		tg.Etcd.Etcd.Close()
		e, err := etcdref.Start(etcdref.Options{LogLevel: "fatal", DataDir: tg.Etcd.DataDir, AuthToken: o.AuthToken})
		must(t, "restart etcd", err)
		tg.Etcd, tg.Endpoint = e, e.Endpoint
	}
	reconnect(t, tg)
}

// reconnect gives tg a new client of its endpoint (a restarted store listens on a new port:
// set tg.Endpoint first).
func reconnect(t *testing.T, tg *target) {
	t.Helper()
	cli, err := newClient(tg.Endpoint, nil)
	must(t, "reconnect", err)
	tg.setClient(cli)
}

// TestAuthRestart: users, roles, permissions, the enabled flag and the auth revision survive a
// restart; tokens do not (etcd keeps simple tokens in memory).
func TestAuthRestart(t *testing.T) {
	tr := transcripts{}
	forEachDedicated(t, serverOpts{}, func(t *testing.T, tg *target) {
		s := newAuthSide(t, tg, tr)
		root, alice := s.enableWithUsers()
		s.put(root, "root put /a/1", &pb.PutRequest{Key: b("/a/1"), Value: b("v")})
		s.status(root)
		restart(t, tg, serverOpts{})
		s = newAuthSide(t, tg, tr)
		s.restarted = true
		s.get(alice, "alice's token from before the restart", "/a/1", "")
		s.get("", "get without token after the restart", "/a/1", "")
		root = s.login("root", "rootpw")
		alice = s.login("alice", "alicepw")
		s.status(root)
		s.get(alice, "alice get /a/1", "/a/1", "")
		s.put(alice, "alice put /a/1", &pb.PutRequest{Key: b("/a/1"), Value: b("v")})
		s.login("svc", "")
		rg, err := s.auth.RoleGet(s.as(root), &pb.AuthRoleGetRequest{Role: "rw"})
		s.rec("role get rw", err)
		if err == nil {
			s.note("  perms %v", rg.Perm)
		}
		_, err = s.auth.AuthDisable(s.as(root), &pb.AuthDisableRequest{})
		s.rec("disable", err)
		restart(t, tg, serverOpts{})
		s = newAuthSide(t, tg, tr)
		s.restarted = true
		s.status("")
		s.get("", "get without token", "/a/1", "")
	})
	tr.compare(t)
}

// TestAuthCommonName: with --client-cert-auth, a client with a verified certificate and no token
// acts as the user its certificate's common name names; a token takes precedence.
func TestAuthCommonName(t *testing.T) {
	certs, err := testcerts.GenerateWith(t.TempDir(), testcerts.Options{ClientCN: "alice"})
	must(t, "certs", err)
	withCert, err := certs.ClientTLS(true)
	must(t, "client tls", err)
	tr := transcripts{}
	forEachDedicated(t, serverOpts{Certs: &certs, ClientCertAuth: true, ClientTLS: withCert}, func(t *testing.T, tg *target) {
		s := newAuthSide(t, tg, tr)
		s.setupUsers()
		_, err := s.auth.AuthEnable(ctxT(t), &pb.AuthEnableRequest{})
		s.rec("enable (auth was off: anyone may)", err)
		root := s.login("root", "rootpw")
		s.put(root, "root put /a/1", &pb.PutRequest{Key: b("/a/1"), Value: b("v")})
		s.get("", "alice by certificate get /a/1", "/a/1", "")
		s.get("", "alice by certificate get /c", "/c", "")
		s.put("", "alice by certificate put /a/1", &pb.PutRequest{Key: b("/a/1"), Value: b("v")})
		s.put("", "alice by certificate put /w/1", &pb.PutRequest{Key: b("/w/1"), Value: b("v")})
		s.watch("", "alice by certificate watch /a/", "/a/", "/a0")
		s.watch("", "alice by certificate watch /c", "/c", "")
		_, err = s.auth.UserList(s.as(""), &pb.AuthUserListRequest{})
		s.rec("alice by certificate lists users", err)
		_, err = s.auth.UserGet(s.as(""), &pb.AuthUserGetRequest{Name: "alice"})
		s.rec("alice by certificate gets herself", err)
		s.put(root, "root's token over alice's certificate put /c", &pb.PutRequest{Key: b("/c"), Value: b("v")})
		s.get("bad.1", "a bad token over alice's certificate", "/a/1", "")
		_, err = s.auth.UserDelete(s.as(root), &pb.AuthUserDeleteRequest{Name: "alice"})
		s.rec("delete alice", err)
		s.get("", "certificate of a deleted user get /a/1", "/a/1", "")
		_, err = s.auth.AuthDisable(s.as(root), &pb.AuthDisableRequest{})
		s.rec("disable", err)
		requireLeanTLS(t, tg)
	})
	tr.compare(t)
}

// TestAuthLockElection: etcd runs Lock and Election as their caller, so the recipes' steps need the
// caller's permissions on the lock's or election's keys.
func TestAuthLockElection(t *testing.T) {
	tr := transcripts{}
	forEachDedicated(t, serverOpts{}, func(t *testing.T, tg *target) {
		s := newAuthSide(t, tg, tr)
		root, alice := s.enableWithUsers()
		conn := tg.Cli.ActiveConnection()
		lk, el := v3lockpb.NewLockClient(conn), v3electionpb.NewElectionClient(conn)
		_, err := s.auth.RoleGrantPermission(s.as(root), &pb.AuthRoleGrantPermissionRequest{Name: "rw", Perm: perm(authpb.READWRITE, "/l/", "/l0")})
		s.rec("grant readwrite on /l/ to rw", err)
		_, err = s.tg.Lease.LeaseGrant(s.as(root), &pb.LeaseGrantRequest{ID: 9001, TTL: 60})
		s.rec("root lease grant", err)
		for _, c := range []struct{ who, token, name string }{
			{"root", root, "/b/x"}, {"alice", alice, "/l"}, {"alice", alice, "/a/lock"}, {"alice", alice, "/w"}, {"nobody", "", "/w"}, {"a bad token", "bad.1", "/w"},
		} {
			r, err := lk.Lock(s.as(c.token), &v3lockpb.LockRequest{Name: b(c.name)})
			s.rec(fmt.Sprintf("%s locks %s", c.who, c.name), err)
			if err == nil {
				_, err = lk.Unlock(s.as(c.token), &v3lockpb.UnlockRequest{Key: r.Key})
				s.rec(fmt.Sprintf("%s unlocks %s", c.who, c.name), err)
			}
			_, err = el.Campaign(s.as(c.token), &v3electionpb.CampaignRequest{Name: b(c.name), Value: b("v")})
			s.rec(fmt.Sprintf("%s campaigns on %s", c.who, c.name), err)
			_, err = el.Leader(s.as(c.token), &v3electionpb.LeaderRequest{Name: b(c.name)})
			s.rec(fmt.Sprintf("%s asks the leader of %s", c.who, c.name), err)
		}
	})
	tr.compare(t)
}

// writeRSAKeys writes an RSA key pair (PKCS#8 private, PKIX public) for JWT signing.
func writeRSAKeys(t *testing.T, dir string) (priv, pub string) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	must(t, "rsa key", err)
	p8, err := x509.MarshalPKCS8PrivateKey(k)
	must(t, "pkcs8", err)
	pk, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	must(t, "pkix", err)
	priv, pub = filepath.Join(dir, "jwt.key"), filepath.Join(dir, "jwt.pub")
	must(t, "write key", os.WriteFile(priv, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}), 0o600))
	must(t, "write pub", os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pk}), 0o644))
	return priv, pub
}

// TestAuthJWT: --auth-token jwt (RS256). A token carries the auth revision it was issued at: any
// auth change makes it stale (`revision of auth store is old`); it is not kept by the server, so
// it survives a restart; one signed by another key is invalid.
func TestAuthJWT(t *testing.T) {
	priv, pub := writeRSAKeys(t, t.TempDir())
	otherKey, err := rsa.GenerateKey(rand.Reader, 2048)
	must(t, "rsa key", err)
	o := serverOpts{AuthToken: fmt.Sprintf("jwt,pub-key=%s,priv-key=%s,sign-method=RS256,ttl=10m", pub, priv)}
	tr := transcripts{}
	forEachDedicated(t, o, func(t *testing.T, tg *target) {
		s := newAuthSide(t, tg, tr)
		root, alice := s.enableWithUsers()
		if n := strings.Count(alice, "."); n != 2 {
			t.Errorf("token %q is not a JWT", alice)
		}
		s.put(root, "root put /a/1", &pb.PutRequest{Key: b("/a/1"), Value: b("v")})
		s.get(alice, "alice get /a/1", "/a/1", "")
		s.put(alice, "alice put /a/1", &pb.PutRequest{Key: b("/a/1"), Value: b("v")})
		s.get(alice+"x", "a tampered token", "/a/1", "")
		s.status(root)
		restart(t, tg, o)
		s = newAuthSide(t, tg, tr)
		s.restarted = true
		s.get(alice, "alice's token after a restart", "/a/1", "")
		_, err = s.auth.RoleAdd(s.as(root), &pb.AuthRoleAddRequest{Name: "extra"})
		s.rec("root adds a role (the auth revision moves)", err)
		s.get(alice, "alice's token after the change", "/a/1", "")
		s.watch(alice, "alice's stale token watches /a/", "/a/", "/a0")
		_, err = s.auth.UserList(s.as(root), &pb.AuthUserListRequest{})
		s.rec("root's stale token lists users (admin checks ignore the revision)", err)
		alice = s.login("alice", "alicepw")
		s.get(alice, "alice's new token", "/a/1", "")
		_, err = s.auth.UserDelete(s.as(root), &pb.AuthUserDeleteRequest{Name: "alice"})
		s.rec("delete alice", err)
		s.get(alice, "a deleted user's token", "/a/1", "")
		// Root's claims signed with another key.
		parts := strings.Split(root, ".")
		digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
		sig, err := rsa.SignPKCS1v15(rand.Reader, otherKey, crypto.SHA256, digest[:])
		must(t, "sign", err)
		forged := parts[0] + "." + parts[1] + "." + base64.RawURLEncoding.EncodeToString(sig)
		_, err = s.auth.UserList(s.as(forged), &pb.AuthUserListRequest{})
		s.rec("root's claims signed with another key", err)
	})
	tr.compare(t)
}
