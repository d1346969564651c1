// Command rangestream-rss measures the store's peak RSS while one client lists a big prefix
// with RangeStream (reading as fast as it can), and, for reference, with one unary Range.
//
//	go run ./docs/bench/rangestream-rss --store-bin bin/meganode-store --keys 100000 --value 2500
//
// Raw results: docs/bench/rangestream-rss/results.txt.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meganode/meganode/internal/storeproc"
)

type frame struct{ b []byte }

func (f *frame) Unmarshal(b []byte) error { f.b = append(f.b[:0], b...); return nil }

type codec struct{}

func (codec) Name() string { return "proto" }
func (codec) Marshal(v any) ([]byte, error) {
	return v.(interface{ Marshal() ([]byte, error) }).Marshal()
}
func (codec) Unmarshal(b []byte, v any) error {
	return v.(interface{ Unmarshal([]byte) error }).Unmarshal(b)
}

func rss(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// peakDuring samples the process's RSS every 2 ms while fn runs.
func peakDuring(pid int, fn func()) (peak int64, took time.Duration) {
	var p atomic.Int64
	done := make(chan struct{})
	go func() {
		for {
			if r := rss(pid); r > p.Load() {
				p.Store(r)
			}
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	start := time.Now()
	fn()
	took = time.Since(start)
	close(done)
	if r := rss(pid); r > p.Load() {
		p.Store(r)
	}
	return p.Load(), took
}

func main() {
	bin := flag.String("store-bin", "bin/meganode-store", "store binary")
	keys := flag.Int("keys", 100000, "keys under the prefix")
	size := flag.Int("value", 2500, "value bytes")
	flag.Parse()
	st, err := storeproc.Start(storeproc.Options{Bin: *bin})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { st.Stop(); os.RemoveAll(st.DataDir) }()
	conn, err := grpc.NewClient("passthrough:///"+st.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	kv := pb.NewKVClient(conn)
	ctx := context.Background()
	p := "/registry/pods/bench/"
	value := []byte(strings.Repeat("v", *size))
	var ops []*pb.RequestOp
	for i := 0; i < *keys; i++ {
		ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(fmt.Sprintf("%spod-%07d", p, i)), Value: value}}})
		if len(ops) == 100 || i == *keys-1 {
			if _, err := kv.Txn(ctx, &pb.TxnRequest{Success: ops}); err != nil {
				log.Fatal(err)
			}
			ops = nil
		}
	}
	// Let the load's garbage settle; the watch log holds the load's events either way.
	time.Sleep(time.Second)
	pid := st.Pid()
	end := []byte("/registry/pods/bench0")
	fmt.Printf("store %s: %d keys × %d B values under %s (%d MiB of values)\n", *bin, *keys, *size, p, *keys**size>>20)
	base := rss(pid)
	fmt.Printf("RSS after load: %d MiB\n", base>>20)
	var n, chunks int
	peak, took := peakDuring(pid, func() {
		cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/etcdserverpb.KV/RangeStream", grpc.ForceCodec(codec{}))
		if err != nil {
			log.Fatal(err)
		}
		if err := cs.SendMsg(&pb.RangeRequest{Key: []byte(p), RangeEnd: end}); err != nil {
			log.Fatal(err)
		}
		cs.CloseSend()
		for {
			var f frame
			err := cs.RecvMsg(&f)
			if err == io.EOF {
				break
			}
			if err != nil {
				log.Fatal(err)
			}
			chunks++
			// A RangeStreamResponse{range_response} around a RangeResponse: count keys.
			var rr pb.RangeResponse
			if len(f.b) > 0 {
				i := 1
				_, w := decodeVarint(f.b[i:])
				if err := rr.Unmarshal(f.b[i+w:]); err != nil {
					log.Fatal(err)
				}
			}
			n += len(rr.Kvs)
		}
	})
	fmt.Printf("RangeStream: %d keys in %d chunks, %.2f s, peak RSS %d MiB (+%d MiB over the loaded store)\n",
		n, chunks, took.Seconds(), peak>>20, (peak-base)>>20)
	time.Sleep(time.Second)
	base = rss(pid)
	peak, took = peakDuring(pid, func() {
		r, err := kv.Range(ctx, &pb.RangeRequest{Key: []byte(p), RangeEnd: end})
		if err != nil {
			log.Fatal(err)
		}
		n = len(r.Kvs)
	})
	fmt.Printf("Range (unary, reference): %d keys, %.2f s, peak RSS %d MiB (+%d MiB)\n", n, took.Seconds(), peak>>20, (peak-base)>>20)
}

func decodeVarint(b []byte) (uint64, int) {
	var x uint64
	for i, c := range b {
		x |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return x, i + 1
		}
	}
	return 0, 0
}
