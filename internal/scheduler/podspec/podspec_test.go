package podspec

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meganode/meganode/internal/scheduler/fakeapi"
)

func TestPodSignature(t *testing.T) {
	ctrl := true
	own := func(uid string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs", UID: types.UID("rs-" + uid), Controller: &ctrl}}
	}
	a, b := fakeapi.Pod("ns", "a", DefaultSchedulerName, 100, 64), fakeapi.Pod("ns", "b", DefaultSchedulerName, 100, 64)
	a.OwnerReferences, b.OwnerReferences = own("1"), own("1")
	sa, _ := Signature(a)
	sb, _ := Signature(b)
	if string(sa) != string(sb) {
		t.Fatal("identical pods of one owner have different signatures")
	}
	c := b.DeepCopy()
	c.Spec.NodeSelector = map[string]string{"zone": "b"}
	if sc, _ := Signature(c); string(sc) == string(sa) {
		t.Fatal("node selector not in the signature")
	}
	d := fakeapi.Pod("ns", "d", DefaultSchedulerName, 200, 64)
	if sd, _ := Signature(d); string(sd) == string(sa) {
		t.Fatal("requests not in the signature")
	}
}
