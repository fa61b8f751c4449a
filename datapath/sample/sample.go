package sample

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"nodeflow/datapath/conntrack"
	"nodeflow/datapath/egressfirewallflows"
	"nodeflow/datapath/nodeflows"
	"nodeflow/datapath/plan"
	"nodeflow/datapath/reconcile"
	"nodeflow/datapath/vnetflows"
	"nodeflow/model/egressfirewall"
	"nodeflow/model/service"
	"nodeflow/model/vnet"
)

// Ports are the ofports of both bridges, as Open vSwitch numbers them when
// the agent creates the ports in its order (vxlan0, the patch port, mp0,
// then the pods; the uplink, then the patch port).
type Ports struct {
	// br0.
	Tunnel, PodPatch, Mgmt uint32
	// breth0.
	Uplink, GatewayPatch uint32
}

// Node is one node of the sample cluster.
type Node struct {
	Name string
	// IPs are the node's addresses on breth0, one per family, IPv4 first.
	IPs []netip.Addr
	// Secondary are the host's other global unicast addresses.
	Secondary []netip.Addr
	// PodCIDRs are the node's pod subnets, one per family.
	PodCIDRs []netip.Prefix
	// MAC is breth0's MAC on that node (the LOCAL port's).
	MAC net.HardwareAddr
}

// Config is the model of the sample: this node (Local), the other node
// (Remote), the cluster's networks, this node's pods and next hops, and the
// cluster's service ports with their endpoints.
type Config struct {
	Local, Remote Node
	ClusterCIDRs  []netip.Prefix
	ServiceCIDRs  []netip.Prefix
	Masquerade    conntrack.Plan
	Ports         Ports
	// Pods are the pods attached to this node's br0.
	Pods []nodeflows.Pod
	// NextHops are what the host's neighbour table and default routes say
	// about the uplink's subnet.
	NextHops []plan.NextHop
	// Services are the cluster's service ports, each with all of its
	// endpoints.
	Services []ServicePort
	// EgressFirewalls are namespaces' egress firewall rules, in order; the
	// namespace's id is its pods'.
	EgressFirewalls map[string][]egressfirewallflows.Rule
	// Attachments are the virtual-network attachments on this node, and
	// RemoteAttachments those of their VNIs on other nodes, by VNI.
	Attachments       []vnetflows.Local
	RemoteAttachments map[uint32][]vnetflows.Remote
}

// ServicePort is one service port and its endpoints, as the proxy's
// trackers hold them.
type ServicePort struct {
	Port      *service.ServicePort
	Endpoints []service.Endpoint
}

// RouterMAC returns the MAC of br0's virtual router: the masquerade-plan
// MAC of the IPv4 pod subnet's router address, as the agent derives it.
func (c *Config) RouterMAC() net.HardwareAddr {
	return conntrack.MAC(plan.RouterIP(c.Local.PodCIDRs[0]))
}

// MgmtMAC returns mp0's MAC, derived as the agent does.
func (c *Config) MgmtMAC() net.HardwareAddr {
	return conntrack.MAC(plan.MgmtIP(c.Local.PodCIDRs[0]))
}

// Pod returns this node's pod namespace/name, or false.
func (c *Config) Pod(namespace, name string) (nodeflows.Pod, bool) {
	for _, p := range c.Pods {
		if p.Namespace == namespace && p.Name == name {
			return p, true
		}
	}
	return nodeflows.Pod{}, false
}

// Namespace of the sample's pods and services.
const Namespace = "sample"

// VNetNamespace is the namespace of the sample's virtual-network
// attachments, and VNI their VNI: three on this node (v1 and v2, IPv4,
// ports 7 and 8; v6, IPv6, port 9) and two on node2 (v3, IPv4; v7, IPv6).
const (
	VNetNamespace        = "tenant"
	VNI           uint32 = 0x800001
)

// FencedNamespace is the namespace of the sample's pod under an egress
// firewall: it may reach OutsideClient's address and nothing else outside
// the cluster.
const FencedNamespace = "fenced"

func addr(s string) netip.Addr     { return netip.MustParseAddr(s) }
func prefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func mac(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

func svcName(name, port string, proto v1.Protocol) service.ServicePortName {
	return service.ServicePortName{NamespacedName: types.NamespacedName{Namespace: Namespace, Name: name}, Port: port, Protocol: proto}
}

func endpoint(ip string, port uint16, nodeName string) service.Endpoint {
	return service.Endpoint{IP: addr(ip), Port: port, NodeName: nodeName, Ready: true, Serving: true}
}

// The sample's addresses that tests drive packets with.
var (
	// DefaultGateway is the uplink subnet's router, the next hop of the
	// default route; DefaultGatewayMAC is its MAC.
	DefaultGateway    = addr("172.18.0.1")
	DefaultGatewayMAC = mac("02:42:ac:12:00:01")
	// OutsideClient is an address outside the cluster, behind the default
	// gateway.
	OutsideClient = addr("192.0.2.50")
)

// Default returns the two-node sample: node1 (this node) and node2, dual
// stack, two pods on node1 (a and b) and one on node2, and a set of
// service ports that covers what the service builder can build: ClusterIP
// over TCP, UDP and SCTP, both families, endpoints on a local pod, a
// remote pod, this node's IP, a secondary IP of this node and another
// node's IP, NodePorts, ExternalIPs and ingress IPs, externalTrafficPolicy
// Local, session affinity, a port without endpoints and an idled one.
//
// The services named to-* have exactly one endpoint each (one kind), so
// that a new connection to them takes a known path.
func Default() Config {
	node1 := Node{Name: "node1", IPs: []netip.Addr{addr("172.18.0.3"), addr("fd00:18::3")},
		Secondary: []netip.Addr{addr("172.20.0.2")},
		PodCIDRs:  []netip.Prefix{prefix("10.128.0.0/24"), prefix("fd01:0:0:1::/64")},
		MAC:       mac("02:42:ac:12:00:03")}
	node2 := Node{Name: "node2", IPs: []netip.Addr{addr("172.18.0.4"), addr("fd00:18::4")},
		PodCIDRs: []netip.Prefix{prefix("10.128.1.0/24"), prefix("fd01:0:0:2::/64")},
		MAC:      mac("02:42:ac:12:00:04")}
	pod := func(name string, port uint32, ips ...string) nodeflows.Pod {
		p := nodeflows.Pod{Namespace: Namespace, Name: name, Port: port, NamespaceID: 0x10}
		for _, ip := range ips {
			p.IPs = append(p.IPs, addr(ip))
		}
		p.MAC = conntrack.MAC(p.IPs[0])
		return p
	}
	fenced := pod("c", 6, "10.128.0.7", "fd01:0:0:1::7")
	fenced.Namespace, fenced.NamespaceID = FencedNamespace, 0x11
	attachment := func(name string, port uint32, ip string) vnetflows.Local {
		a := addr(ip)
		return vnetflows.Local{Namespace: VNetNamespace, Name: name, VNI: VNI, Port: port, IP: a, MAC: vnet.MACOf(VNI, a)}
	}
	remoteAtt, remoteAtt6 := addr("10.10.0.3"), addr("fd10::3")
	tcp, udp, sctp := v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP
	const n1, n2 = "node1", "node2"
	idledPort := &service.ServicePort{Name: svcName("idled", "http", tcp), Protocol: tcp, Port: 80,
		ClusterIPs: []netip.Addr{addr("10.96.0.20")}, Idled: true}
	return Config{
		Local: node1, Remote: node2,
		ClusterCIDRs: []netip.Prefix{prefix("10.128.0.0/14"), prefix("fd01::/48")},
		ServiceCIDRs: []netip.Prefix{prefix("10.96.0.0/16"), prefix("fd02::/112")},
		Masquerade:   conntrack.DefaultPlan(),
		Ports:        Ports{Tunnel: 1, PodPatch: 2, Mgmt: 3, Uplink: 1, GatewayPatch: 2},
		Pods: []nodeflows.Pod{
			pod("a", 4, "10.128.0.5", "fd01:0:0:1::5"),
			pod("b", 5, "10.128.0.6", "fd01:0:0:1::6"),
			fenced,
		},
		EgressFirewalls: map[string][]egressfirewallflows.Rule{FencedNamespace: {
			{Action: egressfirewall.Allow, Prefixes: []netip.Prefix{netip.PrefixFrom(OutsideClient, 32)}},
			{Action: egressfirewall.Deny, Prefixes: []netip.Prefix{prefix("0.0.0.0/0"), prefix("::/0")}},
		}},
		Attachments: []vnetflows.Local{attachment("v1", 7, "10.10.0.1"), attachment("v2", 8, "10.10.0.2"), attachment("v6", 9, "fd10::1")},
		RemoteAttachments: map[uint32][]vnetflows.Remote{VNI: {
			{Namespace: VNetNamespace, Name: "v3", IP: remoteAtt, MAC: vnet.MACOf(VNI, remoteAtt), HostIP: node2.IPs[0]},
			{Namespace: VNetNamespace, Name: "v7", IP: remoteAtt6, MAC: vnet.MACOf(VNI, remoteAtt6), HostIP: node2.IPs[0]},
		}},
		NextHops: []plan.NextHop{
			{Prefix: prefix("0.0.0.0/0"), MAC: DefaultGatewayMAC},
			{Prefix: prefix("::/0"), MAC: DefaultGatewayMAC},
			{Prefix: netip.PrefixFrom(DefaultGateway, 32), MAC: DefaultGatewayMAC},
			{Prefix: netip.PrefixFrom(node2.IPs[0], 32), MAC: node2.MAC},
		},
		Services: []ServicePort{
			// Every endpoint kind, both families, every external VIP.
			{&service.ServicePort{Name: svcName("web", "http", tcp), Protocol: tcp, Port: 80, NodePort: 30080,
				ClusterIPs:      []netip.Addr{addr("10.96.0.10"), addr("fd02::10")},
				ExternalIPs:     []netip.Addr{addr("192.0.2.10")},
				LoadBalancerIPs: []netip.Addr{addr("198.51.100.10")},
			}, []service.Endpoint{
				endpoint("10.128.0.5", 8080, n1), endpoint("10.128.1.5", 8080, n2),
				endpoint("172.18.0.3", 8081, n1), endpoint("172.20.0.2", 8081, n1), endpoint("172.18.0.4", 8081, n2),
				endpoint("fd01:0:0:1::5", 8080, n1), endpoint("fd00:18::3", 8081, n1),
			}},
			// One endpoint kind each.
			{&service.ServicePort{Name: svcName("to-local", "http", tcp), Protocol: tcp, Port: 80, NodePort: 30011,
				ClusterIPs: []netip.Addr{addr("10.96.0.11"), addr("fd02::11")},
			}, []service.Endpoint{endpoint("10.128.0.5", 8080, n1), endpoint("fd01:0:0:1::5", 8080, n1)}},
			{&service.ServicePort{Name: svcName("to-remote", "http", tcp), Protocol: tcp, Port: 80, NodePort: 30012,
				ClusterIPs: []netip.Addr{addr("10.96.0.12")},
			}, []service.Endpoint{endpoint("10.128.1.5", 8080, n2)}},
			{&service.ServicePort{Name: svcName("to-host", "http", tcp), Protocol: tcp, Port: 80, NodePort: 30013,
				ClusterIPs: []netip.Addr{addr("10.96.0.13")},
			}, []service.Endpoint{endpoint("172.18.0.3", 8081, n1)}},
			{&service.ServicePort{Name: svcName("to-other-host", "http", tcp), Protocol: tcp, Port: 80,
				ClusterIPs: []netip.Addr{addr("10.96.0.14")},
			}, []service.Endpoint{endpoint("172.18.0.4", 8082, n2)}},
			{&service.ServicePort{Name: svcName("to-secondary", "https", tcp), Protocol: tcp, Port: 443,
				ClusterIPs: []netip.Addr{addr("10.96.0.15")},
			}, []service.Endpoint{endpoint("172.20.0.2", 4443, n1)}},
			// An endpoint outside the cluster (a selectorless Service).
			{&service.ServicePort{Name: svcName("to-outside", "http", tcp), Protocol: tcp, Port: 80,
				ClusterIPs: []netip.Addr{addr("10.96.0.21")},
			}, []service.Endpoint{endpoint(OutsideClient.String(), 80, "")}},
			// UDP with session affinity.
			{&service.ServicePort{Name: svcName("dns", "dns", udp), Protocol: udp, Port: 53,
				ClusterIPs: []netip.Addr{addr("10.96.0.16")}, AffinityTimeout: 30 * time.Second,
			}, []service.Endpoint{endpoint("10.128.0.5", 5353, n1), endpoint("10.128.1.5", 5353, n2)}},
			// externalTrafficPolicy=Local.
			{&service.ServicePort{Name: svcName("local-policy", "http", tcp), Protocol: tcp, Port: 80, NodePort: 30017,
				ClusterIPs: []netip.Addr{addr("10.96.0.17")}, ExternalIPs: []netip.Addr{addr("192.0.2.17")},
				ExternalPolicyLocal: true, HealthCheckNodePort: 31017,
			}, []service.Endpoint{endpoint("10.128.0.5", 8080, n1), endpoint("10.128.1.5", 8080, n2)}},
			// No endpoints: rejected.
			{&service.ServicePort{Name: svcName("empty", "", sctp), Protocol: sctp, Port: 9,
				ClusterIPs: []netip.Addr{addr("10.96.0.18"), addr("fd02::18")},
			}, nil},
			// SCTP with a port translation.
			{&service.ServicePort{Name: svcName("sctp", "assoc", sctp), Protocol: sctp, Port: 9999, NodePort: 30019,
				ClusterIPs: []netip.Addr{addr("10.96.0.19"), addr("fd02::19")},
			}, []service.Endpoint{endpoint("10.128.0.5", 7777, n1), endpoint("fd01:0:0:1::5", 7777, n1)}},
			// Idled, no endpoints.
			{idledPort, nil},
		},
	}
}

// Desired is the desired state of both bridges of one node, owner by owner,
// in the stores the reconcilers would make the bridges match.
type Desired struct {
	// Pod is br0's store, Gateway breth0's. Both check every flow against
	// the plan (declared table, owner's feature allowed there).
	Pod, Gateway *reconcile.Store
	// ports names the ofports of each bridge by their role, for Shapes.
	ports map[plan.Bridge]map[uint32]string
}

// Store returns bridge b's store.
func (d *Desired) Store(b plan.Bridge) *reconcile.Store {
	if b == plan.Gateway {
		return d.Gateway
	}
	return d.Pod
}

// set sets owner's state on bridge b; an empty state is not set, as the
// agent's stores hold no empty owners.
func (d *Desired) set(b plan.Bridge, owner string, st reconcile.State) error {
	if st.Empty() {
		return nil
	}
	if _, ok := d.Store(b).Get(owner); ok {
		return fmt.Errorf("sample: %s: owner %s set twice", b, owner)
	}
	if err := d.Store(b).Set(owner, st); err != nil {
		return fmt.Errorf("sample: %s: %w", b, err)
	}
	return nil
}

// Flows returns the flows of every owner of bridge b, with the feature of
// the owner that wants each, owners in name order.
func (d *Desired) Flows(b plan.Bridge) []OwnedFlow {
	s := d.Store(b)
	var out []OwnedFlow
	for _, o := range s.Owners("") {
		st, _ := s.Get(o)
		f, _ := plan.OwnerFeature(o)
		for _, fl := range st.Flows {
			out = append(out, OwnedFlow{Owner: o, Feature: f, Flow: fl})
		}
	}
	return out
}
