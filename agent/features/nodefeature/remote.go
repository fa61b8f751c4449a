package nodefeature

import (
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"nodeflow/datapath/nodeflows"
)

// RemoteOf returns the model of another node, or why it has none.
func RemoteOf(n *corev1.Node) (nodeflows.Remote, error) {
	r := nodeflows.Remote{Name: n.Name}
	for _, ad := range n.Status.Addresses {
		if ad.Type != corev1.NodeInternalIP {
			continue
		}
		ip, err := netip.ParseAddr(ad.Address)
		if err != nil {
			continue
		}
		ip = ip.Unmap()
		if ip.Is4() && !r.TunnelIP.IsValid() {
			r.TunnelIP = ip
		}
		if !slices.Contains(r.NodeIPs, ip) {
			r.NodeIPs = append(r.NodeIPs, ip)
		}
	}
	if !r.TunnelIP.IsValid() {
		return r, fmt.Errorf("node %s: no IPv4 InternalIP address", n.Name)
	}
	for _, s := range n.Spec.PodCIDRs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return r, fmt.Errorf("node %s: podCIDR %q: %w", n.Name, s, err)
		}
		r.PodCIDRs = append(r.PodCIDRs, p)
	}
	if len(r.PodCIDRs) == 0 {
		return r, fmt.Errorf("node %s: no podCIDR yet", n.Name)
	}
	r.ReturnsByTunnel = pipelineOf(n) >= ReturnsByTunnelSince
	return r, nil
}

// Overlapping reports whether a pod subnet of r overlaps one already taken
// by another node.
func Overlapping(r nodeflows.Remote, taken map[netip.Prefix]string) error {
	for _, p := range r.PodCIDRs {
		for q, other := range taken {
			if p.Overlaps(q) {
				return fmt.Errorf("node %s: podCIDR %s overlaps node %s's %s", r.Name, p, other, q)
			}
		}
	}
	return nil
}

// reportNode logs a problem with another node once per distinct problem
// and records a Warning event on it.
func (n *NodeNet) reportNode(k *corev1.Node, err error) {
	n.mu.Lock()
	same := n.reported[k.Name] == err.Error()
	n.reported[k.Name] = err.Error()
	n.mu.Unlock()
	if same {
		return
	}
	n.modelErrors.WithLabelValues("node").Inc()
	n.log.WithError(err).WithField("remote", k.Name).Warn("ignoring remote node; the others keep working")
	n.h.Recorder().Event(k, corev1.EventTypeWarning, "NodeflowBadNode", err.Error())
}

func (n *NodeNet) clearReport(name string) {
	n.mu.Lock()
	delete(n.reported, name)
	n.mu.Unlock()
}
