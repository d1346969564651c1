package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/spf13/cobra"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/cluster"
)

type migrateFlags struct {
	to        string
	stateDir  string
	storeArgs []string
	workDir   string
	verify    bool
	checkPods int
	poll      time.Duration
	grace     time.Duration
	pageLimit int
	out       string
}

func (f *migrateFlags) validate() error {
	if f.to == "store" {
		f.to = cluster.StoreMeganode
	}
	if err := oneOf("to", f.to, cluster.StoreMeganode, cluster.StoreEtcd); err != nil {
		return usagef("--to: want store (meganode) or etcd, got %q", f.to)
	}
	if f.checkPods < 0 || f.pageLimit <= 0 || f.poll <= 0 || f.grace <= 0 {
		return usagef("--check-pods must be ≥ 0, --page-limit, --poll-interval and --apiserver-grace positive")
	}
	return nil
}

func (f *migrateFlags) options(prog *bench.Progress) cluster.MigrateOptions {
	return cluster.MigrateOptions{To: f.to, StoreArgs: f.storeArgs, WorkDir: f.workDir, Verify: f.verify, PageLimit: f.pageLimit,
		PollInterval: f.poll, APIServerGrace: f.grace, CheckPods: f.checkPods, Progress: prog}
}

func newMigrateCmd() *cobra.Command {
	f := &migrateFlags{}
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "move the running 'up' cluster from etcd to meganode-store (--to store) or back (--to etcd), measuring the downtime",
		Long: `migrate cuts the cluster 'meganode up' started over to the other store, keeping every key
at its revisions (every resourceVersion clients hold stays valid):

  1. kube-apiserver is stopped (SIGTERM, SIGKILL after --apiserver-grace): nothing writes to
     the store after its snapshot, which is taken only once the process is gone;
  2. with --verify, every key of the source is read (key, value, create/mod revision, version,
     lease), with HashKV and the leases;
  3. the source's snapshot: etcd's 'snapshot save', or 'meganode store export' from the store;
  4. the source is stopped (its data directory is kept: the way back);
  5. the snapshot is converted: 'meganode store import', or etcdutl's 'snapshot restore';
  6. the target starts on it (a new data directory, a free port); with --verify it is checked
     key by key against the source (and by HashKV, compaction point, leases);
  7. kube-apiserver starts again with --etcd-servers on the target, its other flags unchanged.

A failure in steps 1-7 rolls the cluster back onto the source. The controller-manager, the
scheduler and KWOK keep running and reconnect. A probe polls GET /api/v1/nodes?limit=1 every
--poll-interval: the API unavailability is from the first failed request to the first answer
after it. Then the checks: object counts through the API before and after (nodes, pods, leases,
namespaces, configmaps, secrets, service accounts, services), a new write's resourceVersion above
the source's last revision, what a watch held from before gets when reopened at its last
resourceVersion (resumed, or 410 Gone from which client-go relists), and with --check-pods N
new pods scheduled and Running. A cluster on several stores (--store-shards, --store-replicas)
or started with --record is refused. Exits 1 if a step or a check failed.`,
		Example: `  meganode up --store etcd --nodes 100 --store-shards 1
  meganode migrate --to store --check-pods 20
  meganode migrate --to etcd --out /tmp/back
  meganode migrate --to store --verify=false --store-arg=--durability=fsync`,
		Args: noArgs,
		RunE: action(f, runMigrate),
	}
	fs := cmd.Flags()
	fs.StringVar(&f.to, "to", "", "the store to move to: store (meganode-store) or etcd (required)")
	stateDirFlag(fs, &f.stateDir)
	fs.StringArrayVar(&f.storeArgs, "store-arg", nil, "extra flag for the new store process (repeatable)")
	fs.StringVar(&f.workDir, "work-dir", "", "directory for the snapshot files (default <state-dir>/migrate/<to>-<time>)")
	fs.BoolVar(&f.verify, "verify", true, "compare every key of the target with the source's before kube-apiserver starts on it (the API is down meanwhile)")
	fs.IntVar(&f.checkPods, "check-pods", 0, "pods to create once the cluster serves from the target; each must be scheduled and Running")
	fs.DurationVar(&f.poll, "poll-interval", 100*time.Millisecond, "the availability probe's period")
	fs.DurationVar(&f.grace, "apiserver-grace", 5*time.Second, "how long kube-apiserver gets to exit after SIGTERM before SIGKILL (it waits up to 60 s for open watches; killed, it writes nothing more either)")
	fs.IntVar(&f.pageLimit, "page-limit", 5000, "keys per Range page of --verify")
	fs.StringVar(&f.out, "out", "", "directory for result.json and summary.txt")
	completeValues(cmd, "to", "store", cluster.StoreEtcd)
	return cmd
}

func runMigrate(ctx context.Context, cmd *cobra.Command, f *migrateFlags) error {
	st, err := loadCluster(f.stateDir)
	if err != nil {
		return err
	}
	res, err := cluster.Migrate(ctx, st, f.options(bench.NewProgress(os.Stderr)))
	printMigrate(cmd.OutOrStdout(), res)
	if f.out != "" && res != nil {
		if werr := writeMigrateResult(f.out, res); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		return err
	}
	if !res.OK() {
		return fmt.Errorf("the cut-over ran but a check failed (see above)")
	}
	return nil
}

func writeMigrateResult(dir string, res *cluster.MigrateResult) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "result.json"), append(b, '\n'), 0o644)
}

// printMigrate prints the steps and the checks.
func printMigrate(w io.Writer, r *cluster.MigrateResult) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "migrate %s → %s (%s): source revision %d\n", r.From, r.To, r.StateDir, r.Revision)
	fmt.Fprintf(w, "%-40s %9s  %s\n", "STEP", "SECONDS", "NOTE")
	for _, s := range r.Steps {
		fmt.Fprintf(w, "%-40s %9.2f  %s\n", s.Name, s.Seconds, s.Note)
	}
	fmt.Fprintf(w, "%-40s %9.2f\n", "steps, kube-apiserver stopped → ready", r.StepsSeconds)
	a := r.Availability
	if !a.FirstFailure.IsZero() {
		fmt.Fprintf(w, "API unavailable: %.2f s (%s every %.0f ms: %d polls, %d failed; first failure %s: %s; first success %s)\n",
			a.Seconds, a.Probe, a.Interval*1000, a.Polls, a.Failed, a.FirstFailure.UTC().Format("15:04:05.000"), a.FirstError,
			a.FirstSuccess.UTC().Format("15:04:05.000"))
	}
	if r.Check != nil {
		fmt.Fprintf(w, "keys, target vs source: %s\n", r.Check.Summary())
	}
	if r.CountsAfter != nil {
		names := make([]string, 0, len(r.CountsBefore))
		for k := range r.CountsBefore {
			names = append(names, k)
		}
		sort.Strings(names)
		fmt.Fprintf(w, "objects through the API, before → after (equal: %v):", r.CountsEqual)
		for _, k := range names {
			fmt.Fprintf(w, " %s %d→%d", k, r.CountsBefore[k], r.CountsAfter[k])
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "a write after the cut-over: resourceVersion %d, above the source's last revision %d: %v\n", r.NewWriteRV, r.Revision, r.RVAdvanced)
	}
	for _, wo := range r.Watches {
		fmt.Fprintf(w, "watch of %s held from resourceVersion %s: %d events, last %s, then %s; reopened at %s: %s (%s)\n",
			wo.Resource, wo.StartRV, wo.Events, wo.LastRV, wo.EndedBy, wo.LastRV, wo.Result, wo.Detail)
	}
	if p := r.Pods; p != nil {
		fmt.Fprintf(w, "pods created after the cut-over: %d, scheduled %d, Running %d, in %.1f s (slowest pod: bound after %.1f s, Running after %.1f s)\n",
			p.Count, p.Scheduled, p.Running, p.Seconds, p.ScheduleMaxSeconds, p.StartupMaxSeconds)
	}
	if r.RolledBack {
		fmt.Fprintf(w, "ROLLED BACK onto %s: %s\n", r.From, r.Error)
	} else if r.Error != "" {
		fmt.Fprintf(w, "error: %s\n", r.Error)
	}
	fmt.Fprintf(w, "result: %s (wall %.1f s)\n", map[bool]string{true: "OK", false: "FAILED"}[r.OK()], r.WallSeconds)
}
