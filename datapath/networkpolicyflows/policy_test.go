package networkpolicyflows

import (
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"nodeflow/datapath/conntrack"
	"nodeflow/datapath/plan"
	"nodeflow/internal/testutil/flowtest"
	"nodeflow/lib/openflow"
	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

func TestPortRange(t *testing.T) {
	check := func(lo, hi uint16) {
		t.Helper()
		ms := PortRange(ProtoTCP, lo, hi)
		if len(ms) > 32 {
			t.Errorf("%d-%d: %d matches, want at most 32", lo, hi, len(ms))
		}
		covered := 0
		for _, m := range ms {
			size := int(^m.Mask) + 1
			if m.Mask == 0 {
				size = 1 << 16
			}
			if m.Port&^m.Mask != 0 {
				t.Errorf("%d-%d: %s: port has bits outside the mask", lo, hi, m)
			}
			if int(m.Port) < int(lo) || int(m.Port)+size-1 > int(hi) {
				t.Errorf("%d-%d: %s covers ports outside the range", lo, hi, m)
			}
			covered += size
		}
		// Blocks are disjoint and inside the range, so they cover it
		// exactly when their sizes add up to its length.
		if covered != int(hi)-int(lo)+1 {
			t.Errorf("%d-%d: the matches cover %d ports, want %d: %v", lo, hi, covered, int(hi)-int(lo)+1, ms)
		}
	}
	for _, r := range [][2]uint16{{80, 80}, {0, 65535}, {1, 65535}, {1024, 2047}, {1000, 2000}, {32768, 60999}, {65535, 65535}, {0, 0}} {
		check(r[0], r[1])
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		a, b := uint16(rng.UintN(65536)), uint16(rng.UintN(65536))
		if a > b {
			a, b = b, a
		}
		check(a, b)
	}
	if got := PortRange(ProtoUDP, 8080, 8080); len(got) != 1 || got[0] != (L4{ProtoUDP, 8080, 0xffff}) {
		t.Errorf("one port: %v", got)
	}
	if got := PortRange(ProtoTCP, 9, 8); got != nil {
		t.Errorf("empty range: %v", got)
	}
}

func TestKeys(t *testing.T) {
	p := netip.MustParsePrefix
	tests := []struct {
		key    Key
		clause uint8
		owner  string
		str    string
		bad    string
	}{
		{key: Key{Dir: Ingress, Src: p("10.244.1.5/32")}, clause: 1, owner: "netpol/src/10.244.1.5/32", str: "ingress src 10.244.1.5/32"},
		{key: Key{Dir: Ingress, V6: true}, clause: 1, owner: "netpol/src/any6", str: "ingress src any6"},
		{key: Key{Dir: Ingress, Dst: p("10.244.0.5/32"), L4: L4{ProtoTCP, 80, 0xffff}}, clause: 2, str: "ingress dst 10.244.0.5/32 tcp/80"},
		{key: Key{Dir: Egress, InPort: 7}, clause: 1, str: "egress in_port 7"},
		{key: Key{Dir: Egress, Dst: p("10.0.0.0/8"), L4: L4{ProtoUDP, 0, 0}}, clause: 2, owner: "netpol/dst/10.0.0.0/8", str: "egress dst 10.0.0.0/8 udp"},
		{key: Key{Dir: Egress}, clause: 2, owner: "netpol/dst/any4", str: "egress dst any4 any"},
		{key: Key{Dir: Egress, Src: p("10.0.0.0/8")}, clause: 2, bad: "no source"},
		{key: Key{Dir: Ingress, InPort: 3}, clause: 1, bad: "in_port is egress"},
		{key: Key{Dir: Ingress, Src: p("10.0.0.1/8")}, clause: 1, bad: "not a masked prefix"},
		{key: Key{Dir: Ingress, V6: true, Src: p("10.0.0.0/8")}, clause: 1, bad: "of the key's family"},
		{key: Key{Dir: Egress, L4: L4{Proto: 1}}, clause: 2, bad: "protocol 1"},
		{key: Key{Dir: Egress, L4: L4{Port: 80, Mask: 0xffff}}, clause: 2, bad: "a port without a protocol"},
	}
	for _, tc := range tests {
		if got := tc.key.Clause(); got != tc.clause {
			t.Errorf("%s: clause %d, want %d", tc.key, got, tc.clause)
		}
		err := tc.key.Validate()
		if tc.bad != "" {
			if err == nil || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("%s: Validate = %v, want an error with %q", tc.key, err, tc.bad)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.key, err)
		}
		if tc.owner != "" && PeerOwner(tc.key) != tc.owner {
			t.Errorf("%s: owner %q, want %q", tc.key, PeerOwner(tc.key), tc.owner)
		}
		if tc.str != "" && tc.key.String() != tc.str {
			t.Errorf("String = %q, want %q", tc.key.String(), tc.str)
		}
	}
}

func TestClauseFlows(t *testing.T) {
	k := Key{Dir: Ingress, Src: netip.MustParsePrefix("10.244.1.5/32")}
	a, err := ClauseFlows(k, []Conj{{9, 1}, {3, 1}, {9, 1}, {67, 1}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := ClauseFlows(k, []Conj{{67, 1}, {3, 1}, {9, 1}})
	if err != nil {
		t.Fatal(err)
	}
	render := func(fs []openflow.Flow) string {
		var out []string
		for _, f := range fs {
			out = append(out, f.String())
		}
		return strings.Join(out, "\n")
	}
	if render(a) != render(b) {
		t.Errorf("order or duplicates change the flows:\n%s\n%s", render(a), render(b))
	}
	// 3 and 67 share lane 3 (priority 113); 9 has lane 9.
	want := " table=65, priority=113,ip,nw_src=10.244.1.5 actions=conjunction(3,1/2),conjunction(67,1/2)\n" +
		" table=65, priority=119,ip,nw_src=10.244.1.5 actions=conjunction(9,1/2)"
	if render(a) != want {
		t.Errorf("flows\n%s\nwant\n%s", render(a), want)
	}
	if _, err := ClauseFlows(k, []Conj{{3, 2}}); err == nil || !strings.Contains(err.Error(), "the key is clause 1") {
		t.Errorf("wrong clause: %v", err)
	}
	if _, err := ClauseFlows(k, nil); err == nil {
		t.Error("no conjunction: no error")
	}
	var many []Conj
	for i := range MaxConjunctionsPerFlow + 1 {
		many = append(many, Conj{uint32(i*plan.PolicyClauseLanes + 1), 1})
	}
	if _, err := ClauseFlows(k, many); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("too many conjunctions in one lane: %v", err)
	}
}

func testConfig() Config {
	return Config{
		PodCIDRs:   []netip.Prefix{netip.MustParsePrefix("10.244.0.0/24"), netip.MustParsePrefix("fd00:10:244::/64")},
		Masquerade: conntrack.DefaultPlan(),
	}
}

// appender returns a function that appends a builder's flows to *fs, and
// fails t on the builder's error.
func appender(t *testing.T, fs *[]openflow.Flow) func([]openflow.Flow, error) {
	return func(f []openflow.Flow, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		*fs = append(*fs, f...)
	}
}

// sampleFlows is a small policy set: pod a (port 4, 10.244.0.5) isolated
// both ways; ingress rule 1 admits 10.244.1.5 and 10.244.2.0/24 on TCP 80;
// ingress rule 2 admits 10.244.1.5 on UDP 53 and 1000-1999; egress rule 3
// lets a reach 10.244.1.0/24 on any port, rule 4 lets it reach anything on
// TCP 443.
func sampleFlows(t *testing.T) []openflow.Flow {
	t.Helper()
	c := testConfig()
	var fs []openflow.Flow
	add := appender(t, &fs)
	clause := func(k Key, conjs ...Conj) {
		t.Helper()
		add(ClauseFlows(k, conjs))
	}
	p := netip.MustParsePrefix
	a := p("10.244.0.5/32")
	add(BaseFlows(c))
	for id, d := range map[uint32]Direction{1: Ingress, 2: Ingress, 3: Egress, 4: Egress} {
		add(RuleFlows(c, d, id))
	}
	add(IsolationFlows(Ingress, 4, []netip.Addr{a.Addr()}, true))
	add(IsolationFlows(Egress, 4, nil, false))
	clause(Key{Dir: Ingress, Src: p("10.244.1.5/32")}, Conj{1, 1}, Conj{2, 1})
	clause(Key{Dir: Ingress, Src: p("10.244.2.0/24")}, Conj{1, 1})
	clause(Key{Dir: Ingress, Dst: a, L4: L4{ProtoTCP, 80, 0xffff}}, Conj{1, 2})
	clause(Key{Dir: Ingress, Dst: a, L4: L4{ProtoUDP, 53, 0xffff}}, Conj{2, 2})
	for _, l4 := range PortRange(ProtoUDP, 1000, 1999) {
		clause(Key{Dir: Ingress, Dst: a, L4: l4}, Conj{2, 2})
	}
	clause(Key{Dir: Egress, InPort: 4}, Conj{3, 1}, Conj{4, 1})
	clause(Key{Dir: Egress, Dst: p("10.244.1.0/24")}, Conj{3, 2})
	clause(Key{Dir: Egress, L4: L4{ProtoTCP, 443, 0xffff}}, Conj{4, 2})
	return fs
}

func TestOVS(t *testing.T) {
	sb := ovstest.New(t, ovs.Options{})
	if _, err := sb.Vsctl("add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev",
		"protocols=OpenFlow13,OpenFlow15", "fail_mode=secure"); err != nil {
		t.Fatal(err)
	}
	// Around the two tables: port 4 (pod a) to 45, the rest to 65; 50
	// and 70, where allowed packets go, mark reg9=1. (A commit leaves the
	// packet untracked, so 45's allowed packets do not go on to 65 here:
	// in br0 only packets to local pods do, uncommitted.)
	mark := []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{
		openflow.SetField{Field: openflow.Reg(9, 1, 0xffffffff)}}}}
	frame := []openflow.Flow{
		flow(0, 1, goTo(plan.PodEgressPolicy), openflow.InPort(4)),
		flow(0, 0, goTo(plan.PodIngressPolicy)),
		flow(plan.PodEgressFirewall, 0, mark),
		flow(plan.PodLocalDelivery, 0, mark),
	}
	flowtest.InstallAndCompare(t, sb, "br0", append(frame, sampleFlows(t)...))

	tests := []struct {
		name, flow string
		want       bool
	}{
		{"admitted peer and port", "in_port=9,tcp,nw_src=10.244.1.5,nw_dst=10.244.0.5,tp_src=5000,tp_dst=80", true},
		{"peer of the other rule only", "in_port=9,tcp,nw_src=10.244.2.7,nw_dst=10.244.0.5,tp_src=5000,tp_dst=80", true},
		{"admitted peer, other port", "in_port=9,tcp,nw_src=10.244.1.5,nw_dst=10.244.0.5,tp_src=5000,tp_dst=81", false},
		{"second rule's port", "in_port=9,udp,nw_src=10.244.1.5,nw_dst=10.244.0.5,udp_src=5000,udp_dst=53", true},
		{"second rule's range", "in_port=9,udp,nw_src=10.244.1.5,nw_dst=10.244.0.5,udp_src=5000,udp_dst=1999", true},
		{"past the range", "in_port=9,udp,nw_src=10.244.1.5,nw_dst=10.244.0.5,udp_src=5000,udp_dst=2000", false},
		{"second rule's port, first rule's peer only", "in_port=9,udp,nw_src=10.244.2.7,nw_dst=10.244.0.5,udp_src=5000,udp_dst=53", false},
		{"stranger", "in_port=9,tcp,nw_src=10.244.3.3,nw_dst=10.244.0.5,tp_src=5000,tp_dst=80", false},
		{"the host by mp0", "in_port=9,reg0=0x4,tcp,nw_src=10.244.0.2,nw_dst=10.244.0.5,tp_src=5000,tp_dst=22", true},
		{"hairpin", "in_port=9,tcp,nw_src=10.244.0.1,nw_dst=10.244.0.5,tp_src=5000,tp_dst=22", true},
		{"not isolated", "in_port=9,tcp,nw_src=10.244.3.3,nw_dst=10.244.0.6,tp_src=5000,tp_dst=22", true},
		{"egress to the allowed subnet", "in_port=4,tcp,nw_src=10.244.0.5,nw_dst=10.244.1.9,tp_src=5000,tp_dst=22", true},
		{"egress anywhere on 443", "in_port=4,tcp,nw_src=10.244.0.5,nw_dst=192.0.2.1,tp_src=5000,tp_dst=443", true},
		{"egress denied", "in_port=4,tcp,nw_src=10.244.0.5,nw_dst=192.0.2.1,tp_src=5000,tp_dst=80", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := sb.Appctl("ofproto/trace", "br0", flowtest.NewConnTrace(tc.flow))
			if err != nil {
				t.Fatal(err)
			}
			final := ""
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "Final flow:") {
					final = l
				}
			}
			if got := strings.Contains(final, "reg9=0x1"); got != tc.want {
				t.Errorf("allowed = %v, want %v\n%s", got, tc.want, out)
			}
		})
	}
}
