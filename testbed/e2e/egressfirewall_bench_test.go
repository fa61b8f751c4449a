package e2e

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"nodeflow/datapath/egressfirewallflows"
	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
	"nodeflow/lib/openflow/ofconn"
	"nodeflow/model/egressfirewall"
	"nodeflow/testbed"
	"nodeflow/testbed/ovs"
	"nodeflow/testbed/ovs/ovstest"
)

var egfwBench scenario

// benchRuleAddr is the destination of rule i of the benchmark's policies:
// a distinct /32 per rule.
func benchRuleAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{11, byte(i >> 16), byte(i >> 8), byte(i)})
}

// benchRules returns n rules: n-1 Allow rules to one /32 each, every
// fourth one limited to TCP 443, and a deny-all.
func benchRules(n int) []egressfirewall.EgressFirewallRule {
	out := make([]egressfirewall.EgressFirewallRule, 0, n)
	for i := range n - 1 {
		r := egressfirewall.EgressFirewallRule{Type: egressfirewall.RuleAllow, To: egressfirewall.EgressFirewallDestination{CIDRSelector: benchRuleAddr(i).String() + "/32"}}
		if i%4 == 0 {
			port := int32(443)
			r.Ports = []egressfirewall.EgressFirewallPort{{Protocol: "TCP", Port: &port}}
		}
		out = append(out, r)
	}
	return append(out, egressfirewall.EgressFirewallRule{Type: egressfirewall.RuleDeny, To: egressfirewall.EgressFirewallDestination{CIDRSelector: "0.0.0.0/0"}})
}

// flowPoller asks a node's br0, over an OpenFlow connection of its own,
// for the flows of a table: whether table 50 holds an egress firewall
// flow to an address, how many it holds, whether table 30 holds a
// service's; and for a group's buckets (groupHasDNAT, in the Services
// benchmark). No fork per question, unlike ovs-ofctl.
type flowPoller struct {
	c *ofconn.Conn
}

func newFlowPoller(tb testing.TB, rundir string) *flowPoller {
	tb.Helper()
	l := logrus.New()
	l.SetOutput(io.Discard)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := ofconn.Dial(ctx, "unix:"+filepath.Join(rundir, "br0.mgmt"), ofconn.Options{Logger: l})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return &flowPoller{c: c}
}

// flows returns the flows of table that match match (nil: every flow)
// and, unless feature is 0, carry feature in their cookie.
func (p *flowPoller) flows(ctx context.Context, table plan.TableID, feature plan.Feature, match *openflow.Match) ([]openflow.FlowStats, error) {
	req := openflow.NewFlowStatsRequest()
	req.Table = uint8(table)
	if feature != 0 {
		req.Cookie = uint64(feature) << 56
		req.CookieMask = uint64(plan.FeatureMask)
	}
	if match != nil {
		req.Match = *match
	}
	rep, err := p.c.MultipartReply(ctx, req)
	if err != nil {
		return nil, err
	}
	return rep.FlowStats()
}

// has reports whether a flow of table 50 at priority prio matches dst.
func (p *flowPoller) has(ctx context.Context, dst netip.Addr, prio plan.Priority) (bool, error) {
	m := openflow.NewMatch(openflow.EthType(0x0800), openflow.IPv4Dst(dst))
	stats, err := p.flows(ctx, plan.PodEgressFirewall, plan.FeatureEgressFirewall, &m)
	if err != nil {
		return false, err
	}
	for _, s := range stats {
		if plan.Priority(s.Priority) == prio {
			return true, nil
		}
	}
	return false, nil
}

// count returns how many egress firewall flows table 50 holds.
func (p *flowPoller) count(ctx context.Context) (int, error) {
	stats, err := p.flows(ctx, plan.PodEgressFirewall, plan.FeatureEgressFirewall, nil)
	return len(stats), err
}

// waitFor polls until has(dst, prio) is want and returns when it saw it.
func (p *flowPoller) waitFor(ctx context.Context, dst netip.Addr, prio plan.Priority, want bool) (time.Time, error) {
	for {
		ok, err := p.has(ctx, dst, prio)
		if err != nil {
			return time.Time{}, err
		}
		if ok == want {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("flow to %s at priority %d: %w", dst, prio, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// BenchmarkEgressFirewall measures, on the testbed's real API server and
// switches, with the agents as the testbed runs them:
//
//   - one namespace's EgressFirewall of 8,000 rules (ovn-kubernetes's
//     limit): from the API write to all its flows in node1's br0 (the
//     last rule's flow seen by an OpenFlow poller; the namespace is one
//     bundle, so all of them), and to the status of both nodes;
//   - the same for 10,000 rules (over both anchors' limits);
//   - one rule of the 8,000 changed, 30 times: API write to the new flow
//     in br0, p50 and p99;
//   - the same 8,000 rules' flows installed into a fresh switch, in the
//     same run, by `ovs-ofctl --bundle add-flows` and by nodeflow's own
//     OpenFlow connection in one bundle.
//
// It runs once whatever b.N says, and reports milliseconds.
func BenchmarkEgressFirewall(b *testing.B) { egfwBench.report(b, runEgressFirewallBench) }

func runEgressFirewallBench(b *testing.B, e *env) map[string]float64 {
	res := map[string]float64{}
	ctx := context.Background()
	cfg := adminConfig(b, e, 200)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	node1, _ := e.state.Member("node1")
	poll := newFlowPoller(b, node1.OVSRundir)

	create := func(ns string, n int) {
		if _, err := kc.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		// The namespace's id comes first: wait until the agents know it
		// (a Deny-all policy shows it in table 50).
		c := dyn.Resource(egressfirewall.EgressFirewallGVR).Namespace(ns)
		probe := &egressfirewall.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"},
			Spec: egressfirewall.EgressFirewallSpec{Egress: []egressfirewall.EgressFirewallRule{{Type: egressfirewall.RuleDeny, To: egressfirewall.EgressFirewallDestination{CIDRSelector: "203.0.113.1/32"}}}}}
		if _, err := c.Create(ctx, probe.Unstructured(), metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		if _, err := poll.waitFor(wctx, netip.MustParseAddr("203.0.113.1"), plan.EgressFirewallRules.High, true); err != nil {
			b.Fatal(err)
		}
		cancel()
		if err := c.Delete(ctx, "default", metav1.DeleteOptions{}); err != nil {
			b.Fatal(err)
		}
		wctx, cancel = context.WithTimeout(ctx, 60*time.Second)
		if _, err := poll.waitFor(wctx, netip.MustParseAddr("203.0.113.1"), plan.EgressFirewallRules.High, false); err != nil {
			b.Fatal(err)
		}
		cancel()

		// The timed create: a watch for the status, a poller for the
		// last rule's flow.
		w, err := c.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=default"})
		if err != nil {
			b.Fatal(err)
		}
		defer w.Stop()
		obj := (&egressfirewall.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}, Spec: egressfirewall.EgressFirewallSpec{Egress: benchRules(n)}}).Unstructured()
		last := benchRuleAddr(n - 3) // the last Allow without ports
		lastPrio, _ := plan.EgressFirewallRules.Rank(n - 3)
		start := time.Now()
		if _, err := c.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		written := time.Since(start)
		wctx, cancel = context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		inOVS, err := poll.waitFor(wctx, last, lastPrio, true)
		if err != nil {
			b.Fatal(err)
		}
		statusAt := map[string]time.Duration{}
		for len(statusAt) < 2 {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					b.Fatal("watch ended")
				}
				if ev.Type != watch.Modified && ev.Type != watch.Added {
					continue
				}
				u := ev.Object.(*unstructured.Unstructured)
				msgs, _, _ := unstructured.NestedStringSlice(u.Object, "status", "messages")
				for _, m := range msgs {
					node, rest, _ := strings.Cut(m, ": ")
					if rest == "EgressFirewall Rules applied" {
						if _, seen := statusAt[node]; !seen {
							statusAt[node] = time.Since(start)
						}
					}
				}
			case <-wctx.Done():
				b.Fatalf("status of both nodes: %v", wctx.Err())
			}
		}
		lines, err := table50(node1)
		if err != nil {
			b.Fatal(err)
		}
		flows := 0
		for _, l := range lines {
			if strings.Contains(l, "reg1=") {
				flows++
			}
		}
		k := fmt.Sprintf("%d", n)
		res["ms-write-to-ovs-"+k] = float64(inOVS.Sub(start).Microseconds()) / 1000
		res["ms-write-to-status-"+k] = float64(max(statusAt["node1"], statusAt["node2"]).Microseconds()) / 1000
		b.Logf("%d rules: API write %s; all flows in node1's br0 %s after the write started; status applied on node1 %s, node2 %s; node1 table 50 holds %d flows of namespaces",
			n, written.Round(time.Millisecond), inOVS.Sub(start).Round(time.Millisecond), statusAt["node1"].Round(time.Millisecond), statusAt["node2"].Round(time.Millisecond), flows)
	}
	create("egfw-bench-8000", 8000)
	create("egfw-bench-10000", 10000)
	manyNamespaces(b, kc, dyn, node1, poll, res)

	// One rule changed in the 8,000-rule policy, 30 times.
	c := dyn.Resource(egressfirewall.EgressFirewallGVR).Namespace("egfw-bench-8000")
	var lat, agent, api []time.Duration
	for i := range 30 {
		cur, err := c.Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		ef, err := egressfirewall.DecodeEgressFirewall(cur)
		if err != nil {
			b.Fatal(err)
		}
		idx := 4001 + 2*i // rules without ports
		dst := netip.AddrFrom4([4]byte{12, 0, byte(i), 1})
		ef.Spec.Egress[idx].To.CIDRSelector = dst.String() + "/32"
		u := ef.Unstructured()
		u.SetResourceVersion(cur.GetResourceVersion())
		prio, _ := plan.EgressFirewallRules.Rank(idx)
		start := time.Now()
		if _, err := c.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		written := time.Now()
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		at, err := poll.waitFor(wctx, dst, prio, true)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, at.Sub(start))
		agent = append(agent, at.Sub(written))
		api = append(api, written.Sub(start))
	}
	q := func(ds []time.Duration, q float64) time.Duration {
		ds = slices.Clone(ds)
		slices.Sort(ds)
		return ds[min(len(ds)-1, int(q*float64(len(ds))))]
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	res["ms-one-rule-change-p50"], res["ms-one-rule-change-p99"] = ms(q(lat, 0.5)), ms(q(lat, 0.99))
	res["ms-one-rule-change-agent-p50"], res["ms-one-rule-change-agent-p99"] = ms(q(agent, 0.5)), ms(q(agent, 0.99))
	b.Logf("one rule of 8,000 changed, %d times: API write started to the new flow in br0 p50 %s p99 %s; the API write itself p50 %s p99 %s; "+
		"its answer to the flow in br0 (watch, decode, build, reconcile) p50 %s p99 %s",
		len(lat), q(lat, 0.5).Round(100*time.Microsecond), q(lat, 0.99).Round(100*time.Microsecond),
		q(api, 0.5).Round(100*time.Microsecond), q(api, 0.99).Round(100*time.Microsecond),
		q(agent, 0.5).Round(100*time.Microsecond), q(agent, 0.99).Round(100*time.Microsecond))

	// The same flows, into a fresh switch: ovs-ofctl --bundle against
	// nodeflow's connection.
	built, err := egressfirewallflows.Build(egressfirewallflows.Config{}, egressfirewallflows.Namespace{Name: "bench", ID: 0x123, ConjBlock: 1, Rules: modelRules(benchRules(8000))})
	if err != nil {
		b.Fatal(err)
	}
	sb := ovstest.New(b, ovs.Options{Dummy: true})
	if _, err := sb.Vsctl("add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=dummy", "protocols=OpenFlow13,OpenFlow15", "fail_mode=secure"); err != nil {
		b.Fatal(err)
	}
	var text strings.Builder
	for _, f := range built {
		text.WriteString(strings.TrimSpace(f.String()))
		text.WriteByte('\n')
	}
	file := filepath.Join(b.TempDir(), "flows")
	if err := os.WriteFile(file, []byte(text.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if out, err := exec.Command("ovs-ofctl", "-O", "OpenFlow15", "--bundle", "add-flows", "unix:"+sb.MgmtSock("br0"), file).CombinedOutput(); err != nil {
		b.Fatalf("ovs-ofctl --bundle add-flows: %v\n%s", err, out)
	}
	ofctl := time.Since(start)
	if _, err := sb.Ofctl("-O", "OpenFlow15", "del-flows", "br0"); err != nil {
		b.Fatal(err)
	}
	l := logrus.New()
	l.SetOutput(io.Discard)
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := ofconn.Dial(cctx, "unix:"+sb.MgmtSock("br0"), ofconn.Options{Logger: l})
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	msgs := make([]openflow.Message, len(built))
	for i, f := range built {
		msgs[i] = f.AddMod()
	}
	start = time.Now()
	if err := conn.Bundle(cctx, msgs); err != nil {
		b.Fatal(err)
	}
	own := time.Since(start)
	res["ms-ofctl-bundle-8000"] = float64(ofctl.Microseconds()) / 1000
	res["ms-nodeflow-bundle-8000"] = float64(own.Microseconds()) / 1000
	b.Logf("the 8,000 rules' %d flows into a fresh switch: ovs-ofctl --bundle add-flows %s (process and text parsing included), nodeflow's connection in one bundle %s",
		len(built), ofctl.Round(time.Millisecond), own.Round(time.Millisecond))
	return res
}

// Sizes of the many-namespaces part of BenchmarkEgressFirewall.
const (
	benchNamespaces   = 1000
	benchRulesEach    = 10
	benchWriters      = 16
	benchNamespacePre = "egfw-many-"
)

// manyNamespaces creates benchNamespaces namespaces, each with an
// EgressFirewall of benchRulesEach rules, from benchWriters writers at once,
// and measures the time from the first write to all their flows in node1's
// br0, the flows, and the agent's memory before and after. kc and dyn
// write at 200 a second.
func manyNamespaces(b *testing.B, kc kubernetes.Interface, dyn dynamic.Interface, node1 *testbed.Member, poll *flowPoller, res map[string]float64) {
	ctx := context.Background()
	rules := benchRules(benchRulesEach)
	// The agent repeats the rules that hold a node IP for the address a
	// service's host endpoint reaches table 50 as.
	var cfg egressfirewallflows.Config
	for _, v6 := range []bool{false, true} {
		cfg.HostAliases = append(cfg.HostAliases, egressfirewallflows.HostAlias{Host: memberIP(b, node1, v6), Alias: netip.MustParseAddr(conntrackHostMasq(v6))})
	}
	perNS, err := egressfirewallflows.Build(cfg, egressfirewallflows.Namespace{Name: "probe", ID: 1, ConjBlock: 1, Rules: modelRules(rules)})
	if err != nil {
		b.Fatal(err)
	}
	before, err := poll.count(ctx)
	if err != nil {
		b.Fatal(err)
	}
	mem := func() (heap, rss float64) {
		text, err := agentMetrics(node1)
		if err != nil {
			b.Fatal(err)
		}
		return seriesValue(text, "go_memstats_heap_inuse_bytes"), seriesValue(text, "process_resident_memory_bytes")
	}
	heap0, rss0 := mem()
	want := before + benchNamespaces*len(perNS)
	next := make(chan int)
	errs := make(chan error, benchWriters)
	var wg sync.WaitGroup
	start := time.Now()
	for range benchWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				ns := fmt.Sprintf("%s%04d", benchNamespacePre, i)
				if _, err := kc.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
				ef := &egressfirewall.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}, Spec: egressfirewall.EgressFirewallSpec{Egress: rules}}
				if _, err := dyn.Resource(egressfirewall.EgressFirewallGVR).Namespace(ns).Create(ctx, ef.Unstructured(), metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := range benchNamespaces {
		select {
		case next <- i:
		case err := <-errs:
			b.Fatal(err)
		}
	}
	close(next)
	wg.Wait()
	written := time.Since(start)
	b.Cleanup(func() {
		for i := range benchNamespaces {
			_ = kc.CoreV1().Namespaces().Delete(context.Background(), fmt.Sprintf("%s%04d", benchNamespacePre, i), metav1.DeleteOptions{})
		}
	})
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var got int
	for got < want {
		if got, err = poll.count(wctx); err != nil {
			b.Fatalf("%d of %d flows in node1's br0: %v", got, want, err)
		}
		if got < want {
			select {
			case <-wctx.Done():
				b.Fatalf("%d of %d flows in node1's br0: %v", got, want, wctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	inOVS := time.Since(start)
	if got != want {
		b.Errorf("node1's br0 holds %d egress firewall flows, want %d (%d a namespace)", got, want, len(perNS))
	}
	heap1, rss1 := mem()
	res["ms-1000x10-write-to-ovs"] = float64(inOVS.Microseconds()) / 1000
	res["ms-1000x10-writes"] = float64(written.Microseconds()) / 1000
	res["flows-1000x10"] = float64(got - before)
	res["mib-1000x10-heap-added"] = (heap1 - heap0) / (1 << 20)
	res["mib-1000x10-rss-added"] = (rss1 - rss0) / (1 << 20)
	b.Logf("%d namespaces of %d rules: the %d namespace and policy writes took %s; all %d flows in node1's br0 %s after the first write; "+
		"agent heap in use %.1f -> %.1f MiB, resident %.1f -> %.1f MiB",
		benchNamespaces, benchRulesEach, 2*benchNamespaces, written.Round(time.Millisecond), got-before, inOVS.Round(time.Millisecond),
		heap0/(1<<20), heap1/(1<<20), rss0/(1<<20), rss1/(1<<20))
}

// modelRules turns API rules of CIDRs into the flow builder's rules.
func modelRules(in []egressfirewall.EgressFirewallRule) []egressfirewallflows.Rule {
	out := make([]egressfirewallflows.Rule, 0, len(in))
	for _, r := range in {
		pr := egressfirewallflows.Rule{Action: egressfirewall.Allow, Prefixes: []netip.Prefix{netip.MustParsePrefix(r.To.CIDRSelector)}}
		if r.Type == egressfirewall.RuleDeny {
			pr.Action = egressfirewall.Deny
		}
		for _, port := range r.Ports {
			pr.Ports = append(pr.Ports, egressfirewall.Port{Protocol: egressfirewall.TCP, Port: uint16(*port.Port)})
		}
		out = append(out, pr)
	}
	return out
}
