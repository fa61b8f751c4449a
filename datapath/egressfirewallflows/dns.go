package egressfirewallflows

import (
	"fmt"
	"net/netip"
	"slices"

	"nodeflow/datapath/plan"
	"nodeflow/datapath/puntflows"
	"nodeflow/lib/openflow"
)

// DNS learning. A pod of a namespace with dnsName rules must never be a
// step ahead of its firewall: it must not learn an address from a DNS
// answer before the rules that name it match that address. So DNS replies
// to such pods go to the agent first (DNSFlows, owner DNSOwner): it reads
// the answer, installs the addresses that match a rule's name, and only
// then releases the reply (Release) into table plan.PodRouting, which
// delivers it to the pod as if table 50 had let it through. Only replies
// from trusted sources (DNSSources, dnstrust.go) are sent to the agent;
// the others go straight on, unlearned, and are counted by their flows.

// DNSOwner owns DNSFlows and DNSMeter. A namespace name cannot start with
// "_", so it never collides with Owner.
const DNSOwner = ownerPrefix + "/_dns"

// DNSPort is the port DNS replies come from.
const DNSPort = 53

// DNSMeter is the node-wide ceiling of every DNS learning packet-in,
// behind each pod's own meter (punt.Rates). Replies over a rate are
// dropped before they reach the agent, and the pod's resolver asks again.
func DNSMeter() openflow.MeterEntry { return puntflows.CeilingMeter(plan.PacketInDNS) }

// DNSAction is the packet-in of a DNS reply held for learning: the whole
// frame, to nodeflow's controller id, through DNSMeter, with userdata
// plan.PacketInDNS. DNSFlows put the punt stage before it (the meter of
// the pod the reply goes to).
func DNSAction() openflow.Controller2 {
	return openflow.Controller2{
		MaxLen: openflow.ControllerMaxLenNoBuffer, ControllerID: plan.ControllerID,
		Reason: openflow.PacketInAction, Userdata: []byte{byte(plan.PacketInDNS)}, MeterID: plan.MeterEgressFirewallDNS,
	}
}

// DNSFlows returns table 50's DNS learning flows for the addresses of the
// local pods of the namespaces whose rules name DNS names: the replies to
// them (UDP from port 53) that a source of src sent go to the agent; the
// others go on to routing unlearned and are counted. Each pod address i
// (sorted, ids from plan.EgressFirewallDNSConjIDs) has
//
//   - at plan.PriorityEgressFirewallDNS, clause 1 of conjunction i (the
//     pod) and the conj_id flow that sends the reply to the agent
//     (DNSAction), one punt flow per pod address;
//   - at plan.PriorityEgressFirewallDNSUntrusted, the same match as its
//     clause 1, to plan.PodRouting: every reply that is not punted.
//
// and each trusted source's match (DNSSources.matches) is clause 2 of the
// conjunctions of every pod address of its family. A family without any
// trusted source has no conjunction at all. The flows come in a fixed
// order; an error names the address or source that cannot be matched.
func DNSFlows(pods []netip.Addr, src DNSSources) ([]openflow.Flow, error) {
	addrs := slices.Clone(pods)
	slices.SortFunc(addrs, netip.Addr.Compare)
	addrs = slices.Compact(addrs)
	if len(addrs) > int(plan.EgressFirewallDNSConjIDs.Size()) {
		return nil, fmt.Errorf("egressfw: dns: %d pod addresses, more than the %d conjunction ids of %s", len(addrs), plan.EgressFirewallDNSConjIDs.Size(), plan.EgressFirewallDNSConjIDs.Name)
	}
	for _, a := range addrs {
		if !plainAddr(a) {
			return nil, fmt.Errorf("egressfw: dns: pod address %q: not a plain IPv4 or IPv6 address", a)
		}
	}
	matches, err := src.matches()
	if err != nil {
		return nil, err
	}
	var trusted [2]bool // by family: some source to learn from
	for _, m := range matches {
		trusted[famIndex(m.prefix.Addr())] = true
	}
	learn := []openflow.Instruction{openflow.ApplyActions{Actions: append(puntflows.Actions(plan.PacketInDNS), DNSAction())}}
	next := []openflow.Instruction{openflow.GotoTable{Table: uint8(plan.PodRouting)}}
	out := make([]openflow.Flow, 0, 3*len(addrs)+2*len(matches))
	var ids [2][]uint32 // the conjunction ids of each family's pods
	for i, a := range addrs {
		f := famOf(a)
		m := openflow.NewMatch(f.eth, openflow.IPProto(17), f.dstNet(netip.PrefixFrom(a, a.BitLen())), openflow.UDPSrc(DNSPort))
		out = append(out, dnsFlow(plan.PriorityEgressFirewallDNSUntrusted, m, next))
		if !trusted[famIndex(a)] {
			continue
		}
		id := plan.EgressFirewallDNSConjIDs.First + uint32(i)
		ids[famIndex(a)] = append(ids[famIndex(a)], id)
		out = append(out,
			dnsFlow(plan.PriorityEgressFirewallDNS, m, conjunction(id, 1)),
			dnsFlow(plan.PriorityEgressFirewallDNS, openflow.NewMatch(openflow.ConjID(id)), learn),
		)
	}
	for _, sm := range matches {
		fi := famIndex(sm.prefix.Addr())
		if len(ids[fi]) == 0 {
			continue
		}
		acts := make([]openflow.Action, len(ids[fi]))
		for j, id := range ids[fi] {
			acts[j] = openflow.Conjunction{ID: id, Clause: 2, NClauses: 2}
		}
		ins := []openflow.Instruction{openflow.ApplyActions{Actions: acts}}
		for _, m := range sm.matchFields() {
			out = append(out, dnsFlow(plan.PriorityEgressFirewallDNS, m, ins))
		}
	}
	return out, nil
}

func dnsFlow(prio plan.Priority, m openflow.Match, ins []openflow.Instruction) openflow.Flow {
	return openflow.Flow{Table: uint8(plan.PodEgressFirewall), Priority: uint16(prio), Match: m, Instructions: ins}
}

func conjunction(id uint32, clause uint8) []openflow.Instruction {
	return []openflow.Instruction{openflow.ApplyActions{Actions: []openflow.Action{openflow.Conjunction{ID: id, Clause: clause, NClauses: 2}}}}
}

// famIndex is 0 for IPv4, 1 for IPv6.
func famIndex(a netip.Addr) int {
	if a.Is4() {
		return 0
	}
	return 1
}

// plainAddr reports whether a is an IPv4 or IPv6 address that a flow can
// match: not IPv4-mapped, without a zone, not unspecified.
func plainAddr(a netip.Addr) bool {
	return a.IsValid() && !a.Is4In6() && a.Zone() == "" && !a.IsUnspecified()
}

// Release returns the packet-out that releases a DNS reply held by a
// DNSFlows packet-in: the frame goes on from table plan.PodRouting, with
// the in_port and the registers it had, so it takes the path table 50
// would have sent it on. Conntrack state is not carried; routing to a
// local pod does not need it.
func Release(in *openflow.PacketIn) *openflow.PacketOut {
	var regs []openflow.Field
	for i := range 16 {
		if v := in.Reg(i); v != 0 {
			regs = append(regs, openflow.Reg(i, v, 0xffffffff))
		}
	}
	return &openflow.PacketOut{
		InPort:  in.InPort(),
		Match:   openflow.Match{Fields: regs},
		Actions: []openflow.Action{openflow.ResubmitTable(uint8(plan.PodRouting))},
		Data:    in.Data,
	}
}
