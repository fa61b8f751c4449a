package networkpolicyfeature

import (
	"net"
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"nodeflow/agent/feature"
	"nodeflow/datapath/networkpolicyflows"
	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
)

// TestDeniedSample decodes a denied packet's packet-in: the pod from the
// drop flow's cookie, the direction from its table, the rest from the
// frame; a cookie of no pod is not logged.
func TestDeniedSample(t *testing.T) {
	f := New(Options{})
	f.idx = NewIndex(nodeConfig())
	f.idx.SetPod("x/a", matrixPod("x", "a", true))
	f.idx.SetLogging("x", true)
	for _, o := range f.idx.TakeDirty() {
		if _, err := f.idx.Flows(o); err != nil {
			t.Fatal(err)
		}
	}
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: net.IP{10, 244, 2, 9}, DstIP: net.IP{10, 244, 1, 1}}
	tcp := &layers.TCP{SrcPort: 40000, DstPort: 80, SYN: true, Window: 1000}
	if err := tcp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, tcp); err != nil {
		t.Fatal(err)
	}
	cookie := uint64(plan.MakeCookie(plan.FeatureNetworkPolicy, networkpolicyflows.PodOwner("x", "a"), 0))
	pin := feature.PacketIn{Bridge: plan.Pod, Category: plan.PacketInPolicyDenied,
		Msg: &openflow.PacketIn{Table: uint8(plan.PodIngressPolicy), Cookie: cookie, Data: buf.Bytes()}}
	d, ok := f.denied(pin)
	want := Denied{Direction: networkpolicyflows.Ingress, Namespace: "x", Pod: "a", Protocol: "TCP",
		Src: netip.MustParseAddrPort("10.244.2.9:40000"), Dst: netip.MustParseAddrPort("10.244.1.1:80")}
	if !ok || d != want {
		t.Errorf("denied = %+v, %v; want %+v", d, ok, want)
	}
	// A later fragment carries no transport header: its addresses alone.
	frag := append([]byte(nil), buf.Bytes()...)
	frag[14+7] = 0x10 // fragment offset 16 (128 bytes)
	pin.Msg.Data = frag
	d, ok = f.denied(pin)
	want.Src, want.Dst = netip.MustParseAddrPort("10.244.2.9:0"), netip.MustParseAddrPort("10.244.1.1:0")
	if !ok || d != want {
		t.Errorf("a fragment: denied = %+v, %v; want %+v", d, ok, want)
	}
	pin.Msg.Data = buf.Bytes()
	pin.Msg.Cookie = uint64(plan.MakeCookie(plan.FeatureNetworkPolicy, networkpolicyflows.PodOwner("x", "gone"), 0))
	if _, ok := f.denied(pin); ok {
		t.Error("a sample of no known pod was decoded")
	}
}
