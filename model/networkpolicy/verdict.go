package networkpolicy

import (
	"net/netip"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Pod is what the model needs to know about a pod.
type Pod struct {
	Namespace, Name string
	Labels          map[string]string
	// Ports are its containers' ports, for named ports.
	Ports []v1.ContainerPort
	// HostNetwork pods are the node's: never selected.
	HostNetwork bool
}

// Endpoint is one end of a connection: a pod at one of its addresses,
// the node's own host, or any other address.
type Endpoint struct {
	// Pod is set for a pod.
	Pod *Pod
	// Host is set for the node's own host (kubelet probes, say).
	Host bool
	// Addr is the address the connection uses.
	Addr netip.Addr
}

// Conn is a connection's first packet, after the service DNAT: Dst is the
// endpoint it reaches.
type Conn struct {
	Src, Dst Endpoint
	Protocol v1.Protocol
	Port     int32
}

// Cluster is the state a verdict depends on.
type Cluster struct {
	// Namespaces holds each namespace's labels.
	Namespaces map[string]map[string]string
	Policies   []*Policy
}

// Verdict reports whether c is allowed: by the source's egress policies
// (when the source is a pod), and by the destination's ingress policies
// (when the destination is a pod and the source is not the node's host).
func (cl *Cluster) Verdict(c Conn) bool {
	if p := c.Src.Pod; p != nil && !p.HostNetwork {
		if !cl.allows(p, c, false) {
			return false
		}
	}
	if p := c.Dst.Pod; p != nil && !p.HostNetwork && !c.Src.Host {
		if !cl.allows(p, c, true) {
			return false
		}
	}
	return true
}

// allows reports whether the policies selecting pod allow c in one
// direction: true when none isolates it.
func (cl *Cluster) allows(pod *Pod, c Conn, ingress bool) bool {
	isolated := false
	set := labels.Set(pod.Labels)
	for _, p := range cl.Policies {
		if p.Namespace != pod.Namespace || !p.Selector.Matches(set) {
			continue
		}
		rules, peer := p.EgressRules, c.Dst
		if ingress {
			rules, peer = p.IngressRules, c.Src
		}
		if ingress && !p.Ingress || !ingress && !p.Egress {
			continue
		}
		isolated = true
		for _, r := range rules {
			if cl.peerMatches(p, r.Peers, peer) && portMatches(r.Ports, c) {
				return true
			}
		}
	}
	return !isolated
}

// peerMatches reports whether e is one of peers (every endpoint when
// there are none).
func (cl *Cluster) peerMatches(p *Policy, peers []Peer, e Endpoint) bool {
	if len(peers) == 0 {
		return true
	}
	for _, peer := range peers {
		if peer.Block != nil {
			if e.Addr.IsValid() && peer.Block.Contains(e.Addr) {
				return true
			}
			continue
		}
		pod := e.Pod
		if pod == nil || pod.HostNetwork {
			continue
		}
		if peer.Namespaces == nil {
			if pod.Namespace != p.Namespace {
				continue
			}
		} else if !peer.Namespaces.Matches(labels.Set(cl.Namespaces[pod.Namespace])) {
			continue
		}
		if peer.Pods == nil || peer.Pods.Matches(labels.Set(pod.Labels)) {
			return true
		}
	}
	return false
}

// portMatches reports whether c's protocol and port are among ports
// (every port when there are none); a named port is resolved on the
// destination pod.
func portMatches(ports []Port, c Conn) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		if p.Protocol != c.Protocol {
			continue
		}
		switch {
		case p.Name != "":
			if c.Dst.Pod == nil {
				continue
			}
			for _, cp := range c.Dst.Pod.Ports {
				proto := cp.Protocol
				if proto == "" {
					proto = v1.ProtocolTCP
				}
				if cp.Name == p.Name && proto == c.Protocol && cp.ContainerPort == c.Port {
					return true
				}
			}
		case p.Number == 0:
			return true
		case p.EndPort != 0:
			if c.Port >= p.Number && c.Port <= p.EndPort {
				return true
			}
		case c.Port == p.Number:
			return true
		}
	}
	return false
}
