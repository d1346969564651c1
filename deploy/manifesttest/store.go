package manifesttest

import (
	"fmt"
	"net/url"
	"path"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// StoreObjects are the objects of a render or a manifest directory a store StatefulSet is
// checked against: Services by name, and every PodDisruptionBudget and NetworkPolicy.
type StoreObjects struct {
	Services        map[string]*corev1.Service
	PDBs            []*policyv1.PodDisruptionBudget
	NetworkPolicies []*networkingv1.NetworkPolicy
}

// CheckStore fails t with every problem StoreProblems finds in one meganode-store StatefulSet.
func CheckStore(t *testing.T, s *appsv1.StatefulSet, o StoreObjects) {
	t.Helper()
	for _, p := range StoreProblems(s, o) {
		t.Error(p)
	}
}

// StoreProblems checks one meganode-store StatefulSet (deploy/store, and the chart's): an odd
// number of replicas behind a headless Service that selects its pods, the etcd-style flags
// present, --data-dir on the claim template's volume, durability modes the store serves for
// that many members, TLS files under a mount, and probes on /livez, /health or /readyz of the
// port --listen-metrics-urls opens, and with TLS on no plain-HTTP client listener. A group
// (replicas > 1) must also be one the store can form (checkGroup), with peer TLS whenever its
// peer URLs are https:// (checkPeerTLS). It returns the problems, so that a test can also show
// a broken copy fails.
func StoreProblems(s *appsv1.StatefulSet, o StoreObjects) []string {
	var out []string
	errorf := func(f string, a ...any) { out = append(out, fmt.Sprintf(f, a...)) }
	replicas := int32(0)
	if s.Spec.Replicas != nil {
		replicas = *s.Spec.Replicas
	}
	if replicas < 1 || replicas%2 == 0 {
		errorf("replicas %d: want an odd number ≥ 1 (a group of 2k members tolerates no more failures than one of 2k-1)", replicas)
	}
	svc := o.Services[s.Spec.ServiceName]
	if svc == nil || svc.Spec.ClusterIP != corev1.ClusterIPNone {
		errorf("serviceName %q: no headless Service", s.Spec.ServiceName)
	} else {
		for k, v := range svc.Spec.Selector {
			if s.Spec.Template.Labels[k] != v {
				errorf("Service %s selects %s=%s, the pods have %q", svc.Name, k, v, s.Spec.Template.Labels[k])
			}
		}
	}
	for k, v := range s.Spec.Selector.MatchLabels {
		if s.Spec.Template.Labels[k] != v {
			errorf("selector %s=%s does not match the template", k, v)
		}
	}
	if len(s.Spec.Template.Spec.Containers) != 1 {
		return append(out, fmt.Sprintf("%d containers", len(s.Spec.Template.Spec.Containers)))
	}
	c := s.Spec.Template.Spec.Containers[0]
	flags := map[string]string{}
	for _, a := range c.Args {
		k, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		flags[k] = v
	}
	for _, f := range []string{"name", "data-dir", "listen-client-urls", "advertise-client-urls", "listen-metrics-urls", "durability"} {
		if flags[f] == "" {
			errorf("--%s missing", f)
		}
	}
	// The data dir is on the PersistentVolume of the claim template (a single member's logs; a
	// group member's marker, which makes a restarted member catch up before it votes).
	var claims []string
	for _, pvc := range s.Spec.VolumeClaimTemplates {
		claims = append(claims, pvc.Name)
		if pvc.Spec.Resources.Requests.Storage().IsZero() {
			errorf("claim %s without a size", pvc.Name)
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
		errorf("--data-dir=%s is not a mounted volume claim (%v)", flags["data-dir"], claims)
	}
	// Durability modes are the ones the store serves: a group serves every mode (buffered and
	// fsync keep each member's raft log on its claim) and a single member refuses replicated.
	modes := []string{flags["durability"]}
	if p := flags["durability-prefix"]; p != "" {
		for _, item := range strings.Split(p, ",") {
			i := strings.LastIndexByte(item, '=')
			if i < 0 || !strings.HasPrefix(item, "/registry/") {
				errorf("--durability-prefix entry %q: want /registry/…/=MODE", item)
				continue
			}
			modes = append(modes, item[i+1:])
		}
	}
	allowed := []string{"none", "buffered", "fsync"}
	if replicas > 1 {
		allowed = []string{"replicated", "none", "buffered", "fsync"}
	}
	for _, m := range modes {
		if !slices.Contains(allowed, m) {
			errorf("durability mode %q with %d replicas: want one of %v", m, replicas, allowed)
		}
	}
	// TLS files are in a mounted secret.
	if flags["cert-file"] != "" {
		for _, f := range []string{"cert-file", "key-file", "trusted-ca-file"} {
			if !mounted(c, flags[f]) {
				errorf("--%s=%s is not under a volume mount", f, flags[f])
			}
		}
		// With TLS on, every client URL is https: a plain http:// listener would serve every
		// client call without TLS or the client-certificate check. None is needed in a group:
		// followers forward the calls that need the leader over its peer port (docs/design.md
		// §10), whatever the scheme of its client URLs.
		for _, f := range []string{"listen-client-urls", "advertise-client-urls"} {
			for _, l := range strings.Split(flags[f], ",") {
				if u, err := url.Parse(l); err != nil || u.Scheme != "https" {
					errorf("--%s entry %s: a plain-HTTP client listener beside TLS (--cert-file set) bypasses the client certificates; want https:// only", f, l)
				}
			}
		}
	}
	// Probes hit /livez, /health or /readyz on the port --listen-metrics-urls opens.
	mu, err := url.Parse(flags["listen-metrics-urls"])
	if err != nil {
		return append(out, err.Error())
	}
	metricsPort := mu.Port()
	cu, _ := url.Parse(strings.Split(flags["listen-client-urls"], ",")[0])
	ports := map[string]string{}
	for _, p := range c.Ports {
		ports[p.Name] = fmt.Sprint(p.ContainerPort)
	}
	if ports["metrics"] != metricsPort || ports["client"] != cu.Port() {
		errorf("container ports %v do not match client %s / metrics %s", ports, cu.Port(), metricsPort)
	}
	// Liveness on /livez, not /health: /health answers 503 while an alarm (NOSPACE) is raised,
	// as etcd's does, and a kubelet restarting a full store would not free a byte.
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/livez" {
		errorf("liveness probe: want GET /livez on the metrics port, got %+v", c.LivenessProbe)
	}
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		if p == nil {
			continue
		}
		if p.HTTPGet == nil || (p.HTTPGet.Port.String() != "metrics" && p.HTTPGet.Port.String() != metricsPort) {
			errorf("probe %+v is not on the metrics port", p)
		}
		if p.HTTPGet != nil && p.HTTPGet.Path != "/health" && p.HTTPGet.Path != "/readyz" && p.HTTPGet.Path != "/livez" {
			errorf("probe path %s: the store serves /health, /livez, /readyz", p.HTTPGet.Path)
		}
	}
	if replicas > 1 {
		out = append(out, checkGroup(s, replicas, c, flags, svc, o)...)
	} else if flags["initial-cluster"] != "" || flags["listen-peer-urls"] != "" {
		errorf("one replica with --initial-cluster=%q --listen-peer-urls=%q: a single member takes no cluster flags", flags["initial-cluster"], flags["listen-peer-urls"])
	}
	return out
}

// checkGroup checks that the pods of a StatefulSet of replicas > 1 form one group: every pod
// named in --initial-cluster by its own name, with the headless Service's DNS name, the
// container's peer port and the scheme of --listen-peer-urls (https:// only with the flags of
// peer TLS, checkPeerTLS), each pod's advertised peer URL its own entry (after the kubelet
// expands $(POD_NAME) and $(POD_NAMESPACE)), advertised client URLs at the pod's own DNS name
// on a port it listens on with that scheme, the Service publishing not-ready pods with the peer
// port, a PodDisruptionBudget that keeps a quorum, anti-affinity across nodes, and the peer port
// (which also carries the calls followers forward to the leader) open only to the group's pods.
func checkGroup(s *appsv1.StatefulSet, replicas int32, c corev1.Container, flags map[string]string, svc *corev1.Service, o StoreObjects) []string {
	var out []string
	errorf := func(f string, a ...any) { out = append(out, fmt.Sprintf(f, a...)) }
	if s.Namespace == "" {
		errorf("a group's StatefulSet needs its namespace: --initial-cluster names its pods' DNS names in it")
	}
	if s.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		errorf("podManagementPolicy %q: want Parallel (each member waits for the others to elect a leader)", s.Spec.PodManagementPolicy)
	}
	// /readyz already fails until a restarted member has caught up; minReadySeconds is a margin
	// on top, for a member that fails again right after it.
	if s.Spec.MinReadySeconds <= 0 {
		errorf("minReadySeconds %d: a rolling update must see a restarted member stay ready a while before it restarts the next", s.Spec.MinReadySeconds)
	}
	// $(POD_NAME) and $(POD_NAMESPACE) come from the downward API.
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env["POD_NAME"] != "metadata.name" || env["POD_NAMESPACE"] != "metadata.namespace" {
		errorf("env POD_NAME/POD_NAMESPACE from the downward API (metadata.name/metadata.namespace): %v", env)
	}
	expand := func(v, pod string) string {
		return strings.NewReplacer("$(POD_NAME)", pod, "$(POD_NAMESPACE)", s.Namespace).Replace(v)
	}
	peerPort := int32(0)
	for _, p := range c.Ports {
		if p.Name == "peer" {
			peerPort = p.ContainerPort
		}
	}
	if peerPort == 0 {
		errorf("no container port named peer")
	}
	scheme, problems := checkPeerTLS(s.Spec.Template.Spec, c, flags)
	out = append(out, problems...)
	if want := fmt.Sprintf("%s://0.0.0.0:%d", scheme, peerPort); flags["listen-peer-urls"] != want {
		errorf("--listen-peer-urls=%q, want %s (every interface, the container's peer port; http://, or https:// with peer TLS)", flags["listen-peer-urls"], want)
	}
	if flags["initial-cluster-state"] != "new" {
		errorf("--initial-cluster-state=%q, want new (the members found the group together)", flags["initial-cluster-state"])
	}
	if flags["initial-cluster-token"] == "" {
		errorf("--initial-cluster-token missing")
	}
	// --initial-cluster: exactly the pods, each at its DNS name behind the headless Service.
	members := map[string]string{}
	for _, e := range strings.Split(flags["initial-cluster"], ",") {
		name, u, ok := strings.Cut(e, "=")
		if !ok || name == "" {
			errorf("--initial-cluster entry %q: want NAME=URL", e)
			continue
		}
		if _, dup := members[name]; dup {
			errorf("--initial-cluster names %s twice", name)
		}
		members[name] = u
	}
	if len(members) != int(replicas) {
		errorf("--initial-cluster names %d members, replicas is %d", len(members), replicas)
	}
	for i := range int(replicas) {
		pod := fmt.Sprintf("%s-%d", s.Name, i)
		want := fmt.Sprintf("%s://%s.%s.%s.svc:%d", scheme, pod, s.Spec.ServiceName, s.Namespace, peerPort)
		if got, ok := members[pod]; !ok {
			errorf("--initial-cluster does not name pod %s", pod)
		} else if got != want {
			errorf("--initial-cluster: %s=%s, want %s (its DNS name behind the headless Service, the peer port, the scheme of --listen-peer-urls)", pod, got, want)
		}
		if got := expand(flags["name"], pod); got != pod {
			errorf("--name=%s is %q in pod %s: want the pod's name, as --initial-cluster names it", flags["name"], got, pod)
		}
		if got := expand(flags["initial-advertise-peer-urls"], pod); got != want {
			errorf("--initial-advertise-peer-urls=%s is %q in pod %s, want its --initial-cluster entry %s", flags["initial-advertise-peer-urls"], got, pod, want)
		}
		// Every advertised client URL is the pod's own DNS name on a port it listens on.
		for _, a := range strings.Split(flags["advertise-client-urls"], ",") {
			u, err := url.Parse(expand(a, pod))
			if err != nil || u.Hostname() != fmt.Sprintf("%s.%s.%s.svc", pod, s.Spec.ServiceName, s.Namespace) {
				errorf("--advertise-client-urls entry %s in pod %s: want the pod's DNS name behind the headless Service", a, pod)
			}
		}
	}
	if !strings.Contains(flags["initial-advertise-peer-urls"], "$(POD_NAME)") {
		errorf("--initial-advertise-peer-urls=%s: each pod advertises its own name ($(POD_NAME))", flags["initial-advertise-peer-urls"])
	}
	// Every advertised client URL is served: a listener of its scheme on its port, a container
	// port (members and clients reach each other there).
	listen := map[string]string{} // port → scheme
	for _, l := range strings.Split(flags["listen-client-urls"], ",") {
		if u, err := url.Parse(l); err == nil {
			listen[u.Port()] = u.Scheme
		}
	}
	for _, a := range strings.Split(flags["advertise-client-urls"], ",") {
		u, err := url.Parse(a)
		if err != nil {
			continue
		}
		if listen[u.Port()] != u.Scheme {
			errorf("--advertise-client-urls entry %s: no --listen-client-urls %s:// listener on port %s", a, u.Scheme, u.Port())
		}
		if !containerPort(c, u.Port()) {
			errorf("--advertise-client-urls entry %s: port %s is not a container port", a, u.Port())
		}
	}
	// The headless Service publishes not-ready pods (members find each other before any is
	// ready) and names the peer port.
	if svc != nil {
		if !svc.Spec.PublishNotReadyAddresses {
			errorf("Service %s: publishNotReadyAddresses must be true (members resolve each other before they are ready)", svc.Name)
		}
		if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool {
			return p.Name == "peer" && p.Port == peerPort && (p.TargetPort.String() == "peer" || p.TargetPort.IntValue() == int(peerPort))
		}) {
			errorf("Service %s: no port peer %d → peer", svc.Name, peerPort)
		}
	}
	// A disruption budget that leaves a quorum.
	quorum := replicas/2 + 1
	var budgets []string
	for _, b := range o.PDBs {
		if b.Namespace != s.Namespace || b.Spec.Selector == nil || !reflect.DeepEqual(*b.Spec.Selector, *s.Spec.Selector) {
			continue
		}
		budgets = append(budgets, b.Name)
		ok := b.Spec.MaxUnavailable != nil && b.Spec.MaxUnavailable.Type == intstr.Int && b.Spec.MaxUnavailable.IntValue() == 1 ||
			b.Spec.MinAvailable != nil && b.Spec.MinAvailable.Type == intstr.Int && b.Spec.MinAvailable.IntValue() == int(quorum)
		if !ok {
			errorf("PodDisruptionBudget %s: maxUnavailable %v, minAvailable %v; want maxUnavailable 1 or minAvailable %d (the quorum of %d)",
				b.Name, b.Spec.MaxUnavailable, b.Spec.MinAvailable, quorum, replicas)
		}
	}
	if len(budgets) != 1 {
		errorf("%d PodDisruptionBudgets with the StatefulSet's selector (%v), want 1", len(budgets), budgets)
	}
	// Members on different nodes: a node's loss takes one member's memory, not two.
	pods := labels.Set(s.Spec.Template.Labels)
	spread := false
	if a := s.Spec.Template.Spec.Affinity; a != nil && a.PodAntiAffinity != nil {
		terms := slices.Clone(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution)
		for _, w := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, w.PodAffinityTerm)
		}
		for _, term := range terms {
			sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
			spread = spread || err == nil && term.TopologyKey == corev1.LabelHostname && !sel.Empty() && sel.Matches(pods)
		}
	}
	if !spread {
		errorf("no pod anti-affinity on %s selecting the group's pods", corev1.LabelHostname)
	}
	out = append(out, checkNetworkPolicies(s, c, o.NetworkPolicies)...)
	return out
}

// checkNetworkPolicies: some NetworkPolicy isolates the group's pods for ingress; what it lets
// reach the peer port (raft, snapshots and forwarded client calls, which run there without the
// client port's certificate check; unauthenticated without a peer CA) comes only from the
// group's pods, whatever the peer TLS; the client and metrics ports stay reachable.
func checkNetworkPolicies(s *appsv1.StatefulSet, c corev1.Container, policies []*networkingv1.NetworkPolicy) []string {
	var out []string
	errorf := func(f string, a ...any) { out = append(out, fmt.Sprintf(f, a...)) }
	pods := labels.Set(s.Spec.Template.Labels)
	named := map[string]int32{}
	for _, p := range c.Ports {
		named[p.Name] = p.ContainerPort
	}
	// covers: the rule's ports include the container port called name.
	covers := func(r networkingv1.NetworkPolicyIngressRule, name string) bool {
		if len(r.Ports) == 0 {
			return true
		}
		for _, p := range r.Ports {
			if p.Port == nil || p.Port.String() == name || p.Port.Type == intstr.Int && p.Port.IntVal == named[name] ||
				p.EndPort != nil && p.Port.Type == intstr.Int && p.Port.IntVal <= named[name] && named[name] <= *p.EndPort {
				return true
			}
		}
		return false
	}
	isolated := false
	open := map[string]bool{}
	restricted := []string{"peer"}
	for _, np := range policies {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if np.Namespace != s.Namespace || err != nil || !sel.Matches(pods) {
			continue
		}
		if len(np.Spec.PolicyTypes) == 0 || slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
			isolated = true
		}
		for _, r := range np.Spec.Ingress {
			for _, name := range []string{"client", "metrics"} {
				open[name] = open[name] || covers(r, name) && len(r.From) == 0
			}
			for _, name := range restricted {
				if !covers(r, name) {
					continue
				}
				if len(r.From) == 0 {
					errorf("NetworkPolicy %s lets every source reach the %s port", np.Name, name)
				}
				for _, f := range r.From {
					if f.IPBlock != nil || f.NamespaceSelector != nil || f.PodSelector == nil || !reflect.DeepEqual(f.PodSelector.MatchLabels, s.Spec.Selector.MatchLabels) ||
						len(f.PodSelector.MatchExpressions) > 0 {
						errorf("NetworkPolicy %s lets %+v reach the %s port, want only the group's pods (%v)", np.Name, f, name, s.Spec.Selector.MatchLabels)
					}
				}
			}
		}
	}
	if !isolated {
		errorf("no NetworkPolicy isolates the group's pods for ingress: the peer port (forwarded client calls skip the client port's certificate check) is open to every pod")
	}
	for _, name := range []string{"client", "metrics"} {
		if isolated && !open[name] {
			errorf("the NetworkPolicies close the %s port to clients", name)
		}
	}
	return out
}

// checkPeerTLS checks the peer TLS of a group's container against the scheme of its
// --listen-peer-urls, which it returns ("http" when that is neither http nor https) for the
// other peer URLs to match. As the store (and etcd) decides: https:// peer URLs need peer TLS —
// --peer-auto-tls (a self-signed certificate made at start, peers' not checked), or
// --peer-cert-file, --peer-key-file and --peer-trusted-ca-file together (the CA every member's
// certificate chains to; naming it makes the listener require one), each in a Secret volume
// mounted at the file's directory; --peer-client-cert-auth needs the CA. With http:// peer URLs
// the store ignores these flags and peer traffic stays plain TCP, so none may be given.
func checkPeerTLS(spec corev1.PodSpec, c corev1.Container, flags map[string]string) (string, []string) {
	var out []string
	errorf := func(f string, a ...any) { out = append(out, fmt.Sprintf(f, a...)) }
	scheme := "http"
	if u, err := url.Parse(flags["listen-peer-urls"]); err != nil || u.Scheme != "http" && u.Scheme != "https" {
		errorf("--listen-peer-urls=%q: want an http:// or https:// URL", flags["listen-peer-urls"])
	} else {
		scheme = u.Scheme
	}
	files := []string{"peer-cert-file", "peer-key-file", "peer-trusted-ca-file"}
	var given []string
	for _, f := range files {
		if flags[f] != "" {
			given = append(given, "--"+f)
		}
	}
	auto, clientAuth := boolFlag(flags, "peer-auto-tls"), boolFlag(flags, "peer-client-cert-auth")
	if scheme == "http" {
		if auto {
			given = append(given, "--peer-auto-tls")
		}
		if clientAuth {
			given = append(given, "--peer-client-cert-auth")
		}
		if len(given) > 0 {
			errorf("%s with http:// peer URLs: the store ignores peer TLS there and peer traffic stays plain TCP; want https:// peer URLs (--listen-peer-urls, --initial-advertise-peer-urls, --initial-cluster)", strings.Join(given, ", "))
		}
		return scheme, out
	}
	if !auto && len(given) == 0 {
		errorf("https:// peer URLs without peer TLS (the store refuses to start): want --peer-auto-tls, or --peer-cert-file, --peer-key-file and --peer-trusted-ca-file from a mounted Secret")
	}
	if len(given) > 0 {
		for _, f := range files {
			if flags[f] == "" {
				errorf("%s without --%s: --peer-cert-file, --peer-key-file and --peer-trusted-ca-file go together (the CA every member's peer certificate chains to)", strings.Join(given, ", "), f)
			} else if !inSecretVolume(spec, c, flags[f]) {
				errorf("--%s=%s is not in a Secret volume mounted at its directory %s", f, flags[f], path.Dir(flags[f]))
			}
		}
	}
	if clientAuth && flags["peer-trusted-ca-file"] == "" {
		errorf("--peer-client-cert-auth needs --peer-trusted-ca-file (the store refuses to start)")
	}
	return scheme, out
}

// boolFlag: a boolean flag given bare (--flag) or with a true value, as the store parses it.
func boolFlag(flags map[string]string, name string) bool {
	v, ok := flags[name]
	return ok && (v == "" || v == "true" || v == "1")
}

// inSecretVolume: file is a key of a Secret volume mounted (whole, not a subPath) at the file's
// directory — the Secret's key itself when the volume lists no items, else one item's path.
func inSecretVolume(spec corev1.PodSpec, c corev1.Container, file string) bool {
	dir, base := path.Split(file)
	for _, m := range c.VolumeMounts {
		if m.SubPath != "" || m.SubPathExpr != "" || path.Clean(m.MountPath) != path.Clean(dir) {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			if len(v.Secret.Items) == 0 {
				return true
			}
			for _, it := range v.Secret.Items {
				if it.Path == base {
					return true
				}
			}
		}
	}
	return false
}

func mounted(c corev1.Container, path string) bool {
	for _, m := range c.VolumeMounts {
		if strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
			return true
		}
	}
	return false
}
