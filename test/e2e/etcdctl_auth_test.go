package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestAuthEtcdctl runs an operator's `etcdctl user/role/auth` session (etcdctl v3.6) on both
// servers: users and roles set up, auth enabled, reads and writes as root and as a user, refusals,
// revocations, a password change, auth disabled. Outputs are compared after endpoints and member
// ids are masked.
func TestAuthEtcdctl(t *testing.T) {
	bin := etcdctlBin()
	if bin == "" {
		t.Skip("etcdctl not found: `make etcdctl` builds bin/etcdctl (or set ETCDCTL_BIN)")
	}
	tr := transcripts{}
	forEachDedicated(t, serverOpts{}, func(t *testing.T, tg *target) {
		run := func(stdin string, args ...string) {
			t.Helper()
			cmd := exec.Command(bin, append([]string{"--endpoints", "http://" + tg.Endpoint}, args...)...)
			for _, e := range os.Environ() { // the caller's ETCDCTL_* settings would change what it does
				if !strings.HasPrefix(e, "ETCDCTL_") {
					cmd.Env = append(cmd.Env, e)
				}
			}
			var out, errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			cmd.Stdin = strings.NewReader(stdin)
			err := cmd.Run()
			var stderr []string
			for _, l := range strings.Split(strings.TrimSpace(errOut.String()), "\n") {
				if l != "" && !zapLevelRe.MatchString(l) {
					stderr = append(stderr, l)
				}
			}
			mask := func(s string) string {
				return tookRe.ReplaceAllString(strings.ReplaceAll(s, tg.Endpoint, "<endpoint>"), "took <t>")
			}
			line := fmt.Sprintf("etcdctl %s: exit %v; stdout %q; stderr %q", strings.Join(args, " "), err, mask(strings.TrimSpace(out.String())), mask(strings.Join(stderr, "\n")))
			t.Log(line)
			tr.note(tg, line)
		}
		root := "--user=root:rootpw"
		alice := "--user=alice:alicepw"
		run("", "auth", "enable")
		// etcdctl grants the root role itself when it adds user root.
		run("", "user", "add", "root", "--new-user-password=rootpw")
		run("", "user", "get", "root")
		run("", "role", "add", "ro")
		run("", "role", "add", "ro")
		run("", "role", "add", "rw")
		run("", "role", "grant-permission", "ro", "read", "/a/", "--prefix")
		run("", "role", "grant-permission", "ro", "read", "/z", "--from-key")
		run("", "role", "grant-permission", "rw", "readwrite", "/b/x")
		run("", "role", "grant-permission", "rw", "write", "/w/", "/w0")
		run("", "role", "grant-permission", "rw", "bogus", "/w/")
		run("", "user", "add", "alice", "--new-user-password=alicepw")
		run("", "user", "add", "alice", "--new-user-password=alicepw")
		run("", "user", "add", "svc", "--no-password")
		run("", "user", "grant-role", "alice", "ro")
		run("", "user", "grant-role", "alice", "rw")
		run("", "user", "grant-role", "alice", "rw")
		run("", "user", "grant-role", "alice", "nope")
		run("", "user", "list")
		run("", "role", "list")
		run("", "role", "get", "ro")
		run("", "role", "get", "rw")
		run("", "user", "get", "alice")
		run("", "user", "get", "alice", "--detail")
		run("", "auth", "status")
		run("", "auth", "enable")
		run("", "auth", "status")
		run("", root, "auth", "status")
		run("", "get", "/a/1")
		run("", "--user=root:wrong", "get", "/a/1")
		run("", root, "put", "/a/1", "one")
		run("", root, "put", "/c", "cee")
		run("", alice, "get", "/a/1")
		run("", alice, "get", "/a/", "--prefix")
		run("", alice, "get", "/c")
		run("", alice, "get", "/z", "--from-key")
		run("", alice, "put", "/a/1", "two")
		run("", alice, "put", "/b/x", "bx")
		run("", alice, "put", "/w/1", "w")
		run("", alice, "get", "/w/1")
		run("", alice, "del", "/w/", "--prefix")
		run("", alice, "del", "/w/", "--prefix", "--prev-kv")
		run("", alice, "user", "list")
		run("", alice, "user", "get", "alice")
		run("", alice, "role", "get", "ro")
		run("", root, "user", "delete", "root")
		run("", root, "user", "revoke-role", "root", "root")
		run("", root, "user", "revoke-role", "alice", "ro")
		run("", alice, "get", "/a/1")
		run("", root, "role", "revoke-permission", "rw", "/b/x")
		run("", root, "role", "revoke-permission", "rw", "/b/x")
		run("", alice, "put", "/b/x", "bx")
		run("newpw\n", root, "user", "passwd", "alice", "--interactive=false")
		run("", alice, "get", "/z", "--from-key")
		run("", "--user=alice:newpw", "put", "/w/2", "w")
		run("", root, "role", "delete", "rw")
		run("", root, "user", "get", "alice")
		run("", root, "user", "delete", "alice")
		run("", root, "user", "list")
		run("", root, "endpoint", "health")
		run("", root, "auth", "disable")
		run("", "auth", "status")
		run("", "get", "/a/1")
	})
	tr.compare(t)
}
