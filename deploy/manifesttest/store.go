package manifesttest

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// CheckStore checks one meganode-store StatefulSet (deploy/store, and the chart's): one replica
// behind a headless Service that selects its pods, the etcd-style flags present, --data-dir on
// the claim template's volume, durability modes the store knows, TLS files under a mount, and
// probes on /livez, /health or /readyz of the port --listen-metrics-urls opens.
func CheckStore(t *testing.T, s *appsv1.StatefulSet, services map[string]*corev1.Service) {
	t.Helper()
	if s.Spec.Replicas == nil || *s.Spec.Replicas != 1 {
		t.Error("meganode-store is a single member: replicas must be 1")
	}
	svc := services[s.Spec.ServiceName]
	if svc == nil || svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("serviceName %q: no headless Service", s.Spec.ServiceName)
	} else {
		for k, v := range svc.Spec.Selector {
			if s.Spec.Template.Labels[k] != v {
				t.Errorf("Service %s selects %s=%s, the pods have %q", svc.Name, k, v, s.Spec.Template.Labels[k])
			}
		}
	}
	for k, v := range s.Spec.Selector.MatchLabels {
		if s.Spec.Template.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the template", k, v)
		}
	}
	if len(s.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%d containers", len(s.Spec.Template.Spec.Containers))
	}
	c := s.Spec.Template.Spec.Containers[0]
	flags := map[string]string{}
	for _, a := range c.Args {
		k, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		flags[k] = v
	}
	for _, f := range []string{"name", "data-dir", "listen-client-urls", "advertise-client-urls", "listen-metrics-urls", "durability"} {
		if flags[f] == "" {
			t.Errorf("--%s missing", f)
		}
	}
	// The data dir is on the PersistentVolume of the claim template.
	var claims []string
	for _, pvc := range s.Spec.VolumeClaimTemplates {
		claims = append(claims, pvc.Name)
		if pvc.Spec.Resources.Requests.Storage().IsZero() {
			t.Errorf("claim %s without a size", pvc.Name)
		}
	}
	onPV := false
	for _, m := range c.VolumeMounts {
		if m.MountPath == flags["data-dir"] {
			for _, n := range claims {
				onPV = onPV || n == m.Name
			}
		}
	}
	if !onPV {
		t.Errorf("--data-dir=%s is not a mounted volume claim (%v)", flags["data-dir"], claims)
	}
	// Durability modes are the store's.
	modes := []string{flags["durability"]}
	if p := flags["durability-prefix"]; p != "" {
		for _, item := range strings.Split(p, ",") {
			i := strings.LastIndexByte(item, '=')
			if i < 0 || !strings.HasPrefix(item, "/registry/") {
				t.Errorf("--durability-prefix entry %q: want /registry/…/=MODE", item)
				continue
			}
			modes = append(modes, item[i+1:])
		}
	}
	for _, m := range modes {
		if m != "none" && m != "buffered" && m != "fsync" {
			t.Errorf("durability mode %q", m)
		}
	}
	// TLS files are in a mounted secret.
	if flags["cert-file"] != "" {
		for _, f := range []string{"cert-file", "key-file", "trusted-ca-file"} {
			if !mounted(c, flags[f]) {
				t.Errorf("--%s=%s is not under a volume mount", f, flags[f])
			}
		}
	}
	// Probes hit /livez, /health or /readyz on the port --listen-metrics-urls opens.
	mu, err := url.Parse(flags["listen-metrics-urls"])
	if err != nil {
		t.Fatal(err)
	}
	metricsPort := mu.Port()
	cu, _ := url.Parse(strings.Split(flags["listen-client-urls"], ",")[0])
	ports := map[string]string{}
	for _, p := range c.Ports {
		ports[p.Name] = fmt.Sprint(p.ContainerPort)
	}
	if ports["metrics"] != metricsPort || ports["client"] != cu.Port() {
		t.Errorf("container ports %v do not match client %s / metrics %s", ports, cu.Port(), metricsPort)
	}
	// Liveness on /livez, not /health: /health answers 503 while an alarm (NOSPACE) is raised,
	// as etcd's does, and a kubelet restarting a full store would not free a byte.
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/livez" {
		t.Fatalf("liveness probe: want GET /livez on the metrics port, got %+v", c.LivenessProbe)
	}
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		if p == nil {
			continue
		}
		if p.HTTPGet == nil || (p.HTTPGet.Port.String() != "metrics" && p.HTTPGet.Port.String() != metricsPort) {
			t.Errorf("probe %+v is not on the metrics port", p)
		}
		if p.HTTPGet != nil && p.HTTPGet.Path != "/health" && p.HTTPGet.Path != "/readyz" && p.HTTPGet.Path != "/livez" {
			t.Errorf("probe path %s: the store serves /health, /livez, /readyz", p.HTTPGet.Path)
		}
	}
}

func mounted(c corev1.Container, path string) bool {
	for _, m := range c.VolumeMounts {
		if strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
			return true
		}
	}
	return false
}
