// Package migrate moves data between etcd and meganode-store with its revisions
// (issue 38): an etcd 3.5/3.6 backend (a bbolt file: `etcdctl snapshot save` output or a
// member's member/snap/db) becomes the store's snapshot (MGNSNAP1, what
// `meganode-store --restore-from` reads), and the store's snapshot (what its
// Maintenance.Snapshot streams) becomes an etcd snapshot file that `etcdutl snapshot
// restore` turns into an etcd member. docs/design.md, "Moving data between etcd and the
// store", maps the two formats field by field.
package migrate

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"sort"
)

// The store's snapshot format (docs/design.md §5, store/src/snapshot.rs), little-endian:
//
//	"MGNSNAP1" | rev:i64 | compacted:i64 | n_leases:u64 | (id:i64 granted:i64 remaining:i64)*
//	  | n_keys:u64 | key* | ["AUTH" | len:u64 | auth state] | crc32c:u32 (of everything before)
//	key: key_len:u32 | key | n_versions:u32 | (mod_rev:i64 sub:u32 create_rev:i64 version:i64
//	     lease:i64 value_len:u32 value)*      versions oldest first; version 0 is a tombstone
//
// The auth state (store/src/auth/persist.rs):
//
//	"MGNAUTH1" | enabled:u8 | revision:u64 | n_users:u32 | user* | n_roles:u32 | role* | crc32c:u32
//	user: name | password (bcrypt hash text, empty without one) | no_password:u8 | n_roles:u32 | name*
//	role: name | n_perms:u32 | (perm_type:u8 | key | range_end)*
//	name, password, key, range_end: len:u32 | bytes
const (
	SnapshotMagic = "MGNSNAP1"
	authMagic     = "MGNAUTH1"
	authTag       = "AUTH"
	// NeverCompacted is the compaction point of a store that was never compacted.
	NeverCompacted = -1
	// maxLen bounds one length read from a snapshot: a garbled one must not make the
	// reader allocate gigabytes.
	maxLen = 1 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Version is one revision of a key: a put, or a tombstone (Version 0) ending a generation.
type Version struct {
	ModRev    int64
	Sub       uint32
	CreateRev int64
	Version   int64
	Lease     int64
	Value     []byte
}

// Tombstone tells a deletion.
func (v Version) Tombstone() bool { return v.Version == 0 }

// Key is a key with its retained versions, oldest first.
type Key struct {
	Key      []byte
	Versions []Version
}

// Lease is a lease as the snapshot keeps it: its granted TTL and the TTL left (seconds).
type Lease struct {
	ID, Granted, Remaining int64
}

// Perm is a role's key permission as granted (etcd's authpb.Permission).
type Perm struct {
	Type          uint8 // 0 read, 1 write, 2 readwrite
	Key, RangeEnd []byte
}

// User is an auth user: its bcrypt hash (empty for a user without password) and sorted roles.
type User struct {
	Name, Password string
	NoPassword     bool
	Roles          []string
}

// Role is an auth role with its permissions.
type Role struct {
	Name  string
	Perms []Perm
}

// Auth is the auth state (etcd's auth, authUsers and authRoles buckets).
type Auth struct {
	Enabled  bool
	Revision uint64
	Users    []User // by name
	Roles    []Role // by name
}

// Snapshot is the whole state the store's snapshot carries.
type Snapshot struct {
	Rev       int64 // the current revision
	Compacted int64 // the compaction point, NeverCompacted for none
	Leases    []Lease
	Keys      []Key
	Auth      *Auth // nil: the snapshot carries no auth state
}

// Stats counts what a snapshot holds.
type Stats struct {
	Keys, LiveKeys, Versions, Tombstones, Leases, Users, Roles int
	MaxModRev                                                  int64
}

// Stats counts the snapshot's keys, versions and auth entries.
func (s *Snapshot) Stats() Stats {
	st := s.headStats()
	for i := range s.Keys {
		st.addKey(&s.Keys[i])
	}
	return st
}

// headStats counts what the snapshot holds besides its keys.
func (s *Snapshot) headStats() Stats {
	st := Stats{Leases: len(s.Leases)}
	if s.Auth != nil {
		st.Users, st.Roles = len(s.Auth.Users), len(s.Auth.Roles)
	}
	return st
}

// addKey counts one key and its versions.
func (st *Stats) addKey(k *Key) {
	st.Keys++
	st.Versions += len(k.Versions)
	for _, v := range k.Versions {
		if v.Tombstone() {
			st.Tombstones++
		}
		st.MaxModRev = max(st.MaxModRev, v.ModRev)
	}
	if n := len(k.Versions); n > 0 && !k.Versions[n-1].Tombstone() {
		st.LiveKeys++
	}
}

// Sort puts keys, leases, users and roles in a canonical order (the formats do not care;
// the output is then the same for the same state).
func (s *Snapshot) Sort() {
	sort.Slice(s.Keys, func(i, j int) bool { return bytes.Compare(s.Keys[i].Key, s.Keys[j].Key) < 0 })
	sort.Slice(s.Leases, func(i, j int) bool { return s.Leases[i].ID < s.Leases[j].ID })
	if s.Auth != nil {
		sort.Slice(s.Auth.Users, func(i, j int) bool { return s.Auth.Users[i].Name < s.Auth.Users[j].Name })
		sort.Slice(s.Auth.Roles, func(i, j int) bool { return s.Auth.Roles[i].Name < s.Auth.Roles[j].Name })
	}
}

// crcWriter writes through a buffer and keeps the CRC-32C of what it wrote.
type crcWriter struct {
	w   *bufio.Writer
	crc hash.Hash32
	b   [8]byte
	err error
}

func newCRCWriter(w io.Writer) *crcWriter {
	return &crcWriter{w: bufio.NewWriterSize(w, 1<<20), crc: crc32.New(castagnoli)}
}

func (c *crcWriter) put(p []byte) {
	if c.err != nil {
		return
	}
	c.crc.Write(p)
	_, c.err = c.w.Write(p)
}
func (c *crcWriter) u8(v uint8) { c.put([]byte{v}) }
func (c *crcWriter) u32(v uint32) {
	binary.LittleEndian.PutUint32(c.b[:4], v)
	c.put(c.b[:4])
}
func (c *crcWriter) u64(v uint64) {
	binary.LittleEndian.PutUint64(c.b[:], v)
	c.put(c.b[:])
}
func (c *crcWriter) i64(v int64) { c.u64(uint64(v)) }
func (c *crcWriter) bytes32(p []byte) {
	c.u32(uint32(len(p)))
	c.put(p)
}

// finish appends the CRC of everything written and flushes.
func (c *crcWriter) finish() error {
	if c.err != nil {
		return c.err
	}
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], c.crc.Sum32())
	if _, err := c.w.Write(b[:]); err != nil {
		return err
	}
	return c.w.Flush()
}

// WriteSnapshot writes s as MGNSNAP1.
func WriteSnapshot(w io.Writer, s *Snapshot) error {
	for _, k := range s.Keys {
		if len(k.Key) > maxLen || len(k.Versions) > maxLen {
			return fmt.Errorf("key %q: too large for the snapshot format", k.Key)
		}
	}
	c := newCRCWriter(w)
	c.put([]byte(SnapshotMagic))
	c.i64(s.Rev)
	c.i64(s.Compacted)
	c.u64(uint64(len(s.Leases)))
	for _, l := range s.Leases {
		c.i64(l.ID)
		c.i64(l.Granted)
		c.i64(l.Remaining)
	}
	c.u64(uint64(len(s.Keys)))
	for _, k := range s.Keys {
		c.bytes32(k.Key)
		c.u32(uint32(len(k.Versions)))
		for _, v := range k.Versions {
			c.i64(v.ModRev)
			c.u32(v.Sub)
			c.i64(v.CreateRev)
			c.i64(v.Version)
			c.i64(v.Lease)
			c.bytes32(v.Value)
		}
	}
	if s.Auth != nil {
		a := EncodeAuth(s.Auth)
		c.put([]byte(authTag))
		c.u64(uint64(len(a)))
		c.put(a)
	}
	return c.finish()
}

// EncodeAuth encodes the auth state as the store's auth.state file (MGNAUTH1).
func EncodeAuth(a *Auth) []byte {
	var buf bytes.Buffer
	c := newCRCWriter(&buf)
	c.put([]byte(authMagic))
	if a.Enabled {
		c.u8(1)
	} else {
		c.u8(0)
	}
	c.u64(a.Revision)
	c.u32(uint32(len(a.Users)))
	for _, u := range a.Users {
		c.bytes32([]byte(u.Name))
		c.bytes32([]byte(u.Password))
		if u.NoPassword {
			c.u8(1)
		} else {
			c.u8(0)
		}
		c.u32(uint32(len(u.Roles)))
		for _, r := range u.Roles {
			c.bytes32([]byte(r))
		}
	}
	c.u32(uint32(len(a.Roles)))
	for _, r := range a.Roles {
		c.bytes32([]byte(r.Name))
		c.u32(uint32(len(r.Perms)))
		for _, p := range r.Perms {
			c.u8(p.Type)
			c.bytes32(p.Key)
			c.bytes32(p.RangeEnd)
		}
	}
	_ = c.finish() // a bytes.Buffer does not fail
	return buf.Bytes()
}

// errTruncated is what a read past the end of a snapshot gives.
var errTruncated = errors.New("truncated")

// crcReader reads a byte stream and keeps the CRC-32C of what it consumed.
type crcReader struct {
	r   *bufio.Reader
	crc hash.Hash32
	b   [8]byte
	n   int64
}

func (c *crcReader) take(p []byte) error {
	if _, err := io.ReadFull(c.r, p); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return errTruncated
		}
		return err
	}
	c.crc.Write(p)
	c.n += int64(len(p))
	return nil
}

func (c *crcReader) u8() (uint8, error) {
	err := c.take(c.b[:1])
	return c.b[0], err
}
func (c *crcReader) u32() (uint32, error) {
	err := c.take(c.b[:4])
	return binary.LittleEndian.Uint32(c.b[:4]), err
}
func (c *crcReader) u64() (uint64, error) {
	err := c.take(c.b[:])
	return binary.LittleEndian.Uint64(c.b[:]), err
}
func (c *crcReader) i64() (int64, error) {
	v, err := c.u64()
	return int64(v), err
}

// bytesN reads n bytes; n is bounded first.
func (c *crcReader) bytesN(n uint64) ([]byte, error) {
	if n > maxLen {
		return nil, fmt.Errorf("a length of %d bytes at offset %d", n, c.n)
	}
	p := make([]byte, n)
	return p, c.take(p)
}

func (c *crcReader) bytes32() ([]byte, error) {
	n, err := c.u32()
	if err != nil {
		return nil, err
	}
	return c.bytesN(uint64(n))
}

// checkCRC reads the 4-byte checksum (not part of the CRC) and compares it.
func (c *crcReader) checkCRC() error {
	want := c.crc.Sum32()
	var b [4]byte
	if _, err := io.ReadFull(c.r, b[:]); err != nil {
		return errTruncated
	}
	if binary.LittleEndian.Uint32(b[:]) != want {
		return errors.New("checksum mismatch")
	}
	if _, err := c.r.ReadByte(); err != io.EOF {
		return errors.New("bytes after the checksum")
	}
	return nil
}

// ReadSnapshot decodes an MGNSNAP1 stream (as the store writes it and Maintenance.Snapshot
// streams it), verifying its checksum; r is read to its end.
func ReadSnapshot(r io.Reader) (*Snapshot, error) {
	s := &Snapshot{}
	if err := decodeSnapshot(r, s, nil); err != nil {
		return nil, err
	}
	return s, nil
}

// decodeSnapshot decodes an MGNSNAP1 stream into s, verifying its checksum; r is read to its
// end. With eachKey set, every key goes to it as soon as it is decoded instead of into s.Keys:
// a snapshot larger than memory is then converted in one pass (Export). eachKey may keep the
// key; the checksum is only known at the end, so what it did with the keys must be undone when
// decodeSnapshot fails.
func decodeSnapshot(r io.Reader, s *Snapshot, eachKey func(Key) error) error {
	c := &crcReader{r: bufio.NewReaderSize(r, 1<<20), crc: crc32.New(castagnoli)}
	magic := make([]byte, len(SnapshotMagic))
	if err := c.take(magic); err != nil || string(magic) != SnapshotMagic {
		return errors.New("not a meganode snapshot (no MGNSNAP1 magic)")
	}
	var err error
	if s.Rev, err = c.i64(); err != nil {
		return err
	}
	if s.Compacted, err = c.i64(); err != nil {
		return err
	}
	nl, err := c.u64()
	if err != nil {
		return err
	}
	if nl > maxLen {
		return fmt.Errorf("%d leases", nl)
	}
	for range nl {
		var l Lease
		if l.ID, err = c.i64(); err != nil {
			return err
		}
		if l.Granted, err = c.i64(); err != nil {
			return err
		}
		if l.Remaining, err = c.i64(); err != nil {
			return err
		}
		s.Leases = append(s.Leases, l)
	}
	nk, err := c.u64()
	if err != nil {
		return err
	}
	if nk > maxLen {
		return fmt.Errorf("%d keys", nk)
	}
	if eachKey == nil {
		s.Keys = make([]Key, 0, min(nk, 1<<20))
		eachKey = func(k Key) error {
			s.Keys = append(s.Keys, k)
			return nil
		}
	}
	for range nk {
		var k Key
		if k.Key, err = c.bytes32(); err != nil {
			return err
		}
		nv, err := c.u32()
		if err != nil {
			return err
		}
		if nv > maxLen {
			return fmt.Errorf("key %q: %d versions", k.Key, nv)
		}
		k.Versions = make([]Version, 0, min(nv, 1<<16))
		for range nv {
			var v Version
			if v.ModRev, err = c.i64(); err != nil {
				return err
			}
			if v.Sub, err = c.u32(); err != nil {
				return err
			}
			if v.CreateRev, err = c.i64(); err != nil {
				return err
			}
			if v.Version, err = c.i64(); err != nil {
				return err
			}
			if v.Lease, err = c.i64(); err != nil {
				return err
			}
			if v.Value, err = c.bytes32(); err != nil {
				return err
			}
			k.Versions = append(k.Versions, v)
		}
		if err := eachKey(k); err != nil {
			return err
		}
	}
	// The auth state, when present, sits between the keys and the checksum: 12 or more
	// bytes left that start with its tag (the store's decoder makes the same call).
	if p, _ := c.r.Peek(len(authTag) + 8 + 4); len(p) == len(authTag)+8+4 && string(p[:len(authTag)]) == authTag {
		tag := make([]byte, len(authTag))
		if err := c.take(tag); err != nil {
			return err
		}
		n, err := c.u64()
		if err != nil {
			return err
		}
		b, err := c.bytesN(n)
		if err != nil {
			return err
		}
		if s.Auth, err = DecodeAuth(b); err != nil {
			return err
		}
	}
	return c.checkCRC()
}

// DecodeAuth decodes an MGNAUTH1 auth state, verifying its checksum.
func DecodeAuth(b []byte) (*Auth, error) {
	if len(b) < len(authMagic)+4 || string(b[:len(authMagic)]) != authMagic {
		return nil, errors.New("auth state: no MGNAUTH1 magic")
	}
	body, tail := b[:len(b)-4], b[len(b)-4:]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(tail) {
		return nil, errors.New("auth state: checksum mismatch")
	}
	c := &crcReader{r: bufio.NewReader(bytes.NewReader(body[len(authMagic):])), crc: crc32.New(castagnoli)}
	fail := func(err error) (*Auth, error) { return nil, fmt.Errorf("auth state: %w", err) }
	a := &Auth{}
	en, err := c.u8()
	if err != nil {
		return fail(err)
	}
	a.Enabled = en != 0
	if a.Revision, err = c.u64(); err != nil {
		return fail(err)
	}
	str := func() (string, error) {
		p, err := c.bytes32()
		return string(p), err
	}
	nu, err := c.u32()
	if err != nil {
		return fail(err)
	}
	for range nu {
		var u User
		if u.Name, err = str(); err != nil {
			return fail(err)
		}
		if u.Password, err = str(); err != nil {
			return fail(err)
		}
		np, err := c.u8()
		if err != nil {
			return fail(err)
		}
		u.NoPassword = np != 0
		nr, err := c.u32()
		if err != nil {
			return fail(err)
		}
		for range nr {
			r, err := str()
			if err != nil {
				return fail(err)
			}
			u.Roles = append(u.Roles, r)
		}
		a.Users = append(a.Users, u)
	}
	nr, err := c.u32()
	if err != nil {
		return fail(err)
	}
	for range nr {
		var r Role
		if r.Name, err = str(); err != nil {
			return fail(err)
		}
		np, err := c.u32()
		if err != nil {
			return fail(err)
		}
		for range np {
			var p Perm
			if p.Type, err = c.u8(); err != nil {
				return fail(err)
			}
			if p.Key, err = c.bytes32(); err != nil {
				return fail(err)
			}
			if p.RangeEnd, err = c.bytes32(); err != nil {
				return fail(err)
			}
			r.Perms = append(r.Perms, p)
		}
		a.Roles = append(a.Roles, r)
	}
	if _, err := c.r.ReadByte(); err != io.EOF {
		return fail(errors.New("trailing bytes"))
	}
	return a, nil
}
