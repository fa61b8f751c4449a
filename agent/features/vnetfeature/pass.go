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

// mark records a change under the lock and wakes the loop.
func (f *Agent) mark(change func()) {
	f.mu.Lock()
	change()
	f.mu.Unlock()
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

func (f *Agent) localChanged(obj any) {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	f.mark(func() { f.dirtyLocal[key] = true })
}

// syncPass applies what changed since the last pass and reports whether
// something failed (it is retried after RetryInterval).
func (f *Agent) syncPass(ctx context.Context) (failed bool) {
	if f.inf.local == nil || !f.inf.localSynced() {
		return false
	}
	if f.host == nil {
		if err := f.dialOVSDB(ctx); err != nil {
			f.log.WithError(err).Warn("cannot connect to OVSDB; retrying")
			return true
		}
	}
	f.mu.Lock()
	dirtyLocal, dirtyVNI, dirtySubnets, all := f.dirtyLocal, f.dirtyVNI, f.dirtySubnets, f.all
	f.dirtyLocal, f.dirtyVNI, f.dirtySubnets, f.all = map[string]bool{}, map[uint32]bool{}, map[uint32]bool{}, false
	f.mu.Unlock()

	// This node's attachments, and their VNIs.
	locals := map[string]any{}
	relevant := map[uint32]bool{}
	taken := map[uint32][]netip.Addr{}
	for _, obj := range f.inf.locals() {
		key, err := cache.MetaNamespaceKeyFunc(obj)
		if err != nil {
			continue
		}
		locals[key] = obj
		a, err := asAttachment(obj)
		if err != nil || a.Spec.Node != f.h.Node().Name || !vnet.ValidVNI(a.Spec.VNI) {
			continue
		}
		relevant[a.Spec.VNI] = true
		if ip, err := netip.ParseAddr(a.Status.IP); err == nil {
			taken[a.Spec.VNI] = append(taken[a.Spec.VNI], ip)
		}
	}
	stopped, err := f.inf.setVNIs(relevant)
	if err != nil {
		f.log.WithError(err).Error("cannot start the informers of a VNI")
		failed = true
		for vni := range relevant {
			f.retryVNI[vni] = true
		}
	}
	f.passSynced = map[uint32]bool{}
	for _, vni := range f.inf.vniList() {
		f.passSynced[vni] = f.inf.vni(vni).synced()
	}
	defer func() { f.passSynced = nil }()
	for _, vni := range stopped {
		dirtyVNI[vni] = true
		f.log.WithField("vni", vni).Info("no attachment of this node on the VNI any more: its informers stopped")
	}
	for key, obj := range locals {
		if a, err := asAttachment(obj); err == nil && dirtySubnets[a.Spec.VNI] {
			dirtyLocal[key] = true
		}
	}
	if all {
		for key := range locals {
			dirtyLocal[key] = true
		}
		for key := range f.locals {
			dirtyLocal[key] = true
		}
		for _, vni := range f.inf.vniList() {
			dirtyVNI[vni] = true
		}
	}
	for vni := range relevant {
		slices.SortFunc(taken[vni], netip.Addr.Compare)
		if b, ok := f.built[vni]; !ok || !slices.Equal(b.taken, taken[vni]) {
			dirtyVNI[vni] = true
		}
	}

	// The VNIs' remote mappings first, so that an address a local
	// attachment takes over is given up by the VNI's owner before the
	// attachment's own flows want it.
	for _, vni := range slices.Sorted(maps.Keys(dirtyVNI)) {
		if f.syncVNI(vni, taken[vni]) {
			failed = true
			f.retryVNI[vni] = true
		}
	}
	keys := slices.Sorted(maps.Keys(dirtyLocal))
	f.premade = f.premake(ctx, keys, locals)
	for _, key := range keys {
		if f.syncLocal(ctx, key, locals[key]) {
			failed = true
			f.retryLocal[key] = true
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
		failed = true
		f.retryLocal[key] = true
	}
	if all && !failed && f.allSynced() {
		f.collect(ctx)
	}
	f.gauges()
	return failed
}

// allSynced reports whether every informer has listed everything, so that
// what they do not hold is really not there.
func (f *Agent) allSynced() bool {
	if !f.inf.localSynced() {
		return false
	}
	for _, vni := range f.inf.vniList() {
		if !f.inf.vni(vni).synced() {
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
