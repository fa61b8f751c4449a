package agent

import (
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"
	"k8s.io/client-go/tools/record"

	"nodeflow/datapath/plan"
	"nodeflow/datapath/reconcile"
	"nodeflow/lib/openflow"
)

// costAgent is an agent with only what the costs need: stores of both
// bridges (sharing a budget of limit when limit > 0), a fake recorder
// and a quiet log.
func costAgent(limit int) (*Agent, *record.FakeRecorder) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	rec := record.NewFakeRecorder(100)
	a := &Agent{cfg: Config{PodBridge: "br0", GatewayBridge: "breth0", NamespaceBudget: limit}, log: log, recorder: rec, metrics: NewMetrics()}
	b := a.newBudget()
	a.stores = map[plan.Bridge]*reconcile.Store{
		plan.Pod:     reconcile.NewStore(reconcile.StoreOptions{Budget: b}),
		plan.Gateway: reconcile.NewStore(reconcile.StoreOptions{Budget: b}),
	}
	return a, rec
}

// flowsState is n flows (destinations from 10.0.<base>.0) charged to
// Service team/<name> created at created (nil charge for no name).
func flowsState(base, n int, name string, created time.Time) reconcile.State {
	var st reconcile.State
	for i := range n {
		st.Flows = append(st.Flows, openflow.Flow{Table: 0, Priority: 100,
			Match:        openflow.NewMatch(openflow.EthType(0x0800), openflow.IPv4Dst(netip.AddrFrom4([4]byte{10, 0, byte(base), byte(i)}))),
			Instructions: []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{openflow.OutputPort(1)}}}})
	}
	if name != "" {
		st.Charge = &reconcile.Charge{Kind: "Service", APIVersion: "v1", Name: name, Created: created}
	}
	return st
}

// nextEvent waits for the recorder's next event.
func nextEvent(t *testing.T, rec *record.FakeRecorder) string {
	t.Helper()
	select {
	case e := <-rec.Events:
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5 s")
	}
	return ""
}

// TestBudgetEvents: the Service held back gets one Warning event, with the
// budget, the namespace's use and its cost, once its state has settled;
// one held back and let in again within the delay gets none; one let in
// after its Warning gets a Normal event.
func TestBudgetEvents(t *testing.T) {
	a, rec := costAgent(10)
	pod := a.stores[plan.Pod]
	b := pod.Budget()
	b.Report(a.reportBudget(b))
	t0 := time.Unix(1000, 0)
	set := func(owner string, st reconcile.State) {
		t.Helper()
		if err := pod.Set(owner, st); err != nil {
			t.Fatal(err)
		}
	}
	set("service/team/old:80/TCP", flowsState(1, 6, "old", t0))
	// A blip: held back, then room at once (old shrinks).
	set("service/team/blip:80/TCP", flowsState(2, 5, "blip", t0.Add(time.Second)))
	set("service/team/old:80/TCP", flowsState(1, 5, "old", t0))
	// new: held back for good.
	set("service/team/new:80/TCP", flowsState(3, 3, "new", t0.Add(2*time.Second)))
	e := nextEvent(t, rec)
	for _, want := range []string{"Warning NamespaceBudgetExceeded", "Service team/new", "needs 3 flows and buckets", "uses 10 of its budget of 10"} {
		if !strings.Contains(e, want) {
			t.Errorf("event %q lacks %q", e, want)
		}
	}
	set("service/team/blip:80/TCP", reconcile.State{})
	if e := nextEvent(t, rec); !strings.HasPrefix(e, "Normal NamespaceBudgetAdmitted") || !strings.Contains(e, "team/new") {
		t.Errorf("event %q, want new let in", e)
	}
	select {
	case e := <-rec.Events:
		t.Errorf("more events: %q", e)
	case <-time.After(2 * budgetEventDelay):
	}
}

// TestCostMetrics: the namespace series follow the stores, and go with the
// namespace's last owner.
func TestCostMetrics(t *testing.T) {
	a, _ := costAgent(100)
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCostCollector(a))
	pod, gw := a.stores[plan.Pod], a.stores[plan.Gateway]
	t0 := time.Unix(1000, 0)
	if err := pod.Set("service/team/a:80/TCP", flowsState(1, 4, "a", t0)); err != nil {
		t.Fatal(err)
	}
	if err := gw.Set("service-gateway/team/a:80/TCP", flowsState(1, 2, "a", t0)); err != nil {
		t.Fatal(err)
	}
	if err := pod.Set("service/_cidrs", flowsState(9, 3, "", t0)); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP nodeflow_namespace_flows Desired flows of a namespace's objects, by bridge.
# TYPE nodeflow_namespace_flows gauge
nodeflow_namespace_flows{bridge="br0",namespace="team"} 4
nodeflow_namespace_flows{bridge="breth0",namespace="team"} 2
# HELP nodeflow_namespace_budget_used Flows and buckets of a namespace's objects that its budget lets in.
# TYPE nodeflow_namespace_budget_used gauge
nodeflow_namespace_budget_used{namespace="team"} 6
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "nodeflow_namespace_flows", "nodeflow_namespace_budget_used"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(newCostCollector(a), "nodeflow_namespace_memory_bytes"); n != 1 {
		t.Errorf("%d memory series, want team's", n)
	}
	for _, s := range []*reconcile.Store{pod, gw} {
		for _, o := range s.Owners("service") {
			if err := s.Delete(o); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := testutil.CollectAndCount(newCostCollector(a)); n != 1 {
		t.Errorf("%d series with no namespace left, want the budget's own", n)
	}
}
