package migrate

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"go.etcd.io/etcd/api/v3/authpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/version"
	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/etcdserver/api/membership"
	"go.etcd.io/etcd/server/v3/lease/leasepb"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/encoding/protowire"
)

// etcd's backend (go.etcd.io/etcd/server/v3/storage): a bbolt file whose "key" bucket maps
// revision keys — main:8 BE | '_' | sub:8 BE, and a trailing 't' for a deletion — to a
// marshalled mvccpb.KeyValue (a deletion's holds the key alone), in revision order; "lease"
// maps an ID (8 bytes BE) to a leasepb.Lease; "meta" holds the consistent index and term,
// the compaction revisions (scheduledCompactRev, finishedCompactRev: revision keys) and,
// since 3.6, the storage version; "auth" holds authEnabled and authRevision, "authUsers"
// and "authRoles" an authpb.User and authpb.Role by name. `etcdctl snapshot save` writes
// the backend followed by the SHA-256 of it.
const (
	revKeyLen = 17
	// hashLen is the size of the SHA-256 trailer `etcdctl snapshot save` appends; a file
	// carries one when its size is 32 past a multiple of 512 (etcdutl's own test).
	hashLen = sha256.Size
)

// EtcdInfo is what a read of an etcd backend found beside the state.
type EtcdInfo struct {
	HashChecked      bool   // the SHA-256 trailer was present and matched
	FromCopy         bool   // a running etcd held the file: a copy of it was read
	StorageVersion   string // meta's storageVersion (3.6 and later), "" before
	ConsistentIndex  uint64
	Term             uint64
	ScheduledCompact int64 // 0 when absent
	FinishedCompact  int64 // 0 when absent
	MaxKeyRev        int64 // the highest main revision in the key bucket
	// Markers counts key bucket entries without a key (the revision `etcdutl snapshot restore
	// --bump-revision` or `meganode store export` writes to carry the revision): they set the
	// current revision and are not keys.
	Markers int
}

// hasHashTrailer tells whether a file of n bytes ends with a snapshot's SHA-256.
func hasHashTrailer(n int64) bool { return n%512 == hashLen }

// ReadEtcdDB reads an etcd 3.5/3.6 backend file (`etcdctl snapshot save` output, whose
// SHA-256 trailer is verified, or a member's member/snap/db) into the store's snapshot
// form: every retained version of every key, the current revision (the highest revision in
// the key bucket, or the compaction revision if higher, as etcd restores it), the compaction
// point, the leases (remaining TTL = the TTL etcd gives a lease when it restores it) and the
// auth state. The file is opened read-only; one a running etcd holds is read from a copy.
// A file without a verified SHA-256 gets opts.Check before its pages are walked. Errors name
// no file: the caller does.
func ReadEtcdDB(path string, opts ReadOptions) (*Snapshot, *EtcdInfo, error) {
	var s *Snapshot
	var info *EtcdInfo
	err := viewEtcdDB(path, opts, false, func(ss *Snapshot, ii *EtcdInfo) error {
		s, info = ss, ii
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return s, info, nil
}

// viewEtcdDB reads the file as ReadEtcdDB does and hands the state to use while the file is
// still open. With borrow, the values are not copied: they are the file's mapped pages, valid
// only until use returns — the state of 1M nodes is then converted without 7 GiB of copies.
// A panic in use (a fault on a page of a damaged file) is an error like the file's own.
func viewEtcdDB(path string, opts ReadOptions, borrow bool, use func(*Snapshot, *EtcdInfo) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	info := &EtcdInfo{}
	dbSize := st.Size()
	if hasHashTrailer(dbSize) {
		dbSize -= hashLen
		h := sha256.New()
		if _, err := io.CopyN(h, f, dbSize); err != nil {
			f.Close()
			return err
		}
		want := make([]byte, hashLen)
		if _, err := io.ReadFull(f, want); err != nil {
			f.Close()
			return err
		}
		if !bytes.Equal(h.Sum(nil), want) {
			f.Close()
			return errors.New("corrupt or truncated: the SHA-256 at its end does not match its contents")
		}
		info.HashChecked = true
	}
	f.Close()
	if dbSize < 2*512 {
		return fmt.Errorf("not an etcd backend: %d bytes (truncated?)", dbSize)
	}
	open := func(p string) (db *bolt.DB, err error) {
		err = safely(func() error {
			db, err = bolt.Open(p, 0o400, &bolt.Options{ReadOnly: true, Timeout: 2 * time.Second})
			return err
		})
		return db, err
	}
	db, err := open(path)
	if errors.Is(err, berrors.ErrTimeout) {
		// A running etcd holds it (member/snap/db): read a copy of what is on disk now.
		tmp, cerr := copyPrefix(path, dbSize)
		if cerr != nil {
			return cerr
		}
		defer os.Remove(tmp)
		info.FromCopy = true
		db, err = open(tmp)
	}
	if err != nil {
		return fmt.Errorf("not a readable etcd backend (bbolt: %v)", err)
	}
	defer db.Close()
	err = safely(func() error {
		return db.View(func(tx *bolt.Tx) error {
			if need := tx.Size(); need > dbSize {
				return fmt.Errorf("truncated: the database needs %d bytes, the file has %d", need, dbSize)
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	if !info.HashChecked && opts.Check != nil {
		if err := opts.Check(db.Path()); err != nil {
			return err
		}
	}
	return safely(func() error {
		return db.View(func(tx *bolt.Tx) error {
			// Every page is read here first, in this goroutine, where a panic of bbolt's on a
			// damaged page is recovered (safely). What cannot be recovered — a page that refers
			// back to its parent makes bbolt descend without end — is for opts.Check to find.
			if err := tx.ForEach(func(name []byte, b *bolt.Bucket) error {
				return b.ForEach(func(k, v []byte) error { return nil })
			}); err != nil {
				return fmt.Errorf("corrupt (%v)", err)
			}
			s, err := readBuckets(tx, info, borrow)
			if err != nil {
				return err
			}
			return use(s, info)
		})
	})
}

// ReadOptions tune ReadEtcdDB.
type ReadOptions struct {
	// Check, when set, checks the structure of a file whose SHA-256 could not be verified (a
	// member's member/snap/db) before its pages are walked: CheckBackend, run in a process of
	// its own (the CLI's `meganode store check-backend`), as some damage ends the process that
	// meets it.
	Check func(path string) error
}

// CheckBackend runs bbolt's consistency check (Tx.Check: every page reachable once, of a valid
// type, keys in order, free pages accounted for) on the bbolt file at path. Some damage makes
// bbolt panic in a goroutine of its own or recurse without end (a branch page that refers to
// an ancestor): run it in a process of its own, whose crash then means a damaged file.
func CheckBackend(path string) error {
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 2 * time.Second})
	if err != nil {
		return fmt.Errorf("not a readable bbolt file (%v)", err)
	}
	defer db.Close()
	return db.View(func(tx *bolt.Tx) error {
		var errs []error
		for err := range tx.Check() {
			errs = append(errs, err)
		}
		if len(errs) > 0 {
			return fmt.Errorf("corrupt (bbolt check: %v; %d problems)", errs[0], len(errs))
		}
		return nil
	})
}

// safely runs f, turning a panic — bbolt panics on damaged pages (an invalid page type, a
// page id past the high-water mark), and reading past a truncated file's end faults — into
// an error.
func safely(f func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("corrupt (%v)", r)
		}
	}()
	return f()
}

// copyPrefix copies the first n bytes of path to a temporary file.
func copyPrefix(path string, n int64) (string, error) {
	src, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer src.Close()
	dst, err := os.CreateTemp("", "meganode-import-*.db")
	if err != nil {
		return "", err
	}
	if _, err := io.CopyN(dst, src, n); err != nil {
		dst.Close()
		os.Remove(dst.Name())
		return "", err
	}
	return dst.Name(), dst.Close()
}

// parseRevKey splits a key bucket key.
func parseRevKey(k []byte) (main, sub int64, tombstone bool, ok bool) {
	switch {
	case len(k) == revKeyLen && k[8] == '_':
	case len(k) == revKeyLen+1 && k[8] == '_' && k[revKeyLen] == 't':
		tombstone = true
	default:
		return 0, 0, false, false
	}
	return int64(binary.BigEndian.Uint64(k[:8])), int64(binary.BigEndian.Uint64(k[9:17])), tombstone, true
}

// valueIn returns the value of the marshalled mvccpb.KeyValue m as a slice of m itself (field
// 5; the last one, as protobuf decodes a repeated scalar field), nil without one. m was
// decoded whole before (kv.Unmarshal), so it is well formed.
func valueIn(m []byte) []byte {
	const valueField = 5 // mvccpb.KeyValue.value
	var val []byte
	for len(m) > 0 {
		num, typ, n := protowire.ConsumeTag(m)
		if n < 0 {
			return val
		}
		m = m[n:]
		if num == valueField && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(m)
			if n < 0 {
				return val
			}
			val, m = v, m[n:]
			continue
		}
		if n = protowire.ConsumeFieldValue(num, typ, m); n < 0 {
			return val
		}
		m = m[n:]
	}
	return val
}

// metaRev reads a compaction revision from meta (a revision key), 0 when absent.
func metaRev(meta *bolt.Bucket, name []byte) (int64, error) {
	v := meta.Get(name)
	if v == nil {
		return 0, nil
	}
	main, _, _, ok := parseRevKey(v)
	if !ok || len(v) != revKeyLen {
		return 0, fmt.Errorf("corrupt: meta %s is %x, not a revision", name, v)
	}
	return main, nil
}

func readBuckets(tx *bolt.Tx, info *EtcdInfo, borrow bool) (*Snapshot, error) {
	kb := tx.Bucket(schema.Key.Name())
	meta := tx.Bucket(schema.Meta.Name())
	if kb == nil || meta == nil {
		return nil, errors.New("not an etcd backend: no key or meta bucket")
	}
	if v := meta.Get(schema.MetaConsistentIndexKeyName); len(v) == 8 {
		info.ConsistentIndex = binary.BigEndian.Uint64(v)
	}
	if v := meta.Get(schema.MetaTermKeyName); len(v) == 8 {
		info.Term = binary.BigEndian.Uint64(v)
	}
	info.StorageVersion = string(meta.Get(schema.MetaStorageVersionName))
	var err error
	if info.ScheduledCompact, err = metaRev(meta, schema.ScheduledCompactKeyName); err != nil {
		return nil, err
	}
	if info.FinishedCompact, err = metaRev(meta, schema.FinishedCompactKeyName); err != nil {
		return nil, err
	}
	s := &Snapshot{Compacted: NeverCompacted}
	// etcd finishes an interrupted compaction when it restores (the scheduled one).
	if c := max(info.ScheduledCompact, info.FinishedCompact); c > 0 {
		s.Compacted = c
	}
	index := map[string]int{}
	var kv mvccpb.KeyValue
	err = kb.ForEach(func(k, v []byte) error {
		main, sub, tomb, ok := parseRevKey(k)
		if !ok {
			return fmt.Errorf("corrupt: key bucket entry %x is not a revision", k)
		}
		if main < info.MaxKeyRev {
			return fmt.Errorf("corrupt: revision %d after %d", main, info.MaxKeyRev)
		}
		info.MaxKeyRev = main
		kv = mvccpb.KeyValue{Key: kv.Key[:0], Value: kv.Value[:0]} // the buffers are reused
		if err := kv.Unmarshal(v); err != nil {
			return fmt.Errorf("corrupt: revision %d: %v", main, err)
		}
		if len(kv.Key) == 0 {
			info.Markers++
			return nil
		}
		if sub < 0 || sub > 1<<32-1 {
			return fmt.Errorf("revision %d_%d: sub-revision out of range", main, sub)
		}
		ver := Version{ModRev: main, Sub: uint32(sub), Value: []byte{}}
		if !tomb {
			if kv.ModRevision != main || kv.Version < 1 || kv.CreateRevision < 1 || kv.CreateRevision > main {
				return fmt.Errorf("corrupt: revision %d holds key %q with mod %d, create %d, version %d",
					main, kv.Key, kv.ModRevision, kv.CreateRevision, kv.Version)
			}
			ver.CreateRev, ver.Version, ver.Lease = kv.CreateRevision, kv.Version, kv.Lease
			if len(kv.Value) > 0 {
				if borrow {
					ver.Value = valueIn(v)
				} else {
					ver.Value = bytes.Clone(kv.Value)
				}
			}
		}
		i, seen := index[string(kv.Key)]
		if !seen {
			i = len(s.Keys)
			index[string(kv.Key)] = i
			s.Keys = append(s.Keys, Key{Key: bytes.Clone(kv.Key)})
		}
		s.Keys[i].Versions = append(s.Keys[i].Versions, ver)
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.Rev = max(info.MaxKeyRev, s.Compacted, 1)
	if lb := tx.Bucket(schema.Lease.Name()); lb != nil {
		err := lb.ForEach(func(k, v []byte) error {
			var l leasepb.Lease
			if err := l.Unmarshal(v); err != nil || len(k) != 8 || int64(binary.BigEndian.Uint64(k)) != l.ID {
				return fmt.Errorf("corrupt: lease entry %x", k)
			}
			rem := l.RemainingTTL
			if rem <= 0 {
				rem = l.TTL
			}
			s.Leases = append(s.Leases, Lease{ID: l.ID, Granted: l.TTL, Remaining: rem})
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	if s.Auth, err = readAuth(tx); err != nil {
		return nil, err
	}
	s.Sort()
	return s, nil
}

// readAuth reads the auth buckets; nil when the backend has none.
func readAuth(tx *bolt.Tx) (*Auth, error) {
	ab := tx.Bucket(schema.Auth.Name())
	if ab == nil {
		return nil, nil
	}
	a := &Auth{Enabled: bytes.Equal(ab.Get(schema.AuthEnabledKeyName), []byte{1})}
	if v := ab.Get(schema.AuthRevisionKeyName); len(v) == 8 {
		a.Revision = binary.BigEndian.Uint64(v)
	}
	if ub := tx.Bucket(schema.AuthUsers.Name()); ub != nil {
		err := ub.ForEach(func(k, v []byte) error {
			var u authpb.User
			if err := u.Unmarshal(v); err != nil {
				return fmt.Errorf("corrupt: user %q: %v", k, err)
			}
			roles := append([]string(nil), u.Roles...)
			sort.Strings(roles)
			a.Users = append(a.Users, User{Name: string(u.Name), Password: string(u.Password),
				NoPassword: u.Options != nil && u.Options.NoPassword, Roles: roles})
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	if rb := tx.Bucket(schema.AuthRoles.Name()); rb != nil {
		err := rb.ForEach(func(k, v []byte) error {
			var r authpb.Role
			if err := r.Unmarshal(v); err != nil {
				return fmt.Errorf("corrupt: role %q: %v", k, err)
			}
			role := Role{Name: string(r.Name)}
			for _, p := range r.KeyPermission {
				if p.PermType < 0 || p.PermType > 2 {
					return fmt.Errorf("corrupt: role %q: permission type %d", k, p.PermType)
				}
				role.Perms = append(role.Perms, Perm{Type: uint8(p.PermType), Key: append([]byte{}, p.Key...), RangeEnd: append([]byte{}, p.RangeEnd...)})
			}
			a.Roles = append(a.Roles, role)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return a, nil
}

// EtcdMeta is what an etcd backend holds that the store's snapshot does not: the raft
// position and membership of the member it comes from.
type EtcdMeta struct {
	MemberID      uint64 // the store's member ID (a voter of confState); 0: 1
	Term, Index   uint64 // raft term and consistent index; 0: 1 and the revision
	Members       []membership.Member
	DisableMarker bool // never write a revision marker (see WriteEtcdSnapshot)
}

// WriteResult tells what WriteEtcdSnapshot wrote.
type WriteResult struct {
	Bytes     int64  // the file's size, SHA-256 included
	SHA256    string // hex
	MarkerRev int64  // the revision of the marker written, 0 for none
}

// WriteEtcdSnapshot writes s as etcd 3.6 writes its backend — through etcd's own backend and
// schema code: buckets key, meta (consistent index and term, confState, the compaction
// revisions, storage version), lease, alarm, cluster (cluster version), members,
// members_removed, auth, authUsers, authRoles — then copies it as `etcdctl snapshot save`
// does (the backend's snapshot, followed by its SHA-256) to w.
//
// etcd's current revision after a restore is the highest revision in its key bucket, or the
// compaction revision if higher. When the store's revision is above both (a store resumes
// above its revision floor after a restart, without a write at it), a deletion of the empty
// key at that revision carries it: etcd's Range and Watch never show the empty key and
// `etcdutl snapshot status` does not count it, and ReadEtcdDB skips it.
func WriteEtcdSnapshot(w io.Writer, s *Snapshot, m EtcdMeta, workDir string) (WriteResult, error) {
	type entry struct {
		key []byte
		v   *Version
	}
	var all []entry
	for i := range s.Keys {
		k := &s.Keys[i]
		for j := range k.Versions {
			all = append(all, entry{k.Key, &k.Versions[j]})
		}
	}
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i].v, all[j].v
		return a.ModRev < b.ModRev || a.ModRev == b.ModRev && a.Sub < b.Sub
	})
	return writeEtcdSnapshot(w, s, func(put func(key []byte, v *Version) error) error {
		for _, e := range all {
			if err := put(e.key, e.v); err != nil {
				return err
			}
		}
		return nil
	}, m, workDir)
}

// writeEtcdSnapshot is WriteEtcdSnapshot for a state given as head (its revision, compaction
// point, leases and auth state; Keys unused) and each, which hands every version to put in
// revision order (main, then sub).
func writeEtcdSnapshot(w io.Writer, head *Snapshot, each func(put func(key []byte, v *Version) error) error,
	m EtcdMeta, workDir string) (WriteResult, error) {
	s := head
	var res WriteResult
	dir, err := os.MkdirTemp(workDir, ".meganode-export-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	lg := zap.NewNop()
	be := backend.NewDefaultBackend(lg, filepath.Join(dir, "db"), backend.WithMmapSize(64<<20))
	closed := false
	defer func() {
		if !closed {
			be.Close()
		}
	}()
	var maxRev int64
	tx := be.BatchTx()
	tx.LockOutsideApply()
	for _, b := range schema.AllBuckets {
		tx.UnsafeCreateBucket(b)
	}
	put := func(rev mvcc.Revision, tomb bool, kv *mvccpb.KeyValue) error {
		k := mvcc.RevToBytes(rev, mvcc.NewRevBytes())
		if tomb {
			k = append(k, 't')
		}
		v, err := kv.Marshal()
		if err != nil {
			return err
		}
		tx.UnsafeSeqPut(schema.Key, k, v)
		return nil
	}
	puts, last := 0, mvcc.Revision{Main: -1}
	err = each(func(key []byte, v *Version) error {
		rev := mvcc.Revision{Main: v.ModRev, Sub: int64(v.Sub)}
		if !rev.GreaterThan(last) { // two versions at one revision would overwrite each other
			return fmt.Errorf("revision %d_%d after %d_%d: not in revision order", rev.Main, rev.Sub, last.Main, last.Sub)
		}
		last = rev
		maxRev = max(maxRev, v.ModRev)
		kv := &mvccpb.KeyValue{Key: key}
		if !v.Tombstone() {
			kv = &mvccpb.KeyValue{Key: key, CreateRevision: v.CreateRev, ModRevision: v.ModRev,
				Version: v.Version, Value: v.Value, Lease: v.Lease}
		}
		if err := put(rev, v.Tombstone(), kv); err != nil {
			return err
		}
		if puts++; puts%10000 == 0 { // bound what one bbolt transaction holds
			tx.Unlock()
			be.ForceCommit()
			tx.LockOutsideApply()
		}
		return nil
	})
	if err != nil {
		tx.Unlock()
		return res, err
	}
	if s.Rev > maxRev && s.Rev > s.Compacted && !m.DisableMarker {
		if err := put(mvcc.Revision{Main: s.Rev}, true, &mvccpb.KeyValue{}); err != nil {
			tx.Unlock()
			return res, err
		}
		res.MarkerRev = s.Rev
	}
	if s.Compacted > 0 {
		mvcc.UnsafeSetScheduledCompact(tx, s.Compacted)
		mvcc.UnsafeSetFinishedCompact(tx, s.Compacted)
	}
	id, term, index := m.MemberID, m.Term, m.Index
	if id == 0 {
		id = 1
	}
	if term == 0 {
		term = 1
	}
	if index == 0 {
		index = uint64(max(s.Rev, 1))
	}
	schema.UnsafeUpdateConsistentIndexForce(tx, index, term)
	schema.MustUnsafeSaveConfStateToBackend(lg, tx, &raftpb.ConfState{Voters: []uint64{id}})
	sv := version.V3_6 // what etcd 3.6 writes: "3.6.0"
	schema.UnsafeSetStorageVersion(tx, &sv)
	for _, l := range s.Leases {
		// TTL as granted; no remaining TTL: etcd then gives the lease its full TTL when it
		// restores it, as the store does after a restart or a restore.
		schema.MustUnsafePutLease(tx, &leasepb.Lease{ID: l.ID, TTL: l.Granted})
	}
	tx.Unlock()
	mb := schema.NewMembershipBackend(lg, be)
	mb.MustSaveClusterVersionToBackend(&sv)
	for i := range m.Members {
		mb.MustSaveMemberToBackend(&m.Members[i])
	}
	if s.Auth != nil {
		atx := schema.NewAuthBackend(lg, be).BatchTx()
		atx.Lock()
		atx.UnsafeSaveAuthEnabled(s.Auth.Enabled)
		atx.UnsafeSaveAuthRevision(s.Auth.Revision)
		for _, u := range s.Auth.Users {
			atx.UnsafePutUser(&authpb.User{Name: []byte(u.Name), Password: []byte(u.Password), Roles: u.Roles,
				Options: &authpb.UserAddOptions{NoPassword: u.NoPassword}})
		}
		for _, r := range s.Auth.Roles {
			role := &authpb.Role{Name: []byte(r.Name)}
			for _, p := range r.Perms {
				role.KeyPermission = append(role.KeyPermission, &authpb.Permission{PermType: authpb.Permission_Type(p.Type), Key: p.Key, RangeEnd: p.RangeEnd})
			}
			atx.UnsafePutRole(role)
		}
		atx.Unlock()
	}
	be.ForceCommit()
	snap := be.Snapshot()
	h := sha256.New()
	n, err := snap.WriteTo(io.MultiWriter(w, h))
	snap.Close()
	if err != nil {
		return res, err
	}
	sum := h.Sum(nil)
	if _, err := w.Write(sum); err != nil {
		return res, err
	}
	closed = true
	if err := be.Close(); err != nil {
		return res, err
	}
	res.Bytes = n + hashLen
	res.SHA256 = fmt.Sprintf("%x", sum)
	return res, nil
}

// MemberFromList makes the membership.Member etcd keeps in its members bucket.
func MemberFromList(id uint64, name string, peerURLs, clientURLs []string, learner bool) membership.Member {
	return membership.Member{ID: types.ID(id),
		RaftAttributes: membership.RaftAttributes{PeerURLs: peerURLs, IsLearner: learner},
		Attributes:     membership.Attributes{Name: name, ClientURLs: clientURLs}}
}
