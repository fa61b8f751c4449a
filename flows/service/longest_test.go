package service

import (
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"nodeflow/flows/plan"
	"nodeflow/proxy"
	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

// Test scaffolding for the longest path: the seed's breth0 masquerade
// flows (node IP 172.18.0.3, service CIDR 10.96.0.0/16) and the br0 tables
// around the service tables, as docs/pipeline.md describes them. The real
// flows belong to the gateway and node owners; only tables 30 and 35 here
// come from this package. On both bridges ofport 2 is the patch port.
var (
	seedBreth0 = []string{
		"priority=500,ip,in_port=LOCAL,nw_dst=10.96.0.0/16 actions=ct(commit,table=2,zone=64001,nat(src=169.254.169.2))",
		"priority=500,ip,in_port=2,nw_src=10.96.0.0/16,nw_dst=169.254.169.2 actions=ct(table=3,zone=64001,nat)",
		"priority=500,ip,in_port=2,nw_src=172.18.0.3,nw_dst=169.254.169.2 actions=ct(commit,table=4,zone=64001,nat(dst=172.18.0.3))",
		"priority=500,ip,in_port=LOCAL,nw_dst=169.254.169.1 actions=ct(table=5,zone=64002,nat)",
		"table=2, actions=set_field:0a:58:0a:80:00:01->eth_dst,output:2",
		"table=3, actions=move:NXM_OF_ETH_DST[]->NXM_OF_ETH_SRC[],set_field:02:42:ac:12:00:03->eth_dst,LOCAL",
		"table=4, ip actions=ct(commit,table=3,zone=64002,nat(src=169.254.169.1))",
		"table=5, ip actions=ct(commit,table=2,zone=64001,nat)",
	}
	stubBr0Gateway = []string{
		"table=0, priority=100,in_port=2 actions=set_field:0x3/0xf->reg0,goto_table:20",
		"table=20, priority=300,ip,nw_dst=172.18.0.3 actions=ct(table=25,zone=65001,nat)",
		"table=20, priority=0 actions=goto_table:25",
		"table=25, priority=50,ip actions=ct(table=30,zone=65000,nat)",
		"table=30, priority=0 actions=goto_table:40",
		"table=31, priority=0 actions=",
		"table=35, priority=0 actions=drop",
		"table=40, priority=200,ct_state=+new+trk,ct_mark=0x1/0xf,ip actions=ct(commit,table=50,zone=65001,nat(src=172.18.0.3))",
		"table=40, priority=0 actions=goto_table:50",
		"table=50, priority=0 actions=goto_table:60",
		"table=60, priority=200,ip,nw_dst=169.254.169.0/29 actions=goto_table:95",
		"table=95, priority=100,ip,in_port=2,nw_dst=169.254.169.0/29 actions=set_field:0a:58:0a:80:00:01->eth_src,set_field:0a:58:a9:fe:a9:04->eth_dst,IN_PORT",
	}
)

// TestOVSLongestPath traces the longest path of the traffic matrix, host
// -> ClusterIP -> a host-network endpoint on this node, across breth0 and
// br0 joined by patch ports: this package's group turns the node IP into
// 169.254.169.2 and marks the connection for SNAT to the node IP, and the
// whole path takes exactly the 6 recirculations the budget allows.
func TestOVSLongestPath(t *testing.T) {
	sb := ovstest.New(t, ovs.Options{Dummy: true})
	if _, err := sb.Vsctl(
		"add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=dummy", "protocols=OpenFlow13,OpenFlow15", "fail_mode=secure",
		"--", "add-br", "breth0", "--", "set", "bridge", "breth0", "datapath_type=dummy", "protocols=OpenFlow13,OpenFlow15", "fail_mode=secure",
		"--", "add-port", "breth0", "eth0", "--", "set", "interface", "eth0", "type=dummy", "ofport_request=1",
		"--", "add-port", "br0", "patch-br0", "--", "set", "interface", "patch-br0", "type=patch", "options:peer=patch-breth0", "ofport_request=2",
		"--", "add-port", "breth0", "patch-breth0", "--", "set", "interface", "patch-breth0", "type=patch", "options:peer=patch-br0", "ofport_request=2",
	); err != nil {
		t.Fatal(err)
	}
	p := &proxy.ServicePort{Name: name("hostep", "http", v1.ProtocolTCP), Protocol: v1.ProtocolTCP, Port: 80,
		ClusterIPs: []netip.Addr{a("10.96.0.20")}}
	out, err := Build(testNode(), Input{Port: p, Endpoints: []proxy.Endpoint{ready("172.18.0.3", 8081, "node1")}}, fixedIDs())
	if err != nil {
		t.Fatal(err)
	}
	installPod(t, sb, out, stubBr0Gateway)
	if _, err := sb.Ofctl("-O", "OpenFlow15", "add-flows", "breth0", writeLines(t, "seed", seedBreth0)); err != nil {
		t.Fatal(err)
	}
	tr, err := sb.Appctl("ofproto/trace", "breth0",
		"in_port=LOCAL,tcp,dl_src=02:42:ac:12:00:03,dl_dst=0a:58:a9:fe:a9:04,nw_src=172.18.0.3,nw_dst=10.96.0.20,tp_src=40000,tp_dst=80")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"nat(dst=169.254.169.2:8081)", "set_field:0x1/0xf->ct_mark", // this package's DNAT and SNAT mark
		"nat(src=172.18.0.3)", "nat(dst=172.18.0.3)", "nat(src=169.254.169.1)", // br0 SNAT, breth0 hairpin
	} {
		if !strings.Contains(tr, w) {
			t.Errorf("trace lacks %q", w)
		}
	}
	if strings.Contains(tr, "Max recirculation depth") {
		t.Errorf("recirculation limit hit")
	}
	var dpActions []string
	for _, l := range strings.Split(tr, "\n") {
		if l, ok := strings.CutPrefix(strings.TrimSpace(l), "Datapath actions: "); ok {
			dpActions = append(dpActions, l)
		}
	}
	recircs := 0
	for _, l := range dpActions {
		recircs += strings.Count(l, "recirc(")
	}
	if recircs != plan.MaxRecirculations {
		t.Errorf("%d recirculations, want exactly %d (docs/pipeline.md)", recircs, plan.MaxRecirculations)
	}
	if len(dpActions) == 0 || dpActions[len(dpActions)-1] == "drop" || strings.Contains(dpActions[len(dpActions)-1], "recirc(") {
		t.Errorf("the packet does not leave at the end: %v", dpActions)
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("trace:\n%s", tr)
	}
}
