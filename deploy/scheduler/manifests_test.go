// Package scheduler holds the manifests for running the meganode scheduler on a Kubernetes
// cluster. This test parses every one of them strictly into the k8s.io/api types and checks
// that the two ways to apply them (watch intake: everything but collectors-webhook.yaml and
// webhook.yaml; webhook intake: everything but collectors.yaml) fit together: Services select
// a workload and name its ports, every address in a flag is a pod of a StatefulSet behind its
// headless Service, shard and collector counts agree, and the webhook configuration points at
// the collectors' webhook port with failurePolicy Ignore. The apiserver's own validation runs
// in test/e2e/scheduler (server-side dry run on an `up` cluster).
package scheduler

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/meganode/meganode/deploy/manifesttest"
)

// load decodes every manifest of this directory (deploy/manifesttest).
func load(t *testing.T) []manifesttest.Doc {
	t.Helper()
	return manifesttest.Load(t, map[string]func() any{
		"v1/Namespace":        func() any { return &corev1.Namespace{} },
		"v1/ServiceAccount":   func() any { return &corev1.ServiceAccount{} },
		"v1/Service":          func() any { return &corev1.Service{} },
		"apps/v1/StatefulSet": func() any { return &appsv1.StatefulSet{} },
		"apps/v1/Deployment":  func() any { return &appsv1.Deployment{} },
		"rbac.authorization.k8s.io/v1/ClusterRoleBinding":                func() any { return &rbacv1.ClusterRoleBinding{} },
		"admissionregistration.k8s.io/v1/ValidatingWebhookConfiguration": func() any { return &admissionregistrationv1.ValidatingWebhookConfiguration{} },
	})
}

func TestManifests(t *testing.T) {
	docs := load(t)
	t.Run("watch intake", func(t *testing.T) {
		manifesttest.CheckScheduler(t, docs, "meganode", "collectors-webhook.yaml", "webhook.yaml")
	})
	t.Run("webhook intake", func(t *testing.T) { manifesttest.CheckScheduler(t, docs, "meganode", "collectors.yaml") })
}

// The webhook variant of the collectors is collectors.yaml plus the webhook's flags, port and
// volume: nothing else may drift apart.
func TestWebhookCollectorsMatchWatchCollectors(t *testing.T) {
	var watch, hook *appsv1.StatefulSet
	for _, d := range load(t) {
		if s, ok := d.Obj.(*appsv1.StatefulSet); ok && s.Name == "meganode-collector" {
			switch d.File {
			case "collectors.yaml":
				watch = s
			case "collectors-webhook.yaml":
				hook = s
			}
		}
	}
	if watch == nil || hook == nil {
		t.Fatal("meganode-collector StatefulSet missing from collectors.yaml or collectors-webhook.yaml")
	}
	wf, hf := manifesttest.Flags(watch.Spec.Template.Spec.Containers[0]), manifesttest.Flags(hook.Spec.Template.Spec.Containers[0])
	for k, v := range wf {
		if hf[k] != v {
			t.Errorf("%s: %q in collectors.yaml, %q in collectors-webhook.yaml", k, v, hf[k])
		}
	}
	for k := range hf {
		if _, ok := wf[k]; !ok && !strings.HasPrefix(k, "--webhook-") && k != "--intake" && k != "--reconcile-every" && k != "--collector-addrs" {
			t.Errorf("collectors-webhook.yaml adds %s: only webhook flags may differ", k)
		}
	}
	w, h := watch.DeepCopy(), hook.DeepCopy()
	for _, s := range []*appsv1.StatefulSet{w, h} {
		c := &s.Spec.Template.Spec.Containers[0]
		c.Args, c.VolumeMounts = nil, nil
		c.Ports = slices.DeleteFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "webhook" })
		s.Spec.Template.Spec.Volumes = nil
	}
	a, _ := yaml.Marshal(w)
	b, _ := yaml.Marshal(h)
	if !bytes.Equal(a, b) {
		t.Errorf("the collectors differ beyond the webhook's flags, port and volume:\n%s\n---\n%s", a, b)
	}
}
