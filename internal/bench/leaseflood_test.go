package bench

import (
	"bytes"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
)

func TestLeaseEncodingRoundTrip(t *testing.T) {
	now := time.Date(2026, 11, 23, 1, 2, 3, 456789000, time.UTC)
	l := NodeLease(NodeName(42), now)
	b, err := EncodeLease(l)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("k8s\x00")) {
		t.Fatalf("stored value must start with the k8s\\x00 protobuf envelope, got %q", b[:8])
	}
	// The envelope is a runtime.Unknown carrying the type and the raw object.
	var unk runtime.Unknown
	if err := unk.Unmarshal(b[4:]); err != nil {
		t.Fatal(err)
	}
	if unk.APIVersion != "coordination.k8s.io/v1" || unk.Kind != "Lease" || len(unk.Raw) == 0 {
		t.Fatalf("envelope: %+v", unk.TypeMeta)
	}
	got, err := DecodeLease(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "node-0000042" || got.Namespace != "kube-node-lease" || *got.Spec.HolderIdentity != "node-0000042" ||
		*got.Spec.LeaseDurationSeconds != 40 || !got.Spec.RenewTime.Time.Equal(now) ||
		len(got.OwnerReferences) != 1 || got.OwnerReferences[0].Kind != "Node" || len(got.ManagedFields) != 1 {
		t.Fatalf("round trip lost fields: %+v", got)
	}
	if got.ResourceVersion != "" {
		t.Fatal("the stored object carries no resourceVersion")
	}
	later := now.Add(10 * time.Second)
	Renew(l, later)
	b2, _ := EncodeLease(l)
	got2, err := DecodeLease(b2)
	if err != nil || !got2.Spec.RenewTime.Time.Equal(later) {
		t.Fatalf("renewal: %v %v", err, got2)
	}
	if len(b) < 200 || len(b) > 1000 {
		t.Fatalf("a node Lease is a few hundred bytes, got %d", len(b))
	}
	if LeasePrefix+NodeName(1) != "/registry/leases/kube-node-lease/node-0000001" {
		t.Fatal("key layout")
	}
}
