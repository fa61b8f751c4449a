package networkpolicyfeature

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"nodeflow/agent/feature"
	"nodeflow/datapath/networkpolicyflows"
	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
)

// The packet counters come from the switch's own flow statistics: an
// isolated pod's drop flow counts its denied packets, a rule's conj_id
// flows the packets it allowed. runCounters reads tables 45 and 65 every
// CounterInterval on the agent's connection of br0
// (feature.Host.FlowStats) and adds each flow's growth
// to nodeflow_netpol_denied_packets_total{namespace,pod,direction} and
// nodeflow_netpol_allowed_packets_total{namespace,policy,direction,rule}
// (a flow replaced by a new one starts again from zero: its whole count is
// new).

// DefaultCounterInterval is how often the counters are read by default.
const DefaultCounterInterval = 10 * time.Second

type counterMetrics struct {
	denied, allowed *prometheus.CounterVec
	reads           *prometheus.CounterVec
}

func newCounterMetrics(reg prometheus.Registerer) (counterMetrics, error) {
	m := counterMetrics{
		denied:  feature.NewCounterVec("nodeflow_netpol_denied_packets_total", "Packets an isolated pod's policies denied, by pod and direction (from its drop flow's counter).", "namespace", "pod", "direction"),
		allowed: feature.NewCounterVec("nodeflow_netpol_allowed_packets_total", "Packets a NetworkPolicy rule allowed that no established connection carried, by policy, direction and rule index.", "namespace", "policy", "direction", "rule"),
		reads:   feature.NewCounterVec("nodeflow_netpol_counter_reads_total", "Reads of tables 45 and 65's flow counters, by result.", "result"),
	}
	if err := feature.Register(reg, m.denied, m.allowed, m.reads); err != nil {
		return m, fmt.Errorf("netpolicy: metrics: %w", err)
	}
	return m, nil
}

// counterKey identifies one flow across reads.
type counterKey struct {
	cookie uint64
	flow   openflow.FlowKey
}

// runCounters reads the counters until ctx ends.
func (f *Feature) runCounters(ctx context.Context) {
	var last feature.Growth[counterKey]
	feature.CounterPoll{
		Interval: f.opts.CounterInterval,
		Reads:    f.counters.reads,
		Log:      f.log,
		What:     "the policy tables' counters",
		Read: func(ctx context.Context) error {
			var stats []openflow.FlowStats
			for _, tb := range []plan.TableID{plan.PodEgressPolicy, plan.PodIngressPolicy} {
				s, err := f.h.FlowStats(ctx, plan.Pod, tb, plan.FeatureNetworkPolicy)
				if err != nil {
					return fmt.Errorf("netpolicy: counters of table %d: %w", tb, err)
				}
				stats = append(stats, s...)
			}
			f.addCounts(stats, &last)
			return nil
		},
	}.Run(ctx)
}

var conjIDField = openflow.ConjID(0)

// conjID returns a flow's conj_id match, or 0.
func conjID(m openflow.Match) uint32 {
	for _, f := range m.Fields {
		if f.Class == conjIDField.Class && f.Field == conjIDField.Field && len(f.Value) == 4 {
			return binary.BigEndian.Uint32(f.Value)
		}
	}
	return 0
}

// addCounts adds each counted flow's growth since the last read.
func (f *Feature) addCounts(stats []openflow.FlowStats, last *feature.Growth[counterKey]) {
	defer last.Done()
	f.idxMu.RLock()
	defer f.idxMu.RUnlock()
	for i := range stats {
		s := &stats[i]
		if plan.Cookie(s.Cookie).Feature() != plan.FeatureNetworkPolicy {
			continue
		}
		dir := networkpolicyflows.Ingress
		if plan.TableID(s.Table) == plan.PodEgressPolicy {
			dir = networkpolicyflows.Egress
		}
		var add func(float64)
		switch id := conjID(s.Match); {
		case id != 0:
			ref, ok := f.idx.Rule(id)
			if !ok {
				continue
			}
			add = f.counters.allowed.WithLabelValues(ref.Namespace, ref.Name, dir.String(), strconv.Itoa(ref.Index)).Add
		case plan.Priority(s.Priority) == plan.PriorityPolicyIsolated:
			ns, name, ok := f.idx.PodOfOwnerHash(plan.Cookie(s.Cookie).OwnerHash())
			if !ok {
				continue
			}
			add = f.counters.denied.WithLabelValues(ns, name, dir.String()).Add
		default:
			continue
		}
		if d := last.Add(counterKey{cookie: s.Cookie, flow: s.Key()}, s.PacketCount); d > 0 {
			add(float64(d))
		}
	}
}
