package feature

import (
	"context"
	"net"
	"net/netip"
	"slices"

	"k8s.io/client-go/dynamic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"nodeflow/datapath/conntrack"
	"nodeflow/datapath/plan"
	"nodeflow/datapath/reconcile"
	"nodeflow/host/repair"
	"nodeflow/lib/openflow"
	"nodeflow/lib/ovsdb"
)

// Feature is one capability of the node agent, wired by the agent through
// this interface only.
type Feature interface {
	// Name names the feature in logs and metrics ("services").
	Name() string
	// Owns lists the plan features whose reconciler owners this feature
	// writes. The Host's owner writers refuse every other owner.
	Owns() []plan.Feature
	// Init registers the feature's informers (from h's shared factories),
	// event handlers and metrics. It must not block or do I/O.
	Init(h Host) error
	// Sync writes the feature's first desired state, once the informers
	// have synced and before the reconcilers start.
	Sync(ctx context.Context) error
	// Run runs the feature until ctx ends; it is called once both bridges
	// are connected.
	Run(ctx context.Context)
}

// APIUser is implemented by features that read or write API objects
// beyond what the agent itself watches (Nodes, Pods, Namespaces, the
// namespace-id locks) and writes (Events). Before the agent touches the
// node's network it checks, with a SelfSubjectAccessReview each, that its
// identity may do what they list: a missing permission then stops it while
// the node is as it was, and says which, instead of an informer that never
// syncs while the node's addresses already sit on a bridge without flows.
type APIUser interface {
	// APIAccess lists the permissions. It is called before Init.
	APIAccess() []APIAccess
}

// APIAccess is one permission: Verb on Resource (of Group, "" for the core
// group; Subresource if any) in Namespace ("" for every namespace, or a
// cluster-scoped resource), on the object Name ("" for any).
type APIAccess struct {
	Verb, Group, Resource, Subresource, Namespace, Name string
}

// String reads "list pods", "watch egressfirewalls.k8s.ovn.org", "patch
// nodes/node1".
func (p APIAccess) String() string {
	s := p.Verb + " " + p.Resource
	if p.Group != "" {
		s += "." + p.Group
	}
	if p.Subresource != "" {
		s += "/" + p.Subresource
	}
	if p.Name != "" {
		s += " " + p.Name
	}
	if p.Namespace != "" {
		s += " in namespace " + p.Namespace
	}
	return s
}

// PacketInHandler is implemented by features that take packet-ins.
type PacketInHandler interface {
	// PacketIns lists the categories (the first byte of the controller
	// action's userdata) the feature handles, with their queue sizes.
	PacketIns() []PacketInCategory
	// HandlePacketIn handles one packet-in of one of its categories. It is
	// called from the category's own goroutine, one packet at a time.
	HandlePacketIn(p PacketIn)
}

// PacketInCategory declares a category a feature handles.
type PacketInCategory struct {
	Category plan.PacketInCategory
	// Queue bounds the packet-ins waiting for the handler; more are
	// dropped and counted. 0 takes DefaultQueue.
	Queue int
}

// PacketIn is one packet-in, as dispatched to its feature.
type PacketIn struct {
	// Bridge is the bridge that sent it.
	Bridge plan.Bridge
	// Category is the first byte of the userdata.
	Category plan.PacketInCategory
	// Msg is the decoded message; Msg.Userdata[0] is the category.
	Msg *openflow.PacketIn
}

// Owners is a feature's handle on one bridge's desired state: Set replaces
// the state of one owner, nil or an empty state removes it.
type Owners interface {
	Set(owner string, st reconcile.State) error
	// List returns the owners with the given name prefix that have a
	// state ("" for all), as the store holds them.
	List(prefix string) []string
	// Contested returns the flows of st that other owners already want:
	// the ones that make Set fail with reconcile.ErrConflict.
	Contested(owner string, st reconcile.State) []reconcile.Contest
}

// Host is what the agent gives a feature.
type Host interface {
	// Log returns the feature's logger.
	Log() logrus.FieldLogger
	// Kube returns the API client.
	Kube() kubernetes.Interface
	// Informers returns the cluster-wide shared informer factory; LocalPods
	// returns one restricted to this node's pods. Informers taken from them
	// in Init are started and synced by the agent before Sync.
	Informers() informers.SharedInformerFactory
	LocalPods() informers.SharedInformerFactory
	// Recorder records events on API objects as the agent's component.
	Recorder() record.EventRecorder
	// Registry is where the feature registers its metrics.
	Registry() prometheus.Registerer
	// Node returns the current facts about this node. OnNodeChange
	// registers f to be called (from any goroutine, without locks held)
	// after they change; call it from Init.
	Node() Node
	OnNodeChange(f func())
	// NamespaceIDs returns the namespaces' ids.
	NamespaceIDs() NamespaceIDs
	// Owners returns the feature's handle on bridge b's desired state.
	Owners(b plan.Bridge) Owners
	// Flush waits until the bridges named (both when none is) hold every
	// state set before the call.
	Flush(ctx context.Context, bridges ...plan.Bridge) error
	// FlushThen waits until bridge b holds every state set before the
	// call, and sends msgs (packet-outs) on its connection right behind
	// those changes: inside the bundle that commits them when there is
	// one, so that the switch runs them against the new flows without a
	// further round trip. Before Run it only sends.
	FlushThen(ctx context.Context, b plan.Bridge, msgs ...openflow.Message) error
	// ReadFlows reads the flows bridge b has installed in table t with
	// cookies of plan feature f, over a connection of its own (it works
	// before the reconcilers start).
	ReadFlows(ctx context.Context, b plan.Bridge, t plan.TableID, f plan.Feature) ([]openflow.Flow, error)
	// Dynamic returns the agent's dynamic client, for custom resources,
	// with the agent's credentials, user agent and client-side rate limit;
	// an error where there is none (unit tests pass their own).
	Dynamic() (dynamic.Interface, error)
	// Send sends messages (packet-outs, conntrack flushes, flow deletes of
	// learned flows) on bridge b's connection; it fails before Run.
	Send(ctx context.Context, b plan.Bridge, msgs ...openflow.Message) error
	// Repairs is where the feature reports each check of the host
	// configuration it keeps (addresses, routes, neighbours, sysctls):
	// counted, a failure logged once per episode, and shown by the agent's
	// /readyz while it keeps failing.
	Repairs() *repair.Tracker
	// OnBridgeReady registers f to be called with the bridge each time its
	// switch holds the agent's flows after a connection: after the
	// start-up pass, and after the pass that follows every reconnection
	// (ovs-vswitchd restarted, or the socket dropped). f must not block;
	// call it from Init.
	OnBridgeReady(f func(b plan.Bridge))
	// FlowStats reads the statistics (packet and byte counts) of bridge
	// b's flows in table t with cookies of plan feature f, on the agent's
	// own connection of b. It fails before Run and while that connection
	// is down; the next read works again once it is back.
	FlowStats(ctx context.Context, b plan.Bridge, t plan.TableID, f plan.Feature) ([]openflow.FlowStats, error)
	// MeterStats reads the statistics of every meter of bridge b, on the
	// agent's own connection of b, as FlowStats does.
	MeterStats(ctx context.Context, b plan.Bridge) ([]openflow.MeterStats, error)
	// Interfaces returns OVSDB's Interface cache: one monitor of the
	// Interface table, shared by the whole agent, where the CNI plugin
	// describes the pods' ports (external_ids). Nil before Sync.
	Interfaces() *ovsdb.InterfaceCache
	// OVSDB returns the agent's OVSDB client, for the ports a feature
	// adds and removes itself. Nil before Sync. It holds the agent's
	// lock on the switch: a feature must not close it.
	OVSDB() *ovsdb.Client
}

// DynamicClient returns given when it is set (a test's own client), else
// the agent's dynamic client (Host.Dynamic).
func DynamicClient(h Host, given dynamic.Interface) (dynamic.Interface, error) {
	if given != nil {
		return given, nil
	}
	return h.Dynamic()
}

// NamespaceIDs maps namespaces to the 24-bit id their traffic carries in
// br0's NamespaceID register and in the VXLAN key.
type NamespaceIDs interface {
	// Lookup returns namespace's id; false when it has none yet.
	Lookup(namespace string) (uint32, bool)
	// OnChange registers f to be called with a namespace whose id changed
	// (assigned, or released); call it from Init.
	OnChange(f func(namespace string))
}

// Ports are the ofports of the ports the agent creates.
type Ports struct {
	Tunnel, PodPatch, Mgmt uint32 // on br0
	Uplink, GatewayPatch   uint32 // on breth0
}

// Node is what features know about this node. Slices are shared: callers
// must not modify them.
type Node struct {
	// Name is this node's name.
	Name string
	// Zone is the node's topology.kubernetes.io/zone label ("" for none),
	// which topology-aware routing compares with endpoints' zone hints.
	Zone string
	// PodBridge and GatewayBridge are the bridges' names (br0, breth0).
	PodBridge, GatewayBridge string
	// Ports are the agent's ports on both bridges.
	Ports Ports
	// IPs are the node's addresses (on breth0), at most one per family
	// first; Secondary are the host's other addresses (a secondary IP on
	// lo, say), sorted.
	IPs       []netip.Prefix
	Secondary []netip.Addr
	// NodePortAddrs are the addresses NodePorts answer on: the node IPs,
	// or, when the operator lists nodePortAddresses, the node's addresses
	// (IPs and Secondary) inside them. Never nil.
	NodePortAddrs []netip.Addr
	// PodCIDRs are this node's pod subnets.
	PodCIDRs []netip.Prefix
	// ClusterCIDRs and ServiceCIDRs, one per family.
	ClusterCIDRs, ServiceCIDRs []netip.Prefix
	// Masquerade is the masquerade plan (169.254.169.0/29, fd69::/125).
	Masquerade conntrack.Plan
	// RouterMAC is the pod subnets' gateway MAC, MgmtMAC mp0's, HostMAC
	// breth0's LOCAL port's.
	RouterMAC, MgmtMAC, HostMAC net.HardwareAddr
	// MTU of the pod network.
	MTU int
}

// Addrs returns the node IPs without their prefix lengths.
func (n Node) Addrs() []netip.Addr {
	out := make([]netip.Addr, 0, len(n.IPs))
	for _, p := range n.IPs {
		out = append(out, p.Addr())
	}
	return out
}

// NodePortAddrs returns the addresses NodePorts answer on: the node IPs
// when cidrs is empty (kube-proxy's "primary"), else every address of n
// (IPs and Secondary) inside one of cidrs, sorted. The result is never
// nil.
func NodePortAddrs(n Node, cidrs []netip.Prefix) []netip.Addr {
	if len(cidrs) == 0 {
		return n.Addrs()
	}
	out := []netip.Addr{}
	for _, a := range slices.Concat(n.Addrs(), n.Secondary) {
		if slices.ContainsFunc(cidrs, func(p netip.Prefix) bool { return p.Contains(a) }) && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// Equal reports whether n and o hold the same facts.
func (n Node) Equal(o Node) bool {
	return n.Name == o.Name && n.Zone == o.Zone && n.PodBridge == o.PodBridge && n.GatewayBridge == o.GatewayBridge && n.Ports == o.Ports &&
		slices.Equal(n.IPs, o.IPs) && slices.Equal(n.Secondary, o.Secondary) && slices.Equal(n.NodePortAddrs, o.NodePortAddrs) &&
		slices.Equal(n.PodCIDRs, o.PodCIDRs) &&
		slices.Equal(n.ClusterCIDRs, o.ClusterCIDRs) && slices.Equal(n.ServiceCIDRs, o.ServiceCIDRs) &&
		n.Masquerade == o.Masquerade && slices.Equal(n.RouterMAC, o.RouterMAC) && slices.Equal(n.MgmtMAC, o.MgmtMAC) &&
		slices.Equal(n.HostMAC, o.HostMAC) && n.MTU == o.MTU
}
