package migrate

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
	"google.golang.org/protobuf/encoding/protowire"
)

// sample is a state with history, a multi-change revision, deletions, leases and auth.
func sample() *Snapshot {
	v := func(mod int64, sub uint32, create, ver, lease int64, val string) Version {
		return Version{ModRev: mod, Sub: sub, CreateRev: create, Version: ver, Lease: lease, Value: []byte(val)}
	}
	del := func(mod int64, sub uint32) Version { return Version{ModRev: mod, Sub: sub, Value: []byte{}} }
	s := &Snapshot{Rev: 12, Compacted: 4,
		Leases: []Lease{{ID: 7, Granted: 60, Remaining: 60}, {ID: 9, Granted: 3600, Remaining: 3600}},
		Keys: []Key{
			{Key: []byte("\x00\xffbin"), Versions: []Version{v(6, 0, 6, 1, 0, "\x00\x01")}},
			{Key: []byte("a"), Versions: []Version{v(3, 0, 2, 2, 0, "v2"), v(8, 0, 2, 3, 0, "v3"), del(10, 0), v(11, 0, 11, 1, 7, "")}},
			{Key: []byte("t1"), Versions: []Version{v(7, 0, 7, 1, 0, "one"), del(9, 1)}},
			{Key: []byte("t2"), Versions: []Version{v(7, 1, 7, 1, 7, "two")}},
		},
		Auth: &Auth{Enabled: true, Revision: 9,
			Users: []User{{Name: "alice", Password: "$2a$10$abcdefghijklmnopqrstuv", Roles: []string{"reader", "writer"}},
				{Name: "root", Password: "$2a$10$0123456789", Roles: []string{"root"}},
				{Name: "svc", NoPassword: true, Roles: []string{"reader"}}},
			Roles: []Role{{Name: "reader", Perms: []Perm{{Type: 0, Key: []byte("/a/"), RangeEnd: []byte("/a0")}}},
				{Name: "root"},
				{Name: "writer", Perms: []Perm{{Type: 2, Key: []byte("t1"), RangeEnd: []byte{}}, {Type: 1, Key: []byte("/r/"), RangeEnd: []byte{0}}}}},
		},
	}
	return s
}

func encode(t *testing.T, s *Snapshot) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteSnapshot(&buf, s); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestSnapshotRoundTrip(t *testing.T) {
	for _, withAuth := range []bool{true, false} {
		s := sample()
		if !withAuth {
			s.Auth = nil
		}
		b := encode(t, s)
		got, err := ReadSnapshot(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("auth %v: %v", withAuth, err)
		}
		if !reflect.DeepEqual(got, s) {
			t.Errorf("auth %v: round trip differs:\n got %+v\nwant %+v", withAuth, got, s)
		}
		for _, bad := range [][]byte{b[:len(b)-1], b[:len(b)/2], append(bytes.Clone(b), 0), flip(b, len(b)/2), flip(b, len(b)-2), b[8:]} {
			if _, err := ReadSnapshot(bytes.NewReader(bad)); err == nil {
				t.Errorf("auth %v: a damaged snapshot (%d bytes) decoded", withAuth, len(bad))
			}
		}
	}
}

func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 1
	return c
}

// The byte layout of store/src/snapshot.rs and store/src/auth/persist.rs, field by field.
func TestSnapshotLayout(t *testing.T) {
	s := &Snapshot{Rev: 5, Compacted: -1, Leases: []Lease{{ID: 3, Granted: 10, Remaining: 4}},
		Keys: []Key{{Key: []byte("k"), Versions: []Version{{ModRev: 5, Sub: 2, CreateRev: 4, Version: 2, Lease: 3, Value: []byte("vv")}}}},
		Auth: &Auth{Enabled: true, Revision: 2, Users: []User{{Name: "u", Password: "p", Roles: []string{"r"}}},
			Roles: []Role{{Name: "r", Perms: []Perm{{Type: 2, Key: []byte("a"), RangeEnd: []byte("b")}}}}}}
	le := binary.LittleEndian
	var a []byte
	a = append(a, "MGNAUTH1"...)
	a = append(a, 1)
	a = le.AppendUint64(a, 2)
	a = le.AppendUint32(a, 1)
	for _, f := range []string{"u", "p"} {
		a = le.AppendUint32(a, uint32(len(f)))
		a = append(a, f...)
	}
	a = append(a, 0)
	a = le.AppendUint32(a, 1)
	a = le.AppendUint32(a, 1)
	a = append(a, 'r')
	a = le.AppendUint32(a, 1)
	a = le.AppendUint32(a, 1)
	a = append(a, 'r')
	a = le.AppendUint32(a, 1)
	a = append(a, 2)
	a = le.AppendUint32(a, 1)
	a = append(a, 'a')
	a = le.AppendUint32(a, 1)
	a = append(a, 'b')
	a = le.AppendUint32(a, crc32.Checksum(a, castagnoli))
	if got := EncodeAuth(s.Auth); !bytes.Equal(got, a) {
		t.Fatalf("auth state:\n got %x\nwant %x", got, a)
	}
	var w []byte
	w = append(w, "MGNSNAP1"...)
	w = le.AppendUint64(w, 5)
	w = le.AppendUint64(w, ^uint64(0)) // -1
	w = le.AppendUint64(w, 1)
	for _, x := range []uint64{3, 10, 4} {
		w = le.AppendUint64(w, x)
	}
	w = le.AppendUint64(w, 1)
	w = le.AppendUint32(w, 1)
	w = append(w, 'k')
	w = le.AppendUint32(w, 1)
	w = le.AppendUint64(w, 5)
	w = le.AppendUint32(w, 2)
	for _, x := range []uint64{4, 2, 3} {
		w = le.AppendUint64(w, x)
	}
	w = le.AppendUint32(w, 2)
	w = append(w, "vv"...)
	w = append(w, "AUTH"...)
	w = le.AppendUint64(w, uint64(len(a)))
	w = append(w, a...)
	w = le.AppendUint32(w, crc32.Checksum(w, castagnoli))
	if got := encode(t, s); !bytes.Equal(got, w) {
		t.Fatalf("snapshot:\n got %x\nwant %x", got, w)
	}
}

// The store's state written as etcd's backend reads back the same, and etcdutl reads it.
func TestEtcdBackendRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name      string
		rev       int64
		marker    bool
		statusRev int64
	}{
		{"revision of the newest write", 11, false, 11},
		{"revision above it", 150011, true, 150011},
	} {
		s := sample()
		s.Rev = tc.rev
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".db")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		res, err := WriteEtcdSnapshot(f, s, EtcdMeta{MemberID: 0xabc, Term: 3, Index: 40}, dir)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if (res.MarkerRev != 0) != tc.marker || !hasHashTrailer(res.Bytes) {
			t.Errorf("%s: %+v", tc.name, res)
		}
		got, info, err := ReadEtcdDB(path, ReadOptions{})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !info.HashChecked || info.StorageVersion != "3.6.0" || info.ConsistentIndex != 40 || info.Term != 3 || (info.Markers == 1) != tc.marker {
			t.Errorf("%s: %+v", tc.name, info)
		}
		if !reflect.DeepEqual(got, s) {
			t.Errorf("%s: read back differs:\n got %+v\nwant %+v", tc.name, got, s)
		}
		st, err := snapshot.NewV3(zap.NewNop()).Status(path)
		if err != nil || st.Revision != tc.statusRev || st.TotalKey != 3 || st.Version != "3.6.0" {
			t.Errorf("%s: etcdutl snapshot status: %+v %v", tc.name, st, err)
		}
	}
}

// A truncated or damaged backend is refused; an import leaves nothing behind.
func TestImportRefusesDamage(t *testing.T) {
	dir := t.TempDir()
	var buf bytes.Buffer
	if _, err := WriteEtcdSnapshot(&buf, sample(), EtcdMeta{}, dir); err != nil {
		t.Fatal(err)
	}
	whole := buf.Bytes()
	db := whole[:len(whole)-hashLen] // as a member's member/snap/db: no trailer
	cases := map[string][]byte{
		"empty":          nil,
		"text":           []byte(strings.Repeat("hello\n", 400)),
		"half":           whole[:len(whole)/2],
		"flipped":        flip(whole, len(whole)/3),
		"no-trailer-cut": db[:len(db)-4096],
		"store-snapshot": encode(t, sample()),
	}
	for name, content := range cases {
		in := filepath.Join(dir, name+".db")
		if err := os.WriteFile(in, content, 0o600); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, name+".snap")
		_, err := Import(in, out, ReadOptions{Check: CheckBackend})
		if err == nil || !strings.HasPrefix(err.Error(), in+": ") {
			t.Errorf("%s: %v, want an error naming %s", name, err, in)
		}
		for _, p := range []string{out, out + ".tmp"} {
			if _, err := os.Stat(p); err == nil {
				t.Errorf("%s: %s left", name, p)
			}
		}
	}
	// The undamaged forms import.
	for name, content := range map[string][]byte{"whole": whole, "member-db": db} {
		in := filepath.Join(dir, name+".db")
		if err := os.WriteFile(in, content, 0o600); err != nil {
			t.Fatal(err)
		}
		res, err := Import(in, filepath.Join(dir, name+".snap"), ReadOptions{Check: CheckBackend})
		if err != nil || res.Snapshot.Rev != sample().Rev || res.Etcd.HashChecked != (name == "whole") {
			t.Errorf("%s: %v %+v", name, err, res.Etcd)
		}
	}
}

// Export's path: the snapshot spilled (values to a file) and written in revision order reads
// back as the state it came from; a damaged stream is refused.
func TestSpilledExportRoundTrip(t *testing.T) {
	dir := t.TempDir()
	want := sample()
	b := encode(t, want)
	s, err := spillSnapshot(bytes.NewReader(b), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.stats != want.Stats() {
		t.Errorf("stats %+v, want %+v", s.stats, want.Stats())
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("the spill file is not unlinked: %v", left)
	}
	path := filepath.Join(dir, "export.db")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = writeEtcdSnapshot(f, &s.head, s.each, EtcdMeta{}, dir)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := ReadEtcdDB(path, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("read back differs:\n got %+v\nwant %+v", got, want)
	}
	for _, bad := range [][]byte{b[:len(b)-1], flip(b, len(b)/2)} {
		if _, err := spillSnapshot(bytes.NewReader(bad), dir); err == nil {
			t.Errorf("a damaged snapshot (%d bytes) was spilled", len(bad))
		}
	}
	// Versions out of revision order would overwrite each other in etcd's key bucket.
	twice := func(put func(key []byte, v *Version) error) error {
		v := want.Keys[1].Versions[0]
		if err := put(want.Keys[1].Key, &v); err != nil {
			return err
		}
		return put(want.Keys[1].Key, &v)
	}
	if _, err := writeEtcdSnapshot(io.Discard, want, twice, EtcdMeta{}, dir); err == nil || !strings.Contains(err.Error(), "not in revision order") {
		t.Errorf("two versions at one revision: %v", err)
	}
}

// Import writes the values from the etcd file's pages (borrowed, not copied): the store's
// snapshot it writes holds the state the etcd file holds, value for value.
func TestImportWritesTheValues(t *testing.T) {
	dir := t.TempDir()
	want := sample()
	db := filepath.Join(dir, "etcd.db")
	f, err := os.Create(db)
	if err != nil {
		t.Fatal(err)
	}
	_, err = WriteEtcdSnapshot(f, want, EtcdMeta{}, dir)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "store.snap")
	res, err := Import(db, out, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stats != want.Stats() {
		t.Errorf("stats %+v, want %+v", res.Stats, want.Stats())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadSnapshot(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("imported differs:\n got %+v\nwant %+v", got, want)
	}
}

func TestValueIn(t *testing.T) {
	for _, kv := range []*mvccpb.KeyValue{
		{Key: []byte("k"), CreateRevision: 2, ModRevision: 3, Version: 2, Value: []byte("value"), Lease: 7},
		{Key: []byte("k"), Value: bytes.Repeat([]byte{0xff}, 300)},
		{Key: []byte("k"), ModRevision: 1 << 40},
	} {
		m, err := kv.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if got := valueIn(m); !bytes.Equal(got, kv.Value) {
			t.Errorf("%v: value %q", kv, got)
		}
	}
	// A repeated field decodes to its last occurrence.
	m := protowire.AppendTag(nil, 5, protowire.BytesType)
	m = protowire.AppendBytes(m, []byte("first"))
	m = protowire.AppendTag(m, 6, protowire.VarintType)
	m = protowire.AppendVarint(m, 9)
	m = protowire.AppendTag(m, 5, protowire.BytesType)
	m = protowire.AppendBytes(m, []byte("last"))
	var kv mvccpb.KeyValue
	if err := kv.Unmarshal(m); err != nil || string(kv.Value) != "last" || string(valueIn(m)) != "last" {
		t.Errorf("repeated value: gogo %q (%v), valueIn %q", kv.Value, err, valueIn(m))
	}
}
