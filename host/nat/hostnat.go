// Package nat lets a node's own host reach its NodePorts, ExternalIPs and
// LoadBalancer ingress IPs.
//
// The host reaches a ClusterIP through its service route into breth0, whose
// masquerade flows carry the packet to br0's load balancer. A connection
// from the host to one of its own addresses on a node port never gets there:
// the kernel delivers it locally. A connection to an ExternalIP or an
// ingress IP leaves by the default route and is never load-balanced either.
// As kube-proxy and ovn-kubernetes do, the host's own packets to those
// addresses are DNATed in netfilter's output path to the service's ClusterIP
// and port; from there on they take the host-to-ClusterIP path.
//
// Build turns the service ports into a Ruleset (pure); Applier programs it
// over netlink into nftables tables of nodeflow's own: one per family
// (`ip nodeflow`, `ip6 nodeflow`), each holding one map keyed by
// destination address . layer-4 protocol . destination port, whose value is
// the ClusterIP . port to DNAT to, and one rule in a nat chain hooked at
// output with priority dstnat (-100):
//
//	dnat ip to ip daddr . meta l4proto . th dport map @services
//
// A packet costs one hash lookup whatever the number of services, and a
// change of services is a change of map elements.
package nat

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Protocol numbers (IANA), as nftables' meta l4proto sees them.
const (
	ProtoTCP  uint8 = 6
	ProtoUDP  uint8 = 17
	ProtoSCTP uint8 = 132
)

// ProtoName returns the lowercase name of a protocol number ("tcp").
func ProtoName(p uint8) string {
	switch p {
	case ProtoTCP:
		return "tcp"
	case ProtoUDP:
		return "udp"
	case ProtoSCTP:
		return "sctp"
	}
	return fmt.Sprintf("proto-%d", p)
}

// ParseProto returns the number of a protocol name (TCP, UDP, SCTP; any
// case).
func ParseProto(s string) (uint8, error) {
	switch strings.ToLower(s) {
	case "tcp":
		return ProtoTCP, nil
	case "udp":
		return ProtoUDP, nil
	case "sctp":
		return ProtoSCTP, nil
	}
	return 0, fmt.Errorf("hostnat: unsupported protocol %q", s)
}

// Port is one service port, as the rule builder needs it.
type Port struct {
	// Name names the port in conflicts ("ns/svc:http/TCP").
	Name string
	// Protocol is ProtoTCP, ProtoUDP or ProtoSCTP.
	Protocol uint8
	// Port is the service port (on the ClusterIPs, ExternalIPs and ingress
	// IPs).
	Port uint16
	// NodePort is the node port, 0 for none.
	NodePort uint16
	// ClusterIPs holds at most one address per family.
	ClusterIPs []netip.Addr
	// ExternalIPs and LoadBalancerIPs are the external addresses.
	ExternalIPs, LoadBalancerIPs []netip.Addr
}

// Key is what a rule matches: a locally generated packet's destination
// address, protocol and destination port.
type Key struct {
	Daddr netip.Addr
	Proto uint8
	Port  uint16
}

// String formats k as nft does: "10.0.0.1 . tcp . 30080".
func (k Key) String() string {
	return fmt.Sprintf("%s . %s . %d", k.Daddr, ProtoName(k.Proto), k.Port)
}

func (k Key) compare(o Key) int {
	return cmp.Or(k.Daddr.Compare(o.Daddr), cmp.Compare(k.Proto, o.Proto), cmp.Compare(k.Port, o.Port))
}

// Rule is one DNAT: packets matching Key go to To.
type Rule struct {
	Key
	// To is the ClusterIP and service port.
	To netip.AddrPort
}

// String formats r as an element of nft's map.
func (r Rule) String() string {
	return fmt.Sprintf("%s : %s . %d", r.Key, r.To.Addr(), r.To.Port())
}

// Ruleset is the whole DNAT map of each family, sorted by key, free of
// duplicate keys.
type Ruleset struct {
	V4, V6 []Rule
}

// Len returns the number of rules.
func (rs Ruleset) Len() int { return len(rs.V4) + len(rs.V6) }

// Equal reports whether rs and o hold the same rules.
func (rs Ruleset) Equal(o Ruleset) bool {
	return slices.Equal(rs.V4, o.V4) && slices.Equal(rs.V6, o.V6)
}

// Family returns the rules of one family.
func (rs Ruleset) Family(v6 bool) []Rule {
	if v6 {
		return rs.V6
	}
	return rs.V4
}

// Conflict is a key two service ports want with different targets. The
// port first in name order keeps it.
type Conflict struct {
	Key Key
	// Kept and Dropped name the ports.
	Kept, Dropped string
}

// Error describes the conflict.
func (c Conflict) Error() string {
	return fmt.Sprintf("hostnat: %s: %s port %d wanted by %s too; %s keeps it", c.Key.Daddr, ProtoName(c.Key.Proto), c.Key.Port, c.Dropped, c.Kept)
}

// Build returns the DNAT rules for the host's own traffic: for each port
// with a node port, each node IP of a family the port has a ClusterIP of,
// with the node port, to that ClusterIP and the service port; for each
// ExternalIP and ingress IP, with the service port, to the ClusterIP of its
// family. Addresses without a ClusterIP of their family, invalid ones and
// ClusterIPs themselves are skipped. Ports are taken in name order; a key
// wanted again with another target is a Conflict and keeps the first.
func Build(nodeIPs []netip.Addr, ports []Port) (Ruleset, []Conflict) {
	ports = slices.Clone(ports)
	slices.SortStableFunc(ports, func(x, y Port) int { return strings.Compare(x.Name, y.Name) })
	type owned struct {
		to    netip.AddrPort
		owner string
	}
	want := map[Key]owned{}
	var conflicts []Conflict
	add := func(p *Port, daddr netip.Addr, port uint16) {
		daddr = daddr.Unmap()
		if !daddr.IsValid() || port == 0 || daddr.IsUnspecified() {
			return
		}
		var cip netip.Addr
		for _, c := range p.ClusterIPs {
			if c = c.Unmap(); c.IsValid() && c.Is4() == daddr.Is4() {
				cip = c
				break
			}
		}
		if !cip.IsValid() || cip == daddr {
			return
		}
		k := Key{Daddr: daddr, Proto: p.Protocol, Port: port}
		to := netip.AddrPortFrom(cip, p.Port)
		if o, ok := want[k]; ok {
			if o.to != to {
				conflicts = append(conflicts, Conflict{Key: k, Kept: o.owner, Dropped: p.Name})
			}
			return
		}
		want[k] = owned{to: to, owner: p.Name}
	}
	for i := range ports {
		p := &ports[i]
		if p.Port == 0 {
			continue
		}
		if p.NodePort != 0 {
			for _, ip := range nodeIPs {
				add(p, ip, p.NodePort)
			}
		}
		for _, ip := range p.ExternalIPs {
			add(p, ip, p.Port)
		}
		for _, ip := range p.LoadBalancerIPs {
			add(p, ip, p.Port)
		}
	}
	rules := make([]Rule, 0, len(want))
	for k, o := range want {
		rules = append(rules, Rule{Key: k, To: o.to})
	}
	rs, _ := NewRuleset(rules) // keys are unique
	return rs, conflicts
}

// NewRuleset returns a Ruleset of rules, each family sorted by key. A key
// given twice keeps its first rule; the later ones are returned.
func NewRuleset(rules []Rule) (Ruleset, []Rule) {
	var rs Ruleset
	var dropped []Rule
	seen := map[Key]bool{}
	for _, r := range rules {
		r.Daddr = r.Daddr.Unmap()
		if seen[r.Key] {
			dropped = append(dropped, r)
			continue
		}
		seen[r.Key] = true
		if r.Daddr.Is4() {
			rs.V4 = append(rs.V4, r)
		} else {
			rs.V6 = append(rs.V6, r)
		}
	}
	byKey := func(x, y Rule) int { return x.Key.compare(y.Key) }
	slices.SortFunc(rs.V4, byKey)
	slices.SortFunc(rs.V6, byKey)
	return rs, dropped
}

// Diff returns the rules of want that old lacks or holds with another
// target (add), and the rules of old that want lacks or changes (del), for
// one family's sorted rules.
func Diff(old, want []Rule) (add, del []Rule) {
	i, j := 0, 0
	for i < len(old) || j < len(want) {
		switch {
		case j == len(want) || (i < len(old) && old[i].Key.compare(want[j].Key) < 0):
			del = append(del, old[i])
			i++
		case i == len(old) || old[i].Key.compare(want[j].Key) > 0:
			add = append(add, want[j])
			j++
		default:
			if old[i].To != want[j].To {
				del = append(del, old[i])
				add = append(add, want[j])
			}
			i++
			j++
		}
	}
	return add, del
}
