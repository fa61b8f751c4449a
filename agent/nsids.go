package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/rest"

	"nodeflow/cluster/namespaceid"
	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
)

// Namespace ids. Every namespace's id comes from package nsid: a lock
// object per id, allocated by one elected agent, the same on every node,
// and released only when no node has flows that use it. The agent's part
// is to say which ids its flows use (namespaceIDsInUse), to tell nsid when
// they changed (after every reconciler pass), and to wait for the id table
// before the features build their first flows, so that a restarted agent
// programs every pod with the id it had.

// setupNamespaceIDs creates the id service on the agent's informer
// factory; it runs from Run, after the features registered their
// OnChange callbacks.
func (a *Agent) setupNamespaceIDs(rc *rest.Config) error {
	ids, err := namespaceid.New(namespaceid.Config{
		NodeName:  a.cfg.NodeName,
		InUse:     a.namespaceIDsInUse,
		Rest:      rc,
		Informers: a.informers,
		Log:       a.log,
	})
	if err != nil {
		return fmt.Errorf("controller: namespace ids: %w", err)
	}
	a.ids = ids
	a.namespaces = ids.Table()
	return nil
}

// runNamespaceIDs runs the id service and waits until its table is
// complete and this node takes part in releases.
func (a *Agent) runNamespaceIDs(ctx context.Context) error {
	a.idsDone = make(chan struct{})
	go func() {
		defer close(a.idsDone)
		if err := a.ids.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			a.log.WithError(err).Error("namespace id service stopped")
		}
	}()
	if err := a.ids.WaitReady(ctx); err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	a.log.WithField("leader", a.ids.IsLeader()).Info("namespace ids ready")
	return nil
}

// namespaceIDsInUse returns the namespace ids that br0's flows use: those
// the features want and those the reconciler believes are installed
// (including stale flows it found on the bridge and has not removed yet).
// A rebuild a feature was asked for (an id that changed) is covered too:
// until it runs, the feature's old flows are still wanted. Before br0 has
// been read and reconciled once, the agent does not know, and says so with
// nil.
func (a *Agent) namespaceIDsInUse() map[uint32]bool {
	if !a.podBridgeRead.Load() {
		return nil
	}
	used := map[uint32]bool{}
	a.stores[plan.Pod].EachFlow(func(f *openflow.Flow) {
		plan.NamespaceID.ValuesIn(f, func(v uint64) { used[uint32(v)] = true })
	})
	return used
}

// idsReleaseTimeout bounds how long a stopping agent waits for the
// namespace id service to give up the allocator's Lease.
const idsReleaseTimeout = 5 * time.Second

// waitNamespaceIDs waits, once ctx has ended, for the namespace id service
// to stop: a leading allocator gives its Lease up on the way out, so that
// the agent that replaces it (a restart, a rolling update) allocates at
// once instead of waiting out the Lease, while namespaces created
// meanwhile have no id and their pods no flows.
func (a *Agent) waitNamespaceIDs() {
	if a.idsDone == nil {
		return
	}
	select {
	case <-a.idsDone:
	case <-time.After(idsReleaseTimeout):
		a.log.Warn("the namespace id service did not stop in time; its Lease expires by itself")
	}
}
