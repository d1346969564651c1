package metrics

import (
	"strings"
	"testing"
	"time"
)

func TestDeclareExportsZeroSeriesAndKeepsValues(t *testing.T) {
	Reset()
	m := For("collector/7")
	m.Add("conflicts", 2)
	m.Declare([]string{"conflicts", "late_proposals"}, []string{"proposal_latency"})
	var b strings.Builder
	Write(&b)
	out := b.String()
	for _, want := range []string{
		"meganode_scheduler_conflicts{component=\"collector/7\"} 2\n",
		"meganode_scheduler_late_proposals{component=\"collector/7\"} 0\n",
		"meganode_scheduler_proposal_latency_seconds{component=\"collector/7\",quantile=\"0.99\"} 0\n",
		"meganode_scheduler_proposal_latency_seconds_count{component=\"collector/7\"} 0\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, out)
		}
	}
	m.Observe("proposal_latency", 3*time.Millisecond)
	m.Declare(nil, []string{"proposal_latency"})
	if l := m.Hist("proposal_latency"); l.Count != 1 {
		t.Errorf("Declare emptied a histogram: %+v", l)
	}
}
