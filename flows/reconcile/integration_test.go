package reconcile

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"nodeflow/flows/plan"
	"nodeflow/openflow"
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
	s := NewStore(StoreOptions{Bridge: plan.Pod})
	mustSet(t, s, "pipeline", pipelineState())
	mustSet(t, s, "pod/default/a", podState(3, mac(2), netip.MustParseAddr("10.128.0.2"), 7))
	mustSet(t, s, "service/default/web:80/TCP", serviceState(11, netip.MustParseAddr("10.96.0.10"), 80,
		[]netip.Addr{netip.MustParseAddr("10.128.0.2"), netip.MustParseAddr("10.128.1.5")}, 8080, false))
	mustSet(t, s, "service/default/host:80/TCP", serviceState(12, netip.MustParseAddr("10.96.0.11"), 80,
		[]netip.Addr{netip.MustParseAddr("169.254.169.2")}, 8081, true))
	mustSet(t, s, "unidle/default/empty:80/TCP", meterState())
	mustSet(t, s, "service/default/empty:80/TCP", serviceState(13, netip.MustParseAddr("10.96.0.12"), 80, nil, 0, false))

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
