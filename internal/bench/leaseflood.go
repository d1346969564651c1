package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
)

// LeasePrefix is where kube-apiserver keeps node heartbeats (the kube-node-lease namespace).
const LeasePrefix = "/registry/leases/kube-node-lease/"

var (
	leaseScheme = func() *runtime.Scheme {
		s := runtime.NewScheme()
		if err := coordinationv1.AddToScheme(s); err != nil {
			panic(err)
		}
		return s
	}()
	// leaseCodec is the serializer kube-apiserver stores objects with when
	// --storage-media-type is protobuf (the default): "k8s\x00" followed by a
	// runtime.Unknown whose Raw is the versioned object.
	leaseCodec = protobuf.NewSerializer(leaseScheme, leaseScheme)
	leaseGVK   = coordinationv1.SchemeGroupVersion.WithKind("Lease")
)

// NodeLease is the Lease a kubelet keeps for its node, as stored (no resourceVersion:
// the apiserver takes it from the key's ModRevision).
func NodeLease(node string, now time.Time) *coordinationv1.Lease {
	dur := int32(40)
	holder := node
	nodeUID := types.UID(fmt.Sprintf("%08x-0000-4000-8000-%012x", hash32(node), hash32("node/"+node)))
	t := metav1.NewTime(now.Truncate(time.Second))
	fields := fmt.Sprintf(`{"f:metadata":{"f:ownerReferences":{".":{},"k:{\"uid\":\"%s\"}":{}}},`+
		`"f:spec":{"f:holderIdentity":{},"f:leaseDurationSeconds":{},"f:renewTime":{}}}`, nodeUID)
	return &coordinationv1.Lease{
		TypeMeta: metav1.TypeMeta{APIVersion: leaseGVK.GroupVersion().String(), Kind: leaseGVK.Kind},
		ObjectMeta: metav1.ObjectMeta{
			Name:              node,
			Namespace:         "kube-node-lease",
			UID:               types.UID(fmt.Sprintf("%08x-1111-4000-8000-%012x", hash32("lease/"+node), hash32(node))),
			CreationTimestamp: t,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: node, UID: nodeUID,
			}},
			ManagedFields: []metav1.ManagedFieldsEntry{{
				Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate,
				APIVersion: "coordination.k8s.io/v1", Time: &t,
				FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)},
			}},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       &holder,
			LeaseDurationSeconds: &dur,
			RenewTime:            &metav1.MicroTime{Time: now},
		},
	}
}

// Renew moves the lease's renewTime (and the kubelet's managedFields time) to now.
func Renew(l *coordinationv1.Lease, now time.Time) {
	l.Spec.RenewTime = &metav1.MicroTime{Time: now}
	if len(l.ManagedFields) > 0 {
		t := metav1.NewTime(now.Truncate(time.Second))
		l.ManagedFields[0].Time = &t
	}
}

// EncodeLease encodes l exactly as kube-apiserver writes it to the store.
func EncodeLease(l *coordinationv1.Lease) ([]byte, error) {
	l.TypeMeta = metav1.TypeMeta{APIVersion: leaseGVK.GroupVersion().String(), Kind: leaseGVK.Kind}
	var buf bytes.Buffer
	if err := leaseCodec.Encode(l, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// DecodeLease decodes a stored Lease.
func DecodeLease(b []byte) (*coordinationv1.Lease, error) {
	obj, _, err := leaseCodec.Decode(b, &leaseGVK, &coordinationv1.Lease{})
	if err != nil {
		return nil, err
	}
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return nil, fmt.Errorf("decoded a %T, not a Lease", obj)
	}
	return l, nil
}

func hash32(s string) uint32 { // FNV-1a, for stable fake UIDs
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// LeaseFlood is Kubernetes node heartbeats: each worker owns some node Leases,
// creates them with the apiserver's create Txn, then renews them round-robin in
// a tight loop with the apiserver's update Txn:
//
//	If(ModRevision(k) = last) Then(Put(k, v)) Else(Get(k))
//
// tracking the revision each answer returns, as the apiserver's optimistic
// concurrency does. One op = one renewal.
type LeaseFlood struct {
	cfg       Config
	conflicts atomic.Int64
	// noInnerRev counts successful Txns whose inner put header had revision 0
	// (an incompatibility with etcd that kube-apiserver would trip on).
	noInnerRev atomic.Int64
	bytes      atomic.Int64
	encoded    atomic.Int64
}

type leaseSlot struct {
	key string
	obj *coordinationv1.Lease
	rev int64
}

type leaseWorker struct {
	slots []*leaseSlot
	next  int
}

// NewLeaseFlood returns the lease-flood workload.
func NewLeaseFlood(cfg Config) (*LeaseFlood, error) {
	cfg.Normalize()
	return &LeaseFlood{cfg: cfg}, nil
}

func (l *LeaseFlood) Name() string { return "lease-flood" }

// NodeName of lease i.
func NodeName(i int) string { return fmt.Sprintf("node-%07d", i) }

func (l *LeaseFlood) Setup(ctx context.Context, r *Run) error {
	n := r.Cfg.Leases
	now := time.Now()
	for _, w := range r.Workers {
		w.State = &leaseWorker{}
	}
	for i := 0; i < n; i++ {
		w := r.Workers[i%len(r.Workers)]
		node := NodeName(i)
		st := w.State.(*leaseWorker)
		st.slots = append(st.slots, &leaseSlot{key: LeasePrefix + node, obj: NodeLease(node, now)})
	}
	return forEachWorker(r, func(w *Worker) error {
		for _, s := range w.State.(*leaseWorker).slots {
			if err := createLease(ctx, w.Cli, s); err != nil {
				return err
			}
		}
		return nil
	})
}

// createLease is the apiserver's create: If(ModRevision(k) = 0) Then(Put). A key
// left by an earlier run against the same server is adopted at its revision.
func createLease(ctx context.Context, cli *clientv3.Client, s *leaseSlot) error {
	data, err := EncodeLease(s.obj)
	if err != nil {
		return err
	}
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(s.key), "=", 0)).
		Then(clientv3.OpPut(s.key, string(data))).Commit()
	if err != nil {
		return err
	}
	if resp.Succeeded {
		s.rev, err = putRevision(resp)
		if err == errNoInnerRevision {
			err = nil
		}
		return err
	}
	g, err := cli.Get(ctx, s.key)
	if err != nil {
		return err
	}
	if len(g.Kvs) == 0 {
		return fmt.Errorf("create of %s failed but the key does not exist", s.key)
	}
	s.rev = g.Kvs[0].ModRevision
	return nil
}

// putRevision is what the apiserver reads after a successful Txn put: the header
// of the put response inside the Txn.
func putRevision(resp *clientv3.TxnResponse) (int64, error) {
	if len(resp.Responses) != 1 {
		return 0, fmt.Errorf("txn returned %d responses, want 1", len(resp.Responses))
	}
	p := resp.Responses[0].GetResponsePut()
	if p == nil {
		return 0, errors.New("txn succeeded without a put response")
	}
	if p.Header == nil {
		return 0, errors.New("put response inside the txn has no header (kube-apiserver reads its revision)")
	}
	if p.Header.Revision == 0 {
		// etcd fills it; kube-apiserver takes the object's resourceVersion from
		// it. Carry on with the Txn's own revision but let the report say so.
		return resp.Header.Revision, errNoInnerRevision
	}
	return p.Header.Revision, nil
}

// errNoInnerRevision: the put inside a Txn answered with revision 0.
var errNoInnerRevision = errors.New("put response inside the txn has revision 0")

func (l *LeaseFlood) Op(ctx context.Context, w *Worker) error {
	st := w.State.(*leaseWorker)
	s := st.slots[st.next]
	st.next = (st.next + 1) % len(st.slots)
	Renew(s.obj, time.Now())
	data, err := EncodeLease(s.obj)
	if err != nil {
		return err
	}
	l.bytes.Add(int64(len(data)))
	l.encoded.Add(1)
	resp, err := w.Cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(s.key), "=", s.rev)).
		Then(clientv3.OpPut(s.key, string(data))).
		Else(clientv3.OpGet(s.key)).Commit()
	if err != nil {
		return err
	}
	if resp.Succeeded {
		s.rev, err = putRevision(resp)
		if err == errNoInnerRevision {
			l.noInnerRev.Add(1)
			return nil
		}
		return err
	}
	// Someone else wrote it (or our revision was stale): the apiserver retries
	// with the object the Else branch returned.
	l.conflicts.Add(1)
	if len(resp.Responses) == 1 {
		if g := resp.Responses[0].GetResponseRange(); g != nil && len(g.Kvs) > 0 {
			s.rev = g.Kvs[0].ModRevision
			return nil
		}
	}
	s.rev = 0
	return nil
}

func (l *LeaseFlood) Finish(ctx context.Context, r *Run, res *Result) error {
	res.Params["leases"] = r.Cfg.Leases
	res.Extra["conflicts"] = float64(l.conflicts.Load())
	res.Extra["txn_put_revision_zero"] = float64(l.noInnerRev.Load())
	if n := l.encoded.Load(); n > 0 {
		res.Extra["lease_value_bytes"] = float64(l.bytes.Load()) / float64(n)
	}
	return nil
}
