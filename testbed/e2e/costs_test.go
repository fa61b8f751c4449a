package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"nodeflow/testbed"
)

// agentPID returns the pid of the agent of node.
func agentPID(t testing.TB, e *env, node string) int {
	t.Helper()
	for _, p := range e.state.Processes {
		if p.Name == "agent "+node {
			return p.PID
		}
	}
	t.Fatalf("no agent process for %s in the testbed state", node)
	return 0
}

// wideService is a selectorless Service of ports ports (p0..., ports
// 1000...), and wideSlice its EndpointSlice of n endpoints, each serving
// every port (target ports 2000...): n x ports buckets on every node.
func wideService(name string, ports int) *v1.Service {
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1.ServiceSpec{IPFamilies: []v1.IPFamily{v1.IPv4Protocol}},
	}
	for i := range ports {
		svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{Name: fmt.Sprintf("p%d", i), Port: int32(1000 + i), Protocol: v1.ProtocolTCP})
	}
	return svc
}

func wideSlice(service string, ports, n int) *discovery.EndpointSlice {
	sl := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: service + "-wide", Labels: map[string]string{discovery.LabelServiceName: service}},
		AddressType: discovery.AddressTypeIPv4,
	}
	for i := range ports {
		sl.Ports = append(sl.Ports, discovery.EndpointPort{Name: ptr.To(fmt.Sprintf("p%d", i)), Port: ptr.To(int32(2000 + i)), Protocol: ptr.To(v1.ProtocolTCP)})
	}
	for i := range n {
		// In the cluster network, in no node's pod subnet.
		ip := netip.AddrFrom4([4]byte{10, 244, byte(200 + i/250), byte(1 + i%250)})
		sl.Endpoints = append(sl.Endpoints, discovery.Endpoint{
			Addresses: []string{ip.String()}, NodeName: ptr.To("node2"),
			Conditions: discovery.EndpointConditions{Ready: ptr.To(true)},
		})
	}
	return sl
}

// sliceWriter is the extra right a tenant needs to write its own
// EndpointSlices (the built-in admin role no longer grants it).
var sliceWriter = rbacv1.PolicyRule{APIGroups: []string{discovery.GroupName}, Resources: []string{"endpointslices"}, Verbs: []string{"create", "delete", "get", "list"}}

// rssNear is how close to its baseline an agent's RSS must come back:
// within a tenth of what the tenant's objects added, or 4 MiB.
func rssNear(base, grown int) int { return base + max(4<<10, (grown-base)/10) }

// TestCostsMemoryReturns: a tenant's Service of 100 ports with one
// EndpointSlice of 1,000 endpoints (100,000 buckets on every node) grows
// every agent's resident memory; once the tenant deletes both, each
// agent's RSS comes back near where it was within a minute (it stayed up
// for two to three, until the runtime's periodic collection, before the
// agent released memory after its state shrinks).
func TestCostsMemoryReturns(t *testing.T) {
	e := up(t)
	requireAgent(t, e)
	ctx := context.Background()
	const ns = "e2e-costs-mem"
	tn := newTenant(t, e, ns, sliceWriter)
	t.Cleanup(func() { _ = e.client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	nodes := []string{"node1", "node2"}
	rss := func() map[string]int {
		out := map[string]int{}
		for _, n := range nodes {
			kib, err := rssKiB(agentPID(t, e, n))
			if err != nil {
				t.Fatal(err)
			}
			out[n] = kib
		}
		return out
	}
	base := rss()
	t.Logf("baseline RSS (KiB): %v", base)

	const ports, endpoints = 100, 1000
	if _, err := tn.client.CoreV1().Services(ns).Create(ctx, wideService("wide", ports), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.client.DiscoveryV1().EndpointSlices(ns).Create(ctx, wideSlice("wide", ports, endpoints), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		m, _ := e.state.Member(n)
		eventually(t, 3*time.Minute, n+" programs the tenant's buckets", func(ctx context.Context) error {
			text, err := agentMetrics(m)
			if err != nil {
				return err
			}
			if v := seriesValue(text, fmt.Sprintf("nodeflow_namespace_group_buckets{namespace=%q}", ns)); v != ports*endpoints {
				return fmt.Errorf("%v buckets, want %d", v, ports*endpoints)
			}
			t.Logf("%s: the tenant's namespace: %v bytes estimated", n, seriesValue(text, fmt.Sprintf("nodeflow_namespace_memory_bytes{namespace=%q}", ns)))
			return nil
		})
	}
	grown := rss()
	t.Logf("RSS with the tenant's service (KiB): %v", grown)
	for _, n := range nodes {
		if grown[n] < base[n]+8<<10 {
			t.Logf("%s: RSS grew by %d KiB only: the return below proves little", n, grown[n]-base[n])
		}
	}

	start := time.Now()
	if err := tn.client.DiscoveryV1().EndpointSlices(ns).Delete(ctx, "wide-wide", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := tn.client.CoreV1().Services(ns).Delete(ctx, "wide", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "every agent's RSS back near its baseline", func(ctx context.Context) error {
		now := rss()
		for _, n := range nodes {
			if now[n] > rssNear(base[n], grown[n]) {
				return fmt.Errorf("%s: %d KiB (baseline %d, with the service %d)", n, now[n], base[n], grown[n])
			}
		}
		t.Logf("RSS back after %s (KiB): %v", time.Since(start).Round(time.Second), now)
		return nil
	})
}

// budgetService is a tenant's ClusterIP Service of the web pods, on
// ports 80 to 89: ten times a one-port Service's cost, so that the budget
// the test sets from it leaves room for the cluster's own Services
// (kube-system's DNS, default's kubernetes), which it bounds too.
func budgetService(name string) *v1.Service {
	svc := newService(name, v1.ServiceSpec{
		Selector: map[string]string{"app": "web"}, IPFamilies: []v1.IPFamily{v1.IPv4Protocol},
	})
	for i := range 10 {
		svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{Name: fmt.Sprintf("p%d", 80+i), Port: int32(80 + i), TargetPort: intstr.FromInt32(8080), Protocol: v1.ProtocolTCP})
	}
	return svc
}

// namespaceEntries returns the flows (both bridges) and buckets of ns's
// owners on m, from the agent's metrics.
func namespaceEntries(m *testbed.Member, ns string) (float64, error) {
	text, err := agentMetrics(m)
	if err != nil {
		return 0, err
	}
	n := 0.0
	for _, series := range []string{
		fmt.Sprintf("nodeflow_namespace_flows{bridge=%q,namespace=%q}", "br0", ns),
		fmt.Sprintf("nodeflow_namespace_flows{bridge=%q,namespace=%q}", "breth0", ns),
		fmt.Sprintf("nodeflow_namespace_group_buckets{namespace=%q}", ns),
	} {
		if v := seriesValue(text, series); v > 0 {
			n += v
		}
	}
	return n, nil
}

// TestCostsNamespaceBudget: with a namespace budget on every agent, a
// tenant's Services are programmed from the oldest while they fit; the
// newest, which does not, gets a Warning event from each node naming the
// budget, the namespace's use and its cost, and answers nothing, while the
// older ones keep working; once the tenant deletes an older one, the
// newest is programmed and works.
func TestCostsNamespaceBudget(t *testing.T) {
	e := up(t)
	requireAgent(t, e)
	ctx := context.Background()
	const ns = "e2e-costs-budget"
	tn := newTenant(t, e, ns)
	t.Cleanup(func() { _ = e.client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	pods := deployPods(t, e, ns, "web", 2)
	client := pods[0]
	var members []*testbed.Member
	for _, n := range []string{"node1", "node2"} {
		m, _ := e.state.Member(n)
		members = append(members, m)
	}

	// One Service's cost on a node, from the metrics, before any budget.
	before, err := namespaceEntries(members[0], ns)
	if err != nil {
		t.Fatal(err)
	}
	s1, err := tn.client.CoreV1().Services(ns).Create(ctx, budgetService("s1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reach(t, "s1", client.netns, false, svcAddrs(t, s1)[0], 80, map[string]bool{pods[0].name: true, pods[1].name: true}, netip.Addr{})
	var cost float64
	eventually(t, 30*time.Second, "s1's cost in the metrics", func(ctx context.Context) error {
		after, err := namespaceEntries(members[0], ns)
		if err != nil {
			return err
		}
		if cost = after - before; cost <= 0 {
			return fmt.Errorf("namespace entries %v before s1, %v after", before, after)
		}
		return nil
	})
	budget := int(2*cost + cost/2)
	t.Logf("one Service costs %v flows and buckets; budget %d", cost, budget)

	// Every agent with the budget (and as before when the test ends).
	for _, m := range members {
		replaceAgent(t, e, m, fmt.Sprintf("NODEFLOW_NAMESPACE_BUDGET=%d", budget))
		t.Cleanup(func() {
			replaceAgent(t, e, m)
			eventually(t, 60*time.Second, "the agent without a budget ready", func(ctx context.Context) error { return agentReady(ctx, m) })
		})
	}
	for _, m := range members {
		eventually(t, 60*time.Second, "the agent with the budget ready", func(ctx context.Context) error { return agentReady(ctx, m) })
	}
	s2, err := tn.client.CoreV1().Services(ns).Create(ctx, budgetService("s2"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	both := map[string]bool{pods[0].name: true, pods[1].name: true}
	reach(t, "s2", client.netns, false, svcAddrs(t, s2)[0], 80, both, netip.Addr{})
	s3, err := tn.client.CoreV1().Services(ns).Create(ctx, budgetService("s3"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// s3's Warning, from each node.
	eventually(t, 30*time.Second, "a NamespaceBudgetExceeded event on s3 from each node", func(ctx context.Context) error {
		evs, err := tn.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=s3,reason=NamespaceBudgetExceeded"})
		if err != nil {
			return err
		}
		from := map[string]string{}
		for _, ev := range evs.Items {
			if ev.Type != v1.EventTypeWarning || ev.InvolvedObject.Kind != "Service" || ev.InvolvedObject.UID != s3.UID {
				return fmt.Errorf("event %s/%s on %+v", ev.Type, ev.Reason, ev.InvolvedObject)
			}
			from[ev.Source.Host] = ev.Message
		}
		for _, m := range members {
			msg, ok := from[m.Name]
			if !ok {
				return fmt.Errorf("none from %s (%d events)", m.Name, len(evs.Items))
			}
			wants := []string{fmt.Sprintf("budget of %d", budget), "Service " + ns + "/s3 is not programmed"}
			if m.Name == "node1" {
				// Where the cost was measured.
				wants = append(wants, fmt.Sprintf("uses %d", int(2*cost)), fmt.Sprintf("needs %d flows and buckets", int(cost)))
			}
			for _, want := range wants {
				if !strings.Contains(msg, want) {
					return fmt.Errorf("%s's event %q lacks %q", m.Name, msg, want)
				}
			}
		}
		t.Logf("s3's event from node1: %s", from["node1"])
		return nil
	})
	for _, m := range members {
		if v := seriesValue(mustMetrics(t, m), fmt.Sprintf("nodeflow_namespace_budget_held_objects{namespace=%q}", ns)); v != 1 {
			t.Errorf("%s: %v objects held back, want 1", m.Name, v)
		}
	}
	// The agent's table says the same.
	out, err := exec.Command(filepath.Join(e.binDir, "nodeflow"), "flows", "--socket", filepath.Join(members[0].OVSRundir, "nodeflow.sock"),
		"--by-namespace").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "# held back: Service "+ns+"/s3: ") {
		t.Errorf("nodeflow flows --by-namespace: %v\n%s", err, out)
	}
	t.Logf("nodeflow flows --by-namespace on node1:\n%s", out)
	// The older Services work; the newest does not.
	reach(t, "s1 beside the held-back s3", client.netns, false, svcAddrs(t, s1)[0], 80, both, netip.Addr{})
	reach(t, "s2 beside the held-back s3", client.netns, false, svcAddrs(t, s2)[0], 80, both, netip.Addr{})
	if pod, _, err := httpGet(ctx, client.netns, svcAddrs(t, s3)[0], 80); err == nil {
		t.Errorf("s3, held back, answered from %s", pod)
	}

	// s1 goes: s3 fits, and works.
	if err := tn.client.CoreV1().Services(ns).Delete(ctx, "s1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	reach(t, "s3 once s1 went", client.netns, false, svcAddrs(t, s3)[0], 80, both, netip.Addr{})
	eventually(t, 30*time.Second, "a NamespaceBudgetAdmitted event on s3", func(ctx context.Context) error {
		evs, err := tn.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=s3,reason=NamespaceBudgetAdmitted"})
		if err != nil {
			return err
		}
		if len(evs.Items) == 0 {
			return fmt.Errorf("none yet")
		}
		return nil
	})
}

// mustMetrics returns the agent's metrics text on m.
func mustMetrics(t *testing.T, m *testbed.Member) string {
	t.Helper()
	text, err := agentMetrics(m)
	if err != nil {
		t.Fatal(err)
	}
	return text
}
