package flowtest

import (
	"testing"

	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

// TestHeldFragments reads a real userspace datapath's fragment count
// (none held on a new bridge) and refuses output without one.
func TestHeldFragments(t *testing.T) {
	sb := ovstest.New(t, ovs.Options{})
	ovstest.AddBridge(t, sb, "br0")
	if n := HeldFragments(t, sb); n != 0 {
		t.Errorf("a new datapath holds %d fragments", n)
	}
	for _, bad := range []string{"", "num frag: none", "ovs-appctl: no such command"} {
		if n, err := ParseHeldFragments(bad); err == nil {
			t.Errorf("ParseHeldFragments(%q) = %d, want an error", bad, n)
		}
	}
}
