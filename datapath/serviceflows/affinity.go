package serviceflows

import (
	"net/netip"

	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
	"nodeflow/model/service"
)

// StaleAffinity returns the flow mods that forget the session-affinity
// bindings (learned flows in table 31) of a service port that point at
// endpoints it no longer has. The reconciler never touches learned flows,
// and a binding to a removed endpoint would send its client's new
// connections to table 35, where no flow matches them any more, until the
// binding times out. Bindings carry their endpoint in their cookie, so
// each mod is an OFPFC_DELETE of table 31 by that exact cookie.
func StaleAffinity(node *Node, port *service.ServicePort, old, current []service.Endpoint) []*openflow.FlowMod {
	if port.AffinityTimeout <= 0 {
		return nil
	}
	live := map[netip.AddrPort]bool{}
	for _, e := range current {
		live[netip.AddrPortFrom(e.IP, e.Port)] = true
	}
	var out []*openflow.FlowMod
	seen := map[netip.AddrPort]bool{}
	for _, e := range old {
		ap := netip.AddrPortFrom(e.IP, e.Port)
		if live[ap] || seen[ap] {
			continue
		}
		seen[ap] = true
		b := builder{node: node, port: port, fam: service.FamilyOf(e.IP)}
		m := openflow.NewFlowMod(openflow.FlowDelete)
		m.Table = uint8(plan.PodSessionAffinity)
		m.Cookie, m.CookieMask = uint64(affinityCookie(port.Name, b.classify(e).addr, e.Port)), ^uint64(0)
		out = append(out, m)
	}
	return out
}
