package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"nodeflow/model/egressfirewall"
)

// waitEvent waits for a Warning event on the named object with reason,
// whose message holds every part, and returns it.
func (g *egfwEnv) waitEvent(t *testing.T, ns, kind, name, reason string, parts ...string) v1.Event {
	t.Helper()
	var got v1.Event
	eventually(t, 30*time.Second, fmt.Sprintf("%s event on %s %s/%s", reason, kind, ns, name), func(ctx context.Context) error {
		list, err := g.e.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var seen []string
		for _, ev := range list.Items {
			if ev.InvolvedObject.Kind != kind || ev.InvolvedObject.Name != name || ev.Reason != reason {
				continue
			}
			seen = append(seen, ev.Message)
			ok := ev.Type == v1.EventTypeWarning
			for _, p := range parts {
				ok = ok && strings.Contains(ev.Message, p)
			}
			if ok {
				got = ev
				return nil
			}
		}
		return fmt.Errorf("events with that reason: %q", seen)
	})
	return got
}

// createRaw creates an object of either kind as given, and returns the
// API server's error.
func (g *egfwEnv) createRaw(u *unstructured.Unstructured) error {
	gvr := egressfirewall.EgressFirewallGVR
	if u.GetKind() == string(egressfirewall.KindEgressNetworkPolicy) {
		gvr = egressfirewall.EgressNetworkPolicyGVR
	}
	_, err := g.dyn.Resource(gvr).Namespace(u.GetNamespace()).Create(context.Background(), u, metav1.CreateOptions{})
	return err
}

func enpObject(ns, name string, rs ...string) *unstructured.Unstructured {
	o := &egressfirewall.EgressNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for _, r := range rules(rs...) {
		o.Spec.Egress = append(o.Spec.Egress, egressfirewall.EgressNetworkPolicyRule{Type: r.Type, To: egressfirewall.EgressNetworkPolicyPeer{CIDRSelector: r.To.CIDRSelector, DNSName: r.To.DNSName}})
	}
	return o.Unstructured()
}

// TestEgressFirewallBadInput: what the API server refuses (the CRDs'
// schemas and rules) is refused with the field named; what reaches the
// agents is reported in the status by every node and in a Warning event
// naming the object and the field, and never disturbs what was enforced:
// an invalid update keeps the rules before it, a second
// EgressNetworkPolicy leaves the oldest enforced, an EgressFirewall takes
// precedence over an EgressNetworkPolicy, and a name that never resolves
// is reported while the other rules work.
func TestEgressFirewallBadInput(t *testing.T) {
	g := egfwSetup(t)
	g.diagnoseOnFailure(t)
	ctx := context.Background()

	t.Run("refused by the API server", func(t *testing.T) {
		ef := func(name string, rs []egressfirewall.EgressFirewallRule) *unstructured.Unstructured {
			return (&egressfirewall.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: g.ns, Name: name}, Spec: egressfirewall.EgressFirewallSpec{Egress: rs}}).Unstructured()
		}
		two := rules("Allow 198.18.0.1/32")
		two[0].To.DNSName = "both.example.com"
		none := rules("Allow 198.18.0.1/32")
		none[0].To.CIDRSelector = ""
		many := make([]egressfirewall.EgressFirewallRule, egressfirewall.MaxEgressFirewallRules+1)
		for i := range many {
			many[i] = rules("Deny 198.18.0.1/32")[0]
		}
		for _, tc := range []struct {
			name string
			obj  *unstructured.Unstructured
			want []string
		}{
			{"not named default", ef("other", rules("Deny 0.0.0.0/0")), []string{"metadata.name", "must be named default"}},
			{"two destinations", ef("default", two), []string{"spec.egress[0].to", "must have at most 1 item"}},
			{"no destination", ef("default", none), []string{"spec.egress[0].to", "should have at least 1 properties"}},
			{"invalid CIDR", ef("default", rules("Deny 198.18.0.300/24")), []string{"spec.egress[0].to.cidrSelector"}},
			{"unknown protocol", ef("default", rules("Deny 198.18.0.0/24 ICMP")), []string{"spec.egress[0].ports[0].protocol", "Unsupported value"}},
			{"more rules than the limit", ef("default", many), []string{"spec.egress", "10000"}},
			{"a wildcard in an EgressNetworkPolicy", enpObject(g.ns, "wild", "Allow dns:*.example.com"), []string{"spec.egress[0].to.dnsName"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				err := g.createRaw(tc.obj)
				if err == nil {
					t.Fatalf("created; want it refused")
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
			})
		}
	})

	t.Run("invalid update keeps the rules", func(t *testing.T) {
		g.serveUDP(t, ext(false, 20))
		g.applyFirewall(t, rules("Deny 198.18.0.20/32", "Allow 198.18.0.0/24"))
		verdict(t, g.pods[0], "tcp", ext(false, 20), false)
		// The API server takes these; the agents do not: an IPv4-mapped
		// IPv6 prefix, which no IPv4 packet matches, and a node selector
		// with an unknown operator.
		bad := rules("Deny ::ffff:198.18.0.0/120", "Allow nodes:role=x")
		bad[1].To.NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "role", Operator: "Near"}}}
		g.setFirewall(t, g.ns, bad)
		g.waitStatus(t, g.ns, "EgressFirewall Rules not correctly applied: EgressFirewall "+g.ns+"/default: spec.egress[0].to.cidrSelector",
			"EgressFirewall Rules not correctly applied")
		ev := g.waitEvent(t, g.ns, "EgressFirewall", "default", egressfirewall.ReasonInvalid, "spec.egress[0].to.cidrSelector", "IPv4-mapped", "spec.egress[1].to.nodeSelector")
		if ev.InvolvedObject.FieldPath != "spec.egress[0].to.cidrSelector" || ev.InvolvedObject.APIVersion != "k8s.ovn.org/v1" {
			t.Errorf("event's object %+v", ev.InvolvedObject)
		}
		// The rules before the update are still enforced.
		for _, p := range g.pods {
			verdict(t, p, "tcp", ext(false, 20), false)
			verdict(t, p, "tcp", ext(false, 21), true)
		}
	})

	t.Run("a name that never resolves", func(t *testing.T) {
		g.setFirewall(t, g.ns, rules("Deny 198.18.0.20/32", "Allow dns:never.egfw.test", "Deny 198.18.0.21/32"))
		t.Cleanup(func() { g.deleteFirewall(t, g.ns) })
		g.waitStatus(t, g.ns, "EgressFirewall Rules not correctly applied: EgressFirewall "+g.ns+"/default: spec.egress[1].to.dnsName",
			"EgressFirewall Rules not correctly applied")
		g.waitEvent(t, g.ns, "EgressFirewall", "default", "EgressFirewallDNSNameUnresolved", `"never.egfw.test" does not resolve`, "NXDOMAIN")
		// The other rules work.
		g.waitTable50(t, "rule 2 in place", func(lines []string) bool { return hasFlow(lines, "priority=10997,", "nw_dst=198.18.0.21") })
		for _, p := range g.pods {
			verdict(t, p, "tcp", ext(false, 21), false)
			verdict(t, p, "tcp", ext(false, 22), true)
		}
		g.deleteFirewall(t, g.ns)
		g.waitTable50(t, "the EgressFirewall's rules gone", func(lines []string) bool { return !hasFlow(lines, "nw_dst=198.18.0.21") })
	})

	t.Run("two EgressNetworkPolicies, then an EgressFirewall", func(t *testing.T) {
		c := g.dyn.Resource(egressfirewall.EgressNetworkPolicyGVR).Namespace(g.ns)
		t.Cleanup(func() {
			for _, n := range []string{"older", "newer"} {
				_ = c.Delete(ctx, n, metav1.DeleteOptions{})
			}
		})
		if err := g.createRaw(enpObject(g.ns, "older", "Deny 198.18.0.21/32")); err != nil {
			t.Fatal(err)
		}
		g.waitTable50(t, "the EgressNetworkPolicy's rule", func(lines []string) bool { return hasFlow(lines, "priority=10999,", "nw_dst=198.18.0.21") })
		// Creation times have a resolution of a second.
		time.Sleep(1100 * time.Millisecond)
		if err := g.createRaw(enpObject(g.ns, "newer", "Deny 0.0.0.0/0")); err != nil {
			t.Fatal(err)
		}
		ev := g.waitEvent(t, g.ns, "EgressNetworkPolicy", "newer", egressfirewall.ReasonDuplicate, "EgressNetworkPolicy "+g.ns+"/older is older")
		t.Logf("event: %s", ev.Message)
		// The oldest is enforced, the other one not at all.
		for _, p := range g.pods {
			verdict(t, p, "tcp", ext(false, 21), false)
			verdict(t, p, "tcp", ext(false, 22), true)
		}
		// An EgressFirewall takes precedence over both.
		g.applyFirewall(t, rules("Deny 198.18.0.22/32"))
		for _, n := range []string{"older", "newer"} {
			g.waitEvent(t, g.ns, "EgressNetworkPolicy", n, egressfirewall.ReasonShadowed, "EgressFirewall "+g.ns+"/default takes precedence")
		}
		g.waitTable50(t, "the EgressFirewall's rule only", func(lines []string) bool {
			return hasFlow(lines, "priority=10999,", "nw_dst=198.18.0.22") && !hasFlow(lines, "nw_dst=198.18.0.21")
		})
		for _, p := range g.pods {
			verdict(t, p, "tcp", ext(false, 22), false)
			verdict(t, p, "tcp", ext(false, 21), true)
		}
	})
}
