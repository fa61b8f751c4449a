package egressfirewall

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// Policy is the one internal form of a namespace's egress firewall,
// whichever API it came from: rules in order, the first match wins, and
// traffic that matches no rule is allowed.
type Policy struct {
	Namespace string
	Source    Source
	Rules     []Rule
}

// Source is the API object a Policy was built from.
type Source struct {
	Kind              Kind
	Name              string
	UID               types.UID
	CreationTimestamp time.Time
}

// Ref returns the object's reference.
func (p *Policy) Ref() ObjectRef {
	return ObjectRef{Kind: p.Source.Kind, Namespace: p.Namespace, Name: p.Source.Name, UID: p.Source.UID}
}

// Action is what a rule does with the traffic it matches.
type Action uint8

// Actions.
const (
	// Allow lets the traffic go on to routing.
	Allow Action = iota + 1
	// Deny drops it.
	Deny
)

// String returns "Allow" or "Deny".
func (a Action) String() string {
	switch a {
	case Allow:
		return string(RuleAllow)
	case Deny:
		return string(RuleDeny)
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// Rule is one rule of a Policy.
type Rule struct {
	// Index is the rule's position in spec.egress, from 0: the lower, the
	// earlier it is judged.
	Index  int
	Action Action
	Dest   Destination
	// Ports limit the rule to these protocol/port pairs; none is every
	// protocol and port.
	Ports []Port
}

// Destination is exactly one of a CIDR, a DNS name and a node selector.
type Destination struct {
	// CIDR is a masked IPv4 or IPv6 prefix; valid only for a CIDR rule.
	CIDR netip.Prefix
	// DNSName is a lowercase name without a trailing dot, or "*." and
	// such a name: the names exactly one label below it.
	DNSName string
	// NodeSelector selects the nodes whose addresses are the destination;
	// non-nil only for a node selector rule. An empty selector selects
	// every node.
	NodeSelector labels.Selector
}

// DestinationKind says which of its fields a Destination uses.
type DestinationKind uint8

// Destination kinds.
const (
	DestCIDR DestinationKind = iota + 1
	DestDNSName
	DestNodeSelector
)

// Kind returns which field d uses (0 for the zero Destination).
func (d Destination) Kind() DestinationKind {
	switch {
	case d.CIDR.IsValid():
		return DestCIDR
	case d.DNSName != "":
		return DestDNSName
	case d.NodeSelector != nil:
		return DestNodeSelector
	}
	return 0
}

// String renders the destination as the API spells it:
// "cidrSelector 10.0.0.0/8", "dnsName *.example.com",
// "nodeSelector role=infra".
func (d Destination) String() string {
	switch d.Kind() {
	case DestCIDR:
		return "cidrSelector " + d.CIDR.String()
	case DestDNSName:
		return "dnsName " + d.DNSName
	case DestNodeSelector:
		return "nodeSelector " + d.NodeSelector.String()
	}
	return "no destination"
}

// Equal reports whether d and e are the same destination.
func (d Destination) Equal(e Destination) bool {
	if d.CIDR != e.CIDR || d.DNSName != e.DNSName || (d.NodeSelector == nil) != (e.NodeSelector == nil) {
		return false
	}
	return d.NodeSelector == nil || d.NodeSelector.String() == e.NodeSelector.String()
}

// Protocol is an L4 protocol a rule's ports name, by its IP protocol
// number.
type Protocol uint8

// Protocols.
const (
	TCP  Protocol = 6
	UDP  Protocol = 17
	SCTP Protocol = 132
)

// String returns "TCP", "UDP" or "SCTP".
func (p Protocol) String() string {
	switch p {
	case TCP:
		return "TCP"
	case UDP:
		return "UDP"
	case SCTP:
		return "SCTP"
	}
	return fmt.Sprintf("Protocol(%d)", uint8(p))
}

// ParseProtocol reads the API's spelling, "TCP", "UDP" or "SCTP" (upper
// case, as the CRD's enum has it).
func ParseProtocol(s string) (Protocol, bool) {
	switch s {
	case "TCP":
		return TCP, true
	case "UDP":
		return UDP, true
	case "SCTP":
		return SCTP, true
	}
	return 0, false
}

// Port is one protocol/port pair of a rule. Port 0 is every port of the
// protocol.
type Port struct {
	Protocol Protocol
	Port     uint16
}

// String renders "TCP/443" or "UDP" (every port).
func (p Port) String() string {
	if p.Port == 0 {
		return p.Protocol.String()
	}
	return fmt.Sprintf("%s/%d", p.Protocol, p.Port)
}

// Equal reports whether p and q are the same policy: the same source
// object (kind, name, UID) and the same rules in the same order. The
// creation time is not compared.
func (p *Policy) Equal(q *Policy) bool {
	if p == nil || q == nil {
		return p == q
	}
	if p.Namespace != q.Namespace || p.Source.Kind != q.Source.Kind || p.Source.Name != q.Source.Name ||
		p.Source.UID != q.Source.UID || len(p.Rules) != len(q.Rules) {
		return false
	}
	for i := range p.Rules {
		a, b := p.Rules[i], q.Rules[i]
		if a.Index != b.Index || a.Action != b.Action || !a.Dest.Equal(b.Dest) || !slices.Equal(a.Ports, b.Ports) {
			return false
		}
	}
	return true
}

// HasDNSNames reports whether any rule of p has a dnsName destination: the
// namespace's DNS answers then need to be learned from.
func (p *Policy) HasDNSNames() bool {
	for _, r := range p.Rules {
		if r.Dest.Kind() == DestDNSName {
			return true
		}
	}
	return false
}
