package agent

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"nodeflow/datapath/reconcile"
)

// Metrics are the agent's Prometheus metrics.
type Metrics struct {
	Registry        *prometheus.Registry
	SyncLatency     *prometheus.HistogramVec
	Flows           *prometheus.GaugeVec
	ReconcileErrors *prometheus.CounterVec
	PacketIns       *prometheus.CounterVec
}

// NewMetrics registers the agent's metrics in a fresh registry.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		SyncLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "nodeflow_sync_duration_seconds", Help: "Duration of one reconcile pass, by bridge and kind.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"bridge", "kind"}),
		Flows: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodeflow_flows", Help: "Desired flows per bridge.",
		}, []string{"bridge"}),
		ReconcileErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeflow_reconcile_errors_total", Help: "Reconcile passes that did not fully succeed, by bridge.",
		}, []string{"bridge"}),
		PacketIns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeflow_packet_ins_total", Help: "Packet-in messages received, by bridge.",
		}, []string{"bridge"}),
	}
	m.Registry.MustRegister(m.SyncLatency, m.Flows, m.ReconcileErrors, m.PacketIns,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// observe records one sync report of bridge.
func (m *Metrics) observe(bridge string, store *reconcile.Store, rep reconcile.SyncReport) {
	m.SyncLatency.WithLabelValues(bridge, string(rep.Kind)).Observe(rep.Duration.Seconds())
	if rep.Err != nil {
		m.ReconcileErrors.WithLabelValues(bridge).Inc()
	}
	flows, _, _ := store.Counts()
	m.Flows.WithLabelValues(bridge).Set(float64(flows))
}
