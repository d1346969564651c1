// Package store holds the manifests for running meganode-store on a Kubernetes cluster; this
// test parses every one of them into the k8s.io/api types, strictly, and checks the flags,
// volume and probes fit together (manifesttest.CheckStore, which checks the chart's too).
package store

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/meganode/meganode/deploy/manifesttest"
)

// load decodes every manifest of this directory (deploy/manifesttest).
func load(t *testing.T) []manifesttest.Doc {
	t.Helper()
	return manifesttest.Load(t, map[string]func() any{
		"apps/v1/StatefulSet": func() any { return &appsv1.StatefulSet{} },
		"v1/Service":          func() any { return &corev1.Service{} },
		"v1/Namespace":        func() any { return &corev1.Namespace{} },
	})
}

func TestManifests(t *testing.T) {
	docs := load(t)
	services := map[string]*corev1.Service{}
	var sets []*appsv1.StatefulSet
	for _, d := range docs {
		switch o := d.Obj.(type) {
		case *corev1.Service:
			services[o.Name] = o
		case *appsv1.StatefulSet:
			sets = append(sets, o)
		}
	}
	if len(sets) != 3 {
		t.Fatalf("%d StatefulSets, want main, leases and events", len(sets))
	}
	for _, s := range sets {
		t.Run(s.Name, func(t *testing.T) { manifesttest.CheckStore(t, s, services) })
	}
}
