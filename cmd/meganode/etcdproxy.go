package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meganode/meganode/internal/etcdproxy"
)

type etcdProxyFlags struct {
	listen, target, record string
}

func newEtcdProxyCmd() *cobra.Command {
	f := &etcdProxyFlags{}
	cmd := &cobra.Command{
		Use:   "etcd-proxy",
		Short: "transparent etcd v3 gRPC proxy that records every request and response as JSON lines; replay checks a store against a recording",
		Long: `etcd-proxy serves the etcd v3 API on --listen (plaintext gRPC) and forwards every call to
--target, unchanged; with --record it writes each request and response (and each watch
event) to a file as JSON lines. 'meganode up --record FILE' puts it between kube-apiserver
and the store. 'etcd-proxy replay' sends a recording's calls to a fresh store and lists
every response that differs from the recorded one.`,
		Example: `  meganode etcd-proxy --listen 127.0.0.1:2479 --target 127.0.0.1:2379 --record /tmp/apiserver.jsonl
  meganode etcd-proxy replay --in /tmp/apiserver.jsonl --endpoints 127.0.0.1:2381`,
		Args: subcommandArgs,
		RunE: action(f, runEtcdProxy),
	}
	fs := cmd.Flags()
	fs.StringVar(&f.listen, "listen", "127.0.0.1:2379", "address to serve the etcd API on (plaintext gRPC)")
	fs.StringVar(&f.target, "target", "", "store to forward to: host:port or http://host:port (plaintext)")
	fs.StringVar(&f.record, "record", "", "write every request and response to this file as JSON lines (empty: forward only)")
	cmd.AddCommand(newEtcdProxyReplayCmd())
	return cmd
}

func (f *etcdProxyFlags) validate() error {
	if f.target == "" {
		return usagef("--target is required")
	}
	return nil
}

func runEtcdProxy(ctx context.Context, cmd *cobra.Command, f *etcdProxyFlags) error {
	var rec *etcdproxy.Recorder
	if f.record != "" {
		var err error
		if rec, err = etcdproxy.CreateRecorder(f.record); err != nil {
			return err
		}
	}
	p, err := etcdproxy.New(f.target, rec)
	if err != nil {
		return err
	}
	defer p.Close()
	addr := strings.TrimPrefix(f.listen, "http://")
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "etcd-proxy: serving on %s, forwarding to %s, recording to %q\n", l.Addr(), f.target, f.record)
	serveErr := p.Serve(ctx, l)
	if err := rec.Close(); err != nil && serveErr == nil {
		serveErr = err
	}
	if rec != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "etcd-proxy: stopped; %d lines in %s\n", rec.Lines(), f.record)
	}
	return serveErr
}

type etcdProxyReplayFlags struct {
	in, endpoints, jsonOut string
	show                   int
}

func newEtcdProxyReplayCmd() *cobra.Command {
	f := &etcdProxyReplayFlags{}
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "replay a recording into a fresh store and list every response that differs",
		Long: `replay sends the unary calls and watch requests of a recording (made with
'meganode etcd-proxy --record') to a fresh, empty store at --endpoints, in the order the
recorded store applied them, and compares each response with the recorded one. It prints
a summary and the first --show mismatches, and exits 1 when there is any.`,
		Example: `  meganode etcd-proxy replay --in /tmp/apiserver.jsonl --endpoints 127.0.0.1:2381
  meganode etcd-proxy replay --in rec.jsonl --endpoints http://127.0.0.1:2381 --show 100 --json /tmp/mismatches.json`,
		Args: noArgs,
		RunE: action(f, runEtcdProxyReplay),
	}
	fs := cmd.Flags()
	fs.StringVar(&f.in, "in", "", "recording to replay (JSON lines from 'meganode etcd-proxy --record')")
	fs.StringVar(&f.endpoints, "endpoints", "", "fresh, empty store to replay into: host:port or http://host:port")
	fs.IntVar(&f.show, "show", 20, "mismatches to print")
	fs.StringVar(&f.jsonOut, "json", "", "also write the summary with every mismatch as JSON to this file")
	return cmd
}

func (f *etcdProxyReplayFlags) validate() error {
	if f.in == "" || f.endpoints == "" {
		return usagef("--in and --endpoints are required")
	}
	return nil
}

func runEtcdProxyReplay(ctx context.Context, cmd *cobra.Command, f *etcdProxyReplayFlags) error {
	ep := strings.Split(f.endpoints, ",")[0]
	lines, err := etcdproxy.ReadRecording(f.in)
	if err != nil {
		return err
	}
	sum, err := etcdproxy.Replay(ctx, lines, etcdproxy.ReplayOptions{Endpoint: ep})
	if sum != nil {
		sum.Print(os.Stdout, f.show)
		if f.jsonOut != "" {
			b, _ := json.MarshalIndent(sum, "", "  ")
			if werr := os.WriteFile(f.jsonOut, b, 0o644); werr != nil && err == nil {
				err = werr
			}
		}
	}
	if err != nil {
		return err
	}
	if len(sum.Mismatches) > 0 {
		return fmt.Errorf("%d mismatches", len(sum.Mismatches))
	}
	return nil
}
