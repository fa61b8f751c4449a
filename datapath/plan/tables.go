package plan

import (
	"fmt"
	"slices"
)

// Bridge is the role of a bridge nodeflow owns. The agent may give the
// bridges other names; String spells the roles with the default names.
type Bridge uint8

// The two bridges.
const (
	// Pod is br0: pod ports, vxlan0, mp0 and the patch port to breth0.
	Pod Bridge = 1
	// Gateway is breth0: the uplink, the node IP on LOCAL, the patch port
	// to br0.
	Gateway Bridge = 2
)

// Bridges lists both bridges in a fixed order.
var Bridges = []Bridge{Pod, Gateway}

// String returns the default bridge name, "br0" or "breth0".
func (b Bridge) String() string {
	switch b {
	case Pod:
		return "br0"
	case Gateway:
		return "breth0"
	}
	return fmt.Sprintf("bridge(%d)", uint8(b))
}

// TableID is an OpenFlow table number.
type TableID uint8

// MissKind says what the lowest-priority flow of a table does. Every table
// has one, installed explicitly, so that packets that fall through show up
// in its n_packets.
type MissKind uint8

// Miss kinds.
const (
	// MissDrop: priority 0, no actions.
	MissDrop MissKind = iota + 1
	// MissGoto: priority 0, goto_table to Table.Next.
	MissGoto
	// MissReturn: priority 0, no actions, in a table that is only ever
	// reached by resubmit; the resubmitting flow continues.
	MissReturn
	// MissNormal: priority 0, output:NORMAL (breth0's seed fallbacks).
	MissNormal
)

// String names the kind as docs/pipeline.md spells it.
func (k MissKind) String() string {
	switch k {
	case MissDrop:
		return "drop"
	case MissGoto:
		return "goto"
	case MissReturn:
		return "return"
	case MissNormal:
		return "normal"
	}
	return fmt.Sprintf("miss(%d)", uint8(k))
}

// Table describes one table of one bridge.
type Table struct {
	Bridge Bridge
	ID     TableID
	// Name is the table's name in docs/pipeline.md and in logs.
	Name string
	// Summary is one line on what the table decides.
	Summary string
	// Miss is what the table's priority-0 flow does; Next is the table it
	// goes to for MissGoto.
	Miss MissKind
	Next TableID
	// Features lists the features whose owners may put flows here. The
	// pipeline feature (the miss flows) may use every table.
	Features []Feature
}

// String renders "br0 table 30 (ServiceLB)".
func (t Table) String() string { return fmt.Sprintf("%s table %d (%s)", t.Bridge, t.ID, t.Name) }

// br0 tables. Numbers are spaced so that a later feature can slot in
// between without renumbering; they never change once released.
const (
	PodClassifier      TableID = 0
	PodARP             TableID = 5
	PodPortSecurity    TableID = 10
	PodTunnelIngress   TableID = 15
	PodUnSNAT          TableID = 20
	PodConntrack       TableID = 25
	PodServiceLB       TableID = 30
	PodSessionAffinity TableID = 31
	PodEndpointDNAT    TableID = 35
	PodSNAT            TableID = 40
	PodEgressPolicy    TableID = 45
	PodEgressFirewall  TableID = 50
	// PodEgressFirewallFragments is where the egress firewall's allowed
	// first fragments meet their datagram's later fragments.
	PodEgressFirewallFragments TableID = 55
	PodRouting                 TableID = 60
	PodIngressPolicy           TableID = 65
	PodLocalDelivery           TableID = 70
	PodTunnelEgress            TableID = 80
	PodEgressSNAT              TableID = 90
	PodGatewayOutput           TableID = 95
	// The virtual networks' tables (vnet.go): past every table of the pod
	// network, which never goes to them, as they never go back to it.
	PodVNetPortSecurity TableID = 100
	PodVNetARP          TableID = 105
	PodVNetForward      TableID = 110
	// PodPunt and PodPuntNamespace are reached only by resubmit, from the
	// flows that send packets to the agent (punt.go).
	PodPunt          TableID = 120
	PodPuntNamespace TableID = 121
)

// breth0 tables: the seed's numbers.
const (
	GatewayClassifier    TableID = 0
	GatewayUplinkReturn  TableID = 1
	GatewayToRouter      TableID = 2
	GatewayToHost        TableID = 3
	GatewayHostHairpin   TableID = 4
	GatewayHairpinReturn TableID = 5
)

// VersionTable holds, on both bridges, the single version-note flow that
// the reconciler writes last in every start-up bundle. Nothing resubmits to
// it; its flow also serves as the table's explicit drop.
const VersionTable TableID = 253

var tables = []Table{
	// br0
	{Pod, PodClassifier, "Classifier", "dispatch by in_port: pod ports, vxlan0, the patch port, mp0, virtual-network attachments; ARP to the ARP table",
		MissDrop, 0, []Feature{FeatureNode, FeaturePod, FeatureVNet}},
	{Pod, PodARP, "ARP", "answer ARP for the router address and for pods, and neighbour solicitations for the IPv6 router address; deliver the rest",
		MissDrop, 0, []Feature{FeatureNode, FeaturePod}},
	{Pod, PodPortSecurity, "PortSecurity", "a pod may only send from its own MAC and IPs; load its namespace id",
		MissDrop, 0, []Feature{FeaturePod}},
	{Pod, PodTunnelIngress, "TunnelIngress", "accept VXLAN only from known nodes: a namespace id into the pod pipeline, a virtual network's VNI into its forwarding table",
		MissDrop, 0, []Feature{FeatureNode, FeatureVNet}},
	{Pod, PodUnSNAT, "UnSNAT", "packets to a SNAT address: restore their destination in the SNAT zone",
		MissGoto, PodConntrack, []Feature{FeatureNode}},
	{Pod, PodConntrack, "Conntrack", "every IP packet: restore service DNAT in the service zone",
		MissDrop, 0, []Feature{FeatureNode}},
	{Pod, PodServiceLB, "ServiceLB", "new connections to a service: its select group, or a metered reject packet-in when it has no endpoints",
		MissGoto, PodSNAT, []Feature{FeatureService, FeatureUnidle, FeatureHostPort}},
	{Pod, PodSessionAffinity, "SessionAffinity", "learned client-to-endpoint bindings (resubmit only)",
		MissReturn, 0, []Feature{FeatureService}},
	{Pod, PodEndpointDNAT, "EndpointDNAT", "with session affinity: learn the binding and commit the DNAT to the endpoint chosen (other services' buckets commit it themselves)",
		MissDrop, 0, []Feature{FeatureService}},
	{Pod, PodSNAT, "SNAT", "SNAT after the DNAT (marked host endpoints, remote pods reached from breth0, hairpin): commit it when new, re-apply it to established original-direction packets",
		MissGoto, PodEgressPolicy, []Feature{FeatureNode, FeaturePod, FeatureService}},
	{Pod, PodEgressPolicy, "EgressPolicy", "NetworkPolicy egress of local pods, after the DNAT: established passes, rules by conjunction, isolated pods drop; new connections committed",
		MissGoto, PodEgressFirewall, []Feature{FeatureNetworkPolicy}},
	{Pod, PodEgressFirewall, "EgressFirewall", "cluster and service destinations skip the egress firewall; each namespace's ordered rules",
		MissGoto, PodRouting, []Feature{FeatureNode, FeatureEgressFirewall}},
	{Pod, PodEgressFirewallFragments, "EgressFirewallFragments", "what the egress firewall allows: a fragmented datagram's first fragment meets its later fragments at a ct; the rest goes on",
		MissGoto, PodRouting, []Feature{FeatureEgressFirewall}},
	{Pod, PodRouting, "Routing", "local pod subnet, remote node subnets, the host, and the default route out through breth0",
		MissDrop, 0, []Feature{FeatureNode, FeaturePod}},
	{Pod, PodIngressPolicy, "IngressPolicy", "NetworkPolicy ingress of local pods: established passes, the node's host and hairpin pass, rules by conjunction, isolated pods drop; new connections committed",
		MissGoto, PodLocalDelivery, []Feature{FeatureNetworkPolicy}},
	{Pod, PodLocalDelivery, "LocalDelivery", "rewrite MACs and output to the pod's port or mp0",
		MissDrop, 0, []Feature{FeatureNode, FeaturePod}},
	{Pod, PodTunnelEgress, "TunnelEgress", "set tun_dst and tun_id and output to vxlan0",
		MissDrop, 0, []Feature{FeatureNode}},
	{Pod, PodEgressSNAT, "EgressSNAT", "pod traffic leaving the cluster: SNAT to the node IP",
		MissDrop, 0, []Feature{FeatureNode}},
	{Pod, PodGatewayOutput, "GatewayOutput", "set the next hop's MAC and output to the patch port (IN_PORT when it came from there)",
		MissDrop, 0, []Feature{FeatureNode, FeatureService}},
	{Pod, PodVNetPortSecurity, "VNetPortSecurity", "a virtual-network attachment may only send IPv4 and ARP, or IPv6 and neighbour discovery, from its own MAC and address; load its VNI",
		MissDrop, 0, []Feature{FeatureVNet}},
	{Pod, PodVNetARP, "VNetARP", "answer ARP requests and neighbour solicitations for the addresses of the sender's VNI from the known mappings; drop all others",
		MissDrop, 0, []Feature{FeatureVNet}},
	{Pod, PodVNetForward, "VNetForward", "by VNI and destination (a neighbour solicitation by its target): output to a local attachment, or tunnel to a remote one's node (only what came from a local attachment); drop the rest",
		MissDrop, 0, []Feature{FeatureVNet}},
	{Pod, PodPunt, "Punt", "packet-ins metered per source before their controller action (resubmit only): by in_port, DNS replies by the pod they go to",
		MissReturn, 0, []Feature{FeatureNode, FeaturePod}},
	{Pod, PodPuntNamespace, "PuntNamespace", "a pod's packet-ins metered per namespace after the pod's own meter (resubmit only): one tenant's pods together get one namespace's share",
		MissReturn, 0, []Feature{FeaturePod}},
	{Pod, VersionTable, "Version", "the version note: pipeline version, generation and agent version",
		MissDrop, 0, []Feature{FeatureMeta}},

	// breth0
	{Gateway, GatewayClassifier, "Classifier", "masquerade (priority 500), per-service ingress (110), gateway commits (100), uplink conntrack (50), NORMAL",
		MissNormal, 0, []Feature{FeatureGateway, FeatureServiceGateway, FeatureHostPort}},
	{Gateway, GatewayUplinkReturn, "UplinkReturn", "replies from the uplink by zone-64000 ct_mark: 0x1 to br0, 0x2 to the host",
		MissNormal, 0, []Feature{FeatureGateway}},
	{Gateway, GatewayToRouter, "ToRouter", "set the router MAC and output to the patch port",
		MissDrop, 0, []Feature{FeatureGateway}},
	{Gateway, GatewayToHost, "ToHost", "swap in the host's MAC and output to LOCAL",
		MissDrop, 0, []Feature{FeatureGateway}},
	{Gateway, GatewayHostHairpin, "HostHairpin", "SNAT hairpinned traffic to the router masquerade address (zone 64002)",
		MissDrop, 0, []Feature{FeatureGateway}},
	{Gateway, GatewayHairpinReturn, "HairpinReturn", "replies of the hairpin: undo the host masquerade (zone 64001)",
		MissDrop, 0, []Feature{FeatureGateway}},
	{Gateway, VersionTable, "Version", "the version note: pipeline version, generation and agent version",
		MissDrop, 0, []Feature{FeatureMeta}},
}

// Tables returns the tables of b in numeric order. The caller may modify
// the returned slice.
func Tables(b Bridge) []Table {
	var out []Table
	for _, t := range tables {
		if t.Bridge == b {
			out = append(out, t)
		}
	}
	return out
}

// LookupTable returns table id of bridge b.
func LookupTable(b Bridge, id TableID) (Table, bool) {
	for _, t := range tables {
		if t.Bridge == b && t.ID == id {
			return t, true
		}
	}
	return Table{}, false
}

// Allows reports whether feature f may put flows into t.
func (t Table) Allows(f Feature) bool {
	return f == FeaturePipeline || slices.Contains(t.Features, f)
}

// CheckTables verifies the table plan: numbers unique and ascending per
// bridge, names unique per bridge, every MissGoto target declared and
// later than the table (the pipeline only moves forward), and every listed
// feature declared.
func CheckTables() error { return checkTables(tables) }

func checkTables(ts []Table) error {
	for _, b := range Bridges {
		var prev *Table
		names := map[string]bool{}
		for i := range ts {
			t := &ts[i]
			if t.Bridge != b {
				continue
			}
			if prev != nil && prev.ID >= t.ID {
				return fmt.Errorf("plan: %s: table %d (%s) is not after table %d (%s)", b, t.ID, t.Name, prev.ID, prev.Name)
			}
			if names[t.Name] {
				return fmt.Errorf("plan: %s: two tables named %s", b, t.Name)
			}
			names[t.Name] = true
			if t.Name == "" || t.Summary == "" {
				return fmt.Errorf("plan: %s table %d: name and summary are required", b, t.ID)
			}
			switch t.Miss {
			case MissGoto:
				if t.Next <= t.ID {
					return fmt.Errorf("plan: %s: miss of %s goes back to table %d", b, t, t.Next)
				}
				found := false
				for _, u := range ts {
					if u.Bridge == b && u.ID == t.Next {
						found = true
					}
				}
				if !found {
					return fmt.Errorf("plan: %s: miss of %s goes to undeclared table %d", b, t, t.Next)
				}
			case MissDrop, MissReturn, MissNormal:
				if t.Next != 0 {
					return fmt.Errorf("plan: %s: %s has a next table but its miss is %s", b, t, t.Miss)
				}
			default:
				return fmt.Errorf("plan: %s: %s has no miss kind", b, t)
			}
			for _, f := range t.Features {
				if _, ok := LookupFeature(f); !ok {
					return fmt.Errorf("plan: %s: %s lists undeclared feature %d", b, t, f)
				}
			}
			prev = t
		}
	}
	return nil
}
