package vnetflows

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"

	"nodeflow/datapath/conntrack"
	"nodeflow/datapath/gatewayflows"
	"nodeflow/datapath/nodeflows"
	"nodeflow/datapath/plan"
	"nodeflow/internal/testutil/flowtest"
	"nodeflow/lib/openflow"
	"nodeflow/model/vnet"
	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

// The switch of TestOnSwitch: node1 (172.30.0.11) with the pod network's
// flows (a pod, node2 as a remote node) and two VNIs that use the same
// CIDR, 10.10.0.0/24:
//
//	VNI X  x1 10.10.0.1 port 10, x2 10.10.0.2 port 11 (local);
//	       x5 10.10.0.5 on node2 (172.30.0.12)
//	VNI Y  y1 10.10.0.1 port 12, y3 10.10.0.3 port 13 (local);
//	       y2 10.10.0.2 on node3 (172.30.0.13)
//
// and IPv6 attachments on both, again with one prefix, fd00::/64:
//
//	VNI X  x61 fd00::1 port 14, x62 fd00::2 port 15 (local);
//	       x65 fd00::5 on node2
//	VNI Y  y61 fd00::1 port 16 (local); y62 fd00::2 on node3
const (
	portTunnel = 1
	portPatch  = 2
	portMgmt   = 3
	portPod    = 4
	portX1     = 10
	portX2     = 11
	portY1     = 12
	portY3     = 13
	portX61    = 14
	portX62    = 15
	portY61    = 16
	node2      = "172.30.0.12"
	node3      = "172.30.0.13"
)

func onSwitchFlows(t *testing.T) []openflow.Flow {
	t.Helper()
	nc := nodeflows.Config{
		TunnelPort: portTunnel, PatchPort: portPatch, MgmtPort: portMgmt,
		RouterMAC: conntrack.MAC(netip.MustParseAddr("10.244.0.1")), MgmtMAC: conntrack.MAC(netip.MustParseAddr("10.244.0.2")),
		HostMAC:      conntrack.MAC(netip.MustParseAddr("172.30.0.11")),
		PodCIDRs:     []netip.Prefix{netip.MustParsePrefix("10.244.0.0/24")},
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")},
		NodeIPs:      []netip.Addr{netip.MustParseAddr("172.30.0.11")},
		Masquerade:   conntrack.DefaultPlan(),
	}
	must := func(fs []openflow.Flow, err error) []openflow.Flow {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return fs
	}
	fs := gatewayflows.PipelineFlows(plan.Pod)
	fs = append(fs, must(nodeflows.NodeFlows(nc))...)
	fs = append(fs, must(nodeflows.RemoteFlows(nc, nodeflows.Remote{Name: "node2", TunnelIP: netip.MustParseAddr(node2),
		PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}}))...)
	fs = append(fs, must(nodeflows.PodFlows(nc, nodeflows.Pod{Namespace: "p", Name: "pod", Port: portPod, NamespaceID: 0x10,
		MAC: conntrack.MAC(netip.MustParseAddr("10.244.0.5")), IPs: []netip.Addr{netip.MustParseAddr("10.244.0.5")}}))...)
	for _, a := range []Local{
		local("t", "x1", vniX, portX1, "10.10.0.1"), local("t", "x2", vniX, portX2, "10.10.0.2"),
		local("u", "y1", vniY, portY1, "10.10.0.1"), local("u", "y3", vniY, portY3, "10.10.0.3"),
		local("t", "x61", vniX, portX61, "fd00::1"), local("t", "x62", vniX, portX62, "fd00::2"),
		local("u", "y61", vniY, portY61, "fd00::1"),
	} {
		fs = append(fs, must(LocalFlows(a))...)
	}
	cfg := Config{TunnelPort: portTunnel, HostIP: netip.MustParseAddr("172.30.0.11")}
	addrs := func(ips ...string) []netip.Addr {
		var out []netip.Addr
		for _, ip := range ips {
			out = append(out, netip.MustParseAddr(ip))
		}
		return out
	}
	for _, v := range []struct {
		vni     uint32
		remotes []Remote
		taken   []netip.Addr
	}{
		{vniX, []Remote{remote("t", "x5", vniX, "10.10.0.5", node2), remote("t", "x65", vniX, "fd00::5", node2)},
			addrs("10.10.0.1", "10.10.0.2", "fd00::1", "fd00::2")},
		{vniY, []Remote{remote("u", "y2", vniY, "10.10.0.2", node3), remote("u", "y62", vniY, "fd00::2", node3)},
			addrs("10.10.0.1", "10.10.0.3", "fd00::1")},
	} {
		vfs, problems, err := VNIFlows(cfg, v.vni, v.remotes, v.taken)
		if err != nil || len(problems) > 0 {
			t.Fatal(err, problems)
		}
		fs = append(fs, vfs...)
	}
	return fs
}

func macOf(vni uint32, ip string) string { return vnet.MACOf(vni, netip.MustParseAddr(ip)).String() }

// ipv4 is an ICMP echo from (mac, ip) to (mac, ip).
func ipv4(inPort int, smac, sip, dmac, dip string) string {
	return fmt.Sprintf("in_port=%d,icmp,dl_src=%s,dl_dst=%s,nw_src=%s,nw_dst=%s,icmp_type=8", inPort, smac, dmac, sip, dip)
}

func fromTunnel(src string, key uint32, inner string) string {
	return fmt.Sprintf("tun_src=%s,tun_dst=172.30.0.11,tun_id=%#x,%s", src, key, inner)
}

// arpRequest is an ARP request from (mac, ip) for tpa.
func arpRequest(inPort int, smac, sip, tpa string) string {
	return fmt.Sprintf("in_port=%d,arp,dl_src=%s,dl_dst=ff:ff:ff:ff:ff:ff,arp_op=1,arp_sha=%s,arp_spa=%s,arp_tpa=%s", inPort, smac, smac, sip, tpa)
}

// ipv6 is an ICMPv6 echo from (mac, ip) to (mac, ip).
func ipv6(inPort int, smac, sip, dmac, dip string) string {
	return fmt.Sprintf("in_port=%d,icmp6,dl_src=%s,dl_dst=%s,ipv6_src=%s,ipv6_dst=%s,icmpv6_type=128,icmpv6_code=0", inPort, smac, dmac, sip, dip)
}

// solicit is a neighbour solicitation from (mac, ip) for target, to its
// solicited-node address, with sll as its source link-layer address
// ("00:00:00:00:00:00": none).
func solicit(inPort int, smac, sip, target, sll string) string {
	t := netip.MustParseAddr(target)
	sn := SolicitedNode(t)
	b := sn.As16()
	return fmt.Sprintf("in_port=%d,icmp6,dl_src=%s,dl_dst=33:33:%02x:%02x:%02x:%02x,ipv6_src=%s,ipv6_dst=%s,icmpv6_type=135,icmpv6_code=0,nd_target=%s,nd_sll=%s",
		inPort, smac, b[12], b[13], b[14], b[15], sip, sn, t, sll)
}

// advert is a solicited neighbour advertisement from (mac, ip) to
// (dmac, dip) for target, with tll as its target link-layer address.
func advert(inPort int, smac, sip, dmac, dip, target, tll string) string {
	return fmt.Sprintf("in_port=%d,icmp6,dl_src=%s,dl_dst=%s,ipv6_src=%s,ipv6_dst=%s,icmpv6_type=136,icmpv6_code=0,nd_target=%s,nd_tll=%s",
		inPort, smac, dmac, sip, dip, target, tll)
}

var outputRE = regexp.MustCompile(`(?m)^\s+output:(\d+)\s*$`)

// TestOnSwitch installs the pod network's flows and two VNIs with the same
// CIDR in a sandboxed ovs-vswitchd (checking that ovs-ofctl prints every
// flow as Flow.String does), and follows packets with ofproto/trace:
// attachments of one VNI reach each other, on this node and through the
// tunnel with the VNI as key; nothing crosses to the other VNI or to the
// pod network, either way; ARP is answered from the known mappings.
func TestOnSwitch(t *testing.T) {
	sb := ovstest.New(t, ovs.Options{})
	args := []string{"add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev", "protocols=OpenFlow13,OpenFlow15", "fail_mode=secure",
		"--", "add-port", "br0", "vxlan0", "--", "set", "interface", "vxlan0", "type=vxlan", "options:remote_ip=flow", "options:key=flow",
		fmt.Sprintf("ofport_request=%d", portTunnel)}
	for name, port := range map[string]int{"patch": portPatch, "mp0": portMgmt, "pod": portPod, "x1": portX1, "x2": portX2, "y1": portY1, "y3": portY3,
		"x61": portX61, "x62": portX62, "y61": portY61} {
		args = append(args, "--", "add-port", "br0", name, "--", "set", "interface", name, "type=internal", fmt.Sprintf("ofport_request=%d", port))
	}
	if _, err := sb.Vsctl(args...); err != nil {
		t.Fatal(err)
	}
	flowtest.InstallAndCompare(t, sb, "br0", onSwitchFlows(t))
	// The underlay, so that the userspace datapath can push the VXLAN
	// header (as breth0 is on a node): a bridge of its own with node1's
	// address, a route, and the other nodes' MACs.
	if _, err := sb.Vsctl("add-br", "underlay", "--", "set", "bridge", "underlay", "datapath_type=netdev",
		"--", "add-port", "underlay", "uplink", "--", "set", "interface", "uplink", "type=internal"); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Exec("ip", "addr", "add", "172.30.0.11/24", "dev", "underlay"); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Exec("ip", "link", "set", "underlay", "up"); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{
		{"ovs/route/add", "172.30.0.0/24", "underlay"},
		{"tnl/neigh/set", "underlay", node2, "02:00:00:00:00:12"},
		{"tnl/neigh/set", "underlay", node3, "02:00:00:00:00:13"},
	} {
		if _, err := sb.Appctl(cmd...); err != nil {
			t.Fatal(err)
		}
	}

	x1, x2, x5 := macOf(vniX, "10.10.0.1"), macOf(vniX, "10.10.0.2"), macOf(vniX, "10.10.0.5")
	y1, y2, y3 := macOf(vniY, "10.10.0.1"), macOf(vniY, "10.10.0.2"), macOf(vniY, "10.10.0.3")
	x61, x62, x65 := macOf(vniX, "fd00::1"), macOf(vniX, "fd00::2"), macOf(vniX, "fd00::5")
	y61, y62 := macOf(vniY, "fd00::1"), macOf(vniY, "fd00::2")
	const none = "00:00:00:00:00:00"
	router := conntrack.MAC(netip.MustParseAddr("10.244.0.1")).String()
	pod := conntrack.MAC(netip.MustParseAddr("10.244.0.5")).String()
	type want struct {
		port   int    // the only output port; 0 for none
		tunnel string // "tun_id=...,dst=..." of a tunnelled packet
		arp    string // the answer's arp_sha (arp_spa is the request's arp_tpa)
		na     string // the advertisement's nd_tll (its target is the solicitation's)
	}
	drop := want{}
	for _, tc := range []struct {
		name string
		flow string
		want want
	}{
		{"x1 -> x2, same VNI on this node", ipv4(portX1, x1, "10.10.0.1", x2, "10.10.0.2"), want{port: portX2}},
		{"y1 -> y3, the other VNI on this node", ipv4(portY1, y1, "10.10.0.1", y3, "10.10.0.3"), want{port: portY3}},
		{"x1 -> x5 on node2: tunnelled with the VNI", ipv4(portX1, x1, "10.10.0.1", x5, "10.10.0.5"), want{tunnel: "dst=" + node2 + ",proto=17,tos=0,ttl=64,frag=0x4000),udp(src=0,dst=4789,csum=0x0),vxlan(flags=0x8000000,vni=0x800001)"}},
		{"y3 -> y2 on node3: tunnelled with its VNI", ipv4(portY3, y3, "10.10.0.3", y2, "10.10.0.2"), want{tunnel: "dst=" + node3 + ",proto=17,tos=0,ttl=64,frag=0x4000),udp(src=0,dst=4789,csum=0x0),vxlan(flags=0x8000000,vni=0x800002)"}},
		{"x1 -> y3 (the other VNI's MAC and address): dropped", ipv4(portX1, x1, "10.10.0.1", y3, "10.10.0.3"), drop},
		{"x2 -> y1's MAC with x1's address (same CIDR): dropped", ipv4(portX2, x2, "10.10.0.2", y1, "10.10.0.1"), drop},
		{"x1 -> y2 on node3: not tunnelled", ipv4(portX1, x1, "10.10.0.1", y2, "10.10.0.2"), drop},
		{"x1 -> a pod through the router MAC: dropped", ipv4(portX1, x1, "10.10.0.1", router, "10.244.0.5"), drop},
		{"x1 -> a pod's MAC: dropped", ipv4(portX1, x1, "10.10.0.1", pod, "10.244.0.5"), drop},
		{"x1 broadcast: dropped", ipv4(portX1, x1, "10.10.0.1", "ff:ff:ff:ff:ff:ff", "10.10.0.255"), drop},
		{"x1 spoofing y1's MAC: dropped", ipv4(portX1, y1, "10.10.0.1", x2, "10.10.0.2"), drop},
		{"x1 spoofing x2's address: dropped", ipv4(portX1, x1, "10.10.0.2", x2, "10.10.0.2"), drop},
		{"a pod -> x1's MAC and address: dropped", ipv4(portPod, pod, "10.244.0.5", x1, "10.10.0.1"), drop},
		{"tunnel, VNI X from node2 -> x1", fromTunnel(node2, vniX, ipv4(portTunnel, x5, "10.10.0.5", x1, "10.10.0.1")), want{port: portX1}},
		{"tunnel, VNI Y from node3 -> y1 (same address as x1)", fromTunnel(node3, vniY, ipv4(portTunnel, y2, "10.10.0.2", y1, "10.10.0.1")), want{port: portY1}},
		{"tunnel, VNI Y from node3 -> x1's MAC: dropped", fromTunnel(node3, vniY, ipv4(portTunnel, y2, "10.10.0.2", x1, "10.10.0.1")), drop},
		{"tunnel, VNI X from node3 (no attachment of X there): dropped", fromTunnel(node3, vniX, ipv4(portTunnel, x5, "10.10.0.5", x1, "10.10.0.1")), drop},
		{"tunnel, VNI X from node2 -> x5 (remote): never tunnelled again", fromTunnel(node2, vniX, ipv4(portTunnel, x1, "10.10.0.1", x5, "10.10.0.5")), drop},
		{"tunnel, VNI X from node2 -> a pod: not the pod pipeline", fromTunnel(node2, vniX, ipv4(portTunnel, x5, "10.10.0.5", router, "10.244.0.5")), drop},
		{"tunnel, an unused VNI from node2 -> a pod: not the pod pipeline", fromTunnel(node2, 0x8000ff, ipv4(portTunnel, x5, "10.10.0.5", router, "10.244.0.5")), drop},
		{"tunnel, a namespace id from node2 -> a pod: delivered (the pod network)", fromTunnel(node2, 0x10, ipv4(portTunnel, router, "10.244.1.5", router, "10.244.0.5")), want{port: portPod}},
		{"tunnel, a namespace id from node2 -> x1: dropped", fromTunnel(node2, 0x10, ipv4(portTunnel, x5, "10.10.0.5", x1, "10.10.0.1")), drop},
		{"ARP x1 for x2: answered", arpRequest(portX1, x1, "10.10.0.1", "10.10.0.2"), want{arp: x2}},
		{"ARP x1 for x5 (remote): answered", arpRequest(portX1, x1, "10.10.0.1", "10.10.0.5"), want{arp: x5}},
		{"ARP y1 for 10.10.0.2 (y2, remote): answered with y2's MAC", arpRequest(portY1, y1, "10.10.0.1", "10.10.0.2"), want{arp: y2}},
		{"ARP x1 for 10.10.0.3 (only in VNI Y): dropped", arpRequest(portX1, x1, "10.10.0.1", "10.10.0.3"), drop},
		{"ARP x1 for its own address: dropped", arpRequest(portX1, x1, "10.10.0.1", "10.10.0.1"), drop},
		{"ARP x1 for the router: dropped", arpRequest(portX1, x1, "10.10.0.1", "10.244.0.1"), drop},
		{"ARP from a pod for x1: not answered", arpRequest(portPod, pod, "10.244.0.5", "10.10.0.1"), drop},
		{"ARP x1 with a spoofed sender: dropped", arpRequest(portX1, x1, "10.10.0.9", "10.10.0.2"), drop},

		{"IPv6 x61 -> x62, same VNI on this node", ipv6(portX61, x61, "fd00::1", x62, "fd00::2"), want{port: portX62}},
		{"IPv6 x62 -> x61, not y61 (same address)", ipv6(portX62, x62, "fd00::2", x61, "fd00::1"), want{port: portX61}},
		{"IPv6 x61 -> x65 on node2: tunnelled with the VNI", ipv6(portX61, x61, "fd00::1", x65, "fd00::5"), want{tunnel: "dst=" + node2 + ",proto=17,tos=0,ttl=64,frag=0x4000),udp(src=0,dst=4789,csum=0x0),vxlan(flags=0x8000000,vni=0x800001)"}},
		{"IPv6 y61 -> y62 on node3: tunnelled with its VNI", ipv6(portY61, y61, "fd00::1", y62, "fd00::2"), want{tunnel: "dst=" + node3 + ",proto=17,tos=0,ttl=64,frag=0x4000),udp(src=0,dst=4789,csum=0x0),vxlan(flags=0x8000000,vni=0x800002)"}},
		{"IPv6 y61 -> x62's MAC and address: dropped", ipv6(portY61, y61, "fd00::1", x62, "fd00::2"), drop},
		{"IPv6 x61 -> y62 on node3: not tunnelled", ipv6(portX61, x61, "fd00::1", y62, "fd00::2"), drop},
		{"IPv6 x61 spoofing x62's address: dropped", ipv6(portX61, x61, "fd00::2", x62, "fd00::2"), drop},
		{"IPv6 x61 spoofing y61's MAC: dropped", ipv6(portX61, y61, "fd00::1", x62, "fd00::2"), drop},
		{"IPv6 x61 to all nodes: dropped", ipv6(portX61, x61, "fd00::1", "33:33:00:00:00:01", "ff02::1"), drop},
		{"IPv6 from x1 (an IPv4 attachment): dropped", ipv6(portX1, x1, "fd00::9", x62, "fd00::2"), drop},
		{"IPv6 x61 -> a pod's MAC: dropped", ipv6(portX61, x61, "fd00::1", pod, "fd00::10"), drop},
		{"IPv6 tunnel, VNI X from node2 -> x61", fromTunnel(node2, vniX, ipv6(portTunnel, x65, "fd00::5", x61, "fd00::1")), want{port: portX61}},
		{"IPv6 tunnel, VNI Y from node3 -> y61 (same address as x61)", fromTunnel(node3, vniY, ipv6(portTunnel, y62, "fd00::2", y61, "fd00::1")), want{port: portY61}},
		{"IPv6 tunnel, VNI Y from node3 -> x61's MAC: dropped", fromTunnel(node3, vniY, ipv6(portTunnel, y62, "fd00::2", x61, "fd00::1")), drop},
		{"IPv6 tunnel, VNI X from node2 -> x65: never tunnelled again", fromTunnel(node2, vniX, ipv6(portTunnel, x61, "fd00::1", x65, "fd00::5")), drop},
		{"NS x61 for x62: answered as x62", solicit(portX61, x61, "fd00::1", "fd00::2", x61), want{na: x62}},
		{"NS x61 for x62, no source link-layer address: answered as x62", solicit(portX61, x61, "fd00::1", "fd00::2", none), want{na: x62}},
		{"NS x61 for x62 from :: (duplicate-address probe): to x62's port", solicit(portX61, x61, "::", "fd00::2", none), want{port: portX62}},
		{"NS x61 for x65 (remote): answered as x65", solicit(portX61, x61, "fd00::1", "fd00::5", x61), want{na: x65}},
		{"NS y61 for fd00::2 (y62, remote): answered as y62", solicit(portY61, y61, "fd00::1", "fd00::2", y61), want{na: y62}},
		{"NS x61 from :: for x65 (remote, duplicate-address probe): tunnelled to node2", solicit(portX61, x61, "::", "fd00::5", none), want{tunnel: "dst=" + node2 + ",proto=17,tos=0,ttl=64,frag=0x4000),udp(src=0,dst=4789,csum=0x0),vxlan(flags=0x8000000,vni=0x800001)"}},
		{"NS x61 from its address for its address: dropped", solicit(portX61, x61, "fd00::1", "fd00::1", x61), drop},
		{"NS tunnel, VNI X from node2 for x61: to x61's port", fromTunnel(node2, vniX, solicit(portTunnel, x65, "fd00::5", "fd00::1", x65)), want{port: portX61}},
		{"NS tunnel, VNI Y from node3 for fd00::2 (x62's in VNI X): dropped", fromTunnel(node3, vniY, solicit(portTunnel, y62, "fd00::2", "fd00::2", y62)), drop},
		{"NS tunnel, VNI X from node2 for x65: never tunnelled again", fromTunnel(node2, vniX, solicit(portTunnel, x61, "fd00::1", "fd00::5", x61)), drop},
		{"NS x61 for fd00::3 (no attachment): dropped", solicit(portX61, x61, "fd00::1", "fd00::3", x61), drop},
		{"NS x61 for its own address: dropped", solicit(portX61, x61, "::", "fd00::1", none), drop},
		{"NS x61 with another MAC as its source link-layer address: dropped", solicit(portX61, x61, "fd00::1", "fd00::2", x62), drop},
		{"NS x61 from another address: dropped", solicit(portX61, x61, "fd00::9", "fd00::2", x61), drop},
		{"NS from a pod for x61: dropped", solicit(portPod, pod, "fd00::10", "fd00::1", pod), drop},
		{"NA x62 to x61: delivered", advert(portX62, x62, "fd00::2", x61, "fd00::1", "fd00::2", x62), want{port: portX61}},
		{"NA x61 to x65 (remote): tunnelled", advert(portX61, x61, "fd00::1", x65, "fd00::5", "fd00::1", none), want{tunnel: "dst=" + node2 + ",proto=17,tos=0,ttl=64,frag=0x4000),udp(src=0,dst=4789,csum=0x0),vxlan(flags=0x8000000,vni=0x800001)"}},
		{"NA x62 for x61's address: dropped", advert(portX62, x62, "fd00::2", x61, "fd00::1", "fd00::1", x62), drop},
		{"NA x62 with x61's MAC as target link-layer address: dropped", advert(portX62, x62, "fd00::2", x61, "fd00::1", "fd00::2", x61), drop},
		{"NA x62 to all nodes: dropped", advert(portX62, x62, "fd00::2", "33:33:00:00:00:01", "ff02::1", "fd00::2", x62), drop},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := sb.Appctl("ofproto/trace", "br0", tc.flow)
			if err != nil {
				t.Fatal(err)
			}
			// The pod pipeline recirculates (conntrack): the last pass
			// decides.
			i := strings.LastIndex(out, "Datapath actions:")
			if i < 0 {
				t.Fatalf("no datapath actions:\n%s", out)
			}
			dp := strings.TrimSpace(strings.SplitN(out[i+len("Datapath actions:"):], "\n", 2)[0])
			var ports []string
			for _, m := range outputRE.FindAllStringSubmatch(out, -1) {
				ports = append(ports, m[1])
			}
			final := ""
			if j := strings.Index(out, "Final flow:"); j >= 0 {
				final = strings.SplitN(out[j:], "\n", 2)[0]
			}
			w := tc.want
			switch {
			case w.port != 0:
				if dp == "drop" || !slices.Equal(ports, []string{fmt.Sprint(w.port)}) {
					t.Errorf("want output to port %d only; outputs %v, datapath %q:\n%s", w.port, ports, dp, out)
				}
			case w.tunnel != "":
				if !strings.Contains(dp, w.tunnel) || !slices.Equal(ports, []string{fmt.Sprint(portTunnel)}) {
					t.Errorf("want a tunnel with %s; outputs %v, datapath %q:\n%s", w.tunnel, ports, dp, out)
				}
			case w.na != "":
				if dp == "drop" || !strings.Contains(out, "IN_PORT") || !strings.Contains(final, "icmp_type=136") || !strings.Contains(final, "nd_tll="+w.na) ||
					!strings.Contains(final, "dl_src="+w.na) || !strings.Contains(dp, "nd_ext(nd_reserved=0x60000000,nd_options_type=2)") {
					t.Errorf("want an advertisement from %s out of IN_PORT; final %q, datapath %q:\n%s", w.na, final, dp, out)
				}
			case w.arp != "":
				if dp == "drop" || !strings.Contains(out, "IN_PORT") || !strings.Contains(final, "arp_op=2") || !strings.Contains(final, "arp_sha="+w.arp) {
					t.Errorf("want an ARP reply from %s out of IN_PORT; final %q, datapath %q:\n%s", w.arp, final, dp, out)
				}
			default:
				if dp != "drop" {
					t.Errorf("want a drop, datapath %q:\n%s", dp, out)
				}
			}
		})
	}
}
