package vnetfeature

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	"nodeflow/datapath/reconcile"
	"nodeflow/datapath/vnetflows"
)

// premadeLink is an attachment's interface and port made ahead of the
// serial pass (premake).
type premadeLink struct {
	want    desired
	port    uint32
	adopted bool
	err     error
}

// sameSpec reports whether a and b describe the same interface.
func sameSpec(a, b Spec) bool {
	return a.Name == b.Name && a.Netns == b.Netns && bytes.Equal(a.MAC, b.MAC) && a.Addr == b.Addr && a.MTU == b.MTU
}

// premakeWorkers bounds the attachments whose interfaces and ports are
// made at once.
const premakeWorkers = 8

// premake makes the interfaces and ports of the attachments among keys
// that are ready and not made yet, premakeWorkers at a time: each is a few
// netlink and OVSDB round trips, and ovs-vswitchd's reconfiguration, which
// one after the other made a burst of attachments wait for each other. The
// serial pass then uses what was made (make), and does everything else as
// before. Only plumbing runs here: no flows, no status, no shared state.
func (f *Agent) premake(ctx context.Context, keys []string, locals map[string]any) map[string]premadeLink {
	node := f.h.Node()
	var todo []desired
	seen := map[string]bool{}
	for _, key := range keys {
		a, err := asAttachment(locals[key])
		if err != nil || a.Spec.Node != node.Name {
			continue
		}
		if m := f.locals[key]; m != nil {
			continue // made before: make adopts or remakes it
		}
		j := judge(a, f.subnet, node.MTU)
		if j.wait || len(j.problems) > 0 {
			continue
		}
		// An address another attachment wants is refused by make before
		// anything is made: leave those, and all but the first of a
		// batch's attachments that want one address, to it.
		at := fmt.Sprintf("%d/%s", j.want.vni, j.want.ip)
		if seen[at] {
			continue
		}
		seen[at] = true
		probe, err := vnetflows.LocalFlows(vnetflows.Local{Namespace: a.Namespace, Name: a.Name, VNI: j.want.vni, Port: placeholderPort, MAC: j.want.mac, IP: j.want.ip})
		if err != nil || len(f.owners.Contested(vnetflows.LocalOwner(a.Namespace, a.Name), reconcile.State{Flows: probe})) > 0 {
			continue
		}
		todo = append(todo, j.want)
	}
	if len(todo) < 2 {
		return nil
	}
	out := make([]premadeLink, len(todo))
	sem := make(chan struct{}, premakeWorkers)
	var wg sync.WaitGroup
	for i, want := range todo {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			port, adopted, err := f.host.attach(ctx, want)
			out[i] = premadeLink{want: want, port: port, adopted: adopted, err: err}
		}()
	}
	wg.Wait()
	made := make(map[string]premadeLink, len(out))
	for _, pm := range out {
		made[pm.want.key()] = pm
	}
	return made
}
