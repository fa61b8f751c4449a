package servicefeature

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeflow/datapath/plan"
	"nodeflow/internal/testutil/featuretest"
	"nodeflow/model/service"
)

// ownershipProxy returns a proxy whose policy allows external IPs in the
// fabric's 172.30.0.0/24 and in 100.64.0.0/10, and ingress IPs in
// 198.51.100.0/24, with two Nodes known.
func ownershipProxy(t *testing.T) *Proxy {
	t.Helper()
	pfx := netip.MustParsePrefix
	p := testServiceProxyOn(t, featuretest.New(featuretest.DefaultNode()), Options{
		ExternalIPs: service.CIDRPolicy{Allowed: []netip.Prefix{pfx("172.30.0.0/24"), pfx("100.64.0.0/10")}},
		IngressIPs:  service.CIDRPolicy{Allowed: []netip.Prefix{pfx("198.51.100.0/24")}},
	})
	p.nodes.set(testNodeObject("node1", "172.30.0.11", "10.244.1.0/24"), false)
	p.nodes.set(testNodeObject("node2", "172.30.0.12", "10.244.0.0/24"), false)
	return p
}

func testNodeObject(name, ip, podCIDR string) *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}},
		Status:     v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: ip}, {Type: v1.NodeHostName, Address: name}}},
	}
}

// reportedFor returns what was reported on a Service's field.
func reportedFor(p *Proxy, ns, name, field string) []string {
	p.repMu.Lock()
	defer p.repMu.Unlock()
	var out []string
	prefix := "Service/" + ns + "/" + name + "/" + field
	for k, msg := range p.reported {
		if strings.HasPrefix(k, prefix) {
			out = append(out, msg)
		}
	}
	return out
}

// rendered returns the flows of the owners whose name starts with prefix
// on bridge b, as text.
func rendered(t *testing.T, p *Proxy, b plan.Bridge, prefix string) string {
	t.Helper()
	var sb strings.Builder
	if err := store(p, b).Render(&sb, prefix, 0); err != nil {
		t.Fatal(err)
	}
	return sb.String()
}

// TestServiceProxyAddressOwnership: a tenant's Service that names another
// node's address (its kubelet), another Service's ClusterIP, a pod's
// address and an allowed address as external IPs gets only the allowed
// one on br0, breth0 and in the host's DNAT; every other is reported on
// the tenant's Service and counted.
func TestServiceProxyAddressOwnership(t *testing.T) {
	p := ownershipProxy(t)
	victim := webService("10.96.0.10")
	victim.Namespace = "other"
	victim.Spec.Type, victim.Spec.Ports[0].NodePort = v1.ServiceTypeClusterIP, 0
	grab := webService("10.96.0.20")
	grab.Namespace, grab.Name = "tenant", "grab"
	grab.Spec.ExternalIPs = []string{"172.30.0.12", "10.96.0.10", "10.244.0.9", "172.30.0.200", "10.244.0.255"}
	grab.Spec.Ports[0].Port = 10250
	p.svcs.Record(nil, victim)
	p.svcs.Record(nil, grab)
	if err := p.sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	br0 := rendered(t, p, plan.Pod, "service/tenant/grab:")
	breth0 := rendered(t, p, plan.Gateway, "service-gateway/tenant/grab:")
	for _, bad := range []string{"172.30.0.12", "=10.96.0.10,", "10.244.0.9", "10.244.0.255"} {
		if strings.Contains(br0, bad) || strings.Contains(breth0, bad) {
			t.Errorf("%s programmed for the tenant:\n%s\n%s", bad, br0, breth0)
		}
	}
	if !strings.Contains(br0, "ct_nw_dst=172.30.0.200") || !strings.Contains(breth0, "nw_dst=172.30.0.200") {
		t.Errorf("the allowed external IP is missing:\n%s\n%s", br0, breth0)
	}
	if !strings.Contains(rendered(t, p, plan.Pod, "service/other/web:"), "ct_nw_dst=10.96.0.10") {
		t.Error("the victim lost its ClusterIP")
	}
	for _, r := range p.hostNATRules().V4 {
		if r.Daddr != netip.MustParseAddr("172.30.0.200") && r.Daddr != netip.MustParseAddr("172.30.0.11") {
			t.Errorf("host DNAT for a refused address: %s", r)
		}
	}
	got := reportedFor(p, "tenant", "grab", "spec.externalIPs")
	if len(got) != 4 {
		t.Fatalf("reports on the tenant's Service: %q, want the four refusals", got)
	}
	for _, want := range []string{"172.30.0.12 is not programmed: it is an address of node node2",
		"10.96.0.10 is not programmed: it is in the service CIDR 10.96.0.0/16",
		"10.244.0.9 is not programmed: it is in the pod network 10.244.0.0/16",
		"10.244.0.255 is not programmed: it is in the pod network"} {
		if !strings.Contains(strings.Join(got, "\n"), want) {
			t.Errorf("no report saying %q in %q", want, got)
		}
	}
	if r := reportedFor(p, "other", "web", ""); len(r) != 0 {
		t.Errorf("the victim got reports: %q", r)
	}
	for reason, want := range map[string]float64{service.RefusedNodeAddress: 1, service.RefusedServiceCIDR: 1, service.RefusedPodCIDR: 2} {
		if n := value(t, p.metrics.refusedAddresses.WithLabelValues("spec.externalIPs", reason)); n != want {
			t.Errorf("refused addresses for %s: %v, want %v", reason, n, want)
		}
	}

	// The tenant lists only the allowed address: the count goes back to
	// zero, and a refusal that comes back is reported again.
	fixed := grab.DeepCopy()
	fixed.Spec.ExternalIPs = []string{"172.30.0.200"}
	p.svcs.Record(grab, fixed)
	if err := p.sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if n := value(t, p.metrics.refusedAddresses.WithLabelValues("spec.externalIPs", service.RefusedNodeAddress)); n != 0 {
		t.Errorf("refused node addresses %v after the fix, want 0", n)
	}
	if r := reportedFor(p, "tenant", "grab", "spec.externalIPs"); len(r) != 0 {
		t.Errorf("stale reports kept: %q", r)
	}

	// A Node that takes the allowed address refuses it from then on.
	p.nodes.set(testNodeObject("node3", "172.30.0.200", "10.244.3.0/24"), false)
	if err := p.sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if br0 := rendered(t, p, plan.Pod, "service/tenant/grab:"); strings.Contains(br0, "172.30.0.200") {
		t.Errorf("a Node's new address still programmed for the tenant:\n%s", br0)
	}
	if r := reportedFor(p, "tenant", "grab", "spec.externalIPs"); len(r) != 1 || !strings.Contains(r[0], "node node3") {
		t.Errorf("reports %q, want the new node's address", r)
	}
}

// TestServiceProxyClusterIPWins: a tenant claims an address outside the
// configured service CIDRs (a ServiceCIDR the agent's configuration does
// not list) as an external IP before the API server gives it to another
// Service as its ClusterIP. In the sync that sees the ClusterIP, the
// ClusterIP wins, the tenant loses the address and is told, and the
// victim is not.
func TestServiceProxyClusterIPWins(t *testing.T) {
	p := ownershipProxy(t)
	grab := webService("10.96.0.20")
	grab.Namespace, grab.Name = "tenant", "grab"
	grab.Spec.ExternalIPs = []string{"100.64.0.10"}
	p.svcs.Record(nil, grab)
	if err := p.sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if br0 := rendered(t, p, plan.Pod, "service/tenant/grab:"); !strings.Contains(br0, "ct_nw_dst=100.64.0.10") {
		t.Fatalf("the unallocated address is not the tenant's yet:\n%s", br0)
	}
	// "a-victim" sorts before "tenant": without the ordering, its flows
	// would meet the tenant's old ones.
	victim := webService("100.64.0.10")
	victim.Namespace, victim.Name = "a-victim", "web"
	victim.Spec.Type, victim.Spec.Ports[0].NodePort = v1.ServiceTypeClusterIP, 0
	p.svcs.Record(nil, victim)
	if err := p.sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if v := rendered(t, p, plan.Pod, "service/a-victim/web:"); !strings.Contains(v, "ct_nw_dst=100.64.0.10") {
		t.Errorf("the victim does not have its ClusterIP:\n%s", v)
	}
	if br0 := rendered(t, p, plan.Pod, "service/tenant/grab:"); strings.Contains(br0, "100.64.0.10") {
		t.Errorf("the tenant keeps the ClusterIP:\n%s", br0)
	}
	if r := reportedFor(p, "a-victim", "web", ""); len(r) != 0 {
		t.Errorf("the victim was reported: %q", r)
	}
	if r := reportedFor(p, "tenant", "grab", "spec.externalIPs"); len(r) != 1 || !strings.Contains(r[0], "ClusterIP of service a-victim/web") {
		t.Errorf("tenant's reports %q, want the lost address", r)
	}
	if n := value(t, p.metrics.buildErrors); n != 0 {
		t.Errorf("build errors %v", n)
	}
}

// TestServiceProxyDefaultPolicy: with no policy (the agent's default),
// no external or ingress IP is programmed.
func TestServiceProxyDefaultPolicy(t *testing.T) {
	p := New(Options{})
	h := featuretest.New(featuretest.DefaultNode())
	h.Restrict(p.Owns())
	if err := p.Init(h); err != nil {
		t.Fatal(err)
	}
	svc := webService("10.96.0.10")
	svc.Spec.ExternalIPs = []string{"203.0.113.10"}
	svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "198.51.100.10"}}
	p.svcs.Record(nil, svc)
	if err := p.sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	all := rendered(t, p, plan.Pod, "service/default/web:") + rendered(t, p, plan.Gateway, "service-gateway/default/web:")
	if strings.Contains(all, "203.0.113.10") || strings.Contains(all, "198.51.100.10") {
		t.Errorf("addresses programmed without a policy:\n%s", all)
	}
	if r := reportedFor(p, "default", "web", "status.loadBalancer.ingress"); len(r) != 1 || !strings.Contains(r[0], "allows no range") {
		t.Errorf("reports %q", r)
	}
}
