package servicefeature

import (
	"net/netip"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"nodeflow/agent/feature"
	"nodeflow/host/nat"
	"nodeflow/model/service"
)

// The host's own traffic to its NodePorts, ExternalIPs and LoadBalancer
// ingress IPs (package hostnat). After each sync the service proxy rebuilds
// the DNAT rules from the service ports it built and the node IPs, and
// applies them when they changed: a full sync (the first one after start,
// then every serviceFullSyncInterval) replaces nodeflow's tables in one
// transaction, a partial one changes only the map elements. A failure is
// logged and counted, and the next sync tries again; it never fails the
// sync. The tables stay when the agent stops; with the service proxy off
// the agent removes them at start.

// hostNATRetryInterval is the wait before the sync that retries a failed
// apply, when nothing else asks for one sooner.
const hostNATRetryInterval = 5 * time.Second

// hostNATApplier programs the rules (a *hostnat.Applier; a fake in tests).
type hostNATApplier interface {
	Replace(nat.Ruleset) error
	Apply(nat.Ruleset) error
}

// hostNAT is the service proxy's part for the host's own traffic.
type hostNAT struct {
	log logrus.FieldLogger
	// applier is nil until the agent runs: a proxy built for tests only
	// computes the rules.
	applier hostNATApplier
	// want is the last rule set computed, last the last one applied (nil
	// after a failure: the next sync replaces the tables).
	want, last *nat.Ruleset
	// reported holds the conflicts logged, so each is logged once.
	reported map[string]bool

	errs    prometheus.Counter
	applies prometheus.Counter
	rules   prometheus.Gauge
}

func newHostNAT(reg prometheus.Registerer, log logrus.FieldLogger) *hostNAT {
	h := &hostNAT{
		log: log.WithField("part", "host-nat"), reported: map[string]bool{},
		errs:    feature.NewCounter("nodeflow_host_nat_errors_total", "Failed attempts to program the nftables DNAT of the host's own traffic to its node ports, external and ingress IPs (retried at the next sync)."),
		applies: feature.NewCounter("nodeflow_host_nat_applies_total", "Changes of the host's own-traffic DNAT rules sent to nftables."),
		rules:   feature.NewGauge("nodeflow_host_nat_rules", "DNAT rules (map elements, both families) for the host's own traffic to its node ports, external and ingress IPs."),
	}
	reg.MustRegister(h.errs, h.applies, h.rules)
	return h
}

// enableHostNAT makes the service proxy program nftables in the agent's
// network namespace.
func (p *Proxy) enableHostNAT() {
	p.hostNAT.applier = nat.NewApplier(nat.Options{})
}

// hostNATPorts returns the service ports built, as the rule builder takes
// them. An ingress IP whose Service restricts its sources
// (spec.loadBalancerSourceRanges) to ranges that hold none of the host's
// addresses (hostAddrs) is left out: br0 would drop the host's
// connections to it.
func hostNATPorts(built map[service.ServicePortName]builtPort, hostAddrs []netip.Addr) []nat.Port {
	out := make([]nat.Port, 0, len(built))
	for name, b := range built {
		sp := b.port
		if sp == nil {
			continue
		}
		proto, err := nat.ParseProto(string(sp.Protocol))
		if err != nil {
			continue // the proxy builds TCP, UDP and SCTP only
		}
		// What br0 left to another port, the host goes to that port for.
		external, ingress, nodePort := b.lost.without(sp)
		if sp.SourcesRestricted && !slices.ContainsFunc(hostAddrs, func(a netip.Addr) bool {
			return slices.ContainsFunc(sp.SourceRanges, func(r netip.Prefix) bool { return r.Contains(a) })
		}) {
			ingress = nil
		}
		out = append(out, nat.Port{
			Name: name.String(), Protocol: proto, Port: sp.Port, NodePort: nodePort,
			ClusterIPs: sp.ClusterIPs, ExternalIPs: external, LoadBalancerIPs: ingress,
		})
	}
	return out
}

// hostNATRelevant reports whether a service port has rules for the host's
// own traffic: a node port, ExternalIPs or ingress IPs.
func hostNATRelevant(sp *service.ServicePort) bool {
	return sp != nil && (sp.NodePort != 0 || len(sp.ExternalIPs) > 0 || len(sp.LoadBalancerIPs) > 0)
}

// syncHostNAT rebuilds the rules from the ports built and applies them
// when they changed (always on a full sync). dirty says that a port with
// such rules changed: without it, and with the last apply good, the rules
// cannot have changed, and the rebuild (linear in the services) is
// skipped. Called by sync, with p.mu held.
func (p *Proxy) syncHostNAT(full, dirty bool) {
	h := p.hostNAT
	if !full && !dirty && h.want != nil && (h.applier == nil || h.last != nil) {
		return
	}
	rs, conflicts := nat.Build(p.node.NodePortAddrs, hostNATPorts(p.built, slices.Concat(p.node.IPs, p.node.Secondary)))
	seen := map[string]bool{}
	for _, c := range conflicts {
		msg := c.Error()
		seen[msg] = true
		if !h.reported[msg] {
			h.log.WithFields(logrus.Fields{"address": c.Key.Daddr.String(), "protocol": nat.ProtoName(c.Key.Proto),
				"port": c.Key.Port, "kept": c.Kept, "dropped": c.Dropped}).Warn("two services want one address and port for the host's own traffic")
		}
	}
	h.reported = seen
	h.want = &rs
	if h.applier == nil {
		return
	}
	if !full && h.last != nil && h.last.Equal(rs) {
		return
	}
	var err error
	if full || h.last == nil {
		err = h.applier.Replace(rs)
	} else {
		err = h.applier.Apply(rs)
	}
	if err != nil {
		h.errs.Inc()
		h.last = nil
		h.log.WithError(err).WithFields(logrus.Fields{"rules": rs.Len(), "full": full}).
			Error("cannot program the host's DNAT to its node ports, external and ingress IPs; retrying at the next sync")
		// Also without other changes, the next sync comes soon.
		p.runner.RunAfter(hostNATRetryInterval)
		return
	}
	h.last = &rs
	h.applies.Inc()
	h.rules.Set(float64(rs.Len()))
}

// hostNATRules returns the rules last computed (for tests).
func (p *Proxy) hostNATRules() nat.Ruleset {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hostNAT.want == nil {
		return nat.Ruleset{}
	}
	return nat.Ruleset{V4: slices.Clone(p.hostNAT.want.V4), V6: slices.Clone(p.hostNAT.want.V6)}
}

// RemoveHostNAT deletes the host-NAT tables a service proxy left: the
// agent calls it when the service proxy is off.
func RemoveHostNAT(log logrus.FieldLogger) {
	ap := nat.NewApplier(nat.Options{})
	if err := ap.Delete(); err != nil {
		log.WithError(err).WithField("table", ap.Table()).Warn("cannot remove the host-NAT tables of the service proxy")
		return
	}
	log.WithField("table", ap.Table()).Debug("service proxy off: host-NAT tables removed")
}
