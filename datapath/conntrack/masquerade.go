package conntrack

import (
	"fmt"
	"net"
	"net/netip"
)

// Default masquerade subnets, as in the seed.
var (
	DefaultMasqueradeV4 = netip.MustParsePrefix("169.254.169.0/29")
	DefaultMasqueradeV6 = netip.MustParsePrefix("fd69::/125")
)

// Masquerade is the address plan of one IP family's masquerade subnet. The
// addresses sit at fixed offsets from the subnet's base address:
//
//	+1  Router    br0's source address toward a host endpoint on this node
//	              (breth0 zone 64002); the seed's "OVN masquerade IP"
//	+2  Host      the host's source address for host-to-service traffic
//	              (breth0 zone 64001); configured on breth0, and the
//	              address a group bucket uses for a host endpoint that is
//	              this node's IP
//	+3  ETPLocal  reserved for externalTrafficPolicy=Local hairpin
//	+4  NextHop   the dummy next hop of the host's service route; it
//	              answers no ARP, so the host holds a permanent neighbour
//	              entry for it
type Masquerade struct {
	Subnet   netip.Prefix
	Router   netip.Addr
	Host     netip.Addr
	ETPLocal netip.Addr
	NextHop  netip.Addr
}

// NewMasquerade computes the plan for subnet, which must hold at least
// eight addresses (a /29 or shorter for IPv4, /125 or shorter for IPv6).
// Bits set below the prefix length are an error, not silently cleared.
func NewMasquerade(subnet netip.Prefix) (Masquerade, error) {
	if !subnet.IsValid() {
		return Masquerade{}, fmt.Errorf("conntrack: masquerade subnet: invalid prefix")
	}
	if subnet.Masked() != subnet {
		return Masquerade{}, fmt.Errorf("conntrack: masquerade subnet %s: host bits set (did you mean %s?)", subnet, subnet.Masked())
	}
	if subnet.Addr().Is4In6() {
		return Masquerade{}, fmt.Errorf("conntrack: masquerade subnet %s: IPv4-mapped IPv6 is not allowed", subnet)
	}
	if subnet.Addr().BitLen()-subnet.Bits() < 3 {
		return Masquerade{}, fmt.Errorf("conntrack: masquerade subnet %s: needs at least 8 addresses (/%d or shorter)", subnet, subnet.Addr().BitLen()-3)
	}
	base := subnet.Addr()
	at := func(n int) netip.Addr {
		a := base
		for i := 0; i < n; i++ {
			a = a.Next()
		}
		return a
	}
	return Masquerade{Subnet: subnet, Router: at(1), Host: at(2), ETPLocal: at(3), NextHop: at(4)}, nil
}

// MustMasquerade is NewMasquerade for constants known to be valid; it panics
// on error.
func MustMasquerade(subnet netip.Prefix) Masquerade {
	m, err := NewMasquerade(subnet)
	if err != nil {
		panic(err)
	}
	return m
}

// Is6 reports whether the plan is for IPv6.
func (m Masquerade) Is6() bool { return m.Subnet.Addr().Is6() }

// HostPrefix returns the address to configure on breth0: the host address
// with the subnet's length (169.254.169.2/29).
func (m Masquerade) HostPrefix() netip.Prefix {
	return netip.PrefixFrom(m.Host, m.Subnet.Bits())
}

// MAC returns the MAC address derived from an IP address the way the seed
// derives it: 0a:58 followed by the address's last four bytes
// (169.254.169.4 gives 0a:58:a9:fe:a9:04). The host's permanent neighbour
// entries for the router and next-hop addresses use it.
func MAC(a netip.Addr) net.HardwareAddr {
	b := a.As16()
	return net.HardwareAddr{0x0a, 0x58, b[12], b[13], b[14], b[15]}
}

// Plan holds the masquerade plans of both families. A single-stack node
// leaves the other family's Subnet invalid (the zero Masquerade).
type Plan struct {
	V4, V6 Masquerade
}

// DefaultPlan returns the plan for the default subnets.
func DefaultPlan() Plan {
	return Plan{V4: MustMasquerade(DefaultMasqueradeV4), V6: MustMasquerade(DefaultMasqueradeV6)}
}

// NewPlan computes both families' plans. Either prefix may be the zero
// value for a single-stack node, but not both; v4 must be IPv4 and v6 IPv6.
func NewPlan(v4, v6 netip.Prefix) (Plan, error) {
	var p Plan
	if !v4.IsValid() && !v6.IsValid() {
		return p, fmt.Errorf("conntrack: masquerade plan: no subnet given")
	}
	if v4.IsValid() {
		if !v4.Addr().Is4() {
			return p, fmt.Errorf("conntrack: masquerade plan: IPv4 subnet %s is not IPv4", v4)
		}
		m, err := NewMasquerade(v4)
		if err != nil {
			return p, err
		}
		p.V4 = m
	}
	if v6.IsValid() {
		if !v6.Addr().Is6() || v6.Addr().Is4In6() {
			return p, fmt.Errorf("conntrack: masquerade plan: IPv6 subnet %s is not IPv6", v6)
		}
		m, err := NewMasquerade(v6)
		if err != nil {
			return p, err
		}
		p.V6 = m
	}
	return p, nil
}

// For returns the plan of a's family, and false when that family has none.
func (p Plan) For(a netip.Addr) (Masquerade, bool) {
	m := p.V4
	if a.Is6() && !a.Is4In6() {
		m = p.V6
	}
	return m, m.Subnet.IsValid()
}
