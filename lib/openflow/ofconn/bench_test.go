package ofconn

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"nodeflow/lib/openflow"
	"nodeflow/testbed/ovs"
)

// ctNatFlow is flow i of the service benchmark, as a value and as the
// ovs-ofctl text of the same flow:
//
//	table=31,priority=100,ct_state=+new+trk,tcp,nw_dst=172.X.Y.Z,tp_dst=80,
//	actions=ct(commit,table=40,zone=1,nat(dst=10.128.Y.Z:8080))
func ctNatFlow(i int) (openflow.Flow, string) {
	x, y, z := byte(16+i/65536), byte(i/256), byte(i)
	vip := netip.AddrFrom4([4]byte{172, x, y, z})
	ep := netip.AddrFrom4([4]byte{10, 128, y, z})
	f := openflow.Flow{Table: 31, Priority: 100,
		Match: openflow.NewMatch(
			openflow.CtState(openflow.CtNew|openflow.CtTrk, openflow.CtNew|openflow.CtTrk),
			openflow.EthType(0x0800), openflow.IPProto(6), openflow.IPv4Dst(vip), openflow.TCPDst(80)),
		Instructions: apply(openflow.CT{Commit: true, Zone: 1, RecircTable: 40,
			Actions: []openflow.Action{openflow.NAT{Dst: true, MinAddr: ep, MinPort: 8080}}}),
	}
	text := fmt.Sprintf("table=31,priority=100,ct_state=+new+trk,tcp,nw_dst=%s,tp_dst=80,actions=ct(commit,table=40,zone=1,nat(dst=%s:8080))", vip, ep)
	return f, text
}

// flowCountOf returns the number of flows the switch holds.
func flowCountOf(tb testing.TB, c *Conn) int64 {
	tb.Helper()
	s, err := c.currentSession()
	if err != nil {
		tb.Fatal(err)
	}
	n, err := s.flowCount(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

func delFlows(tb testing.TB, sb *ovs.Sandbox) {
	tb.Helper()
	if _, err := sb.Ofctl("-O", "OpenFlow15", "del-flows", "br0"); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkInstall100kCtNatFlows installs 100,000 ct/nat service flows over
// one persistent connection in one bundle, and the same flows with
// `ovs-ofctl -O OpenFlow15 --bundle add-flows`, deleting all flows between
// runs. ratio = ofconn time / ovs-ofctl time.
func BenchmarkInstall100kCtNatFlows(b *testing.B) {
	const n = 100000
	sb, addr := testBridge(b)
	c := testDial(b, addr, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	msgs := make([]openflow.Message, n)
	var text strings.Builder
	for i := 0; i < n; i++ {
		f, s := ctNatFlow(i)
		msgs[i] = f.AddMod()
		text.WriteString(s)
		text.WriteByte('\n')
	}
	file := filepath.Join(b.TempDir(), "flows.txt")
	if err := os.WriteFile(file, []byte(text.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	// Both install the same flows.
	if err := c.Bundle(ctx, msgs[:3]); err != nil {
		b.Fatal(err)
	}
	ours := dumpFlows(b, sb)
	delFlows(b, sb)
	for i := 0; i < 3; i++ {
		if _, err := sb.Ofctl("-O", "OpenFlow15", "add-flow", "br0", strings.Split(text.String(), "\n")[i]); err != nil {
			b.Fatal(err)
		}
	}
	if theirs := dumpFlows(b, sb); !slices.Equal(ours, theirs) {
		b.Fatalf("flows differ:\nofconn:\n%s\novs-ofctl:\n%s", strings.Join(ours, "\n"), strings.Join(theirs, "\n"))
	}

	var goTime, ofctlTime time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		delFlows(b, sb)
		b.StartTimer()
		t0 := time.Now()
		if err := c.Bundle(ctx, msgs); err != nil {
			b.Fatal(err)
		}
		goTime += time.Since(t0)
		b.StopTimer()
		if got := flowCountOf(b, c); got != n {
			b.Fatalf("ofconn installed %d flows", got)
		}
		delFlows(b, sb)
		b.StartTimer()
		t0 = time.Now()
		if _, err := sb.Ofctl("-O", "OpenFlow15", "--bundle", "add-flows", "br0", file); err != nil {
			b.Fatal(err)
		}
		ofctlTime += time.Since(t0)
		b.StopTimer()
		if got := flowCountOf(b, c); got != n {
			b.Fatalf("ovs-ofctl installed %d flows", got)
		}
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(goTime.Seconds()/float64(b.N), "ofconn-s/op")
	b.ReportMetric(ofctlTime.Seconds()/float64(b.N), "ofctl-s/op")
	b.ReportMetric(float64(n)/(goTime.Seconds()/float64(b.N)), "ofconn-flows/s")
	b.ReportMetric(goTime.Seconds()/ofctlTime.Seconds(), "ratio")
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(p * float64(len(s)-1))
	return s[i]
}

// BenchmarkOneFlowChange100k measures one flow change on a switch holding
// 100,000 flows: a flow mod and a barrier over the persistent connection,
// against forking `ovs-ofctl bundle` for the same change (the openshift-sdn
// approach), and against a barrier alone (the switch's round trip with
// nothing to do, untimed by the benchmark itself). Each iteration adds one
// flow and deletes the previous one. The changes are also reported apart:
// those right after the previous iteration's ovs-ofctl run, and those right
// after the barrier.
// ratio = ofconn p50 / ovs-ofctl p50.
func BenchmarkOneFlowChange100k(b *testing.B) {
	const n = 100000
	sb, addr := testBridge(b)
	c := testDial(b, addr, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	msgs := make([]openflow.Message, n)
	for i := 0; i < n; i++ {
		f, _ := ctNatFlow(i)
		msgs[i] = f.AddMod()
	}
	if err := c.Bundle(ctx, msgs); err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	var goLat, ofctlLat, barrierLat []time.Duration
	// The floor: a barrier alone, one round trip through the switch's main
	// loop with nothing to change, on the same connection. It goes first
	// in every other iteration, so that the change and the barrier meet
	// the switch just after the ovs-ofctl fork equally often.
	barrier := func() {
		b.StopTimer()
		t0 := time.Now()
		if err := c.Barrier(ctx); err != nil {
			b.Fatal(err)
		}
		barrierLat = append(barrierLat, time.Since(t0))
		b.StartTimer()
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f := testFlow(50, 1, uint16(i))
		prev := testFlow(50, 1, uint16(i-1))
		if i%2 == 1 {
			barrier()
		}
		t0 := time.Now()
		if err := c.Apply(ctx, f.AddMod(), prev.DeleteStrictMod()); err != nil {
			b.Fatal(err)
		}
		goLat = append(goLat, time.Since(t0))
		if i%2 == 0 {
			barrier()
		}

		b.StopTimer()
		file := filepath.Join(dir, "change.txt")
		change := fmt.Sprintf("flow add table=51,priority=1,cookie=0x77,tcp,tp_dst=%d,actions=drop\nflow delete_strict table=51,priority=1,tcp,tp_dst=%d\n", i, uint16(i-1))
		if err := os.WriteFile(file, []byte(change), 0o644); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t0 = time.Now()
		if _, err := sb.Ofctl("-O", "OpenFlow15", "bundle", "br0", file); err != nil {
			b.Fatal(err)
		}
		ofctlLat = append(ofctlLat, time.Since(t0))
	}
	b.StopTimer()
	if got := flowCountOf(b, c); got != n+2 {
		b.Errorf("%d flows at the end, want %d", got, n+2)
	}
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	b.ReportMetric(ms(percentile(goLat, 0.5)), "ofconn-p50-ms")
	b.ReportMetric(ms(percentile(goLat, 0.99)), "ofconn-p99-ms")
	b.ReportMetric(ms(percentile(ofctlLat, 0.5)), "ofctl-p50-ms")
	b.ReportMetric(ms(percentile(ofctlLat, 0.99)), "ofctl-p99-ms")
	// The changes that met the switch just after the ovs-ofctl run, and
	// those that met it after the barrier.
	var afterFork, afterBarrier []time.Duration
	for i, d := range goLat {
		if i%2 == 0 {
			afterFork = append(afterFork, d)
		} else {
			afterBarrier = append(afterBarrier, d)
		}
	}
	b.ReportMetric(ms(percentile(afterFork, 0.99)), "ofconn-after-ofctl-p99-ms")
	b.ReportMetric(ms(percentile(afterBarrier, 0.99)), "ofconn-after-barrier-p99-ms")
	b.ReportMetric(ms(percentile(barrierLat, 0.5)), "barrier-p50-ms")
	b.ReportMetric(ms(percentile(barrierLat, 0.99)), "barrier-p99-ms")
	b.ReportMetric(float64(percentile(goLat, 0.5))/float64(percentile(ofctlLat, 0.5)), "ratio")
}

// BenchmarkPacketInRoundTrip bounces a packet between the switch and a
// handler: table 0 sends packets from the controller back to the
// controller, and the handler answers each packet-in with a packet-out of
// the same frame to TABLE. One bounce is packet-in -> handler -> packet-out
// -> pipeline -> packet-in. The interval between consecutive packet-ins is
// the round trip.
func BenchmarkPacketInRoundTrip(b *testing.B) {
	_, addr := testBridge(b)
	ctx := context.Background()
	var mu sync.Mutex
	var times []time.Time
	remaining := atomic.Int64{}
	done := make(chan struct{})
	var c *Conn
	c = testDial(b, addr, Options{Handlers: Handlers{PacketIn: func(m AsyncMessage) {
		now := time.Now()
		mu.Lock()
		times = append(times, now)
		mu.Unlock()
		if remaining.Add(-1) < 0 {
			close(done)
			return
		}
		pin := m.Message.(*openflow.PacketIn)
		po := &openflow.PacketOut{InPort: openflow.PortController, Actions: []openflow.Action{openflow.OutputPort(openflow.PortTable)}, Data: pin.Data}
		if err := c.Send(ctx, po); err != nil {
			b.Error(err)
		}
	}}})
	punt := openflow.Flow{Table: 0, Priority: 10,
		Match:        openflow.NewMatch(openflow.InPort(openflow.PortController)),
		Instructions: apply(openflow.Controller2{MaxLen: 0xffff, Reason: openflow.ControllerReasonAction, Userdata: []byte{1}})}
	if err := c.Apply(ctx, punt.AddMod()); err != nil {
		b.Fatal(err)
	}
	syn := tcpSYN(b, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("172.30.0.10"), 40000, 80)
	remaining.Store(int64(b.N))
	b.ResetTimer()
	t0 := time.Now()
	if err := c.Send(ctx, &openflow.PacketOut{InPort: openflow.PortController, Actions: []openflow.Action{openflow.OutputPort(openflow.PortTable)}, Data: syn}); err != nil {
		b.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatal("bouncing stopped")
	}
	elapsed := time.Since(t0)
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	var rtt []time.Duration
	for i := 1; i < len(times); i++ {
		rtt = append(rtt, times[i].Sub(times[i-1]))
	}
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	b.ReportMetric(us(percentile(rtt, 0.5)), "rtt-p50-µs")
	b.ReportMetric(us(percentile(rtt, 0.99)), "rtt-p99-µs")
	b.ReportMetric(float64(len(times))/elapsed.Seconds(), "bounces/s")
}

// BenchmarkPacketInBehindMeter offers packet-outs that each become a
// packet-in, through a 2,000 packets/s meter, and reports how many
// packet-ins per second arrive, against the offered rate. The connection's
// handler queue is not the bottleneck: drops are the meter's.
func BenchmarkPacketInBehindMeter(b *testing.B) {
	const rate = 2000
	_, addr := testBridge(b)
	ctx := context.Background()
	var got atomic.Int64
	c := testDial(b, addr, Options{QueueLen: 8192, Handlers: Handlers{PacketIn: func(AsyncMessage) { got.Add(1) }}})
	mm := &openflow.MeterMod{Command: openflow.MeterAdd, Flags: openflow.MeterFlagPktps | openflow.MeterFlagBurst, MeterID: 1,
		Bands: []openflow.MeterBand{{Type: openflow.MeterBandDrop, Rate: rate, BurstSize: rate / 10}}}
	punt := openflow.Flow{Table: 0, Priority: 10,
		Match:        openflow.NewMatch(openflow.InPort(openflow.PortController)),
		Instructions: apply(openflow.Meter{ID: 1}, openflow.Controller2{MaxLen: 128, Reason: openflow.ControllerReasonAction, Userdata: []byte{2}})}
	if err := c.Apply(ctx, mm, punt.AddMod()); err != nil {
		b.Fatal(err)
	}
	syn := tcpSYN(b, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("172.30.0.10"), 40000, 80)
	po := &openflow.PacketOut{InPort: openflow.PortController, Actions: []openflow.Action{openflow.OutputPort(openflow.PortTable)}, Data: syn}
	batch := make([]openflow.Message, 500)
	for i := range batch {
		batch[i] = po
	}
	b.ResetTimer()
	var offered int
	t0 := time.Now()
	for time.Since(t0) < 2*time.Second || offered < b.N {
		if err := c.Apply(ctx, batch...); err != nil {
			b.Fatal(err)
		}
		offered += len(batch)
	}
	elapsed := time.Since(t0)
	// Packet-ins already generated are still arriving: let them settle.
	var last int64 = -1
	for got.Load() != last {
		last = got.Load()
		time.Sleep(100 * time.Millisecond)
	}
	b.StopTimer()
	st := c.Stats().Async[KindPacketIn]
	b.ReportMetric(float64(offered)/elapsed.Seconds(), "offered-pps")
	b.ReportMetric(float64(got.Load())/elapsed.Seconds(), "delivered-pps")
	b.ReportMetric(rate, "meter-pps")
	b.ReportMetric(float64(st.Dropped), "queue-drops")
}
