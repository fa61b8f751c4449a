package service

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"k8s.io/apimachinery/pkg/types"
)

// Errors wrapped by InputError for endpoint addresses that cannot be right.
// The API server refuses some of them in an EndpointSlice (unspecified,
// loopback, link-local unicast, 224.0.0.0/24 and ff02::/16) but accepts
// the rest: other multicast groups, 255.255.255.255, a directed broadcast
// address, a ClusterIP. Programmed into a group, such an endpoint takes
// its share of the connections and they hang.
var (
	// ErrEndpointAddress: no endpoint can have this address (not unicast,
	// host-scoped, or a subnet's broadcast address).
	ErrEndpointAddress = errors.New("address cannot be an endpoint")
	// ErrServiceAddress: the address is a service's (a ClusterIP, or in
	// the service CIDR), never a backend's.
	ErrServiceAddress = errors.New("endpoint is a service address")
)

var limitedBroadcast = netip.AddrFrom4([4]byte{255, 255, 255, 255})

// specialAddress returns why a can be no endpoint's address in any
// cluster, or "" when it can be one.
func specialAddress(a netip.Addr) string {
	switch {
	case a.Zone() != "":
		return "an address with a zone"
	case a.IsUnspecified():
		return "the unspecified address"
	case a.IsLoopback():
		return "a loopback address"
	case a == limitedBroadcast:
		return "the limited broadcast address"
	case a.IsMulticast():
		return "a multicast address"
	case a.IsLinkLocalUnicast():
		return "a link-local address"
	}
	return ""
}

// EndpointCheck refuses the endpoint addresses that cannot be right in
// this cluster, as far as this node knows it. The zero value refuses only
// the addresses no cluster can use (see Check).
type EndpointCheck struct {
	// ServiceCIDRs are the cluster's service networks: ClusterIPs are
	// allocated from them, and no endpoint is in them.
	ServiceCIDRs []netip.Prefix
	// Subnets are networks whose IPv4 directed broadcast address (the
	// last address of a prefix up to /30) is no endpoint's: this node's
	// pod subnets, the cluster networks, the node's own network. IPv6
	// prefixes are ignored (IPv6 has no broadcast).
	Subnets []netip.Prefix
	// NodeSubnets are every Node's pod subnets (from the Node objects):
	// their network address, and an IPv4 subnet's broadcast address, are
	// no pod's.
	NodeSubnets []NodeSubnet
	// ClusterIP returns the Service holding a as a ClusterIP, if any: it
	// catches ClusterIPs outside ServiceCIDRs (a ServiceCIDR object that
	// the node's configuration does not list). Nil checks none.
	ClusterIP func(a netip.Addr) (types.NamespacedName, bool)
}

// NodeSubnet is a pod subnet of a Node.
type NodeSubnet struct {
	Node   string
	Prefix netip.Prefix
}

// Same reports whether c and o refuse the same addresses (their ClusterIP
// lookups are the same tracker's).
func (c *EndpointCheck) Same(o *EndpointCheck) bool {
	return slices.Equal(c.ServiceCIDRs, o.ServiceCIDRs) && slices.Equal(c.Subnets, o.Subnets) && slices.Equal(c.NodeSubnets, o.NodeSubnets)
}

// Check returns nil when a may be an endpoint's address, else why not, as
// an error wrapping ErrEndpointAddress or ErrServiceAddress and naming a.
// Refused are, in any cluster: an address with a zone, the unspecified
// addresses, loopback, the limited broadcast address 255.255.255.255,
// multicast (224.0.0.0/4, ff00::/8), link-local unicast (169.254.0.0/16,
// fe80::/10); and in this one: a Service's ClusterIP, any address in the
// service CIDRs, the directed broadcast address of a known subnet, the
// network and broadcast addresses of every Node's pod subnets.
func (c *EndpointCheck) Check(a netip.Addr) error {
	if why := specialAddress(a); why != "" {
		return fmt.Errorf("%w: %s is %s", ErrEndpointAddress, a, why)
	}
	if c.ClusterIP != nil {
		if svc, ok := c.ClusterIP(a); ok {
			return fmt.Errorf("%w: %s is the ClusterIP of service %s", ErrServiceAddress, a, svc)
		}
	}
	for _, p := range c.ServiceCIDRs {
		if p.Contains(a) {
			return fmt.Errorf("%w: %s is in the service CIDR %s", ErrServiceAddress, a, p)
		}
	}
	if a.Is4() {
		for _, p := range c.Subnets {
			if b, ok := broadcast(p); ok && b == a {
				return fmt.Errorf("%w: %s is the broadcast address of %s", ErrEndpointAddress, a, p.Masked())
			}
		}
	}
	for _, s := range c.NodeSubnets {
		if !s.Prefix.Contains(a) || s.Prefix.Bits() >= a.BitLen()-1 {
			continue // a /31 or /32 (/127, /128) has neither
		}
		if s.Prefix.Masked().Addr() == a {
			return fmt.Errorf("%w: %s is the network address of node %s's pod subnet %s", ErrEndpointAddress, a, s.Node, s.Prefix)
		}
		if b, ok := broadcast(s.Prefix); ok && b == a {
			return fmt.Errorf("%w: %s is the broadcast address of node %s's pod subnet %s", ErrEndpointAddress, a, s.Node, s.Prefix)
		}
	}
	return nil
}

// broadcast returns the directed broadcast address of an IPv4 prefix of
// at most 30 bits (a /31 or /32 has none, RFC 3021).
func broadcast(p netip.Prefix) (netip.Addr, bool) {
	if !p.IsValid() || !p.Addr().Is4() || p.Bits() > 30 {
		return netip.Addr{}, false
	}
	b := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	b[0] |= byte(host >> 24)
	b[1] |= byte(host >> 16)
	b[2] |= byte(host >> 8)
	b[3] |= byte(host)
	return netip.AddrFrom4(b), true
}

// Refused is an endpoint address that an EndpointCheck refused, and why.
type Refused struct {
	IP  netip.Addr
	Err error
}

// Filter returns eps without the endpoints whose address c refuses, and
// each refused address once (in eps's order). eps is not modified; when
// nothing is refused, it is returned as it is.
func (c *EndpointCheck) Filter(eps []Endpoint) ([]Endpoint, []Refused) {
	var out []Endpoint
	var refused []Refused
	for i, e := range eps {
		err := c.Check(e.IP)
		if err == nil {
			if out != nil {
				out = append(out, e)
			}
			continue
		}
		if out == nil {
			out = append(make([]Endpoint, 0, len(eps)-1), eps[:i]...)
		}
		if !slices.ContainsFunc(refused, func(r Refused) bool { return r.IP == e.IP }) {
			refused = append(refused, Refused{IP: e.IP, Err: err})
		}
	}
	if out == nil {
		return eps, nil
	}
	return out, refused
}
