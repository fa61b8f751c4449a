// Package topology reads testbed topology files: a subset of containerlab's
// YAML shape with a few testbed extensions.
//
//	name: nodeflow                    # names the testbed; short, [a-z0-9-]
//	kubernetes:                       # extension; all fields optional
//	  pod-cidrs: [10.244.0.0/16, fd00:10:244::/56]
//	  service-cidrs: [10.96.0.0/16, fd00:10:96::/112]
//	  node-cidr-mask-ipv4: 24
//	  node-cidr-mask-ipv6: 64
//	topology:
//	  nodes:
//	    fabric: {kind: bridge, ipv4: 172.30.0.1/24, ipv6: fd00:172:30::1/64}
//	    node1:  {kind: k8s-node, ipv4: 172.30.0.11/24, ipv6: fd00:172:30::11/64}
//	    ext1:   {kind: host, ipv4: 172.30.0.100/24}
//	  links:
//	    - endpoints: ["node1:eth0", "fabric:node1"]
//
// Kinds: k8s-node (a Kubernetes node: namespace, OVS, kubelet stand-in,
// agent), host (a plain namespace, e.g. an external client) and bridge (a
// Linux bridge in a namespace of its own: an L2 segment). A node's ipv4/ipv6
// (and extra-addresses) go on its eth0; its default route points at the
// address of the same family of the bridge that eth0 is linked to. A link
// joins two interfaces with a veth; an endpoint on a bridge names the bridge
// port.
package topology

import (
	_ "embed"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Kinds of topology nodes.
const (
	KindK8sNode = "k8s-node"
	KindHost    = "host"
	KindBridge  = "bridge"
)

//go:embed default.yaml
var defaultYAML []byte

// DefaultYAML returns the default topology file.
func DefaultYAML() []byte { return slices.Clone(defaultYAML) }

// Topology is a parsed, validated topology file.
type Topology struct {
	Name       string     `json:"name"`
	Kubernetes Kubernetes `json:"kubernetes,omitempty"`
	Topology   struct {
		Nodes map[string]*Node `json:"nodes"`
		Links []Link           `json:"links"`
	} `json:"topology"`
}

// Kubernetes holds the cluster's address plan.
type Kubernetes struct {
	PodCIDRs         []string `json:"pod-cidrs,omitempty"`
	ServiceCIDRs     []string `json:"service-cidrs,omitempty"`
	NodeCIDRMaskIPv4 int      `json:"node-cidr-mask-ipv4,omitempty"`
	NodeCIDRMaskIPv6 int      `json:"node-cidr-mask-ipv6,omitempty"`
	// ServiceAddressCIDRs are the ranges Services may take external IPs
	// and load-balancer ingress IPs from: the agents' externalIPs and
	// loadBalancerIPs policies, and the admission policy's parameters.
	// None by default.
	ServiceAddressCIDRs []string `json:"service-address-cidrs,omitempty"`
}

// Node is one member of the topology.
type Node struct {
	// Name is the map key (filled in by Parse).
	Name string `json:"-"`
	Kind string `json:"kind"`
	// IPv4 and IPv6 are the member's primary addresses with prefix length
	// (the node IPs of a k8s-node; the gateway addresses of a bridge).
	IPv4 string `json:"ipv4,omitempty"`
	IPv6 string `json:"ipv6,omitempty"`
	// ExtraAddresses are more addresses for eth0 (secondary node IPs).
	ExtraAddresses []string `json:"extra-addresses,omitempty"`
	// Labels are added to a k8s-node's Node object.
	Labels map[string]string `json:"labels,omitempty"`
}

// Link is a veth between two endpoints "member:interface".
type Link struct {
	Endpoints []string `json:"endpoints"`
}

// Endpoint is one end of a link.
type Endpoint struct {
	Node, Interface string
}

// Load reads and parses a topology file; "" means the default topology.
func Load(path string) (*Topology, error) {
	if path == "" {
		return Parse(defaultYAML)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	t, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

var (
	nameRE  = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
	ifaceRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)
)

// MaxNameLen bounds topology and member names: they become parts of network
// namespace and interface names (at most 15 bytes) and of socket paths.
const MaxNameLen = 12

// Parse decodes and validates a topology and fills in defaults.
func Parse(b []byte) (*Topology, error) {
	var t Topology
	if err := yaml.UnmarshalStrict(b, &t); err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	if err := t.validate(); err != nil {
		return nil, fmt.Errorf("topology %q: %w", t.Name, err)
	}
	return &t, nil
}

func (t *Topology) validate() error {
	if !nameRE.MatchString(t.Name) || len(t.Name) > MaxNameLen {
		return fmt.Errorf("name: %q must be 1-%d characters of [a-z0-9-]", t.Name, MaxNameLen)
	}
	k := &t.Kubernetes
	if len(k.PodCIDRs) == 0 {
		k.PodCIDRs = []string{"10.244.0.0/16", "fd00:10:244::/56"}
	}
	if len(k.ServiceCIDRs) == 0 {
		k.ServiceCIDRs = []string{"10.96.0.0/16", "fd00:10:96::/112"}
	}
	if k.NodeCIDRMaskIPv4 == 0 {
		k.NodeCIDRMaskIPv4 = 24
	}
	if k.NodeCIDRMaskIPv6 == 0 {
		k.NodeCIDRMaskIPv6 = 64
	}
	for i, c := range k.ServiceAddressCIDRs {
		if p, err := netip.ParsePrefix(c); err != nil || p != p.Masked() {
			return fmt.Errorf("kubernetes: service-address-cidrs[%d]: %q is not a network CIDR", i, c)
		}
	}
	for field, cidrs := range map[string][]string{"pod-cidrs": k.PodCIDRs, "service-cidrs": k.ServiceCIDRs} {
		if len(cidrs) > 2 {
			return fmt.Errorf("kubernetes: %s: at most one IPv4 and one IPv6 CIDR", field)
		}
		fams := map[bool]bool{}
		for i, c := range cidrs {
			p, err := netip.ParsePrefix(c)
			if err != nil || p != p.Masked() {
				return fmt.Errorf("kubernetes: %s[%d]: %q is not a network CIDR", field, i, c)
			}
			if fams[p.Addr().Is4()] {
				return fmt.Errorf("kubernetes: %s: two CIDRs of the same family", field)
			}
			fams[p.Addr().Is4()] = true
		}
	}
	if len(t.Topology.Nodes) == 0 {
		return fmt.Errorf("topology: nodes: none")
	}
	for name, n := range t.Topology.Nodes {
		if n == nil {
			return fmt.Errorf("topology: nodes: %s: empty", name)
		}
		n.Name = name
		if !nameRE.MatchString(name) || len(name) > MaxNameLen {
			return fmt.Errorf("topology: nodes: %q: names must be 1-%d characters of [a-z0-9-]", name, MaxNameLen)
		}
		switch n.Kind {
		case KindK8sNode, KindHost, KindBridge:
		default:
			return fmt.Errorf("topology: nodes: %s: kind: %q is not %s, %s or %s", name, n.Kind, KindK8sNode, KindHost, KindBridge)
		}
		if err := checkAddr(n.IPv4, true); err != nil {
			return fmt.Errorf("topology: nodes: %s: ipv4: %w", name, err)
		}
		if err := checkAddr(n.IPv6, false); err != nil {
			return fmt.Errorf("topology: nodes: %s: ipv6: %w", name, err)
		}
		for i, a := range n.ExtraAddresses {
			if _, err := netip.ParsePrefix(a); err != nil {
				return fmt.Errorf("topology: nodes: %s: extra-addresses[%d]: %w", name, i, err)
			}
		}
		if n.Kind == KindK8sNode && n.IPv4 == "" && n.IPv6 == "" {
			return fmt.Errorf("topology: nodes: %s: a k8s-node needs an ipv4 or ipv6 address", name)
		}
	}
	seen := map[Endpoint]bool{}
	for i, l := range t.Topology.Links {
		if len(l.Endpoints) != 2 {
			return fmt.Errorf("topology: links[%d]: endpoints: want 2, have %d", i, len(l.Endpoints))
		}
		eps, err := l.Parse()
		if err != nil {
			return fmt.Errorf("topology: links[%d]: %w", i, err)
		}
		for _, ep := range eps {
			n, ok := t.Topology.Nodes[ep.Node]
			if !ok {
				return fmt.Errorf("topology: links[%d]: endpoint %s:%s: no node %q", i, ep.Node, ep.Interface, ep.Node)
			}
			if seen[ep] {
				return fmt.Errorf("topology: links[%d]: interface %s:%s is used twice", i, ep.Node, ep.Interface)
			}
			seen[ep] = true
			if n.Kind == KindBridge && ep.Interface == "bridge" {
				return fmt.Errorf("topology: links[%d]: %s:bridge is the bridge device itself", i, ep.Node)
			}
		}
		if t.Topology.Nodes[eps[0].Node].Kind == KindBridge && t.Topology.Nodes[eps[1].Node].Kind == KindBridge {
			return fmt.Errorf("topology: links[%d]: bridge-to-bridge links are not supported", i)
		}
	}
	for _, n := range t.Topology.Nodes {
		if n.Kind != KindBridge && (n.IPv4 != "" || n.IPv6 != "") && !seen[Endpoint{n.Name, "eth0"}] {
			return fmt.Errorf("topology: nodes: %s has addresses but no link for %s:eth0", n.Name, n.Name)
		}
	}
	return nil
}

func checkAddr(s string, want4 bool) error {
	if s == "" {
		return nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return err
	}
	if p.Addr().Is4() != want4 {
		return fmt.Errorf("%s is of the wrong family", s)
	}
	if p.Bits() == p.Addr().BitLen() {
		return fmt.Errorf("%s: give the subnet's prefix length, not a host route", s)
	}
	return nil
}

// Parse splits the link's "member:interface" endpoints.
func (l Link) Parse() ([2]Endpoint, error) {
	var out [2]Endpoint
	for i, e := range l.Endpoints {
		node, iface, ok := strings.Cut(e, ":")
		if !ok || node == "" || !ifaceRE.MatchString(iface) || len(iface) > 15 {
			return out, fmt.Errorf("endpoint %q is not MEMBER:INTERFACE (interface names: up to 15 of [a-zA-Z0-9_.-])", e)
		}
		out[i] = Endpoint{node, iface}
	}
	return out, nil
}

// Members returns the nodes sorted by kind (bridges, k8s nodes, hosts), then name.
func (t *Topology) Members() []*Node {
	out := make([]*Node, 0, len(t.Topology.Nodes))
	for _, n := range t.Topology.Nodes {
		out = append(out, n)
	}
	rank := map[string]int{KindBridge: 0, KindK8sNode: 1, KindHost: 2}
	sort.Slice(out, func(i, j int) bool {
		if rank[out[i].Kind] != rank[out[j].Kind] {
			return rank[out[i].Kind] < rank[out[j].Kind]
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// K8sNodes returns the k8s-node members sorted by name.
func (t *Topology) K8sNodes() []*Node {
	var out []*Node
	for _, n := range t.Members() {
		if n.Kind == KindK8sNode {
			out = append(out, n)
		}
	}
	return out
}

// Addresses returns the member's addresses with prefix length: ipv4, ipv6,
// then the extra ones.
func (n *Node) Addresses() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range append([]string{n.IPv4, n.IPv6}, n.ExtraAddresses...) {
		if s != "" {
			out = append(out, netip.MustParsePrefix(s))
		}
	}
	return out
}

// LinkedBridge returns the bridge member that iface of member n is linked
// to, or nil.
func (t *Topology) LinkedBridge(n *Node, iface string) *Node {
	for _, l := range t.Topology.Links {
		eps, _ := l.Parse()
		for i, ep := range eps {
			if ep.Node == n.Name && ep.Interface == iface {
				other := t.Topology.Nodes[eps[1-i].Node]
				if other.Kind == KindBridge {
					return other
				}
			}
		}
	}
	return nil
}
