// Package helm holds the Helm chart deploy/helm/meganode. This test renders it with `helm
// template` (bin/helm, `make helm`) under several value sets, decodes every object strictly
// into the k8s.io/api types, and runs the checks the plain manifests of deploy/store and
// deploy/scheduler pass (manifesttest.CheckStore, CheckScheduler) on the result — for a store
// group: --initial-cluster naming every pod, the Services' peer port, the disruption budget,
// anti-affinity and the NetworkPolicy, peer TLS on https:// peer URLs only — plus the durability
// plan, peer TLS's three modes (store.peerTLS.mode none, auto, secret), the ServiceMonitor's guard
// and the values' validation (an even store.replicas, or peerTLS mode secret without a Secret,
// fails the render). The apiserver's own
// validation of the rendered objects runs in test/e2e/scheduler (server-side dry run on an
// `up` cluster).
package helm

import (
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/meganode/meganode/deploy/manifesttest"
)

// serviceMonitor is the part of prometheus-operator's ServiceMonitor the chart writes (decoded
// strictly: a field outside it fails here; the CRD's own check is the e2e dry run).
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		JobLabel          string               `json:"jobLabel"`
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Scheme   string `json:"scheme"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

var kinds = map[string]func() any{
	"v1/ServiceAccount":   func() any { return &corev1.ServiceAccount{} },
	"v1/Service":          func() any { return &corev1.Service{} },
	"apps/v1/StatefulSet": func() any { return &appsv1.StatefulSet{} },
	"rbac.authorization.k8s.io/v1/ClusterRoleBinding":                func() any { return &rbacv1.ClusterRoleBinding{} },
	"admissionregistration.k8s.io/v1/ValidatingWebhookConfiguration": func() any { return &admissionregistrationv1.ValidatingWebhookConfiguration{} },
	"monitoring.coreos.com/v1/ServiceMonitor":                        func() any { return &serviceMonitor{} },
	"policy/v1/PodDisruptionBudget":                                  func() any { return &policyv1.PodDisruptionBudget{} },
	"networking.k8s.io/v1/NetworkPolicy":                             func() any { return &networkingv1.NetworkPolicy{} },
}

const withCRD = "--api-versions=monitoring.coreos.com/v1/ServiceMonitor"

// rendered is one render's objects by kind.
type rendered struct {
	docs     []manifesttest.Doc
	services map[string]*corev1.Service
	sets     map[string]*appsv1.StatefulSet
	pdbs     []*policyv1.PodDisruptionBudget
	policies []*networkingv1.NetworkPolicy
	monitors []*serviceMonitor
	hooks    []*admissionregistrationv1.ValidatingWebhookConfiguration
}

func render(t *testing.T, release, ns string, args ...string) rendered {
	t.Helper()
	r := rendered{services: map[string]*corev1.Service{}, sets: map[string]*appsv1.StatefulSet{}}
	r.docs = manifesttest.Parse(t, "helm template "+strings.Join(args, " "), manifesttest.Helm(t, release, ns, false, args...), kinds)
	for _, d := range r.docs {
		if o, ok := d.Obj.(metav1.Object); ok && o.GetNamespace() != "" && o.GetNamespace() != ns {
			t.Errorf("%s in namespace %q, want the release's %q", o.GetName(), o.GetNamespace(), ns)
		}
		switch o := d.Obj.(type) {
		case *corev1.Service:
			r.services[o.Name] = o
		case *appsv1.StatefulSet:
			r.sets[o.Name] = o
		case *serviceMonitor:
			r.monitors = append(r.monitors, o)
		case *admissionregistrationv1.ValidatingWebhookConfiguration:
			r.hooks = append(r.hooks, o)
		case *policyv1.PodDisruptionBudget:
			r.pdbs = append(r.pdbs, o)
		case *networkingv1.NetworkPolicy:
			r.policies = append(r.policies, o)
		}
	}
	return r
}

// storeFlags checks the store StatefulSets of a render and returns each one's flags by name.
func (r rendered) stores(t *testing.T) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	for name, s := range r.sets {
		if s.Spec.Template.Labels["app.kubernetes.io/name"] != "meganode-store" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			manifesttest.CheckStore(t, s, manifesttest.StoreObjects{Services: r.services, PDBs: r.pdbs, NetworkPolicies: r.policies})
		})
		out[name] = manifesttest.Flags(s.Spec.Template.Spec.Containers[0])
	}
	return out
}

func TestChartDefaults(t *testing.T) {
	r := render(t, "meganode", "meganode-system")
	stores := r.stores(t)
	main := stores["meganode-store"]
	if len(stores) != 1 || main == nil {
		t.Fatalf("stores %v, want meganode-store only", stores)
	}
	// A 3-member group (deploy/store/statefulset.yaml's): every member in memory, writes
	// answered by a quorum; the claim holds only the member marker.
	if n := *r.sets["meganode-store"].Spec.Replicas; n != 3 {
		t.Errorf("replicas %d, want 3", n)
	}
	if main["--durability"] != "replicated" || main["--durability-prefix"] != "" {
		t.Errorf("durability plan: --durability=%s --durability-prefix=%s", main["--durability"], main["--durability-prefix"])
	}
	if want := "meganode-store-0=http://meganode-store-0.meganode-store-headless.meganode-system.svc:2380," +
		"meganode-store-1=http://meganode-store-1.meganode-store-headless.meganode-system.svc:2380," +
		"meganode-store-2=http://meganode-store-2.meganode-store-headless.meganode-system.svc:2380"; main["--initial-cluster"] != want {
		t.Errorf("--initial-cluster=%s\nwant            %s", main["--initial-cluster"], want)
	}
	// One client listener, TLS with client certificates: followers forward to the leader over
	// its peer port, so no member needs a plain-HTTP client URL.
	if main["--listen-client-urls"] != "https://0.0.0.0:2379" || main["--trusted-ca-file"] == "" ||
		main["--advertise-client-urls"] != "https://$(POD_NAME).meganode-store-headless.$(POD_NAMESPACE).svc:2379" {
		t.Errorf("the client port alone, serving TLS with client certificates by default: %v", main)
	}
	if c := r.sets["meganode-store"].Spec.VolumeClaimTemplates; len(c) != 1 || c[0].Spec.Resources.Requests.Storage().String() != "1Gi" {
		t.Errorf("claim templates %+v, want one of 1Gi", c)
	}
	if a := r.sets["meganode-store"].Spec.Template.Spec.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Errorf("affinity %+v, want the required anti-affinity", a)
	}
	if len(r.pdbs) != 1 || len(r.policies) != 1 {
		t.Errorf("%d PodDisruptionBudgets, %d NetworkPolicies, want one of each", len(r.pdbs), len(r.policies))
	}
	manifesttest.CheckScheduler(t, r.docs, "meganode")
	if s := r.sets["meganode-shard"]; s == nil || *s.Spec.Replicas != 4 {
		t.Errorf("shards: %+v", s)
	}
	if len(r.monitors) != 0 || len(r.hooks) != 0 {
		t.Errorf("without the ServiceMonitor CRD and with the watch intake: %d ServiceMonitors, %d webhook configurations, want none",
			len(r.monitors), len(r.hooks))
	}
	// The images have no shell: no command line goes through one, and the indexed roles
	// take their index from the pod-index label.
	for name, s := range r.sets {
		c := s.Spec.Template.Spec.Containers[0]
		if slices.ContainsFunc(append(c.Command, c.Args...), func(a string) bool { return strings.Contains(a, "sh") && strings.Contains(a, "/bin/") }) {
			t.Errorf("%s runs a shell: %v %v", name, c.Command, c.Args)
		}
		if slices.Contains(c.Args, "--index=$(POD_INDEX)") && !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
			return e.Name == "POD_INDEX" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil &&
				e.ValueFrom.FieldRef.FieldPath == "metadata.labels['apps.kubernetes.io/pod-index']"
		}) {
			t.Errorf("%s: --index=$(POD_INDEX) without POD_INDEX from the pod-index label", name)
		}
		if want := "ghcr.io/meganode/" + map[bool]string{true: "meganode-store", false: "meganode"}[strings.HasPrefix(name, "meganode-store")] + ":0.1.0"; c.Image != want {
			t.Errorf("%s: image %s, want %s", name, c.Image, want)
		}
	}
}

// The ServiceMonitor renders only where the CRD is served, and then scrapes every headless
// Service's metrics port (the store's and each scheduler role's), once.
func TestChartServiceMonitor(t *testing.T) {
	r := render(t, "meganode", "monitoring-test", withCRD)
	if len(r.monitors) != 1 {
		t.Fatalf("%d ServiceMonitors with the CRD, want 1", len(r.monitors))
	}
	m := r.monitors[0]
	if len(m.Spec.Endpoints) != 1 || m.Spec.Endpoints[0].Port != "metrics" || m.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("endpoints %+v", m.Spec.Endpoints)
	}
	sel, err := metav1.LabelSelectorAsSelector(&m.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	scraped := map[string]bool{} // workload component → scraped
	for _, s := range r.services {
		if !sel.Matches(labels.Set(s.Labels)) {
			continue
		}
		if s.Spec.ClusterIP != corev1.ClusterIPNone || !slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "metrics" }) {
			t.Errorf("ServiceMonitor selects %s: not headless or no metrics port", s.Name)
		}
		c := s.Spec.Selector["app.kubernetes.io/component"]
		if scraped[c] {
			t.Errorf("component %s scraped twice", c)
		}
		scraped[c] = true
	}
	for _, c := range []string{"main", "shard", "relay", "collector"} {
		if !scraped[c] {
			t.Errorf("component %s not scraped (%v)", c, scraped)
		}
	}
	if r := render(t, "meganode", "monitoring-test", withCRD, "--set=serviceMonitor.enabled=false"); len(r.monitors) != 0 {
		t.Errorf("serviceMonitor.enabled=false still renders it")
	}
}

// A large, webhook-intake install under another release name: single-member stores (the main,
// leases and events ones), TLS off, a durability plan of its own, 25 shards (a root relay over 3
// leaf relays).
func TestChartValues(t *testing.T) {
	r := render(t, "prod", "sched", "--set=scheduler.shards=25,scheduler.collectors=3,scheduler.intake=webhook",
		"--set=store.replicas=1,store.shards.leases.enabled=true,store.shards.events.enabled=true,store.tls.enabled=false",
		"--set=store.durability=buffered,store.durabilityPrefixes[0].prefix=/registry/pods/,store.durabilityPrefixes[0].mode=fsync",
		"--set=image.tag=0.1.0-abc1234,store.persistence.storageClassName=local-nvme")
	stores := r.stores(t)
	if len(stores) != 3 {
		t.Fatalf("%d stores, want main, leases, events", len(stores))
	}
	main := stores["prod-meganode-store"]
	if main["--durability"] != "buffered" || main["--durability-prefix"] != "/registry/pods/=fsync" {
		t.Errorf("durability plan: --durability=%s --durability-prefix=%s", main["--durability"], main["--durability-prefix"])
	}
	// A group keeps its raft logs on disk with buffered or fsync.
	group := render(t, "prod", "sched", "--set=store.durability=fsync").stores(t)["prod-meganode-store"]
	if group["--durability"] != "fsync" || group["--initial-cluster"] == "" {
		t.Errorf("a 3-member group with fsync: %v", group)
	}
	for _, n := range []string{"prod-meganode-store-leases", "prod-meganode-store-events"} {
		if f := stores[n]; f["--durability"] != "none" || f["--durability-prefix"] != "" || f["--cert-file"] != "" ||
			!strings.HasPrefix(f["--listen-client-urls"], "http://") {
			t.Errorf("%s: %v", n, f)
		}
	}
	if sc := r.sets["prod-meganode-store"].Spec.VolumeClaimTemplates[0].Spec.StorageClassName; sc == nil || *sc != "local-nvme" {
		t.Errorf("storageClassName %v", sc)
	}
	if len(r.pdbs) != 0 || len(r.policies) != 0 || r.sets["prod-meganode-store"].Spec.Template.Spec.Affinity != nil {
		t.Errorf("single members: %d PodDisruptionBudgets, %d NetworkPolicies, affinity %+v, want none",
			len(r.pdbs), len(r.policies), r.sets["prod-meganode-store"].Spec.Template.Spec.Affinity)
	}
	manifesttest.CheckScheduler(t, r.docs, "prod-meganode")
	root := manifesttest.Flags(r.sets["prod-meganode-relay"].Spec.Template.Spec.Containers[0])["--children"]
	if n := len(strings.Split(root, ",")); n != 3 || !strings.Contains(root, "prod-meganode-relay-leaf2-0.prod-meganode-relay-leaf2:7070") {
		t.Errorf("root relay children %q, want the 3 leaf relays", root)
	}
	leafShards := 0
	for i := range 3 {
		leafShards += len(strings.Split(manifesttest.Flags(r.sets["prod-meganode-relay-leaf"+string(rune('0'+i))].Spec.Template.Spec.Containers[0])["--children"], ","))
	}
	if leafShards != 25 {
		t.Errorf("leaf relays cover %d shards, want 25", leafShards)
	}
	if len(r.hooks) != 1 || r.hooks[0].Webhooks[0].ClientConfig.Service.Namespace != "sched" {
		t.Errorf("webhook configurations %+v", r.hooks)
	}
	for name, s := range r.sets {
		if img := s.Spec.Template.Spec.Containers[0].Image; !strings.HasSuffix(img, ":0.1.0-abc1234") {
			t.Errorf("%s: image %s", name, img)
		}
	}
}

// One member (store.replicas=1) keeps the single-member durability plan of before: fsync, events
// none, leases buffered, 20Gi for the write-ahead logs, no cluster flags.
func TestChartSingleMember(t *testing.T) {
	r := render(t, "meganode", "one", "--set=store.replicas=1")
	main := r.stores(t)["meganode-store"]
	if main["--durability"] != "fsync" || main["--durability-prefix"] != "/registry/events/=none,/registry/leases/=buffered" {
		t.Errorf("durability plan: --durability=%s --durability-prefix=%s", main["--durability"], main["--durability-prefix"])
	}
	if c := r.sets["meganode-store"].Spec.VolumeClaimTemplates; len(c) != 1 || c[0].Spec.Resources.Requests.Storage().String() != "20Gi" {
		t.Errorf("claim templates %+v, want one of 20Gi", c)
	}
	if main["--initial-cluster"] != "" || main["--listen-client-urls"] != "https://0.0.0.0:2379" || len(r.pdbs)+len(r.policies) != 0 {
		t.Errorf("a single member with cluster flags, a second client listener, a budget or a policy: %v", main)
	}
}

// A group of 5 under another release name, TLS off (one plain client URL, as with TLS on one
// https one), preferred anti-affinity, the leases and events stores as groups of 5 as well.
func TestChartGroupOfFive(t *testing.T) {
	r := render(t, "prod", "cp", "--set=store.replicas=5,store.tls.enabled=false,store.podAntiAffinity=preferred",
		"--set=store.shards.leases.enabled=true,store.shards.events.enabled=true")
	stores := r.stores(t)
	if len(stores) != 3 || len(r.pdbs) != 3 || len(r.policies) != 3 {
		t.Fatalf("%d stores, %d PodDisruptionBudgets, %d NetworkPolicies, want 3 of each", len(stores), len(r.pdbs), len(r.policies))
	}
	for name, f := range stores {
		if n := *r.sets[name].Spec.Replicas; n != 5 || len(strings.Split(f["--initial-cluster"], ",")) != 5 {
			t.Errorf("%s: replicas %d, --initial-cluster=%s", name, n, f["--initial-cluster"])
		}
		if f["--durability"] != "replicated" || f["--listen-client-urls"] != "http://0.0.0.0:2379" || f["--initial-cluster-token"] != name {
			t.Errorf("%s: %v", name, f)
		}
		if a := r.sets[name].Spec.Template.Spec.Affinity.PodAntiAffinity; len(a.PreferredDuringSchedulingIgnoredDuringExecution) != 1 || len(a.RequiredDuringSchedulingIgnoredDuringExecution) != 0 {
			t.Errorf("%s: anti-affinity %+v, want preferred", name, a)
		}
	}
	if !strings.Contains(stores["prod-meganode-store-leases"]["--initial-cluster"],
		"prod-meganode-store-leases-4=http://prod-meganode-store-leases-4.prod-meganode-store-leases.cp.svc:2380") {
		t.Errorf("leases --initial-cluster=%s", stores["prod-meganode-store-leases"]["--initial-cluster"])
	}
	// The checks must see a broken render: a group's --initial-cluster naming one member fewer.
	s := r.sets["prod-meganode-store"].DeepCopy()
	args := s.Spec.Template.Spec.Containers[0].Args
	for i, a := range args {
		if strings.HasPrefix(a, "--initial-cluster=") {
			args[i] = a[:strings.LastIndexByte(a, ',')]
		}
	}
	if p := manifesttest.StoreProblems(s, manifesttest.StoreObjects{Services: r.services, PDBs: r.pdbs, NetworkPolicies: r.policies}); !strings.Contains(strings.Join(p, "\n"), "names 4 members, replicas is 5") {
		t.Errorf("a member dropped from --initial-cluster: problems %v", p)
	}
}

// Peer TLS (store.peerTLS.mode) on every group the chart renders: auto gives https:// peer URLs
// and --peer-auto-tls; secret gives https:// peer URLs and etcd's peer certificate flags, their
// files in the Secret mounted at their directory; both keep the NetworkPolicy on the peer port.
// A single member takes none of it (no peer port).
func TestChartPeerTLS(t *testing.T) {
	const shards = "--set=store.shards.leases.enabled=true,store.shards.events.enabled=true"
	peerFlags := []string{"--peer-auto-tls", "--peer-client-cert-auth", "--peer-cert-file", "--peer-key-file", "--peer-trusted-ca-file"}
	has := func(c corev1.Container, flag string) bool {
		return slices.ContainsFunc(c.Args, func(a string) bool { return a == flag || strings.HasPrefix(a, flag+"=") })
	}
	peerVolume := func(s *appsv1.StatefulSet) *corev1.Volume {
		for i, v := range s.Spec.Template.Spec.Volumes {
			if v.Name == "peer-tls" {
				return &s.Spec.Template.Spec.Volumes[i]
			}
		}
		return nil
	}
	// https:// everywhere a peer URL is named, as the group's own DNS names.
	https := func(t *testing.T, name string, f map[string]string) {
		t.Helper()
		for _, flag := range []string{"--listen-peer-urls", "--initial-advertise-peer-urls"} {
			if !strings.HasPrefix(f[flag], "https://") {
				t.Errorf("%s: %s=%s, want https://", name, flag, f[flag])
			}
		}
		for _, e := range strings.Split(f["--initial-cluster"], ",") {
			if _, u, _ := strings.Cut(e, "="); !strings.HasPrefix(u, "https://") {
				t.Errorf("%s: --initial-cluster entry %s, want https://", name, e)
			}
		}
	}

	t.Run("none", func(t *testing.T) {
		r := render(t, "meganode", "meganode-system", shards, "--set=store.peerTLS.mode=none")
		for name, f := range r.stores(t) {
			c := r.sets[name].Spec.Template.Spec.Containers[0]
			if !strings.HasPrefix(f["--listen-peer-urls"], "http://") || slices.ContainsFunc(peerFlags, func(fl string) bool { return has(c, fl) }) || peerVolume(r.sets[name]) != nil {
				t.Errorf("%s: mode none, want http:// peer URLs and no peer TLS: %v", name, c.Args)
			}
		}
	})

	t.Run("auto", func(t *testing.T) {
		r := render(t, "meganode", "meganode-system", shards, "--set=store.peerTLS.mode=auto")
		stores := r.stores(t)
		if len(stores) != 3 || len(r.policies) != 3 {
			t.Fatalf("%d stores, %d NetworkPolicies, want 3 of each", len(stores), len(r.policies))
		}
		for name, f := range stores {
			c := r.sets[name].Spec.Template.Spec.Containers[0]
			https(t, name, f)
			if !has(c, "--peer-auto-tls") || has(c, "--peer-cert-file") || has(c, "--peer-client-cert-auth") || peerVolume(r.sets[name]) != nil {
				t.Errorf("%s: mode auto, want --peer-auto-tls alone: %v", name, c.Args)
			}
			// The client port keeps its own TLS and Secret.
			if f["--listen-client-urls"] != "https://0.0.0.0:2379" || f["--cert-file"] != "/etc/meganode-store/tls/tls.crt" {
				t.Errorf("%s: client TLS changed: %v", name, f)
			}
		}
		// The checks must see a broken copy: https:// peer URLs without --peer-auto-tls.
		s := r.sets["meganode-store"].DeepCopy()
		c := &s.Spec.Template.Spec.Containers[0]
		c.Args = slices.DeleteFunc(c.Args, func(a string) bool { return a == "--peer-auto-tls" })
		if p := manifesttest.StoreProblems(s, manifesttest.StoreObjects{Services: r.services, PDBs: r.pdbs, NetworkPolicies: r.policies}); !strings.Contains(strings.Join(p, "\n"), "https:// peer URLs without peer TLS") {
			t.Errorf("https:// peer URLs without --peer-auto-tls: problems %v", p)
		}
	})

	for _, tc := range []struct{ name, release, ns, set string }{
		{"secret", "meganode", "meganode-system", "--set=store.peerTLS.mode=secret,store.peerTLS.secretName=meganode-store-peer-tls"},
		// Client TLS off: the peer Secret is the pods' only volume beside the claim.
		{"secret without client TLS", "prod", "cp", "--set=store.peerTLS.mode=secret,store.peerTLS.secretName=meganode-store-peer-tls,store.tls.enabled=false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := render(t, tc.release, tc.ns, shards, tc.set)
			stores := r.stores(t)
			if len(stores) != 3 || len(r.policies) != 3 {
				t.Fatalf("%d stores, %d NetworkPolicies, want 3 of each", len(stores), len(r.policies))
			}
			for name, f := range stores {
				s := r.sets[name]
				c := s.Spec.Template.Spec.Containers[0]
				https(t, name, f)
				for flag, want := range map[string]string{"--peer-cert-file": "/etc/meganode-store/peer-tls/tls.crt",
					"--peer-key-file": "/etc/meganode-store/peer-tls/tls.key", "--peer-trusted-ca-file": "/etc/meganode-store/peer-tls/ca.crt"} {
					if f[flag] != want {
						t.Errorf("%s: %s=%q, want %s", name, flag, f[flag], want)
					}
				}
				if !has(c, "--peer-client-cert-auth") || has(c, "--peer-auto-tls") {
					t.Errorf("%s: mode secret, want --peer-client-cert-auth and no --peer-auto-tls: %v", name, c.Args)
				}
				if v := peerVolume(s); v == nil || v.Secret == nil || v.Secret.SecretName != "meganode-store-peer-tls" {
					t.Errorf("%s: volume peer-tls %+v, want the Secret meganode-store-peer-tls", name, v)
				}
				if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
					return m.Name == "peer-tls" && m.MountPath == "/etc/meganode-store/peer-tls" && m.ReadOnly
				}) {
					t.Errorf("%s: mounts %+v, want peer-tls read-only at /etc/meganode-store/peer-tls", name, c.VolumeMounts)
				}
				if got, want := len(s.Spec.Template.Spec.Volumes), map[bool]int{true: 2, false: 1}[f["--cert-file"] != ""]; got != want {
					t.Errorf("%s: %d volumes, want %d", name, got, want)
				}
			}
			// The checks must see a broken copy: the peer Secret no longer mounted.
			s := r.sets[map[bool]string{true: "meganode-store", false: "prod-meganode-store"}[tc.release == "meganode"]].DeepCopy()
			c := &s.Spec.Template.Spec.Containers[0]
			c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "peer-tls" })
			if p := manifesttest.StoreProblems(s, manifesttest.StoreObjects{Services: r.services, PDBs: r.pdbs, NetworkPolicies: r.policies}); !strings.Contains(strings.Join(p, "\n"), "is not in a Secret volume mounted at its directory /etc/meganode-store/peer-tls") {
				t.Errorf("peer certificate files without their Secret mounted: problems %v", p)
			}
		})
	}

	t.Run("single member", func(t *testing.T) {
		for _, set := range []string{"--set=store.peerTLS.mode=auto", "--set=store.peerTLS.mode=secret,store.peerTLS.secretName=meganode-store-peer-tls"} {
			r := render(t, "meganode", "one", "--set=store.replicas=1", set)
			r.stores(t)
			c := r.sets["meganode-store"].Spec.Template.Spec.Containers[0]
			if slices.ContainsFunc(peerFlags, func(fl string) bool { return has(c, fl) }) || peerVolume(r.sets["meganode-store"]) != nil {
				t.Errorf("%s: a single member (no peer port) with peer TLS: %v", set, c.Args)
			}
		}
	})

	// Mode secret needs the Secret's name; any mode but none, auto and secret is refused.
	for set, want := range map[string]string{
		"store.peerTLS.mode=secret":                          "store.peerTLS.secretName is empty",
		"store.peerTLS.mode=secret,store.replicas=1":         "store.peerTLS.secretName is empty",
		"store.peerTLS.mode=tls":                             `store.peerTLS.mode "tls": want none`,
		"store.peerTLS.mode=":                                `store.peerTLS.mode "": want none`,
		"store.peerTLS.mode=Auto,store.peerTLS.secretName=x": `store.peerTLS.mode "Auto": want none`,
	} {
		if out := manifesttest.Helm(t, "meganode", "x", true, "--set="+set); !strings.Contains(string(out), want) {
			t.Errorf("--set %s: %s, want %q", set, out, want)
		}
	}
}

// Values the store or the scheduler would refuse fail the render, not the pod.
func TestChartRejectsBadValues(t *testing.T) {
	for _, set := range []string{"store.durability=sometimes", "store.durabilityPrefixes[0].mode=always", "scheduler.intake=poll", "scheduler.shards=0",
		"store.replicas=2", "store.replicas=4", "store.replicas=0", "store.replicas=1.5", "store.shards.leases.enabled=true,store.shards.leases.durability=often",
		"store.replicas=1,store.durability=replicated", "store.podAntiAffinity=sometimes", "store.peerTLS.mode=secret", "store.peerTLS.mode=mtls"} {
		if out := manifesttest.Helm(t, "meganode", "x", true, "--set="+set); !strings.Contains(string(out), "want") {
			t.Errorf("--set %s: %s", set, out)
		}
	}
}
