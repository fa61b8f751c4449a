package agent

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"nodeflow/host/netstack"
	"nodeflow/host/repair"
)

// The node's own addresses and routes.
//
// The agent keeps on the gateway bridge what it moved there from the
// uplink (hostnet.NodeL3: both families' addresses, default and static
// routes), recorded in the CNI data directory so that a restarted agent
// keeps the same. A netlink subscription to address, route and link events
// asks for a check after every deletion, the main loop's periodic check
// (and every repair of the bridges) is the backstop, and what is missing
// is put back at once: deleted with `ip addr del`, taken by a deleted and
// recreated bridge, or flushed by the kernel with the address its routes
// needed. A check that cannot put everything back is tried again with a
// growing pause (hostrepair.Backoff) and reported to the agent's repairs,
// which log it once and show it on /readyz while it lasts.
//
// The agent keeps what it moved and leaves what it did not: an address an
// operator adds to the bridge, or a route, is theirs; so is an address
// whose prefix length they changed, or a default route they pointed
// elsewhere (hostnet.NodeL3.Missing).

// nodeL3Keeper keeps the node's addresses and routes on the gateway bridge.
type nodeL3Keeper struct {
	bridge  string
	log     logrus.FieldLogger
	repairs *repair.Tracker
	kept    netstack.NodeL3
	poke    chan struct{}
	// failing is set while the last check could not put everything back:
	// then any address or route event may be what it waits for.
	failing atomic.Bool
	// mu serializes checks (the keeper's own, the main loop's).
	mu sync.Mutex
}

func newNodeL3Keeper(bridge string, kept netstack.NodeL3, log logrus.FieldLogger, repairs *repair.Tracker) *nodeL3Keeper {
	return &nodeL3Keeper{bridge: bridge, kept: kept, log: log, repairs: repairs, poke: make(chan struct{}, 1)}
}

// check reads the bridge, puts back what of the kept configuration is
// missing, and reports both parts to the repairs. It reports whether
// everything is in place.
func (k *nodeL3Keeper) check() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	ok := k.checkLocked()
	k.failing.Store(!ok)
	return ok
}

func (k *nodeL3Keeper) checkLocked() bool {
	st, err := netstack.ReadL3State(k.bridge, k.kept)
	if err != nil {
		err = fmt.Errorf("controller: node addresses: %w", err)
		k.repairs.Observe(netstack.RepairNodeAddress, 0, err)
		k.repairs.Observe(netstack.RepairNodeRoute, 0, err)
		return false
	}
	miss := k.kept.Missing(st)
	if miss.Empty() {
		k.repairs.Observe(netstack.RepairNodeAddress, 0, nil)
		k.repairs.Observe(netstack.RepairNodeRoute, 0, nil)
		return true
	}
	got := netstack.RestoreL3(k.log, k.bridge, miss)
	k.repairs.Observe(netstack.RepairNodeAddress, got.Addrs, got.AddrErr)
	k.repairs.Observe(netstack.RepairNodeRoute, got.Routes, got.RouteErr)
	return got.AddrErr == nil && got.RouteErr == nil
}

// wants reports whether ev may have taken something the keeper keeps, or
// brought what a failing check waits for.
func (k *nodeL3Keeper) wants(ev netstack.Event) bool {
	switch ev.Kind {
	case netstack.Resync, netstack.LinkEvents:
		return true
	case netstack.AddrEvents, netstack.RouteEvents:
		return ev.Deleted || k.failing.Load()
	}
	return false
}

// run keeps the configuration until ctx ends: it checks on every netlink
// event that may matter and when asked (poke), and retries a failing
// check with a growing pause.
func (k *nodeL3Keeper) run(ctx context.Context) {
	go func() {
		err := netstack.Watch(ctx, k.log, netstack.LinkEvents|netstack.AddrEvents|netstack.RouteEvents, func(ev netstack.Event) {
			if k.wants(ev) {
				poke(k.poke)
			}
		})
		if err != nil {
			k.log.WithError(err).Warn("no netlink events: the node's addresses are checked at the periodic check only")
		}
	}()
	var retry <-chan time.Time
	var backoff repair.Backoff
	for {
		select {
		case <-ctx.Done():
			return
		case <-k.poke:
		case <-retry:
		}
		retry = nil
		if k.check() {
			backoff.Reset()
		} else {
			retry = time.After(backoff.Failed())
		}
	}
}

// keepNodeL3 decides what the agent keeps of the node's addresses and
// routes from its start on (hostnet.NextNodeL3): its record, what the
// bridge held before the move (found) and what it just moved. It writes
// the record when that changed.
func (a *Agent) keepNodeL3(rec *netstack.NodeL3, found netstack.L3Config, moved netstack.L3Config) netstack.NodeL3 {
	m := netstack.NodeL3Of(moved, a.cfg.Masquerade)
	m.Uplink, m.Bridge = a.cfg.Uplink, a.cfg.GatewayBridge
	kept := netstack.NextNodeL3(rec, netstack.NodeL3Of(found, a.cfg.Masquerade), m)
	kept.Uplink, kept.Bridge = a.cfg.Uplink, a.cfg.GatewayBridge
	path := netstack.NodeL3Path(a.cfg.CNIDataDir)
	if rec != nil && rec.Equal(kept) {
		return *rec
	}
	kept.Recorded = time.Now().UTC()
	var addrs, routes []string
	for _, ad := range kept.Addrs {
		addrs = append(addrs, ad.Prefix.String())
	}
	for _, r := range kept.Routes {
		routes = append(routes, r.String())
	}
	log := a.log.WithFields(logrus.Fields{"addresses": addrs, "routes": routes, "record": path})
	if err := netstack.SaveNodeL3(path, kept); err != nil {
		log.WithError(err).Warn("cannot record the node's addresses and routes; a restarted agent keeps what the gateway bridge holds then")
	} else {
		log.Info("keeping the node's addresses and routes on the gateway bridge")
	}
	return kept
}
