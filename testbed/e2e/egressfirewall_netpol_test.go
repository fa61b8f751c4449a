package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestEgressFirewallAndNetworkPolicy checks the order docs/network-policy.md
// states: a pod's egress NetworkPolicy (br0 table 45) is judged before its
// namespace's egress firewall (table 50), and a connection leaves only if
// both allow it. The firewall allows 198.18.0.1 and .2 and denies the
// rest; the policy allows .2 and .3: only .2 is reached, and the attempts
// to .1 never reach the firewall (its Allow flow counts nothing, the pods'
// drop flows in table 45 count them).
func TestEgressFirewallAndNetworkPolicy(t *testing.T) {
	g := egfwSetup(t)
	g.diagnoseOnFailure(t)
	ctx := context.Background()
	g.applyFirewall(t, rules("Allow 198.18.0.1/32", "Allow 198.18.0.2/32", "Deny 0.0.0.0/0"))
	np := npPolicy(g.ns, "egress-to-2-and-3", networkingv1.NetworkPolicySpec{
		PodSelector: npApp("egfw"),
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
		Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{
			{IPBlock: &networkingv1.IPBlock{CIDR: "198.18.0.2/32"}},
			{IPBlock: &networkingv1.IPBlock{CIDR: "198.18.0.3/32"}},
		}}},
	})
	c := g.e.client.NetworkingV1().NetworkPolicies(g.ns)
	if _, err := c.Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), np.Name, metav1.DeleteOptions{}) })
	// The policy is in place once the pods' egress drop flows are.
	for _, p := range g.pods {
		m := member(t, g.e, p.node)
		eventually(t, 30*time.Second, p.node+": the pod's egress isolation", func(context.Context) error {
			if table45Drop(dumpFlowStats(t, m, "br0"), p.port) == "" {
				return fmt.Errorf("no table 45 drop for port %d", p.port)
			}
			return nil
		})
	}
	g.verdicts(t, []check{
		{"tcp", ext(false, 1), false}, // the firewall allows, the policy does not
		{"tcp", ext(false, 2), true},  // both allow
		{"tcp", ext(false, 3), false}, // the policy allows, the firewall does not
	})
	for _, p := range g.pods {
		m := member(t, g.e, p.node)
		lines := dumpFlowStats(t, m, "br0")
		if l, ok := findFlow(lines, "table=50,", "priority=10999", "nw_dst=198.18.0.1"); !ok || packetsOf(l) != 0 {
			t.Errorf("%s: the firewall's Allow of 198.18.0.1 saw packets the policy had denied: %q", p.node, l)
		}
		drop := table45Drop(lines, p.port)
		if packetsOf(drop) < 2 {
			t.Errorf("%s: the pod's table 45 drop counted %d packets, want its attempts to 198.18.0.1: %q", p.node, packetsOf(drop), drop)
		}
		if l, ok := findFlow(lines, "table=50,", "priority=10997", "actions=drop"); !ok || packetsOf(l) < 2 {
			t.Errorf("%s: the firewall's deny-all did not count the attempts to 198.18.0.3: %q", p.node, l)
		}
	}
}

// table45Drop returns the line of br0's egress drop flow of port, or "".
func table45Drop(lines []string, port int) string {
	for _, l := range lines {
		if strings.Contains(l, "table=45,") && strings.Contains(l, "priority=100,") && strings.Contains(l, "in_port="+strconv.Itoa(port)+" ") {
			return l
		}
	}
	return ""
}
