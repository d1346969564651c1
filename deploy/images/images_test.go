// Package images tests the container images `make images` writes to bin/images/ (an OCI image
// layout per image; tools/ociimage builds them): the layout is read by hand as the OCI
// image-spec defines it (index.json → manifest → config and layer blobs, every blob checked
// against its digest, the layer against the config's diff_id), the layer is unpacked into a
// temporary directory, and the binaries run from there — chrooted into it as the image's user,
// so nothing of this machine's root filesystem (its glibc included) is reachable, exactly as in
// a container: meganode-store with only the loader and libraries its layer carries.
package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meganode/meganode/deploy/manifesttest"
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
}

type image struct {
	dir    string   // the unpacked layer
	tags   []string // org.opencontainers.image.ref.name of the index entries
	config struct {
		Architecture string `json:"architecture"`
		OS           string `json:"os"`
		Config       struct {
			Entrypoint []string          `json:"Entrypoint"`
			Env        []string          `json:"Env"`
			User       string            `json:"User"`
			Labels     map[string]string `json:"Labels"`
		} `json:"config"`
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	files []string // paths in the layer
}

// blob reads a blob of the layout and checks it against its digest and size.
func blob(t *testing.T, layout string, d descriptor) []byte {
	t.Helper()
	alg, hexDigest, _ := strings.Cut(d.Digest, ":")
	if alg != "sha256" {
		t.Fatalf("digest %s", d.Digest)
	}
	b, err := os.ReadFile(filepath.Join(layout, "blobs", "sha256", hexDigest))
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != hexDigest || int64(len(b)) != d.Size {
		t.Fatalf("blob %s: content does not match its digest or size %d", d.Digest, d.Size)
	}
	return b
}

// load reads bin/images/<name> and unpacks its one layer.
func load(t *testing.T, name string) *image {
	t.Helper()
	layout := filepath.Join(manifesttest.RepoRoot(t), "bin", "images", name)
	var marker struct {
		Version string `json:"imageLayoutVersion"`
	}
	if b, err := os.ReadFile(filepath.Join(layout, "oci-layout")); err != nil || json.Unmarshal(b, &marker) != nil || marker.Version != "1.0.0" {
		t.Fatalf("%s is not an OCI image layout (%v); build the images with `make images`", layout, err)
	}
	var index struct {
		Manifests []descriptor `json:"manifests"`
	}
	b, err := os.ReadFile(filepath.Join(layout, "index.json"))
	if err != nil || json.Unmarshal(b, &index) != nil || len(index.Manifests) == 0 {
		t.Fatalf("index.json: %v", err)
	}
	img := &image{dir: t.TempDir()}
	for _, m := range index.Manifests {
		if m.Digest != index.Manifests[0].Digest || m.MediaType != "application/vnd.oci.image.manifest.v1+json" {
			t.Fatalf("index entries %+v: want one OCI manifest under each tag", index.Manifests)
		}
		img.tags = append(img.tags, m.Annotations["org.opencontainers.image.ref.name"])
	}
	var manifest struct {
		Config descriptor   `json:"config"`
		Layers []descriptor `json:"layers"`
	}
	if err := json.Unmarshal(blob(t, layout, index.Manifests[0]), &manifest); err != nil {
		t.Fatal(err)
	}
	if manifest.Config.MediaType != "application/vnd.oci.image.config.v1+json" || len(manifest.Layers) != 1 ||
		manifest.Layers[0].MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
		t.Fatalf("manifest %+v: want an OCI config and one gzip layer (scratch, no base image)", manifest)
	}
	if err := json.Unmarshal(blob(t, layout, manifest.Config), &img.config); err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob(t, layout, manifest.Layers[0])))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	tr := tar.NewReader(io.TeeReader(zr, h))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(img.dir, filepath.Clean("/"+hdr.Name))
		img.files = append(img.files, "/"+strings.TrimSuffix(hdr.Name, "/"))
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, os.FileMode(hdr.Mode).Perm())
		case tar.TypeReg:
			var f *os.File
			if f, err = os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_EXCL, os.FileMode(hdr.Mode).Perm()); err == nil {
				_, err = io.Copy(f, tr)
				f.Close()
			}
		default:
			t.Fatalf("%s: entry type %c (the layer has files and directories only)", hdr.Name, hdr.Typeflag)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, hdr.Uid, hdr.Gid); err != nil && os.Geteuid() == 0 {
			t.Fatal(err)
		}
		// MkdirAll and OpenFile apply the umask: set the layer's modes (/tmp's sticky bit too).
		mode := os.FileMode(hdr.Mode).Perm()
		if hdr.Mode&01000 != 0 {
			mode |= os.ModeSticky
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	io.Copy(io.Discard, zr)
	if diff := "sha256:" + hex.EncodeToString(h.Sum(nil)); len(img.config.RootFS.DiffIDs) != 1 || img.config.RootFS.DiffIDs[0] != diff {
		t.Fatalf("diff_ids %v, the layer is %s", img.config.RootFS.DiffIDs, diff)
	}
	c := img.config
	if c.Architecture != "amd64" || c.OS != "linux" || c.Config.User != "65532:65532" || len(c.Config.Entrypoint) != 1 {
		t.Fatalf("config %+v", c)
	}
	// Tagged VERSION and VERSION-<git describe> (the label's version).
	v := c.Config.Labels["org.opencontainers.image.version"]
	if len(img.tags) != 2 || img.tags[1] != v || !strings.HasPrefix(v, img.tags[0]+"-") {
		t.Fatalf("tags %v, version label %q: want VERSION and VERSION-<git describe>", img.tags, v)
	}
	return img
}

// run runs the image's entrypoint with args: chrooted into the layer as the image's user
// (root only), the way a container runtime starts it, or else not at all (nil).
func (img *image) command(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	uid, gid, _ := strings.Cut(img.config.Config.User, ":")
	u, _ := strconv.Atoi(uid)
	g, _ := strconv.Atoi(gid)
	cmd := exec.Command(img.config.Config.Entrypoint[0], args...)
	cmd.Dir, cmd.Env = "/", img.config.Config.Env
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: img.dir, Credential: &syscall.Credential{Uid: uint32(u), Gid: uint32(g)}}
	return cmd
}

func (img *image) run(t *testing.T, args ...string) string {
	t.Helper()
	cmd := img.command(t, args...)
	if cmd == nil {
		t.Skip("chroot needs root: the binaries of the image were not run")
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v in the image: %v\n%s", img.config.Config.Entrypoint[0], args, err, out)
	}
	return string(out)
}

func TestMeganodeImage(t *testing.T) {
	img := load(t, "meganode")
	if want := []string{"/etc", "/etc/group", "/etc/passwd", "/home", "/home/nonroot", "/tmp", "/usr", "/usr/local", "/usr/local/bin",
		"/usr/local/bin/meganode"}; !slices.Equal(img.files, want) {
		t.Errorf("layer holds %v, want %v (a static binary on scratch)", img.files, want)
	}
	if out := img.run(t, "--version"); strings.TrimSpace(out) != "meganode version "+img.tags[1] {
		t.Errorf("--version: %q, want the image's tag %s", out, img.tags[1])
	}
	for _, args := range [][]string{{"--help"}, {"scheduler", "--help"}} {
		if out := img.run(t, args...); !strings.Contains(out, "Usage:") {
			t.Errorf("%v: %s", args, out)
		}
	}
}

func TestMeganodeStoreImage(t *testing.T) {
	img := load(t, "meganode-store")
	var libs []string
	for _, f := range img.files {
		if strings.Contains(f, ".so") {
			libs = append(libs, f)
		}
	}
	if !slices.Contains(libs, "/lib64/ld-linux-x86-64.so.2") || !slices.Contains(libs, "/lib/x86_64-linux-gnu/libc.so.6") {
		t.Errorf("libraries in the layer: %v, want the loader and libc at least", libs)
	}
	// Without root too (no chroot): the packaged loader resolves every library the binary
	// needs inside the layer (it would fall back to this machine's /lib for a missing one:
	// --list shows where each came from), and runs it.
	ld := filepath.Join(img.dir, "lib64", "ld-linux-x86-64.so.2")
	ldArgs := []string{"--inhibit-cache", "--library-path", filepath.Join(img.dir, "lib", "x86_64-linux-gnu")}
	bin := filepath.Join(img.dir, "usr", "local", "bin", "meganode-store")
	out, err := exec.Command(ld, append(ldArgs, "--list", bin)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s --list: %v\n%s", ld, err, out)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if _, path, ok := strings.Cut(l, "=> "); ok && !strings.HasPrefix(path, img.dir+"/") {
			t.Errorf("library not in the layer: %s", strings.TrimSpace(l))
		}
	}
	out, err = exec.Command(ld, append(ldArgs, bin, "--version")...).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "meganode-store "+img.tags[0]+" ") {
		t.Fatalf("the packaged loader: %v: %q, want meganode-store %s", err, out, img.tags[0])
	}
	if out := img.run(t, "--version"); !strings.HasPrefix(out, "meganode-store "+img.tags[0]+" ") {
		t.Errorf("--version in the image: %q", out)
	}
	// It serves from the image: a data dir under /tmp as the nonroot user, /health answers.
	client, metrics := freePort(t), freePort(t)
	cmd := img.command(t, "--data-dir=/tmp/data", "--listen-client-urls=http://127.0.0.1:"+client,
		"--listen-metrics-urls=http://127.0.0.1:"+metrics)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://127.0.0.1:" + metrics + "/health")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(string(body), "true") {
				t.Fatalf("/health: %d %s", resp.StatusCode, body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store in the image did not serve /health: %v\n%s", err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if fi, err := os.Stat(filepath.Join(img.dir, "tmp", "data")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 65532 {
		t.Errorf("data dir: %v (want it written by uid 65532)", err)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}
