package sample

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"nodeflow/datapath/egressfirewallflows"
	"nodeflow/datapath/gatewayflows"
	"nodeflow/datapath/idlingflows"
	"nodeflow/datapath/networkpolicyflows"
	"nodeflow/datapath/nodeflows"
	"nodeflow/datapath/plan"
	"nodeflow/datapath/puntflows"
	"nodeflow/datapath/reconcile"
	"nodeflow/datapath/serviceflows"
	"nodeflow/datapath/vnetflows"
	"nodeflow/lib/openflow"
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
		if err := d.set(b, gatewayflows.PipelineOwner(b), reconcile.State{Flows: gatewayflows.PipelineFlows(b)}); err != nil {
			return err
		}
	}
	return nil
}

// nodeConfig is the node builders' model of c.Local, as the agent fills it.
func (c *Config) nodeConfig() nodeflows.Config {
	return nodeflows.Config{
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
	gfs, err := gatewayflows.Flows(gatewayflows.Config{
		UplinkPort: c.Ports.Uplink, PatchPort: c.Ports.GatewayPatch, NodeIPs: c.Local.IPs,
		ServiceCIDRs: c.ServiceCIDRs, Masquerade: c.Masquerade, RouterMAC: c.RouterMAC(), HostMAC: c.Local.MAC,
		SecondaryIPs: c.Local.Secondary,
	})
	if err != nil {
		return err
	}
	if err := d.set(plan.Gateway, gatewayflows.Owner, reconcile.State{Flows: gfs}); err != nil {
		return err
	}
	fs, err := nodeflows.NodeFlows(nc)
	if err != nil {
		return err
	}
	local := reconcile.State{Flows: fs}
	for _, port := range []uint32{c.Ports.Tunnel, c.Ports.PodPatch, c.Ports.Mgmt} {
		ps, err := puntflows.SourceState(puntflows.Source{Port: port})
		if err != nil {
			return err
		}
		local.Flows = append(local.Flows, ps.Flows...)
		local.Meters = append(local.Meters, ps.Meters...)
	}
	if err := d.set(plan.Pod, nodeflows.OwnerLocal, local); err != nil {
		return err
	}
	fs, err = nodeflows.RemoteFlows(nc, nodeflows.Remote{Name: c.Remote.Name, TunnelIP: c.Remote.IPs[0], PodCIDRs: c.Remote.PodCIDRs, NodeIPs: c.Remote.IPs, ReturnsByTunnel: true})
	if err != nil {
		return err
	}
	if err := d.set(plan.Pod, nodeflows.RemoteOwner(c.Remote.Name), reconcile.State{Flows: fs}); err != nil {
		return err
	}
	ndPorts := []uint32{c.Ports.Mgmt}
	namespaces := map[string]uint32{}
	for _, p := range c.Pods {
		namespaces[p.Namespace] = p.NamespaceID
	}
	for _, ns := range slices.Sorted(maps.Keys(namespaces)) {
		st, err := puntflows.NamespaceState(namespaces[ns])
		if err != nil {
			return err
		}
		if err := d.set(plan.Pod, puntflows.NamespaceOwner(ns), st); err != nil {
			return err
		}
	}
	for _, p := range c.Pods {
		fs, err := nodeflows.PodFlows(nc, p)
		if err != nil {
			return err
		}
		ps, err := puntflows.SourceState(puntflows.Source{Port: p.Port, Dsts: p.IPs, Namespace: p.NamespaceID})
		if err != nil {
			return err
		}
		if err := d.set(plan.Pod, nodeflows.PodOwner(p.Namespace, p.Name), reconcile.State{Flows: append(fs, ps.Flows...), Meters: ps.Meters}); err != nil {
			return err
		}
		ndPorts = append(ndPorts, p.Port)
	}
	if err := d.set(plan.Pod, nodeflows.OwnerND, reconcile.State{Flows: nodeflows.NDFlows(ndPorts)}); err != nil {
		return err
	}
	fs, err = nodeflows.GatewayOutputFlows(nc, c.NextHops)
	if err != nil {
		return err
	}
	return d.set(plan.Pod, nodeflows.OwnerNextHops, reconcile.State{Flows: fs})
}

// serviceNode is the service builder's model of c.Local, as the agent
// fills it: the first address of each family is the node IP, the others
// and the host's secondary addresses are secondary, sorted.
func (c *Config) serviceNode() serviceflows.Node {
	n := serviceflows.Node{
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
	if err := d.set(plan.Pod, serviceflows.RejectMeterOwner, reconcile.State{Meters: []openflow.MeterEntry{serviceflows.RejectMeter()}}); err != nil {
		return err
	}
	if err := d.set(plan.Pod, idlingflows.MeterOwner, reconcile.State{Meters: []openflow.MeterEntry{idlingflows.Meter()}}); err != nil {
		return err
	}
	cidrs, err := serviceflows.CIDRFlows(c.ServiceCIDRs)
	if err != nil {
		return err
	}
	if err := d.set(plan.Pod, serviceflows.CIDROwner, cidrs); err != nil {
		return err
	}
	n := c.serviceNode()
	ids := plan.NewIDAllocator(plan.ServiceGroups)
	addrs := map[netip.Addr]bool{}
	for _, s := range c.Services {
		out, err := serviceflows.Build(&n, serviceflows.Input{Port: s.Port, Endpoints: s.Endpoints}, ids.Get)
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
			st, err := idlingflows.Build(s.Port, n.IPs, out.GroupIDs)
			if err != nil {
				return err
			}
			if err := d.set(plan.Pod, idlingflows.Owner(s.Port.Name), st); err != nil {
				return err
			}
		}
		for _, a := range s.Port.ClusterIPs {
			if addrs[a] {
				continue
			}
			addrs[a] = true
			st, err := serviceflows.AddressFlows(a)
			if err != nil {
				return err
			}
			if err := d.set(plan.Pod, serviceflows.AddressOwner(a), st); err != nil {
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
	if err := d.set(plan.Pod, egressfirewallflows.GuardOwner, reconcile.State{Flows: egressfirewallflows.GuardFlows()}); err != nil {
		return err
	}
	var cfg egressfirewallflows.Config
	for _, ip := range c.Local.IPs {
		if m, ok := c.Masquerade.For(ip); ok {
			cfg.HostAliases = append(cfg.HostAliases, egressfirewallflows.HostAlias{Host: ip, Alias: m.Host})
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
		block, err := conj.Get(egressfirewallflows.Owner(ns))
		if err != nil {
			return err
		}
		fs, err := egressfirewallflows.Build(cfg, egressfirewallflows.Namespace{Name: ns, ID: id, ConjBlock: block, Rules: c.EgressFirewalls[ns]})
		if err != nil {
			return err
		}
		if err := d.set(plan.Pod, egressfirewallflows.Owner(ns), reconcile.State{Flows: fs}); err != nil {
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
	pc := networkpolicyflows.Config{PodCIDRs: c.Local.PodCIDRs, Masquerade: c.Masquerade}
	base, err := networkpolicyflows.BaseFlows(pc)
	if err != nil {
		return err
	}
	if err := d.set(plan.Pod, networkpolicyflows.OwnerBase, reconcile.State{Flows: base}); err != nil {
		return err
	}
	const ingress, egress = 1, 2
	var rules []openflow.Flow
	for id, dir := range map[uint32]networkpolicyflows.Direction{ingress: networkpolicyflows.Ingress, egress: networkpolicyflows.Egress} {
		fs, err := networkpolicyflows.RuleFlows(pc, dir, id)
		if err != nil {
			return err
		}
		rules = append(rules, fs...)
	}
	namespaces := map[string]bool{}
	for _, p := range c.Pods {
		namespaces[p.Namespace] = true
		fs, err := networkpolicyflows.IsolationFlows(networkpolicyflows.Ingress, p.Port, p.IPs, false)
		if err != nil {
			return err
		}
		eg, err := networkpolicyflows.IsolationFlows(networkpolicyflows.Egress, p.Port, nil, false)
		if err != nil {
			return err
		}
		fs = append(fs, eg...)
		keys := []networkpolicyflows.Key{{Dir: networkpolicyflows.Egress, InPort: p.Port}}
		for _, ip := range p.IPs {
			keys = append(keys, networkpolicyflows.Key{Dir: networkpolicyflows.Ingress, V6: ip.Is6(), Dst: netip.PrefixFrom(ip, ip.BitLen())})
		}
		for _, k := range keys {
			id := uint32(ingress)
			if k.Dir == networkpolicyflows.Egress {
				id = egress
			}
			f, err := networkpolicyflows.ClauseFlows(k, []networkpolicyflows.Conj{{ID: id, Clause: k.Clause()}})
			if err != nil {
				return err
			}
			fs = append(fs, f...)
		}
		if err := d.set(plan.Pod, networkpolicyflows.PodOwner(p.Namespace, p.Name), reconcile.State{Flows: fs}); err != nil {
			return err
		}
	}
	for _, v6 := range []bool{false, true} {
		for _, k := range []networkpolicyflows.Key{{Dir: networkpolicyflows.Ingress, V6: v6}, {Dir: networkpolicyflows.Egress, V6: v6}} {
			id := uint32(ingress)
			if k.Dir == networkpolicyflows.Egress {
				id = egress
			}
			f, err := networkpolicyflows.ClauseFlows(k, []networkpolicyflows.Conj{{ID: id, Clause: k.Clause()}})
			if err != nil {
				return err
			}
			if err := d.set(plan.Pod, networkpolicyflows.PeerOwner(k), reconcile.State{Flows: f}); err != nil {
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
	return d.set(plan.Pod, networkpolicyflows.PolicyOwner(ns[0], SamplePolicy), reconcile.State{Flows: rules})
}

// buildVNet sets what the virtual networks' connection agent wants: each
// local attachment's flows, and each VNI's remote mappings (without the
// addresses its local attachments hold).
func buildVNet(c *Config, d *Desired) error {
	taken := map[uint32][]netip.Addr{}
	for _, a := range c.Attachments {
		fs, err := vnetflows.LocalFlows(a)
		if err != nil {
			return err
		}
		if err := d.set(plan.Pod, vnetflows.LocalOwner(a.Namespace, a.Name), reconcile.State{Flows: fs}); err != nil {
			return err
		}
		taken[a.VNI] = append(taken[a.VNI], a.IP)
	}
	cfg := vnetflows.Config{TunnelPort: c.Ports.Tunnel, HostIP: c.Local.IPs[0]}
	for _, vni := range slices.Sorted(maps.Keys(c.RemoteAttachments)) {
		fs, problems, err := vnetflows.VNIFlows(cfg, vni, c.RemoteAttachments[vni], taken[vni])
		if err != nil {
			return err
		}
		if len(problems) > 0 {
			return fmt.Errorf("VNI %d: %v", vni, problems)
		}
		if err := d.set(plan.Pod, vnetflows.VNIOwner(vni), reconcile.State{Flows: fs}); err != nil {
			return err
		}
	}
	return nil
}
