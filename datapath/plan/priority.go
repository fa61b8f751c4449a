package plan

import "fmt"

// Priority is a flow priority.
type Priority uint16

// VXLANPort is the UDP destination port of the VXLAN underlay between the
// nodes (vxlan0's, Open vSwitch's default).
const VXLANPort = 4789

// Priorities shared by br0's tables. A table's own section in
// docs/pipeline.md says which it uses for what.
const (
	// PriorityMiss is the explicit miss flow every table ends with.
	PriorityMiss Priority = 0
	// PriorityLow is a table's catch-all above the miss (a default route,
	// "every IP packet").
	PriorityLow Priority = 50
	// PriorityNormal is the ordinary per-object flow.
	PriorityNormal Priority = 100
	// PriorityHigh overrides PriorityNormal (a more specific case of the
	// same object, e.g. established connections with a SNAT mark).
	PriorityHigh Priority = 200
	// PriorityOverride wins over everything in a table (ARP for the router
	// address, traffic to a SNAT address).
	PriorityOverride Priority = 300
)

// PriorityHostPort is table 30's DNAT of a pod's hostPort: above the
// service flows (PriorityHigh), so that a hostPort on a node address wins
// over a NodePort or ExternalIP on the same address and port, as with the
// portmap plugin's DNAT ahead of kube-proxy's.
const PriorityHostPort Priority = 250

// breth0 priorities: the seed's.
const (
	// PriorityMasquerade is table 0's host/router masquerade flows.
	PriorityMasquerade Priority = 500
	// PriorityServiceIngress is table 0's per-service flows (NodePort,
	// ExternalIP, LoadBalancer ingress and their replies).
	PriorityServiceIngress Priority = 110
	// PriorityGatewayCommit is table 0's zone-64000 commit of traffic from
	// br0 and from the host, and table 1's return by ct_mark.
	PriorityGatewayCommit Priority = 100
	// PriorityUplinkConntrack is table 0's zone-64000 lookup of traffic
	// from the uplink.
	PriorityUplinkConntrack Priority = 50
	// PriorityBridgeMAC is the flows on the bridge's own MAC.
	PriorityBridgeMAC Priority = 10
)

// Band is an inclusive range of priorities that one feature ranks its
// flows in, highest first.
type Band struct {
	Name      string
	Low, High Priority
}

// Size returns the number of priorities in the band.
func (b Band) Size() int { return int(b.High) - int(b.Low) + 1 }

// Rank returns the priority of the i-th (0-based) item in the band's
// order: the first gets High, the next High-1, and so on. An index past
// the band's size is an error naming the band.
func (b Band) Rank(i int) (Priority, error) {
	if i < 0 || i >= b.Size() {
		return 0, fmt.Errorf("plan: band %s: rank %d: %w (0-%d)", b.Name, i, ErrRange, b.Size()-1)
	}
	return b.High - Priority(i), nil
}

// Contains reports whether p is in the band.
func (b Band) Contains(p Priority) bool { return p >= b.Low && p <= b.High }

// EgressFirewallRules ranks a namespace's egress firewall rules in table
// PodEgressFirewall: the first rule gets the highest priority, so the
// first match wins. 10,000 rules fit (openshift-sdn documented 1,000,
// ovn-kubernetes 8,000).
var EgressFirewallRules = Band{Name: "EgressFirewallRules", Low: 1000, High: 10999}

// PriorityEgressFirewallBypass lets destinations inside the cluster and
// service networks skip the egress firewall; it is above every rule.
const PriorityEgressFirewallBypass Priority = 20000

// IDRange is an inclusive range of group or meter ids.
type IDRange struct {
	Name        string
	First, Last uint32
}

// Contains reports whether id is in r.
func (r IDRange) Contains(id uint32) bool { return id >= r.First && id <= r.Last }

// Size returns the number of ids in r.
func (r IDRange) Size() uint32 { return r.Last - r.First + 1 }

// ServiceGroups is the range of service group ids on br0. A service
// port's group id is also its ServiceID (reg5).
var ServiceGroups = IDRange{Name: "ServiceGroups", First: 1, Last: 0x0fff_ffff}

// Meter ids on br0: one node-wide ceiling per packet-in category, so a
// flood of one kind cannot starve another, named by the category's
// controller actions (meter_id); behind each, the punt stage's meter per
// source (punt.go, SourceMeter), so a flood of one source cannot starve
// another of the same kind.
const (
	// MeterUnidle limits packet-ins of new connections to idled services.
	MeterUnidle uint32 = 1
	// MeterReject limits packet-ins of new connections to services
	// without endpoints, answered with TCP RST or ICMP unreachable.
	MeterReject uint32 = 2
	// MeterPolicyLog limits the packet-ins of the packets that
	// NetworkPolicy denies in namespaces that log them (3 is
	// MeterEgressFirewallDNS).
	MeterPolicyLog uint32 = 4
)

// PacketInCategory is the first byte of the userdata of every
// controller() action nodeflow installs; the agent dispatches on it.
type PacketInCategory uint8

// Packet-in categories.
const (
	PacketInUnidle PacketInCategory = 1
	PacketInReject PacketInCategory = 2
	// PacketInPolicyDenied is a sample of the packets NetworkPolicy
	// denies, for the log (3 is PacketInDNS).
	PacketInPolicyDenied PacketInCategory = 4
)

// ControllerID is the controller id nodeflow's connection announces
// (NXT_SET_CONTROLLER_ID) and that its controller() actions name, so
// packet-ins reach only nodeflow and not an ovs-ofctl monitor.
const ControllerID uint16 = 0x6e66 // "nf"

// br0 tables 45 (EgressPolicy) and 65 (IngressPolicy): NetworkPolicy.
// Every new connection that is not a service connection (those are
// committed by their DNAT) is committed in the service zone once it is
// allowed, so that its replies and later packets are +est: in table 45
// unless it goes to a local pod, in table 65 then.
const (
	// PriorityPolicyEstablished passes +est and +rel packets.
	PriorityPolicyEstablished Priority = 300
	// PriorityPolicyExemptNew commits a new connection from an exempt
	// source that no earlier table committed (the host by mp0).
	PriorityPolicyExemptNew Priority = 291
	// PriorityPolicyExempt passes what policies never judge: a pod
	// reaching itself through a service (from the router address), the
	// node's own host.
	PriorityPolicyExempt Priority = 290
	// PriorityPolicyAllowLocal passes, uncommitted, a new connection an
	// egress rule allows to a local pod: table 65 judges and commits it.
	PriorityPolicyAllowLocal Priority = 202
	// PriorityPolicyAllowNew commits and passes a new connection a rule
	// allows (its conj_id flow).
	PriorityPolicyAllowNew Priority = 201
	// PriorityPolicyRule holds the conj_id flows that pass the rest of
	// what the rules allow.
	PriorityPolicyRule Priority = 200
	// PriorityPolicyClauses is the first of the PolicyClauseLanes
	// priorities of the rules' conjunction clauses: a rule's clauses are
	// all at the priority of its lane (its conjunction id modulo the
	// lanes), so that a match shared by thousands of rules is a few flows
	// of a few hundred conjunction actions each, not one flow too long
	// for an OpenFlow message.
	PriorityPolicyClauses Priority = 110
	// PriorityPolicyIsolated drops what no rule allowed for an isolated
	// pod.
	PriorityPolicyIsolated Priority = 100
	// PriorityPolicyLocalNew passes, uncommitted, a new connection to a
	// local pod in table 45.
	PriorityPolicyLocalNew Priority = 11
	// PriorityPolicyDefaultNew commits and passes a new connection of a
	// pod that is not isolated, or from elsewhere.
	PriorityPolicyDefaultNew Priority = 10
)

// PolicyClauseLanes is the number of priorities the NetworkPolicy
// clauses spread over (PriorityPolicyClauses on), below the conj_id flows.
const PolicyClauseLanes = 64

// PipelineVersion is the version of this plan. It is written into the
// version note of both bridges; bump it when a change to the plan means
// old flows must not be mistaken for new ones.
//
// 2: the version note names the agent's version ("agent=..."), and an
// agent that finds another pipeline's note logs the upgrade.
//
// 3: service buckets commit the DNAT themselves (table 35 only for session
// affinity); table 40 decides the hairpin and breth0-to-remote-pod SNAT
// from the packet, not from ct_mark.
//
// 4: the host's service connections to pods on other nodes are SNATed to
// the node IP, not the router address, when the other node's agent returns
// their replies through the tunnel (it commits them with ReturnByTunnel
// and says so with the Node annotation PipelineAnnotation); NetworkPolicy
// tables 45 (EgressPolicy) and 65 (IngressPolicy): table 40 goes on to 45,
// routing to a local pod goes through 65.
//
// 5: virtual networks (FeatureVNet): tables 100 (VNetPortSecurity), 105
// (VNetARP) and 110 (VNetForward), attachment ports in table 0, VNIs from
// the tunnel in table 15; the pod network's table-15 flows accept only
// keys without TunnelKeyVNIBit (namespace ids).
//
// 6: fragmented datagrams under policy: tables 45 and 65 and the egress
// firewall judge a datagram by its first fragment and send its later
// fragments to meet it at a ct action (FragmentsEgress, FragmentsFirewall,
// FragmentsIngress); the egress firewall's allowed packets go through the
// new table 55 (EgressFirewallFragments). The punt stage: tables 120
// (Punt) and 121 (PuntNamespace) and their per-source and per-namespace
// meters; every packet-in flow loads PuntCategory and resubmits there
// before its controller action, whose meter becomes the category's
// node-wide ceiling.
const PipelineVersion = 6

// PipelineAnnotation is the Node annotation in which each agent publishes
// the PipelineVersion it runs, so that the other nodes know what it can
// receive.
const PipelineAnnotation = "nodeflow.io/pipeline"
