package serviceflows

import (
	"flag"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"nodeflow/datapath/conntrack"
	"nodeflow/internal/testutil/golden"
	"nodeflow/lib/openflow"
	"nodeflow/model/service"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func a(s string) netip.Addr { return netip.MustParseAddr(s) }

func testNode() *Node {
	return &Node{
		Name:         "node1",
		IPs:          []netip.Addr{a("172.18.0.3"), a("fd00:18::3")},
		Secondary:    []netip.Addr{a("172.20.0.2")},
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.128.0.0/14"), netip.MustParsePrefix("fd01::/48")},
		Masquerade:   conntrack.DefaultPlan(),
		UplinkPort:   1, PatchPort: 2,
	}
}

func name(svc, port string, proto v1.Protocol) service.ServicePortName {
	return service.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: svc}, Port: port, Protocol: proto}
}

func ready(ip string, port uint16, node string) service.Endpoint {
	return service.Endpoint{IP: a(ip), Port: port, NodeName: node, Ready: true, Serving: true}
}

// fixedIDs hands out ids in the order keys are first asked for, from 10.
func fixedIDs() GroupIDs {
	m := map[string]uint32{}
	return func(key string) (uint32, error) {
		if id, ok := m[key]; ok {
			return id, nil
		}
		id := uint32(10 + len(m))
		m[key] = id
		return id, nil
	}
}

// render writes an Output the way the golden files hold it: br0 flows
// sorted by table, priority and text, then groups, then breth0 flows.
func render(out Output) string {
	var sb strings.Builder
	flows := func(title string, fs []openflow.Flow) {
		if title != "" {
			fmt.Fprintf(&sb, "# %s\n", title)
		}
		sorted := slices.Clone(fs)
		slices.SortStableFunc(sorted, func(x, y openflow.Flow) int {
			if x.Table != y.Table {
				return int(x.Table) - int(y.Table)
			}
			if x.Priority != y.Priority {
				return int(y.Priority) - int(x.Priority)
			}
			return strings.Compare(x.String(), y.String())
		})
		for _, f := range sorted {
			sb.WriteString(strings.TrimSpace(f.String()))
			sb.WriteByte('\n')
		}
	}
	fmt.Fprintf(&sb, "# owner %s idled=%v\n", out.Owner, out.Idled)
	flows("br0 flows", out.Pod.Flows)
	sb.WriteString("# br0 groups\n")
	for _, g := range out.Pod.Groups {
		sb.WriteString(g.String())
		sb.WriteByte('\n')
	}
	fmt.Fprintf(&sb, "# breth0 flows (owner %s)\n", out.GatewayOwner)
	flows("", out.Gateway.Flows)
	return sb.String()
}

func goldenCases() []struct {
	name string
	in   Input
} {
	web := &service.ServicePort{
		Name: name("web", "http", v1.ProtocolTCP), Protocol: v1.ProtocolTCP, Port: 80, NodePort: 30080,
		ClusterIPs:      []netip.Addr{a("10.96.0.10"), a("fd02::10")},
		ExternalIPs:     []netip.Addr{a("192.0.2.10")},
		LoadBalancerIPs: []netip.Addr{a("198.51.100.10")},
	}
	aff := &service.ServicePort{
		Name: name("aff", "dns", v1.ProtocolUDP), Protocol: v1.ProtocolUDP, Port: 53,
		ClusterIPs: []netip.Addr{a("10.96.0.11")}, AffinityTimeout: 30 * time.Second,
	}
	empty := &service.ServicePort{
		Name: name("empty", "", v1.ProtocolSCTP), Protocol: v1.ProtocolSCTP, Port: 9,
		ClusterIPs: []netip.Addr{a("10.96.0.12"), a("fd02::12")},
	}
	local := &service.ServicePort{
		Name: name("local", "http", v1.ProtocolTCP), Protocol: v1.ProtocolTCP, Port: 80, NodePort: 30081,
		ClusterIPs: []netip.Addr{a("10.96.0.13")}, ExternalPolicyLocal: true, HealthCheckNodePort: 31081,
	}
	idled := &service.ServicePort{
		Name: name("idled", "http", v1.ProtocolTCP), Protocol: v1.ProtocolTCP, Port: 80,
		ClusterIPs: []netip.Addr{a("10.96.0.14")}, Idled: true,
	}
	sctp := &service.ServicePort{
		Name: name("sctp", "assoc", v1.ProtocolSCTP), Protocol: v1.ProtocolSCTP, Port: 9999, NodePort: 30999,
		ClusterIPs: []netip.Addr{a("10.96.0.15"), a("fd02::15")},
	}
	localAff := &service.ServicePort{
		Name: name("local-aff", "http", v1.ProtocolTCP), Protocol: v1.ProtocolTCP, Port: 80, NodePort: 30082,
		ClusterIPs: []netip.Addr{a("10.96.0.16")}, LoadBalancerIPs: []netip.Addr{a("198.51.100.16")},
		ExternalPolicyLocal: true, AffinityTimeout: 10 * time.Second,
	}
	ranged := &service.ServicePort{
		Name: name("ranged", "http", v1.ProtocolTCP), Protocol: v1.ProtocolTCP, Port: 80,
		ClusterIPs:      []netip.Addr{a("10.96.0.17"), a("fd02::17")},
		LoadBalancerIPs: []netip.Addr{a("198.51.100.17"), a("2001:db8::17")},
		// Two IPv4 ranges, none of IPv6: IPv6 clients reach nothing.
		SourcesRestricted: true, SourceRanges: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("203.0.113.7/32")},
		ExternalIPs: []netip.Addr{a("192.0.2.77")}, // not restricted: the ranges are the ingress IPs'
	}
	rangedEmpty := &service.ServicePort{
		Name: name("ranged-empty", "", v1.ProtocolUDP), Protocol: v1.ProtocolUDP, Port: 53,
		ClusterIPs: []netip.Addr{a("10.96.0.18")}, LoadBalancerIPs: []netip.Addr{a("198.51.100.18")},
		SourcesRestricted: true, SourceRanges: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")},
		AffinityTimeout: 10 * time.Second,
	}
	terminating := ready("10.128.0.9", 8080, "node1")
	terminating.Ready, terminating.Terminating = false, true
	return []struct {
		name string
		in   Input
	}{
		{"web_dualstack_every_endpoint_kind", Input{Port: web, Endpoints: []service.Endpoint{
			ready("10.128.0.2", 8080, "node1"), // local pod
			ready("10.128.1.5", 8080, "node2"), // remote pod
			ready("172.18.0.3", 8081, "node1"), // this node's IP -> 169.254.169.2
			ready("172.20.0.2", 4443, "node1"), // secondary IP of this node
			ready("172.18.0.4", 8082, "node2"), // another node's IP
			ready("fd01::2", 8080, "node1"),    // IPv6 local pod
			ready("fd00:18::3", 8081, "node1"), // IPv6 node IP -> fd69::2
			terminating,                        // not used: ready ones exist
		}}},
		{"aff_udp_session_affinity", Input{Port: aff, Endpoints: []service.Endpoint{
			ready("10.128.0.2", 5353, "node1"), ready("10.128.1.5", 5353, "node2"),
		}}},
		{"empty_sctp_reject", Input{Port: empty}},
		{"local_etp_no_local_endpoint", Input{Port: local, Endpoints: []service.Endpoint{ready("10.128.1.5", 8080, "node2")}}},
		{"idled_no_endpoints", Input{Port: idled}},
		// External traffic: the local pod only; a pod's own traffic to the
		// external VIPs: both (kube-proxy's short-circuit), with affinity.
		{"local_etp_affinity_pod_shortcircuit", Input{Port: localAff, Endpoints: []service.Endpoint{
			ready("10.128.0.2", 8080, "node1"), ready("10.128.1.5", 8080, "node2"),
		}}},
		{"lb_source_ranges", Input{Port: ranged, Endpoints: []service.Endpoint{ready("10.128.0.2", 8080, "node1"), ready("fd01::2", 8080, "node1")}}},
		{"lb_source_ranges_affinity_no_endpoints", Input{Port: rangedEmpty}},
		{"sctp_port_translation", Input{Port: sctp, Endpoints: []service.Endpoint{
			ready("10.128.0.2", 7777, "node1"), // local pod
			ready("10.128.1.5", 7777, "node2"), // remote pod
			ready("172.18.0.3", 9999, "node1"), // this node's IP, on the service port
			ready("fd01::2", 7777, "node1"),    // IPv6 local pod
		}}},
	}
}

func TestGolden(t *testing.T) {
	for _, tc := range goldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Build(testNode(), tc.in, fixedIDs())
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", tc.name+".golden"), render(out), *update)
		})
	}
}
