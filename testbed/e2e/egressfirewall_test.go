package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"nodeflow/datapath/plan"
	"nodeflow/host/cni"
	"nodeflow/model/egressfirewall"
	"nodeflow/testbed"
	"nodeflow/testbed/nsutil"
)

// The egress firewall scenarios share one namespace with a pod on each
// node, and a server on the external host that answers on every address
// of the external networks (testbed.ExternalV4, ExternalV6): over TCP it
// writes "ext <the address the client reached>" and closes; over UDP it
// answers each datagram the same way, from the address it was sent to.

// Ports of the external server.
const (
	egfwTCP = 18080
	egfwUDP = 15353
)

// egfwEnv is the shared set-up of the egress firewall scenarios.
type egfwEnv struct {
	e    *env
	ns   string
	pods []netPod // one on each node, node1's first
	dyn  dynamic.Interface
	dns  *testbed.DNSClient
	ext  *testbed.Member

	udpMu sync.Mutex
	udp   map[netip.Addr]bool
}

var (
	egfwOnce   sync.Once
	egfwShared *egfwEnv
)

// adminDynamic is a dynamic client of the testbed's API server as its
// admin.
func adminDynamic(t testing.TB, e *env) dynamic.Interface {
	t.Helper()
	cfg := adminConfig(t, e, 0)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}

// externalHost returns the testbed's external host, its first member of
// kind host.
func externalHost(t testing.TB, e *env) *testbed.Member {
	t.Helper()
	for i := range e.state.Members {
		if m := &e.state.Members[i]; m.Kind == "host" {
			return m
		}
	}
	t.Fatal("no external host")
	return nil
}

// egfwSetup returns the shared set-up, creating it on first use.
func egfwSetup(t *testing.T) *egfwEnv {
	t.Helper()
	e := up(t)
	requireAgent(t, e)
	egfwOnce.Do(func() {
		g := &egfwEnv{e: e, udp: map[netip.Addr]bool{}, dyn: adminDynamic(t, e), ext: externalHost(t, e)}
		var err error
		if g.dns, err = testbed.NewDNSClient(e.state); err != nil {
			t.Fatal(err)
		}
		l, err := nsutil.Listen(g.ext.Netns, "tcp", net.JoinHostPort("::", strconv.Itoa(egfwTCP)))
		if err != nil {
			t.Fatal(err)
		}
		go serveExtTCP(l) // until the process ends
		g.ns = createNamespace(t, e, "e2e-egfw")
		pods := deployPods(t, e, g.ns, "egfw", 2)
		// A pod started before the agent reserved mp0's address can get
		// it (the address after the subnet's gateway); such a pod
		// cannot be reached, whatever the firewall does. Replace it.
		for try := 0; try < 3 && slices.ContainsFunc(pods, onMgmtIP); try++ {
			for _, p := range pods {
				if onMgmtIP(p) {
					t.Logf("pod %s got mp0's address %v; replacing it", p.name, p.ips)
					if err := e.client.CoreV1().Pods(g.ns).Delete(context.Background(), p.name, metav1.DeleteOptions{}); err != nil {
						t.Fatal(err)
					}
				}
			}
			eventually(t, 60*time.Second, "replaced pods gone", func(ctx context.Context) error {
				for _, p := range pods {
					if onMgmtIP(p) {
						if _, err := e.client.CoreV1().Pods(g.ns).Get(ctx, p.name, metav1.GetOptions{}); err == nil {
							return fmt.Errorf("%s still there", p.name)
						}
					}
				}
				return nil
			})
			pods = runningPods(t, e, g.ns, "egfw", 2)
		}
		if len(pods) != 2 || pods[0].node == pods[1].node {
			t.Fatalf("pods not on both nodes: %+v", pods)
		}
		if pods[0].node != "node1" {
			pods[0], pods[1] = pods[1], pods[0]
		}
		g.pods = pods
		egfwShared = g
	})
	if egfwShared == nil {
		t.Fatal("egress firewall set-up failed in an earlier test")
	}
	return egfwShared
}

// runningPods waits until app's n pods in ns run with their ports, and
// returns them.
func runningPods(t testing.TB, e *env, ns, app string, n int) []netPod {
	t.Helper()
	var pods []netPod
	eventually(t, 90*time.Second, fmt.Sprintf("%d %s pods running with ports", n, app), func(ctx context.Context) error {
		list, err := e.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil {
			return err
		}
		pods = pods[:0]
		for _, p := range list.Items {
			if p.Status.Phase != v1.PodRunning || len(p.Status.PodIPs) != 2 || p.DeletionTimestamp != nil {
				return fmt.Errorf("pod %s: %s, %d addresses", p.Name, p.Status.Phase, len(p.Status.PodIPs))
			}
			np := netPod{name: p.Name, node: p.Spec.NodeName}
			for _, ip := range p.Status.PodIPs {
				np.ips = append(np.ips, netip.MustParseAddr(ip.IP))
			}
			m, ok := e.state.Member(p.Spec.NodeName)
			if !ok {
				return fmt.Errorf("no member %s", p.Spec.NodeName)
			}
			for _, op := range cniPorts(t, m) {
				if op.ExternalIDs[cni.ExternalIDPodName] == p.Name && op.ExternalIDs[cni.ExternalIDPodNamespace] == ns {
					np.netns = strings.TrimPrefix(op.ExternalIDs[cni.ExternalIDNetns], "/run/netns/")
					np.port = op.Ofport
				}
			}
			if np.netns == "" || np.port <= 0 {
				return fmt.Errorf("pod %s: no port on %s yet", p.Name, p.Spec.NodeName)
			}
			pods = append(pods, np)
		}
		if len(pods) != n {
			return fmt.Errorf("%d of %d pods", len(pods), n)
		}
		return nil
	})
	return pods
}

// onMgmtIP reports whether the pod holds the address mp0 takes in its
// node's subnet (the second of the subnet).
func onMgmtIP(p netPod) bool {
	for _, a := range p.ips {
		if a.Is4() && a.As4()[3] == 2 {
			return true
		}
	}
	return false
}

func serveExtTCP(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		local := netip.MustParseAddrPort(c.LocalAddr().String()).Addr().Unmap()
		fmt.Fprintf(c, "ext %s\n", local)
		c.Close()
	}
}

// serveUDP makes the external server answer UDP on addrs.
func (g *egfwEnv) serveUDP(t *testing.T, addrs ...netip.Addr) {
	t.Helper()
	g.udpMu.Lock()
	defer g.udpMu.Unlock()
	for _, a := range addrs {
		if g.udp[a] {
			continue
		}
		var pc net.PacketConn
		if err := nsutil.Do(g.ext.Netns, func() error {
			var err error
			pc, err = net.ListenPacket("udp", net.JoinHostPort(a.String(), strconv.Itoa(egfwUDP)))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		g.udp[a] = true
		go serveDatagrams(pc, 2048, func(_ []byte, from net.Addr) {
			_, _ = pc.WriteTo([]byte("ext "+a.String()+"\n"), from)
		})
	}
}

// ext returns address n of the external network of a family.
func ext(v6 bool, n int) netip.Addr {
	p := testbed.ExternalV4
	if v6 {
		p = testbed.ExternalV6
	}
	a := p.Addr()
	for range n {
		a = a.Next()
	}
	return a
}

// extReach connects from netns to the external server at dst over proto
// ("tcp" or "udp") and returns the address that answered.
func extReach(netns, proto string, dst netip.Addr, timeout time.Duration) (string, error) {
	port := egfwTCP
	if proto == "udp" {
		port = egfwUDP
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := nsutil.Dial(ctx, netns, proto, net.JoinHostPort(dst.String(), strconv.Itoa(port)), timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if proto == "udp" {
		if _, err := c.Write([]byte("hello")); err != nil {
			return "", err
		}
	}
	return extAnswer(c)
}

// serveDatagrams reads the datagrams pc receives, of up to size bytes,
// and hands each to handle, until pc is closed.
func serveDatagrams(pc net.PacketConn, size int, handle func(b []byte, from net.Addr)) {
	buf := make([]byte, size)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		handle(buf[:n], from)
	}
}

// extAnswer reads the outside server's answer, "ext NAME", and returns
// NAME.
func extAnswer(c net.Conn) (string, error) {
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	got, ok := strings.CutPrefix(strings.TrimSpace(line), "ext ")
	if !ok {
		return "", fmt.Errorf("answer %q", line)
	}
	return got, nil
}

// verdict checks that proto traffic from pod p to dst is allowed (it
// answers, within a few tries) or denied (dropped: every try times out).
func verdict(t *testing.T, p netPod, proto string, dst netip.Addr, allowed bool) {
	t.Helper()
	if allowed {
		var err error
		for range 5 {
			var got string
			if got, err = extReach(p.netns, proto, dst, 2*time.Second); err == nil {
				if got != dst.String() {
					t.Errorf("%s %s -> %s: answered by %s", p.node, proto, dst, got)
				}
				return
			}
		}
		t.Errorf("%s %s -> %s: want allowed, got %v", p.node, proto, dst, err)
		return
	}
	for i := range 2 {
		got, err := extReach(p.netns, proto, dst, 1200*time.Millisecond)
		var ne net.Error
		switch {
		case err == nil:
			t.Errorf("%s %s -> %s: want denied, try %d answered by %s", p.node, proto, dst, i, got)
			return
		case !errors.As(err, &ne) || !ne.Timeout():
			t.Errorf("%s %s -> %s: want dropped (a timeout), try %d: %v", p.node, proto, dst, i, err)
			return
		}
	}
}

// check is one expected verdict.
type check struct {
	proto   string
	dst     netip.Addr
	allowed bool
}

// verdicts checks every verdict from every pod, in parallel.
func (g *egfwEnv) verdicts(t *testing.T, cs []check) {
	t.Helper()
	t.Run("traffic", func(t *testing.T) {
		for _, p := range g.pods {
			for _, c := range cs {
				name := fmt.Sprintf("%s/%s-%s", p.node, c.proto, c.dst)
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					verdict(t, p, c.proto, c.dst, c.allowed)
				})
			}
		}
	})
}

// rules builds EgressFirewall rules from the shorthand "Allow 10.0.0.0/8",
// "Deny dns:x.example.com TCP/80", "Allow nodes:role=infra".
func rules(ss ...string) []egressfirewall.EgressFirewallRule {
	var out []egressfirewall.EgressFirewallRule
	for _, s := range ss {
		parts := strings.Fields(s)
		r := egressfirewall.EgressFirewallRule{Type: egressfirewall.RuleType(parts[0])}
		switch d := parts[1]; {
		case strings.HasPrefix(d, "dns:"):
			r.To.DNSName = strings.TrimPrefix(d, "dns:")
		case strings.HasPrefix(d, "nodes:"):
			sel, err := metav1.ParseToLabelSelector(strings.TrimPrefix(d, "nodes:"))
			if err != nil {
				panic(err)
			}
			r.To.NodeSelector = sel
		default:
			r.To.CIDRSelector = d
		}
		for _, p := range parts[2:] {
			proto, port, _ := strings.Cut(p, "/")
			fp := egressfirewall.EgressFirewallPort{Protocol: proto}
			if port != "" {
				n, _ := strconv.Atoi(port)
				fp.Port = new(int32)
				*fp.Port = int32(n)
			}
			r.Ports = append(r.Ports, fp)
		}
		out = append(out, r)
	}
	return out
}

// applyFirewall sets the test namespace's EgressFirewall to rs, deletes
// it when the test ends, and waits until both nodes report it applied.
func (g *egfwEnv) applyFirewall(t *testing.T, rs []egressfirewall.EgressFirewallRule) {
	t.Helper()
	g.setFirewall(t, g.ns, rs)
	t.Cleanup(func() { g.deleteFirewall(t, g.ns) })
	g.waitStatus(t, g.ns, "EgressFirewall Rules applied", "EgressFirewall Rules applied")
}

// setFirewall creates or replaces the namespace's EgressFirewall
// "default" with rules and returns the object.
func (g *egfwEnv) setFirewall(t *testing.T, ns string, rs []egressfirewall.EgressFirewallRule) *unstructured.Unstructured {
	t.Helper()
	ctx := context.Background()
	c := g.dyn.Resource(egressfirewall.EgressFirewallGVR).Namespace(ns)
	obj := (&egressfirewall.EgressFirewall{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}, Spec: egressfirewall.EgressFirewallSpec{Egress: rs}}).Unstructured()
	cur, err := c.Get(ctx, "default", metav1.GetOptions{})
	if err == nil {
		obj.SetResourceVersion(cur.GetResourceVersion())
		obj.SetUID(cur.GetUID())
		out, err := c.Update(ctx, obj, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("update EgressFirewall %s/default: %v", ns, err)
		}
		return out
	}
	out, err := c.Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create EgressFirewall %s/default: %v", ns, err)
	}
	return out
}

// deleteFirewall deletes the namespace's EgressFirewall.
func (g *egfwEnv) deleteFirewall(t *testing.T, ns string) {
	t.Helper()
	err := g.dyn.Resource(egressfirewall.EgressFirewallGVR).Namespace(ns).Delete(context.Background(), "default", metav1.DeleteOptions{})
	if err != nil && !strings.Contains(err.Error(), "not found") {
		t.Error(err)
	}
}

// waitStatus waits until the namespace's EgressFirewall reports msg from
// every node, and the roll-up rollup.
func (g *egfwEnv) waitStatus(t *testing.T, ns, msg, rollup string) *unstructured.Unstructured {
	t.Helper()
	var u *unstructured.Unstructured
	eventually(t, 30*time.Second, "EgressFirewall "+ns+"/default status", func(ctx context.Context) error {
		var err error
		u, err = g.dyn.Resource(egressfirewall.EgressFirewallGVR).Namespace(ns).Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			return err
		}
		msgs, _, _ := unstructured.NestedStringSlice(u.Object, "status", "messages")
		st, _, _ := unstructured.NestedString(u.Object, "status", "status")
		for _, n := range []string{"node1", "node2"} {
			found := false
			for _, m := range msgs {
				found = found || strings.HasPrefix(m, n+": "+msg)
			}
			if !found {
				return fmt.Errorf("messages %q: none from %s starting %q", msgs, n, msg)
			}
		}
		if st != rollup {
			return fmt.Errorf("status.status %q, want %q (messages %q)", st, rollup, msgs)
		}
		return nil
	})
	return u
}

// table50 returns table 50 of node m's br0 with counters.
func table50(m *testbed.Member) ([]string, error) {
	cmd := exec.Command("ovs-ofctl", "-O", "OpenFlow15", "dump-flows", "br0", "table=50")
	cmd.Env = append(os.Environ(), "OVS_RUNDIR="+m.OVSRundir)
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("dump-flows table=50 on %s: %v", m.Name, err)
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, " ") {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	return lines, nil
}

// hasFlow reports whether a line holds every part.
func hasFlow(lines []string, parts ...string) bool {
	_, ok := findFlow(lines, parts...)
	return ok
}

func findFlow(lines []string, parts ...string) (string, bool) {
	for _, l := range lines {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			return l, true
		}
	}
	return "", false
}

// waitTable50 waits until table 50 of both nodes satisfies cond.
func (g *egfwEnv) waitTable50(t *testing.T, what string, cond func([]string) bool) {
	t.Helper()
	for _, n := range []string{"node1", "node2"} {
		m := member(t, g.e, n)
		eventually(t, 30*time.Second, n+": "+what, func(context.Context) error {
			lines, err := table50(m)
			if err != nil {
				return err
			}
			if !cond(lines) {
				return fmt.Errorf("table 50:\n%s", strings.Join(lines, "\n"))
			}
			return nil
		})
	}
}

// packetsOf returns n_packets of a flow line.
func packetsOf(line string) int {
	m := nPacketsRE.FindStringSubmatch(line)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// agentMetrics returns node m's agent's metrics text.
func agentMetrics(m *testbed.Member) (string, error) {
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return nsutil.Dial(ctx, m.Netns, network, addr, time.Second)
	}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("http://" + agentHealthAddr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// seriesValue returns the value of the sample line that starts with
// series ("name{labels}"), -1 when there is none.
func seriesValue(text, series string) float64 {
	for _, l := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(l, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// TestEgressFirewallRules: CIDR rules in order (the first match wins, no
// match allows), ports, IPv4 and IPv6, TCP and UDP, from a pod on each
// node; the status per node; the rules and their counters in
// `ovs-ofctl dump-flows br0 table=50` and `nodeflow flows --owner`; the
// denied packets per namespace in the metrics; and an update under
// continuous traffic through a rule it does not change: no connection
// lost, and none through a rule it does not change either.
func TestEgressFirewallRules(t *testing.T) {
	g := egfwSetup(t)
	g.diagnoseOnFailure(t)
	v4, v6 := func(n int) netip.Addr { return ext(false, n) }, func(n int) netip.Addr { return ext(true, n) }
	g.serveUDP(t, v4(1), v4(2), v4(3), v4(4), v4(9), v6(1), v6(2), v6(9))
	g.applyFirewall(t, rules(
		"Allow 198.18.0.1/32",
		"Allow 2001:db8:e::1/128",
		"Deny 198.18.0.0/29 TCP/18080",
		"Allow 198.18.0.3/32",
		"Deny 2001:db8:e::/125 TCP/18080 UDP/15353",
		"Deny 198.18.0.4/32",
	))
	g.verdicts(t, []check{
		{"tcp", v4(1), true}, {"udp", v4(1), true},
		{"tcp", v6(1), true}, {"udp", v6(1), true},
		// Rule 2 takes TCP to the /29; UDP falls through to the default.
		{"tcp", v4(2), false}, {"udp", v4(2), true},
		// Rule 3 never sees TCP: rule 2 matched first.
		{"tcp", v4(3), false}, {"udp", v4(3), true},
		{"tcp", v6(2), false}, {"udp", v6(2), false},
		{"tcp", v4(4), false}, {"udp", v4(4), false},
		// No rule matches: allowed.
		{"tcp", v4(9), true}, {"udp", v4(9), true}, {"tcp", v6(9), true}, {"udp", v6(9), true},
	})
	if t.Failed() {
		return
	}

	t.Run("dump-flows", func(t *testing.T) {
		for _, p := range g.pods {
			m := member(t, g.e, p.node)
			lines, err := table50(m)
			if err != nil {
				t.Fatal(err)
			}
			// Rule 2 (priority 10997) dropped the TCP attempts to .2, .3 and .4.
			l, ok := findFlow(lines, "priority=10997", "tcp", "nw_dst=198.18.0.0/29", "tp_dst=18080", "actions=drop")
			if !ok || packetsOf(l) < 6 {
				t.Errorf("%s: rule 2's flow with its packets: %q\ntable 50:\n%s", p.node, l, strings.Join(lines, "\n"))
			}
			// Rule 4 takes TCP and UDP to the IPv6 /125.
			for _, part := range []string{"tcp6", "udp6"} {
				if l, ok := findFlow(lines, "priority=10995", part, "ipv6_dst=2001:db8:e::/125", "actions=drop"); !ok || packetsOf(l) < 2 {
					t.Errorf("%s: rule 4's %s flow: %q", p.node, part, l)
				}
			}
			if l, ok := findFlow(lines, "priority=10999", "nw_dst=198.18.0.1", "goto_table:55"); !ok || packetsOf(l) < 2 {
				t.Errorf("%s: rule 0's flow: %q", p.node, l)
			}
			// The owner's flows through the agent's introspection socket.
			out, err := exec.Command(filepath.Join(g.e.binDir, "nodeflow"), "flows", "--socket", filepath.Join(m.OVSRundir, "nodeflow.sock"),
				"--bridge", "br0", "--owner", "egressfirewall/"+g.ns).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "nw_dst=198.18.0.0/29") || strings.Contains(string(out), "egressfirewall/_guards") {
				t.Errorf("%s: nodeflow flows --owner egressfirewall/%s: %v\n%s", p.node, g.ns, err, out)
			}
		}
	})

	t.Run("denied packets metric", func(t *testing.T) {
		for _, p := range g.pods {
			m := member(t, g.e, p.node)
			eventually(t, 30*time.Second, p.node+" denied packets metric", func(context.Context) error {
				text, err := agentMetrics(m)
				if err != nil {
					return err
				}
				series := `nodeflow_egress_firewall_denied_packets_total{namespace="` + g.ns + `"}`
				if v := seriesValue(text, series); v < 8 {
					return fmt.Errorf("%s = %v, want at least 8", series, v)
				}
				if v := seriesValue(text, "nodeflow_egress_firewall_rules"); v < 6 {
					return fmt.Errorf("nodeflow_egress_firewall_rules = %v", v)
				}
				return nil
			})
		}
	})

	t.Run("update under traffic", func(t *testing.T) {
		// Connections to .1 go through an unchanged rule; connections to
		// .2 are denied by an unchanged rule. While the rules around them
		// change, no .1 connection may fail and no .2 connection may get
		// through.
		load := newBackground()
		var allowed, denials tally
		for _, p := range g.pods {
			for _, proto := range []string{"tcp", "udp"} {
				load.loop(&allowed, 10*time.Millisecond, func() error {
					if _, err := extReach(p.netns, proto, v4(1), 2*time.Second); err != nil {
						return fmt.Errorf("%s %s: %v", p.node, proto, err)
					}
					return nil
				})
				if proto == "udp" {
					continue // UDP to .2 is allowed
				}
				load.loop(&denials, 0, func() error {
					_, err := extReach(p.netns, proto, v4(2), 300*time.Millisecond)
					return deniedErr(p.node+" "+proto+" to .2", err)
				})
			}
		}
		base := []string{"Allow 198.18.0.1/32", "Allow 2001:db8:e::1/128", "Deny 198.18.0.0/29 TCP/18080", "Allow 198.18.0.3/32"}
		has := func(parts ...string) func([]string) bool {
			return func(lines []string) bool { return hasFlow(lines, parts...) }
		}
		updates := []struct {
			rules     []string
			installed func([]string) bool
		}{
			{append([]string{"Deny 198.18.0.5/32"}, base...), has("priority=10999,", "nw_dst=198.18.0.5")},
			{append([]string{"Deny 198.18.0.5/32", "Deny 198.18.0.6/32 UDP"}, base...), has("priority=10998,", "nw_dst=198.18.0.6")},
			{append(append([]string{}, base...), "Deny 0.0.0.0/0", "Deny ::/0"), func(lines []string) bool {
				return hasFlow(lines, "priority=10999,", "nw_dst=198.18.0.1") && hasFlow(lines, "priority=10994,", "ipv6,") && !hasFlow(lines, "nw_dst=198.18.0.6")
			}},
			{append([]string{"Allow 198.18.0.7/32 TCP/18080 UDP/15353"}, append(append([]string{}, base...), "Deny 0.0.0.0/0")...), has("priority=10999,", "nw_dst=198.18.0.7")},
			{base, func(lines []string) bool {
				return hasFlow(lines, "priority=10999,", "nw_dst=198.18.0.1") && hasFlow(lines, "priority=10996,", "nw_dst=198.18.0.3") && !hasFlow(lines, "priority=10995,")
			}},
		}
		time.Sleep(300 * time.Millisecond) // traffic before the first update, by design of the scenario
		for i, u := range updates {
			g.setFirewall(t, g.ns, rules(u.rules...))
			g.waitTable50(t, fmt.Sprintf("update %d installed", i), u.installed)
			time.Sleep(200 * time.Millisecond) // traffic between updates, by design of the scenario
		}
		load.end()
		if allowed.fail.Load() != 0 || allowed.ok.Load() == 0 {
			t.Errorf("through the unchanged allow: %s", &allowed)
		}
		if denials.fail.Load() != 0 || denials.tries() == 0 {
			t.Errorf("through the unchanged deny: %d of %d attempts got through", denials.fail.Load(), denials.tries())
		}
		t.Logf("%d updates: %d connections through the unchanged allow, %d failed; %d attempts at the unchanged deny, %d through",
			len(updates), allowed.ok.Load(), allowed.fail.Load(), denials.tries(), denials.fail.Load())
	})
}

// TestEgressFirewallServices: the firewall judges a service's endpoints
// one by one after the DNAT, with nothing withdrawn from the service as a
// whole: behind one ClusterIP, the allowed outside endpoint always
// answers and the denied one never does. Under deny-all, services with
// pod endpoints still work, NodePort, ExternalIP and LoadBalancer ingress
// clients outside are answered in both families (the reply direction is
// never judged), and the host's own traffic (that of host-network pods) is
// not judged at all.
func TestEgressFirewallServices(t *testing.T) {
	g := egfwSetup(t)
	g.diagnoseOnFailure(t)
	ctx := context.Background()
	allowed, denied := ext(false, 1), ext(false, 2)
	// A selectorless service whose endpoints are outside the cluster.
	outside := createService(t, g.e, g.ns, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "outside"},
		Spec:       v1.ServiceSpec{Ports: []v1.ServicePort{{Name: "http", Port: egfwTCP, Protocol: v1.ProtocolTCP}}},
	})
	slice := sliceFor("outside", "outside-1", discovery.AddressTypeIPv4,
		[]discovery.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(egfwTCP)), Protocol: ptr.To(v1.ProtocolTCP)}},
		readyEndpoint(allowed, ""), readyEndpoint(denied, ""))
	slice.Endpoints[0].NodeName, slice.Endpoints[1].NodeName = nil, nil
	if _, err := g.e.client.DiscoveryV1().EndpointSlices(g.ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vip := netip.MustParseAddr(outside.Spec.ClusterIP)
	// Without a firewall, both endpoints answer.
	for _, p := range g.pods {
		seen := map[string]bool{}
		eventually(t, 30*time.Second, p.node+": both outside endpoints answer", func(context.Context) error {
			got, err := extReachPort(p.netns, vip, egfwTCP, 2*time.Second)
			if err != nil {
				return err
			}
			seen[got] = true
			if !seen[allowed.String()] || !seen[denied.String()] {
				return fmt.Errorf("answered by %v so far", seen)
			}
			return nil
		})
	}
	g.applyFirewall(t, rules("Allow 198.18.0.1/32", "Deny 0.0.0.0/0", "Deny ::/0"))
	t.Run("per-endpoint", func(t *testing.T) {
		for _, p := range g.pods {
			t.Run(p.node, func(t *testing.T) {
				t.Parallel()
				var ok, dropped int
				for range 30 {
					got, err := extReachPort(p.netns, vip, egfwTCP, 1200*time.Millisecond)
					var ne net.Error
					switch {
					case err == nil && got == allowed.String():
						ok++
					case err == nil:
						t.Errorf("%s: the service answered from %s, a denied endpoint", p.node, got)
					case errors.As(err, &ne) && ne.Timeout():
						dropped++
					default:
						t.Errorf("%s: %v, want an answer from %s or a drop", p.node, err, allowed)
					}
				}
				// 30 new connections over two endpoints: both happen.
				if ok == 0 || dropped == 0 {
					t.Errorf("%s: %d answered by the allowed endpoint, %d dropped; want some of each", p.node, ok, dropped)
				}
				t.Logf("%s: %d connections through the allowed endpoint, %d to the denied one dropped", p.node, ok, dropped)
			})
		}
	})

	// The judged path to an outside endpoint takes the recirculations the
	// plan documents for it, on the real datapath flows, and nothing was
	// dropped over the datapath's limit.
	t.Run("recirculations", func(t *testing.T) {
		want := -1
		for _, p := range plan.Paths() {
			if p.Name == "pod -> ClusterIP -> outside endpoint, judged by an egress firewall" {
				want = p.Recirculations()
			}
		}
		if want < 0 {
			t.Fatal("the plan documents no path to an outside endpoint judged by the firewall")
		}
		for _, p := range g.pods {
			m := member(t, g.e, p.node)
			eventually(t, 10*time.Second, p.node+": a connection through the allowed endpoint", func(context.Context) error {
				got, err := extReachPort(p.netns, vip, egfwTCP, 1200*time.Millisecond)
				if err == nil && got != allowed.String() {
					err = fmt.Errorf("answered by %s", got)
				}
				return err
			})
			depth, chain, err := recircChain(m, "ct(zone=65000,nat)", vip, egfwTCP)
			if err != nil {
				t.Error(err)
				continue
			}
			t.Logf("%s: pod -> %s -> %s: %d recirculations\n%s", p.node, vip, allowed, depth, strings.Join(chain, "\n"))
			if depth != want {
				t.Errorf("%s: pod -> %s: %d recirculations, the plan documents %d", p.node, vip, depth, want)
			}
			out, err := appctl(m, "coverage/read-counter", "datapath_drop_recirc_error")
			if err != nil {
				t.Fatalf("coverage on %s: %v\n%s", m.Name, err, out)
			}
			if v, err := strconv.Atoi(strings.TrimSpace(out)); err != nil || v != 0 {
				t.Errorf("%s: datapath_drop_recirc_error = %q, want 0", m.Name, strings.TrimSpace(out))
			}
		}
	})

	// A service of the namespace's pods, also a NodePort, with
	// ExternalIPs and LoadBalancer ingress addresses (172.30.0.22x and
	// fd00:172:30::22x: this file's range).
	eips := []netip.Addr{netip.MustParseAddr("172.30.0.220"), netip.MustParseAddr("fd00:172:30::220")}
	ingress := []netip.Addr{netip.MustParseAddr("172.30.0.221"), netip.MustParseAddr("fd00:172:30::221")}
	inside := createService(t, g.e, g.ns, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "inside"},
		Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "egfw"},
			IPFamilyPolicy: ptr.To(v1.IPFamilyPolicyPreferDualStack), ExternalIPs: []string{eips[0].String(), eips[1].String()},
			Ports: []v1.ServicePort{{Name: "http", Port: 8080, Protocol: v1.ProtocolTCP}}},
	}, ingress...)
	nodePort := nodePortOf(t, inside, v1.ProtocolTCP)
	t.Run("clusterip to pods", func(t *testing.T) {
		for _, p := range g.pods {
			for _, c := range inside.Spec.ClusterIPs {
				dst := netip.MustParseAddr(c)
				eventually(t, 30*time.Second, p.node+" to service "+c, func(ctx context.Context) error {
					_, _, err := httpGet(ctx, p.netns, dst, 8080)
					return err
				})
			}
			// And pod to pod directly.
			other := g.pods[0]
			if other.name == p.name {
				other = g.pods[1]
			}
			for _, ip := range other.ips {
				if pod, _, err := httpGet(ctx, p.netns, ip, 8080); err != nil || pod != other.name {
					t.Errorf("%s to pod %s at %s: %q %v", p.node, other.name, ip, pod, err)
				}
			}
		}
	})
	t.Run("nodeport from outside", func(t *testing.T) {
		for _, n := range []string{"node1", "node2"} {
			m := member(t, g.e, n)
			for _, v6 := range []bool{false, true} {
				dst := memberIP(t, m, v6)
				eventually(t, 30*time.Second, "NodePort "+dst.String()+" from the external host", func(ctx context.Context) error {
					pod, _, err := httpGet(ctx, g.ext.Netns, dst, nodePort)
					if err == nil && !strings.HasPrefix(pod, "egfw-") {
						return fmt.Errorf("answered by %q", pod)
					}
					return err
				})
			}
		}
	})
	t.Run("externalip and ingress from outside", func(t *testing.T) {
		node1 := member(t, g.e, "node1")
		for _, dst := range append(slices.Clone(eips), ingress...) {
			gw := memberIP(t, node1, dst.Is6())
			if dst.Is6() {
				routeVia6(t, g.ext, dst, gw)
			} else {
				routeVia(t, g.ext, dst, gw)
			}
			eventually(t, 30*time.Second, dst.String()+" from the external host", func(ctx context.Context) error {
				pod, _, err := httpGet(ctx, g.ext.Netns, dst, 8080)
				if err == nil && !strings.HasPrefix(pod, "egfw-") {
					return fmt.Errorf("answered by %q", pod)
				}
				return err
			})
		}
	})
	t.Run("host network", func(t *testing.T) {
		for _, n := range []string{"node1", "node2"} {
			m := member(t, g.e, n)
			for _, dst := range []netip.Addr{denied, ext(true, 2)} {
				if got, err := extReachPort(m.Netns, dst, egfwTCP, 3*time.Second); err != nil || got != dst.String() {
					t.Errorf("%s's host to %s: %q %v, want it unjudged", n, dst, got, err)
				}
			}
		}
	})
}

// extReachPort connects over TCP from netns to dst:port and returns the
// address of the external server that answered.
func extReachPort(netns string, dst netip.Addr, port int, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := nsutil.Dial(ctx, netns, "tcp", net.JoinHostPort(dst.String(), strconv.Itoa(port)), timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	return extAnswer(c)
}

// diagnoseOnFailure logs, when t has failed, what helps to see why: each
// node's tables 30 and 50 and the agent's warnings and errors.
func (g *egfwEnv) diagnoseOnFailure(t *testing.T) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, n := range []string{"node1", "node2"} {
			m, ok := g.e.state.Member(n)
			if !ok {
				continue
			}
			for _, table := range []string{"table=30", "table=50"} {
				cmd := exec.Command("ovs-ofctl", "-O", "OpenFlow15", "dump-flows", "br0", table)
				cmd.Env = append(os.Environ(), "OVS_RUNDIR="+m.OVSRundir)
				out, _ := cmd.CombinedOutput()
				t.Logf("%s %s:\n%s", n, table, out)
			}
			b, _ := os.ReadFile(filepath.Join(m.Dir, "agent.log"))
			var lines []string
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, "level=warning") || strings.Contains(l, "level=error") || strings.Contains(l, "panic") {
					lines = append(lines, l)
				}
			}
			if len(lines) > 40 {
				lines = lines[len(lines)-40:]
			}
			t.Logf("%s agent warnings and errors:\n%s", n, strings.Join(lines, "\n"))
			if text, err := agentMetrics(m); err == nil {
				var ms []string
				for _, l := range strings.Split(text, "\n") {
					if strings.HasPrefix(l, "nodeflow_egress_firewall_dns_") || strings.HasPrefix(l, "nodeflow_packet_ins_") {
						ms = append(ms, l)
					}
				}
				t.Logf("%s DNS metrics:\n%s", n, strings.Join(ms, "\n"))
			}
		}
	})
}

// TestEgressFirewallNodeSelector: a nodeSelector rule matches the
// addresses of the selected nodes, both families, and follows a label
// that changes and a node that joins (a Node whose address is on the
// external network, so that traffic to it can be tried) and leaves.
func TestEgressFirewallNodeSelector(t *testing.T) {
	g := egfwSetup(t)
	g.diagnoseOnFailure(t)
	ctx := context.Background()
	const label = "egfw.e2e/target"
	node2 := member(t, g.e, "node2")
	l, err := nsutil.Listen(node2.Netns, "tcp", net.JoinHostPort("::", strconv.Itoa(egfwTCP)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go serveExtTCP(l)
	setLabel := func(name, value string) {
		t.Helper()
		eventually(t, 30*time.Second, "label "+name, func(ctx context.Context) error {
			n, err := g.e.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if value == "" {
				delete(n.Labels, label)
			} else {
				n.Labels[label] = value
			}
			_, err = g.e.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		})
	}
	t.Cleanup(func() { setLabel("node2", "") })
	g.applyFirewall(t, rules("Allow nodes:"+label+"=yes TCP/18080", "Deny 0.0.0.0/0", "Deny ::/0"))
	n2v4, n2v6 := memberIP(t, node2, false), memberIP(t, node2, true)
	for _, p := range g.pods {
		for _, dst := range []netip.Addr{n2v4, n2v6} {
			verdict(t, p, "tcp", dst, false)
		}
	}

	// A label that changes.
	setLabel("node2", "yes")
	g.waitTable50(t, "node2 selected", func(lines []string) bool {
		return hasFlow(lines, "nw_dst="+n2v4.String(), "tp_dst=18080", "goto_table:55")
	})
	for _, p := range g.pods {
		for _, dst := range []netip.Addr{n2v4, n2v6} {
			verdict(t, p, "tcp", dst, true)
		}
	}

	// A node that joins, on the external network.
	joinV4, joinV6 := ext(false, 99), ext(true, 0x99)
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "egfw-joined", Labels: map[string]string{label: "yes"}}}
	if _, err := g.e.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = g.e.client.CoreV1().Nodes().Delete(context.Background(), "egfw-joined", metav1.DeleteOptions{})
	})
	eventually(t, 30*time.Second, "address of the joined node", func(ctx context.Context) error {
		cur, err := g.e.client.CoreV1().Nodes().Get(ctx, "egfw-joined", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: joinV4.String()}, {Type: v1.NodeInternalIP, Address: joinV6.String()}}
		_, err = g.e.client.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	g.waitTable50(t, "the joined node selected", func(lines []string) bool { return hasFlow(lines, "nw_dst="+joinV4.String(), "tp_dst=18080") })
	for _, p := range g.pods {
		for _, dst := range []netip.Addr{joinV4, joinV6} {
			verdict(t, p, "tcp", dst, true)
		}
	}
	// It leaves; node2's label goes.
	if err := g.e.client.CoreV1().Nodes().Delete(ctx, "egfw-joined", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	setLabel("node2", "")
	g.waitTable50(t, "no node selected", func(lines []string) bool {
		return !hasFlow(lines, "nw_dst="+joinV4.String()) && !hasFlow(lines, "nw_dst="+n2v4.String())
	})
	for _, p := range g.pods {
		for _, dst := range []netip.Addr{joinV4, n2v6} {
			verdict(t, p, "tcp", dst, false)
		}
	}
}
