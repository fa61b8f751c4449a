package servicefeature

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"nodeflow/datapath/plan"
	"nodeflow/datapath/reconcile"
	"nodeflow/datapath/serviceflows"
	"nodeflow/internal/testutil/featuretest"
	"nodeflow/lib/openflow"
	"nodeflow/model/service"
)

// testServiceProxy returns a service proxy on a test host, without
// Kubernetes or switches: syncs only fill the stores.
func testServiceProxy(t testing.TB) *Proxy {
	t.Helper()
	return testServiceProxyOn(t, featuretest.New(featuretest.DefaultNode()), Options{})
}

// allowAll is an address policy that allows every external or ingress IP
// that no cluster fact refuses.
var allowAll = service.CIDRPolicy{Allowed: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}}

// testServiceProxyOn initialises a service proxy with opts on h. Options
// without an address policy get allowAll for both kinds: the tests of the
// policy itself set one.
func testServiceProxyOn(t testing.TB, h *featuretest.Host, opts Options) *Proxy {
	t.Helper()
	if opts.ExternalIPs.Allowed == nil && opts.IngressIPs.Allowed == nil {
		opts.ExternalIPs, opts.IngressIPs = allowAll, allowAll
	}
	p := New(opts)
	h.Restrict(p.Owns())
	if err := p.Init(h); err != nil {
		t.Fatal(err)
	}
	// The slices' trigger times (a second ago) count as after the start.
	p.started = time.Now().Add(-time.Hour)
	return p
}

// testHost returns the test host of p.
func testHost(p *Proxy) *featuretest.Host { return p.h.(*featuretest.Host) }

// store returns p's desired state of bridge b.
func store(p *Proxy, b plan.Bridge) *reconcile.Store { return testHost(p).Stores[b] }

func webService(clusterIP string) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: v1.ServiceSpec{
			Type: v1.ServiceTypeNodePort, ClusterIP: clusterIP, ClusterIPs: []string{clusterIP},
			Ports: []v1.ServicePort{{Name: "http", Port: 80, NodePort: 30080, Protocol: v1.ProtocolTCP}},
		},
	}
}

func webSlice(ips ...string) *discovery.EndpointSlice {
	s := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-abc", Labels: map[string]string{discovery.LabelServiceName: "web"},
			Annotations: map[string]string{v1.EndpointsLastChangeTriggerTime: time.Now().Add(-time.Second).Format(time.RFC3339Nano)}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8080)), Protocol: ptr.To(v1.ProtocolTCP)}},
	}
	for _, ip := range ips {
		s.Endpoints = append(s.Endpoints, discovery.Endpoint{Addresses: []string{ip}, NodeName: ptr.To("node2"),
			Conditions: discovery.EndpointConditions{Ready: ptr.To(true)}})
	}
	return s
}

var webPort = service.ServicePortName{Port: "http", Protocol: v1.ProtocolTCP}

func init() { webPort.Namespace, webPort.Name = "default", "web" }

// hasController reports whether a flow's actions send to the controller
// (the reject packet-in).
func hasController(f openflow.Flow) bool {
	for _, ins := range f.Instructions {
		if aa, ok := ins.(openflow.ApplyActions); ok {
			for _, act := range aa.Actions {
				if _, ok := act.(openflow.Controller2); ok {
					return true
				}
			}
		}
	}
	return false
}

func TestServiceProxySync(t *testing.T) {
	p := testServiceProxy(t)
	ctx := context.Background()
	svc := webService("10.96.0.10")
	p.svcs.Record(nil, svc)
	slice := webSlice("10.244.2.5", "10.244.2.6")
	p.eps.Record(nil, slice)
	if err := p.sync(ctx, false); err != nil {
		t.Fatal(err)
	}

	pod, ok := store(p, plan.Pod).Get(serviceflows.Owner(webPort))
	if !ok || len(pod.Groups) != 1 || len(pod.Groups[0].Buckets) != 2 {
		t.Fatalf("br0 state of %s: %d groups (%+v), want one with two buckets", webPort, len(pod.Groups), pod.Groups)
	}
	if g := pod.Groups[0]; g.SelectionMethod != "hash" {
		t.Errorf("group selection method %q, want hash", g.SelectionMethod)
	}
	gw, ok := store(p, plan.Gateway).Get(serviceflows.GatewayOwner(webPort))
	if !ok || len(gw.Flows) != 2 {
		t.Errorf("breth0 state: %d flows, want the NodePort's two", len(gw.Flows))
	}
	if m, ok := store(p, plan.Pod).Get(serviceflows.RejectMeterOwner); !ok || len(m.Meters) != 1 {
		t.Errorf("reject meter not wanted: %+v", m)
	}
	if n := histCount(t, p.metrics.programming); n != 1 {
		t.Errorf("network programming latency observed %d times, want once (one slice with a trigger time)", n)
	}
	if n := histCount(t, p.metrics.syncDuration); n != 1 {
		t.Errorf("sync duration observed %d times, want 1", n)
	}
	if n := value(t, p.metrics.endpointChanges) + value(t, p.metrics.serviceChanges); n != 0 {
		t.Errorf("change counters %v: they count informer events, and there were none", n)
	}
	if c := value(t, p.metrics.services); c != 1 {
		t.Errorf("nodeflow_service_ports %v, want 1", c)
	}
	gid := pod.Groups[0].ID
	if n, ok := p.portOf(gid); !ok || n != webPort {
		t.Errorf("group %d maps to %v %v, want %s", gid, n, ok, webPort)
	}

	// No endpoints left: the group goes, a reject takes its place.
	p.eps.Record(slice, webSlice())
	if err := p.sync(ctx, false); err != nil {
		t.Fatal(err)
	}
	pod, _ = store(p, plan.Pod).Get(serviceflows.Owner(webPort))
	rejects := 0
	for _, f := range pod.Flows {
		if hasController(f) {
			rejects++
		}
	}
	if len(pod.Groups) != 0 || rejects != 2 {
		t.Errorf("without endpoints: %d groups and %d reject flows, want 0 and 2 (ClusterIP, NodePort)", len(pod.Groups), rejects)
	}

	// The Service goes: both owners go, and its id is free again.
	p.svcs.Record(svc, nil)
	if err := p.sync(ctx, false); err != nil {
		t.Fatal(err)
	}
	if owners := append(store(p, plan.Pod).Owners("service/default/"), store(p, plan.Gateway).Owners("service-gateway/")...); len(owners) != 0 {
		t.Errorf("owners left after the service was deleted: %v", owners)
	}
	if p.ids.Len() != 0 {
		t.Errorf("%d group ids still held", p.ids.Len())
	}
	if _, ok := p.portOf(gid); ok {
		t.Errorf("group %d still maps to a service port", gid)
	}
	if len(p.servicePorts()) != 0 {
		t.Errorf("service ports still built: %v", p.servicePorts())
	}
}

func TestServiceProxyBadInput(t *testing.T) {
	p := testServiceProxy(t)
	bad := webService("10.96.0.300")
	bad.Name = "bad"
	dup := webService("10.96.0.10")
	dup.Name = "dup"
	dup.CreationTimestamp = metav1.NewTime(time.Now())
	good := webService("10.96.0.10")
	good.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Hour))
	for _, s := range []*v1.Service{bad, dup, good} {
		p.svcs.Record(nil, s)
	}
	p.eps.Record(nil, webSlice("10.244.2.5"))
	if err := p.sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if n := value(t, p.metrics.inputErrors.WithLabelValues("Service")); n != 2 {
		t.Errorf("service input errors %v, want 2 (bad IP, duplicate ClusterIP)", n)
	}
	got := p.servicePorts()
	if len(got) != 1 || got[0] != webPort {
		t.Errorf("service ports built: %v, want only %s", got, webPort)
	}
	// The same errors again are not reported twice.
	p.svcs.Record(nil, bad)
	if n := value(t, p.metrics.inputErrors.WithLabelValues("Service")); n != 2 {
		t.Errorf("service input errors %v after a repeat, want still 2", n)
	}
	fams, err := testHost(p).Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"kubeproxy_sync_proxy_rules_duration_seconds": true, "kubeproxy_network_programming_duration_seconds": true,
		"kubeproxy_sync_proxy_rules_endpoint_changes_total": true, "kubeproxy_sync_proxy_rules_service_changes_total": true}
	for _, f := range fams {
		delete(want, f.GetName())
	}
	if len(want) != 0 {
		t.Errorf("metrics missing from the registry: %v", want)
	}
}

// histCount returns how many observations h holds.
func histCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// value returns a counter's or gauge's value.
func value(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Counter != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

// TestServiceProxyConflict: two Services claim the same external IP and
// node port (the API server checks neither against the other). The first
// in name order keeps them; the other gets the rest of its flows, its
// ClusterIP works, the lost address is reported on it, and it takes the
// address over once the first lets go.
func TestServiceProxyConflict(t *testing.T) {
	p := testServiceProxy(t)
	a := webService("10.96.0.10")
	a.Name = "a"
	a.Spec.ExternalIPs = []string{"192.0.2.7"}
	b := webService("10.96.0.11")
	b.Name = "b"
	b.Spec.ExternalIPs = []string{"192.0.2.7"}
	p.svcs.Record(nil, a)
	p.svcs.Record(nil, b)
	if err := p.sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	owner := func(name string) string {
		var sb strings.Builder
		if err := store(p, plan.Pod).Render(&sb, "service/default/"+name+":", 0); err != nil {
			t.Fatal(err)
		}
		return sb.String()
	}
	got := p.servicePorts()
	if len(got) != 2 {
		t.Fatalf("service ports built: %v, want a's and b's", got)
	}
	if a, b := owner("a"), owner("b"); !strings.Contains(a, "nw_dst=192.0.2.7") || strings.Contains(b, "nw_dst=192.0.2.7") || !strings.Contains(b, "nw_dst=10.96.0.11") {
		t.Errorf("a keeps 192.0.2.7, b has its ClusterIP without it; a:\n%s\nb:\n%s", a, b)
	}
	if n := value(t, p.metrics.buildErrors); n != 0 {
		t.Errorf("build errors %v, want 0", n)
	}
	if n := value(t, p.metrics.inputErrors.WithLabelValues("Service")); n < 1 {
		t.Errorf("service input errors %v, want b's lost external IP reported", n)
	}
	p.repMu.Lock()
	msg := p.reported["Service/default/b/spec.externalIPs"]
	p.repMu.Unlock()
	if !strings.Contains(msg, "192.0.2.7 port 80/TCP is also claimed by the service port default/a:") {
		t.Errorf("b's report: %q", msg)
	}
	// Once a goes, the next sync gives b the address.
	p.svcs.Record(a, nil)
	if err := p.sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if got := p.servicePorts(); len(got) != 1 || got[0].Name != "b" {
		t.Errorf("after a left: %v, want only b's", got)
	}
	if b := owner("b"); !strings.Contains(b, "nw_dst=192.0.2.7") {
		t.Errorf("b did not take 192.0.2.7 over:\n%s", b)
	}
}

// TestNodeModelSecondary checks that the service proxy's node model holds
// the node's secondary addresses, and that a change of them is a change of
// the node (which rebuilds every service).
func TestNodeModelSecondary(t *testing.T) {
	p := testServiceProxy(t)
	before := p.nodeModel()
	if len(before.Secondary) != 0 {
		t.Fatalf("secondary addresses %v before any were discovered", before.Secondary)
	}
	a := netip.MustParseAddr
	n := featuretest.DefaultNode()
	n.Secondary = []netip.Addr{a("172.20.0.2"), a("fd00:172:20::2")}
	testHost(p).SetNode(n)
	after := p.nodeModel()
	if want := n.Secondary; !slices.Equal(after.Secondary, want) {
		t.Errorf("node model secondary addresses %v, want %v", after.Secondary, want)
	}
	if !slices.Equal(after.IPs, before.IPs) {
		t.Errorf("node IPs changed from %v to %v", before.IPs, after.IPs)
	}
	if sameNode(before, after) {
		t.Error("a new secondary address does not change the node model")
	}
	if !sameNode(after, p.nodeModel()) {
		t.Error("the same addresses twice compare as different nodes")
	}
}
