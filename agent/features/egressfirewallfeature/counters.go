package egressfirewallfeature

import (
	"context"
	"fmt"
	"time"

	"nodeflow/datapath/egressfirewallflows"
	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
	"nodeflow/lib/openflow/ofconn"
)

// The denied packets per namespace come from the switch's own counters:
// every Deny verdict is a flow without actions, so its n_packets counts
// the packets it dropped. runCounters reads table 50's flow statistics
// every CounterInterval over a connection of its own (opened once) and adds each deny
// flow's growth to nodeflow_egress_firewall_denied_packets_total of its
// namespace (a flow replaced by a new one starts again from zero, and its
// whole count is new). The DNS replies that the learning flows send on
// unlearned (no trusted source sent them) are counted the same way, from
// their flows, as nodeflow_egress_firewall_dns_replies_total{result="untrusted"}.

// runCounters reads the counters until ctx ends, over one connection
// that it keeps (and dials again after a failed read).
func (f *Firewall) runCounters(ctx context.Context) {
	last := map[denyKey]uint64{}
	lastDNS := map[denyKey]uint64{}
	ofconn.Poller{
		Addr:     func() string { return f.opts.MgmtSocket(f.h.Node().PodBridge) },
		Options:  ofconn.Options{Logger: f.log},
		Interval: f.opts.CounterInterval,
		DialFailed: func(err error) {
			f.m.counterReads.WithLabelValues("error").Inc()
			f.log.WithError(fmt.Errorf("egressfirewall: counters: %w", err)).Debug("cannot connect to read table 50's counters")
		},
		Read: func(ctx context.Context, c *ofconn.Conn) error {
			stats, err := f.readStats(ctx, c)
			if err != nil {
				f.m.counterReads.WithLabelValues("error").Inc()
				f.log.WithError(err).Debug("cannot read table 50's counters")
				return err
			}
			f.m.counterReads.WithLabelValues("ok").Inc()
			f.addDenied(stats, last)
			f.addUntrustedDNS(stats, lastDNS)
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
// read to its namespace, and replaces last with the current counts.
func (f *Firewall) addDenied(stats []openflow.FlowStats, last map[denyKey]uint64) {
	f.mu.Lock()
	byHash := make(map[uint64]string, len(f.ns))
	for ns := range f.ns {
		byHash[plan.OwnerHash(egressfirewallflows.Owner(ns))] = ns
	}
	f.mu.Unlock()
	seen := make(map[denyKey]struct{}, len(last))
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
		seen[k] = struct{}{}
		prev, had := last[k]
		last[k] = s.PacketCount
		d := s.PacketCount
		if had && s.PacketCount >= prev {
			d = s.PacketCount - prev
		}
		if d == 0 {
			continue
		}
		if ns, ok := byHash[k.owner]; ok {
			f.m.denied.WithLabelValues(ns).Add(float64(d))
		}
	}
	for k := range last {
		if _, ok := seen[k]; !ok {
			delete(last, k)
		}
	}
}

// addUntrustedDNS adds the growth of the untrusted DNS flows' counters
// since the last read to the untrusted replies, and replaces last with
// the current counts.
func (f *Firewall) addUntrustedDNS(stats []openflow.FlowStats, last map[denyKey]uint64) {
	owner := plan.OwnerHash(egressfirewallflows.DNSOwner)
	seen := make(map[denyKey]struct{}, len(last))
	var total uint64
	for i := range stats {
		s := &stats[i]
		c := plan.Cookie(s.Cookie)
		if c.Feature() != plan.FeatureEgressFirewall || c.OwnerHash() != owner || plan.Priority(s.Priority) != plan.PriorityEgressFirewallDNSUntrusted {
			continue
		}
		k := denyKey{owner: owner, flow: s.Key()}
		seen[k] = struct{}{}
		prev, had := last[k]
		last[k] = s.PacketCount
		if had && s.PacketCount >= prev {
			total += s.PacketCount - prev
		} else {
			total += s.PacketCount
		}
	}
	for k := range last {
		if _, ok := seen[k]; !ok {
			delete(last, k)
		}
	}
	if total > 0 {
		f.m.dnsReplies.WithLabelValues(ReplyUntrusted).Add(float64(total))
	}
}

// readStats reads table 50's egress firewall flows with their counters
// over c.
func (f *Firewall) readStats(ctx context.Context, c *ofconn.Conn) ([]openflow.FlowStats, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req := openflow.NewFlowStatsRequest()
	req.Table = uint8(plan.PodEgressFirewall)
	req.Cookie = uint64(plan.FeatureEgressFirewall) << 56
	req.CookieMask = uint64(plan.FeatureMask)
	rep, err := c.MultipartReply(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("egressfirewall: counters: %w", err)
	}
	stats, err := rep.FlowStats()
	if err != nil {
		return nil, fmt.Errorf("egressfirewall: counters: %w", err)
	}
	return stats, nil
}
