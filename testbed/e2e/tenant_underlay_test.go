package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"nodeflow/datapath/plan"
	"nodeflow/testbed/nsutil"
)

// TestTenantVXLANInjection: a tenant's pod on node2 sends VXLAN to node1's
// address, wrapping a packet from a made-up pod address and namespace id
// to another pod on node1. Leaving node2 SNATed to node2's own address, it
// would reach node1 as node2's tunnel traffic, past port security and
// NetworkPolicy. br0 drops it before it leaves (table 60), the victim
// receives nothing, and the drop is counted; the victim still receives
// the attacker's plain datagrams.
func TestTenantVXLANInjection(t *testing.T) {
	e := up(t)
	requireAgent(t, e)
	tn := newTenant(t, e, "e2e-tenant-vxlan")
	ctx := context.Background()
	for _, p := range []struct{ name, node string }{{"victim", "node1"}, {"attacker", "node2"}} {
		if _, err := tn.client.CoreV1().Pods(tn.ns).Create(ctx, &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Labels: map[string]string{"app": p.name}},
			Spec: v1.PodSpec{NodeName: p.node, TerminationGracePeriodSeconds: ptr.To(int64(1)),
				Containers: []v1.Container{{Name: "web", Image: "testbed/web"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	victim := runningPods(t, e, tn.ns, "victim", 1)[0]
	attacker := runningPods(t, e, tn.ns, "attacker", 1)[0]
	n1, n2 := member(t, e, "node1"), member(t, e, "node2")
	node1IP := memberIP(t, n1, false)

	var pc net.PacketConn
	if err := nsutil.Do(victim.netns, func() error {
		var err error
		pc, err = net.ListenPacket("udp4", ":40404")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	got := make(chan string, 16)
	go serveDatagrams(pc, 2000, func(b []byte, from net.Addr) { got <- from.String() + " " + string(b) })

	// The control: the attacker's plain datagram reaches the victim.
	plain, err := nsutil.Dial(ctx, attacker.netns, "udp", net.JoinHostPort(victim.ip(false).String(), "40404"), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	eventually(t, 30*time.Second, "a plain datagram from the attacker to the victim", func(ctx context.Context) error {
		if _, err := plain.Write([]byte("plain")); err != nil {
			return err
		}
		select {
		case s := <-got:
			if !strings.HasSuffix(s, " plain") {
				return fmt.Errorf("received %q", s)
			}
			return nil
		case <-time.After(200 * time.Millisecond):
			return fmt.Errorf("nothing yet")
		}
	})

	// The inner frame: from a made-up pod address on port 53 (a DNS
	// answer, say), namespace id 0x42, to the victim.
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{0x0a, 0x58, 1, 2, 3, 4}, DstMAC: net.HardwareAddr{0x0a, 0x58, 0x0a, 0xf4, 0, 1}, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.ParseIP("10.244.77.77").To4(), DstIP: victim.ip(false).AsSlice()}
	udp := &layers.UDP{SrcPort: 53, DstPort: 40404}
	_ = udp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, udp, gopacket.Payload("injected")); err != nil {
		t.Fatal(err)
	}
	hdr := make([]byte, 8)
	hdr[0] = 0x08                                // flags: the VNI is valid
	binary.BigEndian.PutUint32(hdr[4:], 0x42<<8) // VNI 0x42
	vxlan, err := nsutil.Dial(ctx, attacker.netns, "udp", net.JoinHostPort(node1IP.String(), strconv.Itoa(plan.VXLANPort)), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer vxlan.Close()
	const sent = 20
	for range sent {
		if _, err := vxlan.Write(append(hdr, buf.Bytes()...)); err != nil {
			t.Fatal(err)
		}
	}
	// The drops are counted on node2's br0, so every injection reached
	// the guard; then nothing may arrive, nor come later.
	guard := regexp.MustCompile(`table=60, n_packets=(\d+),.*priority=250,udp,nw_dst=` + regexp.QuoteMeta(node1IP.String()) + `,tp_dst=4789`)
	eventually(t, 10*time.Second, "node2's guard counting the injections", func(context.Context) error {
		m := guard.FindStringSubmatch(dumpBridges(t, n2))
		if m == nil {
			return fmt.Errorf("no guard flow for %s on node2", node1IP)
		}
		if n, _ := strconv.Atoi(m[1]); n < sent {
			return fmt.Errorf("%d of %d injections counted", n, sent)
		}
		return nil
	})
	if _, err := plain.Write([]byte("after")); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case s := <-got:
			if strings.HasSuffix(s, " after") {
				return // the injections, sent before, came to nothing
			}
			t.Fatalf("the victim received an injected packet: %q", s)
		case <-time.After(10 * time.Second):
			t.Fatal("the victim stopped receiving the attacker's plain datagrams")
		}
	}
}
