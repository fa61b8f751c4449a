package servicefeature

import (
	"context"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeflow/datapath/plan"
	"nodeflow/datapath/serviceflows"
	"nodeflow/internal/testutil/featuretest"
	"nodeflow/model/service"
)

// recordingIdler records the idle handler's calls.
type recordingIdler struct{ calls []string }

func (r *recordingIdler) Idled(n service.ServicePortName, port *service.ServicePort, ids map[string]uint32) {
	if port == nil || len(ids) == 0 {
		r.calls = append(r.calls, "idled-without-port-or-ids "+n.String())
		return
	}
	r.calls = append(r.calls, "idled "+n.String())
}

func (r *recordingIdler) Unidled(n service.ServicePortName, ready bool) {
	what := "unidled "
	if !ready {
		what = "unidled-without-endpoints "
	}
	r.calls = append(r.calls, what+n.String())
}

func TestServiceProxyIdledPortsGoToTheHandler(t *testing.T) {
	h := &recordingIdler{}
	p := testServiceProxyOn(t, featuretest.New(featuretest.DefaultNode()), Options{Idle: h})
	ctx := context.Background()
	svc := webService("10.96.0.10")
	svc.Annotations = map[string]string{service.IdledAtAnnotation: "2026-11-21T07:00:00Z"}
	p.svcs.Record(nil, svc)
	if err := p.sync(ctx, false); err != nil {
		t.Fatal(err)
	}
	if want := []string{"idled " + webPort.String()}; !slices.Equal(h.calls, want) {
		t.Fatalf("handler calls %q, want %q", h.calls, want)
	}
	pod, _ := store(p, plan.Pod).Get(serviceflows.Owner(webPort))
	for _, f := range pod.Flows {
		if hasController(f) {
			t.Errorf("an idled service got a reject flow: %s", f)
		}
	}
	if len(pod.Groups) != 0 {
		t.Errorf("an idled service without endpoints got groups: %+v", pod.Groups)
	}

	// Pods come back: the group is built and the handler lets go.
	slice := webSlice("10.244.2.5")
	p.eps.Record(nil, slice)
	if err := p.sync(ctx, false); err != nil {
		t.Fatal(err)
	}
	pod, _ = store(p, plan.Pod).Get(serviceflows.Owner(webPort))
	if len(pod.Groups) != 1 {
		t.Errorf("unidled service: %d groups, want 1", len(pod.Groups))
	}
	if want := []string{"idled " + webPort.String(), "unidled " + webPort.String()}; !slices.Equal(h.calls, want) {
		t.Fatalf("handler calls %q, want %q", h.calls, want)
	}

	// Idled again (endpoints gone, annotation still there), then deleted.
	p.eps.Record(slice, webSlice())
	if err := p.sync(ctx, false); err != nil {
		t.Fatal(err)
	}
	p.svcs.Record(svc, nil)
	if err := p.sync(ctx, false); err != nil {
		t.Fatal(err)
	}
	want := []string{"idled " + webPort.String(), "unidled " + webPort.String(), "idled " + webPort.String(), "unidled-without-endpoints " + webPort.String()}
	if !slices.Equal(h.calls, want) {
		t.Fatalf("handler calls %q, want %q", h.calls, want)
	}

	// The unidler removes the annotations as soon as it sees a ready
	// endpoint, which may be before this agent does: the port stays idled
	// (its held packets keep waiting) until the agent sees one.
	h.calls = nil
	p.svcs.Record(nil, svc)
	if err := p.sync(ctx, false); err != nil {
		t.Fatal(err)
	}
	woken := svc.DeepCopy()
	woken.Annotations = nil
	p.svcs.Record(svc, woken)
	if err := p.sync(ctx, false); err != nil {
		t.Fatal(err)
	}
	// (Idled again with the new Service: the handler takes it as an
	// update.)
	if want := []string{"idled " + webPort.String(), "idled " + webPort.String()}; !slices.Equal(h.calls, want) {
		t.Fatalf("annotations removed without endpoints: handler calls %q, want %q", h.calls, want)
	}
	p.eps.Record(webSlice(), slice)
	if err := p.sync(ctx, false); err != nil {
		t.Fatal(err)
	}
	if want := []string{"idled " + webPort.String(), "idled " + webPort.String(), "unidled " + webPort.String()}; !slices.Equal(h.calls, want) {
		t.Fatalf("endpoints after the annotations went: handler calls %q, want %q", h.calls, want)
	}
}

func TestServiceProxyPendingGauges(t *testing.T) {
	p := testServiceProxy(t)
	p.svcs.Record(nil, webService("10.96.0.10"))
	p.eps.Record(nil, webSlice("10.244.2.5"))
	for name, want := range map[string]float64{
		"kubeproxy_sync_proxy_rules_service_changes_pending":  1,
		"kubeproxy_sync_proxy_rules_endpoint_changes_pending": 1,
	} {
		if got := gatherValue(t, p, name); got != want {
			t.Errorf("%s = %v before the sync, want %v", name, got, want)
		}
	}
	if err := p.sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"kubeproxy_sync_proxy_rules_service_changes_pending", "kubeproxy_sync_proxy_rules_endpoint_changes_pending"} {
		if got := gatherValue(t, p, name); got != 0 {
			t.Errorf("%s = %v after the sync, want 0", name, got)
		}
	}
	if c := histCount(t, p.metrics.fullSync); c != 1 {
		t.Errorf("the first sync is a full one: full-sync histogram has %d observations, want 1", c)
	}
	p.eps.Record(webSlice("10.244.2.5"), webSlice("10.244.2.6"))
	if err := p.sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if c := histCount(t, p.metrics.partialSync); c != 1 {
		t.Errorf("partial-sync histogram has %d observations, want 1", c)
	}
}

// gatherValue reads one gauge from the agent's registry.
func gatherValue(t *testing.T, p *Proxy, name string) float64 {
	t.Helper()
	mfs, err := testHost(p).Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.Metric) == 1 {
			return mf.Metric[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

func TestStripManagedFields(t *testing.T) {
	svc := webService("10.96.0.10")
	svc.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}
	svc.Annotations = map[string]string{"keep": "me"}
	out, err := stripManagedFields(svc)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*v1.Service)
	if len(got.ManagedFields) != 0 || got.Annotations["keep"] != "me" || got.Spec.ClusterIP != "10.96.0.10" {
		t.Errorf("transformed service: managed fields %v, annotations %v, cluster IP %q", got.ManagedFields, got.Annotations, got.Spec.ClusterIP)
	}
	if _, err := stripManagedFields("not an object"); err != nil {
		t.Errorf("a non-object: %v", err)
	}
}
