package service

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

func testAddressCheck() *AddressCheck {
	pfx := netip.MustParsePrefix
	victim := types.NamespacedName{Namespace: "other", Name: "victim"}
	return &AddressCheck{
		Facts: ClusterFacts{
			ServiceCIDRs: []netip.Prefix{pfx("10.96.0.0/16"), pfx("fd00:10:96::/112")},
			PodCIDRs:     []netip.Prefix{pfx("10.244.0.0/16"), pfx("fd00:10:244::/56"), pfx("10.250.3.0/24")},
			NodeAddrs:    map[netip.Addr]string{netip.MustParseAddr("172.30.0.11"): "node1", netip.MustParseAddr("fd00:172:30::12"): "node2"},
			Masquerade:   []netip.Prefix{pfx("169.254.169.0/29"), pfx("fd69::/125")},
		},
		ExternalIPs: CIDRPolicy{Allowed: []netip.Prefix{pfx("172.30.0.0/24"), pfx("fd00:172:30::/64"), pfx("100.64.0.0/10")},
			Rejected: []netip.Prefix{pfx("172.30.0.240/28")}},
		IngressIPs: CIDRPolicy{Allowed: []netip.Prefix{pfx("198.51.100.0/24")}},
		ClusterIP: func(a netip.Addr) (types.NamespacedName, bool) {
			// A ClusterIP outside the configured service CIDRs (a
			// ServiceCIDR the agent's configuration does not list).
			if a == netip.MustParseAddr("100.64.0.10") {
				return victim, true
			}
			return types.NamespacedName{}, false
		},
	}
}

// TestAddressCheck: each address a namespace user could write into
// spec.externalIPs or status.loadBalancer.ingress to capture someone
// else's traffic is refused with its reason, and the allowed ones pass.
func TestAddressCheck(t *testing.T) {
	c := testAddressCheck()
	tenant := types.NamespacedName{Namespace: "tenant", Name: "grab"}
	cases := []struct {
		kind   AddressKind
		addr   string
		reason string // "" allowed
		why    string
	}{
		{ExternalIP, "172.30.0.200", "", ""},
		{ExternalIP, "fd00:172:30::200", "", ""},
		{ExternalIP, "10.96.0.10", RefusedServiceCIDR, "service CIDR 10.96.0.0/16"},
		{ExternalIP, "10.96.200.1", RefusedServiceCIDR, "service CIDR"}, // not allocated yet: a claim in advance
		{ExternalIP, "fd00:10:96::1", RefusedServiceCIDR, "service CIDR"},
		{ExternalIP, "100.64.0.10", RefusedClusterIP, "ClusterIP of service other/victim"},
		{ExternalIP, "10.244.1.7", RefusedPodCIDR, "pod network 10.244.0.0/16"},
		{ExternalIP, "10.250.3.9", RefusedPodCIDR, "pod network 10.250.3.0/24"}, // a Node's podCIDR outside the cluster CIDRs
		{ExternalIP, "172.30.0.11", RefusedNodeAddress, "node node1"},           // the kubelet's port 10250 lives here
		{ExternalIP, "fd00:172:30::12", RefusedNodeAddress, "node node2"},
		{ExternalIP, "169.254.169.1", RefusedSpecial, "link-local"},
		{ExternalIP, "fd69::2", RefusedMasquerade, "masquerade range"},
		{ExternalIP, "127.0.0.1", RefusedSpecial, "loopback"},
		{ExternalIP, "::1", RefusedSpecial, "loopback"},
		{ExternalIP, "224.0.0.251", RefusedSpecial, "multicast"},
		{ExternalIP, "ff02::1", RefusedSpecial, "multicast"},
		{ExternalIP, "255.255.255.255", RefusedSpecial, "broadcast"},
		{ExternalIP, "0.0.0.0", RefusedSpecial, "unspecified"},
		{ExternalIP, "fe80::1", RefusedSpecial, "link-local"},
		{ExternalIP, "172.30.0.241", RefusedPolicy, "rejected range 172.30.0.240/28"},
		{ExternalIP, "8.8.8.8", RefusedPolicy, "outside the allowed ranges"},
		{ExternalIP, "198.51.100.5", RefusedPolicy, "outside the allowed ranges (the agent's externalIPs policy)"},
		{IngressIP, "198.51.100.5", "", ""},
		{IngressIP, "172.30.0.200", RefusedPolicy, "loadBalancerIPs policy"},
		{IngressIP, "172.30.0.11", RefusedNodeAddress, "node node1"},
	}
	for _, tc := range cases {
		t.Run(tc.kind.Field()+"/"+tc.addr, func(t *testing.T) {
			r := c.Check(tc.kind, tenant, netip.MustParseAddr(tc.addr))
			switch {
			case tc.reason == "" && r != nil:
				t.Fatalf("refused (%s: %s), want allowed", r.Reason, r.Why)
			case tc.reason == "":
				return
			case r == nil:
				t.Fatalf("allowed, want refused for %s", tc.reason)
			case r.Reason != tc.reason || !strings.Contains(r.Why, tc.why):
				t.Fatalf("refused for %s (%s), want %s (%q)", r.Reason, r.Why, tc.reason, tc.why)
			}
		})
	}
	// Nothing is allowed by the zero policy, which is the default.
	var none AddressCheck
	if r := none.Check(ExternalIP, tenant, netip.MustParseAddr("203.0.113.7")); r == nil || r.Reason != RefusedPolicy || !strings.Contains(r.Why, "allows no range") {
		t.Errorf("zero policy: %+v, want refused as no range is allowed", r)
	}
	// A Service's own ClusterIP is not another's.
	if r := c.Check(ExternalIP, types.NamespacedName{Namespace: "other", Name: "victim"}, netip.MustParseAddr("100.64.0.10")); r != nil {
		t.Errorf("the victim's own ClusterIP refused to it: %+v", r)
	}
}

// TestClaims: a port keeps the addresses it owns, loses the others with
// errors naming field and address, and shares its model when nothing is
// refused.
func TestClaims(t *testing.T) {
	c := testAddressCheck()
	p := &ServicePort{
		Name:            ServicePortName{NamespacedName: types.NamespacedName{Namespace: "tenant", Name: "grab"}, Port: "http", Protocol: v1.ProtocolTCP},
		ClusterIPs:      []netip.Addr{netip.MustParseAddr("10.96.0.50")},
		ExternalIPs:     []netip.Addr{netip.MustParseAddr("10.96.0.50"), netip.MustParseAddr("172.30.0.11"), netip.MustParseAddr("172.30.0.200")},
		LoadBalancerIPs: []netip.Addr{netip.MustParseAddr("10.244.0.5"), netip.MustParseAddr("198.51.100.9")},
	}
	got, refused := c.Claims(p)
	if got == p {
		t.Fatal("the tracker's port was returned though addresses were left out")
	}
	if want := []netip.Addr{netip.MustParseAddr("172.30.0.200")}; !equalAddrs(got.ExternalIPs, want) {
		t.Errorf("external IPs %v, want %v (its own ClusterIP is dropped without a refusal)", got.ExternalIPs, want)
	}
	if want := []netip.Addr{netip.MustParseAddr("198.51.100.9")}; !equalAddrs(got.LoadBalancerIPs, want) {
		t.Errorf("ingress IPs %v, want %v", got.LoadBalancerIPs, want)
	}
	if len(p.ExternalIPs) != 3 || len(p.LoadBalancerIPs) != 2 {
		t.Errorf("the tracker's port was modified: %v %v", p.ExternalIPs, p.LoadBalancerIPs)
	}
	if len(refused) != 2 {
		t.Fatalf("refused %+v, want the node IP and the pod IP", refused)
	}
	err := refused[0].Error(p.Name.NamespacedName)
	if !errors.Is(err, ErrAddressRefused) || err.Field != "spec.externalIPs" ||
		!strings.Contains(err.Error(), "service tenant/grab: spec.externalIPs: address refused: 172.30.0.11 is not programmed: it is an address of node node1") {
		t.Errorf("refusal: %v (field %s)", err, err.Field)
	}
	if e := refused[1].Error(p.Name.NamespacedName); e.Field != "status.loadBalancer.ingress" || !strings.Contains(e.Error(), "10.244.0.5") {
		t.Errorf("refusal: %v", e)
	}
	fine := &ServicePort{Name: p.Name, ClusterIPs: p.ClusterIPs, ExternalIPs: []netip.Addr{netip.MustParseAddr("172.30.0.201")}}
	if got, refused := c.Claims(fine); got != fine || refused != nil {
		t.Errorf("nothing refused: got a copy or refusals %v", refused)
	}
}

func equalAddrs(x, y []netip.Addr) bool {
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if x[i] != y[i] {
			return false
		}
	}
	return true
}

// TestSourceRanges: spec.loadBalancerSourceRanges of a LoadBalancer
// Service restrict its ingress IPs; a bad entry is reported and left out,
// and a list of bad entries only restricts to nothing (fail closed).
func TestSourceRanges(t *testing.T) {
	svc := &v1.Service{}
	svc.Namespace, svc.Name = "tenant", "lb"
	svc.Spec = v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.60",
		Ports:                    []v1.ServicePort{{Port: 80, Protocol: v1.ProtocolTCP}},
		LoadBalancerSourceRanges: []string{" 192.0.2.0/24", "2001:db8::/32", "not-a-cidr", "192.0.2.7/24"}}
	ports, errs := ServicePorts(svc)
	var p *ServicePort
	for _, q := range ports {
		p = q
	}
	if p == nil || !p.SourcesRestricted || len(p.SourceRanges) != 2 ||
		p.SourceRanges[0] != netip.MustParsePrefix("192.0.2.0/24") || p.SourceRanges[1] != netip.MustParsePrefix("2001:db8::/32") {
		t.Fatalf("port %+v, want restricted to 192.0.2.0/24 and 2001:db8::/32", p)
	}
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "spec.loadBalancerSourceRanges[2]") {
		t.Errorf("errors %v, want the bad entry named", errs)
	}
	svc.Spec.LoadBalancerSourceRanges = []string{"nope"}
	ports, _ = ServicePorts(svc)
	for _, q := range ports {
		if !q.SourcesRestricted || len(q.SourceRanges) != 0 {
			t.Errorf("only bad ranges: %+v, want restricted to nothing", q)
		}
	}
	svc.Spec.Type = v1.ServiceTypeClusterIP
	ports, _ = ServicePorts(svc)
	for _, q := range ports {
		if q.SourcesRestricted {
			t.Errorf("a ClusterIP Service's source ranges apply (kube-proxy ignores them)")
		}
	}
}

// TestNodeSubnetAddresses: the network and broadcast addresses of every
// Node's pod subnets are no endpoint's, whatever node they belong to.
func TestNodeSubnetAddresses(t *testing.T) {
	c := EndpointCheck{NodeSubnets: []NodeSubnet{
		{Node: "node1", Prefix: netip.MustParsePrefix("10.244.1.0/24")},
		{Node: "node2", Prefix: netip.MustParsePrefix("10.244.0.0/24")},
		{Node: "node2", Prefix: netip.MustParsePrefix("fd00:10:244::/64")},
		{Node: "node3", Prefix: netip.MustParsePrefix("10.9.9.8/31")},
	}}
	for addr, want := range map[string]string{
		"10.244.0.255":     "broadcast address of node node2's pod subnet 10.244.0.0/24",
		"10.244.0.0":       "network address of node node2's pod subnet 10.244.0.0/24",
		"10.244.1.255":     "broadcast address of node node1's pod subnet",
		"fd00:10:244::":    "network address of node node2's pod subnet fd00:10:244::/64",
		"10.244.0.7":       "",
		"fd00:10:244::ff":  "",
		"10.9.9.8":         "", // a /31 has neither
		"10.9.9.9":         "",
		"10.244.255.255":   "", // no Node's subnet
		"fd00:10:244:1::0": "",
	} {
		err := c.Check(netip.MustParseAddr(addr))
		switch {
		case want == "" && err != nil:
			t.Errorf("%s refused: %v", addr, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ErrEndpointAddress)):
			t.Errorf("%s: %v, want %q", addr, err, want)
		}
	}
}
