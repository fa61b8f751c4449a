package idlingflows

import (
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"nodeflow/datapath/plan"
	"nodeflow/datapath/serviceflows"
	"nodeflow/model/service"
)

func TestBuild(t *testing.T) {
	name := service.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "web"}, Port: "dns", Protocol: v1.ProtocolUDP}
	port := &service.ServicePort{Name: name, Protocol: v1.ProtocolUDP, Port: 53, NodePort: 30053,
		ClusterIPs:  []netip.Addr{netip.MustParseAddr("10.96.0.50"), netip.MustParseAddr("fd00:10:96::50")},
		ExternalIPs: []netip.Addr{netip.MustParseAddr("172.30.0.200")}}
	ids := map[string]uint32{
		serviceflows.GroupKey(name, service.IPv4, false): 7, serviceflows.GroupKey(name, service.IPv4, true): 8,
		serviceflows.GroupKey(name, service.IPv6, false): 9,
	}
	st, err := Build(port, []netip.Addr{netip.MustParseAddr("172.30.0.11"), netip.MustParseAddr("fd00:172:30::11")}, ids)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for _, f := range st.Flows {
		text.WriteString(f.String() + "\n")
	}
	for _, want := range []string{
		"priority=195,ct_state=+new+trk,udp,nw_dst=10.96.0.50,tp_dst=53 actions=set_field:0x7->reg5,set_field:0x1000/0xf000->reg0,resubmit(,120),controller(id=28262,userdata=01.00.00.00.07,meter_id=1)",
		"udp,nw_dst=172.30.0.11,tp_dst=30053 actions=set_field:0x8->reg5,set_field:0x1000/0xf000->reg0,resubmit(,120),controller(id=28262,userdata=01.00.00.00.08,meter_id=1)",
		"udp,nw_dst=172.30.0.200,tp_dst=53 actions=set_field:0x8->reg5",
		"udp6,ipv6_dst=fd00:10:96::50,tp_dst=53 actions=set_field:0x9->reg5",
		"udp6,ipv6_dst=fd00:172:30::11,tp_dst=30053 actions=set_field:0x9->reg5",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("no %q in\n%s", want, text.String())
		}
	}
	if len(st.Flows) != 5 {
		t.Errorf("%d flows, want 5:\n%s", len(st.Flows), text.String())
	}
	if _, err := Build(port, nil, map[string]uint32{}); err == nil || !strings.Contains(err.Error(), "ns/web") {
		t.Errorf("Build without ServiceIDs: %v, want an error naming the port", err)
	}
	if id, err := ParseUserdata(Userdata(0x01020304)); err != nil || id != 0x01020304 {
		t.Errorf("userdata round trip: %#x, %v", id, err)
	}
	for _, bad := range [][]byte{nil, {byte(plan.PacketInReject), 0, 0, 0, 1}, {byte(plan.PacketInUnidle), 0}} {
		if _, err := ParseUserdata(bad); err == nil {
			t.Errorf("ParseUserdata(%x): no error", bad)
		}
	}
}
