package networkpolicyflows

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"nodeflow/datapath/conntrack"
	"nodeflow/datapath/gatewayflows"
	"nodeflow/datapath/plan"
	"nodeflow/internal/testutil/flowtest"
	"nodeflow/lib/openflow"
)

// TestOVSFragments sends real fragmented UDP through the policy tables in
// a sandboxed userspace datapath, between two pods of one node: pod c
// (egress: UDP 5000 and 5002 anywhere) and pod s (ingress: UDP 5000 and
// 5001 from anyone). A 3,000-byte datagram to 5000 comes back whole; to
// 5001 (denied by c's egress, table 45) and 5002 (denied by s's ingress,
// table 65) not one fragment reaches s. Crafted fragments follow the same
// rule: the first fragment of an allowed datagram with the later fragments
// of another, to a denied port; a later fragment alone; an overlapping
// fragment. And the allowed datagram's fragments recirculate three times
// (table 25, and each table's meeting).
func TestOVSFragments(t *testing.T) {
	sb, c, s, srv := flowtest.NewPodPair(t, 5000, 5001, 5002)

	cfg := Config{PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/24"), netip.MustParsePrefix("fd09::/64")},
		Masquerade: conntrack.DefaultPlan()}
	var fs []openflow.Flow
	add := appender(t, &fs)
	// The pipeline around the policy tables: every IP packet from a pod
	// port is tracked in the service zone and goes to 45, the egress
	// firewall passes, routing sends the pods' subnet through 65, and
	// delivery outputs by destination.
	frame := []openflow.Flow{}
	for _, p := range []flowtest.Pod{c, s} {
		frame = append(frame, flow(plan.PodClassifier, 100, []openflow.Instruction{
			openflow.ApplyActions{Actions: []openflow.Action{plan.FromPod.Load()}}, openflow.GotoTable{Table: uint8(plan.PodConntrack)}},
			openflow.InPort(p.Port)))
		for _, f := range families {
			a := p.Addr(f.v6)
			frame = append(frame, flow(plan.PodLocalDelivery, 100, []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{
				openflow.SetField{Field: openflow.EthDst(p.MAC)}, openflow.Output{Port: p.Port}}}}, f.eth, f.dst(netip.PrefixFrom(a, a.BitLen()))))
		}
	}
	for _, f := range families {
		frame = append(frame, flow(plan.PodConntrack, 50, []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{
			openflow.CT{Zone: uint16(conntrack.ZoneService), RecircTable: uint8(plan.PodEgressPolicy), Actions: []openflow.Action{openflow.NAT{}}}}}}, f.eth))
	}
	for _, p := range cfg.PodCIDRs {
		f := families[0]
		if p.Addr().Is6() {
			f = families[1]
		}
		frame = append(frame, flow(plan.PodRouting, 100, goTo(plan.PodIngressPolicy), f.eth, f.dst(p)))
	}
	for _, fl := range gatewayflows.PipelineFlows(plan.Pod) {
		switch plan.TableID(fl.Table) {
		case plan.PodEgressPolicy, plan.PodEgressFirewall, plan.PodIngressPolicy:
			fs = append(fs, fl)
		}
	}
	fs = append(fs, frame...)
	add(BaseFlows(cfg))
	add(RuleFlows(cfg, Egress, 3))
	add(RuleFlows(cfg, Ingress, 1))
	add(IsolationFlows(Egress, c.Port, nil, false))
	add(IsolationFlows(Ingress, 0, []netip.Addr{s.V4, s.V6}, false))
	add(ClauseFlows(Key{Dir: Egress, InPort: c.Port}, []Conj{{3, 1}}))
	for _, v6 := range []bool{false, true} {
		for _, port := range []uint16{5000, 5002} {
			add(ClauseFlows(Key{Dir: Egress, V6: v6, L4: L4{ProtoUDP, port, 0xffff}}, []Conj{{3, 2}}))
		}
		add(ClauseFlows(Key{Dir: Ingress, V6: v6}, []Conj{{1, 1}}))
		a := s.Addr(v6)
		// 5000-5001 as one bitwise match.
		add(ClauseFlows(Key{Dir: Ingress, V6: v6, Dst: netip.PrefixFrom(a, a.BitLen()), L4: L4{ProtoUDP, 5000, 0xfffe}}, []Conj{{1, 2}}))
	}
	flowtest.InstallAndCompare(t, sb, "br0", fs)

	for _, v6 := range []bool{false, true} {
		fam := "ipv4"
		if v6 {
			fam = "ipv6"
		}
		dst := s.Addr(v6)
		t.Run("allowed "+fam, func(t *testing.T) {
			if _, err := sb.Appctl("revalidator/purge"); err != nil {
				t.Fatal(err)
			}
			if !flowtest.SendDatagram(t, c, dst, 5000, 3000, 2*time.Second) {
				t.Fatalf("no echo of a 3000-byte datagram to %s:5000", dst)
			}
			// The datapath port names of the pods' interfaces are theirs.
			for _, frag := range []string{"first", "later"} {
				if n := flowtest.DatapathPasses(t, sb, c.HostIf, frag); n != 4 {
					t.Errorf("a %s fragment took %d passes through the datapath, want 4 (3 recirculations: table 25 and the meetings of 45 and 65)", frag, n)
				}
			}
		})
		for _, port := range []int{5001, 5002} {
			t.Run(fmt.Sprintf("denied %s %d", fam, port), func(t *testing.T) {
				before, seen := flowtest.ReasmRequests(t, s.Netns, v6), srv.Count(port)
				if flowtest.SendDatagram(t, c, dst, port, 3000, time.Second) {
					t.Errorf("a 3000-byte datagram to %s:%d was answered", dst, port)
				}
				if n := flowtest.ReasmRequests(t, s.Netns, v6) - before; n != 0 {
					t.Errorf("%d fragments of a datagram to denied port %d reached the server's stack", n, port)
				}
				if srv.Count(port) != seen {
					t.Errorf("the server read a datagram on denied port %d", port)
				}
				if held := flowtest.HeldFragments(t, sb); held == 0 {
					t.Errorf("the datapath holds no fragment: the denied datagram's later fragments should wait there")
				}
			})
		}
		t.Run("crafted "+fam, func(t *testing.T) {
			// 3,000 bytes with the UDP header, in fragments of 1,296
			// bytes (the datapath's least for a fragment that is not
			// the last is 1,200 bytes of IPv4 and 1,280 of IPv6) and
			// the rest, within the pods' MTU of 1,400.
			payload := bytes.Repeat([]byte{'x'}, 2992)
			allowed := flowtest.Fragment{ID: 0x1001, SrcPort: 40001, DstPort: 5000, Payload: payload}
			denied := flowtest.Fragment{ID: 0x1002, SrcPort: 40002, DstPort: 5002, Payload: payload}
			part := func(f flowtest.Fragment, start, end int) []byte {
				f.Start, f.End = start, end
				return f.Frame(c, s, v6)
			}
			before := flowtest.ReasmRequests(t, s.Netns, v6)
			// The allowed datagram's first fragment and the denied one's
			// later fragments: nothing can be put together, nothing of
			// the denied datagram may pass.
			flowtest.SendFrames(t, c, part(allowed, 0, 1296), part(denied, 1296, 2592), part(denied, 2592, 3000))
			// A later fragment of a datagram whose first never comes.
			flowtest.SendFrames(t, c, part(flowtest.Fragment{ID: 0x1003, SrcPort: 40003, DstPort: 5002, Payload: payload}, 2592, 3000))
			// Give the datapath the chance to pass something on: a
			// datagram sent after them comes back first.
			if !flowtest.SendDatagram(t, c, dst, 5000, 3000, 2*time.Second) {
				t.Fatal("no echo of the datagram sent after the crafted fragments")
			}
			if n := flowtest.ReasmRequests(t, s.Netns, v6) - before; n != 3 {
				t.Errorf("the server's stack received %d fragments, want only the 3 of the allowed datagram sent after", n)
			}
			// A whole allowed datagram with a duplicate of its second
			// fragment that overlaps the first: it arrives once, the
			// duplicate nowhere.
			seen := srv.Count(5000)
			dup := allowed
			dup.ID = 0x1004
			before = flowtest.ReasmRequests(t, s.Netns, v6)
			flowtest.SendFrames(t, c, part(dup, 0, 1296), part(dup, 1288, 2592), part(dup, 1296, 2592), part(dup, 2592, 3000))
			deadline := time.Now().Add(2 * time.Second)
			for srv.Count(5000) == seen && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if srv.Count(5000) != seen+1 {
				t.Fatalf("the server read %d datagrams on 5000, want the one with the overlapping fragment", srv.Count(5000)-seen)
			}
			if n := flowtest.ReasmRequests(t, s.Netns, v6) - before; n != 3 {
				t.Errorf("the server's stack received %d fragments, want 3 (not the overlapping one)", n)
			}
		})
	}
}
