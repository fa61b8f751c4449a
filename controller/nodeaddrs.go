package controller

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"nodeflow/hostnet"
	"nodeflow/hostrepair"
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
	repairs *hostrepair.Tracker
	kept    hostnet.NodeL3
	poke    chan struct{}
	// failing is set while the last check could not put everything back:
	// then any address or route event may be what it waits for.
	failing atomic.Bool
	// mu serializes checks (the keeper's own, the main loop's).
	mu sync.Mutex
}

func newNodeL3Keeper(bridge string, kept hostnet.NodeL3, log logrus.FieldLogger, repairs *hostrepair.Tracker) *nodeL3Keeper {
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
	st, err := hostnet.ReadL3State(k.bridge, k.kept)
	if err != nil {
		err = fmt.Errorf("controller: node addresses: %w", err)
		k.repairs.Observe(hostnet.RepairNodeAddress, 0, err)
		k.repairs.Observe(hostnet.RepairNodeRoute, 0, err)
		return false
	}
	miss := k.kept.Missing(st)
	if miss.Empty() {
		k.repairs.Observe(hostnet.RepairNodeAddress, 0, nil)
		k.repairs.Observe(hostnet.RepairNodeRoute, 0, nil)
		return true
	}
	got := hostnet.RestoreL3(k.log, k.bridge, miss)
	k.repairs.Observe(hostnet.RepairNodeAddress, got.Addrs, got.AddrErr)
	k.repairs.Observe(hostnet.RepairNodeRoute, got.Routes, got.RouteErr)
	return got.AddrErr == nil && got.RouteErr == nil
}

// wants reports whether ev may have taken something the keeper keeps, or
// brought what a failing check waits for.
func (k *nodeL3Keeper) wants(ev hostnet.Event) bool {
	switch ev.Kind {
	case hostnet.Resync, hostnet.LinkEvents:
		return true
	case hostnet.AddrEvents, hostnet.RouteEvents:
		return ev.Deleted || k.failing.Load()
	}
	return false
}

// run keeps the configuration until ctx ends: it checks on every netlink
// event that may matter and when asked (poke), and retries a failing
// check with a growing pause.
func (k *nodeL3Keeper) run(ctx context.Context) {
	go func() {
		err := hostnet.Watch(ctx, k.log, hostnet.LinkEvents|hostnet.AddrEvents|hostnet.RouteEvents, func(ev hostnet.Event) {
			if k.wants(ev) {
				poke(k.poke)
			}
		})
		if err != nil {
			k.log.WithError(err).Warn("no netlink events: the node's addresses are checked at the periodic check only")
		}
	}()
	var retry <-chan time.Time
	var backoff hostrepair.Backoff
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
func (a *Agent) keepNodeL3(rec *hostnet.NodeL3, found hostnet.L3Config, moved hostnet.L3Config) hostnet.NodeL3 {
	m := hostnet.NodeL3Of(moved, a.cfg.Masquerade)
	m.Uplink, m.Bridge = a.cfg.Uplink, a.cfg.GatewayBridge
	kept := hostnet.NextNodeL3(rec, hostnet.NodeL3Of(found, a.cfg.Masquerade), m)
	kept.Uplink, kept.Bridge = a.cfg.Uplink, a.cfg.GatewayBridge
	path := hostnet.NodeL3Path(a.cfg.CNIDataDir)
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
	if err := hostnet.SaveNodeL3(path, kept); err != nil {
		log.WithError(err).Warn("cannot record the node's addresses and routes; a restarted agent keeps what the gateway bridge holds then")
	} else {
		log.Info("keeping the node's addresses and routes on the gateway bridge")
	}
	return kept
}
