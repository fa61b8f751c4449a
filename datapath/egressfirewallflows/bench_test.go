package egressfirewallflows

import (
	"fmt"
	"net/netip"
	"testing"

	"nodeflow/datapath/plan"
	"nodeflow/model/egressfirewall"
)

// benchRules returns n rules in a repeating mix of four: an allowed /32
// without ports; an allowed /24 on TCP 80 and 443 (crossed: 2 flows); a
// DNS name with three addresses on TCP 80, 443 and 8443 (a conjunction:
// 7 flows); a denied /16. The last rule denies everything.
func benchRules(n, seed int) []Rule {
	out := make([]Rule, 0, n)
	for i := range n - 1 {
		a, b := byte(seed>>8+i>>8), byte(i)
		switch i % 4 {
		case 0:
			out = append(out, Rule{Action: egressfirewall.Allow, Prefixes: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{11, a, b, 1}), 32)}})
		case 1:
			out = append(out, Rule{Action: egressfirewall.Allow, Prefixes: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{12, a, b, 0}), 24)},
				Ports: []egressfirewall.Port{{Protocol: egressfirewall.TCP, Port: 80}, {Protocol: egressfirewall.TCP, Port: 443}}})
		case 2:
			out = append(out, Rule{Action: egressfirewall.Allow, Prefixes: []netip.Prefix{
				netip.PrefixFrom(netip.AddrFrom4([4]byte{13, a, b, 1}), 32),
				netip.PrefixFrom(netip.AddrFrom4([4]byte{13, a, b, 2}), 32),
				netip.PrefixFrom(netip.AddrFrom4([4]byte{13, a, b, 3}), 32),
			}, Ports: []egressfirewall.Port{{Protocol: egressfirewall.TCP, Port: 80}, {Protocol: egressfirewall.TCP, Port: 443}, {Protocol: egressfirewall.TCP, Port: 8443}}})
		case 3:
			out = append(out, Rule{Action: egressfirewall.Deny, Prefixes: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{14, a, 0, 0}), 16)}})
		}
	}
	return append(out, Rule{Action: egressfirewall.Deny, Prefixes: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}})
}

// BenchmarkBuild measures building table 50's flows: one namespace of
// 8,000 rules (ovn-kubernetes's limit) and of 10,000 (nodeflow's), and
// 1,000 namespaces of 10 rules each, with the node's host alias.
func BenchmarkBuild(b *testing.B) {
	c := testConfig()
	one := func(rules int) func(b *testing.B) {
		return func(b *testing.B) {
			ns := Namespace{Name: "big", ID: 1, ConjBlock: 1, Rules: benchRules(rules, 0)}
			var flows int
			b.ReportAllocs()
			for b.Loop() {
				fs, err := Build(c, ns)
				if err != nil {
					b.Fatal(err)
				}
				flows = len(fs)
			}
			b.ReportMetric(float64(flows), "flows")
		}
	}
	b.Run("rules=8000", one(8000))
	b.Run("rules=10000", one(10000))
	b.Run("namespaces=1000,rules=10", func(b *testing.B) {
		alloc := plan.NewIDAllocator(plan.EgressFirewallConjBlocks)
		nss := make([]Namespace, 1000)
		for i := range nss {
			name := fmt.Sprintf("ns%d", i)
			block, err := alloc.Get(Owner(name))
			if err != nil {
				b.Fatal(err)
			}
			nss[i] = Namespace{Name: name, ID: uint32(i + 1), ConjBlock: block, Rules: benchRules(10, i)}
		}
		var flows int
		b.ReportAllocs()
		for b.Loop() {
			flows = 0
			for _, ns := range nss {
				fs, err := Build(c, ns)
				if err != nil {
					b.Fatal(err)
				}
				flows += len(fs)
			}
		}
		b.ReportMetric(float64(flows), "flows")
	})
}
