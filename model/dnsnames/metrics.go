package dnsnames

import "github.com/prometheus/client_golang/prometheus"

// metrics are the cache's counters. Counters are atomics, bumped without
// the lock; gauges are read from the cache when collected.
type metrics struct {
	lookups, failures         counter
	observed, observedChanges counter
	excluded, evicted         counter
	duration                  prometheus.Histogram
}

var (
	descLookups = prometheus.NewDesc("nodeflow_egress_firewall_dns_lookups_total",
		"Lookups of exact dnsNames (A and AAAA together), answered or not.", nil, nil)
	descFailures = prometheus.NewDesc("nodeflow_egress_firewall_dns_lookup_failures_total",
		"Lookups that got no answer from any server for A, AAAA or both (NXDOMAIN is an answer).", nil, nil)
	descObserved = prometheus.NewDesc("nodeflow_egress_firewall_dns_observed_answers_total",
		"DNS answers seen on their way to pods and offered to the cache.", nil, nil)
	descObservedChanges = prometheus.NewDesc("nodeflow_egress_firewall_dns_observed_changes_total",
		"Observed DNS answers that brought an address new to a registered name.", nil, nil)
	descDropped = prometheus.NewDesc("nodeflow_egress_firewall_dns_dropped_addresses_total",
		"Addresses not kept: in an excluded (cluster) prefix or unspecified, or evicted from a name at its address limit.",
		[]string{"reason"}, nil)
	descNames = prometheus.NewDesc("nodeflow_egress_firewall_dns_names",
		"Registered dnsNames, by kind (exact or wildcard).", []string{"kind"}, nil)
	descAddrs = prometheus.NewDesc("nodeflow_egress_firewall_dns_addresses",
		"Addresses held for all registered dnsNames.", nil, nil)
	descFailing = prometheus.NewDesc("nodeflow_egress_firewall_dns_failing_names",
		"Exact dnsNames whose last lookup failed.", nil, nil)
)

func newMetrics() metrics {
	return metrics{duration: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "nodeflow_egress_firewall_dns_lookup_duration_seconds",
		Help:    "Time of one lookup of an exact dnsName, A and AAAA asked at once, retries over servers and TCP included.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5 ms .. 16 s
	})}
}

// Describe sends the cache's metric descriptions; with Collect, it makes
// the Cache a prometheus.Collector to register where the agent's
// metrics are.
func (c *Cache) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLookups, descFailures, descObserved, descObservedChanges, descDropped, descNames, descAddrs, descFailing} {
		ch <- d
	}
	c.m.duration.Describe(ch)
}

// Collect sends the cache's metrics.
func (c *Cache) Collect(ch chan<- prometheus.Metric) {
	count := func(d *prometheus.Desc, v *counter, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v.Load()), labels...)
	}
	count(descLookups, &c.m.lookups)
	count(descFailures, &c.m.failures)
	count(descObserved, &c.m.observed)
	count(descObservedChanges, &c.m.observedChanges)
	count(descDropped, &c.m.excluded, "excluded")
	count(descDropped, &c.m.evicted, "limit")
	c.m.duration.Collect(ch)

	c.mu.Lock()
	exact, wild := len(c.exact), len(c.wildcards)
	addrs, failing := 0, 0
	for _, e := range c.exact {
		addrs += len(e.addrs)
		if e.failures > 0 {
			failing++
		}
	}
	for _, e := range c.wildcards {
		addrs += len(e.addrs)
	}
	c.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descNames, prometheus.GaugeValue, float64(exact), "exact")
	ch <- prometheus.MustNewConstMetric(descNames, prometheus.GaugeValue, float64(wild), "wildcard")
	ch <- prometheus.MustNewConstMetric(descAddrs, prometheus.GaugeValue, float64(addrs))
	ch <- prometheus.MustNewConstMetric(descFailing, prometheus.GaugeValue, float64(failing))
}
