package cluster

import (
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// The webhook flags go before the component's own flags, so --scheduler-arg still overrides
// them; the served names are the last --scheduler-name; the configuration observes only.
func TestSchedulerWebhookFlagsAndConfiguration(t *testing.T) {
	p, err := GeneratePKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := Component{Args: []string{"/bin/meganode", "scheduler", "--role=all", "--scheduler-name=meganode,default-scheduler",
		"--reconcile-every=2s", "--scheduler-name=a, b"}}
	w, err := addSchedulerWebhook(&c, p, 9443)
	if err != nil {
		t.Fatal(err)
	}
	if c.Args[0] != "/bin/meganode" || c.Args[1] != "scheduler" || c.Args[2] != "--intake=webhook" ||
		slices.Index(c.Args, "--webhook-addr=127.0.0.1:9443") > slices.Index(c.Args, "--role=all") {
		t.Errorf("args %v", c.Args)
	}
	if w.URL != "https://127.0.0.1:9443/intake/pods" || !slices.Equal(w.Names, []string{"a", "b"}) || len(w.CABundle) == 0 {
		t.Errorf("webhook %+v", w)
	}
	vwc := SchedulerWebhookConfiguration(w.URL, w.CABundle, w.Names)
	wh := vwc.Webhooks[0]
	if *wh.FailurePolicy != admissionregistrationv1.Ignore || *wh.SideEffects != admissionregistrationv1.SideEffectClassNoneOnDryRun ||
		*wh.TimeoutSeconds != WebhookTimeoutSeconds || *wh.ClientConfig.URL != w.URL ||
		!strings.Contains(wh.MatchConditions[0].Expression, "['a', 'b']") {
		t.Errorf("configuration %+v", wh)
	}
}
