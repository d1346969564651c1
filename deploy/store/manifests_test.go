// Package store holds the manifests for running meganode-store on a Kubernetes cluster; this
// test parses every one of them into the k8s.io/api types, strictly, and checks the flags,
// volume and probes fit together and that each StatefulSet forms one replicated group with its
// Services, PodDisruptionBudget and NetworkPolicy (manifesttest.StoreProblems, which the chart's
// stores pass too). Broken copies of the main store must fail the same checks, and the peer TLS
// statefulset.yaml's comment describes must pass them.
package store

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/meganode/meganode/deploy/manifesttest"
)

// load decodes every manifest of this directory (deploy/manifesttest).
func load(t *testing.T) []manifesttest.Doc {
	t.Helper()
	return manifesttest.Load(t, map[string]func() any{
		"apps/v1/StatefulSet":                func() any { return &appsv1.StatefulSet{} },
		"v1/Service":                         func() any { return &corev1.Service{} },
		"v1/Namespace":                       func() any { return &corev1.Namespace{} },
		"policy/v1/PodDisruptionBudget":      func() any { return &policyv1.PodDisruptionBudget{} },
		"networking.k8s.io/v1/NetworkPolicy": func() any { return &networkingv1.NetworkPolicy{} },
	})
}

func objects(t *testing.T) (manifesttest.StoreObjects, map[string]*appsv1.StatefulSet) {
	t.Helper()
	o := manifesttest.StoreObjects{Services: map[string]*corev1.Service{}}
	sets := map[string]*appsv1.StatefulSet{}
	for _, d := range load(t) {
		switch x := d.Obj.(type) {
		case *corev1.Service:
			o.Services[x.Name] = x
		case *appsv1.StatefulSet:
			sets[x.Name] = x
		case *policyv1.PodDisruptionBudget:
			o.PDBs = append(o.PDBs, x)
		case *networkingv1.NetworkPolicy:
			o.NetworkPolicies = append(o.NetworkPolicies, x)
		}
	}
	return o, sets
}

func TestManifests(t *testing.T) {
	o, sets := objects(t)
	if len(sets) != 3 {
		t.Fatalf("%d StatefulSets, want main, leases and events", len(sets))
	}
	for name, s := range sets {
		t.Run(name, func(t *testing.T) {
			manifesttest.CheckStore(t, s, o)
			if *s.Spec.Replicas != 3 {
				t.Errorf("replicas %d: the manifests run 3-member groups", *s.Spec.Replicas)
			}
		})
	}
	// kube-apiserver's client port must stay out of the peer-only Services: the ClusterIP
	// Service serves the client (and metrics) port alone.
	for _, p := range o.Services["meganode-store"].Spec.Ports {
		if p.Name != "client" && p.Name != "metrics" {
			t.Errorf("Service meganode-store exposes port %s to its clients", p.Name)
		}
	}
}

// Each break of the main store's group must make the checks fail, with the named problem.
func TestManifestChecksFail(t *testing.T) {
	for _, c := range []struct {
		want   string
		break_ func(s *appsv1.StatefulSet, o *manifesttest.StoreObjects)
	}{
		{"want an odd number", func(s *appsv1.StatefulSet, _ *manifesttest.StoreObjects) { s.Spec.Replicas = ptr.To[int32](4) }},
		{"names 3 members, replicas is 5", func(s *appsv1.StatefulSet, _ *manifesttest.StoreObjects) { s.Spec.Replicas = ptr.To[int32](5) }},
		{"does not name pod meganode-store-2", func(s *appsv1.StatefulSet, _ *manifesttest.StoreObjects) {
			setFlag(s, "--initial-cluster", func(v string) string { return strings.Replace(v, "meganode-store-2=", "store-2=", 1) })
		}},
		{"its DNS name behind the headless Service", func(s *appsv1.StatefulSet, _ *manifesttest.StoreObjects) {
			setFlag(s, "--initial-cluster", func(v string) string { return strings.Replace(v, "-1.meganode-store-headless", "-1.meganode-store", 1) })
		}},
		{"want its --initial-cluster entry", func(s *appsv1.StatefulSet, _ *manifesttest.StoreObjects) {
			setFlag(s, "--initial-advertise-peer-urls", func(v string) string { return strings.Replace(v, ":2380", ":2390", 1) })
		}},
		{"want the pod's name", func(s *appsv1.StatefulSet, _ *manifesttest.StoreObjects) {
			setFlag(s, "--name", func(string) string { return "meganode-store" })
		}},
		{"durability mode \"always\" with 3 replicas", func(s *appsv1.StatefulSet, _ *manifesttest.StoreObjects) {
			setFlag(s, "--durability", func(string) string { return "always" })
		}},
		// The former workaround: a plain-HTTP client port for followers forwarding to the leader.
		{"a plain-HTTP client listener beside TLS", func(s *appsv1.StatefulSet, _ *manifesttest.StoreObjects) {
			s.Spec.Template.Spec.Containers[0].Ports = append(s.Spec.Template.Spec.Containers[0].Ports, corev1.ContainerPort{Name: "forward", ContainerPort: 2382})
			setFlag(s, "--listen-client-urls", func(v string) string { return v + ",http://0.0.0.0:2382" })
			setFlag(s, "--advertise-client-urls", func(v string) string {
				return v + ",http://$(POD_NAME).meganode-store-headless.$(POD_NAMESPACE).svc:2382"
			})
		}},
		{"no --listen-client-urls https:// listener on port 2389", func(s *appsv1.StatefulSet, _ *manifesttest.StoreObjects) {
			setFlag(s, "--advertise-client-urls", func(v string) string { return strings.Replace(v, ":2379", ":2389", 1) })
		}},
		{"minReadySeconds 0", func(s *appsv1.StatefulSet, _ *manifesttest.StoreObjects) { s.Spec.MinReadySeconds = 0 }},
		{"publishNotReadyAddresses must be true", func(s *appsv1.StatefulSet, o *manifesttest.StoreObjects) {
			o.Services[s.Spec.ServiceName].Spec.PublishNotReadyAddresses = false
		}},
		{"no port peer 2380", func(s *appsv1.StatefulSet, o *manifesttest.StoreObjects) {
			svc := o.Services[s.Spec.ServiceName]
			svc.Spec.Ports = svc.Spec.Ports[:1]
		}},
		{"want maxUnavailable 1 or minAvailable 2", func(s *appsv1.StatefulSet, o *manifesttest.StoreObjects) {
			for _, b := range o.PDBs {
				b.Spec.MaxUnavailable = ptr.To(intstr.FromInt32(2))
			}
		}},
		{"0 PodDisruptionBudgets", func(_ *appsv1.StatefulSet, o *manifesttest.StoreObjects) { o.PDBs = nil }},
		{"no pod anti-affinity", func(s *appsv1.StatefulSet, _ *manifesttest.StoreObjects) { s.Spec.Template.Spec.Affinity = nil }},
		{"lets every source reach the peer port", func(_ *appsv1.StatefulSet, o *manifesttest.StoreObjects) {
			for _, np := range o.NetworkPolicies {
				np.Spec.Ingress[1].From = nil
			}
		}},
		{"want only the group's pods", func(_ *appsv1.StatefulSet, o *manifesttest.StoreObjects) {
			for _, np := range o.NetworkPolicies {
				np.Spec.Ingress[1].From[0].NamespaceSelector = &metav1.LabelSelector{}
			}
		}},
		{"no NetworkPolicy isolates", func(_ *appsv1.StatefulSet, o *manifesttest.StoreObjects) { o.NetworkPolicies = nil }},
		{"podManagementPolicy", func(s *appsv1.StatefulSet, _ *manifesttest.StoreObjects) {
			s.Spec.PodManagementPolicy = appsv1.OrderedReadyPodManagement
		}},
		// Peer TLS: https:// peer URLs need it (the store refuses to start), http:// ones ignore it.
		{"https:// peer URLs without peer TLS", func(s *appsv1.StatefulSet, _ *manifesttest.StoreObjects) { peerHTTPS(s) }},
		{"--peer-auto-tls with http:// peer URLs", func(s *appsv1.StatefulSet, _ *manifesttest.StoreObjects) {
			addArgs(s, "--peer-auto-tls")
		}},
		{"want https://meganode-store-1.meganode-store-headless.meganode-store.svc:2380", func(s *appsv1.StatefulSet, _ *manifesttest.StoreObjects) {
			peerHTTPS(s)
			addArgs(s, "--peer-auto-tls")
			setFlag(s, "--initial-cluster", func(v string) string { return strings.Replace(v, "-1=https://", "-1=http://", 1) })
		}},
		{"is not in a Secret volume mounted at its directory /etc/meganode-store/peer-tls", func(s *appsv1.StatefulSet, _ *manifesttest.StoreObjects) {
			peerHTTPS(s)
			addArgs(s, peerSecretArgs...) // the Secret not mounted
		}},
		{"without --peer-trusted-ca-file", func(s *appsv1.StatefulSet, _ *manifesttest.StoreObjects) {
			peerHTTPS(s)
			addPeerSecret(s)
			c := &s.Spec.Template.Spec.Containers[0]
			c.Args = slices.DeleteFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--peer-trusted-ca-file=") })
		}},
	} {
		t.Run(c.want, func(t *testing.T) {
			o, sets := objects(t)
			s := sets["meganode-store"]
			if p := manifesttest.StoreProblems(s, o); len(p) != 0 {
				t.Fatalf("unbroken: %v", p)
			}
			c.break_(s, &o)
			p := manifesttest.StoreProblems(s, o)
			if !strings.Contains(fmt.Sprint(p), c.want) {
				t.Errorf("problems %q, want one saying %q", p, c.want)
			}
		})
	}
}

// The peer TLS statefulset.yaml's comment describes passes the checks: https:// peer URLs with
// --peer-auto-tls, or with etcd's certificate flags and the Secret mounted at their directory.
func TestPeerTLSAsDocumented(t *testing.T) {
	for name, enable := range map[string]func(s *appsv1.StatefulSet){
		"auto":   func(s *appsv1.StatefulSet) { addArgs(s, "--peer-auto-tls") },
		"secret": addPeerSecret,
	} {
		t.Run(name, func(t *testing.T) {
			o, sets := objects(t)
			for _, s := range sets {
				peerHTTPS(s)
				enable(s)
				if p := manifesttest.StoreProblems(s, o); len(p) != 0 {
					t.Errorf("%s: %q", s.Name, p)
				}
			}
		})
	}
}

// peerHTTPS switches every peer URL of the store container to https://.
func peerHTTPS(s *appsv1.StatefulSet) {
	for _, f := range []string{"--initial-cluster", "--listen-peer-urls", "--initial-advertise-peer-urls"} {
		setFlag(s, f, func(v string) string { return strings.ReplaceAll(v, "http://", "https://") })
	}
}

var peerSecretArgs = []string{
	"--peer-cert-file=/etc/meganode-store/peer-tls/tls.crt",
	"--peer-key-file=/etc/meganode-store/peer-tls/tls.key",
	"--peer-trusted-ca-file=/etc/meganode-store/peer-tls/ca.crt",
	"--peer-client-cert-auth",
}

// addPeerSecret gives the store container etcd's peer certificate flags and the Secret
// meganode-store-peer-tls mounted at their directory, as statefulset.yaml's comment describes.
func addPeerSecret(s *appsv1.StatefulSet) {
	addArgs(s, peerSecretArgs...)
	spec := &s.Spec.Template.Spec
	spec.Containers[0].VolumeMounts = append(spec.Containers[0].VolumeMounts,
		corev1.VolumeMount{Name: "peer-tls", MountPath: "/etc/meganode-store/peer-tls", ReadOnly: true})
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "peer-tls",
		VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "meganode-store-peer-tls", DefaultMode: ptr.To[int32](0o400)}}})
}

func addArgs(s *appsv1.StatefulSet, args ...string) {
	s.Spec.Template.Spec.Containers[0].Args = append(s.Spec.Template.Spec.Containers[0].Args, args...)
}

// setFlag rewrites the value of one --flag=value argument of the store container.
func setFlag(s *appsv1.StatefulSet, flag string, f func(string) string) {
	args := s.Spec.Template.Spec.Containers[0].Args
	for i, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok && k == flag {
			args[i] = k + "=" + f(v)
			return
		}
	}
	panic("no " + flag)
}
