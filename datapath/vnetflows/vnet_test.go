package vnetflows

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
	"nodeflow/model/vnet"
)

const (
	vniX uint32 = 0x800001
	vniY uint32 = 0x800002
)

func local(ns, name string, vni uint32, port uint32, ip string) Local {
	a := netip.MustParseAddr(ip)
	return Local{Namespace: ns, Name: name, VNI: vni, Port: port, IP: a, MAC: vnet.MACOf(vni, a)}
}

func remote(ns, name string, vni uint32, ip, host string) Remote {
	a := netip.MustParseAddr(ip)
	return Remote{Namespace: ns, Name: name, IP: a, MAC: vnet.MACOf(vni, a), HostIP: netip.MustParseAddr(host)}
}

var testConfig = Config{TunnelPort: 1, HostIP: netip.MustParseAddr("172.30.0.11")}

func strs(fs []openflow.Flow) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.String())
	}
	return out
}

// TestLocalFlows spells out one local attachment's flows, as ovs-ofctl
// prints them (TestOnSwitch checks the encoding against a real switch).
func TestLocalFlows(t *testing.T) {
	fs, err := LocalFlows(local("t", "a", vniX, 10, "10.10.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	mac := vnet.MACOf(vniX, netip.MustParseAddr("10.10.0.1")).String()
	want := []string{
		" priority=100,in_port=10 actions=set_field:0x40/0x40->reg0,goto_table:100",
		" table=100, priority=100,ip,in_port=10,dl_src=" + mac + ",nw_src=10.10.0.1 actions=set_field:0x800001/0xffffff->reg1,goto_table:110",
		" table=100, priority=100,arp,in_port=10,dl_src=" + mac + ",arp_spa=10.10.0.1,arp_sha=" + mac + " actions=set_field:0x800001/0xffffff->reg1,goto_table:105",
		" table=105, priority=110,arp,in_port=10,arp_tpa=10.10.0.1,arp_op=1 actions=drop",
		" table=105, priority=100,arp,reg1=0x800001/0xffffff,arp_tpa=10.10.0.1,arp_op=1 actions=move:NXM_OF_ETH_SRC[]->NXM_OF_ETH_DST[],set_field:" + mac +
			"->eth_src,set_field:2->arp_op,move:NXM_NX_ARP_SHA[]->NXM_NX_ARP_THA[],move:NXM_OF_ARP_SPA[]->NXM_OF_ARP_TPA[],set_field:" + mac +
			"->arp_sha,set_field:10.10.0.1->arp_spa,IN_PORT",
		" table=110, priority=100,ip,reg1=0x800001/0xffffff,dl_dst=" + mac + ",nw_dst=10.10.0.1 actions=output:10",
	}
	got := strs(fs)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("local flows:\n--- got\n%s\n--- want\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	checkTables(t, LocalOwner("t", "a"), fs)
}

// TestLocalFlows6 spells out an IPv6 attachment's flows: neighbour
// discovery checked in port security, solicitations forwarded to their
// target by its solicited-node address.
func TestLocalFlows6(t *testing.T) {
	fs, err := LocalFlows(local("t", "a", vniX, 10, "fd00::1:2"))
	if err != nil {
		t.Fatal(err)
	}
	mac := vnet.MACOf(vniX, netip.MustParseAddr("fd00::1:2")).String()
	const vni = "set_field:0x800001/0xffffff->reg1,goto_table:110"
	const answer = "set_field:0x800001/0xffffff->reg1,goto_table:105"
	want := []string{
		" priority=100,in_port=10 actions=set_field:0x40/0x40->reg0,goto_table:100",
		" table=100, priority=120,icmp6,in_port=10,dl_src=" + mac + ",ipv6_src=fd00::1:2,icmp_type=135,icmp_code=0,nd_sll=" + mac + " actions=" + answer,
		" table=100, priority=120,icmp6,in_port=10,dl_src=" + mac + ",ipv6_src=fd00::1:2,icmp_type=135,icmp_code=0,nd_sll=00:00:00:00:00:00 actions=" + answer,
		" table=100, priority=120,icmp6,in_port=10,dl_src=" + mac + ",ipv6_src=::,icmp_type=135,icmp_code=0,nd_sll=00:00:00:00:00:00 actions=" + vni,
		" table=100, priority=120,icmp6,in_port=10,dl_src=" + mac + ",ipv6_src=fd00::1:2,icmp_type=136,icmp_code=0,nd_target=fd00::1:2,nd_tll=" + mac + " actions=" + vni,
		" table=100, priority=120,icmp6,in_port=10,dl_src=" + mac + ",ipv6_src=fd00::1:2,icmp_type=136,icmp_code=0,nd_target=fd00::1:2,nd_tll=00:00:00:00:00:00 actions=" + vni,
		" table=100, priority=110,icmp6,in_port=10,icmp_type=135 actions=drop",
		" table=100, priority=110,icmp6,in_port=10,icmp_type=136 actions=drop",
		" table=100, priority=100,ipv6,in_port=10,dl_src=" + mac + ",ipv6_src=fd00::1:2 actions=" + vni,
		" table=105, priority=110,icmp6,in_port=10,icmp_type=135,icmp_code=0,nd_target=fd00::1:2 actions=drop",
		" table=105, priority=100,icmp6,reg1=0x800001/0xffffff,icmp_type=135,icmp_code=0,nd_target=fd00::1:2 actions=move:NXM_OF_ETH_SRC[]->NXM_OF_ETH_DST[],set_field:" + mac + "->eth_src,move:NXM_NX_IPV6_SRC[]->NXM_NX_IPV6_DST[],set_field:fd00::1:2->ipv6_src,set_field:136->icmpv6_type,set_field:1610612736->nd_reserved,set_field:2->nd_options_type,resubmit(,105)",
		" table=105, priority=100,icmp6,reg1=0x800001/0xffffff,ipv6_src=fd00::1:2,icmp_type=136,icmp_code=0,nd_target=fd00::1:2 actions=set_field:" + mac + "->nd_tll,IN_PORT",
		" table=110, priority=110,icmp6,in_port=10,icmp_type=135,icmp_code=0,nd_target=fd00::1:2 actions=drop",
		" table=110, priority=100,ipv6,reg1=0x800001/0xffffff,dl_dst=" + mac + ",ipv6_dst=fd00::1:2 actions=output:10",
		" table=110, priority=100,icmp6,reg1=0x800001/0xffffff,ipv6_dst=ff02::1:ff01:2,icmp_type=135,icmp_code=0,nd_target=fd00::1:2 actions=output:10",
	}
	got := strs(fs)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("local flows:\n--- got\n%s\n--- want\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	checkTables(t, LocalOwner("t", "a"), fs)
}

func TestSolicitedNode(t *testing.T) {
	for ip, want := range map[string]string{
		"fd00::1":                  "ff02::1:ff00:1",
		"2001:db8::abcd:1234:5678": "ff02::1:ff34:5678",
		"fd00:1:2:3:4:5:ffff:ffff": "ff02::1:ffff:ffff",
	} {
		if got := SolicitedNode(netip.MustParseAddr(ip)); got != netip.MustParseAddr(want) {
			t.Errorf("SolicitedNode(%s) = %s, want %s", ip, got, want)
		}
	}
}

// checkTables: every flow in a table that admits FeatureVNet, going only
// to the virtual networks' tables.
func checkTables(t *testing.T, owner string, fs []openflow.Flow) {
	t.Helper()
	f, err := plan.OwnerFeature(owner)
	if err != nil || f != plan.FeatureVNet {
		t.Fatalf("owner %s: feature %s %v", owner, f, err)
	}
	for _, fl := range fs {
		tb, ok := plan.LookupTable(plan.Pod, plan.TableID(fl.Table))
		if !ok || !tb.Allows(f) {
			t.Errorf("%s: table %d does not admit %s", fl, fl.Table, f)
		}
		for _, in := range fl.Instructions {
			if g, ok := in.(openflow.GotoTable); ok && g.Table < uint8(plan.PodVNetPortSecurity) {
				t.Errorf("%s: goes back to the pod pipeline (table %d)", fl, g.Table)
			}
		}
	}
}

func TestVNIFlows(t *testing.T) {
	rs := []Remote{
		remote("t", "r1", vniX, "10.10.0.3", "172.30.0.12"),
		remote("t", "r2", vniX, "10.10.0.4", "172.30.0.12"),
		remote("t", "r3", vniX, "10.10.0.5", "172.30.0.13"),
		// Problems, each left out alone.
		remote("t", "dup", vniX, "10.10.0.3", "172.30.0.14"),
		remote("t", "taken", vniX, "10.10.0.1", "172.30.0.14"),
		remote("t", "self", vniX, "10.10.0.9", "172.30.0.11"),
		remote("t", "v6host", vniX, "10.10.0.10", "fd00::1"),
		{Namespace: "t", Name: "nomac", IP: netip.MustParseAddr("10.10.0.11"), HostIP: netip.MustParseAddr("172.30.0.12")},
		// IPv6, over the same IPv4 tunnel; then its problems.
		remote("t", "r6", vniX, "fd00::3", "172.30.0.12"),
		remote("t", "dup6", vniX, "fd00::3", "172.30.0.13"),
		remote("t", "taken6", vniX, "fd00::1", "172.30.0.13"),
		remote("t", "mapped", vniX, "::ffff:10.10.0.12", "172.30.0.12"),
	}
	fs, problems, err := VNIFlows(testConfig, vniX, rs, []netip.Addr{netip.MustParseAddr("10.10.0.1"), netip.MustParseAddr("fd00::1")})
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 8 {
		t.Errorf("%d problems, want 8: %v", len(problems), problems)
	}
	for i, name := range []string{"dup", "taken", "self", "v6host", "nomac", "dup6", "taken6", "mapped"} {
		if i >= len(problems) || !strings.Contains(problems[i].Error(), "attachment t/"+name+":") || !errors.Is(problems[i], ErrInvalid) {
			t.Errorf("problem %d: %v, want one naming t/%s", i, problems, name)
		}
	}
	got := strings.Join(strs(fs), "\n")
	mac3 := vnet.MACOf(vniX, netip.MustParseAddr("10.10.0.3")).String()
	mac63 := vnet.MACOf(vniX, netip.MustParseAddr("fd00::3")).String()
	for _, want := range []string{
		" table=110, priority=100,ip,reg0=0x40/0x40,reg1=0x800001/0xffffff,dl_dst=" + mac3 + ",nw_dst=10.10.0.3 actions=set_field:172.30.0.12->tun_dst,set_field:0x800001->tun_id,output:1",
		" table=15, priority=200,tun_id=0x800001,tun_src=172.30.0.12,in_port=1 actions=set_field:0x800001/0xffffff->reg1,goto_table:110",
		" table=15, priority=200,tun_id=0x800001,tun_src=172.30.0.13,in_port=1 actions=set_field:0x800001/0xffffff->reg1,goto_table:110",
		" table=105, priority=100,arp,reg1=0x800001/0xffffff,arp_tpa=10.10.0.3,arp_op=1 actions=",
		" table=110, priority=100,ipv6,reg0=0x40/0x40,reg1=0x800001/0xffffff,dl_dst=" + mac63 + ",ipv6_dst=fd00::3 actions=set_field:172.30.0.12->tun_dst,set_field:0x800001->tun_id,output:1",
		" table=110, priority=100,icmp6,reg0=0x40/0x40,reg1=0x800001/0xffffff,ipv6_dst=ff02::1:ff00:3,icmp_type=135,icmp_code=0,nd_target=fd00::3 actions=set_field:172.30.0.12->tun_dst,set_field:0x800001->tun_id,output:1",
		" table=105, priority=100,icmp6,reg1=0x800001/0xffffff,icmp_type=135,icmp_code=0,nd_target=fd00::3 actions=move:NXM_OF_ETH_SRC[]->NXM_OF_ETH_DST[],set_field:" + mac63 + "->eth_src,move:NXM_NX_IPV6_SRC[]->NXM_NX_IPV6_DST[],set_field:fd00::3->ipv6_src,set_field:136->icmpv6_type,set_field:1610612736->nd_reserved,set_field:2->nd_options_type,resubmit(,105)",
		" table=105, priority=100,icmp6,reg1=0x800001/0xffffff,ipv6_src=fd00::3,icmp_type=136,icmp_code=0,nd_target=fd00::3 actions=set_field:" + mac63 + "->nd_tll,IN_PORT",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no flow %q in\n%s", want, got)
		}
	}
	// Three IPv4 remotes: an ARP answer and a tunnel egress each; one
	// IPv6 remote: the answer to its solicitations (two flows), a tunnel
	// egress and its duplicate-address probes; one ingress per node.
	if len(fs) != 3*2+4+2 {
		t.Errorf("%d flows, want 12:\n%s", len(fs), got)
	}
	if strings.Contains(got, "arp_tpa=fd00") || strings.Count(got, "fd00::3") != 6 {
		t.Errorf("the IPv6 remote's flows:\n%s", got)
	}
	checkTables(t, VNIOwner(vniX), fs)

	if _, _, err := VNIFlows(testConfig, 0x7fffff, rs, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("namespace-id range VNI: %v", err)
	}
	if _, _, err := VNIFlows(Config{}, vniX, rs, nil); err == nil {
		t.Error("no tunnel port: no error")
	}
}

func TestValidate(t *testing.T) {
	good := local("t", "a", vniX, 10, "10.10.0.1")
	tests := []struct {
		name  string
		edit  func(*Local)
		field string
	}{
		{"vni in the namespace-id range", func(a *Local) { a.VNI = 0x10 }, "spec.vni"},
		{"no port", func(a *Local) { a.Port = 0 }, "port"},
		{"reserved port", func(a *Local) { a.Port = openflow.PortMax }, "port"},
		{"short mac", func(a *Local) { a.MAC = net.HardwareAddr{1, 2} }, "status.mac"},
		{"multicast mac", func(a *Local) { a.MAC = net.HardwareAddr{1, 0, 0, 0, 0, 1} }, "status.mac"},
		{"ipv4-mapped ipv6", func(a *Local) { a.IP = netip.MustParseAddr("::ffff:10.10.0.1") }, "status.ip"},
		{"ipv6 multicast", func(a *Local) { a.IP = netip.MustParseAddr("ff02::1") }, "status.ip"},
		{"ipv6 unspecified", func(a *Local) { a.IP = netip.IPv6Unspecified() }, "status.ip"},
		{"ipv6 loopback", func(a *Local) { a.IP = netip.IPv6Loopback() }, "status.ip"},
		{"ipv6 with a zone", func(a *Local) { a.IP = netip.MustParseAddr("fd00::1%eth0") }, "status.ip"},
		{"broadcast", func(a *Local) { a.IP = netip.MustParseAddr("255.255.255.255") }, "status.ip"},
		{"no ip", func(a *Local) { a.IP = netip.Addr{} }, "status.ip"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := good
			tt.edit(&a)
			_, err := LocalFlows(a)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "t/a: "+tt.field) {
				t.Errorf("got %v, want an error naming t/a and %s", err, tt.field)
			}
		})
	}
}

func TestOwners(t *testing.T) {
	if LocalOwner("ns", "a") == VNIOwner(vniX) || !strings.HasPrefix(VNIOwner(vniX), VNIOwnerPrefix) {
		t.Error("owners")
	}
	if VNIOwner(vniX) != "vnet/_vni/8388609" {
		t.Errorf("VNIOwner = %s", VNIOwner(vniX))
	}
}
