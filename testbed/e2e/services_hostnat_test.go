package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"nodeflow/datapath/plan"
	"nodeflow/testbed"
)

// The host's own traffic to its node ports, ExternalIPs and ingress IPs.
//
// node1's host reaching its own IP on a node port would be delivered
// locally, and an ExternalIP or ingress IP would leave by the default
// route; the agent's nftables DNAT (table ip/ip6 nodeflow, chain output)
// turns each into the ClusterIP and port, which the host's service route
// takes into breth0 like any host -> ClusterIP connection.
//
// The client address a backend sees is that of host -> ClusterIP (the
// seed's path; see docs/pipeline.md): breth0 SNATs the host's packets to the
// host masquerade address (169.254.169.2, fd69::2) in zone 64001 before br0;
//   - a pod on node1 is reached straight from br0's DNAT: it sees the host
//     masquerade address;
//   - a pod on node2 is reached through the tunnel after br0 SNATs the
//     connection to node1's IP (table 40, from the host masquerade address
//     to a remote pod whose node publishes pipeline 4): it sees node1's IP,
//     as a host-network client's; node2 commits the connection and sends
//     the reply back through the tunnel (plan.ReturnByTunnel), so that it
//     comes back through node1's br0 and breth0.
//
// node1's host to node2's IP on a node port is not DNATed on node1 (not one
// of its addresses): it leaves by the fabric and is load-balanced by node2
// like any external client's connection: node2's pods see node1's IP, and
// node1's pods node2's gateway address.

var (
	hostNATExternal = map[bool]netip.Addr{false: netip.MustParseAddr("172.30.0.230"), true: netip.MustParseAddr("fd00:172:30::230")}
	hostNATIngress  = map[bool]netip.Addr{false: netip.MustParseAddr("172.30.0.231"), true: netip.MustParseAddr("fd00:172:30::231")}
)

// routerOf returns node name's router address of a family in its pod
// subnet.
func routerOf(t *testing.T, e *env, name string, v6 bool) netip.Addr {
	t.Helper()
	n, err := e.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range n.Spec.PodCIDRs {
		if p, err := netip.ParsePrefix(s); err == nil && p.Addr().Is6() == v6 {
			return plan.RouterIP(p)
		}
	}
	t.Fatalf("node %s has no %s pod subnet (%v)", name, family(v6), n.Spec.PodCIDRs)
	return netip.Addr{}
}

// nftIn runs nft in member m's namespace.
func nftIn(t *testing.T, m *testbed.Member, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", m.Netns, "nft"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("nft %v on %s: %v: %s", args, m.Name, err, out)
	}
	return string(out)
}

func TestServicesHostNAT(t *testing.T) {
	e, ns := agentNamespace(t, "e2e-hostnat")
	web := deployPods(t, e, ns, "web", 3)
	n1, n2 := member(t, e, "node1"), member(t, e, "node2")
	nodes := map[string]bool{}
	for _, p := range web {
		nodes[p.node] = true
	}
	if !nodes[n1.Name] || !nodes[n2.Name] {
		t.Fatalf("backends not on both nodes: %+v", web)
	}

	svc := createService(t, e, ns, newService("web-hostnat", v1.ServiceSpec{
		Type:           v1.ServiceTypeLoadBalancer,
		Selector:       map[string]string{"app": "web"},
		IPFamilyPolicy: ptr.To(v1.IPFamilyPolicyRequireDualStack),
		ExternalIPs:    []string{hostNATExternal[false].String(), hostNATExternal[true].String()},
		Ports:          slices.Clone(webPorts),
	}), hostNATIngress[false], hostNATIngress[true])
	npTCP, npUDP := nodePortOf(t, svc, v1.ProtocolTCP), nodePortOf(t, svc, v1.ProtocolUDP)
	t.Logf("service %s: cluster IPs %v, node ports tcp %d udp %d", svc.Name, svcAddrs(t, svc), npTCP, npUDP)

	// want returns, per backend, the client address it must see from
	// node1's host (see the file comment).
	want := func(v6 bool) map[string]netip.Addr {
		masq := netip.MustParseAddr(conntrackHostMasq(v6))
		out := map[string]netip.Addr{}
		for _, p := range web {
			if p.node == n1.Name {
				out[p.name] = masq
			} else {
				out[p.name] = addr(t, n1, v6)
			}
		}
		return out
	}
	// wantOther is the same through node2's node port: node2 load-balances
	// an external client's connection, which its own pods see with the
	// client's address (node1's IP) and node1's pods with node2's gateway
	// address (table 40 SNATs it, for the reply to come back through node2).
	wantOther := func(v6 bool) map[string]netip.Addr {
		router := routerOf(t, e, n2.Name, v6)
		out := map[string]netip.Addr{}
		for _, p := range web {
			if p.node == n2.Name {
				out[p.name] = addr(t, n1, v6)
			} else {
				out[p.name] = router
			}
		}
		return out
	}

	type target struct {
		name string
		dst  func(v6 bool) netip.Addr
		port func(udp bool) int
	}
	nodePort := func(udp bool) int {
		if udp {
			return npUDP
		}
		return npTCP
	}
	servicePort := func(udp bool) int {
		if udp {
			return 53
		}
		return 80
	}
	for _, tg := range []target{
		{"own-nodeport", func(v6 bool) netip.Addr { return addr(t, n1, v6) }, nodePort},
		{"externalip", func(v6 bool) netip.Addr { return hostNATExternal[v6] }, servicePort},
		{"ingress", func(v6 bool) netip.Addr { return hostNATIngress[v6] }, servicePort},
	} {
		for _, v6 := range []bool{false, true} {
			for _, udp := range []bool{false, true} {
				proto := "tcp"
				if udp {
					proto = "udp"
				}
				dst, port := tg.dst(v6), tg.port(udp)
				t.Run(tg.name+"/"+proto+"/"+family(v6), func(t *testing.T) {
					reachEach(t, "node1 host -> "+netip.AddrPortFrom(dst, uint16(port)).String()+"/"+proto, n1.Netns, udp, dst, port, want(v6))
				})
			}
		}
	}

	// Another node's node port is that node's business: not DNATed here.
	for _, v6 := range []bool{false, true} {
		for _, udp := range []bool{false, true} {
			proto := "tcp"
			if udp {
				proto = "udp"
			}
			dst, port := addr(t, n2, v6), nodePort(udp)
			t.Run("other-nodeport/"+proto+"/"+family(v6), func(t *testing.T) {
				reachEach(t, "node1 host -> node2 "+netip.AddrPortFrom(dst, uint16(port)).String()+"/"+proto, n1.Netns, udp, dst, port, wantOther(v6))
			})
		}
	}

	t.Run("pipeline-annotation", func(t *testing.T) {
		// What lets node1 keep its IP toward node2's pods: node2's agent
		// says it returns such connections through the tunnel.
		for _, m := range []*testbed.Member{n1, n2} {
			k, err := e.client.CoreV1().Nodes().Get(context.Background(), m.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := k.Annotations[plan.PipelineAnnotation], strconv.Itoa(plan.PipelineVersion); got != want {
				t.Errorf("node %s: annotation %s = %q, want %q", m.Name, plan.PipelineAnnotation, got, want)
			}
		}
	})
	t.Run("tables", func(t *testing.T) {
		cips := svcAddrs(t, svc)
		for _, v6 := range []bool{false, true} {
			fam, cip := "ip", cips[0]
			if v6 {
				fam, cip = "ip6", cips[1]
			}
			out := nftIn(t, n1, "list", "table", fam, "nodeflow")
			for _, w := range []string{
				"type nat hook output priority -100; policy accept;",
				fmt.Sprintf("dnat %s to %s daddr . meta l4proto . th dport map @services", fam, fam),
				fmt.Sprintf("%s . tcp . %d : %s . 80", addr(t, n1, v6), npTCP, cip),
				fmt.Sprintf("%s . udp . %d : %s . 53", addr(t, n1, v6), npUDP, cip),
				fmt.Sprintf("%s . tcp . 80 : %s . 80", hostNATExternal[v6], cip),
				fmt.Sprintf("%s . udp . 53 : %s . 53", hostNATIngress[v6], cip),
			} {
				if !strings.Contains(out, w) {
					t.Errorf("node1: nft list table %s nodeflow lacks %q:\n%s", fam, w, out)
				}
			}
			// node1 holds no rule for node2's address.
			if strings.Contains(out, addr(t, n2, v6).String()+" . ") {
				t.Errorf("node1's table has a rule for node2's address:\n%s", out)
			}
		}
		if v := metricValue(t, n1, "nodeflow_host_nat_errors_total"); v != 0 {
			t.Errorf("nodeflow_host_nat_errors_total on node1: %v", v)
		}
		if v := metricValue(t, n1, "nodeflow_host_nat_rules"); v < 8 {
			t.Errorf("nodeflow_host_nat_rules on node1: %v, want at least this service's 8", v)
		}
	})

	// Without the table the host's own node port is refused (nothing
	// listens on it); the next change of services finds the table gone,
	// and the agent replaces it.
	t.Run("table-deleted-and-restored", func(t *testing.T) {
		nftIn(t, n1, "delete", "table", "ip", "nodeflow")
		dst := netip.AddrPortFrom(addr(t, n1, false), uint16(npTCP))
		if _, _, err := httpGet(context.Background(), n1.Netns, dst.Addr(), int(dst.Port())); err == nil ||
			!strings.Contains(err.Error(), "refused") {
			t.Fatalf("node1 host -> %s without the table: %v, want connection refused", dst, err)
		}
		other := createService(t, e, ns, newService("web-hostnat-trigger", v1.ServiceSpec{
			Type: v1.ServiceTypeNodePort, Selector: map[string]string{"app": "web"},
			Ports: []v1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: v1.ProtocolTCP}},
		}))
		eventually(t, 20*time.Second, "node1's ip table back with both services", func(context.Context) error {
			out, err := exec.Command("ip", "netns", "exec", n1.Netns, "nft", "list", "map", "ip", "nodeflow", "services").CombinedOutput()
			if err != nil {
				return fmt.Errorf("nft list map: %v: %s", err, out)
			}
			for _, w := range []string{fmt.Sprintf(" . tcp . %d : ", npTCP), fmt.Sprintf(" . tcp . %d : ", nodePortOf(t, other, v1.ProtocolTCP))} {
				if !strings.Contains(string(out), w) {
					return fmt.Errorf("lacks %q:\n%s", w, out)
				}
			}
			return nil
		})
		reachEach(t, "node1 host -> "+dst.String()+"/tcp after the restore", n1.Netns, false, dst.Addr(), int(dst.Port()), want(false))
		if v := metricValue(t, n1, "nodeflow_host_nat_errors_total"); v != 0 {
			t.Errorf("nodeflow_host_nat_errors_total on node1: %v (the fallback replace must have succeeded)", v)
		}
	})

	// The service goes: its elements leave node1's maps within a sync.
	t.Run("service-deleted", func(t *testing.T) {
		if err := e.client.CoreV1().Services(ns).Delete(context.Background(), svc.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 20*time.Second, "node1's maps without the service", func(context.Context) error {
			out := nftIn(t, n1, "list", "map", "ip", "nodeflow", "services")
			for _, s := range []string{hostNATExternal[false].String() + " . ", " . tcp . " + strconv.Itoa(npTCP) + " "} {
				if strings.Contains(out, s) {
					return fmt.Errorf("still holds %q:\n%s", s, out)
				}
			}
			return nil
		})
	})
}
