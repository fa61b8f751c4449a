package nodefeature

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"nodeflow/datapath/nodeflows"
	"nodeflow/datapath/plan"
	"nodeflow/datapath/puntflows"
	"nodeflow/internal/testutil/featuretest"
	"nodeflow/lib/openflow"
)

func meterStat(t *testing.T, c plan.PacketInCategory, key uint32, drops uint64) openflow.MeterStats {
	t.Helper()
	id, err := plan.SourceMeter(c, key)
	if err != nil {
		t.Fatal(err)
	}
	return openflow.MeterStats{MeterID: id, PacketInCount: drops + 1, Bands: []openflow.BandCounter{{PacketCount: drops}}}
}

// The meters' drops, read after read: a pod's series from its first drop
// until its meters are gone, the node's own sources' and the ceilings'
// from the start; a meter whose count went back (added again) counts from
// zero; meters of no packet-in category or of unknown ports are left out.
func TestMeterDrops(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMeterMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	n := &NodeNet{meters: m}
	nc := nodeflows.Config{TunnelPort: 1, PatchPort: 2, MgmtPort: 3}
	pods := map[string]nodeflows.Pod{"pod/a/web": {Namespace: "a", Name: "web", Port: 5}, "pod/b/db": {Namespace: "b", Name: "db", Port: 6}}
	n.setSources(nc, pods)
	last := map[uint32]meterCount{}
	ceiling := openflow.MeterStats{MeterID: plan.MeterReject, Bands: []openflow.BandCounter{{PacketCount: 2}}}
	value := func(c, src string) float64 { return testutil.ToFloat64(m.drops.WithLabelValues(c, src)) }
	series := func() string {
		var out []string
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() != "nodeflow_packet_in_meter_drops_total" {
				continue
			}
			for _, s := range mf.GetMetric() {
				var l []string
				for _, lp := range s.GetLabel() {
					l = append(l, lp.GetValue())
				}
				out = append(out, strings.Join(l, " "))
			}
		}
		return strings.Join(out, ", ")
	}

	n.addMeterDrops([]openflow.MeterStats{
		ceiling,
		meterStat(t, plan.PacketInReject, 5, 10),
		meterStat(t, plan.PacketInReject, 6, 0),
		meterStat(t, plan.PacketInReject, 1, 3),
		meterStat(t, plan.PacketInDNS, 5, 0),
		meterStat(t, plan.PacketInReject, 9, 7), // no one's port
		{MeterID: 99, Bands: []openflow.BandCounter{{PacketCount: 5}}},
	}, last)
	if got, want := series(), "reject a/web, reject ceiling, reject tunnel"; got != want {
		t.Errorf("series after the first read: %s, want %s", got, want)
	}
	if value("reject", "a/web") != 10 || value("reject", "tunnel") != 3 || value("reject", "ceiling") != 2 {
		t.Errorf("after the first read: a/web %v, tunnel %v, ceiling %v", value("reject", "a/web"), value("reject", "tunnel"), value("reject", "ceiling"))
	}

	// The next read adds the growth; the tunnel's meter was added again
	// (its count went back), so its whole count is new.
	n.addMeterDrops([]openflow.MeterStats{ceiling, meterStat(t, plan.PacketInReject, 5, 15), meterStat(t, plan.PacketInReject, 6, 0),
		meterStat(t, plan.PacketInReject, 1, 1), meterStat(t, plan.PacketInDNS, 5, 4)}, last)
	if value("reject", "a/web") != 15 || value("reject", "tunnel") != 4 || value("dns", "a/web") != 4 {
		t.Errorf("after the second read: reject a/web %v, tunnel %v, dns a/web %v", value("reject", "a/web"), value("reject", "tunnel"), value("dns", "a/web"))
	}

	// A namespace's meter counts under "namespace/*".
	pods["pod/a/web"] = nodeflows.Pod{Namespace: "a", Name: "web", Port: 5, NamespaceID: 7}
	n.setSources(nc, pods)
	nsMeter, _ := plan.NamespaceMeter(plan.PacketInReject, 7)
	n.addMeterDrops([]openflow.MeterStats{ceiling, meterStat(t, plan.PacketInReject, 5, 15), meterStat(t, plan.PacketInReject, 6, 0),
		meterStat(t, plan.PacketInReject, 1, 1), meterStat(t, plan.PacketInDNS, 5, 4), {MeterID: nsMeter, Bands: []openflow.BandCounter{{PacketCount: 6}}}}, last)
	if v := value("reject", "a/*"); v != 6 {
		t.Errorf("namespace a's drops: %v, want 6", v)
	}

	// a/web goes: its meters and its series with it.
	delete(pods, "pod/a/web")
	n.setSources(nc, pods)
	n.addMeterDrops([]openflow.MeterStats{ceiling, meterStat(t, plan.PacketInReject, 6, 1), meterStat(t, plan.PacketInReject, 1, 1)}, last)
	if got, want := series(), "reject b/db, reject ceiling, reject tunnel"; got != want {
		t.Errorf("series once a/web is gone: %s, want %s", got, want)
	}
}

// The namespaces' punt meters follow the local pods: set for each
// namespace with a pod here, kept while one is, removed with the last.
func TestPuntNamespaces(t *testing.T) {
	h := featuretest.New(featuretest.DefaultNode())
	n := New(Options{})
	n.h, n.log, n.pod = h, h.Log(), h.Owners(plan.Pod)
	var err error
	if n.meters, err = newMeterMetrics(h.Reg); err != nil {
		t.Fatal(err)
	}
	n.modelErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x"}, []string{"kind"})
	pods := []nodeflows.Pod{{Namespace: "a", Name: "web", NamespaceID: 7}, {Namespace: "a", Name: "db", NamespaceID: 7}, {Namespace: "b", Name: "x", NamespaceID: 9}}
	want := map[string]bool{}
	n.syncPuntNamespaces(pods, want)
	store := h.Stores[plan.Pod]
	for ns, id := range map[string]uint32{"a": 7, "b": 9} {
		owner := puntflows.NamespaceOwner(ns)
		st, ok := store.Get(owner)
		wantMeter, _ := plan.NamespaceMeter(plan.PacketInReject, id)
		if !ok || !want[owner] || len(st.Meters) != 4 || st.Meters[1].ID != wantMeter {
			t.Errorf("namespace %s: owner %s wanted %v, state %+v", ns, owner, want[owner], st)
		}
	}
	want = map[string]bool{}
	n.syncPuntNamespaces(pods[:1], want)
	if !want[puntflows.NamespaceOwner("a")] || want[puntflows.NamespaceOwner("b")] || len(n.puntNS) != 1 {
		t.Errorf("after b's last pod went: want %v, kept %v", want, n.puntNS)
	}
	if !isPuntNamespaceOwner(puntflows.NamespaceOwner("a")) || isPuntNamespaceOwner(nodeflows.PodOwner("a", "web")) {
		t.Error("isPuntNamespaceOwner")
	}
}
