package egressfirewallfeature

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"nodeflow/agent/feature"
	"nodeflow/datapath/egressfirewallflows"
	"nodeflow/datapath/plan"
	"nodeflow/internal/testutil/featuretest"
	"nodeflow/lib/openflow"
)

// waitSources waits until the trusted sources satisfy cond.
func (e *env) waitSources(what string, cond func(egressfirewallflows.DNSSources) bool) egressfirewallflows.DNSSources {
	e.t.Helper()
	var got egressfirewallflows.DNSSources
	if !featuretest.WaitFor(5*time.Second, func() bool { got = e.f.trust.sources(); return cond(got) }) {
		e.t.Fatalf("trusted sources: %s: now %+v", what, got)
	}
	return got
}

// TestDNSTrustedSources: the trusted set is the cluster DNS Service's own
// ClusterIPs and the endpoints of the slices the EndpointSlice controller
// made for it, in its namespace, with that namespace's id; look-alikes
// (a tenant's Service and slice named kube-dns, a slice of another
// manager or owner) do not count; and the set follows the API: endpoints
// that move, the Service going and coming back, the namespace's id.
func TestDNSTrustedSources(t *testing.T) {
	dnsSvc := kubeDNS("kube-system", "kube-dns", "uid-dns", "10.96.0.10", "fd00:10:96::a")
	tenantSvc := kubeDNS("a", "kube-dns", "uid-tenant", "10.96.7.7")
	stale := endpointSlice(dnsSvc, "kube-dns-stale", endpointSliceController, true, "10.244.2.66")
	stale.OwnerReferences[0].UID = "uid-of-a-deleted-service"
	e := newEnv(t,
		testPod("a", "client", "10.244.1.5", "fd00:10:244:1::5"),
		dnsSvc,
		endpointSlice(dnsSvc, "kube-dns-v4", endpointSliceController, true, "10.244.2.3", "10.244.1.3"),
		endpointSlice(dnsSvc, "kube-dns-v6", endpointSliceController, true, "fd00:10:244:2::3"),
		endpointSlice(dnsSvc, "kube-dns-manual", "someone-else", true, "10.244.2.77"),
		endpointSlice(dnsSvc, "kube-dns-unowned", endpointSliceController, false, "10.244.2.78"),
		stale,
		// A tenant's own "kube-dns", with a slice the controller made.
		tenantSvc, endpointSlice(tenantSvc, "kube-dns-tenant", endpointSliceController, true, "10.244.1.99"),
		ef("a", "default", "Allow dns:*.example.com", "Deny 0.0.0.0/0"),
	)
	want := egressfirewallflows.DNSService{Name: "kube-system/kube-dns", NamespaceID: kubeSystemID,
		ClusterIPs: addrList("10.96.0.10", "fd00:10:96::a"), Endpoints: addrList("10.244.1.3", "10.244.2.3", "fd00:10:244:2::3")}
	got := e.waitSources("the Service", func(s egressfirewallflows.DNSSources) bool { return len(s.Services) == 1 })
	if !(egressfirewallflows.DNSSources{Services: []egressfirewallflows.DNSService{want}, Resolvers: got.Resolvers}).Equal(got) {
		t.Fatalf("sources %+v, want %+v", got.Services, want)
	}
	// The agent's resolver is on loopback (the test's DNS server): only
	// the operator's resolver is trusted.
	if !slices.Equal(got.Resolvers, pfx("fd00:172:30::100/128")) {
		t.Errorf("resolvers %v", got.Resolvers)
	}
	flows := e.waitFlows(egressfirewallflows.DNSOwner, "flows for the sources", func(f []string) bool { return has(f, "nw_src=10.244.2.3") })
	for _, bad := range []string{"10.244.2.66", "10.244.2.77", "10.244.2.78", "10.244.1.99", "10.96.7.7"} {
		if has(flows, bad) {
			t.Errorf("%s is trusted:\n%s", bad, strings.Join(flows, "\n"))
		}
	}

	// The agent checks each reply it is sent against the same set: the
	// endpoint from its namespace is learned; the same address from a
	// tenant's pod (it got the address after the endpoint died) and the
	// ClusterIP answered by a tenant's pod are not.
	untrusted := testutil.ToFloat64(e.f.m.dnsReplies.WithLabelValues(ReplyUntrusted))
	learned := testutil.ToFloat64(e.f.m.dnsReplies.WithLabelValues(ReplyLearned))
	for _, tc := range []struct {
		name  string
		src   string
		trust bool
	}{
		{"the endpoint", "10.244.2.3", true},
		{"the endpoint's address, a tenant's pod", "10.244.2.3", false},
		{"the ClusterIP, a tenant's pod", "10.96.0.10", false},
	} {
		frame := dnsReply(t, tc.src, "10.244.1.5", "x"+strings.ReplaceAll(tc.name, " ", "")+".example.com", 300, "198.51.100.40")
		var nsID uint32 = kubeSystemID
		ct := openflow.CtNew | openflow.CtTrk
		if !tc.trust {
			nsID = 0x11
		}
		if tc.src == "10.96.0.10" {
			ct = openflow.CtEst | openflow.CtRpl | openflow.CtTrk | openflow.CtSNAT
		}
		e.f.HandlePacketIn(packetInFrom(frame, 7, plan.FromPod, nsID, ct))
	}
	if !featuretest.WaitFor(5*time.Second, func() bool {
		return testutil.ToFloat64(e.f.m.dnsReplies.WithLabelValues(ReplyLearned)) == learned+1 &&
			testutil.ToFloat64(e.f.m.dnsReplies.WithLabelValues(ReplyUntrusted)) == untrusted+2
	}) {
		t.Errorf("learned %v (want %v), untrusted %v (want %v)", testutil.ToFloat64(e.f.m.dnsReplies.WithLabelValues(ReplyLearned)), learned+1,
			testutil.ToFloat64(e.f.m.dnsReplies.WithLabelValues(ReplyUntrusted)), untrusted+2)
	}

	ctx := context.Background()
	slicesAPI := e.h.Client.DiscoveryV1().EndpointSlices("kube-system")
	// An endpoint moves (its pod restarted elsewhere).
	moved := endpointSlice(dnsSvc, "kube-dns-v4", endpointSliceController, true, "10.244.2.9", "10.244.1.3")
	if _, err := slicesAPI.Update(ctx, moved, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFlows(egressfirewallflows.DNSOwner, "the moved endpoint", func(f []string) bool { return has(f, "nw_src=10.244.2.9") && !has(f, "nw_src=10.244.2.3") })
	// A slice the controller deletes takes its endpoints with it.
	if err := slicesAPI.Delete(ctx, "kube-dns-v6", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFlows(egressfirewallflows.DNSOwner, "the IPv6 endpoint gone", func(f []string) bool { return !has(f, "ipv6_src=fd00:10:244:2::3") })

	// The Service goes: nothing of it is trusted, though its slices
	// linger; it comes back with a new UID: the old slices do not count.
	svcs := e.h.Client.CoreV1().Services("kube-system")
	if err := svcs.Delete(ctx, "kube-dns", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitSources("no Service", func(s egressfirewallflows.DNSSources) bool { return len(s.Services) == 0 })
	e.waitFlows(egressfirewallflows.DNSOwner, "no Service's sources", func(f []string) bool { return !has(f, "reg1=") })
	again := kubeDNS("kube-system", "kube-dns", "uid-dns-2", "10.96.0.10")
	if _, err := svcs.Create(ctx, again, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got = e.waitSources("the new Service", func(s egressfirewallflows.DNSSources) bool { return len(s.Services) == 1 })
	if len(got.Services[0].Endpoints) != 0 || !slices.Equal(got.Services[0].ClusterIPs, addrList("10.96.0.10")) {
		t.Errorf("the new Service took the old one's slices: %+v", got.Services[0])
	}
	if _, err := slicesAPI.Create(ctx, endpointSlice(again, "kube-dns-new", endpointSliceController, true, "10.244.2.10"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFlows(egressfirewallflows.DNSOwner, "the new Service's endpoint", func(f []string) bool { return has(f, "nw_src=10.244.2.10") })

	// The namespace's id changes: the flows follow; without one, its
	// Service is not trusted.
	e.h.IDs().Set("kube-system", 0x43)
	e.waitFlows(egressfirewallflows.DNSOwner, "the new id", func(f []string) bool { return has(f, "reg1=0x43/0xffffff") && !has(f, "reg1=0x42/0xffffff") })
	e.h.IDs().Set("kube-system", 0)
	e.waitFlows(egressfirewallflows.DNSOwner, "no id", func(f []string) bool { return !has(f, "reg1=") && has(f, "ipv6_src=fd00:172:30::100") })
	if v := gaugeValue(t, e, "nodeflow_egress_firewall_dns_trusted_sources", "cluster_ip"); v != 0 {
		t.Errorf("trusted ClusterIPs gauge %v, want 0", v)
	}
	if v := gaugeValue(t, e, "nodeflow_egress_firewall_dns_trusted_sources", "resolver"); v != 1 {
		t.Errorf("trusted resolvers gauge %v, want 1", v)
	}
}

// TestDNSTrustedServicesConfigured: the Services trusted are the ones
// configured, in any namespace; none when the list is empty.
func TestDNSTrustedServicesConfigured(t *testing.T) {
	dnsSvc := kubeDNS("kube-system", "kube-dns", "uid-dns", "10.96.0.10")
	other := kubeDNS("e", "dns-default", "uid-other", "10.96.0.53")
	e := newEnvOpts(t, nil, nil, func(o *Options) {
		o.ClusterDNSServices = []types.NamespacedName{{Namespace: "e", Name: "dns-default"}}
	}, dnsSvc, endpointSlice(dnsSvc, "kube-dns-1", endpointSliceController, true, "10.244.2.3"),
		other, endpointSlice(other, "dns-default-1", endpointSliceController, true, "10.244.2.53"))
	got := e.waitSources("the configured Service", func(s egressfirewallflows.DNSSources) bool { return len(s.Services) == 1 })
	if s := got.Services[0]; s.Name != "e/dns-default" || s.NamespaceID != 0x15 || !slices.Equal(s.Endpoints, addrList("10.244.2.53")) {
		t.Errorf("sources %+v", got.Services)
	}
	none := newEnvOpts(t, nil, nil, func(o *Options) { o.ClusterDNSServices = []types.NamespacedName{} },
		dnsSvc, endpointSlice(dnsSvc, "kube-dns-1", endpointSliceController, true, "10.244.2.3"))
	// The sources are final once Sync has returned.
	if s := none.f.trust.sources(); len(s.Services) != 0 {
		t.Errorf("no Service configured, yet trusted: %+v", s.Services)
	}
}

func TestUntrustedDNSCounters(t *testing.T) {
	e := newEnv(t)
	stat := func(owner string, prio plan.Priority, dst string, n uint64) openflow.FlowStats {
		return openflow.FlowStats{Flow: openflow.Flow{Table: uint8(plan.PodEgressFirewall), Priority: uint16(prio),
			Cookie: uint64(plan.MakeCookie(plan.FeatureEgressFirewall, owner, 1)),
			Match:  openflow.NewMatch(openflow.EthType(0x0800), openflow.IPv4DstPrefix(netip.MustParsePrefix(dst)))}, PacketCount: n}
	}
	before := testutil.ToFloat64(e.f.m.dnsReplies.WithLabelValues(ReplyUntrusted))
	last := &feature.Growth[denyKey]{}
	e.f.addUntrustedDNS([]openflow.FlowStats{
		stat(egressfirewallflows.DNSOwner, plan.PriorityEgressFirewallDNSUntrusted, "10.244.1.5/32", 4),
		stat(egressfirewallflows.DNSOwner, plan.PriorityEgressFirewallDNSUntrusted, "10.244.1.6/32", 1),
		stat(egressfirewallflows.DNSOwner, plan.PriorityEgressFirewallDNS, "10.244.1.5/32", 50), // clause 1: not counted
		stat(egressfirewallflows.Owner("a"), plan.PriorityEgressFirewallDNSUntrusted, "10.244.1.5/32", 9),
	}, last)
	// The next read: one grew by 3, the other's flow was replaced.
	e.f.addUntrustedDNS([]openflow.FlowStats{
		stat(egressfirewallflows.DNSOwner, plan.PriorityEgressFirewallDNSUntrusted, "10.244.1.5/32", 7),
		stat(egressfirewallflows.DNSOwner, plan.PriorityEgressFirewallDNSUntrusted, "10.244.1.6/32", 0),
	}, last)
	if got := testutil.ToFloat64(e.f.m.dnsReplies.WithLabelValues(ReplyUntrusted)) - before; got != 8 {
		t.Errorf("untrusted replies %v, want 8", got)
	}
}

func TestTrustedDNSConfig(t *testing.T) {
	got, err := ParseTrustedDNS([]string{"169.254.20.10", " fd00:172:30::100 ", "", "192.0.2.7/24"})
	if err != nil || !slices.Equal(got, pfx("169.254.20.10/32", "fd00:172:30::100/128", "192.0.2.0/24")) {
		t.Errorf("ParseTrustedDNS: %v, %v", got, err)
	}
	for _, bad := range []string{"169.254.20", "fe80::1%eth0", "::ffff:1.2.3.4", "10.0.0.0/33"} {
		if _, err := ParseTrustedDNS([]string{bad}); err == nil {
			t.Errorf("ParseTrustedDNS(%q): no error", bad)
		}
	}
	cluster, service := pfx("10.244.0.0/16", "fd00:10:244::/56"), pfx("10.96.0.0/16")
	if err := CheckTrustedDNS(pfx("169.254.20.10/32", "172.30.0.100/32"), cluster, service); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"10.96.0.10/32", "10.0.0.0/8", "0.0.0.0/0", "fd00:10:244:1::/64"} {
		if err := CheckTrustedDNS(pfx(bad), cluster, service); err == nil || !strings.Contains(err.Error(), "--cluster-dns-service") {
			t.Errorf("CheckTrustedDNS(%s): %v", bad, err)
		}
	}
	svcs, err := ParseClusterDNSServices([]string{"kube-system/kube-dns", "openshift-dns/dns-default", "kube-system/kube-dns", ""})
	if err != nil || !slices.Equal(svcs, []types.NamespacedName{{Namespace: "kube-system", Name: "kube-dns"}, {Namespace: "openshift-dns", Name: "dns-default"}}) {
		t.Errorf("ParseClusterDNSServices: %v, %v", svcs, err)
	}
	if svcs, err := ParseClusterDNSServices([]string{""}); err != nil || svcs == nil || len(svcs) != 0 {
		t.Errorf("an empty list: %v, %v (want an empty, non-nil list)", svcs, err)
	}
	for _, bad := range []string{"kube-dns", "kube-system/", "/kube-dns", "Kube-System/kube-dns", "kube-system/1dns", "a/b/c"} {
		if _, err := ParseClusterDNSServices([]string{bad}); err == nil {
			t.Errorf("ParseClusterDNSServices(%q): no error", bad)
		}
	}
	// A firewall whose operator trusts a service address does not start.
	h := featuretest.New(featuretest.DefaultNode())
	f := New(Options{Dynamic: nil, DNSServers: []string{"127.0.0.1:53"}, TrustedDNS: pfx("10.96.0.10/32")})
	h.Restrict(f.Owns())
	if err := f.Init(h); err == nil || !strings.Contains(err.Error(), "service network") {
		t.Errorf("Init with a trusted service address: %v", err)
	}
}

func addrList(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

// gaugeValue reads a gauge of the host's registry with label value kind.
func gaugeValue(t *testing.T, e *env, name, kind string) float64 {
	t.Helper()
	mfs, err := e.h.Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == kind {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{%s}", name, kind)
	return 0
}

// TestDNSNodeLocalCache: a node-local DNS cache named with TrustedDNS
// (its link-local address on the host) teaches the firewall when its
// reply comes from the host (mp0); the same address from a pod does not.
func TestDNSNodeLocalCache(t *testing.T) {
	e := newEnvOpts(t, nil, nil, func(o *Options) { o.TrustedDNS = pfx("169.254.20.10/32") },
		testPod("a", "client", "10.244.1.5"),
		ef("a", "default", "Allow dns:*.example.com", "Deny 0.0.0.0/0"))
	e.waitFlows(egressfirewallflows.DNSOwner, "the cache's flows", func(f []string) bool {
		return has(f, "nw_src=169.254.20.10", "reg0=0x4/0xf", "ct_state=+trk-snat") && has(f, "nw_src=169.254.20.10", "reg0=0x3/0xf")
	})
	fromPod := packetInFrom(dnsReply(t, "169.254.20.10", "10.244.1.5", "pod.example.com", 300, "198.51.100.61"), 9, plan.FromPod, 0x12, openflow.CtNew|openflow.CtTrk)
	e.f.HandlePacketIn(fromPod)
	fromHost := packetInFrom(dnsReply(t, "169.254.20.10", "10.244.1.5", "cache.example.com", 300, "198.51.100.60"), 3, plan.FromHost, 0, openflow.CtNew|openflow.CtTrk)
	e.f.HandlePacketIn(fromHost)
	got := e.waitFlows(egressfirewallflows.Owner("a"), "the cache's answer", func(f []string) bool { return has(f, "nw_dst=198.51.100.60", "goto_table:55") })
	if has(got, "198.51.100.61") {
		t.Errorf("the cache's address from a pod was learned:\n%s", strings.Join(got, "\n"))
	}
	if v := testutil.ToFloat64(e.f.m.dnsReplies.WithLabelValues(ReplyUntrusted)); v != 1 {
		t.Errorf("untrusted %v, want 1", v)
	}
}
