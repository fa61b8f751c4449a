package agent

import (
	"context"

	"nodeflow/agent/feature"
	"nodeflow/lib/ovsdb"
)

// Self-repair. An operator's mistake (`ovs-vsctl del-br br0`, a deleted
// port) must not leave the node without its network: the agent follows
// OVSDB's Interface table, and when an interface it owns or a pod's port
// disappears it recreates the bridges and ports (EnsureBridges is
// idempotent), re-adds the pods' ports from the CNI plugin's records
// (healports.go), gives a recreated gateway bridge the node's addresses and
// routes back (nodeaddrs.go), and takes the new ofports into the node's
// facts, so the features rebuild the flows that name them. The reconcilers
// reconnect to a recreated bridge at once (Redial) and replay every flow.

// watchOwnPorts asks for a repair whenever an interface the agent created
// is deleted or loses its ofport.
func (a *Agent) watchOwnPorts(ctx context.Context) {
	ifc := a.Interfaces()
	if ifc == nil {
		return
	}
	sub := ifc.Subscribe()
	defer sub.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-sub.Events():
			if !ok {
				return
			}
			if (ownInterface(ev.Old) || podPortRecorded(ev.Old)) && (ev.Kind == ovsdb.InterfaceDeleted || (ev.New != nil && ev.New.Ofport <= 0)) {
				poke(a.heal)
			}
		}
	}
}

// repair recreates whatever of the bridges and the agent's ports is
// missing and updates the ports in the node's facts.
func (a *Agent) repair(ctx context.Context) {
	ports, err := a.ensureBridges(ctx)
	if err != nil {
		a.log.WithError(err).Warn("cannot repair the bridges; retrying at the next check")
		return
	}
	// A recreated gateway bridge gets the node's addresses back.
	a.l3.check()
	if old := a.Node().Ports; old != ports {
		a.log.WithField("old", old).WithField("new", ports).Warn("bridges or ports were recreated; rebuilding their flows")
		a.redial()
	}
	a.updateNode(func(n *feature.Node) { n.Ports = ports })
	if n, err := a.repairPodPorts(ctx); err != nil {
		a.log.WithError(err).Warn("cannot repair pod ports; retrying at the next check")
	} else if n > 0 {
		a.redial()
	}
}

// ownInterface reports whether i is one of the interfaces the agent
// creates (EnsureBridges marks them in external_ids).
func ownInterface(i *ovsdb.Interface) bool {
	if i == nil {
		return false
	}
	for k, v := range ownerIDs {
		if i.ExternalIDs[k] != v {
			return false
		}
	}
	return true
}
