package bench

import (
	"fmt"
	"io"
	"strings"
)

// WriteMigrateSummary writes a run as markdown: the steps, the checks, the totals. The same
// text is the table `bench migrate` prints and the summary.md it writes beside results.json.
func WriteMigrateSummary(w io.Writer, r *MigrateResult) {
	fmt.Fprintf(w, "`bench migrate`: %d nodes + %d pods + %d node Leases (%d objects, %s of values), %d etcd leases on the node Leases; revision %d, compacted at %d\n\n",
		r.Nodes, r.Pods, r.Leases, r.Objects, FmtBytes(float64(r.ValueBytes)), r.EtcdLeases, r.Revision, r.CompactRevision)
	fmt.Fprintln(w, "| step | seconds | bytes | keys | process: peak RSS (peak anonymous) | its CPU s | host memory in use, peak |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---|---:|---:|")
	var hostPeak uint64
	for _, s := range r.Steps {
		proc := "-"
		if s.Process != "" {
			proc = fmt.Sprintf("%s: %s (%s)", s.Process, FmtBytes(float64(s.PeakRSS)), FmtBytes(float64(s.PeakAnon)))
		}
		cpu := "-"
		if s.CPUSeconds > 0 {
			cpu = fmt.Sprintf("%.1f", s.CPUSeconds)
		}
		keys := "-"
		if s.Keys > 0 {
			keys = fmt.Sprint(s.Keys)
		}
		fmt.Fprintf(w, "| %s | %.2f | %s | %s | %s | %s | %s |\n", s.Step, s.Seconds, FmtBytes(float64(s.Bytes)), keys, proc, cpu,
			FmtBytes(float64(s.HostMemPeak)))
		hostPeak = max(hostPeak, s.HostMemPeak)
	}
	fmt.Fprintln(w)
	for _, s := range r.Steps {
		if s.Note != "" {
			fmt.Fprintf(w, "- %s: %s\n", s.Step, strings.ReplaceAll(s.Note, "\n", " / "))
		}
	}
	fmt.Fprintln(w)
	if len(r.Checks) > 0 {
		fmt.Fprintln(w, "| checked against the original etcd | revision | keys: key, value, create/mod revision, version, lease | HashKV at the revision | compaction; Range below it refused | leases: ID, granted TTL, keys | seconds | server after: peak RSS (anonymous) |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---:|---|")
		for _, c := range r.Checks {
			fmt.Fprintf(w, "| %s | %d (want %d) | %d of %d, %d with a lease: %s | %d (want %d): %s | %d (want %d); %v | %d of %d: %s | %.1f | %s (%s) |\n",
				c.Server, c.Revision, c.WantRevision, c.Keys, c.WantKeys, c.KeysWithLease, equalText(c.KeysEqual, c.KeyMismatches),
				c.HashKV, c.WantHashKV, equalText(c.HashKVEqual, 0), c.CompactRevision, c.WantCompactRevision, c.RefusesCompacted,
				c.Leases, c.WantLeases, equalText(c.LeasesEqual, int64(len(c.LeaseMismatches))), c.Seconds,
				FmtBytes(float64(c.ServerPeakRSS)), FmtBytes(float64(c.ServerAnon)))
		}
		fmt.Fprintln(w)
		for _, c := range r.Checks {
			for _, m := range append(append([]string{}, c.FirstMismatches...), c.LeaseMismatches...) {
				fmt.Fprintf(w, "- %s: %s\n", c.Server, m)
			}
		}
	}
	fmt.Fprintf(w, "etcd → store (snapshot save + import + store start): %.1f s; store → etcd (export + etcdutl restore + etcd start): %.1f s; host memory in use at most %s (%s before the run)\n",
		r.ToStoreSeconds, r.ToEtcdSeconds, FmtBytes(float64(hostPeak)), FmtBytes(float64(r.HostMemBaseline)))
	switch {
	case r.Failed != "":
		fmt.Fprintf(w, "FAILED: %s\n", r.Failed)
	case r.Equal:
		fmt.Fprintln(w, "every check equal at both ends")
	default:
		fmt.Fprintln(w, "DIFFERENCES found (above)")
	}
}

func equalText(ok bool, mismatches int64) string {
	if ok {
		return "equal"
	}
	if mismatches > 0 {
		return fmt.Sprintf("**%d different**", mismatches)
	}
	return "**different**"
}
