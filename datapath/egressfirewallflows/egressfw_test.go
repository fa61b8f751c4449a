package egressfirewallflows

import (
	"flag"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"nodeflow/datapath/plan"
	"nodeflow/internal/testutil/flowtest"
	"nodeflow/internal/testutil/golden"
	"nodeflow/lib/openflow"
	"nodeflow/model/egressfirewall"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func pfx(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// testConfig is node1 of the testbed: node IPs 172.30.0.11 and
// fd00:172:30::11, the default masquerade plan.
func testConfig() Config {
	return Config{HostAliases: []HostAlias{
		{Host: netip.MustParseAddr("172.30.0.11"), Alias: netip.MustParseAddr("169.254.169.2")},
		{Host: netip.MustParseAddr("fd00:172:30::11"), Alias: netip.MustParseAddr("fd69::2")},
	}}
}

const (
	nsA = 0x123 // the golden namespaces' ids
	nsB = 0x456
)

// goldenCases are the namespaces of the golden files, by file name.
func goldenCases() []struct {
	file string
	ns   Namespace
} {
	return []struct {
		file string
		ns   Namespace
	}{
		// An allowlist: CIDRs, a DNS name's addresses, then deny all, in
		// both families.
		{"allowlist.flows", Namespace{Name: "a", ID: nsA, ConjBlock: 7, Rules: []Rule{
			{Action: egressfirewall.Allow, Prefixes: pfx("192.0.2.0/24")},
			{Action: egressfirewall.Allow, Prefixes: pfx("2001:db8::/32"), Ports: []egressfirewall.Port{{Protocol: egressfirewall.TCP, Port: 443}}},
			{Action: egressfirewall.Allow, Prefixes: pfx("198.51.100.1/32", "198.51.100.2/32", "2001:db8:1::1/128")},
			{Action: egressfirewall.Deny, Prefixes: pfx("0.0.0.0/0")},
			{Action: egressfirewall.Deny, Prefixes: pfx("::/0")},
		}}},
		// Ports: a conjunction when crossing costs more, a cross when it
		// does not, duplicates and ports a whole protocol covers dropped.
		{"ports.flows", Namespace{Name: "b", ID: nsB, ConjBlock: 9, Rules: []Rule{
			{Action: egressfirewall.Allow, Prefixes: pfx("203.0.113.1/32", "203.0.113.2/32", "203.0.113.3/32", "2001:db8::5/128"),
				Ports: []egressfirewall.Port{{Protocol: egressfirewall.TCP, Port: 80}, {Protocol: egressfirewall.TCP, Port: 443}, {Protocol: egressfirewall.UDP, Port: 53}, {Protocol: egressfirewall.SCTP}}},
			{Action: egressfirewall.Deny, Prefixes: pfx("203.0.113.0/24"),
				Ports: []egressfirewall.Port{{Protocol: egressfirewall.UDP, Port: 53}, {Protocol: egressfirewall.UDP}, {Protocol: egressfirewall.TCP, Port: 22}, {Protocol: egressfirewall.TCP, Port: 22}}},
			{Action: egressfirewall.Allow, Prefixes: nil}, // a name not resolved yet
			{Action: egressfirewall.Deny, Prefixes: pfx("198.51.100.7/32", "198.51.100.0/24", "198.51.100.0/24", "10.9.8.7/8"),
				Ports: []egressfirewall.Port{{Protocol: egressfirewall.TCP, Port: 1}, {Protocol: egressfirewall.TCP, Port: 2}}},
		}}},
		// The node IP through its host alias: allowed to 6443 by a node
		// selector, a link-local deny that must not catch the alias,
		// then deny all.
		{"hostalias.flows", Namespace{Name: "c", ID: 0x789, ConjBlock: 11, Rules: []Rule{
			{Action: egressfirewall.Allow, Prefixes: pfx("172.30.0.11/32", "172.30.0.12/32", "fd00:172:30::11/128"), Ports: []egressfirewall.Port{{Protocol: egressfirewall.TCP, Port: 6443}}},
			{Action: egressfirewall.Deny, Prefixes: pfx("169.254.0.0/16")},
			{Action: egressfirewall.Deny, Prefixes: pfx("0.0.0.0/0", "::/0")},
		}}},
		// A link-local deny before a deny of one port everywhere: the
		// alias is judged by the second rule only, and allowed otherwise.
		{"linklocal.flows", Namespace{Name: "d", ID: 0xabc, Rules: []Rule{
			{Action: egressfirewall.Deny, Prefixes: pfx("169.254.0.0/16")},
			{Action: egressfirewall.Deny, Prefixes: pfx("0.0.0.0/0"), Ports: []egressfirewall.Port{{Protocol: egressfirewall.TCP, Port: 22}}},
		}}},
	}
}

func goldenFlows(t *testing.T, file string, fs []openflow.Flow) {
	t.Helper()
	golden.Check(t, filepath.Join("testdata", file), flowtest.Render(fs), *update)
}

func TestGolden(t *testing.T) {
	for _, tc := range goldenCases() {
		t.Run(tc.file, func(t *testing.T) {
			fs, err := Build(testConfig(), tc.ns)
			if err != nil {
				t.Fatal(err)
			}
			goldenFlows(t, tc.file, fs)
		})
	}
	t.Run("guards.flows", func(t *testing.T) { goldenFlows(t, "guards.flows", GuardFlows()) })
}

// TestTablesAndFeatures checks that every flow is in table 50 or 55,
// which admit the owner's feature, and goes nowhere but on: 50 to 55 (what
// the rules allow) or 60 (the guards), 55 to 60, and a meeting's ct back
// to 55.
func TestTablesAndFeatures(t *testing.T) {
	all := map[string][]openflow.Flow{GuardOwner: GuardFlows()}
	for _, tc := range goldenCases() {
		fs, err := Build(testConfig(), tc.ns)
		if err != nil {
			t.Fatal(err)
		}
		all[Owner(tc.ns.Name)] = fs
	}
	for owner, fs := range all {
		feat, err := plan.OwnerFeature(owner)
		if err != nil || feat != plan.FeatureEgressFirewall {
			t.Fatalf("owner %s: feature %s, %v", owner, feat, err)
		}
		for _, id := range []plan.TableID{plan.PodEgressFirewall, plan.PodEgressFirewallFragments} {
			tb, _ := plan.LookupTable(plan.Pod, id)
			if !tb.Allows(feat) {
				t.Fatalf("%s does not admit %s", tb, feat)
			}
		}
		next := map[uint8][]uint8{
			uint8(plan.PodEgressFirewall):          {uint8(plan.PodEgressFirewallFragments), uint8(plan.PodRouting)},
			uint8(plan.PodEgressFirewallFragments): {uint8(plan.PodRouting)},
		}
		for _, f := range fs {
			if next[f.Table] == nil {
				t.Errorf("%s: %s: not table 50 or 55", owner, f)
			}
			for _, in := range f.Instructions {
				if g, ok := in.(openflow.GotoTable); ok && !slices.Contains(next[f.Table], g.Table) {
					t.Errorf("%s: %s: goes to table %d", owner, f, g.Table)
				}
				if aa, ok := in.(openflow.ApplyActions); ok {
					for _, a := range aa.Actions {
						if ct, ok := a.(openflow.CT); ok && (ct.RecircTable != uint8(plan.PodEgressFirewallFragments) || ct.Commit) {
							t.Errorf("%s: %s: a ct that is not the meeting", owner, f)
						}
					}
				}
			}
		}
	}
}

// TestPlanFits checks the plan's bands and ids against the model's limits.
func TestPlanFits(t *testing.T) {
	if egressfirewall.MaxEgressFirewallRules > MaxRules || egressfirewall.MaxEgressNetworkPolicyRules > MaxRules {
		t.Errorf("model limits %d/%d, band %d", egressfirewall.MaxEgressFirewallRules, egressfirewall.MaxEgressNetworkPolicyRules, MaxRules)
	}
	if plan.EgressFirewallHostAliases.Size() != MaxRules+1 {
		t.Errorf("alias band %d, want %d rules and an allow", plan.EgressFirewallHostAliases.Size(), MaxRules)
	}
	if 1<<plan.EgressFirewallConjRuleBits < MaxRules {
		t.Errorf("a conjunction block holds %d ids, fewer than %d rules", 1<<plan.EgressFirewallConjRuleBits, MaxRules)
	}
	bands := []plan.Band{plan.EgressFirewallRules, plan.EgressFirewallHostAliases}
	if bands[0].High >= bands[1].Low || bands[1].Contains(plan.PriorityEgressFirewallBypass) || bands[0].Contains(plan.PriorityEgressFirewallBypass) ||
		plan.PriorityEgressFirewallGuard <= bands[1].High || plan.PriorityEgressFirewallGuard <= plan.PriorityEgressFirewallBypass || bands[0].Low <= plan.PriorityMiss {
		t.Errorf("table 50's priorities are out of order: %v, bypass %d, guard %d", bands, plan.PriorityEgressFirewallBypass, plan.PriorityEgressFirewallGuard)
	}
	first, err := ConjID(plan.EgressFirewallConjBlocks.First, 0)
	if err != nil || first != 1<<plan.EgressFirewallConjRuleBits {
		t.Errorf("first id %#x, %v", first, err)
	}
	last, err := ConjID(plan.EgressFirewallConjBlocks.Last, 1<<plan.EgressFirewallConjRuleBits-1)
	if err != nil || last != 0x7fffffff {
		t.Errorf("last id %#x, %v", last, err)
	}
	for _, bad := range []struct {
		block uint32
		i     int
	}{{0, 0}, {plan.EgressFirewallConjBlocks.Last + 1, 0}, {1, 1 << plan.EgressFirewallConjRuleBits}, {1, -1}} {
		if _, err := ConjID(bad.block, bad.i); err == nil {
			t.Errorf("ConjID(%d, %d): no error", bad.block, bad.i)
		}
	}
}

// TestConjunctionCost checks the flow counts: N+M+1 for a conjunction in
// one family, N*M when that is no more, N without ports.
func TestConjunctionCost(t *testing.T) {
	var v4 []netip.Prefix
	for i := range 50 {
		v4 = append(v4, netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), 32))
	}
	ports := func(n int) []egressfirewall.Port {
		var out []egressfirewall.Port
		for i := range n {
			out = append(out, egressfirewall.Port{Protocol: egressfirewall.TCP, Port: uint16(1000 + i)})
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		prefixes []netip.Prefix
		ports    []egressfirewall.Port
		want     int
		conj     bool
		// frags counts the flows for fragments: the namespace's four (the
		// later fragments to the meeting, a first fragment no rule
		// matched allowed, in each family); for a Deny rule with ports
		// the four drops of unjudged fragments per prefix; and a first
		// fragment's port match for each port (per prefix when crossed,
		// per family in a conjunction).
		frags int
	}{
		{"no ports", v4, nil, 50, false, 4},
		{"one prefix, ten ports: crossed", v4[:1], ports(10), 10, false, 4 + 4 + 10},
		{"two prefixes, three ports: crossed (6 = 6)", v4[:2], ports(3), 6, false, 4 + 8 + 6},
		{"three prefixes, three ports: conjunction", v4[:3], ports(3), 7, true, 4 + 12 + 3},
		{"fifty prefixes, twenty ports", v4, ports(20), 71, true, 4 + 200 + 20},
		{"dual-stack: ports in each family", append(v4[:10:10], pfx("2001:db8::/64", "2001:db8:1::/64")...), ports(5), 10 + 2 + 5*2 + 1, true, 4 + 48 + 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, err := Build(Config{}, Namespace{Name: "n", ID: 1, ConjBlock: 1, Rules: []Rule{{Action: egressfirewall.Deny, Prefixes: tc.prefixes, Ports: tc.ports}}})
			if err != nil {
				t.Fatal(err)
			}
			conj := strings.Contains(flowtest.Render(fs), "conj_id=")
			frags := strings.Count(flowtest.Render(fs), "nw_frag=")
			if len(fs)-frags != tc.want || conj != tc.conj || frags != tc.frags {
				t.Errorf("%d flows and %d for fragments (conjunction %v), want %d and %d (%v):\n%s", len(fs)-frags, frags, conj, tc.want, tc.frags, tc.conj, flowtest.Render(fs))
			}
		})
	}
}

// TestConjIDsUnique builds many namespaces' conjunctions with blocks from
// one allocator and checks no id is used by two rules.
func TestConjIDsUnique(t *testing.T) {
	alloc := plan.NewIDAllocator(plan.EgressFirewallConjBlocks)
	seen := map[string]string{}
	for n := range 300 {
		name := fmt.Sprintf("ns%d", n)
		block, err := alloc.Get(Owner(name))
		if err != nil {
			t.Fatal(err)
		}
		var rules []Rule
		for range 3 {
			rules = append(rules, Rule{Action: egressfirewall.Allow, Prefixes: pfx("192.0.2.1/32", "192.0.2.2/32", "192.0.2.3/32"),
				Ports: []egressfirewall.Port{{Protocol: egressfirewall.TCP, Port: 1}, {Protocol: egressfirewall.TCP, Port: 2}, {Protocol: egressfirewall.TCP, Port: 3}}})
		}
		fs, err := Build(Config{}, Namespace{Name: name, ID: uint32(n + 1), ConjBlock: block, Rules: rules})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			s := f.String()
			if i := strings.Index(s, "conj_id="); i >= 0 {
				id := strings.Fields(s[i:])[0]
				if other, dup := seen[id]; dup {
					t.Fatalf("%s used by %s and %s", id, other, name)
				}
				seen[id] = name
			}
		}
	}
	if len(seen) != 900 {
		t.Errorf("%d conjunctions, want 900", len(seen))
	}
}

func TestReduce(t *testing.T) {
	got := reduce(pfx("10.1.0.0/16", "10.0.0.0/8", "10.2.3.4/32", "11.0.0.0/8", "10.0.0.0/8", "9.9.9.9/32", "11.1.1.1/32", "12.0.0.1/32"))
	want := pfx("9.9.9.9/32", "10.0.0.0/8", "11.0.0.0/8", "12.0.0.1/32")
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("reduce = %v, want %v", got, want)
	}
}

func TestBadInput(t *testing.T) {
	ok := Rule{Action: egressfirewall.Allow, Prefixes: pfx("10.0.0.0/8")}
	for _, tc := range []struct {
		name string
		c    Config
		ns   Namespace
		want string
	}{
		{"namespace id 0", Config{}, Namespace{Name: "x", ID: 0, Rules: []Rule{ok}}, "namespace x: id 0: want 1-0xffffff"},
		{"namespace id too wide", Config{}, Namespace{Name: "x", ID: 1 << 24}, "namespace x: id 16777216"},
		{"too many rules", Config{}, Namespace{Name: "x", ID: 1, Rules: make([]Rule, MaxRules+1)}, "10001 rules, more than 10000"},
		{"no action", Config{}, Namespace{Name: "x", ID: 1, Rules: []Rule{ok, {Prefixes: pfx("10.0.0.0/8")}}}, "namespace x: rule 1: action 0"},
		{"mapped prefix", Config{}, Namespace{Name: "x", ID: 1, Rules: []Rule{{Action: egressfirewall.Deny, Prefixes: pfx("::ffff:10.0.0.0/104")}}}, "rule 0: prefix"},
		{"invalid prefix", Config{}, Namespace{Name: "x", ID: 1, Rules: []Rule{{Action: egressfirewall.Deny, Prefixes: []netip.Prefix{{}}}}}, "not a plain IPv4 or IPv6 prefix"},
		{"unknown protocol", Config{}, Namespace{Name: "x", ID: 1, Rules: []Rule{{Action: egressfirewall.Deny, Prefixes: pfx("10.0.0.0/8"), Ports: []egressfirewall.Port{{Protocol: 1}}}}}, "unknown protocol"},
		{"conjunction without a block", Config{}, Namespace{Name: "x", ID: 1, Rules: []Rule{{Action: egressfirewall.Deny, Prefixes: pfx("10.0.0.1/32", "10.0.0.2/32", "10.0.0.3/32"),
			Ports: []egressfirewall.Port{{Protocol: egressfirewall.TCP, Port: 1}, {Protocol: egressfirewall.TCP, Port: 2}, {Protocol: egressfirewall.TCP, Port: 3}}}}}, "rule 0: conjunction block 0"},
		{"alias of another family", Config{HostAliases: []HostAlias{{Host: netip.MustParseAddr("10.0.0.1"), Alias: netip.MustParseAddr("fd69::2")}}},
			Namespace{Name: "x", ID: 1}, "host alias fd69::2 for 10.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(tc.c, tc.ns)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestRules(t *testing.T) {
	p := &egressfirewall.Policy{Rules: []egressfirewall.Rule{
		{Index: 0, Action: egressfirewall.Allow, Dest: egressfirewall.Destination{CIDR: netip.MustParsePrefix("10.0.0.0/8")}, Ports: []egressfirewall.Port{{Protocol: egressfirewall.UDP, Port: 53}}},
		{Index: 1, Action: egressfirewall.Deny, Dest: egressfirewall.Destination{DNSName: "example.com"}},
	}}
	rs := Rules(p, func(r egressfirewall.Rule) []netip.Prefix {
		if r.Dest.Kind() == egressfirewall.DestCIDR {
			return []netip.Prefix{r.Dest.CIDR}
		}
		return pfx("192.0.2.1/32")
	})
	if len(rs) != 2 || rs[0].Prefixes[0] != netip.MustParsePrefix("10.0.0.0/8") || rs[0].Ports[0].Port != 53 || rs[1].Action != egressfirewall.Deny || rs[1].Prefixes[0].Bits() != 32 {
		t.Errorf("Rules = %+v", rs)
	}
}
