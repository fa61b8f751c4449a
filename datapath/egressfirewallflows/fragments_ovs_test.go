package egressfirewallflows

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"nodeflow/datapath/conntrack"
	"nodeflow/datapath/gatewayflows"
	"nodeflow/datapath/plan"
	"nodeflow/internal/testutil/flowtest"
	"nodeflow/lib/openflow"
	"nodeflow/model/egressfirewall"
)

// TestOVSFragments sends real fragmented UDP through table 50 and 55 in a
// sandboxed userspace datapath: pod c, of a namespace with a firewall,
// sends 3,000-byte datagrams (three fragments at its MTU of 1,400) to a
// server s standing for an outside host, IPv4 and IPv6. For each form of
// rule (an allow-list with a port, crossed or as a conjunction, and a Deny
// of one port above an allow of everything), the allowed port echoes the
// datagram, after two recirculations (table 25's ct and the meeting), and
// not one fragment of a datagram to the denied port reaches the server's
// stack: its later fragments, which carry no port, never pass by a rule
// that only checks addresses.
func TestOVSFragments(t *testing.T) {
	sb, c, s, srv := flowtest.NewPodPair(t, 5000, 5001)
	const nsID = 0x321

	// Around tables 50 and 55: c is a pod of namespace nsID, s comes in
	// as if from the gateway; every IP packet is tracked in the service
	// zone, and routing outputs by destination.
	ns, err := plan.NamespaceID.LoadValue(nsID)
	if err != nil {
		t.Fatal(err)
	}
	frame := []openflow.Flow{
		{Table: uint8(plan.PodClassifier), Priority: 100, Match: openflow.NewMatch(openflow.InPort(c.Port)), Instructions: []openflow.Instruction{
			openflow.ApplyActions{Actions: []openflow.Action{plan.FromPod.Load(), ns}}, openflow.GotoTable{Table: uint8(plan.PodConntrack)}}},
		{Table: uint8(plan.PodClassifier), Priority: 100, Match: openflow.NewMatch(openflow.InPort(s.Port)), Instructions: []openflow.Instruction{
			openflow.ApplyActions{Actions: []openflow.Action{plan.FromGateway.Load()}}, openflow.GotoTable{Table: uint8(plan.PodConntrack)}}},
	}
	for _, f := range []family{fam4, fam6} {
		frame = append(frame, openflow.Flow{Table: uint8(plan.PodConntrack), Priority: 50, Match: openflow.NewMatch(f.eth),
			Instructions: []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{
				openflow.CT{Zone: uint16(conntrack.ZoneService), RecircTable: uint8(plan.PodEgressFirewall), Actions: []openflow.Action{openflow.NAT{}}}}}}})
		for _, p := range []flowtest.Pod{c, s} {
			a := p.Addr(f.v6)
			frame = append(frame, openflow.Flow{Table: uint8(plan.PodRouting), Priority: 100,
				Match: openflow.NewMatch(f.eth, f.dstNet(netip.PrefixFrom(a, a.BitLen()))),
				Instructions: []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{
					openflow.SetField{Field: openflow.EthDst(p.MAC)}, openflow.Output{Port: p.Port}}}}})
		}
	}
	for _, fl := range gatewayflows.PipelineFlows(plan.Pod) {
		switch plan.TableID(fl.Table) {
		case plan.PodEgressFirewall, plan.PodEgressFirewallFragments:
			frame = append(frame, fl)
		}
	}

	host := func(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }
	udp := func(p uint16) egressfirewall.Port { return egressfirewall.Port{Protocol: egressfirewall.UDP, Port: p} }
	all := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
	others := []netip.Prefix{netip.MustParsePrefix("192.0.2.1/32"), netip.MustParsePrefix("192.0.2.2/32"), netip.MustParsePrefix("2001:db8::1/128")}
	for _, tc := range []struct {
		name  string
		rules []Rule
		conj  bool
	}{
		{"allow-list", []Rule{
			{Action: egressfirewall.Allow, Prefixes: []netip.Prefix{host(s.V4), host(s.V6)}, Ports: []egressfirewall.Port{udp(5000)}},
			{Action: egressfirewall.Deny, Prefixes: all},
		}, false},
		{"allow-list, a conjunction", []Rule{
			{Action: egressfirewall.Allow, Prefixes: append([]netip.Prefix{host(s.V4), host(s.V6)}, others...),
				Ports: []egressfirewall.Port{udp(5000), udp(5002), {Protocol: egressfirewall.TCP, Port: 80}}},
			{Action: egressfirewall.Deny, Prefixes: all},
		}, true},
		{"a denied port", []Rule{
			{Action: egressfirewall.Deny, Prefixes: []netip.Prefix{host(s.V4), host(s.V6)}, Ports: []egressfirewall.Port{udp(5001)}},
			{Action: egressfirewall.Allow, Prefixes: all},
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			built, err := Build(Config{}, Namespace{Name: "n", ID: nsID, ConjBlock: 1, Rules: tc.rules})
			if err != nil {
				t.Fatal(err)
			}
			if got := flowtest.Render(built); (tc.conj && !containsConj(got)) || (!tc.conj && containsConj(got)) {
				t.Fatalf("conjunction %v, want %v:\n%s", !tc.conj, tc.conj, got)
			}
			flowtest.InstallAndCompare(t, sb, "br0", append(append(append([]openflow.Flow{}, frame...), GuardFlows()...), built...))
			for _, v6 := range []bool{false, true} {
				dst := s.Addr(v6)
				if _, err := sb.Appctl("revalidator/purge"); err != nil {
					t.Fatal(err)
				}
				if !flowtest.SendDatagram(t, c, dst, 5000, 3000, 2*time.Second) {
					t.Errorf("no echo of a 3000-byte datagram to %s:5000", dst)
				} else {
					for _, frag := range []string{"first", "later"} {
						if n := flowtest.DatapathPasses(t, sb, c.HostIf, frag); n != 3 {
							t.Errorf("%s: a %s fragment took %d passes through the datapath, want 3 (table 25's ct and the meeting)", dst, frag, n)
						}
					}
				}
				before, seen := flowtest.ReasmRequests(t, s.Netns, v6), srv.Count(5001)
				if flowtest.SendDatagram(t, c, dst, 5001, 3000, time.Second) {
					t.Errorf("a 3000-byte datagram to %s:5001 was answered", dst)
				}
				if n := flowtest.ReasmRequests(t, s.Netns, v6) - before; n != 0 {
					t.Errorf("%d fragments of a datagram to %s:5001 reached the server's stack", n, dst)
				}
				if srv.Count(5001) != seen {
					t.Errorf("the server read a datagram on denied port 5001 of %s", dst)
				}
			}
		})
	}
}

func containsConj(flows string) bool { return strings.Contains(flows, "conj_id=") }
