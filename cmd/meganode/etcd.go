package main

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/meganode/meganode/internal/etcdref"
)

// `meganode etcd` runs real etcd (v3.6, embedded from its Go modules) as a process
// of its own, so that `meganode bench` can read its CPU time and memory from /proc
// exactly as it does for meganode-store. It is hidden: it is registered only when
// it is the command being run, so it never shows in the usage list.
func init() {
	if len(os.Args) > 1 && os.Args[1] == "etcd" {
		register("etcd", "run the reference etcd in its own process (used by bench)", runEtcd)
	}
}

func runEtcd(args []string) error {
	fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "", "data directory (required; tmpfs for etcd's best case)")
	listen := fs.String("listen-client-urls", "", "client URL, http://127.0.0.1:PORT (required)")
	quota := fs.Int64("quota-backend-bytes", 8<<30, "backend quota in bytes (etcd's default is 2 GiB)")
	logLevel := fs.String("log-level", "error", "etcd log level")
	maxReq := fs.Uint("max-request-bytes", 0, "max request size; 0 keeps etcd's 1.5 MiB")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dataDir == "" || *listen == "" {
		return errors.New("--data-dir and --listen-client-urls are required")
	}
	u, err := url.Parse(*listen)
	if err != nil {
		return fmt.Errorf("--listen-client-urls: %w", err)
	}
	if u.Scheme != "http" || u.Hostname() != "127.0.0.1" {
		return fmt.Errorf("--listen-client-urls: want http://127.0.0.1:PORT, got %s", *listen)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil || port <= 0 {
		return fmt.Errorf("--listen-client-urls: no port in %s", *listen)
	}
	if err := os.MkdirAll(*dataDir, 0o700); err != nil {
		return err
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	srv, err := etcdref.Start(etcdref.Options{
		DataDir: *dataDir, ClientPort: port, LogLevel: *logLevel,
		QuotaBackendBytes: *quota, MaxRequestBytes: *maxReq,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "etcd %s: ready to serve client requests\n", srv.Endpoint)
	select {
	case <-sigs:
		srv.Etcd.Close() // keeps the data directory: it belongs to the caller
		return nil
	case err := <-srv.Etcd.Err():
		srv.Etcd.Close()
		return err
	}
}
