package serviceflows

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"nodeflow/model/service"
)

func TestStaleConntrack(t *testing.T) {
	old := []service.Endpoint{
		ready("10.128.0.2", 53, "node1"), ready("10.128.1.5", 53, "node2"),
		ready("172.18.0.3", 5353, "node1"), ready("10.128.1.5", 53, "node2"),
	}
	current := []service.Endpoint{ready("10.128.0.2", 53, "node1")}
	got := StaleConntrack(testNode(), v1.ProtocolUDP, old, current)
	if len(got) != 2 {
		t.Fatalf("%d flushes, want 2: %+v", len(got), got)
	}
	want := []struct {
		src  string
		port uint16
	}{{"10.128.1.5", 53}, {"169.254.169.2", 5353}}
	for i, w := range want {
		f := got[i]
		if f.Zone == nil || *f.Zone != 65000 || f.IPProto != 17 || f.Reply.Src != a(w.src) || f.Reply.SrcPort != w.port {
			t.Errorf("flush %d: zone %v proto %d reply %+v, want %s:%d", i, f.Zone, f.IPProto, f.Reply, w.src, w.port)
		}
	}
	if got := StaleConntrack(testNode(), v1.ProtocolTCP, old, nil); got != nil {
		t.Errorf("TCP flushes: %+v", got)
	}
}

// TestStaleConntrackSCTP: SCTP entries carry no ports in Open vSwitch's
// userspace conntrack, so they are flushed by address, once per address
// no current endpoint has.
func TestStaleConntrackSCTP(t *testing.T) {
	old := []service.Endpoint{
		ready("10.128.0.2", 7777, "node1"), ready("10.128.0.2", 7778, "node1"),
		ready("10.128.1.5", 7777, "node2"), ready("10.128.1.5", 7778, "node2"),
		ready("172.18.0.3", 7777, "node1"),
	}
	// 10.128.0.2 stays (on one port only); the others leave.
	current := []service.Endpoint{ready("10.128.0.2", 7777, "node1")}
	got := StaleConntrack(testNode(), v1.ProtocolSCTP, old, current)
	want := []string{"10.128.1.5", "169.254.169.2"}
	if len(got) != len(want) {
		t.Fatalf("%d flushes, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		f := got[i]
		if f.Zone == nil || *f.Zone != 65000 || f.IPProto != 132 || f.Reply.Src != a(w) || f.Reply.SrcPort != 0 || f.Reply.Dst.IsValid() {
			t.Errorf("flush %d: zone %v proto %d reply %+v, want any SCTP entry from %s", i, f.Zone, f.IPProto, f.Reply, w)
		}
	}
}
