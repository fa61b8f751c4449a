package vnetfeature

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/tools/cache"

	"nodeflow/datapath/plan"
	"nodeflow/datapath/vnetflows"
	"nodeflow/model/vnet"
)

// dirty is what a pass has to look at again: attachments (by
// namespace/name), VNIs whose remote mappings, VNIs whose Subnets changed
// (every local attachment on them), or, with all, everything.
type dirty struct {
	local   map[string]bool
	vni     map[uint32]bool
	subnets map[uint32]bool
	all     bool
}

func newDirty() dirty {
	return dirty{local: map[string]bool{}, vni: map[uint32]bool{}, subnets: map[uint32]bool{}}
}

// add adds o's keys to d.
func (d *dirty) add(o dirty) {
	maps.Copy(d.local, o.local)
	maps.Copy(d.vni, o.vni)
	maps.Copy(d.subnets, o.subnets)
	d.all = d.all || o.all
}

// empty reports whether d names nothing.
func (d dirty) empty() bool {
	return len(d.local) == 0 && len(d.vni) == 0 && len(d.subnets) == 0 && !d.all
}

// pass brings everything d names in line, and returns what failed.
func (f *Agent) pass(ctx context.Context, d dirty) (retry dirty) {
	retry = newDirty()
	view := f.scanLocals()
	f.followVNIs(view, d, retry)
	defer func() { f.passSynced = nil }()
	f.widen(view, d)
	// The VNIs' remote mappings first, so that an address a local
	// attachment takes over is given up by the VNI's owner before the
	// attachment's own flows want it.
	for _, vni := range slices.Sorted(maps.Keys(d.vni)) {
		if f.syncVNI(vni, view.taken[vni]) {
			retry.vni[vni] = true
		}
	}
	f.syncLocals(ctx, d.local, view.objs, retry)
	if d.all && retry.empty() && f.viewComplete() {
		f.collect(ctx)
	}
	f.gauges()
	return retry
}

// localView is this node's attachments, as the local informer holds them
// at the start of a pass, and their VNIs.
type localView struct {
	objs     map[string]any // namespace/name -> the informer's object
	relevant map[uint32]bool
	taken    map[uint32][]netip.Addr // VNI -> its local addresses, sorted
}

// scanLocals reads this node's attachments from the local informer.
func (f *Agent) scanLocals() localView {
	v := localView{objs: map[string]any{}, relevant: map[uint32]bool{}, taken: map[uint32][]netip.Addr{}}
	for _, obj := range f.inf.locals() {
		key, err := cache.MetaNamespaceKeyFunc(obj)
		if err != nil {
			continue
		}
		v.objs[key] = obj
		a, err := asAttachment(obj)
		if err != nil || a.Spec.Node != f.h.Node().Name || !vnet.ValidVNI(a.Spec.VNI) {
			continue
		}
		v.relevant[a.Spec.VNI] = true
		if ip, err := netip.ParseAddr(a.Status.IP); err == nil {
			v.taken[a.Spec.VNI] = append(v.taken[a.Spec.VNI], ip)
		}
	}
	for vni := range v.relevant {
		slices.SortFunc(v.taken[vni], netip.Addr.Compare)
	}
	return v
}

// followVNIs starts the informers of the relevant VNIs and stops the
// others (whose remote mappings go: d names them), and takes the pass's
// view of which VNIs have listed everything. A VNI whose informers cannot
// start is retried.
func (f *Agent) followVNIs(view localView, d, retry dirty) {
	stopped, err := f.inf.setVNIs(view.relevant)
	if err != nil {
		f.log.WithError(err).Error("cannot start the informers of a VNI")
		for vni := range view.relevant {
			retry.vni[vni] = true
		}
	}
	f.passSynced = map[uint32]bool{}
	for _, vni := range f.inf.vniList() {
		f.passSynced[vni] = f.inf.vni(vni).synced()
	}
	for _, vni := range stopped {
		d.vni[vni] = true
		f.log.WithField("vni", vni).Info("no attachment of this node on the VNI any more: its informers stopped")
	}
}

// widen adds to d what its changes reach: the local attachments of the
// VNIs whose Subnets changed; with all, every attachment, made or listed,
// and every VNI; and the VNIs whose local addresses changed.
func (f *Agent) widen(view localView, d dirty) {
	for key, obj := range view.objs {
		if a, err := asAttachment(obj); err == nil && d.subnets[a.Spec.VNI] {
			d.local[key] = true
		}
	}
	if d.all {
		for key := range view.objs {
			d.local[key] = true
		}
		for key := range f.locals {
			d.local[key] = true
		}
		for _, vni := range f.inf.vniList() {
			d.vni[vni] = true
		}
	}
	for vni := range view.relevant {
		if b, ok := f.built[vni]; !ok || !slices.Equal(b.taken, view.taken[vni]) {
			d.vni[vni] = true
		}
	}
}

// syncLocals syncs the attachments named by keys, in name order, making
// the interfaces of a burst at once ahead (premake), then writes the
// statuses the pass queued. What fails goes into retry.
func (f *Agent) syncLocals(ctx context.Context, keys map[string]bool, objs map[string]any, retry dirty) {
	sorted := slices.Sorted(maps.Keys(keys))
	f.premade = f.premake(ctx, sorted, objs)
	for _, key := range sorted {
		if f.syncLocal(ctx, key, objs[key]) {
			retry.local[key] = true
		}
	}
	f.premade = nil
	if len(f.statuses) > 0 {
		// A status says the interface is ready: its flows are in br0
		// first, so that a client that waits for the status can send at
		// once.
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := f.h.Flush(fctx, plan.Pod); err != nil {
			f.log.WithError(err).Debug("br0 not in step before the status writes")
		}
		cancel()
	}
	for _, key := range f.flushStatuses(ctx) {
		retry.local[key] = true
	}
}

// viewComplete reports whether the pass judged every attachment on
// informers that had listed everything when it began, so that what it did
// not make is really not wanted. A VNI whose informers finish listing
// during the pass does not count: its attachments were judged waiting,
// and what they already have must not be collected.
func (f *Agent) viewComplete() bool {
	if !f.inf.localSynced() {
		return false
	}
	for _, vni := range f.inf.vniList() {
		if !f.passSynced[vni] {
			return false
		}
	}
	return true
}

// collect removes the interfaces, namespaces and ports of attachments that
// are gone (deleted while the agent was not running, or left by a failed
// attempt).
func (f *Agent) collect(ctx context.Context) {
	keep := map[string]string{}
	for _, m := range f.locals {
		keep[m.want.link.Name] = m.want.link.Netns
	}
	removed, err := f.host.collect(ctx, keep)
	for _, r := range removed {
		f.log.WithField("removed", r).Info("removed an attachment's leftover: its attachment is gone")
	}
	if err != nil {
		f.m.hostErrors.Inc()
		f.log.WithError(err).Warn("cannot remove every leftover of gone attachments; retrying at the next check")
	}
	for _, owner := range f.owners.List("vnet/") {
		if strings.HasPrefix(owner, vnetflows.VNIOwnerPrefix) {
			continue
		}
		ns, name, _ := strings.Cut(strings.TrimPrefix(owner, "vnet/"), "/")
		if _, ok := f.locals[ns+"/"+name]; !ok {
			f.setFlows(owner, nil)
		}
	}
}
