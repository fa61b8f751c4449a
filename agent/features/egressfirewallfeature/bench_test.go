package egressfirewallfeature

import (
	"fmt"
	"net/netip"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"nodeflow/datapath/egressfirewallflows"
	"nodeflow/datapath/plan"
	"nodeflow/datapath/reconcile"
	"nodeflow/lib/openflow"
	"nodeflow/model/egressfirewall"
)

// bigPolicy returns an EgressFirewall of n rules, every fourth one with a
// port, the last one a deny-all; change moves rule n/2 elsewhere.
func bigPolicy(n int, change bool) *unstructured.Unstructured {
	var rs []string
	for i := range n - 1 {
		dst := fmt.Sprintf("11.%d.%d.%d/32", byte(i>>16), byte(i>>8), byte(i))
		if change && i == n/2 {
			dst = "12.0.0.1/32"
		}
		r := "Allow " + dst
		if i%4 == 0 {
			r += " TCP/443"
		}
		rs = append(rs, r)
	}
	return ef("big", "default", append(rs, "Deny 0.0.0.0/0")...)
}

// BenchmarkNamespaceUpdate measures the agent's share of one rule changed
// in an 8,000-rule EgressFirewall, step by step: deciding the policy
// (decode and check the object), building the flows, and the reconciler
// store's diff against the installed state.
func BenchmarkNamespaceUpdate(b *testing.B) {
	objs := [2][]*unstructured.Unstructured{{bigPolicy(8000, false)}, {bigPolicy(8000, true)}}
	f := &Firewall{}
	build := func(p *egressfirewall.Policy) []openflow.Flow {
		rules := egressfirewallflows.Rules(p, func(r egressfirewall.Rule) []netip.Prefix { return []netip.Prefix{r.Dest.CIDR} })
		fs, err := egressfirewallflows.Build(egressfirewallflows.Config{}, egressfirewallflows.Namespace{Name: "big", ID: 7, ConjBlock: 1, Rules: rules})
		if err != nil {
			b.Fatal(err)
		}
		return fs
	}
	_ = f
	b.Run("select", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if sel := egressfirewall.Select("big", objs[i%2]); sel.Policy == nil {
				b.Fatal(sel.Problems)
			}
		}
	})
	pols := [2]*egressfirewall.Policy{egressfirewall.Select("big", objs[0]).Policy, egressfirewall.Select("big", objs[1]).Policy}
	b.Run("build", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			build(pols[i%2])
		}
	})
	flows := [2][]openflow.Flow{build(pols[0]), build(pols[1])}
	b.Run("store-set", func(b *testing.B) {
		s := reconcile.NewStore(reconcile.StoreOptions{Bridge: plan.Pod})
		for i := 0; b.Loop(); i++ {
			if err := s.Set(egressfirewallflows.Owner("big"), reconcile.State{Flows: flows[i%2]}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
