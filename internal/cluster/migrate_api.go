package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// countPaths are the list paths of CountedResources.
var countPaths = map[string]string{
	"nodes": "/api/v1/nodes", "pods": "/api/v1/pods", "namespaces": "/api/v1/namespaces",
	"configmaps": "/api/v1/configmaps", "secrets": "/api/v1/secrets", "serviceaccounts": "/api/v1/serviceaccounts",
	"services": "/api/v1/services", "leases": "/apis/coordination.k8s.io/v1/leases",
}

// countObjects counts each of CountedResources through the API: a list of one item and its
// remainingItemCount, or a paginated list where the server gives no count.
func countObjects(ctx context.Context, cs kubernetes.Interface) (map[string]int64, error) {
	out := make(map[string]int64, len(CountedResources))
	for _, r := range CountedResources {
		n, err := countList(ctx, cs, countPaths[r])
		if err != nil {
			return nil, fmt.Errorf("count %s: %w", r, err)
		}
		out[r] = n
	}
	return out, nil
}

func countList(ctx context.Context, cs kubernetes.Interface, path string) (int64, error) {
	var total int64
	cont, limit := "", "1"
	for {
		req := cs.CoreV1().RESTClient().Get().AbsPath(path).Param("limit", limit)
		if cont != "" {
			req = req.Param("continue", cont)
		}
		raw, err := req.Do(ctx).Raw()
		if err != nil {
			return 0, err
		}
		var l struct {
			Metadata struct {
				Continue           string `json:"continue"`
				RemainingItemCount *int64 `json:"remainingItemCount"`
			} `json:"metadata"`
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(raw, &l); err != nil {
			return 0, err
		}
		total += int64(len(l.Items))
		if l.Metadata.Continue == "" {
			return total, nil
		}
		if l.Metadata.RemainingItemCount != nil {
			return total + *l.Metadata.RemainingItemCount, nil
		}
		cont, limit = l.Metadata.Continue, "500"
	}
}

// writeCheckConfigMap creates a ConfigMap in MigrateNamespace and returns its resourceVersion.
func writeCheckConfigMap(ctx context.Context, cs kubernetes.Interface) (int64, error) {
	cm, err := cs.CoreV1().ConfigMaps(MigrateNamespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "cutover-"},
		Data:       map[string]string{"written": time.Now().UTC().Format(time.RFC3339Nano)},
	}, metav1.CreateOptions{})
	if err != nil {
		return 0, fmt.Errorf("write after the cut-over: %w", err)
	}
	return strconv.ParseInt(cm.ResourceVersion, 10, 64)
}

// heldResources are watched across a cut-over: every Lease (node heartbeats: a busy stream,
// whose last event is likely the store's last write) and every ConfigMap (a quiet one, whose
// last resourceVersion is older than the store's revision).
var heldResources = []string{"leases", "configmaps"}

// watchList lists (one item) or watches resource in every namespace.
func watchList(ctx context.Context, cs kubernetes.Interface, resource string, rv string) (string, watch.Interface, error) {
	switch resource {
	case "leases":
		if rv == "" {
			l, err := cs.CoordinationV1().Leases("").List(ctx, metav1.ListOptions{Limit: 1})
			if err != nil {
				return "", nil, err
			}
			return l.ResourceVersion, nil, nil
		}
		w, err := cs.CoordinationV1().Leases("").Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		return rv, w, err
	case "configmaps":
		if rv == "" {
			l, err := cs.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{Limit: 1})
			if err != nil {
				return "", nil, err
			}
			return l.ResourceVersion, nil, nil
		}
		w, err := cs.CoreV1().ConfigMaps("").Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		return rv, w, err
	}
	return "", nil, fmt.Errorf("no watch of %s", resource)
}

// heldWatch is a raw watch opened before the cut-over at a list's resourceVersion, read until
// its stream ends.
type heldWatch struct {
	resource string
	out      WatchOutcome
	done     chan struct{}
}

func holdWatch(ctx context.Context, cs kubernetes.Interface, resource string) (*heldWatch, error) {
	rv, _, err := watchList(ctx, cs, resource, "")
	if err != nil {
		return nil, err
	}
	h := &heldWatch{resource: resource, out: WatchOutcome{Resource: resource + " (all namespaces)", StartRV: rv, LastRV: rv},
		done: make(chan struct{})}
	_, w, err := watchList(ctx, cs, resource, rv)
	if err != nil {
		return nil, err
	}
	go func() {
		defer close(h.done)
		defer w.Stop()
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				h.out.EndedBy = "error event: " + statusText(ev.Object)
				return
			}
			if m, err := meta.Accessor(ev.Object); err == nil {
				h.out.LastRV = m.GetResourceVersion()
			}
			h.out.Events++
		}
		h.out.EndedBy = "stream closed"
		if ctx.Err() != nil {
			h.out.EndedBy = "still open (cancelled)"
		}
	}()
	return h, nil
}

// reopen waits for the held stream to have ended (it must: its kube-apiserver is gone), then
// watches again from the last resourceVersion it saw, as client-go's reflector does, and
// reports the first thing that comes.
func (h *heldWatch) reopen(ctx context.Context, cs kubernetes.Interface, timeout time.Duration) *WatchOutcome {
	select {
	case <-h.done:
	case <-time.After(10 * time.Second):
		// Still open across a kube-apiserver restart: say so.
		o := h.out
		o.EndedBy, o.Result = "not ended", "the held stream never ended"
		return &o
	}
	o := h.out
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, w, err := watchList(wctx, cs, h.resource, o.LastRV)
	if err != nil {
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			o.Result, o.Detail = "410 Gone", err.Error()
		} else {
			o.Result, o.Detail = "error", err.Error()
		}
		return &o
	}
	defer w.Stop()
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				o.Result, o.Detail = "closed", "the reopened watch ended without an event"
				return &o
			}
			if ev.Type == watch.Error {
				if s, ok := ev.Object.(*metav1.Status); ok && s.Code == 410 {
					o.Result = "410 Gone"
				} else {
					o.Result = "error"
				}
				o.Detail = statusText(ev.Object)
				return &o
			}
			if ev.Type == watch.Bookmark {
				continue
			}
			m, _ := meta.Accessor(ev.Object)
			o.Result = "resumed"
			if m != nil {
				o.Detail = fmt.Sprintf("first event %s %s/%s at resourceVersion %s", ev.Type, m.GetNamespace(), m.GetName(), m.GetResourceVersion())
			}
			return &o
		case <-wctx.Done():
			o.Result, o.Detail = "no event", fmt.Sprintf("nothing in %s", timeout)
			return &o
		}
	}
}

func statusText(obj any) string {
	if s, ok := obj.(*metav1.Status); ok {
		return fmt.Sprintf("%d %s: %s", s.Code, s.Reason, s.Message)
	}
	return fmt.Sprintf("%T", obj)
}
