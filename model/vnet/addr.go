package vnet

import (
	"iter"
	"math"
	"net/netip"
)

// AddressRange is the addresses of a Subnet's prefix that the IPAM
// controller assigns, First to Last:
//
//	IPv4 /0../30   every address but the first (the network) and the last (broadcast)
//	IPv4 /31       both addresses (RFC 3021: a point-to-point link has no broadcast)
//	IPv4 /32       the one address
//	IPv6 /0../126  every address but the first (the Subnet-Router anycast, RFC 4291)
//	IPv6 /127      both addresses (RFC 6164)
//	IPv6 /128      the one address
//
// No gateway address is reserved: a virtual network is not routed
// anywhere. To keep an address out of the IPAM controller's hands, create
// an IPLock for it without an owner.
type AddressRange struct {
	Prefix      netip.Prefix
	First, Last netip.Addr
}

// RangeOf returns the assignable addresses of p (masked first).
func RangeOf(p netip.Prefix) AddressRange {
	p = p.Masked()
	first := p.Addr()
	last := lastAddr(p)
	host := first.BitLen() - p.Bits()
	if host >= 2 {
		// Skip the network address; in IPv4 also the broadcast address.
		first = first.Next()
		if first.Is4() {
			last = last.Prev()
		}
	}
	return AddressRange{Prefix: p, First: first, Last: last}
}

// lastAddr is the highest address of p: p's address with every host bit
// set.
func lastAddr(p netip.Prefix) netip.Addr {
	host := p.Addr().BitLen() - p.Bits()
	if p.Addr().Is4() {
		a := p.Addr().As4()
		v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
		if host == 32 {
			v = math.MaxUint32
		} else {
			v |= 1<<host - 1
		}
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	a := p.Addr().As16()
	for i := 15; i >= 0 && host > 0; i-- {
		n := min(host, 8)
		a[i] |= byte(1<<n - 1)
		host -= n
	}
	return netip.AddrFrom16(a)
}

// Contains reports whether a is one of the range's addresses.
func (r AddressRange) Contains(a netip.Addr) bool {
	a = a.WithZone("")
	return r.First.IsValid() && a.BitLen() == r.First.BitLen() && a.Compare(r.First) >= 0 && a.Compare(r.Last) <= 0
}

// Size returns the number of addresses in the range, or math.MaxUint64
// when there are more.
func (r AddressRange) Size() uint64 {
	if !r.First.IsValid() {
		return 0
	}
	host := r.First.BitLen() - r.Prefix.Bits()
	if host >= 64 {
		return math.MaxUint64
	}
	n := uint64(1) << host
	switch {
	case host < 2:
		return n
	case r.First.Is4():
		return n - 2
	}
	return n - 1
}

// Next returns the address after a in the range, wrapping from Last to
// First. a must be in the range.
func (r AddressRange) Next(a netip.Addr) netip.Addr {
	if a == r.Last {
		return r.First
	}
	return a.Next()
}

// All yields the range's addresses in order, First to Last.
func (r AddressRange) All() iter.Seq[netip.Addr] {
	return func(yield func(netip.Addr) bool) {
		if !r.First.IsValid() {
			return
		}
		for a := r.First; ; a = a.Next() {
			if !yield(a) || a == r.Last {
				return
			}
		}
	}
}
