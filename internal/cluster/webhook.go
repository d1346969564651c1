package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meganode/meganode/internal/pki"
)

// Scheduler intake modes `up --scheduler meganode --intake` takes (the scheduler's --intake).
const (
	IntakeWatch   = "watch"
	IntakeWebhook = "webhook"
	// SchedulerWebhookName names the ValidatingWebhookConfiguration `up` registers.
	SchedulerWebhookName = "meganode-scheduler-intake"
	// schedulerWebhookPath is the scheduler's webhook path (scheduler.WebhookPath; internal/
	// scheduler imports this package, so the constant is repeated).
	schedulerWebhookPath = "/intake/pods"
	// WebhookTimeoutSeconds: the apiserver gives up on the webhook after this and, with
	// failurePolicy Ignore, creates the pod anyway (the scheduler's reconcile LIST takes it).
	WebhookTimeoutSeconds = 2
)

// schedulerWebhook is the webhook intake `up` set up: where it listens and the CA that signed
// its serving certificate (the cluster CA).
type schedulerWebhook struct {
	URL      string
	CABundle []byte
	Names    []string
}

// addSchedulerWebhook issues the webhook's serving certificate (127.0.0.1) from the cluster CA
// and gives the meganode scheduler component the flags of the webhook intake on port.
func addSchedulerWebhook(c *Component, p *PKI, port int) (*schedulerWebhook, error) {
	ca, err := pki.LoadCA(p.CACert, p.CAKey)
	if err != nil {
		return nil, err
	}
	crt, key := filepath.Join(p.Dir, "scheduler-webhook.crt"), filepath.Join(p.Dir, "scheduler-webhook.key")
	if err := ca.Issue(pki.ServingTemplate("meganode-scheduler-webhook", "127.0.0.1"), crt, key); err != nil {
		return nil, err
	}
	bundle, err := os.ReadFile(p.CACert)
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// The component's own flags (--scheduler-name, and any --scheduler-arg) come after these,
	// so a --scheduler-arg still overrides them.
	args := append([]string{c.Args[0], c.Args[1], "--intake=" + IntakeWebhook, "--webhook-addr=" + addr,
		"--webhook-cert=" + crt, "--webhook-key=" + key}, c.Args[2:]...)
	c.Args = args
	return &schedulerWebhook{URL: "https://" + addr + schedulerWebhookPath, CABundle: bundle, Names: servedNames(args)}, nil
}

// servedNames is the scheduler's last --scheduler-name in args.
func servedNames(args []string) []string {
	var names []string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--scheduler-name="); ok {
			names = nil
			for _, n := range strings.Split(v, ",") {
				names = append(names, strings.TrimSpace(n))
			}
		}
	}
	return names
}

// SchedulerWebhookConfiguration is the ValidatingWebhookConfiguration of the webhook intake:
// pod CREATEs, failurePolicy Ignore (it observes, it never blocks a creation), a short timeout,
// and a match condition so only unscheduled pods for the served scheduler names are sent.
// sideEffects NoneOnDryRun: the webhook's side effect (scheduling the pod) is skipped for
// dry-run requests, which it answers and ignores.
func SchedulerWebhookConfiguration(url string, caBundle []byte, names []string) *admissionregistrationv1.ValidatingWebhookConfiguration {
	ignore := admissionregistrationv1.Ignore
	sideEffects := admissionregistrationv1.SideEffectClassNoneOnDryRun
	scope := admissionregistrationv1.NamespacedScope
	timeout := int32(WebhookTimeoutSeconds)
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = "'" + n + "'"
	}
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: SchedulerWebhookName},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "intake.scheduler.meganode.io",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caBundle},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}, Scope: &scope},
			}},
			FailurePolicy:           &ignore,
			SideEffects:             &sideEffects,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name: "unscheduled-for-meganode",
				Expression: "(!has(object.spec.nodeName) || object.spec.nodeName == '') && has(object.spec.schedulerName) && " +
					"object.spec.schedulerName in [" + strings.Join(quoted, ", ") + "]",
			}},
		}},
	}
}

// registerSchedulerWebhook creates (or replaces) the webhook intake's configuration.
func registerSchedulerWebhook(ctx context.Context, cs kubernetes.Interface, w *schedulerWebhook) error {
	want := SchedulerWebhookConfiguration(w.URL, w.CABundle, w.Names)
	api := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	cur, err := api.Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = api.Create(ctx, want, metav1.CreateOptions{})
	case err == nil:
		want.ResourceVersion = cur.ResourceVersion
		_, err = api.Update(ctx, want, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("register the scheduler's admission webhook: %w", err)
	}
	return nil
}
