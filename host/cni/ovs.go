package cni

import (
	"context"
	"errors"
	"fmt"

	"nodeflow/lib/ovsdb"
)

// vswitch is the plugin's view of the Open_vSwitch database.
type vswitch struct {
	c *ovsdb.Client
}

// dialSwitch connects to the OVSDB server at endpoint. The connection is
// short-lived (one plugin invocation), so it does not need keepalives.
func dialSwitch(ctx context.Context, endpoint string) (*vswitch, error) {
	c, err := ovsdb.Dial(ctx, endpoint, ovsdb.Options{EchoInterval: -1})
	if err != nil {
		return nil, err
	}
	return &vswitch{c: c}, nil
}

func (v *vswitch) Close() { _ = v.c.Close() }

// EnsureBridge creates bridge if it does not exist. An existing bridge is left
// exactly as it is: it belongs to the node agent.
func (v *vswitch) EnsureBridge(ctx context.Context, bridge, datapathType string) error {
	_, err := v.c.BridgeExternalIDs(ctx, bridge)
	if err == nil {
		return nil
	}
	if !errors.Is(err, ovsdb.ErrNotFound) {
		return err
	}
	return v.c.EnsureBridge(ctx, ovsdb.BridgeSpec{
		Name:         bridge,
		DatapathType: datapathType,
		ExternalIDs:  map[string]string{"created-by": OwnerCNI},
	})
}

// AddPort adds the system interface name to bridge with external_ids and
// waits until ovs-vswitchd has given it an OpenFlow port number.
func (v *vswitch) AddPort(ctx context.Context, bridge, name string, ids map[string]string) (int64, error) {
	if err := v.c.EnsurePort(ctx, bridge, ovsdb.PortSpec{Name: name, ExternalIDs: ids}); err != nil {
		return 0, err
	}
	n, err := v.c.WaitOfport(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("port %s: %w", name, err)
	}
	return n, nil
}

// DelPort removes port name from bridge; a missing port is not an error.
func (v *vswitch) DelPort(ctx context.Context, bridge, name string) error {
	return v.c.DeletePort(ctx, bridge, name)
}

// Port finds port name on bridge and returns its interface's external_ids.
// A missing bridge counts as a missing port.
func (v *vswitch) Port(ctx context.Context, bridge, name string) (map[string]string, bool, error) {
	ports, err := v.c.ListPorts(ctx, bridge)
	if errors.Is(err, ovsdb.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	for _, p := range ports {
		if p.Name == name {
			return p.InterfaceExternalIDs, true, nil
		}
	}
	return nil, false, nil
}

// OwnedPorts returns the ports of bridge the plugin created, by name, with
// their interface's external_ids.
func (v *vswitch) OwnedPorts(ctx context.Context, bridge string) (map[string]map[string]string, error) {
	ports, err := v.c.ListPorts(ctx, bridge)
	if errors.Is(err, ovsdb.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]string{}
	for _, p := range ports {
		if p.InterfaceExternalIDs[ExternalIDOwner] == OwnerCNI {
			out[p.Name] = p.InterfaceExternalIDs
		}
	}
	return out, nil
}
