package egressfirewallfeature

import (
	"context"
	"fmt"

	"nodeflow/agent/feature"
	"nodeflow/datapath/egressfirewallflows"
	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
)

// The denied packets per namespace come from the switch's own counters:
// every Deny verdict is a flow without actions, so its n_packets counts
// the packets it dropped. runCounters reads table 50's flow statistics
// every CounterInterval on the agent's connection of br0
// (feature.Host.FlowStats) and adds each deny flow's growth to
// nodeflow_egress_firewall_denied_packets_total of its namespace (a flow
// replaced by a new one starts again from zero, and its whole count is
// new). The DNS replies that the learning flows send on unlearned (no
// trusted source sent them) are counted the same way, from their flows, as
// nodeflow_egress_firewall_dns_replies_total{result="untrusted"}.

// runCounters reads the counters until ctx ends.
func (f *Firewall) runCounters(ctx context.Context) {
	var denied, dns feature.Growth[denyKey]
	feature.CounterPoll{
		Interval: f.opts.CounterInterval,
		Reads:    f.m.counterReads,
		Log:      f.log,
		What:     "table 50's counters",
		Read: func(ctx context.Context) error {
			stats, err := f.h.FlowStats(ctx, plan.Pod, plan.PodEgressFirewall, plan.FeatureEgressFirewall)
			if err != nil {
				return fmt.Errorf("egressfirewall: counters: %w", err)
			}
			f.addDenied(stats, &denied)
			f.addUntrustedDNS(stats, &dns)
			return nil
		},
	}.Run(ctx)
}

// denyKey identifies one deny flow across reads.
type denyKey struct {
	owner uint64
	flow  openflow.FlowKey
}

// addDenied adds the growth of each deny flow's counter since the last
// read to its namespace.
func (f *Firewall) addDenied(stats []openflow.FlowStats, last *feature.Growth[denyKey]) {
	f.mu.Lock()
	byHash := make(map[uint64]string, len(f.ns))
	for ns := range f.ns {
		byHash[plan.OwnerHash(egressfirewallflows.Owner(ns))] = ns
	}
	f.mu.Unlock()
	defer last.Done()
	for i := range stats {
		s := &stats[i]
		if len(s.Instructions) != 0 || plan.Cookie(s.Cookie).Feature() != plan.FeatureEgressFirewall {
			continue
		}
		p := plan.Priority(s.Priority)
		if !plan.EgressFirewallRules.Contains(p) && !plan.EgressFirewallHostAliases.Contains(p) {
			continue
		}
		k := denyKey{owner: plan.Cookie(s.Cookie).OwnerHash(), flow: s.Key()}
		d := last.Add(k, s.PacketCount)
		if d == 0 {
			continue
		}
		if ns, ok := byHash[k.owner]; ok {
			f.m.denied.WithLabelValues(ns).Add(float64(d))
		}
	}
}

// addUntrustedDNS adds the growth of the untrusted DNS flows' counters
// since the last read to the untrusted replies.
func (f *Firewall) addUntrustedDNS(stats []openflow.FlowStats, last *feature.Growth[denyKey]) {
	owner := plan.OwnerHash(egressfirewallflows.DNSOwner)
	defer last.Done()
	var total uint64
	for i := range stats {
		s := &stats[i]
		c := plan.Cookie(s.Cookie)
		if c.Feature() != plan.FeatureEgressFirewall || c.OwnerHash() != owner || plan.Priority(s.Priority) != plan.PriorityEgressFirewallDNSUntrusted {
			continue
		}
		total += last.Add(denyKey{owner: owner, flow: s.Key()}, s.PacketCount)
	}
	if total > 0 {
		f.m.dnsReplies.WithLabelValues(ReplyUntrusted).Add(float64(total))
	}
}
