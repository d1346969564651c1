package migrate

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"os"
	"slices"
)

// spilled is a store's snapshot read in one pass with its values moved to a file, so that
// Export holds the keys and every version's fields (about 80 bytes a version), not the values
// — 7 GiB at 1M nodes, on top of the store it exports from. The values are read back from the
// file as the etcd backend is written, in revision order.
type spilled struct {
	head  Snapshot // revision, compaction point, leases, auth; Keys stay empty
	stats Stats
	file  *os.File // unlinked: it goes when it is closed, however the export ends
	keys  [][]byte
	vers  []spilledVersion // in revision order once spillSnapshot returns
}

type spilledVersion struct {
	modRev, createRev, version, lease int64
	off                               int64  // of the value in file
	key                               uint32 // index in keys
	sub                               uint32
	n                                 uint32 // the value's length
}

// spillSnapshot decodes the MGNSNAP1 stream r (its checksum verified), writing the values
// to an unlinked file in dir.
func spillSnapshot(r io.Reader, dir string) (*spilled, error) {
	f, err := os.CreateTemp(dir, ".meganode-export-values-")
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name())
	s := &spilled{file: f}
	w := bufio.NewWriterSize(f, 1<<20)
	var off int64
	err = decodeSnapshot(r, &s.head, func(k Key) error {
		s.stats.addKey(&k)
		ki := uint32(len(s.keys)) // decodeSnapshot bounds the key count by maxLen
		s.keys = append(s.keys, k.Key)
		for _, v := range k.Versions {
			if _, err := w.Write(v.Value); err != nil {
				return fmt.Errorf("spilling values to %s: %w", dir, err)
			}
			s.vers = append(s.vers, spilledVersion{modRev: v.ModRev, createRev: v.CreateRev, version: v.Version,
				lease: v.Lease, off: off, key: ki, sub: v.Sub, n: uint32(len(v.Value))})
			off += int64(len(v.Value))
		}
		return nil
	})
	if err == nil {
		if err = w.Flush(); err != nil {
			err = fmt.Errorf("spilling values to %s: %w", dir, err)
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	h := s.head.headStats()
	s.stats.Leases, s.stats.Users, s.stats.Roles = h.Leases, h.Users, h.Roles
	slices.SortFunc(s.vers, func(a, b spilledVersion) int {
		return cmp.Or(cmp.Compare(a.modRev, b.modRev), cmp.Compare(a.sub, b.sub))
	})
	return s, nil
}

// each hands every version to put in revision order, its value read back from the file (the
// Version and its value are reused: put must not keep them).
func (s *spilled) each(put func(key []byte, v *Version) error) error {
	var buf []byte
	var v Version
	for i := range s.vers {
		sv := &s.vers[i]
		if cap(buf) < int(sv.n) {
			buf = make([]byte, sv.n)
		}
		buf = buf[:sv.n]
		if _, err := s.file.ReadAt(buf, sv.off); err != nil {
			return fmt.Errorf("reading a spilled value back: %w", err)
		}
		v = Version{ModRev: sv.modRev, Sub: sv.sub, CreateRev: sv.createRev, Version: sv.version, Lease: sv.lease, Value: buf}
		if err := put(s.keys[sv.key], &v); err != nil {
			return err
		}
	}
	return nil
}

func (s *spilled) Close() error { return s.file.Close() }
