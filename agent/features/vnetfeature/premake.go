package vnetfeature

import (
	"bytes"
	"context"
	"fmt"

	"k8s.io/client-go/util/workqueue"
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
	todo := f.toPremake(keys, locals)
	if len(todo) < 2 {
		return nil
	}
	out := make([]premadeLink, len(todo))
	workqueue.ParallelizeUntil(context.Background(), premakeWorkers, len(todo), func(i int) {
		port, adopted, err := f.host.attach(ctx, todo[i])
		out[i] = premadeLink{want: todo[i], port: port, adopted: adopted, err: err}
	})
	made := make(map[string]premadeLink, len(out))
	for _, pm := range out {
		made[pm.want.key()] = pm
	}
	return made
}

// toPremake returns what the attachments among keys that are ready and
// not made yet want, leaving out those make would refuse.
func (f *Agent) toPremake(keys []string, locals map[string]any) []desired {
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
		if with, err := f.contenders(j.want); err != nil || len(with) > 0 {
			continue
		}
		todo = append(todo, j.want)
	}
	return todo
}
