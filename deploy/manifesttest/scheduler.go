package manifesttest

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/meganode/meganode/internal/scheduler/intake"
)

// workload is a StatefulSet or Deployment reduced to what the checks need.
type workload struct {
	kind, name, serviceName string
	replicas                int32
	labels                  map[string]string
	pod                     corev1.PodSpec
}

// Flags returns the `--name=value` flags of the container's command line (a `sh -c` string or
// an argument list).
func Flags(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, a := range append(slices.Clone(c.Command), c.Args...) {
		for _, f := range strings.Fields(a) {
			if k, v, ok := strings.Cut(f, "="); ok && strings.HasPrefix(k, "--") {
				out[k] = v
			}
		}
	}
	return out
}

func containerPort(c corev1.Container, port string) bool {
	for _, p := range c.Ports {
		if p.Name == port || strconv.Itoa(int(p.ContainerPort)) == port {
			return true
		}
	}
	return false
}

// CheckScheduler checks one way to apply the scheduler's manifests (the documents of files not
// skipped) whose objects are named <prefix>-shard, <prefix>-collector, …: Services select one
// workload and name its ports, every address in a flag is a pod of a StatefulSet behind its
// headless Service, shard and collector counts agree, and a webhook configuration (present
// exactly when collectors run --intake=webhook) points at the collectors' webhook port with
// failurePolicy Ignore.
func CheckScheduler(t *testing.T, docs []Doc, prefix string, skip ...string) {
	t.Helper()
	var services []*corev1.Service
	var loads []workload
	var hooks []*admissionregistrationv1.ValidatingWebhookConfiguration
	for _, d := range docs {
		if slices.Contains(skip, d.File) {
			continue
		}
		switch o := d.Obj.(type) {
		case *corev1.Service:
			services = append(services, o)
		case *appsv1.StatefulSet:
			loads = append(loads, workload{"StatefulSet", o.Name, o.Spec.ServiceName, *o.Spec.Replicas, o.Spec.Template.Labels, o.Spec.Template.Spec})
			if !equalLabels(o.Spec.Selector.MatchLabels, o.Spec.Template.Labels) {
				t.Errorf("StatefulSet %s: selector %v, template labels %v", o.Name, o.Spec.Selector.MatchLabels, o.Spec.Template.Labels)
			}
		case *appsv1.Deployment:
			loads = append(loads, workload{"Deployment", o.Name, "", *o.Spec.Replicas, o.Spec.Template.Labels, o.Spec.Template.Spec})
		case *admissionregistrationv1.ValidatingWebhookConfiguration:
			hooks = append(hooks, o)
		}
	}
	svc := map[string]*corev1.Service{}
	selected := map[string]workload{} // service → the workload it selects
	for _, s := range services {
		if svc[s.Name] != nil {
			t.Errorf("Service %s defined twice", s.Name)
		}
		svc[s.Name] = s
		var hit []workload
		for _, w := range loads {
			if equalLabels(s.Spec.Selector, w.labels) {
				hit = append(hit, w)
			}
		}
		if len(hit) != 1 {
			t.Errorf("Service %s selects %d workloads, want 1", s.Name, len(hit))
			continue
		}
		selected[s.Name] = hit[0]
		for _, p := range s.Spec.Ports {
			target := p.TargetPort.String()
			if p.TargetPort.IntValue() == 0 && p.TargetPort.StrVal == "" {
				target = strconv.Itoa(int(p.Port))
			}
			if !containerPort(hit[0].pod.Containers[0], target) {
				t.Errorf("Service %s port %s: no container port %s in %s", s.Name, p.Name, target, hit[0].name)
			}
		}
	}
	byName := map[string]workload{}
	for _, w := range loads {
		byName[w.name] = w
	}
	// host:port of a StatefulSet pod behind its headless Service, and the port is the Service's.
	checkAddr := func(where, addr string) {
		host, port, ok := strings.Cut(addr, ":")
		pod, service, ok2 := strings.Cut(host, ".")
		i := strings.LastIndex(pod, "-")
		if !ok || !ok2 || i < 0 {
			t.Errorf("%s: address %q is not <statefulset>-<ordinal>.<service>:<port>", where, addr)
			return
		}
		ord, err := strconv.Atoi(pod[i+1:])
		w, found := byName[pod[:i]]
		s := svc[service]
		switch {
		case err != nil || !found || w.kind != "StatefulSet":
			t.Errorf("%s: %q is not a StatefulSet pod", where, addr)
		case w.serviceName != service || s == nil || s.Spec.ClusterIP != "None":
			t.Errorf("%s: %q: StatefulSet %s has serviceName %q, not the headless Service %q", where, addr, w.name, w.serviceName, service)
		case int32(ord) >= w.replicas:
			t.Errorf("%s: %q: StatefulSet %s has %d replicas", where, addr, w.name, w.replicas)
		case !slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return strconv.Itoa(int(p.Port)) == port }):
			t.Errorf("%s: %q: Service %s has no port %s", where, addr, service, port)
		}
	}
	shards, collectors := byName[prefix+"-shard"], byName[prefix+"-collector"]
	webhookIntake := false
	for _, w := range loads {
		for _, c := range w.pod.Containers {
			f := Flags(c)
			where := w.name + "/" + c.Name
			for _, k := range []string{"--root", "--children", "--collector-addrs", "--shard-addrs"} {
				if f[k] == "" {
					continue
				}
				addrs := strings.Split(f[k], ",")
				for _, a := range addrs {
					checkAddr(where+" "+k, a)
				}
				want := map[string]int32{"--collector-addrs": collectors.replicas, "--shard-addrs": shards.replicas}[k]
				if want > 0 && int32(len(addrs)) != want {
					t.Errorf("%s %s lists %d addresses, want %d", where, k, len(addrs), want)
				}
			}
			if v, ok := f["--shards"]; ok && v != strconv.Itoa(int(shards.replicas)) {
				t.Errorf("%s --shards=%s, the shard StatefulSet has %d replicas", where, v, shards.replicas)
			}
			if v, ok := f["--collectors"]; ok && v != strconv.Itoa(int(collectors.replicas)) {
				t.Errorf("%s --collectors=%s, the collector StatefulSet has %d replicas", where, v, collectors.replicas)
			}
			if f["--intake"] == intake.ModeWebhook {
				webhookIntake = true
				checkWebhookCollector(t, where, w, c, f)
			}
		}
	}
	if webhookIntake != (len(hooks) > 0) {
		t.Errorf("collectors with --intake=webhook: %v, webhook configurations: %d (both or neither)", webhookIntake, len(hooks))
	}
	for _, h := range hooks {
		checkWebhookConfiguration(t, h, svc, selected, prefix+"-collector")
	}
}

func equalLabels(a, b map[string]string) bool {
	if len(a) == 0 || len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// checkWebhookCollector: the webhook listens on the container port named webhook, its
// certificate and key come from a mounted Secret, and every collector is a forwarding peer.
func checkWebhookCollector(t *testing.T, where string, w workload, c corev1.Container, f map[string]string) {
	_, port, _ := strings.Cut(f["--webhook-addr"], ":")
	if !containerPort(c, port) || !containerPort(c, "webhook") || !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool {
		return p.Name == "webhook" && strconv.Itoa(int(p.ContainerPort)) == port
	}) {
		t.Errorf("%s: --webhook-addr=%s is not the container port named webhook", where, f["--webhook-addr"])
	}
	for _, k := range []string{"--webhook-cert", "--webhook-key"} {
		ok := false
		for _, m := range c.VolumeMounts {
			if strings.HasPrefix(f[k], m.MountPath+"/") {
				for _, v := range w.pod.Volumes {
					ok = ok || (v.Name == m.Name && v.Secret != nil)
				}
			}
		}
		if !ok {
			t.Errorf("%s: %s=%q is not in a mounted Secret", where, k, f[k])
		}
	}
	if f["--collector-addrs"] == "" {
		t.Errorf("%s: --intake=webhook needs --collector-addrs (pods are forwarded to their collector)", where)
	}
}

func checkWebhookConfiguration(t *testing.T, h *admissionregistrationv1.ValidatingWebhookConfiguration,
	svc map[string]*corev1.Service, selected map[string]workload, collector string) {
	for _, wh := range h.Webhooks {
		where := h.Name + "/" + wh.Name
		if wh.FailurePolicy == nil || *wh.FailurePolicy != admissionregistrationv1.Ignore {
			t.Errorf("%s: failurePolicy must be Ignore (the intake must never block pod creation)", where)
		}
		if wh.SideEffects == nil || (*wh.SideEffects != admissionregistrationv1.SideEffectClassNone &&
			*wh.SideEffects != admissionregistrationv1.SideEffectClassNoneOnDryRun) {
			t.Errorf("%s: sideEffects %v", where, wh.SideEffects)
		}
		if !slices.Contains(wh.AdmissionReviewVersions, "v1") || wh.TimeoutSeconds == nil || *wh.TimeoutSeconds > 5 {
			t.Errorf("%s: admissionReviewVersions %v (want v1), timeoutSeconds %v (want ≤ 5)", where, wh.AdmissionReviewVersions, wh.TimeoutSeconds)
		}
		if len(wh.ClientConfig.CABundle) == 0 {
			t.Errorf("%s: no caBundle (not even the placeholder)", where)
		}
		ok := false
		for _, r := range wh.Rules {
			ok = ok || (slices.Contains(r.Operations, admissionregistrationv1.Create) && slices.Contains(r.Resources, "pods") &&
				slices.Contains(r.APIGroups, ""))
		}
		if !ok {
			t.Errorf("%s: no rule for pod CREATE", where)
		}
		ref := wh.ClientConfig.Service
		if ref == nil {
			t.Errorf("%s: clientConfig.service missing", where)
			continue
		}
		if path := ptr.Deref(ref.Path, ""); path != intake.WebhookPath {
			t.Errorf("%s: path %q, the scheduler serves %s", where, path, intake.WebhookPath)
		}
		s := svc[ref.Name]
		if s == nil || s.Namespace != ref.Namespace {
			t.Errorf("%s: Service %s/%s not defined", where, ref.Namespace, ref.Name)
			continue
		}
		port := int32(443)
		if ref.Port != nil {
			port = *ref.Port
		}
		found := false
		for _, p := range s.Spec.Ports {
			if p.Port == port {
				found = true
				if p.TargetPort.String() != "webhook" {
					t.Errorf("%s: Service %s port %d targets %s, not the collectors' webhook port", where, s.Name, port, p.TargetPort.String())
				}
			}
		}
		if !found {
			t.Errorf("%s: Service %s has no port %d", where, s.Name, port)
		}
		if w := selected[s.Name]; w.name != collector {
			t.Errorf("%s: Service %s selects %q, not the collectors", where, s.Name, w.name)
		}
	}
}
