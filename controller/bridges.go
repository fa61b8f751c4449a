package controller

import (
	"context"
	"fmt"
	"net"

	"nodeflow/feature"
	"nodeflow/ovsdb"
)

// ownerIDs marks what the agent created.
var ownerIDs = map[string]string{"created-by": "nodeflow-agent"}

// EnsureBridges creates or adjusts br0 (vxlan0, the patch port, mp0) and
// breth0 (the uplink, the patch port) and waits for their ofports.
// With the kernel datapath, breth0 takes the uplink's MAC, so that the node
// keeps its MAC on the fabric when its addresses move. The userspace
// datapath reads the uplink with a packet socket, so the kernel still sees
// every frame the uplink receives: breth0 then keeps a MAC of its own, or
// the kernel would answer the pods' connections through the uplink (see
// QuietUplink). Running it again changes nothing.
func EnsureBridges(ctx context.Context, db *ovsdb.Client, c Config, uplinkMAC net.HardwareAddr) (feature.Ports, error) {
	var p feature.Ports
	dp := c.ovsDatapath()
	gwOther := map[string]string{}
	if len(uplinkMAC) == 6 && dp == "system" {
		gwOther["hwaddr"] = uplinkMAC.String()
	}
	onPod, onGw := c.PatchNames()
	for _, b := range []ovsdb.BridgeSpec{
		{Name: c.PodBridge, DatapathType: dp, FailMode: "secure", ExternalIDs: ownerIDs},
		{Name: c.GatewayBridge, DatapathType: dp, FailMode: "secure", ExternalIDs: ownerIDs, OtherConfig: gwOther},
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
