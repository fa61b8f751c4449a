// Package gatewayflows builds breth0's default flows: the shared gateway bridge's
// masquerade, commit and return flows of the host-to-services design, for
// IPv4 and IPv6, with this node's addresses and port numbers.
//
// The builders are pure: a Config in, []openflow.Flow out. They set no
// cookies; the reconciler stamps each flow with its owner's cookie.
package gatewayflows

import (
	"fmt"
	"net"
	"net/netip"

	"nodeflow/datapath/conntrack"
	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
)

// Owner is the reconciler owner of breth0's default flows.
const Owner = "gateway/defaults"

// PriorityUnderlay is the priority of the flows that let the VXLAN underlay
// between this node's IP and the uplink pass without conntrack, above the
// masquerade flows (they cannot overlap: the masquerade flows match the
// service CIDR and the masquerade subnet, the underlay matches UDP 4789 to
// or from the node IP).
const PriorityUnderlay plan.Priority = 600

// Config is what breth0's default flows depend on.
type Config struct {
	// UplinkPort and PatchPort are the ofports of the uplink (eth0) and of
	// the patch port to br0.
	UplinkPort, PatchPort uint32
	// NodeIPs are the node's addresses on breth0: at most one per family.
	NodeIPs []netip.Addr
	// SecondaryIPs are further host addresses a host-network endpoint may
	// use; hairpinned traffic to them is committed without a DNAT. Node
	// IPs, masquerade addresses and repeats among them are skipped.
	SecondaryIPs []netip.Addr
	// ServiceCIDRs are the cluster's service networks, one per family.
	ServiceCIDRs []netip.Prefix
	// Masquerade holds the masquerade subnets (169.254.169.0/29, fd69::/125).
	Masquerade conntrack.Plan
	// RouterMAC is br0's router MAC: the destination of traffic sent to br0.
	RouterMAC net.HardwareAddr
	// HostMAC is breth0's MAC (the LOCAL port's).
	HostMAC net.HardwareAddr
	// NoUnderlay leaves out the VXLAN underlay pass-through flows.
	NoUnderlay bool
}

// family selects the match fields and protocol of one IP version.
type family struct {
	v6       bool
	ethType  uint16
	src, dst func(netip.Addr) openflow.Field
	srcNet   func(netip.Prefix) openflow.Field
	dstNet   func(netip.Prefix) openflow.Field
	protoUDP uint8
}

var (
	fam4 = family{false, 0x0800, openflow.IPv4Src, openflow.IPv4Dst, openflow.IPv4SrcPrefix, openflow.IPv4DstPrefix, 17}
	fam6 = family{true, 0x86dd, openflow.IPv6Src, openflow.IPv6Dst, openflow.IPv6SrcPrefix, openflow.IPv6DstPrefix, 17}
)

func famOf(a netip.Addr) family {
	if a.Is4() {
		return fam4
	}
	return fam6
}

// Validate reports the first problem of c, naming the field.
func (c Config) Validate() error {
	if c.UplinkPort == 0 || c.PatchPort == 0 {
		return fmt.Errorf("gateway: config: uplink port %d and patch port %d must both be set", c.UplinkPort, c.PatchPort)
	}
	if c.UplinkPort == c.PatchPort {
		return fmt.Errorf("gateway: config: uplink and patch port are both %d", c.UplinkPort)
	}
	if len(c.RouterMAC) != 6 || len(c.HostMAC) != 6 {
		return fmt.Errorf("gateway: config: router MAC %q and host MAC %q must be 6 bytes", c.RouterMAC, c.HostMAC)
	}
	seen := map[bool]bool{}
	for _, ip := range c.NodeIPs {
		if !ip.IsValid() || ip.Is4In6() {
			return fmt.Errorf("gateway: config: node IP %q: not a plain IPv4 or IPv6 address", ip)
		}
		if seen[ip.Is6()] {
			return fmt.Errorf("gateway: config: node IP %s: two node IPs of one family", ip)
		}
		seen[ip.Is6()] = true
		if _, ok := c.Masquerade.For(ip); !ok {
			return fmt.Errorf("gateway: config: node IP %s: no masquerade subnet of its family", ip)
		}
	}
	if len(c.NodeIPs) == 0 {
		return fmt.Errorf("gateway: config: no node IP")
	}
	for _, p := range c.ServiceCIDRs {
		if !p.IsValid() || p.Masked() != p {
			return fmt.Errorf("gateway: config: service CIDR %q: not a valid masked prefix", p)
		}
	}
	for _, ip := range c.SecondaryIPs {
		if !ip.IsValid() || ip.Is4In6() {
			return fmt.Errorf("gateway: config: secondary IP %q: not a plain IPv4 or IPv6 address", ip)
		}
	}
	return nil
}

func apply(acts ...openflow.Action) []openflow.Instruction {
	return []openflow.Instruction{openflow.ApplyActions{Actions: acts}}
}

func flow(table plan.TableID, prio plan.Priority, ins []openflow.Instruction, fields ...openflow.Field) openflow.Flow {
	return openflow.Flow{Table: uint8(table), Priority: uint16(prio), Match: openflow.NewMatch(fields...), Instructions: ins}
}

func ct(commit bool, zone conntrack.Zone, table plan.TableID, acts ...openflow.Action) openflow.CT {
	return openflow.CT{Commit: commit, Zone: uint16(zone), RecircTable: uint8(table), Actions: acts}
}

func ctMark(v uint32) openflow.Action {
	return openflow.SetField{Field: openflow.CtMark(v, 0xffffffff)}
}

var (
	ethDst = openflow.MustParseFieldRef("NXM_OF_ETH_DST[]")
	ethSrc = openflow.MustParseFieldRef("NXM_OF_ETH_SRC[]")
)

// Flows returns breth0's default flows for c (owner Owner), table by table:
//
//	table 0  p600 VXLAN underlay to and from the node IP (unless NoUnderlay)
//	         p500 the masquerade flows, per family
//	         p100 commits toward the uplink in zone 64000, ct_mark 0x1 (br0) / 0x2 (host)
//	         p50  uplink traffic through zone 64000 to table 1
//	table 1  p100 established and related replies by ct_mark; p10 the host's MAC to LOCAL
//	table 2  p100 set br0's router MAC, to the patch port
//	table 3  p100 swap MACs, to LOCAL
//	table 4  p100 hairpin SNAT to the router masquerade address (zone 64002)
//	table 5  p100 hairpin return: undo the host masquerade (zone 64001)
//
// The priority-0 flows of every table come from PipelineFlows.
func Flows(c Config) ([]openflow.Flow, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var out []openflow.Flow
	for _, part := range []func(Config) []openflow.Flow{
		underlayFlows,      // table 0, p600
		masqueradeFlows,    // table 0, p500
		gatewayCommitFlows, // table 0, p100 and p50
		uplinkReturnFlows,  // table 1
		macRewriteFlows,    // tables 2 and 3
		hairpinFlows,       // tables 4 and 5
	} {
		out = append(out, part(c)...)
	}
	return out, nil
}

// underlayFlows returns table 0's passage of the VXLAN underlay to and
// from the node IPs, without conntrack (none with NoUnderlay).
func underlayFlows(c Config) []openflow.Flow {
	if c.NoUnderlay {
		return nil
	}
	local := openflow.InPort(openflow.PortLocal)
	uplink := openflow.InPort(c.UplinkPort)
	var out []openflow.Flow
	for _, ip := range c.NodeIPs {
		f := famOf(ip)
		out = append(out,
			flow(plan.GatewayClassifier, PriorityUnderlay, apply(openflow.OutputPort(openflow.PortLocal)),
				openflow.EthType(f.ethType), uplink, openflow.IPProto(f.protoUDP), f.dst(ip), openflow.UDPDst(plan.VXLANPort)),
			flow(plan.GatewayClassifier, PriorityUnderlay, apply(openflow.OutputPort(c.UplinkPort)),
				openflow.EthType(f.ethType), local, openflow.IPProto(f.protoUDP), f.src(ip), openflow.UDPDst(plan.VXLANPort)),
		)
	}
	return out
}

// masqueradeFlows returns table 0's priority-500 masquerade flows, per
// node IP: the host to services and back, and the hairpins to the host's
// own addresses.
func masqueradeFlows(c Config) []openflow.Flow {
	local := openflow.InPort(openflow.PortLocal)
	patch := openflow.InPort(c.PatchPort)
	var out []openflow.Flow
	for _, ip := range c.NodeIPs {
		f := famOf(ip)
		m, _ := c.Masquerade.For(ip)
		eth := openflow.EthType(f.ethType)
		for _, svc := range c.ServiceCIDRs {
			if svc.Addr().Is6() != f.v6 {
				continue
			}
			out = append(out,
				// Host to service: SNAT to the host masquerade address, on to br0.
				flow(plan.GatewayClassifier, plan.PriorityMasquerade,
					apply(ct(true, conntrack.ZoneHostMasquerade, plan.GatewayToRouter, openflow.NAT{Src: true, MinAddr: m.Host})),
					eth, local, f.dstNet(svc)),
				// Its replies from br0: undo the SNAT, to the host.
				flow(plan.GatewayClassifier, plan.PriorityMasquerade,
					apply(ct(false, conntrack.ZoneHostMasquerade, plan.GatewayToHost, openflow.NAT{})),
					eth, patch, f.srcNet(svc), f.dst(m.Host)),
			)
		}
		out = append(out,
			// Hairpin to a host endpoint on this node: DNAT back to the node IP.
			flow(plan.GatewayClassifier, plan.PriorityMasquerade,
				apply(ct(true, conntrack.ZoneHostMasquerade, plan.GatewayHostHairpin, openflow.NAT{Dst: true, MinAddr: ip})),
				eth, patch, f.src(ip), f.dst(m.Host)),
			// Replies of the hairpin from the host to the router masquerade address.
			flow(plan.GatewayClassifier, plan.PriorityMasquerade,
				apply(ct(false, conntrack.ZoneRouterMasquerade, plan.GatewayHairpinReturn, openflow.NAT{})),
				eth, local, f.dst(m.Router)),
		)
		out = append(out, secondaryHairpinFlows(c, ip, m)...)
	}
	return out
}

// secondaryHairpinFlows returns table 0's hairpins, for node IP ip with
// masquerade addresses m, to the host's secondary addresses of ip's
// family: committed, not DNATed. The node IP has its own hairpin flow,
// and a masquerade address would take the place of one: neither is an
// endpoint's secondary address.
func secondaryHairpinFlows(c Config, ip netip.Addr, m conntrack.Masquerade) []openflow.Flow {
	f := famOf(ip)
	var out []openflow.Flow
	seen := map[netip.Addr]bool{}
	for _, sec := range c.SecondaryIPs {
		if sec.Is6() != f.v6 || seen[sec] || sec == ip || m.Subnet.Contains(sec) {
			continue
		}
		seen[sec] = true
		out = append(out, flow(plan.GatewayClassifier, plan.PriorityMasquerade,
			apply(ct(true, conntrack.ZoneHostMasquerade, plan.GatewayHostHairpin)),
			openflow.EthType(f.ethType), openflow.InPort(c.PatchPort), f.src(ip), f.dst(sec)))
	}
	return out
}

// gatewayCommitFlows returns table 0's commits toward the uplink in the
// gateway zone, marked by origin (br0 or the host), and the uplink's
// traffic into that zone.
func gatewayCommitFlows(c Config) []openflow.Flow {
	var out []openflow.Flow
	for _, f := range families(c) {
		eth := openflow.EthType(f.ethType)
		out = append(out,
			flow(plan.GatewayClassifier, plan.PriorityGatewayCommit,
				apply(ct(true, conntrack.ZoneGateway, plan.TableID(openflow.CTNoRecirc), ctMark(uint32(plan.OriginRouter.Value()))), openflow.OutputPort(c.UplinkPort)),
				eth, openflow.InPort(c.PatchPort)),
			flow(plan.GatewayClassifier, plan.PriorityGatewayCommit,
				apply(ct(true, conntrack.ZoneGateway, plan.TableID(openflow.CTNoRecirc), ctMark(uint32(plan.OriginHost.Value()))), openflow.OutputPort(c.UplinkPort)),
				eth, openflow.InPort(openflow.PortLocal)),
			flow(plan.GatewayClassifier, plan.PriorityUplinkConntrack,
				apply(ct(false, conntrack.ZoneGateway, plan.GatewayUplinkReturn, openflow.NAT{})),
				eth, openflow.InPort(c.UplinkPort)),
		)
	}
	return out
}

// uplinkReturnFlows returns table 1's flows: established and related
// replies by where their connection came from, and the host's MAC to
// LOCAL.
func uplinkReturnFlows(c Config) []openflow.Flow {
	var out []openflow.Flow
	for _, f := range families(c) {
		eth := openflow.EthType(f.ethType)
		for _, st := range []uint32{openflow.CtEst, openflow.CtRel} {
			state := openflow.CtState(st|openflow.CtTrk, st|openflow.CtTrk)
			out = append(out,
				flow(plan.GatewayUplinkReturn, plan.PriorityNormal, apply(openflow.OutputPort(c.PatchPort)),
					eth, state, openflow.CtMark(uint32(plan.OriginRouter.Value()), 0xffffffff)),
				flow(plan.GatewayUplinkReturn, plan.PriorityNormal, apply(openflow.OutputPort(openflow.PortLocal)),
					eth, state, openflow.CtMark(uint32(plan.OriginHost.Value()), 0xffffffff)),
			)
		}
	}
	return append(out, flow(plan.GatewayUplinkReturn, plan.PriorityBridgeMAC, apply(openflow.OutputPort(openflow.PortLocal)),
		openflow.EthDst(c.HostMAC)))
}

// macRewriteFlows returns tables 2 and 3: the MAC rewrites toward br0 and
// toward the host.
func macRewriteFlows(c Config) []openflow.Flow {
	return []openflow.Flow{
		flow(plan.GatewayToRouter, plan.PriorityNormal,
			apply(openflow.SetField{Field: openflow.EthDst(c.RouterMAC)}, openflow.OutputPort(c.PatchPort))),
		flow(plan.GatewayToHost, plan.PriorityNormal,
			apply(openflow.RegMove{Src: ethDst, Dst: ethSrc}, openflow.SetField{Field: openflow.EthDst(c.HostMAC)}, openflow.OutputPort(openflow.PortLocal))),
	}
}

// hairpinFlows returns tables 4 and 5: the hairpin's second masquerade
// and its return.
func hairpinFlows(c Config) []openflow.Flow {
	var out []openflow.Flow
	for _, ip := range c.NodeIPs {
		f := famOf(ip)
		m, _ := c.Masquerade.For(ip)
		eth := openflow.EthType(f.ethType)
		out = append(out,
			flow(plan.GatewayHostHairpin, plan.PriorityNormal,
				apply(ct(true, conntrack.ZoneRouterMasquerade, plan.GatewayToHost, openflow.NAT{Src: true, MinAddr: m.Router})), eth),
			flow(plan.GatewayHairpinReturn, plan.PriorityNormal,
				apply(ct(true, conntrack.ZoneHostMasquerade, plan.GatewayToRouter, openflow.NAT{})), eth),
		)
	}
	return out
}

// families returns the IP families the node has an address in, IPv4 first.
func families(c Config) []family {
	var v4, v6 bool
	for _, ip := range c.NodeIPs {
		if ip.Is4() {
			v4 = true
		} else {
			v6 = true
		}
	}
	var out []family
	if v4 {
		out = append(out, fam4)
	}
	if v6 {
		out = append(out, fam6)
	}
	return out
}

// PipelineOwner returns the reconciler owner of bridge b's priority-0 flows.
func PipelineOwner(b plan.Bridge) string { return "pipeline/" + b.String() }

// PipelineFlows returns the explicit priority-0 flow of every table of
// bridge b, as the plan declares it (drop, goto, return or NORMAL). The
// version table is left out: its single flow is the reconciler's version
// note.
func PipelineFlows(b plan.Bridge) []openflow.Flow {
	var out []openflow.Flow
	for _, t := range plan.Tables(b) {
		if t.ID == plan.VersionTable {
			continue
		}
		var ins []openflow.Instruction
		switch t.Miss {
		case plan.MissGoto:
			ins = []openflow.Instruction{openflow.GotoTable{Table: uint8(t.Next)}}
		case plan.MissNormal:
			ins = apply(openflow.OutputPort(openflow.PortNormal))
		}
		out = append(out, openflow.Flow{Table: uint8(t.ID), Priority: uint16(plan.PriorityMiss), Instructions: ins})
	}
	return out
}
