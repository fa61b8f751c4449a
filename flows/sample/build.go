package sample

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	efflows "nodeflow/flows/egressfw"
	"nodeflow/flows/gateway"
	"nodeflow/flows/node"
	"nodeflow/flows/plan"
	"nodeflow/flows/policy"
	"nodeflow/flows/punt"
	"nodeflow/flows/reconcile"
	"nodeflow/flows/service"
	"nodeflow/flows/unidle"
	"nodeflow/flows/vnet"
	"nodeflow/openflow"
)

// OwnedFlow is one desired flow with the owner that wants it.
type OwnedFlow struct {
	Owner   string
	Feature plan.Feature
	Flow    openflow.Flow
}

// features lists each feature's part of the sample, in the order the agent
// sets them up. A new feature adds one function here.
var features = []struct {
	name  string
	build func(c *Config, d *Desired) error
}{
	{"pipeline", buildPipeline},
	{"node networking", buildNodeNetworking},
	{"services", buildServices},
	{"egress firewall", buildEgressFirewall},
	{"network policy", buildNetworkPolicy},
	{"virtual networks", buildVNet},
}

// Build builds the desired state of c.Local's bridges with the real
// builders, as the agent calls them.
func Build(c Config) (*Desired, error) {
	d := &Desired{
		Pod:     reconcile.NewStore(reconcile.StoreOptions{Bridge: plan.Pod}),
		Gateway: reconcile.NewStore(reconcile.StoreOptions{Bridge: plan.Gateway}),
		ports: map[plan.Bridge]map[uint32]string{
			plan.Pod:     {c.Ports.Tunnel: "vxlan0", c.Ports.PodPatch: "patch", c.Ports.Mgmt: "mp0"},
			plan.Gateway: {c.Ports.Uplink: "uplink", c.Ports.GatewayPatch: "patch"},
		},
	}
	for _, p := range c.Pods {
		d.ports[plan.Pod][p.Port] = "pod"
	}
	for _, a := range c.Attachments {
		d.ports[plan.Pod][a.Port] = "attachment"
	}
	for _, f := range features {
		if err := f.build(&c, d); err != nil {
			return nil, fmt.Errorf("sample: %s: %w", f.name, err)
		}
	}
	return d, nil
}

// buildPipeline sets the explicit priority-0 flow of every table of both
// bridges.
func buildPipeline(_ *Config, d *Desired) error {
	for _, b := range plan.Bridges {
		if err := d.set(b, gateway.PipelineOwner(b), reconcile.State{Flows: gateway.PipelineFlows(b)}); err != nil {
			return err
		}
	}
	return nil
}

// nodeConfig is the node builders' model of c.Local, as the agent fills it.
func (c *Config) nodeConfig() node.Config {
	return node.Config{
		TunnelPort: c.Ports.Tunnel, PatchPort: c.Ports.PodPatch, MgmtPort: c.Ports.Mgmt,
		RouterMAC: c.RouterMAC(), MgmtMAC: c.MgmtMAC(), HostMAC: c.Local.MAC,
		PodCIDRs: c.Local.PodCIDRs, ClusterCIDRs: c.ClusterCIDRs, ServiceCIDRs: c.ServiceCIDRs,
		NodeIPs: c.Local.IPs, Masquerade: c.Masquerade,
	}
}

// buildNodeNetworking sets what the node networking feature wants:
// breth0's default flows, br0's node-wide flows with the punt stage of the
// node's own ports, the other node's tunnel and routes, the punt meters of
// the pods' namespaces, each pod's flows with its punt stage, the IPv6
// neighbour discovery flood and the next hops toward the uplink.
func buildNodeNetworking(c *Config, d *Desired) error {
	nc := c.nodeConfig()
	gfs, err := gateway.Flows(gateway.Config{
		UplinkPort: c.Ports.Uplink, PatchPort: c.Ports.GatewayPatch, NodeIPs: c.Local.IPs,
		ServiceCIDRs: c.ServiceCIDRs, Masquerade: c.Masquerade, RouterMAC: c.RouterMAC(), HostMAC: c.Local.MAC,
		SecondaryIPs: c.Local.Secondary,
	})
	if err != nil {
		return err
	}
	if err := d.set(plan.Gateway, gateway.Owner, reconcile.State{Flows: gfs}); err != nil {
		return err
	}
	fs, err := node.NodeFlows(nc)
	if err != nil {
		return err
	}
	local := reconcile.State{Flows: fs}
	for _, port := range []uint32{c.Ports.Tunnel, c.Ports.PodPatch, c.Ports.Mgmt} {
		ps, err := punt.SourceState(punt.Source{Port: port})
		if err != nil {
			return err
		}
		local.Flows = append(local.Flows, ps.Flows...)
		local.Meters = append(local.Meters, ps.Meters...)
	}
	if err := d.set(plan.Pod, node.OwnerLocal, local); err != nil {
		return err
	}
	fs, err = node.RemoteFlows(nc, node.Remote{Name: c.Remote.Name, TunnelIP: c.Remote.IPs[0], PodCIDRs: c.Remote.PodCIDRs, NodeIPs: c.Remote.IPs, ReturnsByTunnel: true})
	if err != nil {
		return err
	}
	if err := d.set(plan.Pod, node.RemoteOwner(c.Remote.Name), reconcile.State{Flows: fs}); err != nil {
		return err
	}
	ndPorts := []uint32{c.Ports.Mgmt}
	namespaces := map[string]uint32{}
	for _, p := range c.Pods {
		namespaces[p.Namespace] = p.NamespaceID
	}
	for _, ns := range slices.Sorted(maps.Keys(namespaces)) {
		st, err := punt.NamespaceState(namespaces[ns])
		if err != nil {
			return err
		}
		if err := d.set(plan.Pod, punt.NamespaceOwner(ns), st); err != nil {
			return err
		}
	}
	for _, p := range c.Pods {
		fs, err := node.PodFlows(nc, p)
		if err != nil {
			return err
		}
		ps, err := punt.SourceState(punt.Source{Port: p.Port, Dsts: p.IPs, Namespace: p.NamespaceID})
		if err != nil {
			return err
		}
		if err := d.set(plan.Pod, node.PodOwner(p.Namespace, p.Name), reconcile.State{Flows: append(fs, ps.Flows...), Meters: ps.Meters}); err != nil {
			return err
		}
		ndPorts = append(ndPorts, p.Port)
	}
	if err := d.set(plan.Pod, node.OwnerND, reconcile.State{Flows: node.NDFlows(ndPorts)}); err != nil {
		return err
	}
	fs, err = node.GatewayOutputFlows(nc, c.NextHops)
	if err != nil {
		return err
	}
	return d.set(plan.Pod, node.OwnerNextHops, reconcile.State{Flows: fs})
}

// serviceNode is the service builder's model of c.Local, as the agent
// fills it: the first address of each family is the node IP, the others
// and the host's secondary addresses are secondary, sorted.
func (c *Config) serviceNode() service.Node {
	n := service.Node{
		Name: c.Local.Name, ClusterCIDRs: c.ClusterCIDRs, Masquerade: c.Masquerade,
		UplinkPort: c.Ports.Uplink, PatchPort: c.Ports.GatewayPatch,
	}
	have := map[bool]bool{}
	for _, ip := range c.Local.IPs {
		if !have[ip.Is6()] {
			have[ip.Is6()] = true
			n.IPs = append(n.IPs, ip)
		} else {
			n.Secondary = append(n.Secondary, ip)
		}
	}
	n.Secondary = append(n.Secondary, c.Local.Secondary...)
	slices.SortFunc(n.Secondary, netip.Addr.Compare)
	n.Secondary = slices.Compact(n.Secondary)
	return n
}

// buildServices sets what the services feature wants: the reject meter,
// the service CIDRs' drop, then each service port's br0 and breth0 state,
// with group ids from the plan's allocator, and each ClusterIP's reject.
func buildServices(c *Config, d *Desired) error {
	if err := d.set(plan.Pod, service.RejectMeterOwner, reconcile.State{Meters: []openflow.MeterEntry{service.RejectMeter()}}); err != nil {
		return err
	}
	if err := d.set(plan.Pod, unidle.MeterOwner, reconcile.State{Meters: []openflow.MeterEntry{unidle.Meter()}}); err != nil {
		return err
	}
	cidrs, err := service.CIDRFlows(c.ServiceCIDRs)
	if err != nil {
		return err
	}
	if err := d.set(plan.Pod, service.CIDROwner, cidrs); err != nil {
		return err
	}
	n := c.serviceNode()
	ids := plan.NewIDAllocator(plan.ServiceGroups)
	addrs := map[netip.Addr]bool{}
	for _, s := range c.Services {
		out, err := service.Build(&n, service.Input{Port: s.Port, Endpoints: s.Endpoints}, ids.Get)
		if err != nil {
			return err
		}
		if err := d.set(plan.Pod, out.Owner, out.Pod); err != nil {
			return err
		}
		if err := d.set(plan.Gateway, out.GatewayOwner, out.Gateway); err != nil {
			return err
		}
		if out.Idled {
			// The unidling feature catches the idled port's connections.
			st, err := unidle.Build(s.Port, n.IPs, out.GroupIDs)
			if err != nil {
				return err
			}
			if err := d.set(plan.Pod, unidle.Owner(s.Port.Name), st); err != nil {
				return err
			}
		}
		for _, a := range s.Port.ClusterIPs {
			if addrs[a] {
				continue
			}
			addrs[a] = true
			st, err := service.AddressFlows(a)
			if err != nil {
				return err
			}
			if err := d.set(plan.Pod, service.AddressOwner(a), st); err != nil {
				return err
			}
		}
	}
	return nil
}

// buildEgressFirewall sets what the egress firewall feature wants: table
// 50's guards, and each namespace's rules under its pods' namespace id,
// with the node IPs' rules repeated for their host masquerade addresses.
func buildEgressFirewall(c *Config, d *Desired) error {
	if err := d.set(plan.Pod, efflows.GuardOwner, reconcile.State{Flows: efflows.GuardFlows()}); err != nil {
		return err
	}
	var cfg efflows.Config
	for _, ip := range c.Local.IPs {
		if m, ok := c.Masquerade.For(ip); ok {
			cfg.HostAliases = append(cfg.HostAliases, efflows.HostAlias{Host: ip, Alias: m.Host})
		}
	}
	conj := plan.NewIDAllocator(plan.EgressFirewallConjBlocks)
	for _, ns := range slices.Sorted(maps.Keys(c.EgressFirewalls)) {
		var id uint32
		for _, p := range c.Pods {
			if p.Namespace == ns {
				id = p.NamespaceID
			}
		}
		if id == 0 {
			return fmt.Errorf("egress firewall of namespace %s: no pod gives its namespace id", ns)
		}
		block, err := conj.Get(efflows.Owner(ns))
		if err != nil {
			return err
		}
		fs, err := efflows.Build(cfg, efflows.Namespace{Name: ns, ID: id, ConjBlock: block, Rules: c.EgressFirewalls[ns]})
		if err != nil {
			return err
		}
		if err := d.set(plan.Pod, efflows.Owner(ns), reconcile.State{Flows: fs}); err != nil {
			return err
		}
	}
	return nil
}

// SamplePolicy names the sample's NetworkPolicy: it selects every pod of
// the sample, for ingress and egress, and allows everything (one rule each
// way without peers or ports). Every path from or to a pod is judged by
// its conjunctions, and gets through: the probes show what the policy
// tables cost on every path.
const SamplePolicy = "allow-all"

// buildNetworkPolicy sets what the NetworkPolicy feature wants for
// SamplePolicy: the base flows, the policy's conj_id flows, each pod's
// clauses and isolation, and the peers' clauses (every address).
func buildNetworkPolicy(c *Config, d *Desired) error {
	pc := policy.Config{PodCIDRs: c.Local.PodCIDRs, Masquerade: c.Masquerade}
	base, err := policy.BaseFlows(pc)
	if err != nil {
		return err
	}
	if err := d.set(plan.Pod, policy.OwnerBase, reconcile.State{Flows: base}); err != nil {
		return err
	}
	const ingress, egress = 1, 2
	var rules []openflow.Flow
	for id, dir := range map[uint32]policy.Direction{ingress: policy.Ingress, egress: policy.Egress} {
		fs, err := policy.RuleFlows(pc, dir, id)
		if err != nil {
			return err
		}
		rules = append(rules, fs...)
	}
	namespaces := map[string]bool{}
	for _, p := range c.Pods {
		namespaces[p.Namespace] = true
		fs, err := policy.IsolationFlows(policy.Ingress, p.Port, p.IPs, false)
		if err != nil {
			return err
		}
		eg, err := policy.IsolationFlows(policy.Egress, p.Port, nil, false)
		if err != nil {
			return err
		}
		fs = append(fs, eg...)
		keys := []policy.Key{{Dir: policy.Egress, InPort: p.Port}}
		for _, ip := range p.IPs {
			keys = append(keys, policy.Key{Dir: policy.Ingress, V6: ip.Is6(), Dst: netip.PrefixFrom(ip, ip.BitLen())})
		}
		for _, k := range keys {
			id := uint32(ingress)
			if k.Dir == policy.Egress {
				id = egress
			}
			f, err := policy.ClauseFlows(k, []policy.Conj{{ID: id, Clause: k.Clause()}})
			if err != nil {
				return err
			}
			fs = append(fs, f...)
		}
		if err := d.set(plan.Pod, policy.PodOwner(p.Namespace, p.Name), reconcile.State{Flows: fs}); err != nil {
			return err
		}
	}
	for _, v6 := range []bool{false, true} {
		for _, k := range []policy.Key{{Dir: policy.Ingress, V6: v6}, {Dir: policy.Egress, V6: v6}} {
			id := uint32(ingress)
			if k.Dir == policy.Egress {
				id = egress
			}
			f, err := policy.ClauseFlows(k, []policy.Conj{{ID: id, Clause: k.Clause()}})
			if err != nil {
				return err
			}
			if err := d.set(plan.Pod, policy.PeerOwner(k), reconcile.State{Flows: f}); err != nil {
				return err
			}
		}
	}
	// One policy in each namespace of the sample's pods, all with the same
	// rules: the sample keeps the conj_id flows under the first.
	ns := slices.Sorted(maps.Keys(namespaces))
	if len(ns) == 0 {
		return nil
	}
	return d.set(plan.Pod, policy.PolicyOwner(ns[0], SamplePolicy), reconcile.State{Flows: rules})
}

// buildVNet sets what the virtual networks' connection agent wants: each
// local attachment's flows, and each VNI's remote mappings (without the
// addresses its local attachments hold).
func buildVNet(c *Config, d *Desired) error {
	taken := map[uint32][]netip.Addr{}
	for _, a := range c.Attachments {
		fs, err := vnet.LocalFlows(a)
		if err != nil {
			return err
		}
		if err := d.set(plan.Pod, vnet.LocalOwner(a.Namespace, a.Name), reconcile.State{Flows: fs}); err != nil {
			return err
		}
		taken[a.VNI] = append(taken[a.VNI], a.IP)
	}
	cfg := vnet.Config{TunnelPort: c.Ports.Tunnel, HostIP: c.Local.IPs[0]}
	for _, vni := range slices.Sorted(maps.Keys(c.RemoteAttachments)) {
		fs, problems, err := vnet.VNIFlows(cfg, vni, c.RemoteAttachments[vni], taken[vni])
		if err != nil {
			return err
		}
		if len(problems) > 0 {
			return fmt.Errorf("VNI %d: %v", vni, problems)
		}
		if err := d.set(plan.Pod, vnet.VNIOwner(vni), reconcile.State{Flows: fs}); err != nil {
			return err
		}
	}
	return nil
}
