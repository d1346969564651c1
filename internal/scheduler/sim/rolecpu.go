package sim

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"runtime/pprof"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// Roles a CPU sample is charged to (RoleCPU). In one process the roles call each other
// directly (a shard hands its proposal to the collector on its own goroutine, the relay's
// queue is the shard's), so a goroutine is not a role; a sample's stack is: it goes to the role
// of the innermost frame that belongs to one, and the fake apiserver's code counts as the api.
const (
	RoleIntake    = "intake"
	RoleRelay     = "relay"
	RoleCollector = "collector"
	RoleShard     = "shard"
	RoleAPI       = "api"       // the in-process fake apiserver (client-go's fake tracker, Bindings)
	RoleInformers = "informers" // client-go reflectors and informer queues outside any role's handler
	RoleGC        = "gc"        // the garbage collector's background workers (assists are charged to the allocating role)
	RoleOther     = "other"     // the Go runtime, timers, this measurement
)

// Roles is every role in report order.
var Roles = []string{RoleIntake, RoleRelay, RoleCollector, RoleShard, RoleAPI, RoleInformers, RoleGC, RoleOther}

// frameRoles: a function name containing the key belongs to the role (innermost match wins).
var frameRoles = []struct{ key, role string }{
	{"/internal/scheduler/intake.", RoleIntake},
	{"/internal/scheduler/relay.", RoleRelay},
	{"/internal/scheduler/collector.", RoleCollector},
	{"/internal/scheduler/shard.", RoleShard},
	{"/internal/scheduler/fakeapi.", RoleAPI},
	{"k8s.io/client-go/testing.", RoleAPI},
	{"k8s.io/client-go/kubernetes/fake.", RoleAPI},
}

// roleOfStack is the role of a sample whose stack is funcs, innermost first. The framework's
// parallel Filter and Score run on workqueue.ParallelizeUntil goroutines whose stacks do not
// reach the shard that started them: kube-scheduler code without a role frame is the shards'
// (only shards run the framework during a run).
func roleOfStack(funcs []string) string {
	informer, gc, framework := false, false, false
	for _, f := range funcs {
		for _, fr := range frameRoles {
			if strings.Contains(f, fr.key) {
				return fr.role
			}
		}
		switch {
		case strings.HasPrefix(f, "k8s.io/client-go/tools/cache."):
			informer = true
		case strings.HasPrefix(f, "runtime.gcBgMarkWorker"):
			gc = true
		case strings.HasPrefix(f, "k8s.io/kubernetes/pkg/scheduler/"), strings.HasPrefix(f, "k8s.io/kube-scheduler/"),
			strings.HasPrefix(f, "k8s.io/client-go/util/workqueue.ParallelizeUntil"):
			framework = true
		}
	}
	switch {
	case framework:
		return RoleShard
	case informer:
		return RoleInformers
	case gc:
		return RoleGC
	}
	return RoleOther
}

// RoleProfile is a CPU profile of this process, to split its CPU by role.
type RoleProfile struct{ buf bytes.Buffer }

// StartRoleProfile starts the process's CPU profile (at most one per process: it fails while
// another, such as `simulate --cpuprofile`, runs).
func StartRoleProfile() (*RoleProfile, error) {
	p := &RoleProfile{}
	if err := pprof.StartCPUProfile(&p.buf); err != nil {
		return nil, err
	}
	return p, nil
}

// Stop ends the profile and returns the CPU seconds sampled per role.
func (p *RoleProfile) Stop() (map[string]float64, error) {
	pprof.StopCPUProfile()
	return roleSeconds(p.buf.Bytes())
}

// roleSeconds decodes a gzipped pprof profile (profile.proto, decoded with protowire: no pprof
// library in this module) and sums the samples' CPU nanoseconds per role.
func roleSeconds(gz []byte) (map[string]float64, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	type sample struct {
		locs   []uint64
		values []int64
	}
	var (
		samples   []sample
		strs      []string
		funcName  = map[uint64]int64{}    // function id → string index
		locFuncs  = map[uint64][]uint64{} // location id → function ids, innermost first
		valueKind []int64                 // sample_type type string indexes
	)
	err = fields(raw, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch num {
		case 1: // sample_type
			return fields(v, func(n protowire.Number, _ protowire.Type, _ []byte, x uint64) error {
				if n == 1 {
					valueKind = append(valueKind, int64(x))
				}
				return nil
			})
		case 2: // sample
			var s sample
			err := fields(v, func(n protowire.Number, t protowire.Type, b []byte, x uint64) error {
				switch n {
				case 1:
					s.locs = appendPacked(s.locs, t, b, x)
				case 2:
					for _, u := range appendPacked(nil, t, b, x) {
						s.values = append(s.values, int64(u))
					}
				}
				return nil
			})
			samples = append(samples, s)
			return err
		case 4: // location
			var id uint64
			var fns []uint64
			err := fields(v, func(n protowire.Number, _ protowire.Type, b []byte, x uint64) error {
				switch n {
				case 1:
					id = x
				case 4: // line: function_id is field 1
					return fields(b, func(n protowire.Number, _ protowire.Type, _ []byte, x uint64) error {
						if n == 1 {
							fns = append(fns, x)
						}
						return nil
					})
				}
				return nil
			})
			locFuncs[id] = fns
			return err
		case 5: // function
			var id uint64
			var name int64
			err := fields(v, func(n protowire.Number, _ protowire.Type, _ []byte, x uint64) error {
				switch n {
				case 1:
					id = x
				case 2:
					name = int64(x)
				}
				return nil
			})
			funcName[id] = name
			return err
		case 6: // string_table
			strs = append(strs, string(v))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	cpuIdx := -1 // the "cpu" (nanoseconds) value of each sample
	for i, k := range valueKind {
		if k >= 0 && int(k) < len(strs) && strs[k] == "cpu" {
			cpuIdx = i
		}
	}
	if cpuIdx < 0 {
		return nil, fmt.Errorf("cpu profile: no cpu sample type")
	}
	out := map[string]float64{}
	for _, s := range samples {
		if cpuIdx >= len(s.values) {
			continue
		}
		var funcs []string
		for _, l := range s.locs {
			for _, f := range locFuncs[l] {
				if k := funcName[f]; k >= 0 && int(k) < len(strs) {
					funcs = append(funcs, strs[k])
				}
			}
		}
		out[roleOfStack(funcs)] += float64(s.values[cpuIdx]) / 1e9
	}
	return out, nil
}

// fields calls fn for each field of the protobuf message b: varints with x set, length-delimited
// fields with v set (other wire types are skipped).
func fields(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ == protowire.VarintType || typ == protowire.BytesType {
			if err := fn(num, typ, v, x); err != nil {
				return err
			}
		}
	}
	return nil
}

// appendPacked appends a repeated varint field's values, packed (bytes) or not (one varint).
func appendPacked(dst []uint64, typ protowire.Type, b []byte, x uint64) []uint64 {
	if typ == protowire.VarintType {
		return append(dst, x)
	}
	for len(b) > 0 {
		u, n := protowire.ConsumeVarint(b)
		if n < 0 {
			break
		}
		dst = append(dst, u)
		b = b[n:]
	}
	return dst
}
