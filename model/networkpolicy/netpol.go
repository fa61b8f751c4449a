// Package networkpolicy is nodeflow's model of Kubernetes NetworkPolicy
// (networking.k8s.io/v1): policies compiled from the API objects, checked
// with an error that names the object and field, and the semantics the
// datapath must implement, as one function (Verdict) that says whether a
// connection is allowed.
//
// The flow builders compile the same model into br0's flows; Verdict is
// the truth table their tests hold the flows to. The rules it implements:
//
//   - A pod is isolated for ingress (egress) when a policy of its namespace
//     selects it and has the Ingress (Egress) policy type. policyTypes
//     defaults to Ingress, plus Egress when the policy has egress rules.
//   - An isolated pod admits a connection that some rule of some policy
//     selecting it allows: the union of every such policy. A pod that is
//     not isolated admits everything.
//   - A rule with no peers allows every peer; with no ports, every port.
//     A peer is a podSelector (pods of the policy's namespace), a
//     namespaceSelector (every pod of the namespaces it selects), both
//     (those pods of those namespaces), or an ipBlock (the CIDR, less its
//     excepts; matched on the peer's address, pod or not).
//   - A port is a number or a name (resolved on the destination pod's
//     container ports: a name the pod does not have matches nothing), with
//     an optional endPort range; the protocol defaults to TCP.
//   - A connection is allowed when the source's egress and the
//     destination's ingress both allow it. Replies of allowed connections
//     are always allowed (the datapath is stateful).
//   - Host-network pods are never selected (they are the node's), and the
//     node's own host reaches its pods whatever their policies (kubelet
//     probes), as in the other implementations.
package networkpolicy

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	v1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Policy is one compiled NetworkPolicy.
type Policy struct {
	Namespace, Name string
	// Selector selects the pods of Namespace the policy applies to.
	Selector labels.Selector
	// Ingress and Egress say which directions the policy isolates.
	Ingress, Egress bool
	// IngressRules and EgressRules allow, each, some peers on some ports.
	IngressRules, EgressRules []Rule
}

// Rule is one ingress or egress rule.
type Rule struct {
	// Peers are the sources (ingress) or destinations (egress); none
	// means every peer.
	Peers []Peer
	// Ports are the destination ports; none means every port.
	Ports []Port
}

// Peer is one peer of a rule: a selection of pods, or an address block.
type Peer struct {
	// Pods selects pods (nil: every pod) in the namespaces Namespaces
	// selects; Namespaces nil means the policy's own namespace.
	Pods, Namespaces labels.Selector
	// Block, when set, is the peer instead: addresses in CIDR but in none
	// of Except.
	Block *IPBlock
}

// IPBlock is an ipBlock peer.
type IPBlock struct {
	CIDR   netip.Prefix
	Except []netip.Prefix
}

// Contains reports whether a is in the block.
func (b *IPBlock) Contains(a netip.Addr) bool {
	if !b.CIDR.Contains(a) {
		return false
	}
	for _, e := range b.Except {
		if e.Contains(a) {
			return false
		}
	}
	return true
}

// Port is one port of a rule.
type Port struct {
	Protocol v1.Protocol
	// Number is the port, or the first of a range ending at EndPort; 0
	// with an empty Name means every port of the protocol.
	Number, EndPort int32
	// Name is a named port, resolved on the destination pod.
	Name string
}

// Error is a policy the model refuses, naming the object and the field.
type Error struct {
	Namespace, Name, Field string
	Err                    error
}

func (e *Error) Error() string {
	return fmt.Sprintf("NetworkPolicy %s/%s: %s: %v", e.Namespace, e.Name, e.Field, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// ErrEndPort is an endPort without a numeric port, or below it.
var ErrEndPort = errors.New("endPort needs a numeric port no greater than it")

// Compile checks np and returns its model. The API server validates most
// of what it checks; a policy from elsewhere (a test, a fuzzer, an older
// server) gets the same scrutiny.
func Compile(np *networkingv1.NetworkPolicy) (*Policy, error) {
	bad := func(field string, err error) error {
		return &Error{Namespace: np.Namespace, Name: np.Name, Field: field, Err: err}
	}
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		return nil, bad("spec.podSelector", err)
	}
	p := &Policy{Namespace: np.Namespace, Name: np.Name, Selector: sel}
	if len(np.Spec.PolicyTypes) == 0 {
		p.Ingress, p.Egress = true, len(np.Spec.Egress) > 0
	}
	for i, t := range np.Spec.PolicyTypes {
		switch t {
		case networkingv1.PolicyTypeIngress:
			p.Ingress = true
		case networkingv1.PolicyTypeEgress:
			p.Egress = true
		default:
			return nil, bad(fmt.Sprintf("spec.policyTypes[%d]", i), fmt.Errorf("%q is neither Ingress nor Egress", t))
		}
	}
	for i, r := range np.Spec.Ingress {
		f := fmt.Sprintf("spec.ingress[%d]", i)
		rule, err := compileRule(r.From, r.Ports, f, "from", bad)
		if err != nil {
			return nil, err
		}
		p.IngressRules = append(p.IngressRules, rule)
	}
	for i, r := range np.Spec.Egress {
		f := fmt.Sprintf("spec.egress[%d]", i)
		rule, err := compileRule(r.To, r.Ports, f, "to", bad)
		if err != nil {
			return nil, err
		}
		p.EgressRules = append(p.EgressRules, rule)
	}
	return p, nil
}

func compileRule(peers []networkingv1.NetworkPolicyPeer, ports []networkingv1.NetworkPolicyPort, f, peerField string, bad func(string, error) error) (Rule, error) {
	var rule Rule
	for j, peer := range peers {
		pf := fmt.Sprintf("%s.%s[%d]", f, peerField, j)
		var out Peer
		switch {
		case peer.IPBlock != nil:
			if peer.PodSelector != nil || peer.NamespaceSelector != nil {
				return Rule{}, bad(pf, errors.New("ipBlock with a pod or namespace selector"))
			}
			cidr, err := netip.ParsePrefix(peer.IPBlock.CIDR)
			if err != nil {
				return Rule{}, bad(pf+".ipBlock.cidr", err)
			}
			b := &IPBlock{CIDR: cidr.Masked()}
			for k, e := range peer.IPBlock.Except {
				ex, err := netip.ParsePrefix(e)
				if err != nil {
					return Rule{}, bad(fmt.Sprintf("%s.ipBlock.except[%d]", pf, k), err)
				}
				b.Except = append(b.Except, ex.Masked())
			}
			out.Block = b
		case peer.PodSelector == nil && peer.NamespaceSelector == nil:
			return Rule{}, bad(pf, errors.New("a peer needs a podSelector, a namespaceSelector or an ipBlock"))
		default:
			if peer.PodSelector != nil {
				s, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
				if err != nil {
					return Rule{}, bad(pf+".podSelector", err)
				}
				out.Pods = s
			}
			if peer.NamespaceSelector != nil {
				s, err := metav1.LabelSelectorAsSelector(peer.NamespaceSelector)
				if err != nil {
					return Rule{}, bad(pf+".namespaceSelector", err)
				}
				out.Namespaces = s
			}
		}
		rule.Peers = append(rule.Peers, out)
	}
	for j, port := range ports {
		pf := fmt.Sprintf("%s.ports[%d]", f, j)
		out := Port{Protocol: v1.ProtocolTCP}
		if port.Protocol != nil {
			out.Protocol = *port.Protocol
		}
		switch out.Protocol {
		case v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP:
		default:
			return Rule{}, bad(pf+".protocol", fmt.Errorf("%q is not TCP, UDP or SCTP", out.Protocol))
		}
		if port.Port != nil {
			if port.Port.Type == intstr.String {
				out.Name = port.Port.StrVal
			} else {
				out.Number = port.Port.IntVal
				if out.Number < 1 || out.Number > 65535 {
					return Rule{}, bad(pf+".port", fmt.Errorf("%d is not a port (1-65535)", out.Number))
				}
			}
		}
		if port.EndPort != nil {
			if out.Number == 0 || *port.EndPort < out.Number || *port.EndPort > 65535 {
				return Rule{}, bad(pf+".endPort", fmt.Errorf("%w (port %s, endPort %d)", ErrEndPort, portString(out), *port.EndPort))
			}
			out.EndPort = *port.EndPort
		}
		rule.Ports = append(rule.Ports, out)
	}
	return rule, nil
}

func portString(p Port) string {
	if p.Name != "" {
		return strconv.Quote(p.Name)
	}
	return strconv.Itoa(int(p.Number))
}
