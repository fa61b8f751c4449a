package vnetipam

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	assignments   prometheus.Counter
	failures      *prometheus.CounterVec
	lockConflicts prometheus.Counter
	latency       prometheus.Histogram
	freed         *prometheus.CounterVec
	leader        prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		assignments: prometheus.NewCounter(prometheus.CounterOpts{Name: "nodeflow_ipam_assignments_total",
			Help: "Addresses written into NetworkAttachments' status (first assignments and replacements)."}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nodeflow_ipam_failures_total",
			Help: "Problems newly reported on NetworkAttachments, by reason (the event reasons), and syncs failed on an API call (APIError)."}, []string{"reason"}),
		lockConflicts: prometheus.NewCounter(prometheus.CounterOpts{Name: "nodeflow_ipam_lock_conflicts_total",
			Help: "Lock creates refused because the lock existed, and addresses in a status found locked by another attachment."}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "nodeflow_ipam_assignment_seconds",
			Help:    "From a NetworkAttachment's creationTimestamp (whole seconds) to the write of its first address.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14)}),
		freed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nodeflow_ipam_locks_freed_total",
			Help: "IPLocks deleted by the controller, by why: attachment-gone or extra."}, []string{"why"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nodeflow_ipam_leader",
			Help: "1 while this replica holds the leader Lease and works, else 0."}),
	}
	for _, r := range []string{ReasonSubnetNotFound, ReasonSubnetInvalid, ReasonSubnetConflict, ReasonSubnetFull,
		ReasonVNIMismatch, ReasonNodeNotFound, ReasonMalformed, reasonAPIError} {
		m.failures.WithLabelValues(r)
	}
	m.freed.WithLabelValues(freedGone)
	m.freed.WithLabelValues(freedExtra)
	if reg != nil {
		for _, c := range []prometheus.Collector{m.assignments, m.failures, m.lockConflicts, m.latency, m.freed, m.leader} {
			reg.MustRegister(c)
		}
	}
	return m
}
