package linearizability

import (
	"fmt"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// The porcupine model: one key of etcd. Every op of the history is projected onto
// the keys it touches (a prefix Range becomes one read per key of the universe,
// at the Range's call and return times), so the check partitions by key.
// Cross-key atomicity of Ranges is checked by checkReadsAgainstRevisions.

// keyState is the model's state of one key.
type keyState struct {
	Exists  bool
	Value   string
	ModRev  int64 // 0 when !Exists; -1: written by an op of unknown outcome whose revision nobody saw yet
	LastRev int64 // a lower bound of the key's newest write revision (a new write must be above it)
}

type keyInput struct {
	Kind   opKind // opGet (any read), opPut, opDelete, opTxn
	Key    string
	Value  string
	Expect int64
}

type keyOutput struct {
	Unknown   bool
	Rev       int64
	Found     bool
	Value     string
	ModRev    int64
	Succeeded bool
	Deleted   int64
}

func stepRead(s keyState, o keyOutput) (bool, keyState) {
	if o.Found != s.Exists || o.Rev < s.LastRev {
		return false, s
	}
	if !o.Found {
		return true, s
	}
	if o.Value != s.Value || o.Rev < o.ModRev {
		return false, s
	}
	if s.ModRev == -1 { // learn the revision of a write of unknown outcome
		if o.ModRev <= s.LastRev {
			return false, s
		}
		s.ModRev, s.LastRev = o.ModRev, o.ModRev
		return true, s
	}
	return o.ModRev == s.ModRev, s
}

func keyStep(state, input, output interface{}) []interface{} {
	s, in, o := state.(keyState), input.(keyInput), output.(keyOutput)
	one := func(ok bool, n keyState) []interface{} {
		if !ok {
			return nil
		}
		return []interface{}{n}
	}
	put := func(rev int64) keyState {
		if rev == -1 {
			return keyState{Exists: true, Value: in.Value, ModRev: -1, LastRev: s.LastRev}
		}
		return keyState{Exists: true, Value: in.Value, ModRev: rev, LastRev: rev}
	}
	switch in.Kind {
	case opGet:
		return one(stepRead(s, o))
	case opPut:
		if o.Unknown {
			return one(true, put(-1))
		}
		return one(o.Rev > s.LastRev, put(o.Rev))
	case opDelete:
		gone := keyState{LastRev: s.LastRev}
		if o.Unknown {
			return one(true, gone)
		}
		if s.Exists {
			gone.LastRev = o.Rev
			return one(o.Deleted == 1 && o.Rev > s.LastRev, gone)
		}
		return one(o.Deleted == 0 && o.Rev >= s.LastRev, s)
	case opTxn:
		if o.Unknown {
			switch {
			case s.ModRev == -1: // the compare could go either way
				return []interface{}{s, put(-1)}
			case s.ModRev == in.Expect:
				return one(true, put(-1))
			default:
				return one(true, s)
			}
		}
		if o.Succeeded {
			if o.Rev <= s.LastRev || !(s.ModRev == in.Expect || (s.ModRev == -1 && in.Expect > s.LastRev)) {
				return nil
			}
			return one(true, put(o.Rev))
		}
		if s.ModRev == in.Expect {
			return nil
		}
		ok, n := stepRead(s, o)
		return one(ok && n.ModRev != in.Expect, n)
	}
	panic(fmt.Sprintf("model: op kind %v", in.Kind))
}

var keyModel = porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := op.Input.(keyInput).Key
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], op)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() []interface{} { return []interface{}{keyState{}} },
	Step: keyStep,
	DescribeOperation: func(input, output interface{}) string {
		in, o := input.(keyInput), output.(keyOutput)
		if o.Unknown {
			return fmt.Sprintf("%s(%s %q) unknown", in.Kind, in.Key, in.Value)
		}
		return fmt.Sprintf("%s(%s %q exp %d) -> rev %d found %v %q@%d ok %v del %d", in.Kind, in.Key, in.Value, in.Expect,
			o.Rev, o.Found, o.Value, o.ModRev, o.Succeeded, o.Deleted)
	},
	DescribeState: func(state interface{}) string { return fmt.Sprintf("%+v", state.(keyState)) },
}

// porcupineOps projects the history onto per-key operations. Reads that failed
// are dropped (they changed nothing); writes that failed keep an infinite return
// time and an Unknown output: porcupine may linearize them anywhere after their call.
func porcupineOps(h *History) []porcupine.Operation {
	var out []porcupine.Operation
	add := func(o *Op, in keyInput, res keyOutput) {
		ret := o.Return
		if o.unknown() {
			ret, res = unknownReturn, keyOutput{Unknown: true}
		}
		out = append(out, porcupine.Operation{ClientId: o.Client, Input: in, Call: o.Call, Output: res, Return: ret, Metadata: o})
	}
	for i := range h.Ops {
		o := &h.Ops[i]
		if o.unknown() && !o.isWrite() {
			continue
		}
		switch o.Kind {
		case opGet, opGetSerial:
			add(o, keyInput{Kind: opGet, Key: o.Key}, keyOutput{Rev: o.Rev, Found: o.Found, Value: o.Got.Value, ModRev: o.Got.ModRev})
		case opPut:
			add(o, keyInput{Kind: opPut, Key: o.Key, Value: o.Value}, keyOutput{Rev: o.Rev})
		case opDelete:
			add(o, keyInput{Kind: opDelete, Key: o.Key}, keyOutput{Rev: o.Rev, Deleted: o.Deleted})
		case opTxn:
			add(o, keyInput{Kind: opTxn, Key: o.Key, Value: o.Value, Expect: o.Expect},
				keyOutput{Rev: o.Rev, Succeeded: o.Succeeded, Found: o.Found, Value: o.Got.Value, ModRev: o.Got.ModRev})
		case opRange:
			o.rangeOf(h.Keys, func(k string, kv KV, ok bool) {
				add(o, keyInput{Kind: opGet, Key: k}, keyOutput{Rev: o.Rev, Found: ok, Value: kv.Value, ModRev: kv.ModRev})
			})
		}
	}
	return out
}

// checkPorcupine runs porcupine key by key (so a failure names its key); a timeout
// is reported as a failure, never as a pass.
func checkPorcupine(h *History, timeout time.Duration) []string {
	model := keyModel.ToModel()
	var out []string
	deadline := time.Now().Add(timeout)
	for _, part := range keyModel.Partition(porcupineOps(h)) {
		key := part[0].Input.(keyInput).Key
		res, info := porcupine.CheckOperationsVerbose(model, part, time.Until(deadline))
		switch res {
		case porcupine.Ok:
			continue
		case porcupine.Unknown:
			out = append(out, fmt.Sprintf("porcupine: no verdict on %s (%d ops) within %v (not a pass)", key, len(part), timeout))
			continue
		}
		out = append(out, fmt.Sprintf("porcupine: the history of %s (%d ops) is not linearizable; the longest partial linearization ends:", key, len(part)))
		var longest []porcupine.Operation
		for _, p := range info.PartialLinearizationsOperations() {
			for _, l := range p {
				if len(l) > len(longest) {
					longest = l
				}
			}
		}
		from := max(len(longest)-6, 0)
		for _, op := range longest[from:] {
			out = append(out, "    "+op.Metadata.(*Op).String())
		}
		// The ops that could not be placed after it: those not yet linearized that were
		// called before the earliest return among them.
		done := map[*Op]bool{}
		for _, op := range longest {
			done[op.Metadata.(*Op)] = true
		}
		next := int64(unknownReturn)
		for _, op := range part {
			if !done[op.Metadata.(*Op)] && op.Return < next {
				next = op.Return
			}
		}
		for _, op := range part {
			if o := op.Metadata.(*Op); !done[o] && op.Call <= next {
				out = append(out, "    could not linearize next: "+o.String())
			}
		}
	}
	return out
}
