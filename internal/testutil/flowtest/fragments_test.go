package flowtest

import (
	"testing"
	"time"

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

// TestReasmRequests sends a 3,000-byte datagram each way between the two
// pods of NewPodPair over a bridge that forwards everything: each pod's
// stack counts the three fragments it reassembled, IPv4 and IPv6.
func TestReasmRequests(t *testing.T) {
	sb, c, s, _ := NewPodPair(t, 5000)
	if _, err := sb.Ofctl("-O", "OpenFlow15", "add-flow", "br0", "actions=normal"); err != nil {
		t.Fatal(err)
	}
	for _, v6 := range []bool{false, true} {
		cBefore, sBefore := ReasmRequests(t, c.Netns, v6), ReasmRequests(t, s.Netns, v6)
		if !SendDatagram(t, c, s.Addr(v6), 5000, 3000, 5*time.Second) {
			t.Fatalf("v6=%v: no echo through a NORMAL bridge", v6)
		}
		if n := ReasmRequests(t, s.Netns, v6) - sBefore; n != 3 {
			t.Errorf("v6=%v: the server counted %d fragments, want 3", v6, n)
		}
		if n := ReasmRequests(t, c.Netns, v6) - cBefore; n != 3 {
			t.Errorf("v6=%v: the client counted %d fragments of the echo, want 3", v6, n)
		}
	}
}
