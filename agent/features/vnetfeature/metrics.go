package vnetfeature

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"nodeflow/model/vnet"
)

// metrics are the connection agent's. The informer and cache gauges show
// what the seed's selective informers are for: a node holds the
// attachments of its own node and of its VNIs, and no others.
type metrics struct {
	// informers{resource}: the informers running, by resource.
	informers *prometheus.GaugeVec
	// cached{resource,selector}: the objects their caches hold, by the
	// field selector ("node": spec.node, "vni": spec.vni).
	cached *prometheus.GaugeVec
	// vnis: the relevant VNIs (those of this node's attachments).
	vnis prometheus.Gauge
	// attachments{state}: this node's attachments, by state.
	attachments *prometheus.GaugeVec
	// hostErrors: failed attempts to make or remove an interface.
	hostErrors prometheus.Counter
	// statusWrites{result}: status applies, "ok" or "error".
	statusWrites *prometheus.CounterVec
}

// Attachment states in the attachments gauge.
const (
	stateReady   = "ready"   // interface, port and flows in place
	stateWaiting = "waiting" // no address yet: nothing to do
	stateError   = "error"   // errors.host says why
)

func newMetrics() *metrics {
	return &metrics{
		informers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodeflow_vnet_informers", Help: "Informers the connection agent runs, by resource: one on this node's NetworkAttachments and one per relevant VNI, and one Subnet informer per relevant VNI.",
		}, []string{"resource"}),
		cached: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodeflow_vnet_cached_objects", Help: "Objects the connection agent's informers hold, by resource and field selector (node: spec.node of this node, vni: spec.vni of a relevant VNI).",
		}, []string{"resource", "selector"}),
		vnis: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeflow_vnet_relevant_vnis", Help: "VNIs of this node's NetworkAttachments.",
		}),
		attachments: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodeflow_vnet_attachments", Help: "This node's NetworkAttachments, by state: ready (interface, port and flows), waiting (no address yet), error (see status.errors.host).",
		}, []string{"state"}),
		hostErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeflow_vnet_host_errors_total", Help: "Failed attempts to make, adopt or remove an attachment's interface, namespace or port.",
		}),
		statusWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeflow_vnet_status_writes_total", Help: "Status applies to NetworkAttachments, by result.",
		}, []string{"result"}),
	}
}

func (m *metrics) register(r prometheus.Registerer) error {
	var errs []error
	for _, c := range []prometheus.Collector{m.informers, m.cached, m.vnis, m.attachments, m.hostErrors, m.statusWrites} {
		errs = append(errs, r.Register(c))
	}
	for _, s := range []string{stateReady, stateWaiting, stateError} {
		m.attachments.WithLabelValues(s)
	}
	for _, r := range []string{vnet.ResourceNetworkAttachments, vnet.ResourceSubnets} {
		m.informers.WithLabelValues(r)
	}
	m.cached.WithLabelValues(vnet.ResourceNetworkAttachments, "node")
	m.cached.WithLabelValues(vnet.ResourceNetworkAttachments, "vni")
	m.cached.WithLabelValues(vnet.ResourceSubnets, "vni")
	m.statusWrites.WithLabelValues("ok")
	m.statusWrites.WithLabelValues("error")
	return errors.Join(errs...)
}

func (f *Agent) gauges() {
	running, cached := f.inf.counts()
	for r, n := range running {
		f.m.informers.WithLabelValues(r).Set(float64(n))
	}
	for k, n := range cached {
		f.m.cached.WithLabelValues(k[0], k[1]).Set(float64(n))
	}
	f.m.vnis.Set(float64(len(f.inf.vniList())))
	counts := map[string]int{stateReady: 0, stateWaiting: 0, stateError: 0}
	for _, s := range f.states {
		counts[s]++
	}
	for s, n := range counts {
		f.m.attachments.WithLabelValues(s).Set(float64(n))
	}
}
