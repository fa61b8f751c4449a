package conntrack

import (
	"fmt"
	"slices"
)

// Zone is a conntrack zone number (NXM_NX_CT_ZONE, 16 bits).
type Zone uint16

// Bridge roles that own zones. The agent may give the bridges other names;
// these are the roles, spelled with the default names.
const (
	BridgePod     = "br0"
	BridgeGateway = "breth0"
)

// Zones of breth0, the gateway bridge. The numbers are the seed's
// (ovn-kubernetes's shared gateway bridge), so that `ovs-ofctl dump-flows
// breth0` reads the same as there.
const (
	// ZoneGateway tracks every connection between the node (its host or
	// br0) and the uplink; ct_mark 0x1 marks connections from br0 and 0x2
	// connections from the host, so replies from the uplink go back where
	// they came from.
	ZoneGateway Zone = 64000
	// ZoneHostMasquerade SNATs host-to-service traffic to the host
	// masquerade address (169.254.169.2), and DNATs the hairpin back to the
	// node IP.
	ZoneHostMasquerade Zone = 64001
	// ZoneRouterMasquerade SNATs hairpinned service traffic to the router
	// masquerade address (169.254.169.1) before it reaches a host endpoint
	// on this node, so the host sees two unrelated connections.
	ZoneRouterMasquerade Zone = 64002
)

// Zones of br0, the pod bridge.
const (
	// ZoneService restores and commits service DNAT (VIP:port to
	// endpoint). Every IP packet on br0 passes through it once.
	ZoneService Zone = 65000
	// ZoneSNAT holds the SNAT that br0 applies after a DNAT (to the node IP
	// for host endpoints, to the gateway address for hairpin and for
	// traffic that must return through this node) and the SNAT of pod
	// egress to the node IP. br0 looks it up only for packets addressed to
	// one of its SNAT addresses, which keeps paths inside the recirculation
	// budget.
	ZoneSNAT Zone = 65001
)

// GatewayReserved is the range of zones reserved for breth0: the seed uses
// 64000-64002, later ovn-kubernetes versions add 64003 (host NodePort) and
// 64004 (reassembly). No br0 zone may fall inside it.
var GatewayReserved = ZoneRange{First: 64000, Last: 64009}

// ZoneRange is an inclusive range of zones.
type ZoneRange struct {
	First, Last Zone
}

// Contains reports whether z is in r.
func (r ZoneRange) Contains(z Zone) bool { return z >= r.First && z <= r.Last }

// String renders the range as "64000-64009".
func (r ZoneRange) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// ZoneInfo describes one declared zone.
type ZoneInfo struct {
	Zone   Zone
	Name   string // the Go constant's name without the "Zone" prefix
	Bridge string // BridgePod or BridgeGateway
	Doc    string
}

// zones lists every zone nodeflow uses, in numeric order.
var zones = []ZoneInfo{
	{ZoneGateway, "Gateway", BridgeGateway, "connections between the node and the uplink; ct_mark 0x1 from br0, 0x2 from the host"},
	{ZoneHostMasquerade, "HostMasquerade", BridgeGateway, "host-to-service SNAT to the host masquerade address; hairpin DNAT back to the node IP"},
	{ZoneRouterMasquerade, "RouterMasquerade", BridgeGateway, "hairpin SNAT to the router masquerade address before a host endpoint on this node"},
	{ZoneService, "Service", BridgePod, "service DNAT: restored for every IP packet, committed by the endpoint DNAT table"},
	{ZoneSNAT, "SNAT", BridgePod, "SNAT after DNAT (node IP, gateway address) and pod egress SNAT; looked up only for packets to a SNAT address"},
}

// Zones returns every declared zone, in numeric order. The caller may
// modify the returned slice.
func Zones() []ZoneInfo { return slices.Clone(zones) }

// Lookup returns the declaration of z.
func Lookup(z Zone) (ZoneInfo, bool) {
	for _, zi := range zones {
		if zi.Zone == z {
			return zi, true
		}
	}
	return ZoneInfo{}, false
}

// Check verifies the zone plan: zones are unique, non-zero (zone 0 is the
// datapath's default zone, shared with anything that does not name one),
// in numeric order, and br0 zones stay out of GatewayReserved while breth0
// zones stay inside it.
func Check() error { return checkZones(zones) }

func checkZones(zs []ZoneInfo) error {
	seen := map[Zone]string{}
	for i, z := range zs {
		if z.Zone == 0 {
			return fmt.Errorf("conntrack: zone %s: zone 0 is the datapath's default zone", z.Name)
		}
		if prev, dup := seen[z.Zone]; dup {
			return fmt.Errorf("conntrack: zone %d declared twice (%s and %s)", z.Zone, prev, z.Name)
		}
		seen[z.Zone] = z.Name
		if i > 0 && zs[i-1].Zone > z.Zone {
			return fmt.Errorf("conntrack: zone %s (%d) is out of numeric order", z.Name, z.Zone)
		}
		switch z.Bridge {
		case BridgePod:
			if GatewayReserved.Contains(z.Zone) {
				return fmt.Errorf("conntrack: br0 zone %s (%d) is inside breth0's reserved range %s", z.Name, z.Zone, GatewayReserved)
			}
		case BridgeGateway:
			if !GatewayReserved.Contains(z.Zone) {
				return fmt.Errorf("conntrack: breth0 zone %s (%d) is outside breth0's reserved range %s", z.Name, z.Zone, GatewayReserved)
			}
		default:
			return fmt.Errorf("conntrack: zone %s (%d): unknown bridge %q", z.Name, z.Zone, z.Bridge)
		}
	}
	return nil
}
