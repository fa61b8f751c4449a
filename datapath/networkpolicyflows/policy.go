// Package networkpolicyflows builds br0's NetworkPolicy flows (tables 45 EgressPolicy
// and 65 IngressPolicy) from a model that the feature keeps: pure
// functions, no I/O.
//
// Each rule of a policy is one conjunction of two clauses:
//
//	ingress  clause 1: its peers, by source address (Key.Src)
//	         clause 2: the local pods it applies to, with its ports, by
//	                   destination address and protocol/port (Key.Dst, Key.L4)
//	egress   clause 1: the local pods it applies to, by in_port (Key.InPort)
//	         clause 2: its peers, with its ports (Key.Dst, Key.L4)
//
// A clause flow is keyed by its match (Key): when several rules share a
// match, the one flow carries one conjunction action for each
// (ClauseFlows), so that flows grow with the sum of peers and ports, not
// their product; a rule's clauses are at the priority of its lane (Lane),
// which spreads a match shared by thousands of rules over a few flows.
// A rule's conj_id flows (RuleFlows) pass what it allows, committing new
// connections; an isolated pod's own flows (IsolationFlows) drop the rest;
// BaseFlows pass established traffic and what policies never judge.
//
// A new datagram in fragments is judged by its first fragment, whose port
// a port clause's second flow matches in the connection's tuple; its later
// fragments wait for it at a ct action, the meeting, where it goes only
// when allowed (see "Fragments" below and docs/pipeline.md).
package networkpolicyflows

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	"nodeflow/datapath/conntrack"
	"nodeflow/datapath/plan"
	"nodeflow/datapath/puntflows"
	"nodeflow/lib/openflow"
)

// Direction is ingress or egress.
type Direction uint8

// Directions.
const (
	Ingress Direction = iota
	Egress
)

// String returns "ingress" or "egress".
func (d Direction) String() string {
	if d == Egress {
		return "egress"
	}
	return "ingress"
}

// Table returns the direction's table.
func (d Direction) Table() plan.TableID {
	if d == Egress {
		return plan.PodEgressPolicy
	}
	return plan.PodIngressPolicy
}

// next returns the table the direction's allowed packets go on to.
func (d Direction) next() plan.TableID {
	if d == Egress {
		return plan.PodEgressFirewall
	}
	return plan.PodLocalDelivery
}

// IP protocol numbers.
const (
	ProtoTCP  uint8 = 6
	ProtoUDP  uint8 = 17
	ProtoSCTP uint8 = 132
)

// L4 is a protocol and a bitwise match on the destination port: Port/Mask
// (Mask 0: every port of the protocol). The zero value is any protocol.
type L4 struct {
	Proto      uint8
	Port, Mask uint16
}

// String renders "tcp/80", "udp/1024/0xfc00", "tcp" or "any".
func (l L4) String() string {
	name := map[uint8]string{ProtoTCP: "tcp", ProtoUDP: "udp", ProtoSCTP: "sctp"}[l.Proto]
	switch {
	case l.Proto == 0:
		return "any"
	case l.Mask == 0:
		return name
	case l.Mask == 0xffff:
		return name + "/" + strconv.Itoa(int(l.Port))
	}
	return fmt.Sprintf("%s/%d/%#x", name, l.Port, l.Mask)
}

func (l L4) fields() []openflow.Field {
	if l.Proto == 0 {
		return nil
	}
	out := []openflow.Field{openflow.IPProto(l.Proto)}
	if l.Mask == 0 {
		return out
	}
	var f openflow.Field
	switch l.Proto {
	case ProtoTCP:
		f = openflow.TCPDstMasked(l.Port, l.Mask)
	case ProtoUDP:
		f = openflow.UDPDstMasked(l.Port, l.Mask)
	case ProtoSCTP:
		f = openflow.SCTPDstMasked(l.Port, l.Mask)
	}
	return append(out, f)
}

// firstFragmentFields is the match of l's port in a datagram's first
// fragment of a new connection that no NAT touched: the port of the
// connection's tuple (ct_tp_dst), which is the packet's own there, since
// an OpenFlow switch in normal fragment mode hides a fragment's L4 ports.
// Nil for a match without a port, which matches first fragments as it is.
func (l L4) firstFragmentFields() []openflow.Field {
	if l.Proto == 0 || l.Mask == 0 {
		return nil
	}
	return []openflow.Field{fragFirst, ctNewPlain, openflow.CtNwProto(l.Proto), openflow.CtTpDstMasked(l.Port, l.Mask)}
}

// PortRange returns the bitwise matches that together cover ports lo..hi
// of protocol proto: one for a single port, at most 2*16 for a range.
func PortRange(proto uint8, lo, hi uint16) []L4 {
	if lo > hi {
		return nil
	}
	var out []L4
	for p := uint32(lo); p <= uint32(hi); {
		// The largest aligned block starting at p that fits.
		size := uint32(1)
		for p%(size*2) == 0 && p+size*2-1 <= uint32(hi) && size < 1<<16 {
			size *= 2
		}
		out = append(out, L4{Proto: proto, Port: uint16(p), Mask: uint16(^(size - 1))})
		p += size
	}
	return out
}

// Key is the match of one clause flow; it says which clause it is.
type Key struct {
	Dir Direction
	// V6 is the address family of the match (unused with InPort).
	V6 bool
	// InPort, for egress clause 1: the pod's port.
	InPort uint32
	// Src, for ingress clause 1: the peer's prefix; invalid means every
	// source of the family.
	Src netip.Prefix
	// Dst, for clause 2: a pod address (ingress) or the peer's prefix
	// (egress); invalid means every destination of the family. L4 goes with
	// it.
	Dst netip.Prefix
	L4  L4
}

// Clause returns 1 or 2: which dimension of its rules' conjunctions the key
// is.
func (k Key) Clause() uint8 {
	if k.Dir == Egress && k.InPort != 0 || k.Dir == Ingress && !k.isDst() {
		return 1
	}
	return 2
}

// isDst reports whether an ingress key is a destination (clause 2) key:
// one with a destination or a port.
func (k Key) isDst() bool { return k.Dst.IsValid() || k.L4 != (L4{}) }

// String renders the key for logs and owners, e.g. "ingress src
// 10.244.1.5/32", "egress dst any6 tcp/80", "egress in_port 7".
func (k Key) String() string {
	if k.InPort != 0 {
		return fmt.Sprintf("%s in_port %d", k.Dir, k.InPort)
	}
	if k.Clause() == 1 {
		return fmt.Sprintf("%s src %s", k.Dir, prefixString(k.Src, k.V6))
	}
	return fmt.Sprintf("%s dst %s %s", k.Dir, prefixString(k.Dst, k.V6), k.L4)
}

func prefixString(p netip.Prefix, v6 bool) string {
	if p.IsValid() {
		return p.String()
	}
	if v6 {
		return "any6"
	}
	return "any4"
}

// Validate reports a key that cannot be a flow.
func (k Key) Validate() error {
	switch {
	case k.Dir != Ingress && k.Dir != Egress:
		return fmt.Errorf("policy: key %s: direction %d", k, k.Dir)
	case k.InPort != 0:
		if k.Dir != Egress || k.Src.IsValid() || k.Dst.IsValid() || k.L4 != (L4{}) {
			return fmt.Errorf("policy: key %s: in_port is egress clause 1 alone", k)
		}
		if k.InPort >= openflow.PortMax {
			return fmt.Errorf("policy: key %s: not a switch port", k)
		}
		return nil
	case k.Dir == Egress && k.Src.IsValid():
		return fmt.Errorf("policy: key %s: an egress key has no source", k)
	case k.Src.IsValid() && (k.Dst.IsValid() || k.L4 != (L4{})):
		return fmt.Errorf("policy: key %s: a source key has no destination or port", k)
	}
	for _, p := range []netip.Prefix{k.Src, k.Dst} {
		if p.IsValid() && (p.Masked() != p || p.Addr().Is4In6() || p.Addr().Is6() != k.V6) {
			return fmt.Errorf("policy: key %s: prefix %s: not a masked prefix of the key's family", k, p)
		}
	}
	if k.L4.Proto != 0 && k.L4.Proto != ProtoTCP && k.L4.Proto != ProtoUDP && k.L4.Proto != ProtoSCTP {
		return fmt.Errorf("policy: key %s: protocol %d", k, k.L4.Proto)
	}
	if k.L4.Proto == 0 && (k.L4.Port != 0 || k.L4.Mask != 0) {
		return fmt.Errorf("policy: key %s: a port without a protocol", k)
	}
	return nil
}

// Match returns the key's match fields.
func (k Key) Match() []openflow.Field {
	if k.InPort != 0 {
		return []openflow.Field{openflow.InPort(k.InPort)}
	}
	eth, src, dst := uint16(0x0800), openflow.IPv4SrcPrefix, openflow.IPv4DstPrefix
	if k.V6 {
		eth, src, dst = 0x86dd, openflow.IPv6SrcPrefix, openflow.IPv6DstPrefix
	}
	out := []openflow.Field{openflow.EthType(eth)}
	if k.Src.IsValid() {
		out = append(out, src(k.Src))
	}
	if k.Dst.IsValid() {
		out = append(out, dst(k.Dst))
	}
	return append(out, k.L4.fields()...)
}

// fragmentMatch returns the match of a port key's second flow, which
// gives a datagram's first fragment to the clause by the port of its
// connection's tuple (L4.firstFragmentFields), or nil for a key without a
// port.
func (k Key) fragmentMatch() []openflow.Field {
	ff := k.L4.firstFragmentFields()
	if ff == nil {
		return nil
	}
	m := k.Match()
	// The key's own protocol and port fields are its last.
	m = m[:len(m)-len(k.L4.fields())]
	return append(m, ff...)
}

// Conj is one rule's conjunction that a clause flow belongs to.
type Conj struct {
	ID     uint32
	Clause uint8
}

// MaxConjunctionsPerFlow bounds the conjunction actions of one clause
// flow (16 bytes each): an OpenFlow message holds 64 KiB.
const MaxConjunctionsPerFlow = 3000

// Lane returns the priority of the clauses of conjunction id: one of
// plan.PolicyClauseLanes from plan.PriorityPolicyClauses.
func Lane(id uint32) plan.Priority {
	return plan.PriorityPolicyClauses + plan.Priority(id%plan.PolicyClauseLanes)
}

// ClauseFlows returns the flows of key k: one per lane of conjs, each with
// a conjunction action for each of that lane's conjunctions (sorted, so
// that the flows are the same whatever their order), or an error for a bad
// key or conjunction.
func ClauseFlows(k Key, conjs []Conj) ([]openflow.Flow, error) {
	if err := k.Validate(); err != nil {
		return nil, err
	}
	if len(conjs) == 0 {
		return nil, fmt.Errorf("policy: key %s: no conjunction", k)
	}
	conjs = slices.Clone(conjs)
	slices.SortFunc(conjs, func(a, b Conj) int {
		return cmp.Or(cmp.Compare(Lane(a.ID), Lane(b.ID)), cmp.Compare(a.ID, b.ID), cmp.Compare(a.Clause, b.Clause))
	})
	conjs = slices.Compact(conjs)
	var out []openflow.Flow
	var acts []openflow.Action
	frag := k.fragmentMatch()
	flush := func(lane plan.Priority) error {
		if len(acts) > MaxConjunctionsPerFlow {
			return fmt.Errorf("policy: key %s: %d conjunctions in lane %d, at most %d fit a flow", k, len(acts), lane, MaxConjunctionsPerFlow)
		}
		ins := []openflow.Instruction{openflow.ApplyActions{Actions: acts}}
		out = append(out, openflow.Flow{Table: uint8(k.Dir.Table()), Priority: uint16(lane),
			Match: openflow.NewMatch(k.Match()...), Instructions: ins})
		if frag != nil {
			out = append(out, openflow.Flow{Table: uint8(k.Dir.Table()), Priority: uint16(lane),
				Match: openflow.NewMatch(frag...), Instructions: ins})
		}
		acts = nil
		return nil
	}
	for i, c := range conjs {
		if c.ID == 0 || c.Clause != k.Clause() {
			return nil, fmt.Errorf("policy: key %s: conjunction %d clause %d (the key is clause %d)", k, c.ID, c.Clause, k.Clause())
		}
		acts = append(acts, openflow.Conjunction{ID: c.ID, Clause: c.Clause, NClauses: 2})
		if i == len(conjs)-1 || Lane(conjs[i+1].ID) != Lane(c.ID) {
			if err := flush(Lane(c.ID)); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// Config is what the policy flows need of the node.
type Config struct {
	// PodCIDRs are this node's pod subnets: a connection to them is judged
	// again, and committed, by table 65; their router addresses are the
	// source of a pod reaching itself through a service.
	PodCIDRs []netip.Prefix
	// Masquerade is the masquerade plan: the host reaches services from
	// its Host address.
	Masquerade conntrack.Plan
}

var (
	ctEstablished = openflow.CtState(openflow.CtEst|openflow.CtTrk, openflow.CtEst|openflow.CtTrk)
	ctRelated     = openflow.CtState(openflow.CtRel|openflow.CtTrk, openflow.CtRel|openflow.CtTrk)
	// ctNewPlain is a new connection that no DNAT or SNAT committed.
	ctNewPlain = openflow.CtState(openflow.CtNew|openflow.CtTrk,
		openflow.CtNew|openflow.CtDNAT|openflow.CtSNAT|openflow.CtTrk)
	ctInvalid = openflow.CtState(openflow.CtInv|openflow.CtTrk, openflow.CtInv|openflow.CtTrk)
	// fragFirst and fragLater are a datagram's first fragment and its
	// others.
	fragFirst = openflow.IPFrag(openflow.IPFragAny, openflow.IPFragAny|openflow.IPFragLater)
	fragLater = openflow.IPFrag(openflow.IPFragAny|openflow.IPFragLater, openflow.IPFragAny|openflow.IPFragLater)
)

// Fragments. A new datagram that no NAT touched and that arrives in
// fragments is judged by its first fragment, the only one with a port (in
// its connection's tuple: ct_tp_dst): the later fragments go straight to
// a meeting, a ct action in the service zone that continues in the same
// table, and the first fragment goes to the same ct action only when it
// is allowed. The userspace datapath's ct action holds a datagram's
// fragments until it has them all and then sends them on together, so the
// datagram goes on whole when its first fragment was allowed, and not at
// all otherwise: a later fragment, which carries no port, is never judged
// on its own. The meeting commits the connection where the whole packet's
// flow would (a local pod's connection is committed by table 65, after it
// judged it), and marks the fragments with the direction's bit, which the
// first fragment and the later ones set alike, so that they come back
// together and pass.

// fragmentsBit is the direction's meeting mark.
func (d Direction) fragmentsBit() plan.Mark {
	if d == Egress {
		return plan.EgressFragmentsMet
	}
	return plan.IngressFragmentsMet
}

// meet sends a datagram's fragments to the direction's meeting, which
// commits the connection when commit is set.
func (d Direction) meet(commit bool) []openflow.Instruction {
	return []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{
		d.fragmentsBit().Load(),
		openflow.CT{Commit: commit, Zone: uint16(conntrack.ZoneService), RecircTable: uint8(d.Table())},
	}}}
}

func flow(table plan.TableID, prio plan.Priority, ins []openflow.Instruction, fields ...openflow.Field) openflow.Flow {
	return openflow.Flow{Table: uint8(table), Priority: uint16(prio), Match: openflow.NewMatch(fields...), Instructions: ins}
}

func goTo(t plan.TableID) []openflow.Instruction {
	return []openflow.Instruction{openflow.GotoTable{Table: uint8(t)}}
}

// commitThen commits the connection in the service zone and goes on to t.
func commitThen(t plan.TableID) []openflow.Instruction {
	return []openflow.Instruction{
		openflow.ApplyActions{Actions: []openflow.Action{openflow.CT{Commit: true, Zone: uint16(conntrack.ZoneService), RecircTable: openflow.CTNoRecirc}}},
		openflow.GotoTable{Table: uint8(t)},
	}
}

type family struct {
	v6  bool
	eth openflow.Field
	src func(netip.Addr) openflow.Field
	dst func(netip.Prefix) openflow.Field
}

var families = []family{
	{false, openflow.EthType(0x0800), openflow.IPv4Src, openflow.IPv4DstPrefix},
	{true, openflow.EthType(0x86dd), openflow.IPv6Src, openflow.IPv6DstPrefix},
}

// BaseFlows returns the flows of both tables that do not depend on any
// policy (owner OwnerBase):
//
//	both  +est, +rel: pass (300); from a router address (a pod reaching
//	      itself through a service): pass (290); a new connection that
//	      nothing committed: commit, pass (10)
//	45    a new connection to a local pod: pass uncommitted (11)
//	65    from mp0 (the host): commit when new (291), pass (290); from the
//	      host masquerade address: pass (290)
//
// and those of fragmented datagrams that nothing committed (in 45, only
// from local pods): back from the meeting, drop the invalid (296), pass
// the rest (295); later fragments to the meeting (250; in 45, 251
// toward a local pod, uncommitted); a first fragment that no policy
// judges to the meeting (12; in 45, 13 toward a local pod, uncommitted).
func BaseFlows(c Config) ([]openflow.Flow, error) {
	for _, p := range c.PodCIDRs {
		if !p.IsValid() || p.Masked() != p || p.Addr().Is4In6() {
			return nil, fmt.Errorf("policy: config: pod CIDR %q: not a valid masked prefix", p)
		}
	}
	var fs []openflow.Flow
	for _, d := range []Direction{Egress, Ingress} {
		t, next := d.Table(), d.next()
		fs = append(fs,
			flow(t, plan.PriorityPolicyEstablished, goTo(next), ctEstablished),
			flow(t, plan.PriorityPolicyEstablished, goTo(next), ctRelated),
			flow(t, plan.PriorityPolicyFragmentInvalid, nil, d.fragmentsBit().Match(), ctInvalid),
			flow(t, plan.PriorityPolicyFragmentWhole, goTo(next), d.fragmentsBit().Match()),
		)
		// Egress judges only what local pods send; whatever else table
		// 45 sees is committed by the default flows, fragments included.
		var fromPod []openflow.Field
		if d == Egress {
			fromPod = []openflow.Field{plan.FromPod.Match()}
		}
		for _, f := range families {
			fs = append(fs,
				flow(t, plan.PriorityPolicyDefaultNew, commitThen(next), f.eth, ctNewPlain),
				flow(t, plan.PriorityPolicyFragmentLater, d.meet(true), append([]openflow.Field{f.eth, ctNewPlain, fragLater}, fromPod...)...),
				flow(t, plan.PriorityPolicyFragmentDefaultNew, d.meet(true), append([]openflow.Field{f.eth, ctNewPlain, fragFirst}, fromPod...)...),
			)
			for _, p := range c.PodCIDRs {
				if p.Addr().Is6() != f.v6 {
					continue
				}
				fs = append(fs, flow(t, plan.PriorityPolicyExempt, goTo(next), f.eth, f.src(plan.RouterIP(p))))
				if d == Egress {
					fs = append(fs,
						flow(t, plan.PriorityPolicyLocalNew, goTo(next), f.eth, ctNewPlain, f.dst(p)),
						flow(t, plan.PriorityPolicyFragmentLaterLocal, d.meet(false), f.eth, ctNewPlain, fragLater, f.dst(p), plan.FromPod.Match()),
						flow(t, plan.PriorityPolicyFragmentLocalNew, d.meet(false), f.eth, ctNewPlain, fragFirst, f.dst(p), plan.FromPod.Match()),
					)
				}
			}
			if d == Ingress {
				m := c.Masquerade.V4
				if f.v6 {
					m = c.Masquerade.V6
				}
				if m.Host.IsValid() {
					fs = append(fs, flow(t, plan.PriorityPolicyExempt, goTo(next), f.eth, f.src(m.Host)))
				}
			}
		}
		if d == Ingress {
			for _, f := range families {
				fs = append(fs, flow(t, plan.PriorityPolicyExemptNew, commitThen(next), f.eth, ctNewPlain, plan.FromHost.Match()))
			}
			fs = append(fs, flow(t, plan.PriorityPolicyExempt, goTo(next), plan.FromHost.Match()))
		}
	}
	return fs, nil
}

// RuleFlows returns the conj_id flows of one rule (conjunction id): pass
// what it allows, committing a new connection that nothing committed;
// egress leaves one to a local pod (c.PodCIDRs) uncommitted, for table 65.
// A first fragment it allows goes to the meeting (203; 204 toward a local
// pod in egress), where its datagram's later fragments wait.
func RuleFlows(c Config, d Direction, id uint32) ([]openflow.Flow, error) {
	if id == 0 {
		return nil, fmt.Errorf("policy: %s rule: conjunction id 0", d)
	}
	t, next, conj := d.Table(), d.next(), openflow.ConjID(id)
	fs := []openflow.Flow{flow(t, plan.PriorityPolicyRule, goTo(next), conj)}
	for _, f := range families {
		// ct() needs the family in the match.
		fs = append(fs,
			flow(t, plan.PriorityPolicyAllowNew, commitThen(next), conj, f.eth, ctNewPlain),
			flow(t, plan.PriorityPolicyFragmentAllowNew, d.meet(true), conj, f.eth, ctNewPlain, fragFirst),
		)
	}
	if d == Egress {
		for _, p := range c.PodCIDRs {
			f := families[0]
			if p.Addr().Is6() {
				f = families[1]
			}
			fs = append(fs,
				flow(t, plan.PriorityPolicyAllowLocal, goTo(next), conj, f.eth, ctNewPlain, f.dst(p)),
				flow(t, plan.PriorityPolicyFragmentAllowLocal, d.meet(false), conj, f.eth, ctNewPlain, fragFirst, f.dst(p)),
			)
		}
	}
	return fs, nil
}

// LogMeter is the node-wide ceiling of the denied packets' packet-ins
// (owner OwnerBase), behind each source's own meter (punt.Rates): a
// sample for the log, while the drop flows count every packet.
func LogMeter() openflow.MeterEntry { return puntflows.CeilingMeter(plan.PacketInPolicyDenied) }

// logAction sends a denied packet's first bytes to nodeflow through the
// meter of its source (the punt stage) and the log's ceiling.
func logAction() []openflow.Instruction {
	return []openflow.Instruction{openflow.ApplyActions{Actions: append(puntflows.Actions(plan.PacketInPolicyDenied), openflow.Controller2{
		MaxLen: 128, ControllerID: plan.ControllerID, Reason: openflow.PacketInAction,
		Userdata: []byte{byte(plan.PacketInPolicyDenied)}, MeterID: plan.MeterPolicyLog,
	})}}
}

// IsolationFlows returns the drops of a pod isolated in direction d: by its
// port for egress, by its addresses for ingress. With log, each sends a
// metered sample of what it drops to nodeflow (plan.PacketInPolicyDenied).
func IsolationFlows(d Direction, port uint32, ips []netip.Addr, log bool) ([]openflow.Flow, error) {
	t := d.Table()
	var ins []openflow.Instruction
	if log {
		ins = logAction()
	}
	if d == Egress {
		if port == 0 || port >= openflow.PortMax {
			return nil, fmt.Errorf("policy: egress isolation: port %d: not a switch port", port)
		}
		return []openflow.Flow{flow(t, plan.PriorityPolicyIsolated, ins, openflow.InPort(port))}, nil
	}
	var fs []openflow.Flow
	for _, ip := range ips {
		if !ip.IsValid() || ip.Is4In6() {
			return nil, fmt.Errorf("policy: ingress isolation: address %q: not a plain IPv4 or IPv6 address", ip)
		}
		f := families[0]
		if ip.Is6() {
			f = families[1]
		}
		fs = append(fs, flow(t, plan.PriorityPolicyIsolated, ins, f.eth, f.dst(netip.PrefixFrom(ip, ip.BitLen()))))
	}
	return fs, nil
}

// Owner names.
const (
	// OwnerBase owns BaseFlows.
	OwnerBase = "netpol/base"
)

// PolicyOwner owns the conj_id flows of one policy's rules.
func PolicyOwner(namespace, name string) string { return "netpol/policy/" + namespace + "/" + name }

// PodOwner owns one local pod's isolation flows and the clause flows keyed
// by its port or its addresses.
func PodOwner(namespace, name string) string { return "netpol/pod/" + namespace + "/" + name }

// PeerOwner owns the clause flows keyed by one peer prefix: sources
// (ingress) or destinations (egress), every port of it.
func PeerOwner(k Key) string {
	if k.Clause() == 1 {
		return "netpol/src/" + prefixString(k.Src, k.V6)
	}
	return "netpol/dst/" + prefixString(k.Dst, k.V6)
}
