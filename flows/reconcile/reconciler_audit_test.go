package reconcile

import (
	"testing"
	"time"
)

func TestAuditDelay(t *testing.T) {
	for _, c := range []struct {
		name           string
		interval, took time.Duration
		want           time.Duration
	}{
		{"small bridge: the interval", 30 * time.Second, 20 * time.Millisecond, 30 * time.Second},
		{"at the duty limit", 30 * time.Second, 300 * time.Millisecond, 30 * time.Second},
		{"large bridge: 100 times the pass", 30 * time.Second, 2 * time.Second, 200 * time.Second},
	} {
		if got := auditDelay(c.interval, c.took); got != c.want {
			t.Errorf("%s: auditDelay(%s, %s) = %s, want %s", c.name, c.interval, c.took, got, c.want)
		}
	}
}
