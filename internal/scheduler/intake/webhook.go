package intake

import (
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/meganode/meganode/internal/scheduler/podspec"
	"github.com/meganode/meganode/internal/scheduler/wire"
)

// Intake sources: the mode (Config.Source; the scheduler's Config.Intake) and where a pod came
// from (the pods_from_<source> counters of each intake).
const (
	ModeWatch   = "watch"   // mode: a field-selected watch on unscheduled pods (intake.go)
	ModeWebhook = "webhook" // mode: the admission webhook (webhook_http.go) + a periodic LIST

	SourceWatch     = "watch"
	SourceWebhook   = "webhook"
	SourceReconcile = "reconcile"
)

// WebhookOptions configure the webhook intake.
type WebhookOptions struct {
	Addr     string // where the HTTPS webhook listens (127.0.0.1:port locally)
	CertFile string // serving certificate and key (PEM); both empty: generate a CA and a certificate
	KeyFile  string
	// CAFile: with a generated certificate, the CA bundle (PEM) is written here for the
	// ValidatingWebhookConfiguration's caBundle (default: ca.crt in a new temporary directory).
	CAFile string
	// ReconcileEvery: a consistent LIST of unscheduled pods this often takes the pods the webhook
	// missed and drops the ones that are gone (default 10s).
	ReconcileEvery time.Duration
	// ConfirmGrace: a pod the webhook offered may not be stored yet (admission is still running,
	// or fails later). Within this long after it was offered, a NotFound does not drop it
	// (default 10s).
	ConfirmGrace time.Duration
}

func (o *WebhookOptions) defaults() {
	if o.ReconcileEvery <= 0 {
		o.ReconcileEvery = 10 * time.Second
	}
	if o.ConfirmGrace <= 0 {
		o.ConfirmGrace = 10 * time.Second
	}
}

// The webhook intake's consistency story (NOTES.md, Intake):
//
//   - The webhook is a hint, the apiserver is the truth. A pod offered by the webhook is
//     scheduled at once, from the object admission saw (UID set, no resourceVersion yet); it may
//     not be stored yet, or never be (a later admission plugin refuses it, the write fails).
//   - A pod is kept until (a) its bind succeeded, (b) a GET after a failed bind (NotFound,
//     already assigned, UID mismatch) shows it bound, replaced or gone — a NotFound within
//     ConfirmGrace of the offer is re-checked with backoff, since the Binding may have raced the
//     pod's own write — or (c) a consistent LIST no longer shows it unscheduled and it was
//     offered more than ConfirmGrace before that LIST began (so its create had finished).
//   - The same LIST, at start and every ReconcileEvery, takes the pods the webhook never
//     offered (failurePolicy Ignore: the apiserver creates pods while this process is down or
//     slow), and refreshes the objects of known pods (updates are not seen otherwise).
//   - A wrong drop in (c) (a create slower than the grace) costs one period: the next LIST
//     brings the pod back. No pod is bound twice: the Binding carries the UID and the apiserver
//     refuses an assigned pod.
type webhookStore struct {
	opts WebhookOptions
	pods map[string]*corev1.Pod // by ns/name: the latest object (offered or listed); under Intake.mu
	// While a LIST runs, the UIDs dropped meanwhile: the LIST may predate the drop (a pod bound
	// after its snapshot still shows as unscheduled), so it must not bring them back.
	listing bool
	dropped map[string]bool
}

func newWebhookStore(o WebhookOptions) *webhookStore {
	o.defaults()
	return &webhookStore{opts: o, pods: map[string]*corev1.Pod{}, dropped: map[string]bool{}}
}

// Offer takes a pod the admission webhook saw at creation (it may not be stored yet).
func (in *Intake) Offer(p *corev1.Pod) bool { return in.add(p, SourceWebhook) }

// Index is this intake's collector index.
func (in *Intake) Index() int { return in.cfg.Collector }

// putLocked records the latest object of a pod (in.mu held). A different UID under a known
// name is a new pod: the old one's state goes.
func (in *Intake) putLocked(k string, p *corev1.Pod) {
	if old := in.wh.pods[k]; old != nil && old.UID != p.UID {
		delete(in.uids, string(old.UID))
		delete(in.state, k)
	}
	in.wh.pods[k] = p
}

func (in *Intake) webhookGet(k string) (*corev1.Pod, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	p, ok := in.wh.pods[k]
	return p, ok
}

// dropLocked forgets a pod (in.mu held).
func (in *Intake) dropLocked(k, why string) {
	if p := in.wh.pods[k]; p != nil {
		delete(in.uids, string(p.UID))
		if in.wh.listing {
			in.wh.dropped[string(p.UID)] = true
		}
	}
	delete(in.wh.pods, k)
	delete(in.state, k)
	in.m.Add("dropped_"+why, 1)
}

// webhookFinished: no watch tells this intake that a pod left, so a bound pod is dropped here,
// and a pod whose bind found it gone or already assigned is confirmed with a GET first.
func (in *Intake) webhookFinished(key wire.AttemptKey, bound bool) {
	in.mu.Lock()
	k, ok := in.uids[key.UID]
	st := in.state[k]
	if !ok || st == nil || st.attempt != key.Attempt {
		in.mu.Unlock()
		return
	}
	if bound {
		in.dropLocked(k, "bound")
		in.mu.Unlock()
		return
	}
	seen := st.seen
	in.mu.Unlock()
	go in.confirmGone(key, k, seen)
}

// confirmGone GETs a pod whose bind failed as gone: still unscheduled with the same UID → try
// again; bound, deleted or replaced → drop. A NotFound within the grace may be a Binding that
// raced the pod's own write, so it is asked again (100 ms, doubling) until the grace ends.
func (in *Intake) confirmGone(key wire.AttemptKey, k string, seen time.Time) {
	ns, name, _ := strings.Cut(k, "/")
	wait := 100 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		p, err := in.cfg.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		cancel()
		switch {
		case apierrors.IsNotFound(err) && time.Since(seen) < in.wh.opts.ConfirmGrace:
			in.m.Add("gone_rechecks", 1)
			time.Sleep(min(wait, max(in.wh.opts.ConfirmGrace-time.Since(seen), time.Millisecond)))
			wait *= 2
			continue
		case err != nil && !apierrors.IsNotFound(err):
			in.m.Add("confirm_errors", 1)
			in.Requeue(key, time.Second, "confirm: "+err.Error()) // try again; the next bind tells
			return
		case err == nil && string(p.UID) == key.UID && p.Spec.NodeName == "" && !podspec.Terminal(p):
			in.m.Add("gone_but_there", 1) // the Binding came before the pod was stored
			in.mu.Lock()
			if st := in.state[k]; st != nil && in.uids[key.UID] == k {
				in.wh.pods[k] = p
			}
			in.mu.Unlock()
			in.Requeue(key, 0, "bound before stored")
			return
		}
		in.mu.Lock()
		if st := in.state[k]; st != nil && in.uids[key.UID] == k && st.attempt == key.Attempt {
			in.dropLocked(k, "gone")
		}
		in.mu.Unlock()
		if err == nil && string(p.UID) != key.UID {
			in.add(p, SourceReconcile) // a new pod of the same name (the webhook offers it too)
		}
		return
	}
}

// reconcileLoop LISTs unscheduled pods at start and every ReconcileEvery.
func (in *Intake) reconcileLoop(ctx context.Context) {
	t := time.NewTicker(in.wh.opts.ReconcileEvery)
	defer t.Stop()
	for {
		if err := in.reconcile(ctx); err != nil && ctx.Err() == nil {
			in.m.Add("reconcile_errors", 1)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// reconcile: one consistent LIST per served scheduler name (field-selected like the watch,
// paged). Listed pods of this collector are taken (pods_from_reconcile counts the ones the
// webhook missed) and their objects refreshed, except pods dropped while the LIST ran (bound
// after its snapshot); known pods not listed, offered more than ConfirmGrace before the LIST
// began, are dropped (bound, deleted, or never created).
func (in *Intake) reconcile(ctx context.Context) error {
	began := time.Now()
	in.mu.Lock()
	in.wh.listing = true
	in.mu.Unlock()
	defer func() {
		in.mu.Lock()
		in.wh.listing = false
		clear(in.wh.dropped)
		in.mu.Unlock()
	}()
	listed := map[string]bool{}
	for name := range in.names {
		sel := fields.AndSelectors(fields.OneTermEqualSelector("spec.schedulerName", name),
			fields.OneTermEqualSelector("spec.nodeName", "")).String()
		opts := metav1.ListOptions{FieldSelector: sel, Limit: 500}
		for {
			l, err := in.cfg.Client.CoreV1().Pods("").List(ctx, opts)
			if err != nil {
				return err
			}
			for i := range l.Items {
				p := &l.Items[i]
				if !in.names[p.Spec.SchedulerName] || !in.mine(p) || podspec.Terminal(p) || p.Spec.NodeName != "" {
					continue // (fake clientsets ignore field selectors)
				}
				k := p.Namespace + "/" + p.Name
				listed[k] = true
				in.mu.Lock()
				stale := in.wh.dropped[string(p.UID)]
				in.mu.Unlock()
				if stale {
					in.m.Add("reconcile_stale", 1) // dropped (bound) since this LIST began
					continue
				}
				if !in.add(p, SourceReconcile) {
					in.mu.Lock()
					if old := in.wh.pods[k]; old != nil && old.UID == p.UID {
						in.wh.pods[k] = p // the stored object is newer than the one admission saw
					}
					in.mu.Unlock()
				}
			}
			if opts.Continue = l.Continue; opts.Continue == "" {
				break
			}
		}
	}
	cutoff := began.Add(-in.wh.opts.ConfirmGrace)
	in.mu.Lock()
	for k, st := range in.state {
		if !listed[k] && st.seen.Before(cutoff) {
			in.dropLocked(k, "not_listed")
		}
	}
	in.mu.Unlock()
	in.m.Add("reconciles", 1)
	in.m.Observe("reconcile", time.Since(began))
	return nil
}
