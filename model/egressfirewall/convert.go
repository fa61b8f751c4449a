package egressfirewall

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Policy checks ef's values and returns its Policy. Every problem is a
// *FieldError in the returned ErrorList; with any problem there is no
// Policy (see the package doc: a Policy is all or nothing).
//
// Checked: the name is "default"; at most MaxEgressFirewallRules rules;
// each rule's type is Allow or Deny; exactly one destination; a valid
// CIDR, DNS name (ParseDNSName) or label selector; ports of TCP, UDP or
// SCTP with a port of 1-65535 or none (every port).
func (ef *EgressFirewall) Policy() (*Policy, error) {
	p := &problems{obj: ObjectRef{Kind: KindEgressFirewall, Namespace: ef.Namespace, Name: ef.Name, UID: ef.UID}}
	if ef.Name != EgressFirewallName {
		p.add("metadata.name", "%q: only the EgressFirewall named %q is enforced", ef.Name, EgressFirewallName)
	}
	if n := len(ef.Spec.Egress); n > MaxEgressFirewallRules {
		p.add("spec.egress", "%d rules, more than the limit of %d", n, MaxEgressFirewallRules)
		return nil, p.err()
	}
	pol := newPolicy(KindEgressFirewall, ef.ObjectMeta, len(ef.Spec.Egress))
	for i, r := range ef.Spec.Egress {
		at := rulePath{rule: i, port: -1}
		rule := Rule{Index: i, Action: ruleAction(p, at, r.Type)}
		rule.Dest = destination(p, at, r.To.CIDRSelector, r.To.DNSName, r.To.NodeSelector, true)
		if len(r.Ports) > 0 {
			rule.Ports = make([]Port, 0, len(r.Ports))
		}
		for j, port := range r.Ports {
			pp := rulePath{rule: i, port: j}
			proto, ok := ParseProtocol(port.Protocol)
			if !ok {
				p.add(pp.field("protocol"), "%q: unknown protocol (want TCP, UDP or SCTP)", port.Protocol)
			}
			var num uint16
			if port.Port != nil {
				if *port.Port < 1 || *port.Port > 65535 {
					p.add(pp.field("port"), "%d: want 1-65535, or no port for every port", *port.Port)
				}
				num = uint16(*port.Port)
			}
			rule.Ports = append(rule.Ports, Port{Protocol: proto, Port: num})
		}
		pol.Rules = append(pol.Rules, rule)
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	return pol, nil
}

// Policy checks enp's values and returns its Policy, as
// EgressFirewall.Policy does: at most MaxEgressNetworkPolicyRules rules,
// each Allow or Deny to exactly one of a CIDR and a DNS name (without a
// wildcard, as in openshift-sdn). openshift-sdn read cidrSelector as IPv4
// only; nodeflow takes IPv6 as well.
func (enp *EgressNetworkPolicy) Policy() (*Policy, error) {
	p := &problems{obj: ObjectRef{Kind: KindEgressNetworkPolicy, Namespace: enp.Namespace, Name: enp.Name, UID: enp.UID}}
	if n := len(enp.Spec.Egress); n > MaxEgressNetworkPolicyRules {
		p.add("spec.egress", "%d rules, more than the limit of %d", n, MaxEgressNetworkPolicyRules)
		return nil, p.err()
	}
	pol := newPolicy(KindEgressNetworkPolicy, enp.ObjectMeta, len(enp.Spec.Egress))
	for i, r := range enp.Spec.Egress {
		at := rulePath{rule: i, port: -1}
		rule := Rule{Index: i, Action: ruleAction(p, at, r.Type)}
		rule.Dest = destination(p, at, r.To.CIDRSelector, r.To.DNSName, nil, false)
		pol.Rules = append(pol.Rules, rule)
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	return pol, nil
}

func newPolicy(k Kind, m metav1.ObjectMeta, n int) *Policy {
	return &Policy{
		Namespace: m.Namespace,
		Source:    Source{Kind: k, Name: m.Name, UID: m.UID, CreationTimestamp: m.CreationTimestamp.Time},
		Rules:     make([]Rule, 0, n),
	}
}

// rulePath names a field of spec.egress[rule], or of its ports[port] when
// port is not negative. The path is built only for a report, so that
// checking a large valid policy builds no strings.
type rulePath struct{ rule, port int }

// field returns the path of field f ("" for the rule or port itself).
func (r rulePath) field(f string) string {
	s := "spec.egress[" + strconv.Itoa(r.rule) + "]"
	if r.port >= 0 {
		s += ".ports[" + strconv.Itoa(r.port) + "]"
	}
	if f != "" {
		s += "." + f
	}
	return s
}

func ruleAction(p *problems, at rulePath, t RuleType) Action {
	switch t {
	case RuleAllow:
		return Allow
	case RuleDeny:
		return Deny
	case "":
		p.add(at.field("type"), "missing (want Allow or Deny)")
	default:
		p.add(at.field("type"), "%q: want Allow or Deny", t)
	}
	return 0
}

// destination checks the destination fields (the "to") of the rule at at;
// withNodes says whether the API has nodeSelector.
func destination(p *problems, at rulePath, cidr, dnsName string, sel *metav1.LabelSelector, withNodes bool) Destination {
	var given [3]string // on the stack: a valid rule allocates nothing here
	set := given[:0]
	if cidr != "" {
		set = append(set, "cidrSelector")
	}
	if dnsName != "" {
		set = append(set, "dnsName")
	}
	if sel != nil {
		set = append(set, "nodeSelector")
	}
	switch len(set) {
	case 0:
		want := "cidrSelector or dnsName"
		if withNodes {
			want = "cidrSelector, dnsName or nodeSelector"
		}
		p.add(at.field("to"), "no destination (want one of %s)", want)
		return Destination{}
	case 1:
	default:
		p.add(at.field("to"), "%s destinations (%s)", count(len(set)), joinAnd(set))
		return Destination{}
	}
	var d Destination
	switch {
	case cidr != "":
		pfx, err := ParseCIDR(cidr)
		if err != nil {
			p.add(at.field("to.cidrSelector"), "%v", err)
		}
		d.CIDR = pfx
	case dnsName != "":
		name, err := ParseDNSName(dnsName)
		switch {
		case err != nil:
			p.add(at.field("to.dnsName"), "%v", err)
		case !withNodes && strings.HasPrefix(name, "*."):
			p.add(at.field("to.dnsName"), "%q: a wildcard needs an EgressFirewall", dnsName)
		}
		d.DNSName = name
	default:
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			p.add(at.field("to.nodeSelector"), "%v", err)
			return Destination{}
		}
		d.NodeSelector = s
	}
	return d
}

// ParseCIDR reads a cidrSelector: an IPv4 or IPv6 prefix. Host bits are
// cleared ("10.1.2.3/8" is 10.0.0.0/8), as both anchors' parsers did. A
// bare address, an IPv4-mapped IPv6 prefix (which no IPv4 packet
// matches) and a zone are errors.
func ParseCIDR(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		if _, err := netip.ParseAddr(s); err == nil {
			return netip.Prefix{}, fmt.Errorf("%q: an address, not a CIDR (add /32 or /128)", s)
		}
	}
	pfx, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q: invalid CIDR", s)
	}
	if pfx.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("%q: an IPv4-mapped IPv6 prefix (write the IPv4 CIDR)", s)
	}
	return pfx.Masked(), nil
}

func count(n int) string {
	switch n {
	case 2:
		return "two"
	case 3:
		return "three"
	}
	return fmt.Sprint(n)
}

// joinAnd renders "a and b", "a, b and c".
func joinAnd(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}
