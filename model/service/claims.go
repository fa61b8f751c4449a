package service

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"k8s.io/apimachinery/pkg/types"
)

// Address ownership. Every address a Service names is a claim on other
// people's traffic: a ClusterIP is allocated by the API server, but
// anyone who may create a Service may write any address into
// spec.externalIPs, and anyone who may write its status any address into
// status.loadBalancer.ingress. Programmed as they are, such addresses
// capture, on every node, the connections meant for another Service, a
// pod, a node (its kubelet) or a host outside the cluster
// (CVE-2020-8554). AddressCheck decides, from the cluster's facts and the
// operator's policy alone, which of them a service port owns; every
// consumer (br0, breth0, the host's own-traffic DNAT) reads that one
// decision (Claims), and every node decides the same.

// ErrAddressRefused is wrapped by the InputError of an external or
// ingress IP that a Service may not claim.
var ErrAddressRefused = errors.New("address refused")

// Why an address is refused: the values of AddressRefusal.Reason, the
// label of the agent's metric of refused addresses.
const (
	// RefusedSpecial: an address no Service may claim in any cluster
	// (unspecified, loopback, link-local, multicast, broadcast).
	RefusedSpecial = "special"
	// RefusedServiceCIDR: in a service CIDR, where the API server
	// allocates ClusterIPs.
	RefusedServiceCIDR = "service-cidr"
	// RefusedClusterIP: another Service's ClusterIP.
	RefusedClusterIP = "cluster-ip"
	// RefusedPodCIDR: in a pod network.
	RefusedPodCIDR = "pod-cidr"
	// RefusedNodeAddress: a Node's address.
	RefusedNodeAddress = "node-address"
	// RefusedMasquerade: in the masquerade ranges.
	RefusedMasquerade = "masquerade"
	// RefusedPolicy: outside the operator's allowed ranges, or inside
	// its rejected ones.
	RefusedPolicy = "policy"
)

// AddressKind is the field an address comes from.
type AddressKind uint8

// The kinds of address a Service claims besides its ClusterIPs.
const (
	// ExternalIP is an address of spec.externalIPs.
	ExternalIP AddressKind = iota
	// IngressIP is an address of status.loadBalancer.ingress.
	IngressIP
)

// Field returns the Service's field that holds addresses of kind k.
func (k AddressKind) Field() string {
	if k == IngressIP {
		return "status.loadBalancer.ingress"
	}
	return "spec.externalIPs"
}

// CIDRPolicy is the operator's policy for one kind of address: an address
// is allowed when it is inside one of Allowed and inside none of Rejected
// (which wins). The zero value allows nothing.
type CIDRPolicy struct {
	Allowed, Rejected []netip.Prefix
}

// check returns why p refuses a, or "" when it allows it.
func (p CIDRPolicy) check(a netip.Addr) string {
	if r := containing(p.Rejected, a); r.IsValid() {
		return fmt.Sprintf("it is in the rejected range %s", r)
	}
	if !containing(p.Allowed, a).IsValid() {
		if len(p.Allowed) == 0 {
			return "the operator allows no range"
		}
		return "it is outside the allowed ranges"
	}
	return ""
}

// containing returns the first prefix of ps that contains a, or the zero
// prefix.
func containing(ps []netip.Prefix, a netip.Addr) netip.Prefix {
	for _, p := range ps {
		if p.Contains(a) {
			return p
		}
	}
	return netip.Prefix{}
}

// ClusterFacts are what the cluster says about its addresses, read from
// the agent's configuration and from the Node objects: the same on every
// node.
type ClusterFacts struct {
	// ServiceCIDRs are the service networks.
	ServiceCIDRs []netip.Prefix
	// PodCIDRs are the pod networks: the cluster CIDRs and every Node's
	// spec.podCIDRs.
	PodCIDRs []netip.Prefix
	// NodeAddrs maps every Node's addresses (status.addresses) to the
	// Node's name.
	NodeAddrs map[netip.Addr]string
	// Masquerade are the masquerade subnets.
	Masquerade []netip.Prefix
}

// Equal reports whether f and o hold the same facts.
func (f *ClusterFacts) Equal(o *ClusterFacts) bool {
	if len(f.NodeAddrs) != len(o.NodeAddrs) {
		return false
	}
	for a, n := range f.NodeAddrs {
		if m, ok := o.NodeAddrs[a]; !ok || m != n {
			return false
		}
	}
	return slices.Equal(f.ServiceCIDRs, o.ServiceCIDRs) && slices.Equal(f.PodCIDRs, o.PodCIDRs) && slices.Equal(f.Masquerade, o.Masquerade)
}

// AddressCheck decides which external and ingress IPs a service port
// owns.
type AddressCheck struct {
	Facts ClusterFacts
	// ExternalIPs and IngressIPs are the operator's policies.
	ExternalIPs, IngressIPs CIDRPolicy
	// ClusterIP returns the Service holding a as a ClusterIP, if any (the
	// ServiceTracker's ClusterIPOwner): it catches ClusterIPs outside the
	// configured service CIDRs. Nil checks none.
	ClusterIP func(a netip.Addr) (types.NamespacedName, bool)
}

// Same reports whether c and o decide alike (their ClusterIP lookups are
// the same tracker's).
func (c *AddressCheck) Same(o *AddressCheck) bool {
	return c.Facts.Equal(&o.Facts) && samePolicy(c.ExternalIPs, o.ExternalIPs) && samePolicy(c.IngressIPs, o.IngressIPs)
}

func samePolicy(x, y CIDRPolicy) bool {
	return slices.Equal(x.Allowed, y.Allowed) && slices.Equal(x.Rejected, y.Rejected)
}

// AddressRefusal is why an address was refused.
type AddressRefusal struct {
	// Reason is one of the Refused* constants.
	Reason string
	// Why says it in words, naming what the address collides with.
	Why string
}

// Check returns why the Service svc may not claim a as an address of kind
// k, or nil when it may. Refused are, in this order: an address no
// Service can own (unspecified, loopback, link-local, multicast, the
// limited broadcast address), one in a service CIDR or another Service's
// ClusterIP (the ClusterIP the API server allocates always wins), one in
// a pod network, a Node's address, one in the masquerade ranges, and
// anything the operator's policy for k does not allow.
func (c *AddressCheck) Check(k AddressKind, svc types.NamespacedName, a netip.Addr) *AddressRefusal {
	refuse := func(reason, format string, args ...any) *AddressRefusal {
		return &AddressRefusal{Reason: reason, Why: fmt.Sprintf(format, args...)}
	}
	if why := specialAddress(a); why != "" {
		return refuse(RefusedSpecial, "it is %s", why)
	}
	if p := containing(c.Facts.ServiceCIDRs, a); p.IsValid() {
		return refuse(RefusedServiceCIDR, "it is in the service CIDR %s, where the API server allocates ClusterIPs", p)
	}
	if c.ClusterIP != nil {
		if owner, ok := c.ClusterIP(a); ok && owner != svc {
			return refuse(RefusedClusterIP, "it is the ClusterIP of service %s", owner)
		}
	}
	if p := containing(c.Facts.PodCIDRs, a); p.IsValid() {
		return refuse(RefusedPodCIDR, "it is in the pod network %s", p)
	}
	if n, ok := c.Facts.NodeAddrs[a]; ok {
		return refuse(RefusedNodeAddress, "it is an address of node %s", n)
	}
	if p := containing(c.Facts.Masquerade, a); p.IsValid() {
		return refuse(RefusedMasquerade, "it is in the masquerade range %s", p)
	}
	pol := c.ExternalIPs
	if k == IngressIP {
		pol = c.IngressIPs
	}
	if why := pol.check(a); why != "" {
		return refuse(RefusedPolicy, "%s (the agent's %s policy)", why, policyName(k))
	}
	return nil
}

func policyName(k AddressKind) string {
	if k == IngressIP {
		return "loadBalancerIPs"
	}
	return "externalIPs"
}

// RefusedAddress is an address a service port named but may not claim.
type RefusedAddress struct {
	Kind AddressKind
	IP   netip.Addr
	AddressRefusal
}

// Error returns the refusal as the InputError reported on the Service.
func (r RefusedAddress) Error(svc types.NamespacedName) *InputError {
	return &InputError{Kind: "Service", Namespace: svc.Namespace, Name: svc.Name, Field: r.Kind.Field(),
		Err: fmt.Errorf("%w: %s is not programmed: %s", ErrAddressRefused, r.IP, r.Why)}
}

// Claims returns p with only the external and ingress IPs it owns, and
// the ones refused. Its own ClusterIP named again as an external or
// ingress IP is left out without a refusal: the port has it already. When
// nothing is left out, p itself is returned; else a copy (p is shared
// with the tracker and never modified).
func (c *AddressCheck) Claims(p *ServicePort) (*ServicePort, []RefusedAddress) {
	var refused []RefusedAddress
	filter := func(k AddressKind, addrs []netip.Addr) []netip.Addr {
		var keep []netip.Addr
		for i, a := range addrs {
			var r *AddressRefusal
			own := slices.Contains(p.ClusterIPs, a)
			if !own {
				r = c.Check(k, p.Name.NamespacedName, a)
			}
			if r == nil && !own {
				if keep != nil {
					keep = append(keep, a)
				}
				continue
			}
			if keep == nil {
				keep = append(make([]netip.Addr, 0, len(addrs)), addrs[:i]...)
			}
			if r != nil {
				refused = append(refused, RefusedAddress{Kind: k, IP: a, AddressRefusal: *r})
			}
		}
		if keep == nil {
			return addrs
		}
		return keep
	}
	ext := filter(ExternalIP, p.ExternalIPs)
	ing := filter(IngressIP, p.LoadBalancerIPs)
	if len(ext) == len(p.ExternalIPs) && len(ing) == len(p.LoadBalancerIPs) {
		return p, nil
	}
	q := *p
	q.ExternalIPs, q.LoadBalancerIPs = ext, ing
	return &q, refused
}
