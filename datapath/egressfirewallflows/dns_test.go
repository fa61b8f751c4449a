package egressfirewallflows

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"nodeflow/datapath/plan"
	"nodeflow/internal/testutil/flowtest"
	"nodeflow/lib/openflow"
	"nodeflow/lib/openflow/ofconn"
	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

func TestDNSFlows(t *testing.T) {
	got, err := DNSFlows([]netip.Addr{netip.MustParseAddr("fd00:10:244::5"), netip.MustParseAddr("10.244.0.5"), netip.MustParseAddr("10.244.0.5")}, DNSSources{})
	if err != nil {
		t.Fatal(err)
	}
	// Without a source to learn from, the replies are only counted.
	want := []string{
		" table=50, priority=44000,udp,nw_dst=10.244.0.5,tp_src=53 actions=goto_table:60",
		" table=50, priority=44000,udp6,ipv6_dst=fd00:10:244::5,tp_src=53 actions=goto_table:60",
	}
	if len(got) != len(want) {
		t.Fatalf("%d flows, want %d: %v", len(got), len(want), got)
	}
	for i := range got {
		if s := got[i].String(); s != want[i] {
			t.Errorf("flow %d:\n got %s\nwant %s", i, s, want[i])
		}
	}
	for _, bad := range []string{"::ffff:10.0.0.1", "0.0.0.0", "fe80::1%eth0"} {
		if _, err := DNSFlows([]netip.Addr{netip.MustParseAddr(bad)}, DNSSources{}); err == nil {
			t.Errorf("DNSFlows(%s): no error", bad)
		}
	}
}

// TestOVSDNSRelease sends a DNS reply through a sandboxed br0's learning
// flow to nodeflow's own connection, and releases it by Release: the reply
// reaches table 60 only after the release, with its in_port and
// registers, and the meter is in front of the packet-in.
func TestOVSDNSRelease(t *testing.T) {
	sb := ovstest.New(t, ovs.Options{Dummy: true})
	ovstest.AddDummyBridge(t, sb, "br0", 1, 2, 3, 4, 5)
	pod4, pod6 := netip.MustParseAddr("10.244.0.5"), netip.MustParseAddr("fd00:10:244::5")
	fs, err := DNSFlows([]netip.Addr{pod4, pod6}, DNSSources{Resolvers: pfx("172.30.0.100/32", "fd00:172:30::100/128")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := logrus.New()
	l.SetOutput(io.Discard)
	var (
		mu   sync.Mutex
		pins []*openflow.PacketIn
	)
	c, err := ofconn.Dial(ctx, "unix:"+sb.MgmtSock("br0"), ofconn.Options{Logger: l, ControllerID: plan.ControllerID,
		Handlers: ofconn.Handlers{PacketIn: func(m ofconn.AsyncMessage) {
			if p, ok := m.Message.(*openflow.PacketIn); ok {
				mu.Lock()
				pins = append(pins, p)
				mu.Unlock()
			}
		}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Apply(ctx, DNSMeter().Mod(openflow.MeterAdd)); err != nil {
		t.Fatal(err)
	}
	// The patch port (5) loads FromGateway into reg0 and the packet goes
	// through the service zone, as br0's table 25 sends it; routing
	// (table 60) counts what reaches it from there.
	stub := []string{
		"table=0, priority=100,ip,in_port=5 actions=set_field:0x3/0xf->reg0,ct(zone=65000,nat,table=50)",
		"table=0, priority=100,ipv6,in_port=5 actions=set_field:0x3/0xf->reg0,ct(zone=65000,nat,table=50)",
		"table=50, priority=0 actions=goto_table:60",
		"table=60, priority=100,udp,in_port=5,reg0=0x3/0xf,nw_dst=10.244.0.5 actions=output:1",
		"table=60, priority=100,udp6,in_port=5,reg0=0x3/0xf,ipv6_dst=fd00:10:244::5 actions=output:1",
		"table=60, priority=0 actions=drop",
	}
	msgs := []openflow.Message{}
	for _, f := range fs {
		msgs = append(msgs, f.AddMod())
	}
	if err := c.Bundle(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	for _, s := range stub {
		if _, err := sb.Ofctl("-O", "OpenFlow15", "add-flow", "br0", s); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := sb.Ofctl("-O", "OpenFlow15", "dump-meters", "br0"); err != nil || !strings.Contains(out, "meter=3 pktps burst") {
		t.Fatalf("meter: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		name        string
		server, pod string
	}{
		{"IPv4", "172.30.0.100", pod4.String()},
		{"IPv6", "fd00:172:30::100", pod6.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frame := flowtest.UDPFrame(t, tc.server, tc.pod, 53, 40000, []byte("a dns reply"))
			if _, err := sb.Appctl("netdev-dummy/receive", "p5", fmt.Sprintf("%x", frame)); err != nil {
				t.Fatal(err)
			}
			var pin *openflow.PacketIn
			if !poll(5*time.Second, func() bool {
				mu.Lock()
				defer mu.Unlock()
				if len(pins) > 0 {
					pin, pins = pins[0], pins[1:]
				}
				return pin != nil
			}) {
				t.Fatal("no packet-in")
			}
			if len(pin.Userdata) != 1 || pin.Userdata[0] != byte(plan.PacketInDNS) || pin.InPort() != 5 || pin.Reg(0)&0xf != 3 ||
				pin.Table != uint8(plan.PodEgressFirewall) || string(pin.Data) != string(frame) {
				t.Fatalf("packet-in %+v", pin)
			}
			// Held: nothing reached routing yet.
			if n := routed(t, sb, tc.pod); n != 0 {
				t.Fatalf("%d packets routed before the release", n)
			}
			if err := c.Send(ctx, Release(pin)); err != nil {
				t.Fatal(err)
			}
			if !poll(5*time.Second, func() bool { return routed(t, sb, tc.pod) == 1 }) {
				t.Fatalf("the release did not reach routing with its in_port and registers:\n%s", dump(t, sb))
			}
		})
	}
	// What is not a reply from port 53 is not caught.
	before := dump(t, sb)
	frame := flowtest.UDPFrame(t, "172.30.0.100", pod4.String(), 5353, 40000, []byte("not dns"))
	if _, err := sb.Appctl("netdev-dummy/receive", "p5", fmt.Sprintf("%x", frame)); err != nil {
		t.Fatal(err)
	}
	if !poll(5*time.Second, func() bool { return routed(t, sb, pod4.String()) == 2 }) {
		t.Errorf("a packet from port 5353 did not go straight on:\n%s\nbefore:\n%s", dump(t, sb), before)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(pins) != 0 {
		t.Errorf("%d more packet-ins", len(pins))
	}
	flowtest.InstallAndCompare(t, sb, "br0", append(fs, GuardFlows()...))
}

func dump(t *testing.T, sb *ovs.Sandbox) string {
	out, err := sb.Ofctl("-O", "OpenFlow15", "dump-flows", "br0")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var nPackets = regexp.MustCompile(`table=60, n_packets=(\d+),.*_dst=([0-9a-f:.]+) actions=output:1`)

// routed returns n_packets of the table-60 flow toward pod.
func routed(t *testing.T, sb *ovs.Sandbox, pod string) int {
	for _, line := range strings.Split(dump(t, sb), "\n") {
		if m := nPackets.FindStringSubmatch(line); m != nil && m[2] == pod {
			var n int
			fmt.Sscan(m[1], &n)
			return n
		}
	}
	return -1
}

func poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
