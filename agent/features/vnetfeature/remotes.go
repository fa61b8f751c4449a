package vnetfeature

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"nodeflow/datapath/reconcile"
	"nodeflow/datapath/vnetflows"
	"nodeflow/lib/openflow"
	"nodeflow/model/vnet"
)

// vniBuilt is what a VNI's owner was last built from.
type vniBuilt struct {
	remotes []vnetflows.Remote
	taken   []netip.Addr
	cfg     vnetflows.Config
	report  string
}

// setFlows sets an owner's flows, logging a failure.
func (f *Agent) setFlows(owner string, fs []openflow.Flow) error {
	err := f.owners.Set(owner, reconcile.State{Flows: fs})
	if err != nil {
		f.log.WithError(err).WithField("owner", owner).Error("cannot set desired flows")
	}
	return err
}

// syncVNI rebuilds the remote mappings of one VNI: the attachments of the
// VNI on other nodes that have an address, a MAC and a host address.
func (f *Agent) syncVNI(vni uint32, taken []netip.Addr) (failed bool) {
	vi := f.inf.vni(vni)
	if vi == nil {
		return f.dropVNI(vni)
	}
	if !vi.synced() {
		return false // the synced handler marks it again
	}
	node := f.h.Node()
	self, _ := nodeIP(node)
	cfg := vnetflows.Config{TunnelPort: node.Ports.Tunnel, HostIP: self}
	remotes := remotesOf(vi, vni, node.Name)
	if b, ok := f.built[vni]; ok && b.cfg == cfg && slices.Equal(b.taken, taken) && slices.EqualFunc(b.remotes, remotes, sameRemote) {
		return false
	}
	fs, problems, err := vnetflows.VNIFlows(cfg, vni, remotes, taken)
	if err != nil {
		f.log.WithError(err).WithField("vni", vni).Error("cannot build the VNI's remote mappings")
		return true
	}
	report := fmt.Sprint(problems)
	if len(problems) > 0 && report != f.built[vni].report {
		f.log.WithField("vni", vni).WithField("problems", errors.Join(problems...).Error()).Warn("remote attachments left out of the VNI's mappings")
	}
	if f.setFlows(vnetflows.VNIOwner(vni), fs) != nil {
		return true
	}
	f.built[vni] = vniBuilt{remotes: remotes, taken: taken, cfg: cfg, report: report}
	return false
}

// dropVNI removes the remote mappings of a VNI that has no informers (no
// attachment of this node is on it any more).
func (f *Agent) dropVNI(vni uint32) (failed bool) {
	owner := vnetflows.VNIOwner(vni)
	if _, ok := f.built[vni]; ok || slices.Contains(f.owners.List(owner), owner) {
		if f.setFlows(owner, nil) != nil {
			return true
		}
	}
	delete(f.built, vni)
	return false
}

// remotesOf returns the attachments of a VNI on nodes other than node
// that their nodes' agents made (an address, a MAC and a host address),
// in name order.
func remotesOf(vi *vniInformers, vni uint32, node string) []vnetflows.Remote {
	var remotes []vnetflows.Remote
	for _, obj := range vi.attachments.inf.GetStore().List() {
		a, err := asAttachment(obj)
		if err != nil || a.Spec.Node == node || a.Spec.VNI != vni || a.Status.IP == "" || a.Status.HostIP == "" {
			continue // not remote, or not made yet by its node's agent
		}
		r := vnetflows.Remote{Namespace: a.Namespace, Name: a.Name}
		r.IP, _ = netip.ParseAddr(a.Status.IP)
		r.HostIP, _ = netip.ParseAddr(a.Status.HostIP)
		r.MAC = parseMAC(a.Status.MAC)
		remotes = append(remotes, r)
	}
	slices.SortFunc(remotes, func(x, y vnetflows.Remote) int {
		return strings.Compare(x.Namespace+"/"+x.Name, y.Namespace+"/"+y.Name)
	})
	return remotes
}

func sameRemote(a, b vnetflows.Remote) bool {
	return a.Namespace == b.Namespace && a.Name == b.Name && a.IP == b.IP && a.HostIP == b.HostIP && a.MAC.String() == b.MAC.String()
}

// subnet finds a Subnet in a VNI's informer.
func (f *Agent) subnet(vni uint32, namespace, name string) (*vnet.Subnet, bool, bool) {
	vi := f.inf.vni(vni)
	synced := vi.synced()
	if f.passSynced != nil {
		synced = f.passSynced[vni]
	}
	if !synced {
		return nil, false, false
	}
	obj, ok, _ := vi.subnets.inf.GetStore().GetByKey(namespace + "/" + name)
	if !ok {
		return nil, false, true
	}
	s, ok := obj.(*vnet.Subnet)
	if !ok || s.Spec.VNI != vni {
		return nil, false, true
	}
	return s, true, true
}

func parseMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		return nil
	}
	return m
}
