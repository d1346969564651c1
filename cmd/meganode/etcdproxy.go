package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/meganode/meganode/internal/etcdproxy"
)

func init() {
	register("etcd-proxy", "transparent etcd v3 gRPC proxy that records every request and response as JSON lines; `etcd-proxy replay` checks a store against a recording", runEtcdProxy)
}

func runEtcdProxy(args []string) error {
	if len(args) > 0 && args[0] == "replay" {
		return runEtcdProxyReplay(args[1:])
	}
	fs := flag.NewFlagSet("etcd-proxy", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: meganode etcd-proxy --listen 127.0.0.1:P --target 127.0.0.1:Q [--record FILE]\n       meganode etcd-proxy replay --in FILE --endpoints 127.0.0.1:Q")
		fs.PrintDefaults()
	}
	listen := fs.String("listen", "127.0.0.1:2379", "address to serve the etcd API on (plaintext gRPC)")
	target := fs.String("target", "", "store to forward to: host:port or http://host:port (plaintext)")
	record := fs.String("record", "", "write every request and response to this file as JSON lines (empty: forward only)")
	if ok, err := parseUpFlags(fs, args); !ok {
		return err
	}
	if *target == "" {
		return errors.New("--target is required")
	}
	var rec *etcdproxy.Recorder
	if *record != "" {
		var err error
		if rec, err = etcdproxy.CreateRecorder(*record); err != nil {
			return err
		}
	}
	p, err := etcdproxy.New(*target, rec)
	if err != nil {
		return err
	}
	defer p.Close()
	addr := strings.TrimPrefix(*listen, "http://")
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	fmt.Fprintf(os.Stderr, "etcd-proxy: serving on %s, forwarding to %s, recording to %q\n", l.Addr(), *target, *record)
	serveErr := p.Serve(ctx, l)
	if err := rec.Close(); err != nil && serveErr == nil {
		serveErr = err
	}
	if rec != nil {
		fmt.Fprintf(os.Stderr, "etcd-proxy: stopped; %d lines in %s\n", rec.Lines(), *record)
	}
	return serveErr
}

func runEtcdProxyReplay(args []string) error {
	fs := flag.NewFlagSet("etcd-proxy replay", flag.ContinueOnError)
	in := fs.String("in", "", "recording to replay (JSON lines from `meganode etcd-proxy --record`)")
	endpoints := fs.String("endpoints", "", "fresh, empty store to replay into: host:port or http://host:port")
	show := fs.Int("show", 20, "mismatches to print")
	jsonOut := fs.String("json", "", "also write the summary with every mismatch as JSON to this file")
	if ok, err := parseUpFlags(fs, args); !ok {
		return err
	}
	if *in == "" || *endpoints == "" {
		return errors.New("--in and --endpoints are required")
	}
	ep := strings.Split(*endpoints, ",")[0]
	lines, err := etcdproxy.ReadRecording(*in)
	if err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	sum, err := etcdproxy.Replay(ctx, lines, etcdproxy.ReplayOptions{Endpoint: ep})
	if sum != nil {
		sum.Print(os.Stdout, *show)
		if *jsonOut != "" {
			b, _ := json.MarshalIndent(sum, "", "  ")
			if werr := os.WriteFile(*jsonOut, b, 0o644); werr != nil && err == nil {
				err = werr
			}
		}
	}
	if err != nil {
		return err
	}
	if len(sum.Mismatches) > 0 {
		fmt.Fprintf(os.Stderr, "meganode etcd-proxy replay: %d mismatches\n", len(sum.Mismatches))
		os.Exit(1)
	}
	return nil
}
