package nodefeature

import (
	"context"
	"encoding/hex"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"nodeflow/datapath/plan"
	"nodeflow/internal/testutil/featuretest"
	"nodeflow/lib/openflow"
	"nodeflow/lib/packet"
)

func mustMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

// TestTunnelWarm: the IPv4 neighbours and the other nodes on the node's
// subnet are asked once per interval, by an ARP request from the node's
// address that leaves by the uplink, unicast where the MAC is known; a
// reconnection of the gateway bridge asks them all again, at the MACs
// remembered when the host's neighbour table has lost them, and a failed
// send is retried.
func TestTunnelWarm(t *testing.T) {
	h := featuretest.New(featuretest.DefaultNode())
	w := newTunnelWarmer(h, h.Log())
	h.OnBridgeReady(w.ready) // as Init registers it
	peer, router := mustMAC("02:00:00:00:00:12"), mustMAC("02:00:00:00:00:01")
	bcast := mustMAC("ff:ff:ff:ff:ff:ff")
	hops := []plan.NextHop{
		{Prefix: netip.MustParsePrefix("0.0.0.0/0"), MAC: router},         // the default route: no address to ask
		{Prefix: netip.MustParsePrefix("172.30.0.1/32"), MAC: router},     // the router itself
		{Prefix: netip.MustParsePrefix("172.30.0.12/32"), MAC: peer},      // another node
		{Prefix: netip.MustParsePrefix("fd00:172:30::12/128"), MAC: peer}, // IPv6: no tunnel uses it
	}
	tunnels := []netip.Addr{
		netip.MustParseAddr("172.30.0.12"),
		netip.MustParseAddr("172.30.0.13"),  // not resolved yet: broadcast
		netip.MustParseAddr("192.168.7.13"), // behind the router, which is asked
	}
	w.offer(hops, tunnels)
	ctx := context.Background()
	now := time.Unix(1000, 0)
	nd := h.Node()
	type ask struct {
		ip  string
		mac net.HardwareAddr
	}
	from := 0
	expect := func(what string, want ...ask) {
		t.Helper()
		sent := h.Sent()[from:]
		from += len(sent)
		if len(sent) != len(want) {
			t.Fatalf("%s: sent %d messages, want %d: %+v", what, len(sent), len(want), sent)
		}
		for i, want := range want {
			po, ok := sent[i].Msg.(*openflow.PacketOut)
			if !ok || sent[i].Bridge != plan.Gateway || po.InPort != openflow.PortLocal {
				t.Fatalf("%s: message %d: %+v, want a packet-out on breth0 from LOCAL", what, i, sent[i])
			}
			if len(po.Actions) != 1 || po.Actions[0].String() != openflow.OutputPort(nd.Ports.Uplink).String() {
				t.Errorf("%s: message %d: actions %v, want output to the uplink", what, i, po.Actions)
			}
			pkt := gopacket.NewPacket(po.Data, layers.LayerTypeEthernet, gopacket.Default)
			eth, _ := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
			arp, _ := pkt.Layer(layers.LayerTypeARP).(*layers.ARP)
			if eth == nil || arp == nil {
				t.Fatalf("%s: message %d: not an ARP frame: %v", what, i, pkt)
			}
			if eth.DstMAC.String() != want.mac.String() || eth.SrcMAC.String() != nd.HostMAC.String() ||
				arp.Operation != layers.ARPRequest || net.IP(arp.DstProtAddress).String() != want.ip ||
				net.IP(arp.SourceProtAddress).String() != "172.30.0.11" || net.HardwareAddr(arp.SourceHwAddress).String() != nd.HostMAC.String() {
				t.Errorf("%s: message %d: %s -> %s, ARP op %d %s asks %s, want a request from 172.30.0.11 at %s to %s at %s",
					what, i, eth.SrcMAC, eth.DstMAC, arp.Operation, net.IP(arp.SourceProtAddress), net.IP(arp.DstProtAddress), nd.HostMAC, want.ip, want.mac)
			}
		}
	}

	w.warm(ctx, now)
	expect("before breth0 has its flows")
	h.BridgeReady(plan.Gateway)
	w.warm(ctx, now)
	expect("first", ask{"172.30.0.1", router}, ask{"172.30.0.12", peer}, ask{"172.30.0.13", bcast})
	w.warm(ctx, now.Add(TunnelWarmInterval-time.Second))
	expect("within the interval")
	w.warm(ctx, now.Add(TunnelWarmInterval))
	expect("after the interval", ask{"172.30.0.1", router}, ask{"172.30.0.12", peer}, ask{"172.30.0.13", bcast})
	h.BridgeReady(plan.Pod)
	w.warm(ctx, now.Add(TunnelWarmInterval+time.Second))
	expect("after br0 connected")

	// ovs-vswitchd restarted: breth0's neighbours are gone from the host's
	// table, and the first send fails.
	w.offer(nil, tunnels)
	h.SetSendError(errors.New("not connected"))
	h.BridgeReady(plan.Gateway)
	w.warm(ctx, now.Add(TunnelWarmInterval+2*time.Second))
	expect("send failed")
	h.SetSendError(nil)
	w.warm(ctx, now.Add(TunnelWarmInterval+3*time.Second))
	expect("after breth0 reconnected", ask{"172.30.0.12", peer}, ask{"172.30.0.13", bcast})
	if got := testutil.ToFloat64(w.sent); got != 8 {
		t.Errorf("nodeflow_tunnel_neighbour_probes_total = %v, want 8", got)
	}
}

// TestARPRequestOracle: Open vSwitch reads the packet-out as a unicast ARP
// request out of the uplink.
func TestARPRequestOracle(t *testing.T) {
	data, err := packet.ARPRequest(mustMAC("02:00:00:00:00:11"), mustMAC("02:00:00:00:00:12"),
		netip.MustParseAddr("172.30.0.11"), netip.MustParseAddr("172.30.0.12"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := packet.ARPRequest(mustMAC("02:00:00:00:00:11"), mustMAC("02:00:00:00:00:12"),
		netip.MustParseAddr("fd00::11"), netip.MustParseAddr("fd00::12")); err == nil || !strings.Contains(err.Error(), "fd00::12") {
		t.Errorf("an IPv6 ARP request: error %v, want one naming the address", err)
	}
	b, err := openflow.Marshal(openflow.Version15, 1, &openflow.PacketOut{InPort: openflow.PortLocal,
		Actions: []openflow.Action{openflow.OutputPort(1)}, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("ovs-ofctl"); err != nil {
		if os.Getenv("NODEFLOW_REQUIRE_OVS") != "" {
			t.Fatalf("ovs-ofctl not found and NODEFLOW_REQUIRE_OVS is set: %v", err)
		}
		t.Skip("ovs-ofctl not installed: the packet-out is not checked against Open vSwitch")
	}
	out, err := exec.Command("ovs-ofctl", "ofp-print", hex.EncodeToString(b), "4").CombinedOutput()
	if err != nil {
		t.Fatalf("ovs-ofctl ofp-print: %v: %s", err, out)
	}
	for _, want := range []string{"in_port=LOCAL", "actions=output:1",
		"arp,vlan_tci=0x0000,dl_src=02:00:00:00:00:11,dl_dst=02:00:00:00:00:12,arp_spa=172.30.0.11,arp_tpa=172.30.0.12,arp_op=1,arp_sha=02:00:00:00:00:11,arp_tha=00:00:00:00:00:00"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("ovs-ofctl reads the packet-out without %q:\n%s", want, out)
		}
	}
}
