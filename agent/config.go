package agent

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"time"

	"nodeflow/datapath/conntrack"
)

// Config is the agent's configuration (the flags of `nodeflow agent`).
// The agent's default client-side rate limit of API requests: its watches
// are long-lived and cost nothing against it, but a burst of virtual
// networks' attachments writes a status each (and lists two informers per
// new VNI), and client-go's own default (5 a second) made a hundred
// attachments wait 15 s for their turn.
const (
	DefaultKubeAPIQPS   = 50
	DefaultKubeAPIBurst = 100
)

type Config struct {
	// Kubeconfig is the path of a kubeconfig; "" means in-cluster.
	Kubeconfig string
	// KubeAPIQPS and KubeAPIBurst are the client-side rate limit of the
	// agent's API requests (0: DefaultKubeAPIQPS, DefaultKubeAPIBurst).
	KubeAPIQPS   float32
	KubeAPIBurst int
	// NodeName is this node's name.
	NodeName string
	// Version is the agent's version, written into both bridges' version
	// notes.
	Version string
	// OVSRundir holds db.sock and the bridges' .mgmt sockets.
	OVSRundir string
	// PodBridge and GatewayBridge are br0 and breth0.
	PodBridge, GatewayBridge string
	// Uplink is the node's physical interface (eth0).
	Uplink string
	// DatapathType is "system" or "netdev".
	DatapathType string
	// ClusterCIDRs and ServiceCIDRs, one per family.
	ClusterCIDRs, ServiceCIDRs []netip.Prefix
	// Masquerade holds the masquerade subnets.
	Masquerade conntrack.Plan
	// MTU of the pod network (mp0); the service route uses 1400 as the seed.
	MTU int
	// HealthAddr serves /healthz, /readyz and /metrics; "" disables.
	HealthAddr string
	// IntrospectSocket serves the desired flows to `nodeflow flows`; ""
	// disables.
	IntrospectSocket string
	// CNIConfDir receives the CNI configuration for the pod network ("" writes none).
	CNIConfDir string
	// CNIDataDir is the CNI plugin's IPAM directory, where mp0's address is
	// reserved.
	CNIDataDir string
	// HostCheckInterval is how often the host side is re-checked besides
	// netlink events.
	HostCheckInterval time.Duration
	// NodePortAddresses are the networks whose node addresses NodePorts
	// answer on (kube-proxy's --nodeport-addresses); none means the node
	// IPs (kube-proxy's "primary").
	NodePortAddresses []netip.Prefix
	// NamespaceBudget is the flows and group buckets each namespace's
	// charged objects (Services) may have on this node; the newest object
	// past it is held back (reconcile.Budget). 0 is no budget.
	NamespaceBudget int
}

// Port names the agent creates.
const (
	TunnelPortName = "vxlan0"
	MgmtPortName   = "mp0"
)

// PatchNames returns the names of the patch port on br0 and on breth0.
func (c Config) PatchNames() (onPod, onGateway string) {
	return "patch-" + c.PodBridge + "-to-" + c.GatewayBridge, "patch-" + c.GatewayBridge + "-to-" + c.PodBridge
}

// DBSocket is the OVSDB endpoint.
func (c Config) DBSocket() string { return "unix:" + filepath.Join(c.OVSRundir, "db.sock") }

// MgmtSocket is the OpenFlow endpoint of bridge.
func (c Config) MgmtSocket(bridge string) string {
	return "unix:" + filepath.Join(c.OVSRundir, bridge+".mgmt")
}

// Validate checks the configuration, naming the flag at fault.
func (c Config) Validate() error {
	switch {
	case c.NodeName == "":
		return fmt.Errorf("controller: config: node name: empty (set --node-name or NODE_NAME)")
	case c.OVSRundir == "":
		return fmt.Errorf("controller: config: ovs rundir: empty")
	case c.PodBridge == "" || c.GatewayBridge == "" || c.PodBridge == c.GatewayBridge:
		return fmt.Errorf("controller: config: bridges %q and %q: want two distinct names", c.PodBridge, c.GatewayBridge)
	case c.Uplink == "":
		return fmt.Errorf("controller: config: uplink: empty")
	case c.DatapathType != "system" && c.DatapathType != "netdev":
		return fmt.Errorf("controller: config: datapath type %q: want system or netdev", c.DatapathType)
	case len(c.ClusterCIDRs) == 0:
		return fmt.Errorf("controller: config: cluster CIDRs: none")
	case len(c.ServiceCIDRs) == 0:
		return fmt.Errorf("controller: config: service CIDRs: none")
	case c.MTU < 576 || c.MTU > 65535:
		return fmt.Errorf("controller: config: mtu %d: out of range 576-65535", c.MTU)
	case c.NamespaceBudget < 0:
		return fmt.Errorf("controller: config: namespace budget %d: negative (0 is none)", c.NamespaceBudget)
	}
	for _, list := range [][]netip.Prefix{c.ClusterCIDRs, c.ServiceCIDRs, c.NodePortAddresses} {
		for _, p := range list {
			if !p.IsValid() || p.Masked() != p {
				return fmt.Errorf("controller: config: CIDR %s: host bits set or invalid", p)
			}
		}
	}
	return nil
}

// ovsDatapath is the datapath_type column value for c.DatapathType.
func (c Config) ovsDatapath() string {
	if c.DatapathType == "system" {
		return "system"
	}
	return c.DatapathType
}
