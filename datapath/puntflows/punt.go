// Package puntflows builds br0's punt stage (tables plan.PodPunt and
// plan.PodPuntNamespace): the meters that every packet sent to the agent
// passes, per source, per namespace and per category, so that one pod's
// flood of rejects, unidling packet-ins, DNS replies or denied packets
// costs that pod's share, one tenant's pods together their namespace's
// share, and nobody else anything.
//
// A flow that sends a packet to the agent runs Actions(c) before its own
// controller action:
//
//	set_field:c->PuntCategory, resubmit(,120), controller(userdata=...,meter_id=<c's ceiling>)
//
// table 120 holds, for each source, one flow per category, and a pod's
// goes on to its namespace's meter in table 121:
//
//	priority=100, PuntCategory=c, in_port=P   actions=meter:<c<<16|P>, set_field:<c<<16|P>->PuntSource,
//	                                                  set_field:<ns>->PuntNamespace, resubmit(,121)
//	priority=100, PuntCategory=dns, nw_dst=A  actions=meter:<3<<16|P>, ...  (A an address of the pod on P)
//	table=121, priority=100, PuntCategory=c, PuntNamespace=ns  actions=meter:<0x80000000|c<<24|ns>
//
// A packet over a rate is dropped by that meter, inside the resubmits:
// the controller action after them never runs. One that passes goes on
// to the controller action, whose meter is the category's node-wide
// ceiling (CeilingMeter). The userdata stays the calling flow's (a
// reject's ServiceID); PuntSource tells the agent which source sent it,
// and its queues are per source too (feature.Dispatcher).
//
// The sources (SourceState): each local pod's port (owner
// pod/<ns>/<name>, so a pod's meters come and go with its flows), and the
// node's own ports, vxlan0, the patch port and mp0 (owner node/local),
// which have no namespace. A DNS reply is the pod's it goes to: a pod that
// floods queries floods replies to itself. The namespaces with local pods
// (NamespaceState, owner pod/<ns>/_punt, a name no pod can have). What no
// source's flow matches (a packet-out's re-injection from a port that has
// gone) meets only the ceiling: the tables' misses return.
//
// The fairness bound (Rates): a pod gets its own rate unless its
// namespace's pods together send more than the namespace's (twice a
// pod's), and a namespace gets its own unless more than five namespaces
// (ceiling / namespace rate) flood one category on the node at once; then
// the ceiling drops from each in proportion to what it sends. So one
// tenant alone, whatever its pods, takes at most a fifth of the ceiling.
// The ceilings bound what the agent receives whatever the number of pods:
// 7,100 packet-ins a second over the four categories.
//
// SharedState is the previous design, one meter per category for the
// whole node at its old rate, kept for the benchmark that compares the
// two (the agent's hidden --packet-in-meters=shared).
//
// The builders are pure: no I/O, no cookies.
package puntflows

import (
	"fmt"
	"net/netip"

	"nodeflow/datapath/nodeflows"
	"nodeflow/datapath/plan"
	"nodeflow/datapath/reconcile"
	"nodeflow/lib/openflow"
)

// Rates are one category's meter rates, in packets per second; each meter's
// burst is twice its rate.
type Rates struct {
	// Source is one source's meter.
	Source uint32
	// Namespace is the meter of a namespace's pods together.
	Namespace uint32
	// Ceiling is the node-wide meter on the category's controller actions.
	Ceiling uint32
	// Shared is the previous design's one meter for the node.
	Shared uint32
}

// rates holds each category's rates. A namespace's are two sources'
// worth, the ceilings ten; the shared rates are the single meters they
// replace.
var rates = map[plan.PacketInCategory]Rates{
	// Unidling: the first packets of new connections to idled services,
	// held by the agent until the service has endpoints.
	plan.PacketInUnidle: {Source: 200, Namespace: 400, Ceiling: 2000, Shared: 200},
	// Rejects: new connections to a service without endpoints, answered
	// with a TCP RST or an ICMP unreachable.
	plan.PacketInReject: {Source: 100, Namespace: 200, Ceiling: 1000, Shared: 100},
	// DNS learning: a reply over the rate is dropped and the pod's
	// resolver asks again, so a pod's rate is a busy resolver's.
	plan.PacketInDNS: {Source: 400, Namespace: 800, Ceiling: 4000, Shared: 2000},
	// The denied packets' log: a sample; the drop flows count every
	// packet.
	plan.PacketInPolicyDenied: {Source: 10, Namespace: 20, Ceiling: 100, Shared: 20},
}

// RatesOf returns category c's rates; false for a category without a
// punt stage.
func RatesOf(c plan.PacketInCategory) (Rates, bool) {
	r, ok := rates[c]
	return r, ok
}

// meter returns a packets-per-second drop meter with a burst of twice the
// rate.
func meter(id, rate uint32) openflow.MeterEntry {
	return openflow.MeterEntry{
		ID: id, Flags: openflow.MeterFlagPktps | openflow.MeterFlagBurst,
		Bands: []openflow.MeterBand{{Type: openflow.MeterBandDrop, Rate: rate, BurstSize: 2 * rate}},
	}
}

// CeilingMeter returns category c's node-wide meter, which its controller
// actions name. It panics for a category without a punt stage: callers
// name their own category.
func CeilingMeter(c plan.PacketInCategory) openflow.MeterEntry {
	id, ok := plan.Ceiling(c)
	r, ok2 := rates[c]
	if !ok || !ok2 {
		panic(fmt.Sprintf("punt: no ceiling for packet-in category %s", c))
	}
	return meter(id, r.Ceiling)
}

// Actions returns what a flow of category c runs before its controller
// action: the category into plan.PuntCategory, then the punt table. It
// panics for a category without a punt stage: callers name their own.
func Actions(c plan.PacketInCategory) []openflow.Action {
	m, err := plan.PuntMark(c)
	if err != nil {
		panic(err)
	}
	return []openflow.Action{m.Load(), openflow.ResubmitTable(uint8(plan.PodPunt))}
}

// Source is one source of packet-ins on br0.
type Source struct {
	// Port is its ofport: a pod's port, vxlan0, the patch port or mp0.
	Port uint32
	// Dsts are a pod's addresses: the DNS replies sent to them are
	// metered as the pod's. None for the node's own ports.
	Dsts []netip.Addr
	// Namespace is a pod's namespace id: what passes the pod's meters
	// goes on to the namespace's (NamespaceState). 0 for the node's own
	// ports.
	Namespace uint32
}

// SourceState returns the punt flows and meters of one source: for each
// category its meter, and the flow that applies it to what the source
// sends (for DNS, to what is sent to it). A port outside
// 1-plan.SourcePortMax or an address that is not a plain IPv4 or IPv6
// address is an error naming it.
func SourceState(s Source) (reconcile.State, error) {
	if s.Port == 0 || s.Port > plan.SourcePortMax {
		return reconcile.State{}, fmt.Errorf("punt: source port %d: %w (1-%d)", s.Port, plan.ErrRange, plan.SourcePortMax)
	}
	var st reconcile.State
	for _, c := range plan.PuntCategories {
		id, err := plan.SourceMeter(c, s.Port)
		if err != nil {
			return reconcile.State{}, fmt.Errorf("punt: source port %d: %w", s.Port, err)
		}
		var matches [][]openflow.Field
		if c == plan.PacketInDNS {
			for _, a := range s.Dsts {
				if !a.IsValid() || a.Is4In6() || a.Zone() != "" || a.IsUnspecified() {
					return reconcile.State{}, fmt.Errorf("punt: source port %d: address %q: not a plain IPv4 or IPv6 address", s.Port, a)
				}
				if a.Is4() {
					matches = append(matches, []openflow.Field{openflow.EthType(0x0800), openflow.IPv4Dst(a)})
				} else {
					matches = append(matches, []openflow.Field{openflow.EthType(0x86dd), openflow.IPv6Dst(a)})
				}
			}
		} else {
			matches = [][]openflow.Field{{openflow.InPort(s.Port)}}
		}
		if len(matches) == 0 {
			continue
		}
		st.Meters = append(st.Meters, meter(id, rates[c].Source))
		for _, m := range matches {
			f := flow(plan.PodPunt, c, id, plan.PriorityPuntSource, m...)
			if s.Namespace != 0 {
				load, err := plan.PuntNamespace.LoadValue(uint64(s.Namespace))
				if err != nil {
					return reconcile.State{}, fmt.Errorf("punt: source port %d: namespace id: %w", s.Port, err)
				}
				aa := f.Instructions[1].(openflow.ApplyActions)
				aa.Actions = append(aa.Actions, load, openflow.ResubmitTable(uint8(plan.PodPuntNamespace)))
				f.Instructions[1] = aa
			}
			st.Flows = append(st.Flows, f)
		}
	}
	return st, nil
}

// NamespaceOwner is the owner of a namespace's meters (NamespaceState). A
// pod cannot be named "_punt", so it never collides with node.PodOwner,
// and it counts as the namespace's like its pods' owners.
func NamespaceOwner(namespace string) string { return nodeflows.PodOwner(namespace, "_punt") }

// NamespaceState returns the meters of namespace id ns's pods together,
// one per category, and the flows of table 121 that apply them.
func NamespaceState(ns uint32) (reconcile.State, error) {
	var st reconcile.State
	for _, c := range plan.PuntCategories {
		id, err := plan.NamespaceMeter(c, ns)
		if err != nil {
			return reconcile.State{}, fmt.Errorf("punt: namespace: %w", err)
		}
		m, err := plan.PuntNamespace.MatchValue(uint64(ns))
		if err != nil {
			return reconcile.State{}, fmt.Errorf("punt: namespace: %w", err)
		}
		f := flow(plan.PodPuntNamespace, c, id, plan.PriorityPuntSource, m)
		f.Instructions = f.Instructions[:1] // the meter alone
		st.Meters = append(st.Meters, meter(id, rates[c].Namespace))
		st.Flows = append(st.Flows, f)
	}
	return st, nil
}

// SharedState returns the previous design: for each category one flow
// that matches every source, and one meter at the category's old rate.
func SharedState() reconcile.State {
	var st reconcile.State
	for _, c := range plan.PuntCategories {
		id, err := plan.SourceMeter(c, plan.SourceShared)
		if err != nil {
			panic(err) // every punt category has a shared meter
		}
		st.Meters = append(st.Meters, meter(id, rates[c].Shared))
		st.Flows = append(st.Flows, flow(plan.PodPunt, c, id, plan.PriorityPuntShared))
	}
	return st
}

// flow returns table t's flow of category c that applies meter id to the
// packets that also match fields, and records it in PuntSource.
func flow(t plan.TableID, c plan.PacketInCategory, id uint32, prio plan.Priority, fields ...openflow.Field) openflow.Flow {
	m, err := plan.PuntMark(c)
	if err != nil {
		panic(err)
	}
	load, err := plan.PuntSource.LoadValue(uint64(id))
	if err != nil {
		panic(err) // PuntSource is a whole register
	}
	return openflow.Flow{
		Table: uint8(t), Priority: uint16(prio),
		Match: openflow.NewMatch(append([]openflow.Field{m.Match()}, fields...)...),
		// Open vSwitch wants a meter first among the actions (it is the
		// meter instruction of OpenFlow 1.3).
		Instructions: []openflow.Instruction{openflow.Meter{ID: id}, openflow.ApplyActions{Actions: []openflow.Action{load}}},
	}
}
