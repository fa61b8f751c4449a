package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
)

// hasPolicySource reports whether br0's table 65 holds a NetworkPolicy
// clause flow for source src, asking over poll's own connection.
func hasPolicySource(ctx context.Context, poll *flowPoller, src netip.Addr) (bool, error) {
	m := openflow.NewMatch(openflow.EthType(0x0800), openflow.IPv4Src(src))
	stats, err := poll.flows(ctx, plan.PodIngressPolicy, plan.FeatureNetworkPolicy, &m)
	if err != nil {
		return false, err
	}
	for _, s := range stats {
		for _, f := range s.Match.Fields {
			if f.Field == openflow.IPv4Src(src).Field && f.Class == openflow.IPv4Src(src).Class {
				return true, nil
			}
		}
	}
	return false, nil
}

// BenchmarkNetworkPolicyLabelChange measures, on the testbed's real API
// server and switches, one pod's label change that moves it into or out
// of the peers of 100 policies, with 1,000 policies in place: from the
// API write to its source clause flow appearing in (or leaving) node1's
// br0, 20 times. `go test ./testbed/e2e/ -run '^$' -bench
// NetworkPolicyLabelChange -benchtime 1x`.
func BenchmarkNetworkPolicyLabelChange(b *testing.B) {
	e := up(b)
	if !e.state.Agent {
		b.Skipf("nodeflow agent does not run: %s", e.state.AgentReason)
	}
	ctx := context.Background()
	// A client of its own, without client-go's default rate limit (5
	// requests a second), which would be most of what is measured.
	cfg := adminConfig(b, e, 500)
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	monNS := createNamespace(b, e, "np-bench-mon")
	polNS := createNamespace(b, e, "np-bench-pol")
	ns, err := kc.CoreV1().Namespaces().Get(ctx, monNS, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	ns.Labels["team"] = "ops"
	if _, err := kc.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		b.Fatal(err)
	}
	mon := deployPods(b, e, monNS, "mon", 1)[0]
	created := time.Now()
	for i := range 1000 {
		from := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprint(i % 7)}}}
		if i < 100 {
			from = networkingv1.NetworkPolicyPeer{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "ops"}},
				PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"role": "monitor"}}}
		}
		np := npPolicy(polNS, fmt.Sprintf("p%04d", i), networkingv1.NetworkPolicySpec{
			PodSelector: npApp(fmt.Sprint(i % 11)),
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{from}}}})
		if _, err := kc.NetworkingV1().NetworkPolicies(polNS).Create(ctx, np, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("1,000 policies created in %s", time.Since(created).Round(time.Millisecond))
	node1, ok := e.state.Member("node1")
	if !ok {
		b.Fatal("no node1")
	}
	poll := newFlowPoller(b, node1.OVSRundir)
	src := mon.ip(false)
	var total, api []time.Duration
	for i := range 20 {
		on := i%2 == 0
		label := `null`
		if on {
			label = `"monitor"`
		}
		patch := []byte(`{"metadata":{"labels":{"role":` + label + `}}}`)
		t0 := time.Now()
		if _, err := kc.CoreV1().Pods(monNS).Patch(ctx, mon.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			b.Fatal(err)
		}
		api = append(api, time.Since(t0))
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		for {
			ok, err := hasPolicySource(wctx, poll, src)
			if err != nil {
				cancel()
				b.Fatalf("change %d: %v", i, err)
			}
			if ok == on {
				break
			}
			select {
			case <-wctx.Done():
				cancel()
				b.Fatalf("change %d: the source clause of %s never became %v", i, src, on)
			case <-time.After(time.Millisecond):
			}
		}
		cancel()
		total = append(total, time.Since(t0))
	}
	pct := func(ds []time.Duration, q int) float64 {
		ds = slices.Clone(ds)
		slices.Sort(ds)
		return float64(ds[(len(ds)-1)*q/100].Microseconds()) / 1000
	}
	b.ReportMetric(pct(total, 50), "ms-p50")
	b.ReportMetric(pct(total, 99), "ms-p99")
	b.ReportMetric(pct(api, 50), "ms-api-write-p50")
	b.ReportMetric(pct(api, 99), "ms-api-write-p99")
	for i := range 1000 {
		_ = kc.NetworkingV1().NetworkPolicies(polNS).Delete(ctx, fmt.Sprintf("p%04d", i), metav1.DeleteOptions{})
	}
}
