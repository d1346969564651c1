package etcdproxy

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/protoadapt"
)

// Directions of a recorded line.
const (
	DirReq       = "req"        // a message from the client (kube-apiserver) to the store
	DirResp      = "resp"       // a message from the store to the client; for a unary call also its error
	DirHalfClose = "half_close" // the client closed its sending side of a stream
	DirEnd       = "end"        // a stream ended; Error is set unless it ended with OK
)

// Line is one JSON line of a recording.
type Line struct {
	Time   time.Time       `json:"time"`
	Stream uint64          `json:"stream"` // one id per RPC (unary call or stream)
	Dir    string          `json:"dir"`
	Method string          `json:"method"` // full gRPC method, e.g. /etcdserverpb.KV/Range
	Msg    json.RawMessage `json:"msg,omitempty"`
	Error  *LineError      `json:"error,omitempty"`
}

// LineError is a gRPC status.
type LineError struct {
	Code    uint32 `json:"code"`
	Message string `json:"message"`
}

type entry struct {
	t      time.Time
	stream uint64
	dir    string
	method string
	msg    any // protoadapt.MessageV1, *frame (raw forwarding) or nil
	err    error
}

// Recorder writes entries as JSON lines from its own goroutine through a buffered writer, so
// the forwarding path only pays for a channel send. Messages handed to Log must not be changed
// afterwards (the proxy only forwards them, which reads them).
type Recorder struct {
	mu     sync.RWMutex
	closed bool
	ch     chan entry
	done   chan struct{}
	w      *bufio.Writer
	c      io.Closer
	err    error
	lines  atomic.Uint64
}

// NewRecorder records into w (closed by Close if it is an io.Closer).
func NewRecorder(w io.Writer) *Recorder {
	r := &Recorder{ch: make(chan entry, 1<<16), done: make(chan struct{}), w: bufio.NewWriterSize(w, 1<<20)}
	if c, ok := w.(io.Closer); ok {
		r.c = c
	}
	go r.run()
	return r
}

// CreateRecorder records into a new file at path (truncated if it exists).
func CreateRecorder(path string) (*Recorder, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return NewRecorder(f), nil
}

// Log queues one entry. It blocks only when the writer is 65,536 entries behind; after Close
// it drops the entry. A nil Recorder records nothing.
func (r *Recorder) Log(stream uint64, dir, method string, msg any, err error) {
	if r == nil {
		return
	}
	e := entry{t: time.Now(), stream: stream, dir: dir, method: method, msg: msg, err: err}
	r.mu.RLock()
	if !r.closed {
		r.ch <- e
	}
	r.mu.RUnlock()
}

// Close writes what is queued, flushes and closes the file.
func (r *Recorder) Close() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.ch)
	}
	r.mu.Unlock()
	<-r.done
	return r.err
}

// Lines written so far (after Close: all of them).
func (r *Recorder) Lines() uint64 { return r.lines.Load() }

func (r *Recorder) run() {
	defer close(r.done)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var buf []byte
	for {
		select {
		case e, ok := <-r.ch:
			if !ok {
				r.keep(r.w.Flush())
				if r.c != nil {
					r.keep(r.c.Close())
				}
				return
			}
			buf = appendLine(buf[:0], &e)
			_, err := r.w.Write(buf)
			r.keep(err)
			r.lines.Add(1)
		case <-tick.C:
			r.keep(r.w.Flush())
		}
	}
}

func (r *Recorder) keep(err error) {
	if err != nil && r.err == nil {
		r.err = err
	}
}

var marshalOpts = protojson.MarshalOptions{}

// appendLine formats one entry without going through encoding/json for the message.
func appendLine(b []byte, e *entry) []byte {
	b = append(b, `{"time":"`...)
	b = e.t.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","stream":`...)
	b = strconv.AppendUint(b, e.stream, 10)
	b = append(b, `,"dir":"`...)
	b = append(b, e.dir...)
	b = append(b, `","method":`...)
	b = strconv.AppendQuote(b, e.method)
	if e.msg != nil {
		b = append(b, `,"msg":`...)
		b = appendMsg(b, e.method, e.dir == DirResp, e.msg)
	}
	if e.err != nil {
		st, _ := status.FromError(e.err)
		b = append(b, `,"error":{"code":`...)
		b = strconv.AppendUint(b, uint64(st.Code()), 10)
		b = append(b, `,"message":`...)
		mb, _ := json.Marshal(st.Message())
		b = append(b, mb...)
		b = append(b, '}')
	}
	return append(b, "}\n"...)
}

// appendMsg formats a message as protojson. Raw frames (methods the v3.6 Go types lack) are
// decoded where their shape is known (KV/RangeStream) and written as base64 otherwise.
func appendMsg(b []byte, method string, resp bool, msg any) []byte {
	switch m := msg.(type) {
	case protoadapt.MessageV1:
		out, err := marshalOpts.MarshalAppend(b, protoadapt.MessageV2Of(m))
		if err != nil {
			return appendRaw(b, nil, err)
		}
		return out
	case *frame:
		if method == MethodRangeStream {
			if !resp {
				var req pb.RangeRequest
				if err := req.Unmarshal(m.b); err == nil {
					return appendMsg(b, "", false, &req)
				}
			} else if rr, err := RangeStreamChunk(m.b); err == nil {
				b = append(b, `{"rangeResponse":`...)
				b = appendMsg(b, "", true, rr)
				return append(b, '}')
			}
		}
		return appendRaw(b, m.b, nil)
	}
	return append(b, "null"...)
}

func appendRaw(b, raw []byte, err error) []byte {
	b = append(b, `{"raw":"`...)
	b = base64.StdEncoding.AppendEncode(b, raw)
	b = append(b, '"')
	if err != nil {
		b = append(b, `,"marshalError":`...)
		mb, _ := json.Marshal(err.Error())
		b = append(b, mb...)
	}
	return append(b, '}')
}

// RangeStreamChunk decodes an etcd v3.7 RangeStreamResponse{range_response = 1}, a type the
// v3.6 Go API does not have, into its RangeResponse.
func RangeStreamChunk(b []byte) (*pb.RangeResponse, error) {
	rr := &pb.RangeResponse{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			var part pb.RangeResponse
			if err := part.Unmarshal(v); err != nil {
				return nil, err
			}
			rr.Kvs = append(rr.Kvs, part.Kvs...)
			if part.Header != nil {
				rr.Header = part.Header
			}
			rr.More = rr.More || part.More
			if part.Count != 0 {
				rr.Count = part.Count
			}
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
	}
	return rr, nil
}

// ReadRecording parses a recording.
func ReadRecording(path string) ([]Line, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseRecording(f)
}

// ParseRecording parses JSON lines; a truncated last line (a proxy that was killed) is ignored.
func ParseRecording(r io.Reader) ([]Line, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	var out []Line
	n := 0
	var pendingErr error
	for sc.Scan() {
		n++
		if pendingErr != nil {
			return nil, pendingErr
		}
		if len(sc.Bytes()) == 0 {
			continue
		}
		var l Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			pendingErr = errors.New("line " + strconv.Itoa(n) + ": " + err.Error())
			continue
		}
		out = append(out, l)
	}
	return out, sc.Err()
}
