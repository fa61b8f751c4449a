package plan

import (
	"net"
	"net/netip"
)

// The node's address plan: the addresses of each pod subnet that br0's
// virtual router and mp0 (the host's port on br0) take, and the next hops
// br0 sends to when it routes a packet out through breth0. The flow
// builders, the host's network setup and the agent all derive them here.

// RouterIP returns the router address of a pod subnet: its first host.
func RouterIP(p netip.Prefix) netip.Addr { return p.Masked().Addr().Next() }

// MgmtIP returns mp0's address in a pod subnet: its second host.
func MgmtIP(p netip.Prefix) netip.Addr { return p.Masked().Addr().Next().Next() }

// NextHop says which MAC to send to for destinations in Prefix when br0
// routes them out through breth0: the default gateway for 0.0.0.0/0, a
// neighbour on the uplink's subnet for its /32.
type NextHop struct {
	Prefix netip.Prefix
	MAC    net.HardwareAddr
}
