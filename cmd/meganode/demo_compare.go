package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/meganode/meganode/internal/bench"
	"github.com/meganode/meganode/internal/cluster"
)

// runCompareDemo runs the product (meganode-store + the meganode scheduler), then the stock
// stack (etcd v3.6 + kube-scheduler) with the same nodes, pods, creation rate and drain, one
// after the other so neither takes the other's cores, and prints one table of both with the
// ratios. Each stack gets <state-dir>/<stack>; comparison.json and each stack's report.json
// go to --out.
func runCompareDemo(ctx context.Context, d *demoFlags) error {
	prog := bench.NewProgress(os.Stderr)
	began := time.Now()
	// Both stores keep their data on tmpfs: etcd fsyncs every commit and meganode-store by
	// default does not (--durability buffered), so on a disk the table would measure the disk.
	if root, ok := tmpfsRoot(); ok {
		d.storeData = root
		defer os.RemoveAll(root)
	}
	mega, stock := d.up, d.up
	mega.store, mega.sched.scheduler = cluster.StoreMeganode, cluster.SchedulerMeganode
	stock.store, stock.sched.scheduler, stock.sched.intake = cluster.StoreEtcd, cluster.SchedulerKube, cluster.IntakeWatch
	stock.storeArgs = nil // --store-arg is meganode-store's (etcd takes other flags); --apiserver-arg goes to both
	mega.stateDir = filepath.Join(d.up.stateDir, cluster.StackMeganode)
	stock.stateDir = filepath.Join(d.up.stateDir, cluster.StackStock)

	var errs []error
	megaRun, _, err := runStack(ctx, d, mega, cluster.StackMeganode, prog)
	if err != nil {
		errs = append(errs, fmt.Errorf("meganode stack: %w", err))
	}
	var stockRun cluster.StackRun
	if ctx.Err() == nil {
		stockRun, _, err = runStack(ctx, d, stock, cluster.StackStock, prog)
		if err != nil {
			errs = append(errs, fmt.Errorf("stock stack: %w", err))
		}
	} else {
		stockRun = cluster.StackRun{Name: cluster.StackStock, Store: stock.store, Scheduler: stock.sched.scheduler, Error: "not run: interrupted"}
	}

	c := cluster.Compare(d.up.nodes, d.up.pods, d.qps, d.drainPods, megaRun, stockRun)
	if d.storeData == "" {
		c.Notes = append(c.Notes, "no tmpfs at /dev/shm: the stores' data is on the state directory's disk, where etcd fsyncs every commit")
	} else {
		c.Notes = append(c.Notes, "both stores' data on tmpfs (/dev/shm): etcd fsyncs every commit, meganode-store writes its WAL without fsync (--durability buffered, its default)")
	}
	c.Print(os.Stdout)
	dir := d.out
	if dir == "" {
		dir = filepath.Join(d.up.stateDir, "report")
	}
	for _, s := range c.Stacks {
		if s.Report == nil {
			continue
		}
		if _, err := s.Report.WriteFiles(filepath.Join(dir, s.Name)); err != nil {
			errs = append(errs, fmt.Errorf("writing the %s report: %w", s.Name, err))
		}
	}
	p, err := c.WriteJSON(dir)
	if err != nil {
		errs = append(errs, err)
	} else {
		fmt.Printf("wrote %s (and each stack's report.json and charts in %s/{%s,%s})\n", p, dir, cluster.StackMeganode, cluster.StackStock)
	}
	prog.Printf("demo done in %.1fs", time.Since(began).Seconds())
	return errors.Join(errs...)
}

// tmpfsRoot makes a fresh directory on /dev/shm for the stores' data.
func tmpfsRoot() (string, bool) {
	if st, err := os.Stat("/dev/shm"); err != nil || !st.IsDir() {
		return "", false
	}
	root := filepath.Join("/dev/shm", "meganode-demo-"+strconv.Itoa(os.Getpid()))
	if err := os.RemoveAll(root); err != nil {
		return "", false
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", false
	}
	return root, true
}

// dataDir is where a stack's stores keep their data: under the tmpfs root in a comparison,
// else "" (up's default, <state-dir>/data).
func (f *demoFlags) dataDir(stack string) string {
	if f.storeData == "" || stack == "" {
		return ""
	}
	return filepath.Join(f.storeData, stack)
}
