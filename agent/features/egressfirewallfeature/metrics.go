package egressfirewallfeature

import "github.com/prometheus/client_golang/prometheus"

// metrics are the firewall's own metrics; the name cache registers its
// DNS lookup metrics beside them (package dnsnames).
type metrics struct {
	namespaces, rules, flows prometheus.Gauge
	syncDuration             prometheus.Histogram
	syncErrors               prometheus.Counter
	problems                 *prometheus.CounterVec
	statusWrites             *prometheus.CounterVec

	dnsReplies *prometheus.CounterVec
	dnsHeld    prometheus.Gauge
	dnsHold    prometheus.Histogram
	dnsSources *prometheus.GaugeVec

	denied       *prometheus.CounterVec
	counterReads *prometheus.CounterVec
}

// Kinds of trusted DNS sources
// (nodeflow_egress_firewall_dns_trusted_sources{kind}).
const (
	sourceClusterIP = "cluster_ip"
	sourceEndpoint  = "endpoint"
	sourceResolver  = "resolver"
)

// Results of DNS replies caught by the learning flows
// (nodeflow_egress_firewall_dns_replies_total{result}).
const (
	// ReplyPassed: not a reply to learn from (not DNS, an error, no
	// answer) or no answer that a rule names: released at once.
	ReplyPassed = "passed"
	// ReplyUntrusted: not from a trusted source (a cluster DNS Service,
	// answered by a pod of its namespace; a resolver the agent asks or
	// Options.TrustedDNS names, from the gateway or the host): never
	// learned. Most never reach the agent: the switch sends them on and
	// its flow counters count them (read every CounterInterval); the
	// agent counts the few it is sent while the sources change.
	ReplyUntrusted = "untrusted"
	// ReplyLearned: held until its addresses were installed, then
	// released.
	ReplyLearned = "learned"
	// ReplyDroppedFull: more replies held than MaxHeld: dropped.
	ReplyDroppedFull = "dropped_full"
	// ReplyDroppedTimeout: its addresses were not installed within
	// MaxHold: dropped, and the pod's resolver asks again.
	ReplyDroppedTimeout = "dropped_timeout"
	// ReplySendError: the packet-out failed.
	ReplySendError = "send_error"
)

func newMetrics() *metrics {
	return &metrics{
		namespaces: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeflow_egress_firewall_namespaces", Help: "Namespaces whose egress firewall is enforced on this node.",
		}),
		rules: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeflow_egress_firewall_rules", Help: "Egress firewall rules programmed on this node, in every namespace.",
		}),
		flows: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeflow_egress_firewall_flows", Help: "Table 50 flows the egress firewall rules take.",
		}),
		syncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "nodeflow_egress_firewall_sync_duration_seconds", Help: "Time to decide and build one namespace's egress firewall.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		syncErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeflow_egress_firewall_sync_errors_total", Help: "Namespace syncs whose flows could not be built or set (retried).",
		}),
		problems: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeflow_egress_firewall_problems_total", Help: "Objects reported as not enforced as they stand, by event reason.",
		}, []string{"reason"}),
		statusWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeflow_egress_firewall_status_writes_total", Help: "Writes of this node's EgressFirewall status message, by result.",
		}, []string{"result"}),
		dnsReplies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeflow_egress_firewall_dns_replies_total", Help: "DNS replies to pods caught for learning, by what became of them.",
		}, []string{"result"}),
		dnsHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeflow_egress_firewall_dns_held_replies", Help: "DNS replies held now while their addresses are installed.",
		}),
		dnsHold: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "nodeflow_egress_firewall_dns_hold_seconds",
			Help:    "Time a DNS reply was held, from its packet-in to its release, for the replies that were held (result learned).",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16), // 50 us .. 1.6 s
		}),
		dnsSources: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodeflow_egress_firewall_dns_trusted_sources",
			Help: "Sources whose DNS answers to pods are learned from: cluster DNS Services' ClusterIPs and endpoint addresses, and resolver prefixes.",
		}, []string{"kind"}),
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeflow_egress_firewall_denied_packets_total", Help: "Packets dropped by a namespace's Deny rules, from the flow counters.",
		}, []string{"namespace"}),
		counterReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeflow_egress_firewall_counter_reads_total", Help: "Reads of table 50's flow counters, by result.",
		}, []string{"result"}),
	}
}

func (m *metrics) register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.namespaces, m.rules, m.flows, m.syncDuration, m.syncErrors, m.problems,
		m.statusWrites, m.dnsReplies, m.dnsHeld, m.dnsHold, m.dnsSources, m.denied, m.counterReads} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	for _, k := range []string{sourceClusterIP, sourceEndpoint, sourceResolver} {
		m.dnsSources.WithLabelValues(k)
	}
	for _, r := range []string{ReplyPassed, ReplyUntrusted, ReplyLearned, ReplyDroppedFull, ReplyDroppedTimeout, ReplySendError} {
		m.dnsReplies.WithLabelValues(r)
	}
	return nil
}
