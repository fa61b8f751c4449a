package idlingcontroller

import "github.com/prometheus/client_golang/prometheus"

// Failure causes, the values of the cause label of
// nodeflow_unidler_failed_total.
const (
	causeMalformed   = "malformed"   // an annotation cannot be read
	causeNotFound    = "not-found"   // the target does not exist
	causeUnsupported = "unsupported" // a kind this controller cannot scale
	causeError       = "error"       // an API call failed
)

type metrics struct {
	events   prometheus.Counter
	unidled  prometheus.Counter
	failed   *prometheus.CounterVec
	ready    prometheus.Histogram
	leader   prometheus.Gauge
	children []prometheus.Collector
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		events: prometheus.NewCounter(prometheus.CounterOpts{Name: "nodeflow_unidler_needpods_events_total",
			Help: "NeedPods events that queued a Service (newer than the last one seen for it)."}),
		unidled: prometheus.NewCounter(prometheus.CounterOpts{Name: "nodeflow_unidler_unidled_total",
			Help: "Targets scaled back up from 0 to their recorded replicas."}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nodeflow_unidler_failed_total",
			Help: "Targets (or whole Services, for a malformed annotation) that could not be woken up, by cause."}, []string{"cause"}),
		ready: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "nodeflow_unidler_ready_seconds",
			Help:    "From scaling a Service's targets up to its first ready endpoint.",
			Buckets: prometheus.ExponentialBuckets(0.25, 2, 10)}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nodeflow_unidler_leader",
			Help: "1 while this replica holds the leader Lease and works, else 0."}),
	}
	for _, c := range []string{causeMalformed, causeNotFound, causeUnsupported, causeError} {
		m.failed.WithLabelValues(c)
	}
	m.children = []prometheus.Collector{m.events, m.unidled, m.failed, m.ready, m.leader}
	if reg != nil {
		for _, c := range m.children {
			reg.MustRegister(c)
		}
	}
	return m
}
