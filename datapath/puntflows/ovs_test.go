package puntflows_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/sirupsen/logrus"

	"nodeflow/datapath/plan"
	"nodeflow/datapath/puntflows"
	"nodeflow/datapath/reconcile"
	"nodeflow/datapath/serviceflows"
	"nodeflow/internal/testutil/flowtest"
	"nodeflow/lib/openflow"
	"nodeflow/lib/openflow/ofconn"
	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

// The flood's sizes: floodBatches calls of netdev-dummy/receive with
// floodBatch SYNs each from the flooding port, and victimPerBatch SYNs
// from the other port between batches.
const (
	floodBatches   = 8
	floodBatch     = 100
	victimPerBatch = 3
)

// Ports of the sandbox: pods, each connecting to its own tenant's Service
// without endpoints. The flooders are of one namespace, the victim of
// another.
const (
	flooderPort = 1
	victimPort  = 2
	// Two more pods of the flooder's namespace.
	flooderPort2 = 3
	flooderPort3 = 4

	flooderNamespace = 7
	victimNamespace  = 9
)

// Services of the two pods: ServiceIDs and addresses.
var (
	flooderService = struct {
		id   uint32
		addr string
	}{7, "10.96.0.7"}
	victimService = struct {
		id   uint32
		addr string
	}{9, "10.96.0.9"}
)

// puntRig is br0 on a real ovs-vswitchd (the userspace datapath, dummy
// ports), with the reject flows of two Services and the punt stage, and
// nodeflow's connection, which collects the packet-ins.
type puntRig struct {
	t  *testing.T
	sb *ovs.Sandbox
	c  *ofconn.Conn

	mu   sync.Mutex
	pins []*openflow.PacketIn
}

func newPuntRig(t *testing.T, stage reconcile.State) *puntRig {
	t.Helper()
	sb := ovstest.New(t, ovs.Options{Dummy: true})
	ovstest.AddDummyBridge(t, sb, "br0", flooderPort, victimPort, flooderPort2, flooderPort3)
	r := &puntRig{t: t, sb: sb}
	l := logrus.New()
	l.SetOutput(io.Discard)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := ofconn.Dial(ctx, "unix:"+sb.MgmtSock("br0"), ofconn.Options{Logger: l, ControllerID: plan.ControllerID,
		Handlers: ofconn.Handlers{PacketIn: func(m ofconn.AsyncMessage) {
			if p, ok := m.Message.(*openflow.PacketIn); ok {
				r.mu.Lock()
				r.pins = append(r.pins, p)
				r.mu.Unlock()
			}
		}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r.c = c
	// The ceiling, then the stage's meters, then the flows that use them.
	for _, m := range append([]openflow.MeterEntry{serviceflows.RejectMeter()}, stage.Meters...) {
		if err := c.Apply(ctx, m.Mod(openflow.MeterAdd)); err != nil {
			t.Fatalf("meter %s: %v", m, err)
		}
	}
	fs := append([]openflow.Flow{}, stage.Flows...)
	for _, p := range []uint32{flooderPort, victimPort, flooderPort2, flooderPort3} {
		fs = append(fs, openflow.Flow{Table: uint8(plan.PodClassifier), Priority: 100,
			Match:        openflow.NewMatch(openflow.InPort(p)),
			Instructions: []openflow.Instruction{openflow.GotoTable{Table: uint8(plan.PodServiceLB)}}})
	}
	for _, s := range []struct {
		id   uint32
		addr string
	}{flooderService, victimService} {
		load, err := plan.ServiceID.LoadValue(uint64(s.id))
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, openflow.Flow{Table: uint8(plan.PodServiceLB), Priority: uint16(plan.PriorityServiceNoEndpoints),
			Match: openflow.NewMatch(openflow.EthType(0x0800), openflow.IPProto(6), openflow.IPv4Dst(netip.MustParseAddr(s.addr)), openflow.TCPDst(80)),
			Instructions: []openflow.Instruction{openflow.ApplyActions{
				Actions: append([]openflow.Action{load}, serviceflows.RejectActions(s.id)...)}}})
	}
	flowtest.InstallAndCompare(t, sb, "br0", fs)
	return r
}

// send makes port receive frames, in one call.
func (r *puntRig) send(port int, frames [][]byte) {
	r.t.Helper()
	args := []string{"netdev-dummy/receive", fmt.Sprintf("p%d", port)}
	for _, f := range frames {
		args = append(args, fmt.Sprintf("%x", f))
	}
	if _, err := r.sb.Appctl(args...); err != nil {
		r.t.Fatal(err)
	}
}

// received returns the packet-ins that came from port so far, checking
// that each is a reject of its Service.
func (r *puntRig) received(port uint32, service uint32) int {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, p := range r.pins {
		if p.InPort() != port {
			continue
		}
		want := []byte{byte(plan.PacketInReject), 0, 0, 0, 0}
		binary.BigEndian.PutUint32(want[1:], service)
		if string(p.Userdata) != string(want) {
			r.t.Errorf("a packet-in from port %d carries userdata %x, want %x (its flow's, per Service)", port, p.Userdata, want)
		}
		n++
	}
	return n
}

// meterDrops returns meter id's band drops and the packets it saw, read
// with nodeflow's meter stats request, and checks them against
// `ovs-ofctl meter-stats`.
func (r *puntRig) meterDrops(id uint32) (dropped, in uint64) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rep, err := r.c.MultipartReply(ctx, &openflow.MeterStatsRequest{MeterID: id})
	if err != nil {
		r.t.Fatal(err)
	}
	stats, err := rep.MeterStats()
	if err != nil || len(stats) != 1 || len(stats[0].Bands) != 1 {
		r.t.Fatalf("meter %d stats: %+v, %v", id, stats, err)
	}
	out, err := r.sb.Ofctl("-O", "OpenFlow15", "meter-stats", "br0", "meter="+strconv.Itoa(int(id)))
	if err != nil {
		r.t.Fatal(err)
	}
	m := regexp.MustCompile(`packet_in_count:(\d+) .*\n0: packet_count:(\d+)`).FindStringSubmatch(out)
	if m == nil || m[1] != strconv.FormatUint(stats[0].PacketInCount, 10) || m[2] != strconv.FormatUint(stats[0].Bands[0].PacketCount, 10) {
		r.t.Errorf("meter %d: decoded %+v, ovs-ofctl says:\n%s", id, stats[0], out)
	}
	return stats[0].Bands[0].PacketCount, stats[0].PacketInCount
}

// syn returns a TCP SYN from src:sport to dst:80.
func syn(t *testing.T, src, dst string, sport uint16) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, byte(sport)}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 0xfe}, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: net.ParseIP(src), DstIP: net.ParseIP(dst)}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: 80, SYN: true, Window: 64240}
	_ = tcp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, tcp); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// flood sends the flood from the flooding ports, with the victim's SYNs
// between its batches, and waits until the packet-ins stop coming.
func (r *puntRig) flood(ports ...int) {
	r.t.Helper()
	var batch [][]byte
	for i := range floodBatch {
		batch = append(batch, syn(r.t, "10.244.0.2", flooderService.addr, uint16(10000+i)))
	}
	sport := uint16(20000)
	for range floodBatches {
		for _, p := range ports {
			r.send(p, batch)
		}
		for range victimPerBatch {
			r.send(victimPort, [][]byte{syn(r.t, "10.244.0.3", victimService.addr, sport)})
			sport++
		}
	}
	// Settled: the packet-ins stop growing.
	prev := -1
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		n := len(r.pins)
		r.mu.Unlock()
		if n == prev {
			return
		}
		prev = n
		time.Sleep(200 * time.Millisecond) // the polling interval
	}
	r.t.Fatal("packet-ins still arriving 10 s after the flood")
}

// TestPuntFlood floods one pod's rejects through the punt stage on a real
// ovs-vswitchd and checks that another pod's rejects all reach the
// agent, each with its own Service's userdata, while the flooder gets its
// meter's rate and burst and the meter statistics count exactly what it
// dropped. The previous design, one shared meter, loses the other pod's
// packet-ins under the same flood: the check can fail.
func TestPuntFlood(t *testing.T) {
	sent := floodBatches * floodBatch
	victimSent := floodBatches * victimPerBatch
	t.Run("per source", func(t *testing.T) {
		r := newPuntRig(t, podStages(t))
		start := time.Now()
		r.flood(flooderPort)
		took := time.Since(start)
		got, victim := r.received(flooderPort, flooderService.id), r.received(victimPort, victimService.id)
		if victim != victimSent {
			t.Errorf("the other pod's rejects: %d of %d reached the agent during the flood", victim, victimSent)
		}
		rates, _ := puntflows.RatesOf(plan.PacketInReject)
		flooderMeter, _ := plan.SourceMeter(plan.PacketInReject, flooderPort)
		dropped, in := r.meterDrops(flooderMeter)
		t.Logf("flood of %d SYNs in %s: %d reached the agent, the flooder's meter dropped %d; the other pod's %d all arrived",
			sent, took.Round(time.Millisecond), got, dropped, victim)
		if limit := int(2*rates.Source) + int(float64(rates.Source)*(took.Seconds()+1)); got > limit {
			t.Errorf("the flooder got %d packet-ins in %s, over its meter's %d", got, took, limit)
		}
		if in != uint64(sent) || uint64(got)+dropped != in {
			t.Errorf("the flooder's meter saw %d packets and dropped %d, the agent got %d of %d sent", in, dropped, got, sent)
		}
		victimMeter, _ := plan.SourceMeter(plan.PacketInReject, victimPort)
		if dropped, _ := r.meterDrops(victimMeter); dropped != 0 {
			t.Errorf("the other pod's meter dropped %d", dropped)
		}
		if dropped, _ := r.meterDrops(plan.MeterReject); dropped != 0 {
			t.Errorf("the ceiling dropped %d", dropped)
		}
		// What the agent reads from a packet-in: the meter that let it
		// through, its key for the fair queues.
		r.mu.Lock()
		for _, p := range r.pins {
			if want, _ := plan.SourceMeter(plan.PacketInReject, p.InPort()); p.Reg(2) != want {
				t.Errorf("a packet-in from port %d carries PuntSource %#x, want %#x", p.InPort(), p.Reg(2), want)
				break
			}
		}
		r.mu.Unlock()
	})
	t.Run("one namespace's pods together", func(t *testing.T) {
		r := newPuntRig(t, podStages(t))
		start := time.Now()
		r.flood(flooderPort, flooderPort2, flooderPort3)
		took := time.Since(start)
		got := r.received(flooderPort, flooderService.id) + r.received(flooderPort2, flooderService.id) + r.received(flooderPort3, flooderService.id)
		victim := r.received(victimPort, victimService.id)
		rates, _ := puntflows.RatesOf(plan.PacketInReject)
		nsMeter, _ := plan.NamespaceMeter(plan.PacketInReject, flooderNamespace)
		dropped, _ := r.meterDrops(nsMeter)
		t.Logf("3 pods of one namespace flood %d SYNs each in %s: %d reached the agent, the namespace's meter dropped %d; the other namespace's %d of %d arrived",
			sent, took.Round(time.Millisecond), got, dropped, victim, victimSent)
		if victim != victimSent {
			t.Errorf("the other namespace's rejects: %d of %d reached the agent", victim, victimSent)
		}
		if limit := int(2*rates.Namespace) + int(float64(rates.Namespace)*(took.Seconds()+1)); got > limit {
			t.Errorf("the flooding namespace got %d packet-ins in %s, over its meter's %d", got, took, limit)
		}
		if dropped == 0 {
			t.Error("the flooding namespace's meter dropped nothing")
		}
		victimNS, _ := plan.NamespaceMeter(plan.PacketInReject, victimNamespace)
		if dropped, _ := r.meterDrops(victimNS); dropped != 0 {
			t.Errorf("the other namespace's meter dropped %d", dropped)
		}
	})
	t.Run("shared, the previous design", func(t *testing.T) {
		r := newPuntRig(t, puntflows.SharedState())
		r.flood(flooderPort)
		victim := r.received(victimPort, victimService.id)
		shared, _ := plan.SourceMeter(plan.PacketInReject, plan.SourceShared)
		dropped, _ := r.meterDrops(shared)
		t.Logf("one shared meter: the other pod's rejects: %d of %d reached the agent; the meter dropped %d", victim, victimSent, dropped)
		if victim >= victimSent {
			t.Errorf("with one shared meter, all %d of the other pod's rejects arrived: the flood should have taken some", victim)
		}
	})
}

// podStages returns the punt stage of the four pods and their two
// namespaces.
func podStages(t *testing.T) reconcile.State {
	t.Helper()
	var stage reconcile.State
	add := func(st reconcile.State, err error) {
		if err != nil {
			t.Fatal(err)
		}
		stage.Flows = append(stage.Flows, st.Flows...)
		stage.Meters = append(stage.Meters, st.Meters...)
	}
	for _, p := range []uint32{flooderPort, flooderPort2, flooderPort3} {
		add(puntflows.SourceState(puntflows.Source{Port: p, Namespace: flooderNamespace}))
	}
	add(puntflows.SourceState(puntflows.Source{Port: victimPort, Namespace: victimNamespace}))
	add(puntflows.NamespaceState(flooderNamespace))
	add(puntflows.NamespaceState(victimNamespace))
	return stage
}

// The datapath runs the source's meter, the namespace's, then the
// ceiling's before the controller action.
func TestPuntTraceOrder(t *testing.T) {
	r := newPuntRig(t, podStages(t))
	out, err := r.sb.Appctl("ofproto/trace", "br0", "in_port=1,tcp,nw_src=10.244.0.2,nw_dst="+flooderService.addr+",tp_dst=80")
	if err != nil {
		t.Fatal(err)
	}
	var dp string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "Datapath actions:") {
			dp = l
		}
	}
	src := strings.Index(dp, "meter(")
	ctrl := strings.Index(dp, "userspace(")
	if src < 0 || ctrl < 0 || strings.Count(dp, "meter(") != 3 || strings.LastIndex(dp, "meter(") > ctrl || !strings.Contains(dp, "controller(") {
		t.Errorf("datapath actions do not meter the source, the namespace and the ceiling before the controller:\n%s", out)
	}
}

// Open vSwitch's userspace datapath holds the meters of a full node, and
// takes the largest ids the plan gives: a source's of port 0xfeff and a
// namespace's of id 0x7fffff, in every category.
func TestMeterCapacity(t *testing.T) {
	sb := ovstest.New(t, ovs.Options{Dummy: true})
	if _, err := sb.Vsctl("add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=dummy", "protocols=OpenFlow13,OpenFlow15"); err != nil {
		t.Fatal(err)
	}
	out, err := sb.Ofctl("-O", "OpenFlow15", "meter-features", "br0")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`max_meter:(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no max_meter in\n%s", out)
	}
	maxMeters, _ := strconv.Atoi(m[1])
	// 250 pods, each in its own namespace, the node's 3 ports, the 4
	// ceilings.
	const pods = 250
	need := pods*len(plan.PuntCategories) + pods*len(plan.PuntCategories) + 3*3 + 4
	t.Logf("max_meter %d; a node of %d pods in as many namespaces needs %d", maxMeters, pods, need)
	if maxMeters < need {
		t.Errorf("the switch holds %d meters, a node of %d pods needs %d", maxMeters, pods, need)
	}
	var st reconcile.State
	for _, add := range []func() (reconcile.State, error){
		func() (reconcile.State, error) {
			return puntflows.SourceState(puntflows.Source{Port: plan.SourcePortMax})
		},
		func() (reconcile.State, error) { return puntflows.NamespaceState(0x7fffff) },
		func() (reconcile.State, error) { return puntflows.SharedState(), nil },
	} {
		s, err := add()
		if err != nil {
			t.Fatal(err)
		}
		st.Meters = append(st.Meters, s.Meters...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := logrus.New()
	l.SetOutput(io.Discard)
	c, err := ofconn.Dial(ctx, "unix:"+sb.MgmtSock("br0"), ofconn.Options{Logger: l})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, m := range st.Meters {
		if err := c.Apply(ctx, m.Mod(openflow.MeterAdd)); err != nil {
			t.Errorf("meter %d: %v", m.ID, err)
		}
	}
}
