package reconcile

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
	"nodeflow/testbed/ovs"
)

func mac(n int) net.HardwareAddr {
	return net.HardwareAddr{0x0a, 0x58, 0x0a, 0x80, byte(n >> 8), byte(n)}
}

// TestReconcileAgainstOVS installs a realistic desired state (pipeline
// misses, pods, services with hash select groups and ct/nat, a meter and a
// metered packet-in) and checks that ovs-ofctl shows exactly it, and that
// reading it back finds nothing to change.
func TestReconcileAgainstOVS(t *testing.T) {
	sb, addr := testBridge(t, ovs.Options{}, "br0")
	s := sampleStore(t)

	run := start(t, addr, s, Options{AuditInterval: -1})
	gen := run.r.Generation()
	if gen != 1 {
		t.Errorf("generation on an empty bridge is %d, want 1", gen)
	}
	if err := sameState(t, sb, "br0", s, gen, false); err != nil {
		t.Fatal(err)
	}
	meters, err := sb.Ofctl("-O", "OpenFlow15", "dump-meters", "br0")
	if err != nil || !strings.Contains(meters, fmt.Sprintf("meter=%d", plan.MeterReject)) {
		t.Fatalf("meter missing: %v\n%s", err, meters)
	}
	diffs, err := run.r.Compare(t.Context(), "")
	if err != nil || len(diffs) != 0 {
		t.Fatalf("compare after sync: %v %+v", err, diffs)
	}
	note, err := sb.Ofctl("-O", "OpenFlow15", "dump-flows", "--no-stats", "br0", "table=253")
	if err != nil || !strings.Contains(note, "note:") || !strings.Contains(note, fmt.Sprintf("cookie=0x%x", uint64(plan.MakeCookie(plan.FeatureMeta, VersionOwner, 1)))) {
		t.Fatalf("version note: %v\n%s", err, note)
	}
}

// TestPropertyRandomUpdates is the property test: random sequences of
// owner updates against the sandbox's ovs-vswitchd. After each, what
// ovs-ofctl dump-flows and dump-groups show equals the desired state, and
// the reconciler's own reading of the switch finds no difference.
func TestPropertyRandomUpdates(t *testing.T) {
	sb, addr := testBridge(t, ovs.Options{}, "br0")
	s := NewStore(StoreOptions{Bridge: plan.Pod})
	mustSet(t, s, "pipeline", pipelineState())
	mustSet(t, s, "unidle/meters", meterState())
	run := start(t, addr, s, Options{AuditInterval: -1, MaxBundle: 25})
	gen := run.r.Generation()

	r := rand.New(rand.NewPCG(42, uint64(time.Now().UnixNano())))
	services := 8
	pods := 8
	steps := 40
	if testing.Short() {
		steps = 10
	}
	for step := 0; step < steps; step++ {
		for n := 1 + r.IntN(5); n > 0; n-- {
			switch r.IntN(3) {
			case 0, 1:
				i := r.IntN(services)
				owner := fmt.Sprintf("service/ns/svc%d:80/TCP", i)
				if r.IntN(5) == 0 {
					mustSet(t, s, owner, State{})
					continue
				}
				var eps []netip.Addr
				for k := r.IntN(6); k > 0; k-- {
					eps = appendUnique(eps, ipN("10.128.0.10", r.IntN(40)))
				}
				mustSet(t, s, owner, serviceState(uint32(100+i), ipN("10.96.0.1", i), 80, eps, uint16(8000+r.IntN(3)), r.IntN(2) == 0))
			case 2:
				i := r.IntN(pods)
				owner := fmt.Sprintf("pod/ns/pod%d", i)
				if r.IntN(4) == 0 {
					mustSet(t, s, owner, State{})
					continue
				}
				mustSet(t, s, owner, podState(uint32(10+i+r.IntN(2)*pods), mac(i+r.IntN(2)*pods), ipN("10.128.2.0", i), uint64(r.IntN(5))))
			}
		}
		run.flush(t)
		if err := sameState(t, sb, "br0", s, gen, false); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		diffs, err := run.r.Compare(t.Context(), "")
		if err != nil || len(diffs) != 0 {
			t.Fatalf("step %d: the reconciler reads back differences: %v %+v", step, err, diffs)
		}
		if errs := s.Errors(); len(errs) != 0 {
			t.Fatalf("step %d: owner errors %v", step, errs)
		}
	}
}

func appendUnique(as []netip.Addr, a netip.Addr) []netip.Addr {
	for _, x := range as {
		if x == a {
			return as
		}
	}
	return append(as, a)
}

// Keep the openflow import for helpers used only in some tests.
var _ = openflow.Version15

// TestBurstsCoalesce fires many owner updates while the reconciler runs:
// they must reach the switch in far fewer passes and bundles than updates,
// and all of them must arrive.
func TestBurstsCoalesce(t *testing.T) {
	sb, addr := testBridge(t, ovs.Options{}, "br0")
	s := NewStore(StoreOptions{})
	var passes, bundles atomic.Int32
	run := start(t, addr, s, Options{AuditInterval: -1, OnSync: func(rep SyncReport) {
		if rep.Stats.Total() > 0 {
			passes.Add(1)
			bundles.Add(int32(rep.Bundles))
		}
	}})
	passes.Store(0)
	bundles.Store(0)
	const updates = 500
	for i := 0; i < updates; i++ {
		mustSet(t, s, fmt.Sprintf("pod/ns/p%d", i), State{Flows: []openflow.Flow{dstFlow(70, 100, i, openflow.OutputPort(uint32(i%50+1)))}})
	}
	run.flush(t)
	if err := sameState(t, sb, "br0", s, run.r.Generation(), false); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d updates went in %d passes, %d bundles", updates, passes.Load(), bundles.Load())
	if p := passes.Load(); p == 0 || p > updates/10 {
		t.Fatalf("%d updates took %d passes: bursts did not coalesce", updates, p)
	}
}

// TestLargeGroup installs a select group of 5,000 buckets, more than one
// OpenFlow message holds: it goes as an add followed by bucket inserts in
// the same bundle as the flow that uses it.
func TestLargeGroup(t *testing.T) {
	sb, addr := testBridge(t, ovs.Options{}, "br0")
	s := NewStore(StoreOptions{})
	var eps []netip.Addr
	for i := 0; i < 5000; i++ {
		eps = append(eps, ipN("10.128.0.0", i))
	}
	st := serviceState(7, netip.MustParseAddr("10.96.0.7"), 80, eps, 8080, false)
	st.Flows = st.Flows[len(st.Flows)-1:] // the group and the ServiceLB flow
	mustSet(t, s, "service/ns/big:80/TCP", st)
	toLB := State{Flows: []openflow.Flow{{Table: 0, Priority: 0, Instructions: []openflow.Instruction{openflow.GotoTable{Table: 30}}}}}
	mustSet(t, s, "node/to-lb", toLB)
	run := start(t, addr, s, Options{AuditInterval: -1})
	// Open vSwitch cannot describe a group this big (ovs-ofctl dump-groups
	// fails on it too), so check that the flow using it is in and that
	// ofproto/trace goes through one of its buckets.
	flows, err := sb.Ofctl("-O", "OpenFlow15", "dump-flows", "--no-stats", "br0")
	if err != nil || !strings.Contains(flows, "group:7") {
		t.Fatalf("flow using the group: %v\n%s", err, flows)
	}
	traceBucket := func() string {
		out, err := sb.Appctl("ofproto/trace", "br0", "in_port=LOCAL,tcp,nw_src=10.0.0.1,nw_dst=10.96.0.7,tcp_src=1234,tcp_dst=80,ct_state=new|trk")
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if out := traceBucket(); !strings.Contains(out, "group:7") || !strings.Contains(out, "bucket") {
		t.Fatalf("trace does not go through the group:\n%s", out)
	}
	// Shrink it by one endpoint: one modification, split the same way.
	st2 := serviceState(7, netip.MustParseAddr("10.96.0.7"), 80, eps[1:], 8080, false)
	st2.Flows = st2.Flows[len(st2.Flows)-1:]
	mustSet(t, s, "service/ns/big:80/TCP", st2)
	run.flush(t)
	if errs := s.Errors(); len(errs) != 0 {
		t.Fatal(errs)
	}
	// Reading the switch back (the audit, --diff) must not try to read the
	// big group, and finds nothing else to change.
	if diffs, err := run.r.Compare(t.Context(), ""); err != nil || len(diffs) != 0 {
		t.Fatalf("read back: %v, %d differences", err, len(diffs))
	}
	// A restarted agent re-sends the big group (it cannot tell whether it
	// changed) and keeps the rest.
	run.stop()
	s2 := NewStore(StoreOptions{})
	mustSet(t, s2, "service/ns/big:80/TCP", st2)
	mustSet(t, s2, "node/to-lb", toLB)
	reps := make(chan SyncReport, 1)
	run2 := start(t, addr, s2, Options{AuditInterval: -1, OnSync: func(r SyncReport) {
		if r.Kind == SyncStartup {
			reps <- r
		}
	}})
	rep := <-reps
	if rep.Err != nil || rep.Stats != (DiffStats{GroupAdds: 1, FlowModifies: 1}) { // the big group, the version note
		t.Fatalf("restart: %s (%v)", rep.Stats, rep.Err)
	}
	if out := traceBucket(); !strings.Contains(out, "group:7") {
		t.Fatalf("after the restart:\n%s", out)
	}
	_ = run2
}

// TestMetersTogether: a pass sends its meter changes in one round trip,
// and one the switch refuses, a meter someone added behind the store's
// back, goes again alone as a modify; every meter ends as desired.
func TestMetersTogether(t *testing.T) {
	sb, addr := testBridge(t, ovs.Options{}, "br0")
	s := NewStore(StoreOptions{Bridge: plan.Pod})
	mustSet(t, s, "pipeline", pipelineState())
	run := start(t, addr, s, Options{AuditInterval: -1})
	if _, err := sb.Ofctl("-O", "OpenFlow15", "add-meter", "br0", "meter=65541,pktps,band=type=drop,rate=7"); err != nil {
		t.Fatal(err)
	}
	meter := func(id, rate uint32) openflow.MeterEntry {
		return openflow.MeterEntry{ID: id, Flags: openflow.MeterFlagPktps | openflow.MeterFlagBurst,
			Bands: []openflow.MeterBand{{Type: openflow.MeterBandDrop, Rate: rate, BurstSize: 2 * rate}}}
	}
	want := []openflow.MeterEntry{meter(65541, 200), meter(131077, 100), meter(196613, 400), meter(262149, 10)}
	mustSet(t, s, "pod/default/a", State{Meters: want})
	run.flush(t)
	out, err := sb.Ofctl("-O", "OpenFlow15", "dump-meters", "br0")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range want {
		line := fmt.Sprintf("meter=%d pktps burst bands=\ntype=drop rate=%d burst_size=%d", m.ID, m.Bands[0].Rate, m.Bands[0].BurstSize)
		if !strings.Contains(out, line) {
			t.Errorf("no %q in\n%s", line, out)
		}
	}
	if errs := s.Errors(); len(errs) != 0 {
		t.Errorf("owners with errors: %v", errs)
	}
}
