package agent

import (
	"context"
	"fmt"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"

	"nodeflow/host/cni"
	"nodeflow/host/netstack"
	"nodeflow/lib/openflow/ofconn"
	"nodeflow/lib/ovsdb"
)

// Pod ports. The CNI plugin records each pod's OVS port on disk
// (cni.PortRecord) before it creates it; when the port goes (`ovs-vsctl
// del-port`, or `del-br br0` with every port on it) while the pod and its
// veth stay, the agent adds it back from the record, under the plugin's
// store lock so that it cannot race the attachment's DEL. The nodenet
// feature then sees the new ofport in OVSDB and rebuilds the pod's flows.

// repairPodPorts re-adds every recorded pod port that is missing from its
// bridge while its veth exists, and returns how many it re-added.
func (a *Agent) repairPodPorts(ctx context.Context) (int, error) {
	if a.cfg.CNIDataDir == "" {
		return 0, nil
	}
	ifc := a.Interfaces()
	added := 0
	err := cni.WithPortRecords(ctx, a.cfg.CNIDataDir, netstack.CNINetworkName, func(recs []cni.PortRecord, bad map[string]error) error {
		for name, err := range bad {
			a.log.WithError(err).WithField("record", name).Warn("damaged CNI port record: its port cannot be repaired")
		}
		for _, r := range recs {
			if ifc != nil {
				if i, ok := ifc.Get(r.Port); ok && i.Ofport > 0 {
					continue
				}
			}
			if _, err := netlink.LinkByName(r.Port); err != nil {
				continue // the veth is gone: the pod is going, not to be repaired
			}
			spec := ovsdb.PortSpec{Name: r.Port, ExternalIDs: r.ExternalIDs}
			if err := a.db.EnsurePort(ctx, r.Bridge, spec); err != nil {
				return fmt.Errorf("controller: re-add pod port %s on %s: %w", r.Port, r.Bridge, err)
			}
			added++
			a.log.WithFields(logrus.Fields{"port": r.Port, "bridge": r.Bridge, "container": r.ContainerID}).Warn("pod port was deleted; re-added it from its CNI record")
		}
		return nil
	})
	return added, err
}

// redial makes the reconcilers' connections to recreated bridges try again
// at once instead of waiting out their back-off.
func (a *Agent) redial() {
	a.conns.Range(func(_, c any) bool {
		c.(*ofconn.Conn).Redial()
		return true
	})
}

// podPortRecorded reports whether i is a pod port the CNI plugin created.
func podPortRecorded(i *ovsdb.Interface) bool {
	return i != nil && i.ExternalIDs[cni.ExternalIDOwner] == cni.OwnerCNI
}
