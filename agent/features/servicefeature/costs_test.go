package servicefeature

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeflow/datapath/plan"
	"nodeflow/datapath/reconcile"
	"nodeflow/datapath/serviceflows"
	"nodeflow/internal/testutil/featuretest"
	"nodeflow/model/service"
)

// budgetProxy returns a service proxy whose stores share a budget of
// limit flows and buckets per namespace.
func budgetProxy(t testing.TB, limit int) (*Proxy, *reconcile.Budget) {
	t.Helper()
	h := featuretest.New(featuretest.DefaultNode())
	b := reconcile.NewBudget(limit)
	h.Stores[plan.Pod] = reconcile.NewStore(reconcile.StoreOptions{Bridge: plan.Pod, Budget: b})
	h.Stores[plan.Gateway] = reconcile.NewStore(reconcile.StoreOptions{Bridge: plan.Gateway, Budget: b})
	return testServiceProxyOn(t, h, Options{}), b
}

// recordTeamService records Service team/<name> (a NodePort, so that it
// has owners on both bridges), created at created, with 10 endpoints.
func recordTeamService(p *Proxy, name string, i int, created time.Time) {
	svc := webService(fmt.Sprintf("10.96.1.%d", 10+i))
	svc.Namespace, svc.Name, svc.CreationTimestamp = "team", name, metav1.NewTime(created)
	svc.Spec.Ports[0].NodePort = int32(30100 + i)
	p.svcs.Record(nil, svc)
	var ips []string
	for j := range 10 {
		ips = append(ips, fmt.Sprintf("10.244.2.%d", 10*i+j+1))
	}
	sl := webSlice(ips...)
	sl.Namespace, sl.Name, sl.Labels["kubernetes.io/service-name"] = "team", name+"-x", name
	p.eps.Record(nil, sl)
}

// teamPort returns the service port of Service team/<name>.
func teamPort(name string) service.ServicePortName {
	n := webPort
	n.Namespace, n.Name = "team", name
	return n
}

// TestServiceBudget: three Services of one namespace, where the budget
// has room for two, arrive newest first; the newest is held back on both
// bridges, reported with its numbers, and let in once an older one goes.
func TestServiceBudget(t *testing.T) {
	// One Service's cost, alone.
	p, _ := budgetProxy(t, 1<<30)
	ctx := context.Background()
	recordTeamService(p, "a", 0, time.Unix(1000, 0))
	if err := p.sync(ctx, false); err != nil {
		t.Fatal(err)
	}
	one := store(p, plan.Pod).NamespaceUse()["team"].Entries() + store(p, plan.Gateway).NamespaceUse()["team"].Entries()
	if one == 0 {
		t.Fatal("a Service costs nothing")
	}

	p, b := budgetProxy(t, 2*one+one/2)
	var reports []reconcile.Refusal
	b.Report(func(rs []reconcile.Refusal) { reports = append(reports, rs...) })
	base := time.Unix(1000, 0)
	for i, name := range []string{"c", "b", "a"} {
		recordTeamService(p, name, 2-i, base.Add(time.Duration(2-i)*time.Second))
	}
	if err := p.sync(ctx, false); err != nil {
		t.Fatal(err)
	}
	pod, gw := store(p, plan.Pod), store(p, plan.Gateway)
	for _, name := range []string{"a", "b"} {
		if err := pod.Errors()[serviceflows.Owner(teamPort(name))]; err != nil {
			t.Errorf("%s held back: %v", name, err)
		}
	}
	var be *reconcile.BudgetError
	if err := pod.Errors()[serviceflows.Owner(teamPort("c"))]; !errors.As(err, &be) {
		t.Fatalf("c on br0: %v, want held back", err)
	}
	if err := gw.Errors()[serviceflows.GatewayOwner(teamPort("c"))]; !errors.Is(err, reconcile.ErrOverBudget) {
		t.Fatalf("c on breth0: %v, want held back", err)
	}
	if be.Cost != one || be.Use != 2*one || be.Kind != "Service" || be.APIVersion != "v1" || !be.Created.Equal(base.Add(2*time.Second)) {
		t.Errorf("c's refusal %+v, want cost %d, use %d", be.Refusal, one, 2*one)
	}
	// The arrival order (c first) let c in for a moment; the report is the
	// outcome: c held back, once.
	if i := slices.IndexFunc(reports, func(r reconcile.Refusal) bool { return r.Name == "c" && !r.Admitted }); i < 0 {
		t.Fatalf("reports %+v: c not reported", reports)
	}
	if u := pod.NamespaceUse()["team"].Entries() + gw.NamespaceUse()["team"].Entries(); u != 2*one {
		t.Errorf("the namespace's desired entries: %d, want %d", u, 2*one)
	}

	// a goes: c fits.
	svc := webService("10.96.1.10")
	svc.Namespace, svc.Name = "team", "a"
	p.svcs.Record(svc, nil)
	if err := p.sync(ctx, false); err != nil {
		t.Fatal(err)
	}
	if errs := pod.Errors(); len(errs) != 0 {
		t.Fatalf("after a went: %v", errs)
	}
	if last := reports[len(reports)-1]; last.Name != "c" || !last.Admitted {
		t.Errorf("last report %+v, want c let in", last)
	}
}
