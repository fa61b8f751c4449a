package egressfirewallfeature

import (
	"github.com/prometheus/client_golang/prometheus"

	"nodeflow/agent/feature"
)

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
		namespaces:   feature.NewGauge("nodeflow_egress_firewall_namespaces", "Namespaces whose egress firewall is enforced on this node."),
		rules:        feature.NewGauge("nodeflow_egress_firewall_rules", "Egress firewall rules programmed on this node, in every namespace."),
		flows:        feature.NewGauge("nodeflow_egress_firewall_flows", "Table 50 flows the egress firewall rules take."),
		syncDuration: feature.NewHistogram("nodeflow_egress_firewall_sync_duration_seconds", "Time to decide and build one namespace's egress firewall.", prometheus.ExponentialBuckets(0.0001, 2, 16)),
		syncErrors:   feature.NewCounter("nodeflow_egress_firewall_sync_errors_total", "Namespace syncs whose flows could not be built or set (retried)."),
		problems:     feature.NewCounterVec("nodeflow_egress_firewall_problems_total", "Objects reported as not enforced as they stand, by event reason.", "reason"),
		statusWrites: feature.NewCounterVec("nodeflow_egress_firewall_status_writes_total", "Writes of this node's EgressFirewall status message, by result.", "result"),
		dnsReplies:   feature.NewCounterVec("nodeflow_egress_firewall_dns_replies_total", "DNS replies to pods caught for learning, by what became of them.", "result"),
		dnsHeld:      feature.NewGauge("nodeflow_egress_firewall_dns_held_replies", "DNS replies held now while their addresses are installed."),
		dnsHold: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "nodeflow_egress_firewall_dns_hold_seconds",
			Help:    "Time a DNS reply was held, from its packet-in to its release, for the replies that were held (result learned).",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16), // 50 us .. 1.6 s
		}),
		dnsSources:   feature.NewGaugeVec("nodeflow_egress_firewall_dns_trusted_sources", "Sources whose DNS answers to pods are learned from: cluster DNS Services' ClusterIPs and endpoint addresses, and resolver prefixes.", "kind"),
		denied:       feature.NewCounterVec("nodeflow_egress_firewall_denied_packets_total", "Packets dropped by a namespace's Deny rules, from the flow counters.", "namespace"),
		counterReads: feature.NewCounterVec("nodeflow_egress_firewall_counter_reads_total", "Reads of table 50's flow counters, by result.", "result"),
	}
}

func (m *metrics) register(r prometheus.Registerer) error {
	if err := feature.Register(r, m.namespaces, m.rules, m.flows, m.syncDuration, m.syncErrors, m.problems,
		m.statusWrites, m.dnsReplies, m.dnsHeld, m.dnsHold, m.dnsSources, m.denied, m.counterReads); err != nil {
		return err
	}
	for _, k := range []string{sourceClusterIP, sourceEndpoint, sourceResolver} {
		m.dnsSources.WithLabelValues(k)
	}
	for _, r := range []string{ReplyPassed, ReplyUntrusted, ReplyLearned, ReplyDroppedFull, ReplyDroppedTimeout, ReplySendError} {
		m.dnsReplies.WithLabelValues(r)
	}
	return nil
}
