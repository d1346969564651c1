// Command ociimage assembles a single-layer, scratch-based container image from files on this
// machine — no Docker daemon, no base image pulled (no registry is needed) — and writes it as an
// OCI image layout directory (for skopeo, crane push, `oras`) and as a `docker save`-format
// tarball (for `docker load`, `podman load`, `kind load image-archive`).
//
// Why a tool of ours over go-containerregistry rather than the `crane` CLI: `crane append
// --oci-empty-base` builds the layer onto scratch, but the entrypoint, user, env and labels are
// set by `crane mutate`, which reads and writes a registry reference, so the Makefile would
// have to run `crane registry serve`, push, mutate and pull again. This is one step over the
// same library (empty.Image, mutate, layout, tarball), and it writes the layer tar itself so
// the image is reproducible: entries sorted, owner root, every mtime the --epoch (the commit's
// time), so the same commit gives the same digests.
//
//	ociimage --layout DIR --tar FILE --tag REPO:TAG[,REPO:TAG] --entrypoint /usr/local/bin/x \
//	  --file SRC=DST[=MODE] ... --dir DST[=MODE] ... --env K=V ... --label K=V ... --user UID:GID
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

// entry is one file or directory of the layer.
type entry struct {
	dst  string // absolute path in the image
	src  string // host file ("" for a directory)
	mode int64
	data []byte // contents given inline (src "")
	dir  bool
	uid  int // owner (root unless set)
	gid  int
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("ociimage", flag.ContinueOnError)
	var files, dirs, envs, labels, entrypoint, tags list
	layoutDir := fs.String("layout", "", "write an OCI image layout to this directory (replaced)")
	tarFile := fs.String("tar", "", "write a docker-save tarball to this file")
	user := fs.String("user", "65532:65532", "the image's user (uid:gid); /etc/passwd and /etc/group name it nonroot")
	workdir := fs.String("workdir", "/", "working directory")
	epoch := fs.Int64("epoch", 0, "seconds since 1970 for every mtime and the created time (SOURCE_DATE_EPOCH)")
	fs.Var(&files, "file", "SRC=DST[=MODE]: a host file (symlinks followed) at DST; MODE octal, default the source's")
	fs.Var(&dirs, "dir", "DST[=MODE]: an empty directory, default mode 0755")
	fs.Var(&envs, "env", "K=V in the image config")
	fs.Var(&labels, "label", "K=V image label")
	fs.Var(&entrypoint, "entrypoint", "entrypoint argument (repeat for more)")
	fs.Var(&tags, "tag", "REPO:TAG the image is named (repeat or comma-separate); the first one names the layout entry")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var refs []name.Tag
	for _, t := range tags {
		for _, s := range strings.Split(t, ",") {
			r, err := name.NewTag(s, name.StrictValidation)
			if err != nil {
				return fmt.Errorf("--tag %q: %w", s, err)
			}
			refs = append(refs, r)
		}
	}
	if len(refs) == 0 || len(entrypoint) == 0 || (*layoutDir == "" && *tarFile == "") {
		return fmt.Errorf("need --tag, --entrypoint and --layout or --tar")
	}
	entries, err := collect(files, dirs, *user)
	if err != nil {
		return err
	}
	mtime := time.Unix(*epoch, 0).UTC()
	layerTar, err := layerBytes(entries, mtime)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerTar)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	if img, err = mutate.Append(img, mutate.Addendum{Layer: layer, MediaType: types.OCILayer,
		History: v1.History{Created: v1.Time{Time: mtime}, CreatedBy: "ociimage (tools/ociimage)"}}); err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Created = "amd64", "linux", v1.Time{Time: mtime}
	cf.Config.Entrypoint, cf.Config.Env, cf.Config.User, cf.Config.WorkingDir = entrypoint, envs, *user, *workdir
	cf.Config.Labels = map[string]string{}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return fmt.Errorf("--label %q: want K=V", l)
		}
		cf.Config.Labels[k] = v
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	if *layoutDir != "" {
		if err := os.RemoveAll(*layoutDir); err != nil {
			return err
		}
		p, err := layout.Write(*layoutDir, empty.Index)
		if err != nil {
			return err
		}
		for _, r := range refs {
			if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
				"org.opencontainers.image.ref.name": r.TagStr(), "io.containerd.image.name": r.Name()})); err != nil {
				return err
			}
		}
	}
	if *tarFile != "" {
		m := map[name.Reference]v1.Image{}
		for _, r := range refs {
			m[r] = img
		}
		if err := tarball.MultiRefWriteToFile(*tarFile, m); err != nil {
			return err
		}
	}
	fmt.Printf("%s %s (layer %d bytes uncompressed)\n", refs[0].Name(), digest, len(layerTar))
	return nil
}

// collect turns the flags into layer entries: the files, the directories, every parent
// directory, and /etc/passwd, /etc/group naming root and the --user (as distroless does).
func collect(files, dirs list, user string) ([]entry, error) {
	byPath := map[string]entry{}
	add := func(e entry) error {
		e.dst = path.Clean("/" + e.dst)
		if old, ok := byPath[e.dst]; ok && !(old.dir && e.dir) {
			return fmt.Errorf("%s given twice", e.dst)
		}
		byPath[e.dst] = e
		for d := path.Dir(e.dst); d != "/"; d = path.Dir(d) {
			if _, ok := byPath[d]; !ok {
				byPath[d] = entry{dst: d, dir: true, mode: 0o755}
			}
		}
		return nil
	}
	for _, f := range files {
		parts := strings.Split(f, "=")
		if len(parts) < 2 || len(parts) > 3 {
			return nil, fmt.Errorf("--file %q: want SRC=DST[=MODE]", f)
		}
		st, err := os.Stat(parts[0]) // follows symlinks: the layer holds the contents
		if err != nil {
			return nil, err
		}
		mode := int64(st.Mode().Perm())
		if len(parts) == 3 {
			if mode, err = strconv.ParseInt(parts[2], 8, 32); err != nil {
				return nil, fmt.Errorf("--file %q: mode: %w", f, err)
			}
		}
		if err := add(entry{dst: parts[1], src: parts[0], mode: mode}); err != nil {
			return nil, err
		}
	}
	for _, d := range dirs {
		dst, m, ok := strings.Cut(d, "=")
		mode := int64(0o755)
		if ok {
			var err error
			if mode, err = strconv.ParseInt(m, 8, 32); err != nil {
				return nil, fmt.Errorf("--dir %q: mode: %w", d, err)
			}
		}
		if err := add(entry{dst: dst, dir: true, mode: mode}); err != nil {
			return nil, err
		}
	}
	uid, gid, ok := strings.Cut(user, ":")
	if !ok {
		return nil, fmt.Errorf("--user %q: want UID:GID", user)
	}
	u, err1 := strconv.Atoi(uid)
	g, err2 := strconv.Atoi(gid)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("--user %q: want numeric UID:GID", user)
	}
	passwd := "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:" + uid + ":" + gid + ":nonroot:/home/nonroot:/sbin/nologin\n"
	group := "root:x:0:\nnonroot:x:" + gid + ":\n"
	for _, e := range []entry{{dst: "/etc/passwd", data: []byte(passwd), mode: 0o644}, {dst: "/etc/group", data: []byte(group), mode: 0o644},
		{dst: "/home/nonroot", dir: true, mode: 0o700, uid: u, gid: g}, {dst: "/tmp", dir: true, mode: 0o1777}} {
		if _, given := byPath[e.dst]; !given {
			if err := add(e); err != nil {
				return nil, err
			}
		}
	}
	out := make([]entry, 0, len(byPath))
	for _, e := range byPath {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].dst < out[j].dst })
	return out, nil
}

// layerBytes writes the layer tar: paths relative ("usr/local/bin/x"), owner root except the
// nonroot home, one mtime (PAX headers, so no access/change times are recorded).
func layerBytes(entries []entry, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: strings.TrimPrefix(e.dst, "/"), Mode: e.mode, ModTime: mtime, Uid: e.uid, Gid: e.gid, Format: tar.FormatPAX}
		data := e.data
		if e.dir {
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		} else {
			if e.src != "" {
				var err error
				if data, err = os.ReadFile(e.src); err != nil {
					return nil, err
				}
			}
			h.Typeflag, h.Size = tar.TypeReg, int64(len(data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
