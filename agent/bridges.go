package agent

import (
	"context"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"

	"nodeflow/agent/feature"
	"nodeflow/datapath/gatewayflows"
	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
	"nodeflow/lib/openflow/ofconn"
	"nodeflow/lib/ovsdb"
)

// ownerIDs marks what the agent created.
var ownerIDs = map[string]string{"created-by": "nodeflow-agent"}

// EnsureBridges creates or adjusts br0 (vxlan0, the patch port, mp0) and
// breth0 (the uplink, the patch port) and waits for their ofports.
// gatewayMAC, when set, is pinned as breth0's MAC (other_config:hwaddr), so
// that a recreated breth0 comes back with the MAC the other nodes' tunnel
// neighbour caches and the flows know. With the kernel datapath it is the
// uplink's MAC, so that the node keeps its MAC on the fabric when its
// addresses move. The userspace datapath reads the uplink with a packet
// socket, so the kernel still sees every frame the uplink receives: breth0
// then keeps a MAC of its own (the first one OVS gave it), or the kernel
// would answer the pods' connections through the uplink (see QuietUplink).
// Running it again changes nothing.
func EnsureBridges(ctx context.Context, db *ovsdb.Client, c Config, gatewayMAC net.HardwareAddr) (feature.Ports, error) {
	var p feature.Ports
	dp := c.ovsDatapath()
	onPod, onGw := c.PatchNames()
	for _, b := range []ovsdb.BridgeSpec{
		{Name: c.PodBridge, DatapathType: dp, FailMode: "secure", ExternalIDs: ownerIDs},
		gatewayBridgeSpec(c, gatewayMAC),
	} {
		if err := db.EnsureBridge(ctx, b); err != nil {
			return p, fmt.Errorf("controller: bridge %s: %w", b.Name, err)
		}
	}
	ports := []struct {
		bridge string
		spec   ovsdb.PortSpec
		into   *uint32
	}{
		{c.PodBridge, ovsdb.PortSpec{Name: TunnelPortName, Type: "vxlan", Options: map[string]string{"remote_ip": "flow", "key": "flow"}, ExternalIDs: ownerIDs}, &p.Tunnel},
		{c.PodBridge, ovsdb.PortSpec{Name: onPod, Type: "patch", Options: map[string]string{"peer": onGw}, ExternalIDs: ownerIDs}, &p.PodPatch},
		{c.PodBridge, ovsdb.PortSpec{Name: MgmtPortName, Type: "internal", ExternalIDs: ownerIDs, MTURequest: c.MTU}, &p.Mgmt},
		{c.GatewayBridge, ovsdb.PortSpec{Name: c.Uplink, ExternalIDs: ownerIDs}, &p.Uplink},
		{c.GatewayBridge, ovsdb.PortSpec{Name: onGw, Type: "patch", Options: map[string]string{"peer": onPod}, ExternalIDs: ownerIDs}, &p.GatewayPatch},
	}
	for _, pt := range ports {
		if err := db.EnsurePort(ctx, pt.bridge, pt.spec); err != nil {
			return p, fmt.Errorf("controller: port %s on %s: %w", pt.spec.Name, pt.bridge, err)
		}
	}
	for _, pt := range ports {
		of, err := db.WaitOfport(ctx, pt.spec.Name)
		if err != nil {
			return p, fmt.Errorf("controller: port %s: %w", pt.spec.Name, err)
		}
		*pt.into = uint32(of)
	}
	return p, nil
}

// gatewayBridgeSpec is breth0's row, its MAC pinned to mac when mac is set.
func gatewayBridgeSpec(c Config, mac net.HardwareAddr) ovsdb.BridgeSpec {
	other := map[string]string{}
	if len(mac) == 6 {
		other["hwaddr"] = mac.String()
	}
	return ovsdb.BridgeSpec{Name: c.GatewayBridge, DatapathType: c.ovsDatapath(), FailMode: "secure", ExternalIDs: ownerIDs, OtherConfig: other}
}

// PinGatewayMAC records breth0's current MAC in its other_config:hwaddr, so
// that OVS gives a recreated breth0 the same MAC, and returns it.
func PinGatewayMAC(ctx context.Context, db *ovsdb.Client, c Config) (net.HardwareAddr, error) {
	l, err := netlink.LinkByName(c.GatewayBridge)
	if err != nil {
		return nil, fmt.Errorf("controller: %s: %w", c.GatewayBridge, err)
	}
	mac := slices.Clone(l.Attrs().HardwareAddr)
	if len(mac) != 6 {
		return nil, fmt.Errorf("controller: %s has no Ethernet address", c.GatewayBridge)
	}
	if err := db.EnsureBridge(ctx, gatewayBridgeSpec(c, mac)); err != nil {
		return nil, fmt.Errorf("controller: pin %s's MAC %s: %w", c.GatewayBridge, mac, err)
	}
	return mac, nil
}

// switchWhileEmpty gives the gateway bridge, when it holds no flow at all
// (just created, or after ovs-vswitchd lost its flows), the one flow its
// pipeline ends in: table 0's miss flow, NORMAL. A bridge in fail-mode
// secure without a flow forwards nothing: once the node's addresses move
// onto it, the node would be off its network, the API server included,
// whose objects the agent still has to list before its start-up bundle
// installs the pipeline (which keeps that flow and replaces nothing else,
// there being nothing else). Until then breth0 switches as a plain bridge
// between the uplink and the host, and br0, still without flows, drops
// what reaches it. A bridge with flows (the agent restarted) is left
// alone. It reports whether it installed the flow.
func switchWhileEmpty(ctx context.Context, socket string, log logrus.FieldLogger) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := ofconn.Dial(ctx, socket, ofconn.Options{Logger: log})
	if err != nil {
		return false, fmt.Errorf("controller: gateway bridge's flows: %w", err)
	}
	defer c.Close()
	rep, err := c.MultipartReply(ctx, openflow.NewFlowStatsRequest())
	if err != nil {
		return false, fmt.Errorf("controller: gateway bridge's flows: %w", err)
	}
	stats, err := rep.FlowStats()
	if err != nil {
		return false, fmt.Errorf("controller: gateway bridge's flows: %w", err)
	}
	if len(stats) > 0 {
		return false, nil
	}
	for _, f := range gatewayflows.PipelineFlows(plan.Gateway) {
		if f.Table == 0 {
			if err := c.Apply(ctx, f.AddMod()); err != nil {
				return false, fmt.Errorf("controller: gateway bridge's first flow: %w", err)
			}
			return true, nil
		}
	}
	return false, nil
}
