package reconcile

import (
	"testing"
	"time"

	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
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

func TestCountsFollowOwners(t *testing.T) {
	s := NewStore(StoreOptions{Bridge: plan.Pod})
	check := func(what string, flows, groups int) {
		t.Helper()
		f, g, m := s.Counts()
		if f != flows || g != groups || m != 0 {
			t.Errorf("%s: counts %d flows %d groups %d meters, want %d, %d, 0", what, f, g, m, flows, groups)
		}
	}
	check("empty", 0, 0)
	mustSet(t, s, "service/a", State{Flows: []openflow.Flow{dstFlow(30, 100, 1), dstFlow(30, 100, 2)}, Groups: []openflow.GroupEntry{selectGroup(1, 1)}})
	mustSet(t, s, "service/b", State{Flows: []openflow.Flow{dstFlow(30, 100, 3)}})
	check("two owners", 3, 1)
	mustSet(t, s, "service/a", State{Flows: []openflow.Flow{dstFlow(30, 100, 1)}})
	check("one replaced", 2, 0)
	if err := s.Set("service/a", State{Flows: []openflow.Flow{dstFlow(30, 100, 3)}}); err == nil {
		t.Fatal("a conflicting Set went through")
	}
	check("a refused Set changes nothing", 2, 0)
	mustSet(t, s, "service/b", State{})
	check("one gone", 1, 0)
}
