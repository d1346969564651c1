package migrate

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ImportResult tells what Import converted.
type ImportResult struct {
	Snapshot *Snapshot // without its values (nil): they were the etcd file's pages
	Stats    Stats
	Etcd     *EtcdInfo
	Bytes    int64
	Took     time.Duration
}

// Import converts the etcd backend file `from` into the store's snapshot `out` (what
// `meganode-store --restore-from` reads). It writes out.tmp and renames it over out once it
// is complete and synced: on any error nothing is left at out or out.tmp. Errors name `from`
// or `out`. The values are written from the etcd file's mapped pages, not copied: the
// import's memory is the keys and versions' fields, not the state.
func Import(from, out string, opts ReadOptions) (ImportResult, error) {
	t0 := time.Now()
	var res ImportResult
	var werr error
	err := viewEtcdDB(from, opts, true, func(s *Snapshot, info *EtcdInfo) error {
		res.Bytes, werr = writeAtomically(out, func(f *os.File) error { return WriteSnapshot(f, s) })
		for i := range s.Keys {
			for j := range s.Keys[i].Versions {
				s.Keys[i].Versions[j].Value = nil // the file's pages, unmapped once this returns
			}
		}
		res.Snapshot, res.Stats, res.Etcd = s, s.Stats(), info
		return nil
	})
	if err != nil {
		os.Remove(out + ".tmp") // a fault on a page of from, recovered in the middle of the write
		return res, fmt.Errorf("%s: %w", from, err)
	}
	if werr != nil {
		return res, werr
	}
	res.Took = time.Since(t0)
	return res, nil
}

// writeAtomically writes path through path.tmp: fill it, sync it, rename it. On failure the
// temporary file is removed and path is untouched.
func writeAtomically(path string, fill func(f *os.File) error) (int64, error) {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	fail := func(err error) (int64, error) {
		f.Close()
		os.Remove(tmp)
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	if err := fill(f); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	st, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return st.Size(), nil
}

// ExportResult tells what Export wrote.
type ExportResult struct {
	// Head is the store's revision, compaction point, leases and auth state; its Keys are
	// empty (they went through a file, see spilled): Stats counts them.
	Head  *Snapshot
	Stats Stats
	Write WriteResult
	Took  time.Duration
}

// Export takes the snapshot of the store cli is connected to (Maintenance.Snapshot, which
// streams MGNSNAP1) and writes it to out as an etcd snapshot file (WriteEtcdSnapshot), through
// out.tmp as Import does. The snapshot is read in one pass, its values set aside in a file
// beside out (spillSnapshot): the export's memory is the keys, not the state. The member ID, raft term and index and the member list come from the
// store's Status and MemberList, each bounded by requestTimeout (a store that cannot be reached,
// or refuses the client's certificate, fails there instead of being retried without end); the
// snapshot stream only by ctx.
func Export(ctx context.Context, cli *clientv3.Client, out string, requestTimeout time.Duration) (ExportResult, error) {
	t0 := time.Now()
	var res ExportResult
	eps := cli.Endpoints()
	if len(eps) == 0 {
		return res, fmt.Errorf("no endpoint")
	}
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	st, err := cli.Status(rctx, eps[0])
	if err != nil {
		return res, fmt.Errorf("status of %s: %w", eps[0], err)
	}
	meta := EtcdMeta{MemberID: st.Header.GetMemberId(), Term: st.RaftTerm, Index: st.RaftIndex}
	if ml, err := cli.MemberList(rctx); err == nil {
		for _, m := range ml.Members {
			meta.Members = append(meta.Members, MemberFromList(m.ID, m.Name, m.PeerURLs, m.ClientURLs, m.IsLearner))
		}
	}
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		return res, fmt.Errorf("snapshot of %s: %w", eps[0], err)
	}
	s, err := spillSnapshot(rc, filepath.Dir(out))
	rc.Close()
	if err != nil {
		return res, fmt.Errorf("snapshot of %s: %w", eps[0], err)
	}
	defer s.Close()
	var wr WriteResult
	_, err = writeAtomically(out, func(f *os.File) error {
		var err error
		wr, err = writeEtcdSnapshot(f, &s.head, s.each, meta, filepath.Dir(out))
		return err
	})
	if err != nil {
		return res, err
	}
	return ExportResult{Head: &s.head, Stats: s.stats, Write: wr, Took: time.Since(t0)}, nil
}
