package reconcile

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"nodeflow/datapath/plan"
	"nodeflow/internal/testutil/waittest"
	"nodeflow/lib/openflow"
	"nodeflow/testbed/ovs"
)

// countFlow is a flow of table PodLocalDelivery that counts (and drops) the
// IPv4 packets to addr.
func countFlow(addr netip.Addr) State {
	return State{Flows: []openflow.Flow{{
		Table: uint8(plan.PodLocalDelivery), Priority: uint16(plan.PriorityNormal),
		Match: openflow.NewMatch(openflow.EthType(0x0800), openflow.IPv4Dst(addr)),
	}}}
}

// bigState is 2,000 flows of table PodLocalDelivery, different for each
// round.
func bigState(round int) State {
	var st State
	for i := range 2000 {
		a := netip.AddrFrom4([4]byte{10, 129, byte(i >> 8), byte(i)})
		f := countFlow(a).Flows[0]
		f.Priority = uint16(round)
		st.Flows = append(st.Flows, f)
	}
	return st
}

// udpTo is a packet-out of a UDP datagram to addr, from the controller
// into table PodLocalDelivery.
func udpTo(t testing.TB, addr netip.Addr) *openflow.PacketOut {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.IP{10, 128, 9, 9}, DstIP: addr.AsSlice()}
	udp := &layers.UDP{SrcPort: 53, DstPort: 40000}
	if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, udp, gopacket.Payload("answer")); err != nil {
		t.Fatal(err)
	}
	return &openflow.PacketOut{
		InPort:  openflow.PortController,
		Actions: []openflow.Action{openflow.ResubmitTable(uint8(plan.PodLocalDelivery))},
		Data:    buf.Bytes(),
	}
}

var countedRE = regexp.MustCompile(`n_packets=(\d+),.*[ ,]nw_dst=([0-9.]+)`)

// packetsTo reads each counting flow's n_packets from ovs-ofctl.
func packetsTo(t testing.TB, sb *ovs.Sandbox) map[string]int {
	t.Helper()
	out, err := sb.Ofctl("-O", "OpenFlow15", "dump-flows", "br0", fmt.Sprintf("table=%d", plan.PodLocalDelivery))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, m := range countedRE.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		got[m[2]] = n
	}
	return got
}

// TestFlushThenRunsAfterTheChanges checks, on a real switch, that messages
// given to FlushThen meet the flows set before the call: each packet-out
// goes to an address whose counting flow was set just before, and every
// flow counts exactly its one packet. A second call with nothing new runs
// no pass and still sends its message.
func TestFlushThenRunsAfterTheChanges(t *testing.T) {
	sb, addr := testBridge(t, ovs.Options{}, "br0")
	s := NewStore(StoreOptions{Bridge: plan.Pod})
	var passes atomic.Int64
	run := start(t, addr, s, Options{AuditInterval: -1, OnSync: func(SyncReport) { passes.Add(1) }})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	const n = 40
	for i := 1; i <= n; i++ {
		a := netip.AddrFrom4([4]byte{10, 128, 0, byte(i)})
		// A large change first keeps the loop busy, so that the call
		// finds a pass running, or none, or one about to start.
		mustSet(t, s, "pod/default/big", bigState(i))
		mustSet(t, s, fmt.Sprintf("pod/default/p%d", i), countFlow(a))
		if err := run.r.FlushThen(ctx, udpTo(t, a)); err != nil {
			t.Fatalf("flush %d: %v", i, err)
		}
	}
	// The packet-outs of the last calls may still be in the switch's
	// queue: Send does not wait, so wait for the counters.
	waittest.Poll(t, "every flow counted its packet", 20*time.Second, func() error {
		got := packetsTo(t, sb)
		for i := 1; i <= n; i++ {
			if a := fmt.Sprintf("10.128.0.%d", i); got[a] != 1 {
				return fmt.Errorf("%s: %d packets, want 1", a, got[a])
			}
		}
		return nil
	})

	before := passes.Load()
	a := netip.AddrFrom4([4]byte{10, 128, 0, 1})
	if err := run.r.FlushThen(ctx, udpTo(t, a)); err != nil {
		t.Fatal(err)
	}
	waittest.Poll(t, "the served call's packet", 20*time.Second, func() error {
		if got := packetsTo(t, sb)["10.128.0.1"]; got != 2 {
			return fmt.Errorf("10.128.0.1: %d packets, want 2", got)
		}
		return nil
	})
	if after := passes.Load(); after != before {
		t.Errorf("a flush with nothing new ran %d passes, want none", after-before)
	}
}

// TestFlushThenBadMessage checks that a message given to FlushThen that
// the switch refuses does not hold back the changes it was sent with: the
// flow is installed by the next pass and its owner is not backed off.
func TestFlushThenBadMessage(t *testing.T) {
	sb, addr := testBridge(t, ovs.Options{}, "br0")
	s := NewStore(StoreOptions{Bridge: plan.Pod})
	run := start(t, addr, s, Options{AuditInterval: -1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	a := netip.AddrFrom4([4]byte{10, 128, 0, 7})
	bad := udpTo(t, a)
	bad.Actions = []openflow.Action{openflow.OutputPort(0xfeff)} // no such port
	mustSet(t, s, "pod/default/bad", countFlow(a))
	_ = run.r.FlushThen(ctx, bad) // refused in the bundle, or sent alone after it
	run.flush(t)
	waittest.Poll(t, "the flow installed", 20*time.Second, func() error {
		if _, ok := packetsTo(t, sb)["10.128.0.7"]; !ok {
			return fmt.Errorf("no flow for 10.128.0.7")
		}
		return nil
	})
	if errs := s.Errors(); len(errs) != 0 {
		t.Errorf("owners held back: %v", errs)
	}
}

// TestFlushThenOneChange checks, on a real switch, the pass that carries
// messages after a single change, which goes with them and one barrier
// instead of a bundle: each packet-out meets the flow set just before it;
// and when the switch refuses that change, the packet-out still runs (as
// after a failed bundle), the owner is held back, and nothing is sent
// twice. To make the flush's own pass carry the change, the loop is held
// after a pass while the change is set, and the store's wake-up for it is
// taken away.
func TestFlushThenOneChange(t *testing.T) {
	sb, addr := testBridge(t, ovs.Options{}, "br0")
	s := NewStore(StoreOptions{Bridge: plan.Pod})
	var gate atomic.Pointer[chan struct{}]
	held := make(chan struct{}, 1)
	run := start(t, addr, s, Options{AuditInterval: -1, OnSync: func(rep SyncReport) {
		if g := gate.Load(); g != nil {
			held <- struct{}{}
			<-*g
		}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tick := 0
	// oneChangeThen sets owner to st in a pass of its own with po after it,
	// and returns FlushThen's error.
	oneChangeThen := func(owner string, st State, po openflow.Message) error {
		t.Helper()
		g := make(chan struct{})
		gate.Store(&g)
		tick++
		mustSet(t, s, fmt.Sprintf("pod/default/tick%d", tick), countFlow(netip.AddrFrom4([4]byte{10, 128, 3, byte(tick)})))
		select {
		case <-held:
		case <-ctx.Done():
			t.Fatal("no pass for the tick")
		}
		gate.Store(nil)
		mustSet(t, s, owner, st)
		select {
		case <-s.Changed():
		default:
			t.Fatal("the store did not signal the change")
		}
		done := make(chan error, 1)
		go func() { done <- run.r.FlushThen(ctx, po) }()
		close(g)
		return <-done
	}

	const n = 10
	for i := 1; i <= n; i++ {
		a := netip.AddrFrom4([4]byte{10, 128, 1, byte(i)})
		if err := oneChangeThen(fmt.Sprintf("pod/default/p%d", i), countFlow(a), udpTo(t, a)); err != nil {
			t.Fatalf("flush %d: %v", i, err)
		}
	}
	waittest.Poll(t, "every flow counted its packet", 20*time.Second, func() error {
		got := packetsTo(t, sb)
		for i := 1; i <= n; i++ {
			if a := fmt.Sprintf("10.128.1.%d", i); got[a] != 1 {
				return fmt.Errorf("%s: %d packets, want 1", a, got[a])
			}
		}
		return nil
	})

	// A change the switch refuses (its flow outputs to 0xff00, which is
	// no port), with a packet-out to an address already counted.
	refused := countFlow(netip.AddrFrom4([4]byte{10, 128, 2, 1}))
	refused.Flows[0].Instructions = []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{openflow.OutputPort(0xff00)}}}
	err := oneChangeThen("pod/default/refused", refused, udpTo(t, netip.AddrFrom4([4]byte{10, 128, 1, 1})))
	if err == nil || !strings.Contains(err.Error(), "OFPBAC_BAD_OUT_PORT") {
		t.Errorf("flush with a refused change: %v, want OFPBAC_BAD_OUT_PORT", err)
	}
	waittest.Poll(t, "the packet-out after the refused change", 20*time.Second, func() error {
		if got := packetsTo(t, sb)["10.128.1.1"]; got != 2 {
			return fmt.Errorf("10.128.1.1: %d packets, want 2", got)
		}
		return nil
	})
	if errs := s.Errors(); len(errs) != 1 || errs["pod/default/refused"] == nil {
		t.Errorf("owners held back: %v, want pod/default/refused alone", errs)
	}
	// The packet-out went once: a later one on the same connection is
	// counted after any copy of it would have been.
	last := netip.AddrFrom4([4]byte{10, 128, 1, 100})
	if err := oneChangeThen("pod/default/last", countFlow(last), udpTo(t, last)); err != nil {
		t.Fatal(err)
	}
	waittest.Poll(t, "the last packet-out", 20*time.Second, func() error {
		if got := packetsTo(t, sb)["10.128.1.100"]; got != 1 {
			return fmt.Errorf("10.128.1.100: %d packets, want 1", got)
		}
		return nil
	})
	if got := packetsTo(t, sb)["10.128.1.1"]; got != 2 {
		t.Errorf("10.128.1.1: %d packets, want 2: the packet-out after the refused change went again", got)
	}
}
