package egressfirewall

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kind is the kind of an egress firewall API object.
type Kind string

// The two kinds.
const (
	KindEgressFirewall      Kind = "EgressFirewall"
	KindEgressNetworkPolicy Kind = "EgressNetworkPolicy"
)

// The API groups, versions and resources, as the dynamic client and the
// CRDs in deploy/crds name them.
var (
	// EgressFirewallGVR is ovn-kubernetes's EgressFirewall.
	EgressFirewallGVR = schema.GroupVersionResource{Group: "k8s.ovn.org", Version: "v1", Resource: "egressfirewalls"}
	// EgressNetworkPolicyGVR is openshift-sdn's EgressNetworkPolicy.
	EgressNetworkPolicyGVR = schema.GroupVersionResource{Group: "network.openshift.io", Version: "v1", Resource: "egressnetworkpolicies"}
)

// GVK returns the group, version and kind of the kind's objects.
func (k Kind) GVK() schema.GroupVersionKind {
	switch k {
	case KindEgressFirewall:
		return EgressFirewallGVR.GroupVersion().WithKind(string(k))
	case KindEgressNetworkPolicy:
		return EgressNetworkPolicyGVR.GroupVersion().WithKind(string(k))
	}
	return schema.GroupVersionKind{}
}

// Limits on the number of rules in one object.
//
// MaxEgressFirewallRules is the size of the priority band that ranks a
// namespace's rules in table 50 (plan.EgressFirewallRules, checked by the
// flow builder's tests): 10,000, above ovn-kubernetes's 8,000 (its ACL
// priorities run down from 10,000 and stop above the ones it reserves),
// so that every EgressFirewall ovn-kubernetes accepts moves over.
//
// MaxEgressNetworkPolicyRules is openshift-sdn's documented limit, the
// maxItems of the CRD its network operator installs: 1,000. nodeflow
// could rank more, but an EgressNetworkPolicy is kept only so that
// existing objects move over unchanged, and every one that openshift-sdn
// accepted fits; a namespace that needs more should use EgressFirewall.
const (
	MaxEgressFirewallRules      = 10000
	MaxEgressNetworkPolicyRules = 1000
)

// EgressFirewallName is the only name of an EgressFirewall that is
// enforced: one per namespace, as in ovn-kubernetes.
const EgressFirewallName = "default"

// RuleType is Allow or Deny, as both APIs spell it.
type RuleType string

// Rule types.
const (
	RuleAllow RuleType = "Allow"
	RuleDeny  RuleType = "Deny"
)

// EgressFirewall is k8s.ovn.org/v1 EgressFirewall: the Go form of the
// object, as DecodeEgressFirewall reads it from an Unstructured. Its
// values are not checked; Policy checks them.
type EgressFirewall struct {
	metav1.ObjectMeta
	Spec   EgressFirewallSpec
	Status EgressFirewallStatus
}

// EgressFirewallSpec is spec: the ordered rules.
type EgressFirewallSpec struct {
	Egress []EgressFirewallRule
}

// EgressFirewallRule is one of spec.egress[].
type EgressFirewallRule struct {
	Type  RuleType
	To    EgressFirewallDestination
	Ports []EgressFirewallPort
}

// EgressFirewallDestination is spec.egress[].to: exactly one of its
// fields must be set.
type EgressFirewallDestination struct {
	// CIDRSelector is an IPv4 or IPv6 CIDR.
	CIDRSelector string
	// DNSName is a name, or "*." and a name for the names one label
	// below it.
	DNSName string
	// NodeSelector selects nodes whose addresses are the destination.
	NodeSelector *metav1.LabelSelector
}

// EgressFirewallPort is spec.egress[].ports[]: a protocol and an optional
// port (nil: every port of the protocol).
type EgressFirewallPort struct {
	Protocol string
	Port     *int32
}

// EgressFirewallStatus is status: a roll-up and one message per node.
type EgressFirewallStatus struct {
	Status   string
	Messages []string
}

// EgressNetworkPolicy is network.openshift.io/v1 EgressNetworkPolicy, as
// DecodeEgressNetworkPolicy reads it. Its values are not checked; Policy
// checks them.
type EgressNetworkPolicy struct {
	metav1.ObjectMeta
	Spec EgressNetworkPolicySpec
}

// EgressNetworkPolicySpec is spec: the ordered rules.
type EgressNetworkPolicySpec struct {
	Egress []EgressNetworkPolicyRule
}

// EgressNetworkPolicyRule is one of spec.egress[].
type EgressNetworkPolicyRule struct {
	Type RuleType
	To   EgressNetworkPolicyPeer
}

// EgressNetworkPolicyPeer is spec.egress[].to: exactly one of its fields
// must be set.
type EgressNetworkPolicyPeer struct {
	CIDRSelector string
	DNSName      string
}
