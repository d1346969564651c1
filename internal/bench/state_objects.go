package bench

import (
	"bytes"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
)

// The objects `bench state` loads: a KWOK node, an ordinary pod bound to it and the node's
// Lease, each as kube-apiserver stores it (protobuf in the "k8s\x00" envelope, no
// resourceVersion) at the key kube-apiserver writes.

// Key prefixes kube-apiserver uses for the three kinds.
const (
	NodePrefix = "/registry/minions/"
	PodPrefix  = "/registry/pods/"
)

// StateKinds are the kinds `bench state` loads, in load order.
var StateKinds = []string{"nodes", "leases", "pods"}

// statePrefix is the key prefix of a kind.
func statePrefix(kind string) string {
	switch kind {
	case "nodes":
		return NodePrefix
	case "leases":
		return LeasePrefix
	}
	return PodPrefix
}

// podNamespaces spreads the pods over a few namespaces, as workloads are.
const podNamespaces = 16

// StateKey is the key of object i of kind.
func StateKey(kind string, i int) string {
	switch kind {
	case "nodes":
		return NodePrefix + NodeName(i)
	case "leases":
		return LeasePrefix + NodeName(i)
	}
	ns, name := podName(i)
	return PodPrefix + ns + "/" + name
}

func podName(i int) (ns, name string) {
	return fmt.Sprintf("team-%02d", i%podNamespaces), fmt.Sprintf("web-%03d-6d4cf56db6-%s", (i/podNamespaces)%1000, suffix5(i))
}

// suffix5 is a 5-character name suffix like the ReplicaSet controller's (distinct for i < 27^5·…).
func suffix5(i int) string {
	const alpha = "bcdfghjklmnpqrstvwxz2456789"
	b := make([]byte, 0, 7)
	for k := 0; k < 5 || i > 0; k++ {
		b = append(b, alpha[i%len(alpha)])
		i /= len(alpha)
	}
	return string(b)
}

var (
	// stateCodec is kube-apiserver's storage serializer for built-in types (protobuf media type).
	stateCodec = protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	nodeGVK    = corev1.SchemeGroupVersion.WithKind("Node")
	podGVK     = corev1.SchemeGroupVersion.WithKind("Pod")
)

// EncodeState encodes obj (a v1 Node, v1 Pod or coordination/v1 Lease) as kube-apiserver stores it.
func EncodeState(obj runtime.Object) ([]byte, error) {
	switch o := obj.(type) {
	case *corev1.Node:
		o.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: nodeGVK.Kind}
	case *corev1.Pod:
		o.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: podGVK.Kind}
	}
	var buf bytes.Buffer
	if err := stateCodec.Encode(obj, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// DecodeState decodes a stored object of any kind the client-go scheme knows.
func DecodeState(b []byte) (runtime.Object, error) {
	obj, _, err := stateCodec.Decode(b, nil, nil)
	return obj, err
}

// StateObject builds object i of kind at time now.
func StateObject(kind string, i int, now time.Time) runtime.Object {
	switch kind {
	case "nodes":
		return KwokNode(i, now)
	case "leases":
		return NodeLease(NodeName(i), now)
	}
	return BoundPod(i, now)
}

func uid(kind string, i int) types.UID {
	s := fmt.Sprintf("%s/%d", kind, i)
	return types.UID(fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", hash32(s), i&0xffff, hash32("a"+s)&0xfff, hash32("b"+s)&0xfff, uint64(hash32("c"+s))<<16|uint64(i&0xffff)))
}

func ipOf(i int) string { return fmt.Sprintf("10.%d.%d.%d", 64+(i>>16)&63, (i>>8)&255, i&255) }

var kwokZones = []string{"zone-a", "zone-b", "zone-c"}

// KwokNode is node i as KWOK keeps it: created by a client, its status (capacity,
// allocatable, conditions, addresses, node info, images) written by kwok's node stages,
// with both writers' managed fields.
func KwokNode(i int, now time.Time) *corev1.Node {
	name := NodeName(i)
	t := metav1.NewTime(now.Truncate(time.Second))
	rl := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("8"),
		corev1.ResourceMemory:           resource.MustParse("32Gi"),
		corev1.ResourcePods:             resource.MustParse("110"),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
	cond := func(typ corev1.NodeConditionType, st corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: typ, Status: st, LastHeartbeatTime: t, LastTransitionTime: t, Reason: reason, Message: msg}
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, UID: uid("node", i), CreationTimestamp: t,
			Annotations: map[string]string{
				"kwok.x-k8s.io/node":                                     "fake",
				"node.alpha.kubernetes.io/ttl":                           "0",
				"volumes.kubernetes.io/controller-managed-attach-detach": "true",
			},
			Labels: map[string]string{
				"beta.kubernetes.io/arch":          "amd64",
				"beta.kubernetes.io/os":            "linux",
				"kubernetes.io/arch":               "amd64",
				"kubernetes.io/hostname":           name,
				"kubernetes.io/os":                 "linux",
				"kubernetes.io/role":               "agent",
				"node-role.kubernetes.io/agent":    "",
				"type":                             "kwok",
				"node.kubernetes.io/instance-type": "m5.2xlarge",
				"topology.kubernetes.io/region":    "meganode-local",
				"topology.kubernetes.io/zone":      kwokZones[i%len(kwokZones)],
			},
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "meganode", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &t, FieldsType: "FieldsV1",
					FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:annotations":{".":{},"f:kwok.x-k8s.io/node":{}},"f:labels":{".":{},` +
						`"f:beta.kubernetes.io/arch":{},"f:beta.kubernetes.io/os":{},"f:kubernetes.io/arch":{},"f:kubernetes.io/hostname":{},` +
						`"f:kubernetes.io/os":{},"f:kubernetes.io/role":{},"f:node-role.kubernetes.io/agent":{},"f:node.kubernetes.io/instance-type":{},` +
						`"f:topology.kubernetes.io/region":{},"f:topology.kubernetes.io/zone":{},"f:type":{}}}}`)}},
				{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &t, FieldsType: "FieldsV1",
					FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:annotations":{"f:node.alpha.kubernetes.io/ttl":{}}},"f:spec":{"f:podCIDR":{},"f:podCIDRs":{".":{},"v:\"` + ipOf(i) + `/32\"":{}}}}`)}},
				{Manager: "kwok", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &t, FieldsType: "FieldsV1", Subresource: "status",
					FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:addresses":{".":{},"k:{\"type\":\"Hostname\"}":{".":{},"f:address":{},"f:type":{}},` +
						`"k:{\"type\":\"InternalIP\"}":{".":{},"f:address":{},"f:type":{}}},"f:allocatable":{".":{},"f:cpu":{},"f:ephemeral-storage":{},"f:memory":{},"f:pods":{}},` +
						`"f:capacity":{".":{},"f:cpu":{},"f:ephemeral-storage":{},"f:memory":{},"f:pods":{}},"f:conditions":{".":{},` +
						`"k:{\"type\":\"DiskPressure\"}":{".":{},"f:lastHeartbeatTime":{},"f:lastTransitionTime":{},"f:message":{},"f:reason":{},"f:status":{},"f:type":{}},` +
						`"k:{\"type\":\"MemoryPressure\"}":{".":{},"f:lastHeartbeatTime":{},"f:lastTransitionTime":{},"f:message":{},"f:reason":{},"f:status":{},"f:type":{}},` +
						`"k:{\"type\":\"NetworkUnavailable\"}":{".":{},"f:lastHeartbeatTime":{},"f:lastTransitionTime":{},"f:message":{},"f:reason":{},"f:status":{},"f:type":{}},` +
						`"k:{\"type\":\"PIDPressure\"}":{".":{},"f:lastHeartbeatTime":{},"f:lastTransitionTime":{},"f:message":{},"f:reason":{},"f:status":{},"f:type":{}},` +
						`"k:{\"type\":\"Ready\"}":{".":{},"f:lastHeartbeatTime":{},"f:lastTransitionTime":{},"f:message":{},"f:reason":{},"f:status":{},"f:type":{}}},` +
						`"f:daemonEndpoints":{"f:kubeletEndpoint":{"f:Port":{}}},"f:images":{},"f:nodeInfo":{"f:architecture":{},"f:bootID":{},"f:containerRuntimeVersion":{},` +
						`"f:kernelVersion":{},"f:kubeProxyVersion":{},"f:kubeletVersion":{},"f:machineID":{},"f:operatingSystem":{},"f:osImage":{},"f:systemUUID":{}},"f:phase":{}}}`)}},
			},
		},
		Spec: corev1.NodeSpec{PodCIDR: ipOf(i) + "/32", PodCIDRs: []string{ipOf(i) + "/32"}},
		Status: corev1.NodeStatus{
			Capacity: rl, Allocatable: rl, Phase: corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{
				cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
				cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
				cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
				cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
				cond(corev1.NodeNetworkUnavailable, corev1.ConditionFalse, "RouteCreated", "RouteController created a route"),
			},
			Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ipOf(i)}, {Type: corev1.NodeHostName, Address: name}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
			NodeInfo: corev1.NodeSystemInfo{
				MachineID: string(uid("machine", i)), SystemUUID: string(uid("system", i)), BootID: string(uid("boot", i)),
				Architecture: "amd64", OperatingSystem: "linux", OSImage: "kwok", KubeletVersion: "v1.36.3-kwok",
				KernelVersion: "kwok", ContainerRuntimeVersion: "kwok", KubeProxyVersion: "v1.36.3-kwok",
			},
			Images: []corev1.ContainerImage{
				{Names: []string{"registry.k8s.io/pause@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a", "registry.k8s.io/pause:3.10"}, SizeBytes: 320368},
				{Names: []string{"registry.k8s.io/kube-proxy@sha256:4b0b4ce3c4f0d0ab6c1a5e6c0b3f7d0a1b5e1e7f0d3c2b1a0f9e8d7c6b5a4f3e", "registry.k8s.io/kube-proxy:v1.36.3"}, SizeBytes: 30567000},
				{Names: []string{"docker.io/library/nginx@sha256:5f44022eab9198d75939d9eaa5341bc077eca16fa51d4ef32d33f1bd4c8cbe7d", "docker.io/library/nginx:1.29"}, SizeBytes: 72950530},
			},
		},
	}
}

// BoundPod is pod i: a Deployment's pod with one container, bound to node i (mod the node
// count is the caller's business: it names node i), running, with the managed fields of the
// controller-manager, the scheduler and the kubelet.
func BoundPod(i int, now time.Time) *corev1.Pod {
	ns, name := podName(i)
	t := metav1.NewTime(now.Truncate(time.Second))
	app := fmt.Sprintf("web-%03d", (i/podNamespaces)%1000)
	rs := app + "-6d4cf56db6"
	grace, tolSec, prio := int64(30), int64(300), int32(0)
	ctrl, yes := true, true
	pol := corev1.PreemptLowerPriority
	node := NodeName(i)
	ip := ipOf(i)
	cond := func(typ corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: typ, Status: corev1.ConditionTrue, LastTransitionTime: t}
	}
	mode := int32(0o644)
	exp := int64(3607)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns, GenerateName: rs + "-", UID: uid("pod", i), CreationTimestamp: t,
			Labels: map[string]string{"app": app, "pod-template-hash": "6d4cf56db6", "tier": "frontend"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs, UID: uid("rs", (i/podNamespaces)%1000),
				Controller: &ctrl, BlockOwnerDeletion: &yes}},
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &t, FieldsType: "FieldsV1",
					FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:generateName":{},"f:labels":{".":{},"f:app":{},"f:pod-template-hash":{},"f:tier":{}},` +
						`"f:ownerReferences":{".":{},"k:{\"uid\":\"` + string(uid("rs", (i/podNamespaces)%1000)) + `\"}":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"web\"}":{".":{},` +
						`"f:env":{".":{},"k:{\"name\":\"LOG_LEVEL\"}":{".":{},"f:name":{},"f:value":{}}},"f:image":{},"f:imagePullPolicy":{},"f:name":{},` +
						`"f:ports":{".":{},"k:{\"containerPort\":8080,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{},"f:name":{},"f:protocol":{}}},` +
						`"f:readinessProbe":{".":{},"f:failureThreshold":{},"f:httpGet":{".":{},"f:path":{},"f:port":{},"f:scheme":{}},"f:periodSeconds":{},"f:successThreshold":{},"f:timeoutSeconds":{}},` +
						`"f:resources":{".":{},"f:limits":{".":{},"f:memory":{}},"f:requests":{".":{},"f:cpu":{},"f:memory":{}}},"f:terminationMessagePath":{},"f:terminationMessagePolicy":{}}},` +
						`"f:dnsPolicy":{},"f:enableServiceLinks":{},"f:restartPolicy":{},"f:schedulerName":{},"f:securityContext":{},"f:terminationGracePeriodSeconds":{}}}`)}},
				{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &t, FieldsType: "FieldsV1", Subresource: "status",
					FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:conditions":{"k:{\"type\":\"ContainersReady\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}},` +
						`"k:{\"type\":\"Initialized\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}},` +
						`"k:{\"type\":\"PodReadyToStartContainers\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}},` +
						`"k:{\"type\":\"Ready\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}}},"f:containerStatuses":{},` +
						`"f:hostIP":{},"f:hostIPs":{},"f:phase":{},"f:podIP":{},"f:podIPs":{".":{},"k:{\"ip\":\"` + ip + `\"}":{".":{},"f:ip":{}}},"f:startTime":{}}}`)}},
			},
		},
		Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{{Name: "kube-api-access-" + suffix5(i)[:5], VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				DefaultMode: &mode,
				Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: &exp, Path: "token"}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
						Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
					{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace",
						FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
				}}}}},
			Containers: []corev1.Container{{
				Name: "web", Image: "docker.io/library/nginx:1.29",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
				Env:   []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "info"}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "kube-api-access-" + suffix5(i)[:5], ReadOnly: true, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz",
					Port: intstr.FromInt32(8080), Scheme: corev1.URISchemeHTTP}}, TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3},
				TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				ImagePullPolicy: corev1.PullIfNotPresent,
			}},
			RestartPolicy: corev1.RestartPolicyAlways, TerminationGracePeriodSeconds: &grace, DNSPolicy: corev1.DNSClusterFirst,
			ServiceAccountName: "default", DeprecatedServiceAccount: "default", NodeName: node,
			SecurityContext: &corev1.PodSecurityContext{}, SchedulerName: "default-scheduler",
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &tolSec},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &tolSec},
			},
			Priority: &prio, EnableServiceLinks: &yes, PreemptionPolicy: &pol,
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{cond(corev1.PodReadyToStartContainers), cond(corev1.PodInitialized), cond(corev1.PodReady),
				cond(corev1.ContainersReady), cond(corev1.PodScheduled)},
			HostIP: ip, HostIPs: []corev1.HostIP{{IP: ip}}, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, StartTime: &t,
			QOSClass: corev1.PodQOSBurstable,
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: "web", Ready: true, Started: &yes, RestartCount: 0, Image: "docker.io/library/nginx:1.29",
				ImageID:     "docker.io/library/nginx@sha256:5f44022eab9198d75939d9eaa5341bc077eca16fa51d4ef32d33f1bd4c8cbe7d",
				ContainerID: fmt.Sprintf("containerd://%016x%016x%016x%016x", hash32(name), hash32(ns+name), uint64(i), hash32(node)),
				State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t}},
			}},
		},
	}
}
