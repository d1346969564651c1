package bench

import (
	"fmt"
	"io"
	"strings"
)

// stateRow is one line of the state table: a figure per target.
type stateRow struct {
	what string
	f    func(*StateTarget) string
}

func stateRows(r *StateReport) []stateRow {
	kindLoad := func(t *StateTarget, kind string) *StateKindLoad {
		if t.Load == nil {
			return nil
		}
		for i := range t.Load.Kinds {
			if t.Load.Kinds[i].Kind == kind {
				return &t.Load.Kinds[i]
			}
		}
		return nil
	}
	paged := func(t *StateTarget, prefix string) *StateListRun {
		if t.List == nil {
			return nil
		}
		for i := range t.List.Paged {
			if t.List.Paged[i].Prefix == prefix {
				return &t.List.Paged[i]
			}
		}
		return nil
	}
	listCell := func(l *StateListRun) string {
		switch {
		case l == nil:
			return "not run"
		case l.NotRun != "":
			return "not run: " + l.NotRun
		case l.Unsupported:
			return "Unimplemented"
		case l.Error != "":
			return "FAILED: " + l.Error
		}
		cpu := ""
		if l.ServerCPUUs > 0 && l.Pages > 0 {
			cpu = fmt.Sprintf(", server CPU %.2f s, %.2f ms/page", l.ServerCPUUs/1e6, l.ServerCPUUs/1e3/float64(l.Pages))
		}
		return fmt.Sprintf("%.2f s (%d keys, peak RSS +%s%s)", l.Seconds, l.Keys, FmtBytes(float64(l.PeakExtra())), cpu)
	}
	var rows []stateRow
	for _, kind := range StateKinds {
		kind := kind
		rows = append(rows, stateRow{"bytes per " + strings.TrimSuffix(kind, "s") + " (encoded value)", func(t *StateTarget) string {
			if k := kindLoad(t, kind); k != nil && k.Objects > 0 {
				return fmt.Sprintf("%.0f B", k.BytesPerObject)
			}
			return "-"
		}})
	}
	for _, kind := range StateKinds {
		kind := kind
		rows = append(rows, stateRow{"load " + kind + ": objects/s, server CPU µs/object", func(t *StateTarget) string {
			k := kindLoad(t, kind)
			if k == nil {
				return "not run"
			}
			s := fmt.Sprintf("%s/s, %.1f µs (create p99 %s)", HumanRate(k.ObjectsPerSec), k.ServerCPUPerObjUs, FmtUs(k.CreateP99Us))
			if k.Errors > 0 {
				s = fmt.Sprintf("FAILED after %d: %s", k.Objects, k.FirstError)
			}
			return s
		}})
	}
	load := func(f func(*StateLoad) string) func(*StateTarget) string {
		return func(t *StateTarget) string {
			if t.Load == nil {
				return "not run"
			}
			return f(t.Load)
		}
	}
	rows = append(rows,
		stateRow{"load, all kinds: objects/s", load(func(l *StateLoad) string {
			return fmt.Sprintf("%s/s (%d in %.1f s), %.1f µs CPU/object", HumanRate(l.ObjectsPerSec), l.Objects, l.Seconds, l.ServerCPUPerObjUs)
		})},
		stateRow{"RSS after load (compacted)", load(func(l *StateLoad) string { return FmtBytes(float64(l.RSSBytes)) })},
		stateRow{"data dir on tmpfs (compacted; before)", load(func(l *StateLoad) string {
			return fmt.Sprintf("%s (%s)", FmtBytes(float64(l.DataDirBytes)), FmtBytes(float64(l.DataDirBytesBefore)))
		})},
		stateRow{"etcd db file (defragmented; before)", load(func(l *StateLoad) string {
			if l.EtcdDBBytes == 0 {
				return "-"
			}
			return fmt.Sprintf("%s (%s)", FmtBytes(float64(l.EtcdDBBytes)), FmtBytes(float64(l.EtcdDBBytesBefore)))
		})},
		stateRow{"anonymous RSS after load", load(func(l *StateLoad) string { return FmtBytes(float64(l.AnonBytes)) })},
		stateRow{"values packed: written -> stored (packer wait after compaction, its CPU)", load(func(l *StateLoad) string {
			if l.ValuesPacked == 0 {
				return "-"
			}
			return fmt.Sprintf("%d: %s -> %s (%.1f s, %.1f s CPU; packer busy %.1f s in all)", l.ValuesPacked, FmtBytes(float64(l.PackedRawBytes)),
				FmtBytes(float64(l.PackedStoredBytes)), l.PackWaitSeconds, l.PackWaitCPUUs/1e6, l.PackerBusySeconds)
		})},
		stateRow{"memory: anonymous RSS + data dir, per object", load(func(l *StateLoad) string {
			tot := float64(l.AnonBytes) + float64(l.DataDirBytes)
			if l.Objects == 0 {
				return "-"
			}
			return fmt.Sprintf("%s; %.0f B/object (%.2f× the value bytes)", FmtBytes(tot), tot/float64(l.Objects), tot/float64(max(l.ValueBytes, 1)))
		})},
	)
	for _, kind := range []string{"nodes", "pods", "leases"} {
		prefix := statePrefix(kind)
		rows = append(rows, stateRow{fmt.Sprintf("paged list of %s (limit %d)", prefix, r.PageLimit), func(t *StateTarget) string { return listCell(paged(t, prefix)) }})
	}
	rows = append(rows,
		stateRow{"unpaginated Range of " + PodPrefix, func(t *StateTarget) string {
			if t.List == nil {
				return "not run"
			}
			return listCell(&t.List.Unpaged)
		}},
		stateRow{"RangeStream of " + PodPrefix, func(t *StateTarget) string {
			if t.List == nil {
				return "not run"
			}
			return listCell(&t.List.Stream)
		}},
		stateRow{"point-write p99: idle → during lists", func(t *StateTarget) string {
			if t.List == nil {
				return "not run"
			}
			l := t.List
			return fmt.Sprintf("%s → %s (%.2f×; %d writers %s, %d errors)", FmtUs(l.IdleWriteP99Us), FmtUs(l.ListWriteP99Us), l.ListWriteP99Xidle,
				l.PointWriters, writersWhere[l.PointWritersIn], l.WriteErrors)
		}},
		stateRow{"point-write p99 during paged / unpaginated / stream (× idle)", func(t *StateTarget) string {
			if t.List == nil {
				return "not run"
			}
			if len(t.List.WritePhases) == 0 {
				return "-"
			}
			return t.List.phaseCell()
		}},
		stateRow{"watch: lease renewals/s (update Txn)", func(t *StateTarget) string {
			if t.Watch == nil {
				return "not run"
			}
			return fmt.Sprintf("%s/s (%d conflicts, %d errors)", HumanRate(t.Watch.WritesPerSec), t.Watch.Conflicts, t.Watch.WriteErrors)
		}},
		stateRow{fmt.Sprintf("watch: events delivered/s (%d watchers per prefix)", r.Watchers), func(t *StateTarget) string {
			if t.Watch == nil {
				return "not run"
			}
			return fmt.Sprintf("%s/s, %.1f µs CPU/event, %d missing", HumanRate(t.Watch.EventsPerSec), t.Watch.ServerCPUPerEventUs, t.Watch.Missing)
		}},
		stateRow{"watch: write → event delay p50 / p99", func(t *StateTarget) string {
			if t.Watch == nil {
				return "not run"
			}
			return fmt.Sprintf("%s / %s", FmtUs(t.Watch.DelayP50Us), FmtUs(t.Watch.DelayP99Us))
		}},
		stateRow{"SIGKILL → ready", func(t *StateTarget) string {
			if t.Restart == nil {
				return "not run"
			}
			return fmt.Sprintf("%.2f s", t.Restart.ReadySeconds)
		}},
		stateRow{"SIGKILL → first full paged pod list", func(t *StateTarget) string {
			if t.Restart == nil || t.Restart.FirstListSeconds == 0 {
				return "not run"
			}
			c := t.Restart.Counts
			return fmt.Sprintf("%.2f s (then %d nodes, %d pods, %d leases)", t.Restart.FirstListSeconds, c["nodes"], c["pods"], c["leases"])
		}},
		stateRow{"failed", func(t *StateTarget) string {
			if t.Failed == "" {
				return "no"
			}
			return t.Failed
		}},
	)
	return rows
}

// WriteStateTable prints the state run as a text table, one column per target.
// writersWhere says where the point writers ran, in the table.
var writersWhere = map[string]string{
	WritersShared:  "on the lister's connections",
	WritersConns:   "on their own connection",
	WritersProcess: "in their own process",
}

func WriteStateTable(w io.Writer, r *StateReport) {
	fmt.Fprintf(w, "state: %d nodes + %d pods + %d leases, %d clients on %d connections\n", r.Nodes, r.Nodes, r.Nodes, r.Clients, r.Conns)
	rows := stateRows(r)
	width := 0
	for _, row := range rows {
		width = max(width, len([]rune(row.what)))
	}
	fmt.Fprintf(w, "%-*s", width+2, "")
	for _, t := range r.Targets {
		fmt.Fprintf(w, " | %s", t.Target)
	}
	fmt.Fprintln(w)
	for _, row := range rows {
		fmt.Fprintf(w, "%s%s", row.what, strings.Repeat(" ", width+2-len([]rune(row.what))))
		for _, t := range r.Targets {
			fmt.Fprintf(w, " | %s", row.f(t))
		}
		fmt.Fprintln(w)
	}
}

// writeStateMarkdown is the state section of the benchmark page.
func writeStateMarkdown(w io.Writer, r *StateReport) {
	fmt.Fprintf(w, "## State at scale (issue 14): %d nodes + %d pods + %d leases\n\n", r.Nodes, r.Nodes, r.Nodes)
	fmt.Fprintf(w, "`meganode bench state`: KWOK-like Nodes, ordinary Pods and node Leases from k8s.io/api, protobuf-encoded as "+
		"kube-apiserver stores them, created with its create Txn by %d clients; listed as it lists at start (pages of %d); "+
		"%d watchers per prefix while the Leases are renewed with its update Txn for %.0f s; then SIGKILL and restart.\n\n",
		r.Clients, r.PageLimit, r.Watchers, r.WatchDuration)
	fmt.Fprint(w, "| |")
	for _, t := range r.Targets {
		fmt.Fprintf(w, " %s |", t.Target)
	}
	fmt.Fprint(w, "\n|---|")
	for range r.Targets {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	for _, row := range stateRows(r) {
		fmt.Fprintf(w, "| %s |", row.what)
		for _, t := range r.Targets {
			fmt.Fprintf(w, " %s |", strings.ReplaceAll(row.f(t), "|", "\\|"))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}
