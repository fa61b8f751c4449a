package networkpolicyfeature

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeflow/agent/feature"
	"nodeflow/datapath/networkpolicyflows"
	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
)

// TestCounters turns the flow statistics of a drop flow and a conj_id flow
// into the denied and allowed counters, by growth between reads.
func TestCounters(t *testing.T) {
	f := New(Options{})
	var err error
	if f.counters, err = newCounterMetrics(prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	f.idx = NewIndex(nodeConfig())
	f.idx.SetPod("x/a", matrixPod("x", "a", true))
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "web"},
		Spec: networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{}}}}
	f.idx.SetPolicy("x/web", mustCompile(t, np))
	for _, o := range f.idx.TakeDirty() {
		if _, err := f.idx.Flows(o); err != nil {
			t.Fatal(err)
		}
	}
	podCookie := uint64(plan.MakeCookie(plan.FeatureNetworkPolicy, networkpolicyflows.PodOwner("x", "a"), 0))
	polCookie := uint64(plan.MakeCookie(plan.FeatureNetworkPolicy, networkpolicyflows.PolicyOwner("x", "web"), 0))
	stats := func(denied, allowed uint64) []openflow.FlowStats {
		return []openflow.FlowStats{
			{Flow: openflow.Flow{Table: uint8(plan.PodIngressPolicy), Priority: uint16(plan.PriorityPolicyIsolated), Cookie: podCookie,
				Match: openflow.NewMatch(openflow.EthType(0x0800), openflow.IPv4Dst(matrixAddr("x", "a")))}, PacketCount: denied},
			{Flow: openflow.Flow{Table: uint8(plan.PodIngressPolicy), Priority: uint16(plan.PriorityPolicyRule), Cookie: polCookie,
				Match:        openflow.NewMatch(openflow.ConjID(1)),
				Instructions: []openflow.Instruction{openflow.GotoTable{Table: uint8(plan.PodLocalDelivery)}}}, PacketCount: allowed},
		}
	}
	last := &feature.Growth[counterKey]{}
	f.addCounts(stats(3, 5), last)
	f.addCounts(stats(7, 5), last)
	if got := testutil.ToFloat64(f.counters.denied.WithLabelValues("x", "a", "ingress")); got != 7 {
		t.Errorf("denied = %v, want 7", got)
	}
	if got := testutil.ToFloat64(f.counters.allowed.WithLabelValues("x", "web", "ingress", "0")); got != 5 {
		t.Errorf("allowed = %v, want 5", got)
	}
}
