package servicefeature

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"nodeflow/agent/feature"
	"nodeflow/model/service"
)

// The cluster's facts about addresses, as every node reads them: every
// Node's addresses and pod subnets, from the Node objects. They decide
// which external and ingress IPs a Service owns (proxy.AddressCheck) and
// which endpoint addresses cannot be right (a pod subnet's network or
// broadcast address), the same way on every node.

// nodeFacts is what one Node says about its addresses.
type nodeFacts struct {
	addrs   []netip.Addr
	subnets []netip.Prefix
}

func (f nodeFacts) equal(o nodeFacts) bool {
	return slices.Equal(f.addrs, o.addrs) && slices.Equal(f.subnets, o.subnets)
}

// clusterNodes follows the Node objects' addresses and pod subnets.
type clusterNodes struct {
	mu    sync.Mutex
	nodes map[string]nodeFacts
	// changed is called (without the lock) after a Node's facts changed.
	changed func()
}

// factsOf reads a Node's addresses (status.addresses of IP form) and pod
// subnets (spec.podCIDRs); what does not parse is left out (the API
// server validates both).
func factsOf(n *corev1.Node) nodeFacts {
	var f nodeFacts
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil && !slices.Contains(f.addrs, ip.Unmap()) {
			f.addrs = append(f.addrs, ip.Unmap())
		}
	}
	for _, s := range n.Spec.PodCIDRs {
		if p, err := netip.ParsePrefix(s); err == nil {
			f.subnets = append(f.subnets, p.Masked())
		}
	}
	slices.SortFunc(f.addrs, netip.Addr.Compare)
	return f
}

// watch registers the handlers on the Node informer.
func (c *clusterNodes) watch(inf cache.SharedIndexInformer) (cache.ResourceEventHandlerRegistration, error) {
	node := func(obj any) *corev1.Node {
		n, _ := feature.ObjectOf[*corev1.Node](obj)
		return n
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.set(node(obj), false) },
		UpdateFunc: func(_, cur any) { c.set(node(cur), false) },
		DeleteFunc: func(obj any) { c.set(node(obj), true) },
	})
	if err != nil {
		return nil, fmt.Errorf("services: nodes: %w", err)
	}
	return reg, nil
}

// set records n's facts (or their removal) and tells when they changed.
func (c *clusterNodes) set(n *corev1.Node, deleted bool) {
	if n == nil {
		return
	}
	c.mu.Lock()
	old, had := c.nodes[n.Name]
	var changed bool
	if deleted {
		delete(c.nodes, n.Name)
		changed = had
	} else {
		f := factsOf(n)
		changed = !had || !f.equal(old)
		c.nodes[n.Name] = f
	}
	c.mu.Unlock()
	if changed && c.changed != nil {
		c.changed()
	}
}

// facts returns every Node's addresses (to its name) and every Node's pod
// subnets (with its name), sorted by node name.
func (c *clusterNodes) facts() (map[netip.Addr]string, []service.NodeSubnet) {
	c.mu.Lock()
	defer c.mu.Unlock()
	addrs := map[netip.Addr]string{}
	var subnets []service.NodeSubnet
	for _, name := range slices.Sorted(maps.Keys(c.nodes)) {
		f := c.nodes[name]
		for _, a := range f.addrs {
			if _, taken := addrs[a]; !taken {
				addrs[a] = name
			}
		}
		for _, p := range f.subnets {
			subnets = append(subnets, service.NodeSubnet{Node: name, Prefix: p})
		}
	}
	return addrs, subnets
}
