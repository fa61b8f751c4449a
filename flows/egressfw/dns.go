package egressfw

import (
	"fmt"
	"net/netip"
	"slices"

	"nodeflow/flows/plan"
	"nodeflow/flows/punt"
	"nodeflow/openflow"
)

// DNS learning. A pod of a namespace with dnsName rules must never be a
// step ahead of its firewall: it must not learn an address from a DNS
// answer before the rules that name it match that address. So DNS replies
// to such pods go to the agent first (DNSFlows, owner DNSOwner): it reads
// the answer, installs the addresses that match a rule's name, and only
// then releases the reply (Release) into table plan.PodRouting, which
// delivers it to the pod as if table 50 had let it through.

// DNSOwner owns DNSFlows and DNSMeter. A namespace name cannot start with
// "_", so it never collides with Owner.
const DNSOwner = ownerPrefix + "/_dns"

// DNSPort is the port DNS replies come from.
const DNSPort = 53

// DNSMeter is the node-wide ceiling of every DNS learning packet-in,
// behind each pod's own meter (punt.Rates). Replies over a rate are
// dropped before they reach the agent, and the pod's resolver asks again.
func DNSMeter() openflow.MeterEntry { return punt.CeilingMeter(plan.PacketInDNS) }

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

// DNSFlows returns table 50's flows that send the DNS replies (UDP from
// port 53) addressed to pods to the agent, one per address, sorted. The
// addresses are the local pods of the namespaces whose rules name DNS
// names. A reply is caught whatever its conntrack state: a reply from a
// server outside the cluster is untracked in the service zone, and one
// from a cluster DNS service is a reply there.
func DNSFlows(pods []netip.Addr) ([]openflow.Flow, error) {
	addrs := slices.Clone(pods)
	slices.SortFunc(addrs, netip.Addr.Compare)
	addrs = slices.Compact(addrs)
	ins := []openflow.Instruction{openflow.ApplyActions{Actions: append(punt.Actions(plan.PacketInDNS), DNSAction())}}
	out := make([]openflow.Flow, 0, len(addrs))
	for _, a := range addrs {
		if !a.IsValid() || a.Is4In6() || a.Zone() != "" || a.IsUnspecified() {
			return nil, fmt.Errorf("egressfw: dns: pod address %q: not a plain IPv4 or IPv6 address", a)
		}
		f := famOf(a)
		m := openflow.NewMatch(f.eth, f.dstNet(netip.PrefixFrom(a, a.BitLen())), openflow.IPProto(17), openflow.UDPSrc(DNSPort))
		out = append(out, openflow.Flow{
			Table: uint8(plan.PodEgressFirewall), Priority: uint16(plan.PriorityEgressFirewallDNS),
			Match: m, Instructions: ins,
		})
	}
	return out, nil
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
