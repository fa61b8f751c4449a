package vnetfeature

import (
	"context"
	"time"

	"k8s.io/client-go/tools/cache"

	"nodeflow/lib/syncloop"
)

// The agent's sync loop is one syncloop.Keyed over keys: the informers'
// handlers and the port watch mark what changed, MarkAll asks for a full
// pass (once this node's attachments are listed, on a node change, every
// CheckInterval), and the keys a pass could not bring in line are retried
// after RetryInterval.

// keyKind says what a key names.
type keyKind uint8

const (
	// keyAttachment: one of this node's attachments, by namespace/name.
	keyAttachment keyKind = iota
	// keyVNI: a VNI's remote mappings.
	keyVNI
	// keySubnets: the local attachments of a VNI whose Subnets changed.
	keySubnets
	// keyPass: a pass that could not run (no OVSDB client yet).
	keyPass
)

// key is what the loop marks and retries.
type key struct {
	kind keyKind
	name string // namespace/name, for keyAttachment
	vni  uint32 // for keyVNI and keySubnets
}

func attachmentKey(name string) key { return key{kind: keyAttachment, name: name} }
func vniKey(vni uint32) key         { return key{kind: keyVNI, vni: vni} }
func subnetsKey(vni uint32) key     { return key{kind: keySubnets, vni: vni} }

// newLoop returns the agent's loop.
func (f *Agent) newLoop() *syncloop.Keyed[key] {
	return syncloop.NewKeyed(f.syncKeys, syncloop.KeyedOptions{RetryInterval: f.opts.RetryInterval})
}

// dirtyOf collects keys, and full, into a dirty set.
func dirtyOf(keys []key, full bool) dirty {
	d := newDirty()
	d.all = full
	for _, k := range keys {
		switch k.kind {
		case keyAttachment:
			d.local[k.name] = true
		case keyVNI:
			d.vni[k.vni] = true
		case keySubnets:
			d.subnets[k.vni] = true
		}
	}
	return d
}

// keys returns the keys of d's attachments and VNIs.
func (d dirty) keys() []key {
	var out []key
	for name := range d.local {
		out = append(out, attachmentKey(name))
	}
	for vni := range d.vni {
		out = append(out, vniKey(vni))
	}
	for vni := range d.subnets {
		out = append(out, subnetsKey(vni))
	}
	return out
}

// syncKeys is the loop's function: one pass over what keys name (all of
// it when full), and the keys that failed. Until this node's attachments
// are listed, and while there is no OVSDB client, nothing is done: what
// was asked is held for the first pass that can run (the OVSDB client is
// tried again after RetryInterval).
func (f *Agent) syncKeys(ctx context.Context, keys []key, full bool) (failed []key) {
	f.startLocalOnceServed(ctx)
	d := f.held
	f.held = newDirty()
	d.add(dirtyOf(keys, full))
	if f.inf.local == nil || !f.inf.localSynced() {
		f.held = d // the full pass once they are listed takes it
		return nil
	}
	if f.host == nil {
		if err := f.dialOVSDB(ctx); err != nil {
			f.log.WithError(err).Warn("cannot connect to OVSDB; retrying")
			f.held = d
			return []key{{kind: keyPass}}
		}
	}
	return f.pass(ctx, d).keys()
}

// localChanged marks one of this node's attachments.
func (f *Agent) localChanged(obj any) {
	name, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	f.loop.Mark(attachmentKey(name))
}

// startLocalOnceServed starts the informer on this node's attachments
// once waitForAPI found the CRDs served.
func (f *Agent) startLocalOnceServed(ctx context.Context) {
	if !f.apiServed.Swap(false) {
		return
	}
	if err := f.startLocal(ctx); err != nil {
		f.log.WithError(err).Error("cannot start the NetworkAttachment informer")
		return
	}
	f.log.Info("virtual network CRDs are served; connection agent started")
}

// checkEvery asks for a full pass every CheckInterval until ctx ends.
func (f *Agent) checkEvery(ctx context.Context) {
	check := time.NewTicker(f.opts.CheckInterval)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-check.C:
			f.loop.MarkAll()
		}
	}
}
