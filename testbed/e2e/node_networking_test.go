package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodeflow/testbed"
	"nodeflow/testbed/nsutil"
	"nodeflow/testbed/workload"
)

// netPod is a running pod of the node networking scenario.
type netPod struct {
	name, node, netns string
	ips               []netip.Addr // IPv4 first
	port              int          // ofport on br0
}

func (p netPod) ip(v6 bool) netip.Addr {
	for _, a := range p.ips {
		if a.Is6() == v6 {
			return a
		}
	}
	return netip.Addr{}
}

// requireAgent skips when the testbed runs without `nodeflow agent`.
func requireAgent(t *testing.T, e *env) {
	t.Helper()
	if !e.state.Agent {
		t.Skipf("nodeflow agent does not run: %s", e.state.AgentReason)
	}
}

// agentNamespace brings the testbed up (or takes the one that is),
// skips the test unless the agent runs, and creates the namespace name.
func agentNamespace(t *testing.T, name string) (*env, string) {
	t.Helper()
	e := up(t)
	requireAgent(t, e)
	return e, createNamespace(t, e, name)
}

// netPods starts a Deployment of four pods spread over both nodes and
// returns them with their namespaces and ports.
func netPods(t *testing.T, e *env, ns string) []netPod {
	t.Helper()
	return deployPods(t, e, ns, "net", 4)
}

// pairs returns two pods on one node and one on the other node.
func pairs(t *testing.T, pods []netPod) (a, sameNode, otherNode netPod) {
	t.Helper()
	by := map[string][]netPod{}
	for _, p := range pods {
		by[p.node] = append(by[p.node], p)
	}
	for _, ps := range by {
		if len(ps) >= 2 {
			a, sameNode = ps[0], ps[1]
		}
	}
	for n, ps := range by {
		if a.name != "" && n != a.node {
			otherNode = ps[0]
		}
	}
	if a.name == "" || otherNode.name == "" {
		t.Fatalf("pods not spread as needed: %+v", pods)
	}
	return a, sameNode, otherNode
}

// ping runs ping in a network namespace and returns how many replies came.
func ping(netns string, dst netip.Addr, count int, extra ...string) (int, string) {
	args := append([]string{"netns", "exec", netns, "ping", "-n", "-c", strconv.Itoa(count), "-i", "0.2", "-W", "1"}, extra...)
	out, _ := exec.Command("ip", append(args, dst.String())...).CombinedOutput()
	m := regexp.MustCompile(`(\d+) received`).FindSubmatch(out)
	if m == nil {
		return 0, string(out)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n, string(out)
}

// httpGet fetches http://dst:port/ from inside netns and returns the server's
// reply: the pod name and the client address it saw.
func httpGet(ctx context.Context, netns string, dst netip.Addr, port int) (pod, client string, err error) {
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return nsutil.Dial(ctx, netns, network, addr, 3*time.Second)
	}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("http://" + net.JoinHostPort(dst.String(), strconv.Itoa(port)) + "/")
	if err != nil {
		return "", "", err
	}
	return readReply(resp)
}

// readReply reads a test server's reply: the pod name and the client
// address it saw.
func readReply(resp *http.Response) (pod, client string, err error) {
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", "", err
	}
	pod, client, _, err = workload.ParseReply(string(b))
	return pod, client, err
}

// udpEcho sends one datagram from inside netns and returns the reply's pod
// and client address.
func udpEcho(ctx context.Context, netns string, dst netip.Addr, port int) (pod, client string, err error) {
	c, err := nsutil.Dial(ctx, netns, "udp", net.JoinHostPort(dst.String(), strconv.Itoa(port)), 3*time.Second)
	if err != nil {
		return "", "", err
	}
	defer c.Close()
	if _, err := c.Write([]byte("hello")); err != nil {
		return "", "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 2048)
	n, err := c.Read(buf)
	if err != nil {
		return "", "", err
	}
	pod, client, rest, err := workload.ParseReply(string(buf[:n]))
	if err == nil && rest != "hello" {
		err = fmt.Errorf("echo %q, want hello", rest)
	}
	return pod, client, err
}

func hostOf(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return h
}

func family(v6 bool) string {
	if v6 {
		return "ipv6"
	}
	return "ipv4"
}

// TestNodeNetworking covers the node agent's br0 and breth0 with real
// traffic: pod to pod on one node and across nodes (ping, TCP, UDP, IPv4 and
// IPv6), pod and host through mp0, pod egress SNATed to the node IP, the
// seed's breth0 flows, and port security.
func TestNodeNetworking(t *testing.T) {
	e, ns := agentNamespace(t, "e2e-net")
	pods := netPods(t, e, ns)
	a, same, other := pairs(t, pods)
	t.Logf("a=%s on %s, same=%s, other=%s on %s", a.name, a.node, same.name, other.name, other.node)

	t.Run("pod-to-pod", func(t *testing.T) {
		for _, tc := range []struct {
			kind string
			dst  netPod
		}{{"same-node", same}, {"cross-node", other}} {
			for _, v6 := range []bool{false, true} {
				src, dst := a.ip(v6), tc.dst.ip(v6)
				t.Run(tc.kind+"/"+family(v6), func(t *testing.T) {
					// The first packets may wait for neighbour and tunnel
					// resolution; then every ping must come back.
					eventually(t, 20*time.Second, "first ping", func(ctx context.Context) error {
						if n, out := ping(a.netns, dst, 1); n != 1 {
							return fmt.Errorf("no reply: %s", out)
						}
						return nil
					})
					if n, out := ping(a.netns, dst, 10); n != 10 {
						t.Errorf("ping %s -> %s: %d of 10 replies\n%s", src, dst, n, out)
					}
					ctx := context.Background()
					pod, client, err := httpGet(ctx, a.netns, dst, 8080)
					if err != nil || pod != tc.dst.name || hostOf(client) != src.String() {
						t.Errorf("tcp %s -> %s: pod %q client %q err %v (want %s from %s)", src, dst, pod, client, err, tc.dst.name, src)
					}
					eventually(t, 10*time.Second, "udp echo", func(ctx context.Context) error {
						pod, client, err := udpEcho(ctx, a.netns, dst, 5353)
						if err != nil {
							return err
						}
						if pod != tc.dst.name || hostOf(client) != src.String() {
							return fmt.Errorf("udp: pod %q client %q (want %s from %s)", pod, client, tc.dst.name, src)
						}
						return nil
					})
				})
			}
		}
	})

	t.Run("pod-and-host-through-mp0", func(t *testing.T) {
		m, _ := e.state.Member(a.node)
		node, err := e.client.CoreV1().Nodes().Get(context.Background(), a.node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, v6 := range []bool{false, true} {
			var podCIDR netip.Prefix
			for _, s := range node.Spec.PodCIDRs {
				if p := netip.MustParsePrefix(s); p.Addr().Is6() == v6 {
					podCIDR = p
				}
			}
			mp0 := podCIDR.Addr().Next().Next()
			t.Run(family(v6), func(t *testing.T) {
				eventually(t, 20*time.Second, "pod pings mp0", func(ctx context.Context) error {
					if n, out := ping(a.netns, mp0, 1); n != 1 {
						return fmt.Errorf("%s", out)
					}
					return nil
				})
				if n, out := ping(a.netns, mp0, 5); n != 5 {
					t.Errorf("pod -> mp0 %s: %d of 5\n%s", mp0, n, out)
				}
				// Host to pod, local and on the other node: the host's
				// source is mp0's address.
				for _, dst := range []netPod{a, other} {
					eventually(t, 20*time.Second, "host to pod "+dst.name, func(ctx context.Context) error {
						pod, client, err := httpGet(ctx, m.Netns, dst.ip(v6), 8080)
						if err != nil {
							return err
						}
						if pod != dst.name || hostOf(client) != mp0.String() {
							return fmt.Errorf("host -> %s: pod %q client %q, want %s from %s", dst.ip(v6), pod, client, dst.name, mp0)
						}
						return nil
					})
				}
			})
		}
	})

	t.Run("pod-to-external-sees-node-ip", func(t *testing.T) {
		ext, ok := e.state.Member("ext1")
		if !ok {
			t.Skip("no ext1 in the topology")
		}
		nodeMember, _ := e.state.Member(a.node)
		for i, v6 := range []bool{false, true} {
			t.Run(family(v6), func(t *testing.T) {
				extIP := netip.MustParseAddr(ext.Addresses[i])
				nodeIP := nodeMember.Addresses[i]
				l, err := nsutil.Listen(ext.Netns, "tcp", net.JoinHostPort(extIP.String(), "0"))
				if err != nil {
					t.Fatal(err)
				}
				srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					fmt.Fprintln(w, workload.Reply("ext1", r.RemoteAddr))
				}), ReadHeaderTimeout: 5 * time.Second}
				go srv.Serve(l)
				defer srv.Close()
				port := l.Addr().(*net.TCPAddr).Port
				eventually(t, 20*time.Second, "pod to external host", func(ctx context.Context) error {
					pod, client, err := httpGet(ctx, a.netns, extIP, port)
					if err != nil {
						return err
					}
					if pod != "ext1" || hostOf(client) != nodeIP {
						return fmt.Errorf("external host saw %q (server %q), want the node IP %s", client, pod, nodeIP)
					}
					return nil
				})
			})
		}
	})

	t.Run("breth0-has-the-seed-flows", func(t *testing.T) {
		m, _ := e.state.Member(a.node)
		uplink := ofport(t, m, "eth0")
		patch := ofport(t, m, "patch-breth0-to-br0")
		nodeIP := m.Addresses[0]
		svc := defaultServiceCIDRv4
		want := []string{
			"priority=500,ip,in_port=LOCAL,nw_dst=" + svc + " actions=ct(commit,table=2,zone=64001,nat(src=169.254.169.2))",
			"priority=500,ip,in_port=" + patch + ",nw_src=" + svc + ",nw_dst=169.254.169.2 actions=ct(table=3,zone=64001,nat)",
			"priority=500,ip,in_port=" + patch + ",nw_src=" + nodeIP + ",nw_dst=169.254.169.2 actions=ct(commit,table=4,zone=64001,nat(dst=" + nodeIP + "))",
			"priority=500,ip,in_port=LOCAL,nw_dst=169.254.169.1 actions=ct(table=5,zone=64002,nat)",
			"priority=100,ip,in_port=" + patch + " actions=ct(commit,zone=64000,exec(set_field:0x1->ct_mark)),output:" + uplink,
			"priority=100,ip,in_port=LOCAL actions=ct(commit,zone=64000,exec(set_field:0x2->ct_mark)),output:" + uplink,
			"priority=50,ip,in_port=" + uplink + " actions=ct(table=1,zone=64000,nat)",
			"priority=0 actions=NORMAL",
			"table=1, priority=100,ct_state=+est+trk,ct_mark=0x1,ip actions=output:" + patch,
			"table=1, priority=100,ct_state=+est+trk,ct_mark=0x2,ip actions=LOCAL",
			"table=1, priority=100,ct_state=+rel+trk,ct_mark=0x1,ip actions=output:" + patch,
			"table=1, priority=100,ct_state=+rel+trk,ct_mark=0x2,ip actions=LOCAL",
			"table=1, priority=0 actions=NORMAL",
			"table=4, priority=100,ip actions=ct(commit,table=3,zone=64002,nat(src=169.254.169.1))",
			"table=5, priority=100,ip actions=ct(commit,table=2,zone=64001,nat)",
			"table=4, priority=100,ipv6 actions=ct(commit,table=3,zone=64002,nat(src=fd69::1))",
			"table=5, priority=100,ipv6 actions=ct(commit,table=2,zone=64001,nat)",
		}
		tableRE := map[string]*regexp.Regexp{
			"table 2": regexp.MustCompile(`^table=2, priority=100 actions=set_field:[0-9a-f:]{17}->eth_dst,output:` + patch + `$`),
			"table 3": regexp.MustCompile(`^table=3, priority=100 actions=move:NXM_OF_ETH_DST\[\]->NXM_OF_ETH_SRC\[\],set_field:[0-9a-f:]{17}->eth_dst,LOCAL$`),
		}
		have := map[string]bool{}
		for _, l := range dumpFlows(t, m, "breth0") {
			have[l] = true
			for name, re := range tableRE {
				if re.MatchString(l) {
					delete(tableRE, name)
				}
			}
		}
		for _, w := range want {
			if !have[w] {
				t.Errorf("breth0 on %s lacks %q", m.Name, w)
			}
		}
		for name := range tableRE {
			t.Errorf("breth0 on %s lacks the seed's %s flow", m.Name, name)
		}
	})

	t.Run("bad-nodes-do-not-disturb-others", func(t *testing.T) {
		ctx := context.Background()
		local, err := e.client.CoreV1().Nodes().Get(ctx, other.node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// One Node claims another node's pod subnet; one has no address.
		bad := map[string]struct {
			cidr, addr string
		}{
			"e2e-steals-cidr": {local.Spec.PodCIDRs[0], "172.30.0.250"},
			"e2e-no-address":  {"10.244.250.0/24", ""},
		}
		for name, b := range bad {
			n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NodeSpec{PodCIDR: b.cidr, PodCIDRs: []string{b.cidr}}}
			if _, err := e.client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = e.client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
			if b.addr != "" {
				eventually(t, 30*time.Second, "address of "+name, func(ctx context.Context) error {
					cur, err := e.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
					if err != nil {
						return err
					}
					cur.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: b.addr}}
					_, err = e.client.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
					return err
				})
			}
		}
		// Each gets a Warning event from the agents.
		for name := range bad {
			eventually(t, 30*time.Second, "event on "+name, func(ctx context.Context) error {
				evs, err := e.client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
				if err != nil {
					return err
				}
				for _, ev := range evs.Items {
					if ev.Reason == "NodeflowBadNode" && ev.Type == v1.EventTypeWarning {
						return nil
					}
				}
				return fmt.Errorf("no NodeflowBadNode event among %d", len(evs.Items))
			})
		}
		// Traffic between the real nodes goes on, both ways.
		for _, dir := range []struct{ from, to netPod }{{a, other}, {other, a}} {
			if n, out := ping(dir.from.netns, dir.to.ip(false), 10); n != 10 {
				t.Errorf("ping %s -> %s with bad nodes around: %d of 10\n%s", dir.from.name, dir.to.name, n, out)
			}
			if pod, _, err := httpGet(ctx, dir.from.netns, dir.to.ip(false), 8080); err != nil || pod != dir.to.name {
				t.Errorf("tcp %s -> %s with bad nodes around: %q %v", dir.from.name, dir.to.name, pod, err)
			}
		}
	})

	t.Run("host-side-kept-true", func(t *testing.T) {
		m, _ := e.state.Member(a.node)
		show := func(args ...string) string {
			out, _ := exec.Command("ip", append([]string{"-n", m.Netns}, args...)...).CombinedOutput()
			return string(out)
		}
		want := map[string][]string{
			"route":   {"-4", "route", "show", defaultServiceCIDRv4},
			"address": {"-6", "addr", "show", "dev", "breth0"},
			"neigh":   {"-4", "neigh", "show", "169.254.169.4", "dev", "breth0"},
		}
		checks := map[string]func(string) bool{
			"route": func(s string) bool {
				return strings.Contains(s, "via 169.254.169.4") && strings.Contains(s, "mtu 1400")
			},
			"address": func(s string) bool {
				return strings.Contains(s, "fd69::2/125") && strings.Contains(s, "nodad") && strings.Contains(s, "deprecated")
			},
			"neigh": func(s string) bool {
				return strings.Contains(s, "0a:58:a9:fe:a9:04") && strings.Contains(s, "PERMANENT")
			},
		}
		for what, args := range want {
			if out := show(args...); !checks[what](out) {
				t.Errorf("%s on %s: %q", what, m.Name, out)
			}
		}
		// Take them away: netlink events bring them back.
		for _, del := range [][]string{
			{"route", "del", defaultServiceCIDRv4},
			{"-6", "addr", "del", "fd69::2/125", "dev", "breth0"},
			{"neigh", "del", "169.254.169.4", "dev", "breth0"},
		} {
			if out, err := exec.Command("ip", append([]string{"-n", m.Netns}, del...)...).CombinedOutput(); err != nil {
				t.Fatalf("ip %v: %v\n%s", del, err, out)
			}
		}
		for what, args := range want {
			eventually(t, 15*time.Second, what+" restored", func(ctx context.Context) error {
				if out := show(args...); !checks[what](out) {
					return fmt.Errorf("%q", out)
				}
				return nil
			})
		}
	})

	t.Run("port-security-drops-spoofed-source", func(t *testing.T) {
		m, _ := e.state.Member(a.node)
		before := missPackets(t, m, 10)
		// Give the pod a second address it does not own and ping from it.
		spoof := same.ip(false).Next().Next().Next()
		if out, err := exec.Command("ip", "-n", a.netns, "addr", "add", spoof.String()+"/32", "dev", "eth0").CombinedOutput(); err != nil {
			t.Fatalf("add spoofed address: %v\n%s", err, out)
		}
		defer exec.Command("ip", "-n", a.netns, "addr", "del", spoof.String()+"/32", "dev", "eth0").Run()
		n, _ := ping(a.netns, same.ip(false), 5, "-I", spoof.String())
		if n != 0 {
			t.Errorf("spoofed pings got %d replies, want 0", n)
		}
		eventually(t, 10*time.Second, "drop counted", func(ctx context.Context) error {
			if after := missPackets(t, m, 10); after < before+5 {
				return fmt.Errorf("table 10 drop n_packets %d -> %d, want +5", before, after)
			}
			return nil
		})
		// The pod's own address still works.
		if n, out := ping(a.netns, same.ip(false), 3); n != 3 {
			t.Errorf("after spoofing, ping from the real address: %d of 3\n%s", n, out)
		}
	})
}

// defaultServiceCIDRv4 is the IPv4 service network of topology/default.yaml
// (and the agent's default).
const defaultServiceCIDRv4 = "10.96.0.0/16"

var cookieRE = regexp.MustCompile(`^ ?cookie=0x[0-9a-f]+, `)

// dumpFlows returns bridge's flows as `ovs-ofctl dump-flows --no-stats`
// prints them, without their cookies and leading space.
func dumpFlows(t *testing.T, m *testbed.Member, bridge string) []string {
	t.Helper()
	lines, err := tryDumpFlows(m, bridge)
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// tryDumpFlows is dumpFlows returning its error.
func tryDumpFlows(m *testbed.Member, bridge string) ([]string, error) {
	cmd := exec.Command("ovs-ofctl", "-O", "OpenFlow15", "dump-flows", "--no-stats", bridge)
	cmd.Env = append(os.Environ(), "OVS_RUNDIR="+m.OVSRundir)
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("dump-flows %s on %s: %v", bridge, m.Name, err)
	}
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, " ") {
			continue
		}
		lines = append(lines, strings.TrimSpace(cookieRE.ReplaceAllString(l, "")))
	}
	return lines, nil
}

var nPacketsRE = regexp.MustCompile(`n_packets=(\d+)`)

// missPackets returns n_packets of br0's priority-0 flow in table.
func missPackets(t *testing.T, m *testbed.Member, table int) int {
	t.Helper()
	lines := flowLines(t, m, "br0", fmt.Sprintf("table=%d", table))
	for _, l := range lines {
		if strings.Contains(l, " priority=0 ") || strings.Contains(l, " priority=0,") {
			if n := packetsOf(l); n >= 0 {
				return n
			}
		}
	}
	t.Fatalf("br0 on %s: no table=%d priority=0 flow:\n%s", m.Name, table, strings.Join(lines, "\n"))
	return 0
}

// flowLines dumps bridge's flows that match filter, with their counters.
func flowLines(t *testing.T, m *testbed.Member, bridge, filter string) []string {
	t.Helper()
	cmd := exec.Command("ovs-ofctl", "-O", "OpenFlow15", "dump-flows", bridge, filter)
	cmd.Env = append(os.Environ(), "OVS_RUNDIR="+m.OVSRundir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("dump-flows %s %s on %s: %v", bridge, filter, m.Name, err)
	}
	return strings.Split(string(out), "\n")
}

// ofport returns the ofport of an interface on the node, as text.
func ofport(t *testing.T, m *testbed.Member, name string) string {
	t.Helper()
	out, err := exec.Command("ovs-vsctl", "--db=unix:"+m.OVSRundir+"/db.sock", "get", "Interface", name, "ofport").Output()
	if err != nil {
		t.Fatalf("ofport of %s on %s: %v", name, m.Name, err)
	}
	return strings.TrimSpace(string(out))
}
