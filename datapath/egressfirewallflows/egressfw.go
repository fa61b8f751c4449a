package egressfirewallflows

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	"nodeflow/datapath/conntrack"
	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
	"nodeflow/model/egressfirewall"
)

// Owner returns the reconciler owner of a namespace's firewall flows.
func Owner(namespace string) string { return ownerPrefix + "/" + namespace }

// GuardOwner owns GuardFlows. A namespace name cannot start with "_", so
// it never collides with Owner.
const GuardOwner = ownerPrefix + "/_guards"

const ownerPrefix = "egressfirewall"

// Config is the node's facts that the rules need.
type Config struct {
	// HostAliases are addresses that stand in for one of this node's
	// addresses at table 50 (see the package doc).
	HostAliases []HostAlias
}

// HostAlias says that table 50 sees Alias where a connection really goes
// to Host: the host masquerade address a service DNATs to when its
// endpoint is the node IP. Both are of one family.
type HostAlias struct {
	Host, Alias netip.Addr
}

// Namespace is one namespace's firewall: its id, its conjunction id
// block, and its rules in order.
type Namespace struct {
	// Name is the namespace's name, for errors.
	Name string
	// ID is the namespace's id, the value of plan.NamespaceID (1-0xffffff).
	ID uint32
	// ConjBlock is the namespace's block of conjunction ids, from an
	// allocator over plan.EgressFirewallConjBlocks; needed only when a
	// rule is built as a conjunction.
	ConjBlock uint32
	Rules     []Rule
}

// Rule is one rule with its destinations resolved.
type Rule struct {
	Action egressfirewall.Action
	// Ports limit the rule to these pairs; none is every protocol.
	Ports []egressfirewall.Port
	// Prefixes are the destinations the rule matches now: its CIDR, the
	// addresses its DNS name resolved to, or the addresses of the nodes
	// its selector selects (as /32 and /128). None: the rule matches
	// nothing (a name not resolved yet, a selector that selects no node),
	// and no flow is built for it; the rules after it keep their places.
	Prefixes []netip.Prefix
}

// Rules pairs a policy's rules with their destinations: resolve returns
// the prefixes of one rule (for a CIDR rule, typically the CIDR itself).
func Rules(p *egressfirewall.Policy, resolve func(egressfirewall.Rule) []netip.Prefix) []Rule {
	out := make([]Rule, len(p.Rules))
	for i, r := range p.Rules {
		out[i] = Rule{Action: r.Action, Ports: r.Ports, Prefixes: resolve(r)}
	}
	return out
}

// MaxRules is the most rules one namespace can have: the size of the rule
// band, which the alias band and a conjunction id block also fit.
var MaxRules = plan.EgressFirewallRules.Size()

// ConjID returns the conjunction id of rule i of the namespace holding
// block: block<<plan.EgressFirewallConjRuleBits | i.
func ConjID(block uint32, i int) (uint32, error) {
	if !plan.EgressFirewallConjBlocks.Contains(block) {
		return 0, fmt.Errorf("conjunction block %d: %w (%d-%d)", block, plan.ErrRange,
			plan.EgressFirewallConjBlocks.First, plan.EgressFirewallConjBlocks.Last)
	}
	if i < 0 || i >= 1<<plan.EgressFirewallConjRuleBits {
		return 0, fmt.Errorf("rule %d: %w for a conjunction id (0-%d)", i, plan.ErrRange, 1<<plan.EgressFirewallConjRuleBits-1)
	}
	return block<<plan.EgressFirewallConjRuleBits | uint32(i), nil
}

// GuardFlows returns table 50's guards, the same on every node: replies
// and packets that did not come from a local pod go on to routing
// unjudged.
func GuardFlows() []openflow.Flow {
	next := []openflow.Instruction{openflow.GotoTable{Table: uint8(plan.PodRouting)}}
	out := []openflow.Flow{{
		Table: uint8(plan.PodEgressFirewall), Priority: uint16(plan.PriorityEgressFirewallGuard),
		Match:        openflow.NewMatch(openflow.CtState(openflow.CtRpl|openflow.CtTrk, openflow.CtRpl|openflow.CtTrk)),
		Instructions: next,
	}}
	for _, m := range plan.Marks() {
		if m.Field().Name() != plan.PktSource.Name() || m.Name() == plan.FromPod.Name() {
			continue
		}
		out = append(out, openflow.Flow{
			Table: uint8(plan.PodEgressFirewall), Priority: uint16(plan.PriorityEgressFirewallGuard),
			Match: openflow.NewMatch(m.Match()), Instructions: next,
		})
	}
	// Table 55: a datagram's fragments back from the meeting go on,
	// unless conntrack found them invalid (overlapping); an allowed first
	// fragment of a datagram that no NAT touched goes to the meeting,
	// where its later fragments wait.
	met := plan.FirewallFragmentsMet.Match()
	invalid := openflow.CtState(openflow.CtInv|openflow.CtTrk, openflow.CtInv|openflow.CtTrk)
	out = append(out,
		openflow.Flow{Table: uint8(plan.PodEgressFirewallFragments), Priority: uint16(plan.PriorityEgressFirewallFragmentInvalid),
			Match: openflow.NewMatch(met, invalid)},
		openflow.Flow{Table: uint8(plan.PodEgressFirewallFragments), Priority: uint16(plan.PriorityEgressFirewallFragmentWhole),
			Match: openflow.NewMatch(met), Instructions: next},
	)
	for _, f := range []family{fam4, fam6} {
		out = append(out, openflow.Flow{Table: uint8(plan.PodEgressFirewallFragments), Priority: uint16(plan.PriorityEgressFirewallFragmentFirst),
			Match: openflow.NewMatch(f.eth, fragFirst, ctPlain), Instructions: meet})
	}
	return out
}

// Fragments. A datagram that arrives in fragments carries its ports in
// its first fragment alone, and only in its connection's tuple
// (ct_tp_dst; an OpenFlow switch in normal fragment mode hides a
// fragment's L4 ports), which is the packet's own when no NAT touched the
// connection. So for such a datagram the rules judge the first fragment,
// matching ports on the tuple (firstFragmentL4), and its later fragments
// skip the rules: they go straight to a meeting, a ct action in the
// service zone that continues in table 55 (plan.PodEgressFirewallFragments),
// and wait there. What the rules allow goes through table 55, where a
// first fragment goes to the same meeting. The userspace datapath's ct
// action holds a datagram's fragments until it has them all and sends them
// on together, so the datagram passes whole when its first fragment is
// allowed and not at all otherwise. A fragment of a NATed connection
// (whose tuple holds the address and port before the NAT) or of an
// invalid one cannot be judged by port: a rule with ports never allows
// it, and a Deny rule with ports denies it (denyUnjudged).
var (
	fragFirst = openflow.IPFrag(openflow.IPFragAny, openflow.IPFragAny|openflow.IPFragLater)
	fragLater = openflow.IPFrag(openflow.IPFragAny|openflow.IPFragLater, openflow.IPFragAny|openflow.IPFragLater)
	// ctPlain is a valid connection that no NAT touched.
	ctPlain = openflow.CtState(openflow.CtTrk, openflow.CtTrk|openflow.CtInv|openflow.CtSNAT|openflow.CtDNAT)
	// meet marks the fragments and sends them to the meeting.
	meet = []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{
		plan.FirewallFragmentsMet.Load(),
		openflow.CT{Zone: uint16(conntrack.ZoneService), RecircTable: uint8(plan.PodEgressFirewallFragments)},
	}}}
	// unjudged are the fragments that a rule cannot judge by port: a later
	// fragment (one that no NAT touched never reaches the rules), and a
	// first fragment of a NATed or an invalid connection.
	unjudged = [][]openflow.Field{
		{fragLater},
		{fragFirst, openflow.CtState(openflow.CtDNAT|openflow.CtTrk, openflow.CtDNAT|openflow.CtTrk)},
		{fragFirst, openflow.CtState(openflow.CtSNAT|openflow.CtTrk, openflow.CtSNAT|openflow.CtTrk)},
		{fragFirst, openflow.CtState(openflow.CtInv|openflow.CtTrk, openflow.CtInv|openflow.CtTrk)},
	}
)

// firstFragmentL4 returns the match of p in the first fragment of a
// connection that no NAT touched: its tuple's protocol and port. Nil for
// a whole protocol, which the first fragment's own protocol matches.
func firstFragmentL4(p egressfirewall.Port) []openflow.Field {
	if p.Port == 0 {
		return nil
	}
	return []openflow.Field{fragFirst, ctPlain, openflow.CtNwProto(uint8(p.Protocol)), openflow.CtTpDst(p.Port)}
}

// family holds one IP version's match constructors.
type family struct {
	v6     bool
	eth    openflow.Field
	dstNet func(netip.Prefix) openflow.Field
	srcNet func(netip.Prefix) openflow.Field
}

var (
	fam4 = family{false, openflow.EthType(0x0800), openflow.IPv4DstPrefix, openflow.IPv4SrcPrefix}
	fam6 = family{true, openflow.EthType(0x86dd), openflow.IPv6DstPrefix, openflow.IPv6SrcPrefix}
)

func famOf(a netip.Addr) family {
	if a.Is4() {
		return fam4
	}
	return fam6
}

// rule is a checked and normalised Rule: prefixes masked, deduplicated,
// without any prefix another holds, split by family; ports deduplicated,
// without the ports of a protocol the rule takes whole.
type rule struct {
	index    int
	verdict  []openflow.Instruction
	prefixes [2][]netip.Prefix // [0] IPv4, [1] IPv6
	ports    []egressfirewall.Port
	l4       [][]openflow.Field // the match fields of each port
	fragL4   [][]openflow.Field // a first fragment's, for the ports with a number
	deny     bool
}

// builder builds one namespace's flows.
type builder struct {
	c        Config
	ns       Namespace
	nsMatch  openflow.Field
	allow    []openflow.Instruction
	deny     []openflow.Instruction
	out      []openflow.Flow
	families [2]family
}

// Build returns a namespace's rule flows for table 50 (owner
// Owner(ns.Name)). The flows share their read-only match values and
// instruction lists. An error names the namespace and the rule.
func Build(c Config, ns Namespace) ([]openflow.Flow, error) {
	nsMatch, err := plan.NamespaceID.MatchValue(uint64(ns.ID))
	if err != nil || ns.ID == 0 {
		return nil, fmt.Errorf("egressfw: namespace %s: id %d: want 1-%#x", ns.Name, ns.ID, plan.NamespaceID.Max())
	}
	if len(ns.Rules) > MaxRules {
		return nil, fmt.Errorf("egressfw: namespace %s: %d rules, more than %d", ns.Name, len(ns.Rules), MaxRules)
	}
	for _, a := range c.HostAliases {
		if !a.Host.IsValid() || !a.Alias.IsValid() || a.Host.Is4In6() || a.Alias.Is4In6() || a.Host.Zone() != "" || a.Alias.Zone() != "" || a.Host.Is4() != a.Alias.Is4() {
			return nil, fmt.Errorf("egressfw: host alias %s for %s: want two plain addresses of one family", a.Alias, a.Host)
		}
	}
	b := &builder{
		c: c, ns: ns, nsMatch: nsMatch,
		allow:    []openflow.Instruction{openflow.GotoTable{Table: uint8(plan.PodEgressFirewallFragments)}},
		deny:     nil,
		families: [2]family{fam4, fam6},
	}
	rules := make([]rule, len(ns.Rules))
	n := 0
	for i, r := range ns.Rules {
		nr, err := b.normalise(i, r)
		if err != nil {
			return nil, fmt.Errorf("egressfw: namespace %s: rule %d: %w", ns.Name, i, err)
		}
		rules[i] = nr
		n += len(nr.prefixes[0]) + len(nr.prefixes[1])
	}
	b.out = make([]openflow.Flow, 0, n+len(rules))
	for i := range rules {
		if err := b.rule(&rules[i]); err != nil {
			return nil, fmt.Errorf("egressfw: namespace %s: rule %d: %w", ns.Name, i, err)
		}
	}
	for _, a := range c.HostAliases {
		b.alias(a, rules)
	}
	// Fragments of a datagram that no NAT touched: the later ones skip
	// the rules and wait at the meeting; a first fragment that no rule
	// matched is allowed, through table 55.
	for _, f := range b.families {
		b.add(plan.PriorityEgressFirewallLaterFragments, openflow.NewMatch(b.nsMatch, f.eth, fragLater, ctPlain), meet)
		b.add(plan.PriorityEgressFirewallFirstFragment, openflow.NewMatch(b.nsMatch, f.eth, fragFirst, ctPlain), b.allow)
	}
	return b.out, nil
}

// normalise checks r and puts it in canonical form.
func (b *builder) normalise(i int, r Rule) (rule, error) {
	nr := rule{index: i}
	switch r.Action {
	case egressfirewall.Allow:
		nr.verdict = b.allow
	case egressfirewall.Deny:
		nr.verdict = b.deny
	default:
		return nr, fmt.Errorf("action %d: want Allow or Deny", r.Action)
	}
	for _, p := range r.Prefixes {
		if !p.IsValid() || p.Addr().Is4In6() || p.Addr().Zone() != "" {
			return nr, fmt.Errorf("prefix %q: not a plain IPv4 or IPv6 prefix", p)
		}
		f := 0
		if p.Addr().Is6() {
			f = 1
		}
		nr.prefixes[f] = append(nr.prefixes[f], p.Masked())
	}
	for f := range nr.prefixes {
		nr.prefixes[f] = reduce(nr.prefixes[f])
	}
	var whole [256]bool // by protocol number: the rule takes every port
	for _, p := range r.Ports {
		switch p.Protocol {
		case egressfirewall.TCP, egressfirewall.UDP, egressfirewall.SCTP:
		default:
			return nr, fmt.Errorf("port %s: unknown protocol", p)
		}
		if p.Port == 0 {
			whole[p.Protocol] = true
		}
	}
	for _, p := range r.Ports {
		if (p.Port != 0 && whole[p.Protocol]) || slices.Contains(nr.ports, p) {
			continue
		}
		nr.ports = append(nr.ports, p)
		nr.l4 = append(nr.l4, l4(p))
		if ff := firstFragmentL4(p); ff != nil {
			nr.fragL4 = append(nr.fragL4, ff)
		}
	}
	nr.deny = r.Action == egressfirewall.Deny
	return nr, nil
}

// reduce sorts prefixes of one family and drops duplicates and every
// prefix that another holds. Prefixes either nest or are disjoint, so in
// address order (shorter first at one address) a prefix is held by some
// kept prefix exactly when it is held by the last one kept.
func reduce(ps []netip.Prefix) []netip.Prefix {
	if len(ps) < 2 {
		return ps
	}
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		return cmp.Or(a.Addr().Compare(b.Addr()), a.Bits()-b.Bits())
	})
	out := ps[:1]
	for _, p := range ps[1:] {
		last := out[len(out)-1]
		if last.Bits() <= p.Bits() && last.Contains(p.Addr()) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// dst returns the destination match of p: none for a /0.
func (f family) dst(p netip.Prefix) (openflow.Field, bool) {
	if p.Bits() == 0 {
		return openflow.Field{}, false
	}
	return f.dstNet(p), true
}

// l4 returns the protocol and port matches of p.
func l4(p egressfirewall.Port) []openflow.Field {
	fs := []openflow.Field{openflow.IPProto(uint8(p.Protocol))}
	if p.Port == 0 {
		return fs
	}
	switch p.Protocol {
	case egressfirewall.TCP:
		fs = append(fs, openflow.TCPDst(p.Port))
	case egressfirewall.UDP:
		fs = append(fs, openflow.UDPDst(p.Port))
	case egressfirewall.SCTP:
		fs = append(fs, openflow.SCTPDst(p.Port))
	}
	return fs
}

// match builds the match of one flow: the namespace, the family, the
// destination prefix (unless it is absent or a /0) and the port's fields
// (none for nil).
func (b *builder) match(f family, p netip.Prefix, port []openflow.Field) openflow.Match {
	fs := make([]openflow.Field, 0, 3+len(port))
	fs = append(fs, b.nsMatch, f.eth)
	if p.IsValid() {
		if d, ok := f.dst(p); ok {
			fs = append(fs, d)
		}
	}
	fs = append(fs, port...)
	return openflow.Match{Fields: fs}
}

func (b *builder) add(prio plan.Priority, m openflow.Match, ins []openflow.Instruction) {
	b.out = append(b.out, openflow.Flow{Table: uint8(plan.PodEgressFirewall), Priority: uint16(prio), Match: m, Instructions: ins})
}

// rule adds the flows of one rule: crossed, or as a conjunction when that
// is fewer flows.
func (b *builder) rule(r *rule) error {
	prio, err := plan.EgressFirewallRules.Rank(r.index)
	if err != nil {
		return err
	}
	m := len(r.ports)
	nPrefixes, nFamilies := 0, 0
	for f := range r.prefixes {
		if len(r.prefixes[f]) > 0 {
			nPrefixes += len(r.prefixes[f])
			nFamilies++
		}
	}
	if nPrefixes == 0 {
		return nil
	}
	if r.deny && m > 0 {
		b.denyUnjudged(prio, r.prefixes)
	}
	if m == 0 || nPrefixes*m <= nPrefixes+m*nFamilies+1 {
		b.cross(prio, r.prefixes, r.l4, r.verdict)
		if len(r.fragL4) > 0 {
			b.cross(prio, r.prefixes, r.fragL4, r.verdict)
		}
		return nil
	}
	id, err := ConjID(b.ns.ConjBlock, r.index)
	if err != nil {
		return err
	}
	clause1 := []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{openflow.Conjunction{ID: id, Clause: 1, NClauses: 2}}}}
	clause2 := []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{openflow.Conjunction{ID: id, Clause: 2, NClauses: 2}}}}
	for fi, ps := range r.prefixes {
		if len(ps) == 0 {
			continue
		}
		f := b.families[fi]
		for _, p := range ps {
			b.add(prio, b.match(f, p, nil), clause1)
		}
		for _, port := range r.l4 {
			b.add(prio, b.match(f, netip.Prefix{}, port), clause2)
		}
		for _, port := range r.fragL4 {
			b.add(prio, b.match(f, netip.Prefix{}, port), clause2)
		}
	}
	b.add(prio, openflow.NewMatch(openflow.ConjID(id)), r.verdict)
	return nil
}

// cross adds one flow per prefix and port (per prefix without ports).
func (b *builder) cross(prio plan.Priority, prefixes [2][]netip.Prefix, ports [][]openflow.Field, verdict []openflow.Instruction) {
	for fi, ps := range prefixes {
		f := b.families[fi]
		for _, p := range ps {
			if len(ports) == 0 {
				b.add(prio, b.match(f, p, nil), verdict)
				continue
			}
			for _, port := range ports {
				b.add(prio, b.match(f, p, port), verdict)
			}
		}
	}
}

// denyUnjudged adds, for a Deny rule with ports, the drops of the
// fragments to its prefixes that no rule can judge by port (unjudged):
// whatever their port, they might be the rule's.
func (b *builder) denyUnjudged(prio plan.Priority, prefixes [2][]netip.Prefix) {
	for fi, ps := range prefixes {
		f := b.families[fi]
		for _, p := range ps {
			for _, u := range unjudged {
				b.add(prio, b.match(f, p, u), nil)
			}
		}
	}
}

// alias adds the rules that hold a.Host again for a.Alias alone, in the
// alias band, and the band's allow when some rule's prefix holds the
// alias address itself. It stops at the first such rule without ports,
// which takes every packet to the alias.
func (b *builder) alias(a HostAlias, rules []rule) {
	f := famOf(a.Host)
	fi := 0
	if f.v6 {
		fi = 1
	}
	only := netip.PrefixFrom(a.Alias, a.Alias.BitLen())
	holdsAlias := false
	for i := range rules {
		r := &rules[i]
		holdsHost := false
		for _, p := range r.prefixes[fi] {
			holdsHost = holdsHost || p.Contains(a.Host)
			holdsAlias = holdsAlias || p.Contains(a.Alias)
		}
		if !holdsHost {
			continue
		}
		var ps [2][]netip.Prefix
		ps[fi] = []netip.Prefix{only}
		prio, _ := plan.EgressFirewallHostAliases.Rank(r.index) // the band is larger than MaxRules
		b.cross(prio, ps, r.l4, r.verdict)
		if r.deny && len(r.ports) > 0 {
			// The alias is reached only through a NAT: no fragment to it
			// can be judged by port.
			b.denyUnjudged(prio, ps)
		}
		if len(r.ports) == 0 {
			// Every packet to the alias stops here: nothing below
			// would be reached.
			return
		}
	}
	if holdsAlias {
		b.add(plan.EgressFirewallHostAliases.Low, b.match(f, only, nil), b.allow)
	}
}
