package egressfirewallflows

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/sirupsen/logrus"

	"nodeflow/datapath/plan"
	"nodeflow/internal/testutil/flowtest"
	"nodeflow/lib/openflow"
	"nodeflow/lib/openflow/ofconn"
	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

// testSources: the cluster DNS Service of namespace 0x42 at 10.96.0.10
// and fd00:10:96::a, with endpoints on this node (10.244.0.20,
// fd00:10:244::20) and another (10.244.1.20); the node's resolver
// 172.30.0.100 and a node-local cache at 169.254.20.10.
func testSources() DNSSources {
	return DNSSources{
		Services: []DNSService{{Name: "kube-system/kube-dns", NamespaceID: 0x42,
			ClusterIPs: addrs("10.96.0.10", "fd00:10:96::a"), Endpoints: addrs("10.244.0.20", "10.244.1.20", "fd00:10:244::20")}},
		Resolvers: pfx("172.30.0.100/32", "169.254.20.10/32"),
	}
}

func TestDNSFlowsTrusted(t *testing.T) {
	got, err := DNSFlows(addrs("fd00:10:244::5", "10.244.0.5", "10.244.0.6"), DNSSources{
		Services:  []DNSService{{Name: "kube-system/kube-dns", NamespaceID: 0x42, ClusterIPs: addrs("10.96.0.10", "fd00:10:96::a"), Endpoints: addrs("10.244.2.3")}},
		Resolvers: pfx("169.254.20.10/32"),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		" table=50, priority=44000,udp,nw_dst=10.244.0.5,tp_src=53 actions=goto_table:60",
		" table=50, priority=45000,udp,nw_dst=10.244.0.5,tp_src=53 actions=conjunction(1,1/2)",
		" table=50, priority=45000,conj_id=1 actions=set_field:0x3000/0xf000->reg0,resubmit(,120),controller(id=28262,userdata=03,meter_id=3)",
		" table=50, priority=44000,udp,nw_dst=10.244.0.6,tp_src=53 actions=goto_table:60",
		" table=50, priority=45000,udp,nw_dst=10.244.0.6,tp_src=53 actions=conjunction(2,1/2)",
		" table=50, priority=45000,conj_id=2 actions=set_field:0x3000/0xf000->reg0,resubmit(,120),controller(id=28262,userdata=03,meter_id=3)",
		" table=50, priority=44000,udp6,ipv6_dst=fd00:10:244::5,tp_src=53 actions=goto_table:60",
		" table=50, priority=45000,udp6,ipv6_dst=fd00:10:244::5,tp_src=53 actions=conjunction(3,1/2)",
		" table=50, priority=45000,conj_id=3 actions=set_field:0x3000/0xf000->reg0,resubmit(,120),controller(id=28262,userdata=03,meter_id=3)",
		// Through the Service: a reply, from a pod of its namespace.
		" table=50, priority=45000,ct_state=+rpl+trk,udp,reg1=0x42/0xffffff,nw_src=10.96.0.10,tp_src=53 actions=conjunction(1,2/2),conjunction(2,2/2)",
		// Straight from an endpoint: a pod of its namespace.
		" table=50, priority=45000,udp,reg1=0x42/0xffffff,nw_src=10.244.2.3,tp_src=53 actions=conjunction(1,2/2),conjunction(2,2/2)",
		// A resolver: from the gateway or the host, no service's reply.
		" table=50, priority=45000,ct_state=+trk-snat,udp,reg0=0x3/0xf,nw_src=169.254.20.10,tp_src=53 actions=conjunction(1,2/2),conjunction(2,2/2)",
		" table=50, priority=45000,ct_state=+trk-snat,udp,reg0=0x4/0xf,nw_src=169.254.20.10,tp_src=53 actions=conjunction(1,2/2),conjunction(2,2/2)",
		" table=50, priority=45000,ct_state=+rpl+trk,udp6,reg1=0x42/0xffffff,ipv6_src=fd00:10:96::a,tp_src=53 actions=conjunction(3,2/2)",
	}
	if len(got) != len(want) {
		t.Fatalf("%d flows, want %d:\n%s", len(got), len(want), flowtest.Render(got))
	}
	for i := range got {
		if s := got[i].String(); s != want[i] {
			t.Errorf("flow %d:\n got %s\nwant %s", i, s, want[i])
		}
	}

	// No source in a family: its pods' replies are only counted.
	got, err = DNSFlows(addrs("fd00:10:244::5"), DNSSources{Resolvers: pfx("169.254.20.10/32")})
	if err != nil || len(got) != 1 || got[0].Priority != uint16(plan.PriorityEgressFirewallDNSUntrusted) {
		t.Errorf("IPv6 pod, IPv4 sources only: %v\n%s", err, flowtest.Render(got))
	}
	// Repeated sources make one flow each.
	dup := DNSSources{Services: []DNSService{{Name: "a/b", NamespaceID: 1, ClusterIPs: addrs("10.96.0.10", "10.96.0.10")}, {Name: "a/c", NamespaceID: 1, ClusterIPs: addrs("10.96.0.10")}}}
	if got, err := DNSFlows(addrs("10.244.0.5"), dup); err != nil || len(got) != 4 {
		t.Errorf("repeated sources: %v\n%s", err, flowtest.Render(got))
	}
}

func TestDNSSourcesBadInput(t *testing.T) {
	for name, s := range map[string]DNSSources{
		"namespace id 0":          {Services: []DNSService{{Name: "kube-system/kube-dns", ClusterIPs: addrs("10.96.0.10")}}},
		"namespace id too large":  {Services: []DNSService{{Name: "kube-system/kube-dns", NamespaceID: 1 << 24, ClusterIPs: addrs("10.96.0.10")}}},
		"mapped ClusterIP":        {Services: []DNSService{{Name: "kube-system/kube-dns", NamespaceID: 1, ClusterIPs: addrs("::ffff:10.96.0.10")}}},
		"unspecified endpoint":    {Services: []DNSService{{Name: "kube-system/kube-dns", NamespaceID: 1, Endpoints: addrs("0.0.0.0")}}},
		"zoned endpoint":          {Services: []DNSService{{Name: "kube-system/kube-dns", NamespaceID: 1, Endpoints: addrs("fe80::1%eth0")}}},
		"unmasked resolver":       {Resolvers: pfx("169.254.20.10/24")},
		"zero resolver":           {Resolvers: []netip.Prefix{{}}},
		"mapped resolver network": {Resolvers: pfx("::ffff:169.254.20.10/128")},
	} {
		err := s.Validate()
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if _, ferr := DNSFlows(addrs("10.244.0.5"), s); ferr == nil {
			t.Errorf("%s: DNSFlows: no error", name)
		}
		if s.Trusts(DNSReply{Src: netip.MustParseAddr("10.96.0.10"), NamespaceID: 1, PktSource: 1, CtState: openflow.CtRpl | openflow.CtTrk}) {
			t.Errorf("%s: invalid sources trust a reply", name)
		}
	}
	many := make([]netip.Addr, plan.EgressFirewallDNSConjIDs.Size()+1)
	for i := range many {
		many[i] = netip.AddrFrom4([4]byte{10, 244, byte(i >> 8), byte(i)})
	}
	if _, err := DNSFlows(many, DNSSources{}); err == nil || !strings.Contains(err.Error(), "conjunction ids") {
		t.Errorf("too many pod addresses: %v", err)
	}
}

// TestDNSSourcesTrusts is the attribution table: what a reply must carry
// to be learned from.
func TestDNSSourcesTrusts(t *testing.T) {
	s := testSources()
	rpl := openflow.CtRpl | openflow.CtTrk | openflow.CtEst
	viaService := rpl | openflow.CtSNAT // a reply whose DNAT table 25 undid
	newTrk := openflow.CtNew | openflow.CtTrk
	pod, tunnel, gateway, host := uint32(plan.FromPod.Value()), uint32(plan.FromTunnel.Value()), uint32(plan.FromGateway.Value()), uint32(plan.FromHost.Value())
	for _, tc := range []struct {
		name  string
		r     DNSReply
		trust bool
	}{
		{"through the ClusterIP, from a pod of its namespace", DNSReply{netip.MustParseAddr("10.96.0.10"), 0x42, pod, viaService}, true},
		{"through the ClusterIP, over the tunnel", DNSReply{netip.MustParseAddr("10.96.0.10"), 0x42, tunnel, viaService}, true},
		{"through the IPv6 ClusterIP", DNSReply{netip.MustParseAddr("fd00:10:96::a"), 0x42, pod, viaService}, true},
		{"the ClusterIP, answered by another namespace's pod", DNSReply{netip.MustParseAddr("10.96.0.10"), 0x123, pod, viaService}, false},
		{"the ClusterIP, from outside the pod network", DNSReply{netip.MustParseAddr("10.96.0.10"), 0, gateway, viaService}, false},
		{"the ClusterIP, not a reply", DNSReply{netip.MustParseAddr("10.96.0.10"), 0x42, pod, newTrk}, false},
		{"an endpoint, asked straight", DNSReply{netip.MustParseAddr("10.244.0.20"), 0x42, pod, newTrk}, true},
		{"an endpoint on another node", DNSReply{netip.MustParseAddr("10.244.1.20"), 0x42, tunnel, newTrk}, true},
		{"an endpoint's address in another namespace", DNSReply{netip.MustParseAddr("10.244.0.20"), 0x123, pod, newTrk}, false},
		{"a pod that is no endpoint", DNSReply{netip.MustParseAddr("10.244.0.30"), 0x42, pod, newTrk}, false},
		{"another Service's ClusterIP", DNSReply{netip.MustParseAddr("10.96.5.5"), 0x42, pod, viaService}, false},
		{"the node's resolver, untracked in the service zone", DNSReply{netip.MustParseAddr("172.30.0.100"), 0, gateway, newTrk}, true},
		{"the node's resolver, a committed connection", DNSReply{netip.MustParseAddr("172.30.0.100"), 0, gateway, rpl}, true},
		{"a node-local cache, from the host", DNSReply{netip.MustParseAddr("169.254.20.10"), 0, host, newTrk}, true},
		{"a node-local cache through the gateway", DNSReply{netip.MustParseAddr("169.254.20.10"), 0, gateway, newTrk}, true},
		{"the resolver's address, a service's reply", DNSReply{netip.MustParseAddr("172.30.0.100"), 0, gateway, viaService}, false},
		{"the resolver's address from a pod", DNSReply{netip.MustParseAddr("172.30.0.100"), 0x123, pod, newTrk}, false},
		{"the resolver's address over the tunnel", DNSReply{netip.MustParseAddr("172.30.0.100"), 0x123, tunnel, newTrk}, false},
		{"the resolver's address, untracked", DNSReply{netip.MustParseAddr("172.30.0.100"), 0, gateway, 0}, false},
		{"another server outside", DNSReply{netip.MustParseAddr("198.51.100.1"), 0, gateway, newTrk}, false},
		{"an IPv4-mapped source is its IPv4 address", DNSReply{netip.MustParseAddr("::ffff:10.96.0.10"), 0x42, pod, viaService}, true},
	} {
		if got := s.Trusts(tc.r); got != tc.trust {
			t.Errorf("%s (%+v): trusted %v, want %v", tc.name, tc.r, got, tc.trust)
		}
	}
	if (DNSSources{}).Trusts(DNSReply{netip.MustParseAddr("10.96.0.10"), 0x42, pod, viaService}) {
		t.Error("no sources trust a reply")
	}
}

// TestOVSDNSTrust sends DNS replies through a sandboxed br0 with real
// conntrack: a stub classifier that loads each port's PktSource and
// namespace id as br0's does, the service zone with its un-DNAT (table
// 25), service DNATs (table 30), and the DNS learning flows. Each reply
// follows its query where it has one (through a Service, or a connection
// committed without NAT), and either reaches the agent (the learning
// packet-in) or routing (table 60, a packet-in with other userdata), as
// DNSSources says; and the agent's check (Trusts of DNSReplyOf) agrees
// with the flows on the metadata the switch sent.
func TestOVSDNSTrust(t *testing.T) {
	sb := ovstest.New(t, ovs.Options{Dummy: true})
	ovstest.AddDummyBridge(t, sb, "br0", 1, 2, 3, 4, 5, 6, 7, 8)
	// Ports: 1 a client pod (namespace 0x100), 2 the cluster DNS pod on
	// this node (0x42), 3 a tenant's DNS pod (0x123), 4 the tunnel from
	// a node with a cluster DNS pod (key 0x42), 5 the tunnel from a node
	// with a tenant's pod (key 0x123), 6 the patch port from breth0, 7
	// mp0, 8 a tenant's client pod (0x123).
	pods := addrs("10.244.0.5", "fd00:10:244::5", "10.244.0.8")
	fs, err := DNSFlows(pods, testSources())
	if err != nil {
		t.Fatal(err)
	}
	flowtest.InstallAndCompare(t, sb, "br0", fs)
	stub := []string{
		"table=0, priority=100,in_port=1 actions=set_field:0x1/0xf->reg0,set_field:0x100/0xffffff->reg1,goto_table:25",
		"table=0, priority=100,in_port=2 actions=set_field:0x1/0xf->reg0,set_field:0x42/0xffffff->reg1,goto_table:25",
		"table=0, priority=100,in_port=3 actions=set_field:0x1/0xf->reg0,set_field:0x123/0xffffff->reg1,goto_table:25",
		"table=0, priority=100,in_port=4 actions=set_field:0x2/0xf->reg0,set_field:0x42/0xffffff->reg1,goto_table:25",
		"table=0, priority=100,in_port=5 actions=set_field:0x2/0xf->reg0,set_field:0x123/0xffffff->reg1,goto_table:25",
		"table=0, priority=100,in_port=6 actions=set_field:0x3/0xf->reg0,goto_table:25",
		"table=0, priority=100,in_port=7 actions=set_field:0x4/0xf->reg0,goto_table:25",
		"table=0, priority=100,in_port=8 actions=set_field:0x1/0xf->reg0,set_field:0x123/0xffffff->reg1,goto_table:25",
		"table=25, priority=10,ip actions=ct(zone=65000,nat,table=30)",
		"table=25, priority=10,ipv6 actions=ct(zone=65000,nat,table=30)",
		// The cluster DNS Service, to its endpoint on this node or on
		// the other by the client's port.
		"table=30, priority=100,ct_state=+new+trk,udp,in_port=1,nw_dst=10.96.0.10,tp_dst=53,tp_src=40001 actions=ct(commit,zone=65000,nat(dst=10.244.0.20:53),table=60)",
		"table=30, priority=100,ct_state=+new+trk,udp,in_port=1,nw_dst=10.96.0.10,tp_dst=53,tp_src=40002 actions=ct(commit,zone=65000,nat(dst=10.244.1.20:53),table=60)",
		"table=30, priority=100,ct_state=+new+trk,udp6,in_port=1,ipv6_dst=fd00:10:96::a,tp_dst=53 actions=ct(commit,zone=65000,nat(dst=[fd00:10:244::20]:53),table=60)",
		// A tenant's Service, and a tenant's Service that claims the
		// cluster DNS ClusterIP (an externalIP the proxy let through)
		// for the tenant's client, answered on this node or another.
		"table=30, priority=100,ct_state=+new+trk,udp,nw_dst=10.96.5.5,tp_dst=53 actions=ct(commit,zone=65000,nat(dst=10.244.0.30:53),table=60)",
		"table=30, priority=100,ct_state=+new+trk,udp,in_port=8,nw_dst=10.96.0.10,tp_dst=53,tp_src=40007 actions=ct(commit,zone=65000,nat(dst=10.244.0.30:53),table=60)",
		"table=30, priority=100,ct_state=+new+trk,udp,in_port=8,nw_dst=10.96.0.10,tp_dst=53,tp_src=40008 actions=ct(commit,zone=65000,nat(dst=10.244.1.30:53),table=60)",
		// A tenant's Service claiming the node's resolver, with an
		// endpoint outside the cluster; and a connection to the resolver
		// committed without NAT (as NetworkPolicy commits).
		"table=30, priority=100,ct_state=+new+trk,udp,in_port=8,nw_dst=172.30.0.100,tp_dst=53 actions=ct(commit,zone=65000,nat(dst=203.0.113.9:53),table=60)",
		"table=30, priority=100,ct_state=+new+trk,udp,in_port=1,nw_dst=172.30.0.100,tp_dst=53 actions=ct(commit,zone=65000,table=60)",
		"table=30, priority=0 actions=goto_table:50",
		// Routing: what reaches the pods comes to the test; queries
		// have done what they are for (a connection) and stop.
		"table=60, priority=100,ip,nw_dst=10.244.0.5 actions=controller(id=28262,userdata=99)",
		"table=60, priority=100,ipv6,ipv6_dst=fd00:10:244::5 actions=controller(id=28262,userdata=99)",
		"table=60, priority=100,ip,nw_dst=10.244.0.8 actions=controller(id=28262,userdata=99)",
		"table=60, priority=0 actions=drop",
	}
	for _, s := range stub {
		if _, err := sb.Ofctl("-O", "OpenFlow15", "add-flow", "br0", s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l := logrus.New()
	l.SetOutput(io.Discard)
	pins := make(chan *openflow.PacketIn, 16)
	var once sync.Once
	c, err := ofconn.Dial(ctx, "unix:"+sb.MgmtSock("br0"), ofconn.Options{Logger: l, ControllerID: plan.ControllerID,
		Handlers: ofconn.Handlers{PacketIn: func(m ofconn.AsyncMessage) {
			if p, ok := m.Message.(*openflow.PacketIn); ok {
				select {
				case pins <- p:
				default:
					once.Do(func() { t.Error("packet-ins overflow") })
				}
			}
		}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Apply(ctx, DNSMeter().Mod(openflow.MeterAdd)); err != nil {
		t.Fatal(err)
	}

	type pkt struct {
		port     int
		src, dst string
		sport    uint16
		dport    uint16
	}
	send := func(p pkt) {
		t.Helper()
		frame := flowtest.UDPFrame(t, p.src, p.dst, p.sport, p.dport, []byte("dns"))
		if _, err := sb.Appctl("netdev-dummy/receive", fmt.Sprintf("p%d", p.port), fmt.Sprintf("%x", frame)); err != nil {
			t.Fatal(err)
		}
	}
	const client, client6, tenant = "10.244.0.5", "fd00:10:244::5", "10.244.0.8"
	untrusted := 0
	for _, tc := range []struct {
		name  string
		query *pkt
		reply pkt
		trust bool
		// src is the reply's source when it reaches table 50.
		src string
	}{
		{"through the ClusterIP, endpoint on this node", &pkt{1, client, "10.96.0.10", 40001, 53}, pkt{2, "10.244.0.20", client, 53, 40001}, true, "10.96.0.10"},
		{"through the ClusterIP, endpoint on another node", &pkt{1, client, "10.96.0.10", 40002, 53}, pkt{4, "10.244.1.20", client, 53, 40002}, true, "10.96.0.10"},
		{"through the IPv6 ClusterIP", &pkt{1, client6, "fd00:10:96::a", 40003, 53}, pkt{2, "fd00:10:244::20", client6, 53, 40003}, true, "fd00:10:96::a"},
		{"straight from an endpoint", nil, pkt{2, "10.244.0.20", client, 53, 40004}, true, "10.244.0.20"},
		{"straight from an endpoint on another node", nil, pkt{4, "10.244.1.20", client, 53, 40005}, true, "10.244.1.20"},
		{"a tenant's Service", &pkt{1, client, "10.96.5.5", 40006, 53}, pkt{3, "10.244.0.30", client, 53, 40006}, false, "10.96.5.5"},
		{"a tenant's Service claiming the cluster DNS ClusterIP", &pkt{8, tenant, "10.96.0.10", 40007, 53}, pkt{3, "10.244.0.30", tenant, 53, 40007}, false, "10.96.0.10"},
		{"the same, answered from another node", &pkt{8, tenant, "10.96.0.10", 40008, 53}, pkt{5, "10.244.1.30", tenant, 53, 40008}, false, "10.96.0.10"},
		{"a tenant's pod with a former endpoint's address", nil, pkt{3, "10.244.0.20", client, 53, 40009}, false, "10.244.0.20"},
		{"the ClusterIP without a connection", nil, pkt{2, "10.96.0.10", client, 53, 40012}, false, "10.96.0.10"},
		{"the node's resolver, through the gateway", nil, pkt{6, "172.30.0.100", client, 53, 40013}, true, "172.30.0.100"},
		{"the node's resolver, a committed connection", &pkt{1, client, "172.30.0.100", 40011, 53}, pkt{6, "172.30.0.100", client, 53, 40011}, true, "172.30.0.100"},
		{"a node-local cache, from the host", nil, pkt{7, "169.254.20.10", client, 53, 40014}, true, "169.254.20.10"},
		{"a tenant's Service claiming the resolver, endpoint outside", &pkt{8, tenant, "172.30.0.100", 40010, 53}, pkt{6, "203.0.113.9", tenant, 53, 40010}, false, "172.30.0.100"},
		{"the cache's address from a pod", nil, pkt{3, "169.254.20.10", client, 53, 40015}, false, "169.254.20.10"},
		{"the resolver's address over the tunnel", nil, pkt{5, "172.30.0.100", client, 53, 40016}, false, "172.30.0.100"},
		{"another server outside", nil, pkt{6, "198.51.100.1", client, 53, 40017}, false, "198.51.100.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.query != nil {
				send(*tc.query)
			}
			send(tc.reply)
			var pin *openflow.PacketIn
			select {
			case pin = <-pins:
			case <-time.After(5 * time.Second):
				t.Fatalf("the reply reached neither the agent nor routing:\n%s", dump(t, sb))
			}
			learned := pin.Table == uint8(plan.PodEgressFirewall) && len(pin.Userdata) == 1 && pin.Userdata[0] == byte(plan.PacketInDNS)
			routed := pin.Table == 60 && len(pin.Userdata) == 1 && pin.Userdata[0] == 0x99
			if !learned && !routed {
				t.Fatalf("packet-in from table %d, userdata %x", pin.Table, pin.Userdata)
			}
			if learned != tc.trust {
				t.Fatalf("sent to the agent: %v, want %v (ct_state %#x, reg0 %#x, reg1 %#x)", learned, tc.trust, pin.CtState(), pin.Reg(0), pin.Reg(1))
			}
			if !learned {
				untrusted++
			}
			src := frameSrc(t, pin.Data)
			if src != netip.MustParseAddr(tc.src) {
				t.Errorf("source %s in table 50, want %s", src, tc.src)
			}
			if got := testSources().Trusts(DNSReplyOf(pin, src)); got != tc.trust {
				t.Errorf("the agent's check says %v, the flows %v (ct_state %#x, reg0 %#x, reg1 %#x)", got, tc.trust, pin.CtState(), pin.Reg(0), pin.Reg(1))
			}
		})
	}
	// Every reply that was not sent to the agent is counted by its pod's
	// flow at the untrusted priority (the switch adds the counts of the
	// datapath's flows in the background).
	counted := func() int {
		n := 0
		for _, line := range strings.Split(dump(t, sb), "\n") {
			if i := strings.Index(line, "n_packets="); i >= 0 && strings.Contains(line, fmt.Sprintf("priority=%d,", plan.PriorityEgressFirewallDNSUntrusted)) {
				var k int
				if _, err := fmt.Sscanf(line[i+len("n_packets="):], "%d", &k); err != nil {
					t.Fatalf("%s: %v", line, err)
				}
				n += k
			}
		}
		return n
	}
	if !poll(10*time.Second, func() bool { return counted() == untrusted }) {
		t.Errorf("untrusted flows counted %d replies, want %d", counted(), untrusted)
	}
	select {
	case p := <-pins:
		t.Errorf("a further packet-in from table %d", p.Table)
	default:
	}
}

// frameSrc returns the source address of an IP frame.
func frameSrc(t *testing.T, frame []byte) netip.Addr {
	t.Helper()
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	switch ip := p.NetworkLayer().(type) {
	case *layers.IPv4:
		a, _ := netip.AddrFromSlice(ip.SrcIP.To4())
		return a
	case *layers.IPv6:
		a, _ := netip.AddrFromSlice(ip.SrcIP)
		return a
	}
	t.Fatalf("no IP layer in %x", frame)
	return netip.Addr{}
}
