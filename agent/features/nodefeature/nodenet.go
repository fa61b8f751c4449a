// Package nodefeature is the node networking feature: br0's node-wide flows
// (classifier, conntrack, routing), the flows of every local pod (port
// security with its namespace id, ARP, delivery), the VXLAN routes to the
// other nodes, the next hops toward the uplink, breth0's default flows, and
// the host side that goes with them (addresses, routes and neighbours of
// the host-to-services design, over netlink; the pod network's CNI
// configuration).
//
// It rebuilds only what changed: the node-wide flows when the node's facts
// change, one pod's flows when its port or its namespace id changes, one
// remote node's flows when that Node changes, the next hops on neighbour
// events.
package nodefeature

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"nodeflow/agent/feature"
	"nodeflow/datapath/conntrack"
	"nodeflow/datapath/gatewayflows"
	"nodeflow/datapath/nodeflows"
	"nodeflow/datapath/plan"
	"nodeflow/datapath/puntflows"
	"nodeflow/datapath/reconcile"
	"nodeflow/host/cni"
	"nodeflow/host/netstack"
	"nodeflow/host/repair"
	"nodeflow/lib/openflow"
)

// Options configure node networking.
type Options struct {
	// CNIConfDir receives the pod network's CNI configuration ("" writes
	// none); CNIDataDir is the plugin's IPAM directory, where mp0's
	// addresses are reserved.
	CNIConfDir, CNIDataDir string
	// DatapathType is the bridges' datapath type.
	DatapathType string
	// MgmtPortName is mp0's name.
	MgmtPortName string
	// HostCheckInterval is how often the host side is re-checked besides
	// netlink events.
	HostCheckInterval time.Duration
	// SharedPacketInMeters installs the previous design of the punt stage:
	// one meter per packet-in category for the whole node, instead of one
	// per source (datapath/puntflows). Only the benchmark that compares the two
	// sets it (the agent's hidden --packet-in-meters=shared).
	SharedPacketInMeters bool
	// MeterStatsInterval is how often the meters' drops are read (0:
	// DefaultMeterStatsInterval).
	MeterStatsInterval time.Duration
}

// probeInterval spaces the probes of one unresolved next hop.
const probeInterval = 10 * time.Second

// NodeNet is the node networking feature.
type NodeNet struct {
	opts Options
	h    feature.Host
	log  logrus.FieldLogger
	pod  feature.Owners
	gw   feature.Owners

	nodes cache.SharedIndexInformer

	hostChanges prometheus.Counter
	hostErrors  prometheus.Counter
	modelErrors *prometheus.CounterVec

	// Dirty flags, merged by kind.
	nodeDirty, remotesDirty, podsDirty, hopsDirty, hostDirty chan struct{}

	// Sync state, owned by the loop goroutine (and Sync before it).
	last     feature.Node
	haveLast bool
	pods     map[string]nodeflows.Pod    // owner -> model installed
	remotes  map[string]nodeflows.Remote // owner -> model installed
	ndPorts  []uint32
	hops     []plan.NextHop
	probed   map[netip.Addr]time.Time
	remoteIP []netip.Addr
	// hostDone is set once the host side was complete: what is put back
	// after that counts as repaired.
	hostDone bool

	mu       sync.Mutex
	reported map[string]string // remote node -> last problem reported

	// warm keeps the userspace datapath's tunnel neighbours known (nil
	// with the kernel datapath).
	warm *tunnelWarmer

	// puntNS holds the namespace id of each namespace punt owner set
	// (punt.go); owned by the loop goroutine.
	puntNS map[string]uint32
	// The punt stage's sources by port and namespace id, for the meters'
	// drops (punt.go).
	srcMu      sync.Mutex
	sources    map[uint32]string
	namespaces map[uint32]string
	meters     meterMetrics
}

// New returns the node networking feature.
func New(opts Options) *NodeNet {
	feature.DefaultIfUnset(&opts.HostCheckInterval, 30*time.Second)
	feature.DefaultIfUnset(&opts.MeterStatsInterval, DefaultMeterStatsInterval)
	return &NodeNet{
		opts:      opts,
		nodeDirty: make(chan struct{}, 1), remotesDirty: make(chan struct{}, 1), podsDirty: make(chan struct{}, 1),
		hopsDirty: make(chan struct{}, 1), hostDirty: make(chan struct{}, 1),
		pods: map[string]nodeflows.Pod{}, remotes: map[string]nodeflows.Remote{}, probed: map[netip.Addr]time.Time{}, puntNS: map[string]uint32{},
		reported: map[string]string{},
	}
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Name implements feature.Feature.
func (n *NodeNet) Name() string { return "nodenet" }

// Owns implements feature.Feature.
func (n *NodeNet) Owns() []plan.Feature {
	return []plan.Feature{plan.FeatureNode, plan.FeaturePod, plan.FeatureGateway}
}

// APIAccess implements feature.APIUser: every Node.
func (n *NodeNet) APIAccess() []feature.APIAccess {
	return []feature.APIAccess{{Verb: "list", Resource: "nodes"}, {Verb: "watch", Resource: "nodes"}}
}

// Init implements feature.Feature: it watches every Node (their pod
// subnets and addresses give the VXLAN routes) and the namespace ids.
func (n *NodeNet) Init(h feature.Host) error {
	n.h, n.log = h, h.Log()
	n.pod, n.gw = h.Owners(plan.Pod), h.Owners(plan.Gateway)
	n.hostChanges = feature.NewCounter("nodeflow_host_changes_total", "Host addresses, routes and neighbours the agent had to (re)install.")
	n.hostErrors = feature.NewCounter("nodeflow_host_errors_total", "Failed attempts to configure the host side.")
	n.modelErrors = feature.NewCounterVec("nodeflow_model_errors_total", "Objects whose flows could not be built, by kind.", "kind")
	if err := feature.Register(h.Registry(), n.hostChanges, n.hostErrors, n.modelErrors); err != nil {
		return fmt.Errorf("nodenet: metrics: %w", err)
	}
	var err error
	if n.meters, err = newMeterMetrics(h.Registry()); err != nil {
		return err
	}
	n.nodes = h.Informers().Core().V1().Nodes().Informer()
	if _, err := n.nodes.AddEventHandler(feature.OnEveryChange(func(any) { poke(n.remotesDirty) })); err != nil {
		return fmt.Errorf("nodenet: nodes: %w", err)
	}
	h.OnNodeChange(func() { poke(n.nodeDirty) })
	h.NamespaceIDs().OnChange(func(string) { poke(n.podsDirty) })
	if n.opts.DatapathType == "netdev" {
		n.warm = newTunnelWarmer(h, n.log)
		if err := h.Registry().Register(n.warm.sent); err != nil {
			return fmt.Errorf("nodenet: metrics: %w", err)
		}
		h.OnBridgeReady(n.warm.ready)
	}
	return nil
}

// Sync implements feature.Feature: the host side, the CNI configuration,
// and every flow.
func (n *NodeNet) Sync(ctx context.Context) error {
	n.writeCNI()
	n.ensureHost()
	n.syncNode()
	n.syncRemotes()
	n.syncPods()
	n.syncHops()
	return nil
}

// Run implements feature.Feature.
func (n *NodeNet) Run(ctx context.Context) {
	if ifc := n.h.Interfaces(); ifc != nil {
		go ifc.OnChange(ctx, func() { poke(n.podsDirty) })
	}
	go n.watchNetlink(ctx)
	go n.publishPipeline(ctx)
	go n.runMeterStats(ctx)
	if n.warm != nil {
		go n.warm.run(ctx)
	}
	t := time.NewTicker(n.opts.HostCheckInterval)
	defer t.Stop()
	// A host side that could not be fully configured is checked again
	// soon (hostrepair.Backoff), not only at the next event or tick.
	var retry <-chan time.Time
	var backoff repair.Backoff
	host := func() {
		retry = nil
		if n.ensureHost() {
			backoff.Reset()
		} else {
			retry = time.After(backoff.Failed())
		}
	}
	// Again now: what changed since Sync, and a retry scheduled if it is
	// not complete.
	host()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.nodeDirty:
			n.syncNode()
			n.syncRemotes()
			n.syncPods()
			n.syncHops()
		case <-n.remotesDirty:
			n.syncRemotes()
			n.syncHops()
		case <-n.podsDirty:
			n.syncPods()
		case <-n.hopsDirty:
			n.syncHops()
		case <-n.hostDirty:
			host()
			n.syncHops()
		case <-retry:
			host()
		case <-t.C:
			n.writeCNI()
			host()
			n.syncHops()
		}
	}
}

func (n *NodeNet) nodeConfig(nd feature.Node) nodeflows.Config {
	return nodeflows.Config{
		TunnelPort: nd.Ports.Tunnel, PatchPort: nd.Ports.PodPatch, MgmtPort: nd.Ports.Mgmt,
		RouterMAC: nd.RouterMAC, MgmtMAC: nd.MgmtMAC, HostMAC: nd.HostMAC,
		PodCIDRs: nd.PodCIDRs, ClusterCIDRs: nd.ClusterCIDRs, ServiceCIDRs: nd.ServiceCIDRs,
		NodeIPs: nd.Addrs(), Masquerade: nd.Masquerade,
	}
}

// set replaces owner's flows, logging a failure.
func (n *NodeNet) set(o feature.Owners, owner string, fs []openflow.Flow) bool {
	return n.setState(o, owner, reconcile.State{Flows: fs})
}

// setState replaces owner's state, logging a failure.
func (n *NodeNet) setState(o feature.Owners, owner string, st reconcile.State) bool {
	if err := o.Set(owner, st); err != nil {
		n.modelErrors.WithLabelValues("owner").Inc()
		n.log.WithError(err).WithField("owner", owner).Error("cannot set desired flows")
		return false
	}
	return true
}

// syncNode rebuilds the node-wide flows of both bridges when the node's
// facts changed.
func (n *NodeNet) syncNode() {
	nd := n.h.Node()
	if n.haveLast && nd.Equal(n.last) {
		return
	}
	nc := n.nodeConfig(nd)
	gfs, err := gatewayflows.Flows(gatewayflows.Config{
		UplinkPort: nd.Ports.Uplink, PatchPort: nd.Ports.GatewayPatch, NodeIPs: nd.Addrs(),
		ServiceCIDRs: nd.ServiceCIDRs, Masquerade: nd.Masquerade, RouterMAC: nd.RouterMAC, HostMAC: nd.HostMAC,
		SecondaryIPs: nd.Secondary,
	})
	ok := true
	if err != nil {
		n.log.WithError(err).Error("breth0 default flows")
		ok = false
	} else {
		ok = n.set(n.gw, gatewayflows.Owner, gfs) && ok
	}
	if fs, err := nodeflows.NodeFlows(nc); err != nil {
		n.log.WithError(err).Error("br0 node flows")
		ok = false
	} else if st, err := n.localState(nc, fs); err != nil {
		n.log.WithError(err).Error("br0 node flows: punt stage")
		ok = false
	} else {
		ok = n.setState(n.pod, nodeflows.OwnerLocal, st) && ok
	}
	if ok {
		n.last, n.haveLast = nd, true
	}
	// Everything else depends on the node's facts too.
	clear(n.pods)
	clear(n.remotes)
	n.hops, n.ndPorts = nil, nil
}

// syncRemotes sets the flows of the remote nodes whose model changed.
// Nodes are taken oldest first: a node whose pod subnet overlaps an older
// node's is refused, so a bad Node object cannot take over another node's
// traffic.
func (n *NodeNet) syncRemotes() {
	nd := n.h.Node()
	nc := n.nodeConfig(nd)
	var nodes []*corev1.Node
	for _, obj := range n.nodes.GetStore().List() {
		nodes = append(nodes, obj.(*corev1.Node))
	}
	sort.Slice(nodes, func(i, j int) bool {
		ti, tj := nodes[i].CreationTimestamp, nodes[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return nodes[i].Name < nodes[j].Name
	})
	want := map[string]bool{}
	taken := map[netip.Prefix]string{}
	var ips []netip.Addr
	for _, k := range nodes {
		if k.Name == nd.Name {
			continue
		}
		owner := nodeflows.RemoteOwner(k.Name)
		r, err := RemoteOf(k)
		if err == nil {
			err = Overlapping(r, taken)
		}
		if err != nil {
			n.reportNode(k, err)
			// Keep whatever was installed for it before.
			if old, ok := n.remotes[owner]; ok {
				want[owner] = true
				ips = append(ips, old.TunnelIP)
			}
			continue
		}
		for _, p := range r.PodCIDRs {
			taken[p] = k.Name
		}
		n.clearReport(k.Name)
		want[owner] = true
		ips = append(ips, r.TunnelIP)
		if old, ok := n.remotes[owner]; ok && reflect.DeepEqual(old, r) {
			continue
		}
		fs, err := nodeflows.RemoteFlows(nc, r)
		if err != nil {
			n.reportNode(k, err)
			continue
		}
		if n.set(n.pod, owner, fs) {
			n.remotes[owner] = r
		}
	}
	for _, owner := range n.pod.List("node/remote/") {
		if !want[owner] {
			if _, exists, _ := n.nodes.GetStore().GetByKey(strings.TrimPrefix(owner, "node/remote/")); !exists {
				n.set(n.pod, owner, nil)
				delete(n.remotes, owner)
			}
		}
	}
	sort.Slice(ips, func(i, j int) bool { return ips[i].Less(ips[j]) })
	if !reflect.DeepEqual(ips, n.remoteIP) {
		n.remoteIP = ips
		poke(n.hopsDirty)
	}
}

// syncPods sets the flows of the local pods whose port or namespace id
// changed, from the ports the CNI plugin described in OVSDB. A pod whose
// namespace has no id yet gets no flows (its traffic is dropped) until it
// has one: without its id, its egress firewall and policies could not
// apply.
func (n *NodeNet) syncPods() {
	nc := n.nodeConfig(n.h.Node())
	want := map[string]bool{}
	nd := []uint32{nc.MgmtPort}
	var pods []nodeflows.Pod
	for _, p := range n.localPods() {
		id, ok := n.h.NamespaceIDs().Lookup(p.Namespace)
		if !ok {
			n.log.WithFields(logrus.Fields{"namespace": p.Namespace, "pod": p.Name}).Debug("namespace has no id yet; pod waits")
			continue
		}
		p.NamespaceID = id
		pods = append(pods, p)
	}
	// The namespaces' punt meters before the pods' flows that use them.
	n.syncPuntNamespaces(pods, want)
	for _, p := range pods {
		owner := nodeflows.PodOwner(p.Namespace, p.Name)
		want[owner] = true
		nd = append(nd, p.Port)
		if old, ok := n.pods[owner]; ok && reflect.DeepEqual(old, p) {
			continue
		}
		fs, err := nodeflows.PodFlows(nc, p)
		var st reconcile.State
		if err == nil {
			st, err = n.withPunt(fs, puntflows.Source{Port: p.Port, Dsts: p.IPs, Namespace: p.NamespaceID})
		}
		if err != nil {
			n.modelErrors.WithLabelValues("pod").Inc()
			n.log.WithError(err).Warn("pod port")
			continue
		}
		if n.setState(n.pod, owner, st) {
			n.pods[owner] = p
		}
	}
	// Gone pods' flows before their namespaces' meters.
	stale := n.pod.List("pod/")
	for _, last := range []bool{false, true} {
		for _, owner := range stale {
			if !want[owner] && isPuntNamespaceOwner(owner) == last {
				n.set(n.pod, owner, nil)
				delete(n.pods, owner)
			}
		}
	}
	n.setSources(nc, n.pods)
	sort.Slice(nd, func(i, j int) bool { return nd[i] < nd[j] })
	if !reflect.DeepEqual(nd, n.ndPorts) && n.set(n.pod, nodeflows.OwnerND, nodeflows.NDFlows(nd)) {
		n.ndPorts = nd
	}
}

// syncHops sets the next hops toward the uplink: the remote nodes'
// addresses and the default gateways, with MACs from the neighbour table;
// unresolved ones are probed.
func (n *NodeNet) syncHops() {
	nd := n.h.Node()
	var skip []netip.Prefix
	for _, m := range []conntrack.Masquerade{nd.Masquerade.V4, nd.Masquerade.V6} {
		if m.Subnet.IsValid() {
			skip = append(skip, m.Subnet)
		}
	}
	hops, missing, err := netstack.NextHops(nd.GatewayBridge, n.remoteIP, skip)
	if err != nil {
		n.log.WithError(err).Warn("next hops")
	}
	now := time.Now()
	for _, ip := range missing {
		// At most one probe per address every probeInterval: a neighbour
		// that never answers must not keep the loop busy.
		if last, ok := n.probed[ip]; ok && now.Sub(last) < probeInterval {
			continue
		}
		n.probed[ip] = now
		netstack.Probe(ip)
	}
	if n.warm != nil {
		n.warm.offer(hops, n.remoteIP)
	}
	if n.hops != nil && reflect.DeepEqual(hops, n.hops) {
		return
	}
	fs, err := nodeflows.GatewayOutputFlows(n.nodeConfig(nd), hops)
	if err != nil {
		n.log.WithError(err).Error("gateway output flows")
		return
	}
	if n.set(n.pod, nodeflows.OwnerNextHops, fs) {
		n.hops = hops
		if n.hops == nil {
			n.hops = []plan.NextHop{}
		}
	}
}

// localPods returns the pods attached to br0, from the external_ids the CNI
// plugin wrote on their interfaces.
func (n *NodeNet) localPods() []nodeflows.Pod {
	ifc := n.h.Interfaces()
	if ifc == nil {
		return nil
	}
	var out []nodeflows.Pod
	for _, i := range ifc.List() {
		ids := i.ExternalIDs
		if ids[cni.ExternalIDOwner] != cni.OwnerCNI || i.Ofport <= 0 {
			continue
		}
		mac, err := net.ParseMAC(ids[cni.ExternalIDMAC])
		if err != nil {
			n.log.WithField("interface", i.Name).Warn("pod port without a valid mac in external_ids")
			continue
		}
		var ips []netip.Addr
		for _, s := range strings.Split(ids[cni.ExternalIDIP], ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			if p, err := netip.ParsePrefix(s); err == nil {
				ips = append(ips, p.Addr())
			} else if ip, err := netip.ParseAddr(s); err == nil {
				ips = append(ips, ip)
			}
		}
		out = append(out, nodeflows.Pod{Namespace: ids[cni.ExternalIDPodNamespace], Name: ids[cni.ExternalIDPodName],
			Port: uint32(i.Ofport), MAC: mac, IPs: ips})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Port < out[j].Port })
	return out
}

// writeCNI writes the pod network's CNI configuration and reserves mp0's
// addresses in its IPAM.
func (n *NodeNet) writeCNI() {
	nd := n.h.Node()
	var reserved []netip.Addr
	for _, p := range nd.PodCIDRs {
		reserved = append(reserved, plan.MgmtIP(p))
	}
	// The CNI plugin reaches OVSDB where the agent does.
	var endpoint string
	if db := n.h.OVSDB(); db != nil {
		endpoint = db.Endpoint()
	}
	changed, err := netstack.WriteCNIConfig(netstack.CNIConfig{ConfDir: n.opts.CNIConfDir, DataDir: n.opts.CNIDataDir, OVSDB: endpoint,
		DatapathType: n.opts.DatapathType, MTU: nd.MTU, Subnets: nd.PodCIDRs, Reserved: reserved, ReservedFor: n.opts.MgmtPortName})
	if err != nil {
		n.log.WithError(err).Error("cni configuration")
	} else if changed {
		n.log.WithField("dir", n.opts.CNIConfDir).Info("wrote cni configuration")
	}
}

// ensureHost configures the host side (hostnet.EnsureHost) and reports
// each part to the agent's repairs: what it put back after the first
// complete configuration counts as repaired. It reports whether every
// part is in place.
func (n *NodeNet) ensureHost() bool {
	nd := n.h.Node()
	rep := netstack.EnsureHost(netstack.HostPlan{
		Gateway: nd.GatewayBridge, Mgmt: n.opts.MgmtPortName, NodeIPs: nd.Addrs(), ServiceCIDRs: nd.ServiceCIDRs,
		ClusterCIDRs: nd.ClusterCIDRs, PodCIDRs: nd.PodCIDRs, Masquerade: nd.Masquerade,
		MgmtMAC: nd.MgmtMAC, RouterMAC: nd.RouterMAC, MTU: nd.MTU,
	})
	if c := rep.Changes(); c > 0 {
		n.hostChanges.Add(float64(c))
		n.log.WithField("changes", c).Info("host side configured")
	}
	err := rep.Err()
	if err != nil {
		n.hostErrors.Inc()
		n.log.WithError(err).Debug("host side not fully configured; retrying")
	}
	for _, p := range rep {
		repaired := p.Changes
		if !n.hostDone {
			repaired = 0 // the first configuration, not a repair
		}
		n.h.Repairs().Observe(p.What, repaired, p.Err)
	}
	n.hostDone = n.hostDone || err == nil
	return err == nil
}

// watchNetlink re-checks the host side on link, address and route events,
// and on the deletion of a permanent neighbour or any change of the
// masquerade neighbours; other neighbour events change next-hop MACs in
// the flows.
func (n *NodeNet) watchNetlink(ctx context.Context) {
	err := netstack.Watch(ctx, n.log, netstack.LinkEvents|netstack.AddrEvents|netstack.RouteEvents|netstack.NeighEvents, func(ev netstack.Event) {
		switch {
		case ev.Kind == netstack.Resync:
			poke(n.hostDirty)
			poke(n.hopsDirty)
		case ev.Kind != netstack.NeighEvents:
			poke(n.hostDirty)
		case ev.Deleted && ev.Permanent, n.isMasquerade(ev.IP):
			poke(n.hostDirty)
			poke(n.hopsDirty)
		default:
			poke(n.hopsDirty)
		}
	})
	if err != nil {
		n.log.WithError(err).Warn("no netlink events: the host side is checked every " + n.opts.HostCheckInterval.String() + " only")
	}
}

// isMasquerade reports whether ip is the router masquerade address or the
// dummy next hop of the host's service routes (169.254.169.1 and .4, fd69::1
// and ::4), whose permanent neighbours the host side keeps.
func (n *NodeNet) isMasquerade(ip netip.Addr) bool {
	m, ok := n.h.Node().Masquerade.For(ip)
	return ok && (m.NextHop == ip || m.Router == ip)
}
