package nodefeature

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"nodeflow/agent/feature"
	"nodeflow/datapath/nodeflows"
	"nodeflow/datapath/plan"
	"nodeflow/datapath/puntflows"
	"nodeflow/datapath/reconcile"
	"nodeflow/lib/openflow"
)

// The punt stage's sources (datapath/puntflows): every local pod's port, whose
// meters its owner holds beside its flows (so they go when the pod goes),
// the namespaces of the local pods (punt.NamespaceOwner, while the
// namespace has a pod here), and the node's own ports, vxlan0, the patch
// port and mp0, under node.OwnerLocal. The meters' drops are read from the
// switch every MeterStatsInterval and counted in
// nodeflow_packet_in_meter_drops_total{category,source}: source is the
// pod ("namespace/name"), its namespace's pods together ("namespace/*"),
// "tunnel", "gateway" (the patch port: the host's service traffic and the
// outside world), "host" (mp0), "ceiling" (the category's node-wide
// meter), or "shared" (the previous design's one meter). A pod's and a
// namespace's series go with them.

// isPuntNamespaceOwner reports whether owner is a punt.NamespaceOwner.
func isPuntNamespaceOwner(owner string) bool { return strings.HasSuffix(owner, "/_punt") }

// syncPuntNamespaces sets the punt meters of the namespaces of pods, the
// local pods that get flows, and adds their owners to want; the owners of
// namespaces no pod here needs any more go with the other stale "pod/"
// owners, after the pods' flows that used them.
func (n *NodeNet) syncPuntNamespaces(pods []nodeflows.Pod, want map[string]bool) {
	if n.opts.SharedPacketInMeters {
		return
	}
	ids := map[string]uint32{}
	for _, p := range pods {
		ids[p.Namespace] = p.NamespaceID
	}
	for ns, id := range ids {
		owner := puntflows.NamespaceOwner(ns)
		if old, ok := n.puntNS[owner]; ok && old == id {
			want[owner] = true
			continue
		}
		st, err := puntflows.NamespaceState(id)
		if err != nil {
			n.modelErrors.WithLabelValues("namespace").Inc()
			n.log.WithError(err).WithField("namespace", ns).Warn("punt meters")
			continue
		}
		if n.setState(n.pod, owner, st) {
			want[owner] = true
			n.puntNS[owner] = id
		}
	}
	for owner := range n.puntNS {
		if _, ok := ids[strings.TrimSuffix(strings.TrimPrefix(owner, "pod/"), "/_punt")]; !ok {
			delete(n.puntNS, owner)
		}
	}
}

// DefaultMeterStatsInterval is how often the meters' drops are read by
// default.
const DefaultMeterStatsInterval = 10 * time.Second

// Source labels of the node's own ports and of the node-wide meters.
const (
	SourceTunnel  = "tunnel"
	SourceGateway = "gateway"
	SourceHost    = "host"
	SourceCeiling = "ceiling"
	SourceShared  = "shared"
)

// meterMetrics are the meter drop counters.
type meterMetrics struct {
	drops *prometheus.CounterVec
	reads *prometheus.CounterVec
}

func newMeterMetrics(reg prometheus.Registerer) (meterMetrics, error) {
	m := meterMetrics{
		drops: feature.NewCounterVec("nodeflow_packet_in_meter_drops_total", "Packets the datapath's packet-in meters dropped before they reached the agent, by category and source "+
			"(a pod as namespace/name, its namespace's pods together as namespace/*, tunnel, gateway, host; ceiling is the category's node-wide meter).", "category", "source"),
		reads: feature.NewCounterVec("nodeflow_packet_in_meter_reads_total", "Reads of br0's meter statistics, by result.", "result"),
	}
	if err := feature.Register(reg, m.drops, m.reads); err != nil {
		return m, fmt.Errorf("nodenet: metrics: %w", err)
	}
	return m, nil
}

// withPunt adds a source's punt flows and meters to flows: the port's own
// meters, or none when the agent runs the shared meters.
func (n *NodeNet) withPunt(fs []openflow.Flow, src puntflows.Source) (reconcile.State, error) {
	st := reconcile.State{Flows: fs}
	if n.opts.SharedPacketInMeters {
		return st, nil
	}
	ps, err := puntflows.SourceState(src)
	if err != nil {
		return reconcile.State{}, err
	}
	st.Flows = append(st.Flows, ps.Flows...)
	st.Meters = ps.Meters
	return st, nil
}

// localState returns node.OwnerLocal's state: the node-wide flows, and the
// punt stage of the node's own ports (or the shared meters).
func (n *NodeNet) localState(nc nodeflows.Config, fs []openflow.Flow) (reconcile.State, error) {
	st := reconcile.State{Flows: fs}
	if n.opts.SharedPacketInMeters {
		ps := puntflows.SharedState()
		st.Flows = append(st.Flows, ps.Flows...)
		st.Meters = ps.Meters
		return st, nil
	}
	for _, p := range []uint32{nc.TunnelPort, nc.PatchPort, nc.MgmtPort} {
		if p == 0 {
			continue
		}
		ps, err := puntflows.SourceState(puntflows.Source{Port: p})
		if err != nil {
			return reconcile.State{}, err
		}
		st.Flows = append(st.Flows, ps.Flows...)
		st.Meters = append(st.Meters, ps.Meters...)
	}
	return st, nil
}

// setSources records the sources' labels: by port, the node's ports and
// the local pods that have flows; by namespace id, their namespaces.
func (n *NodeNet) setSources(nc nodeflows.Config, pods map[string]nodeflows.Pod) {
	m := map[uint32]string{}
	for port, label := range map[uint32]string{nc.TunnelPort: SourceTunnel, nc.PatchPort: SourceGateway, nc.MgmtPort: SourceHost} {
		if port != 0 {
			m[port] = label
		}
	}
	ns := map[uint32]string{}
	for _, p := range pods {
		m[p.Port] = p.Namespace + "/" + p.Name
		ns[p.NamespaceID] = p.Namespace + "/*"
	}
	n.srcMu.Lock()
	n.sources, n.namespaces = m, ns
	n.srcMu.Unlock()
}

// sourceOf returns the source label of meter id and its category; false
// for a meter that is not a packet-in meter, or whose port nodeflow does
// not know (a pod just gone).
func (n *NodeNet) sourceOf(id uint32) (plan.PacketInCategory, string, bool) {
	for _, c := range plan.PuntCategories {
		if ceiling, _ := plan.Ceiling(c); ceiling == id {
			return c, SourceCeiling, true
		}
	}
	if c, ns, ok := plan.SplitNamespaceMeter(id); ok {
		n.srcMu.Lock()
		label, ok := n.namespaces[ns]
		n.srcMu.Unlock()
		return c, label, ok
	}
	c, key, ok := plan.SplitSourceMeter(id)
	if !ok {
		return 0, "", false
	}
	if key == plan.SourceShared {
		return c, SourceShared, true
	}
	n.srcMu.Lock()
	label, ok := n.sources[key]
	n.srcMu.Unlock()
	return c, label, ok
}

// meterCount is one meter's band drops at the last read, and the series
// they were added to.
type meterCount struct {
	drops            uint64
	category, source string
}

// runMeterStats reads br0's meter statistics every MeterStatsInterval
// until ctx ends, on the agent's connection of br0
// (feature.Host.MeterStats), and adds each packet-in meter's new drops to
// its series.
func (n *NodeNet) runMeterStats(ctx context.Context) {
	last := map[uint32]meterCount{}
	feature.CounterPoll{
		Interval: n.opts.MeterStatsInterval,
		Reads:    n.meters.reads,
		Log:      n.log,
		What:     "the meters",
		Read: func(ctx context.Context) error {
			stats, err := n.h.MeterStats(ctx, plan.Pod)
			if err != nil {
				return fmt.Errorf("nodenet: meter stats: %w", err)
			}
			n.addMeterDrops(stats, last)
			return nil
		},
	}.Run(ctx)
}

// addMeterDrops adds each packet-in meter's drops since the last read (all
// of them for a meter first seen, or one whose count went back: a meter
// added again), replaces last with the current counts, and deletes the
// series of the pods whose meters are gone. A series is created with the
// first drop, except the node's own sources', which exist from the start.
func (n *NodeNet) addMeterDrops(stats []openflow.MeterStats, last map[uint32]meterCount) {
	seen := make(map[uint32]bool, len(stats))
	live := map[[2]string]bool{}
	for i := range stats {
		s := &stats[i]
		c, source, ok := n.sourceOf(s.MeterID)
		if !ok {
			continue
		}
		var drops uint64
		for _, b := range s.Bands {
			drops += b.PacketCount
		}
		seen[s.MeterID] = true
		key := [2]string{c.String(), source}
		live[key] = true
		prev, had := last[s.MeterID]
		if had && (prev.category != key[0] || prev.source != key[1]) {
			// The port now belongs to another pod: its counts start over.
			had = false
		}
		add := drops
		if had && drops >= prev.drops {
			add = drops - prev.drops
		}
		last[s.MeterID] = meterCount{drops: drops, category: key[0], source: key[1]}
		if add > 0 || !isPodSource(source) {
			n.meters.drops.WithLabelValues(key[0], key[1]).Add(float64(add))
		}
	}
	for id, mc := range last {
		if seen[id] {
			continue
		}
		delete(last, id)
		if key := [2]string{mc.category, mc.source}; !live[key] && isPodSource(mc.source) {
			n.meters.drops.DeleteLabelValues(mc.category, mc.source)
		}
	}
}

// isPodSource reports whether a source label names a pod.
func isPodSource(s string) bool {
	switch s {
	case SourceTunnel, SourceGateway, SourceHost, SourceCeiling, SourceShared:
		return false
	}
	return true
}
