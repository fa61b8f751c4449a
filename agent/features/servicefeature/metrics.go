package servicefeature

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"nodeflow/agent/feature"
)

// serviceMetrics are the service proxy's metrics. The kubeproxy_* ones
// carry kube-proxy's names and meanings, so that dashboards and
// side-by-side benchmarks read the same.
type serviceMetrics struct {
	syncDuration    prometheus.Histogram
	fullSync        prometheus.Histogram
	partialSync     prometheus.Histogram
	programming     prometheus.Histogram
	lastSync        prometheus.Gauge
	lastQueued      prometheus.Gauge
	endpointChanges prometheus.Counter
	serviceChanges  prometheus.Counter

	services     prometheus.Gauge
	buildErrors  prometheus.Counter
	syncErrors   prometheus.Counter
	inputErrors  *prometheus.CounterVec
	staleFlushes prometheus.Counter
	rejects      prometheus.Counter
	rejectErrors prometheus.Counter

	// refusedEndpoints counts the endpoints (per service port) left out
	// of the groups because they cannot be right.
	refusedEndpoints prometheus.Gauge
	// refusedAddresses counts the external and ingress IPs (per service
	// port) left out because the Service may not claim them.
	refusedAddresses *prometheus.GaugeVec
}

// programmingBuckets span a millisecond to several minutes: fine below a
// second, where nodeflow's latencies are, and kube-proxy's coarse buckets
// above.
func programmingBuckets() []float64 {
	b := prometheus.ExponentialBuckets(0.001, 2, 10) // 1 ms .. 512 ms
	b = append(b, prometheus.LinearBuckets(1, 1, 59)...)
	b = append(b, prometheus.LinearBuckets(60, 5, 12)...)
	b = append(b, prometheus.LinearBuckets(120, 30, 7)...)
	slices.Sort(b)
	return slices.Compact(b)
}

// newServiceMetrics registers the service proxy's metrics on reg;
// servicesPending and endpointsPending count the Services and
// EndpointSlices whose changes wait for the next sync.
func newServiceMetrics(reg prometheus.Registerer, servicesPending, endpointsPending func() int) *serviceMetrics {
	syncBuckets := prometheus.ExponentialBuckets(0.001, 2, 15)
	m := &serviceMetrics{
		syncDuration:     feature.NewHistogram("kubeproxy_sync_proxy_rules_duration_seconds", "Duration of one service sync: rebuilding the changed service ports until both bridges hold them.", syncBuckets),
		fullSync:         feature.NewHistogram("kubeproxy_sync_full_proxy_rules_duration_seconds", "Duration of the service syncs that rebuilt every service port.", syncBuckets),
		partialSync:      feature.NewHistogram("kubeproxy_sync_partial_proxy_rules_duration_seconds", "Duration of the service syncs that rebuilt only the changed service ports.", syncBuckets),
		programming:      feature.NewHistogram("kubeproxy_network_programming_duration_seconds", "Time from an EndpointSlice's last-change-trigger-time to both bridges holding the change.", programmingBuckets()),
		lastSync:         feature.NewGauge("kubeproxy_sync_proxy_rules_last_timestamp_seconds", "The last time a service sync completed."),
		lastQueued:       feature.NewGauge("kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", "The last time a Service or EndpointSlice change queued a sync."),
		endpointChanges:  feature.NewCounter("kubeproxy_sync_proxy_rules_endpoint_changes_total", "EndpointSlice changes recorded (changes that cancel out are not counted)."),
		serviceChanges:   feature.NewCounter("kubeproxy_sync_proxy_rules_service_changes_total", "Service changes recorded (changes that cancel out are not counted)."),
		services:         feature.NewGauge("nodeflow_service_ports", "Service ports with flows on the bridges."),
		refusedEndpoints: feature.NewGauge("nodeflow_service_refused_endpoints", "Endpoints (counted per service port) left out of their service because their address cannot be right: a service address, a broadcast address."),
		refusedAddresses: feature.NewGaugeVec("nodeflow_service_refused_addresses", "External and ingress IPs (counted per service port) not programmed because their Service may not claim them, by field and reason (special, service-cidr, cluster-ip, pod-cidr, node-address, masquerade, policy).", "field", "reason"),
		buildErrors:      feature.NewCounter("nodeflow_service_build_errors_total", "Service ports whose flows could not be built or set."),
		syncErrors:       feature.NewCounter("nodeflow_service_sync_errors_total", "Service syncs that failed and were retried."),
		inputErrors:      feature.NewCounterVec("nodeflow_service_input_errors_total", "Bad Service or EndpointSlice fields ignored, by kind.", "kind"),
		staleFlushes:     feature.NewCounter("nodeflow_service_stale_flushes_total", "Conntrack flushes and affinity deletes sent for endpoints that went away."),
		rejects:          feature.NewCounter("nodeflow_service_rejects_total", "Connections to service ports without endpoints answered with a reset or ICMP unreachable."),
		rejectErrors:     feature.NewCounter("nodeflow_service_reject_errors_total", "Reject packet-ins that could not be answered."),
	}
	m.inputErrors.WithLabelValues("Service")
	m.inputErrors.WithLabelValues("EndpointSlice")
	pending := func(name, help string, n func() int) prometheus.GaugeFunc {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "kubeproxy", Name: name, Help: help},
			func() float64 { return float64(n()) })
	}
	reg.MustRegister(m.syncDuration, m.fullSync, m.partialSync, m.programming, m.lastSync, m.lastQueued,
		m.endpointChanges, m.serviceChanges,
		pending("sync_proxy_rules_service_changes_pending", "Services whose changes wait for the next sync.", servicesPending),
		pending("sync_proxy_rules_endpoint_changes_pending", "EndpointSlices whose changes wait for the next sync.", endpointsPending),
		m.services, m.refusedEndpoints, m.refusedAddresses, m.buildErrors, m.syncErrors, m.inputErrors, m.staleFlushes, m.rejects, m.rejectErrors)
	return m
}
