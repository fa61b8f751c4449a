package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"nodeflow/testbed"
	"nodeflow/testbed/nsutil"
)

// gatewayL3 reads, inside the node's namespace, what the agent keeps on
// breth0, in a form to compare: its addresses but the IPv6 link-local one,
// the routes of the main table through it but fe80::/64, and its
// permanent neighbours. Read over netlink, it takes well under a
// millisecond, so that a test can time a repair closely.
func gatewayL3(m *testbed.Member) (string, error) {
	var lines []string
	err := nsutil.Do(m.Netns, func() error {
		l, err := netlink.LinkByName("breth0")
		if err != nil {
			return err
		}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if !ipv6LinkLocal(a.IP) {
				lines = append(lines, "addr "+a.IPNet.String())
			}
		}
		for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
			rs, err := netlink.RouteList(l, fam)
			if err != nil {
				return err
			}
			for _, r := range rs {
				if r.Dst != nil && ipv6LinkLocal(r.Dst.IP) {
					continue
				}
				dst := "default"
				if ones, _ := r.Dst.Mask.Size(); r.Dst != nil && ones > 0 {
					dst = r.Dst.String()
				}
				lines = append(lines, fmt.Sprintf("route %s via %v src %v metric %d mtu %d", dst, r.Gw, r.Src, r.Priority, r.MTU))
			}
			ns, err := netlink.NeighList(l.Attrs().Index, fam)
			if err != nil {
				return err
			}
			for _, n := range ns {
				if n.State&netlink.NUD_PERMANENT != 0 {
					lines = append(lines, "neigh "+n.IP.String()+" "+n.HardwareAddr.String())
				}
			}
		}
		return nil
	})
	slices.Sort(lines)
	return strings.Join(lines, "\n"), err
}

// ipv6LinkLocal reports whether ip is in fe80::/10 (the masquerade
// addresses are IPv4 link-local, and kept).
func ipv6LinkLocal(ip net.IP) bool { return ip.To4() == nil && ip.IsLinkLocalUnicast() }

// stableGatewayL3 waits until breth0 holds the same for 300 ms (an
// earlier test's deletions may still be being repaired) and returns it.
func stableGatewayL3(t *testing.T, m *testbed.Member) string {
	t.Helper()
	var last string
	eventually(t, 20*time.Second, "breth0 of "+m.Name+" settled", func(ctx context.Context) error {
		a, err := gatewayL3(m)
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(300 * time.Millisecond):
		}
		b, err := gatewayL3(m)
		if err != nil || a != b {
			return fmt.Errorf("changed within 300 ms: %v", err)
		}
		last = b
		return nil
	})
	return last
}

// agentHealth gets path (/readyz, /healthz) from node m's agent.
func agentHealth(ctx context.Context, m *testbed.Member, path string) (int, string, error) {
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return nsutil.Dial(ctx, m.Netns, network, addr, time.Second)
	}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 2 * time.Second}).Get("http://" + agentHealthAddr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), err
}

// crossNodePods starts test pods in a new namespace named ns and returns
// one on node and one on another node, once they reach each other.
func crossNodePods(t *testing.T, e *env, ns, node string) (on, off netPod) {
	t.Helper()
	pods := netPods(t, e, createNamespace(t, e, ns))
	for _, p := range pods {
		if p.node == node && on.name == "" {
			on = p
		}
		if p.node != node && off.name == "" {
			off = p
		}
	}
	if on.name == "" || off.name == "" {
		t.Fatalf("no pods on %s and elsewhere: %+v", node, pods)
	}
	eventually(t, 30*time.Second, "traffic between the nodes' pods", func(ctx context.Context) error { return bothWays(ctx, on, off) })
	return on, off
}

// bothWays is a new TCP connection each way between two pods.
func bothWays(ctx context.Context, a, b netPod) error {
	for _, p := range [][2]netPod{{a, b}, {b, a}} {
		if pod, _, err := httpGet(ctx, p[0].netns, p[1].ip(false), 8080); err != nil || pod != p[1].name {
			return fmt.Errorf("%s -> %s: %q, %v", p[0].name, p[1].name, pod, err)
		}
	}
	return nil
}

// connectBothWays opens a new TCP connection each way between two pods,
// each given 100 ms.
func connectBothWays(a, b netPod) error {
	for _, p := range [][2]netPod{{a, b}, {b, a}} {
		if err := tcpConnect(p[0].netns, p[1].ip(false), 8080, 100*time.Millisecond); err != nil {
			return fmt.Errorf("%s -> %s: %w", p[0].name, p[1].name, err)
		}
	}
	return nil
}

// TestHealNodeAddresses deletes, inside node1's namespace, what the agent
// keeps on breth0 (the node's IPv4 and IPv6 addresses and default routes,
// the masquerade address, a service route and the permanent neighbour of
// the service next hop; the route with the node IP as source goes with
// it) and measures how long until all of it is back: within a second. Then pods on the other node reach node1's pods again, and the
// repairs are counted.
func TestHealNodeAddresses(t *testing.T) {
	e := up(t)
	requireAgent(t, e)
	m := member(t, e, "node1")
	on, off := crossNodePods(t, e, "e2e-heal-addrs", m.Name)
	before := stableGatewayL3(t, m)
	v4, v6 := memberIP(t, m, false), memberIP(t, m, true)
	for _, want := range []string{"addr " + v4.String() + "/24", "addr " + v6.String() + "/64", "route default via 172.30.0.1", "route default via fd00:172:30::1",
		"addr 169.254.169.2/29", "route 10.96.0.0/16 via 169.254.169.4", "neigh 169.254.169.4 "} {
		if !strings.Contains(before, want) {
			t.Fatalf("breth0 of %s lacks %q before the test:\n%s", m.Name, want, before)
		}
	}
	metrics, err := agentMetrics(m)
	if err != nil {
		t.Fatal(err)
	}
	repairedBefore := map[string]float64{}
	for _, what := range []string{"node-address", "node-route", "masquerade-address", "masquerade-route", "masquerade-neighbour"} {
		repairedBefore[what] = seriesValue(metrics, `nodeflow_host_repairs_total{result="repaired",what="`+what+`"}`)
	}

	// Routes and neighbours first: the last IPv4 address of breth0 takes
	// every IPv4 route and neighbour of breth0 with it, and a deletion the
	// kernel did already fails (-force goes on past it).
	batch := strings.Join([]string{
		"neigh del 169.254.169.4 dev breth0",
		"route del 10.96.0.0/16 dev breth0",
		"route del default via 172.30.0.1 dev breth0",
		"route del default via fd00:172:30::1 dev breth0",
		"addr del " + v4.String() + "/24 dev breth0",
		"addr del " + v6.String() + "/64 dev breth0",
		"addr del 169.254.169.2/29 dev breth0",
	}, "\n") + "\n"
	cmd := exec.Command("ip", "-n", m.Netns, "-force", "-batch", "-")
	cmd.Stdin = strings.NewReader(batch)
	logStart := fileSize(filepath.Join(m.Dir, "agent.log"))
	t.Cleanup(func() { agentLogOnFailure(t, m, logStart) })
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Logf("ip -batch: %v: %s", err, out)
	}
	deleted := time.Since(start)
	var back time.Duration
	var now string
	for deadline := start.Add(10 * time.Second); time.Now().Before(deadline); {
		if now, err = gatewayL3(m); err == nil && now == before {
			back = time.Since(start)
			break
		}
		time.Sleep(2 * time.Millisecond) // the probe interval
	}
	if back == 0 {
		t.Fatalf("breth0 of %s not back within 10 s:\nnow:\n%s\nbefore:\n%s", m.Name, now, before)
	}
	t.Logf("everything back on breth0 %s after the deletions began (they took %s)", back.Round(time.Millisecond), deleted.Round(time.Millisecond))
	if back > time.Second {
		t.Errorf("breth0 of %s back after %s, want within 1 s", m.Name, back.Round(time.Millisecond))
	}
	// A new TCP connection each way, each given 100 ms: a lost SYN is not
	// waited for (its retransmit would come after 1 s).
	var last error
	for deadline := start.Add(10 * time.Second); ; {
		if last = connectBothWays(on, off); last == nil {
			t.Logf("pod traffic across the nodes back %s after the deletions began", time.Since(start).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod traffic across the nodes not back within 10 s: %v", last)
		}
		time.Sleep(5 * time.Millisecond) // the probe interval
	}
	eventually(t, 10*time.Second, "requests between the nodes' pods after the repair", func(ctx context.Context) error { return bothWays(ctx, on, off) })

	metrics, err = agentMetrics(m)
	if err != nil {
		t.Fatal(err)
	}
	for what, atLeast := range map[string]float64{"node-address": 2, "node-route": 2, "masquerade-address": 1, "masquerade-route": 2, "masquerade-neighbour": 1} {
		series := `nodeflow_host_repairs_total{result="repaired",what="` + what + `"}`
		if got := seriesValue(metrics, series) - repairedBefore[what]; got < atLeast {
			t.Errorf("%s went up by %v, want at least %v", series, got, atLeast)
		}
	}
	if code, body, err := agentHealth(context.Background(), m, "/readyz"); code != 200 {
		t.Errorf("/readyz after the repair: %d %q %v", code, body, err)
	}
}

// TestHealRepairFailing makes a repair fail for good: IPv6 disabled on
// node1's breth0 takes its IPv6 addresses and keeps them from coming back.
// /readyz says which repairs fail (and /healthz does not fail: a restart
// would not mend it), the gauge and the counter show them, and the agent
// logs each once, however often it retries. IPv6 enabled again, the
// addresses come back, /readyz is well and the log says so once.
func TestHealRepairFailing(t *testing.T) {
	e := up(t)
	requireAgent(t, e)
	m := member(t, e, "node1")
	ctx := context.Background()
	eventually(t, 30*time.Second, "agent ready", func(ctx context.Context) error { return agentReady(ctx, m) })
	before := stableGatewayL3(t, m)
	for _, want := range []string{"addr 169.254.169.2/29", "addr fd69::2/125", "neigh 169.254.169.4 ", "route default via fd00:172:30::1"} {
		if !strings.Contains(before, want) {
			t.Fatalf("breth0 of %s lacks %q before the test:\n%s", m.Name, want, before)
		}
	}
	logPath := filepath.Join(m.Dir, "agent.log")
	logStart := fileSize(logPath)
	t.Cleanup(func() { agentLogOnFailure(t, m, logStart) })
	metrics, err := agentMetrics(m)
	if err != nil {
		t.Fatal(err)
	}
	failedSeries := `nodeflow_host_repairs_total{result="failed",what="node-address"}`
	failedBefore := seriesValue(metrics, failedSeries)

	sysctl := func(v string) {
		t.Helper()
		if out, err := exec.Command("ip", "netns", "exec", m.Netns, "sysctl", "-w", "net.ipv6.conf.breth0.disable_ipv6="+v).CombinedOutput(); err != nil {
			t.Fatalf("sysctl: %v: %s", err, out)
		}
	}
	sysctl("1")
	t.Cleanup(func() { sysctl("0") })
	eventually(t, 20*time.Second, "/readyz says the repairs fail", func(ctx context.Context) error {
		code, body, err := agentHealth(ctx, m, "/readyz")
		if err != nil || code != 503 || !strings.Contains(body, "node-address: failing for") || !strings.Contains(body, "masquerade-address: failing for") ||
			!strings.Contains(body, "permission denied") {
			return fmt.Errorf("%d %q %v", code, body, err)
		}
		return nil
	})
	// Retried for a while (0.1 s, doubling to 5 s apart): still one
	// warning.
	eventually(t, 30*time.Second, "the failing repair retried", func(ctx context.Context) error {
		text, err := agentMetrics(m)
		if err != nil {
			return err
		}
		if n := seriesValue(text, failedSeries) - failedBefore; n < 9 {
			return fmt.Errorf("%s went up by %v, want 9", failedSeries, n)
		}
		if g := seriesValue(text, `nodeflow_host_repairs_failing{what="node-address"}`); g != 1 {
			return fmt.Errorf("gauge %v, want 1", g)
		}
		return nil
	})
	if code, body, err := agentHealth(ctx, m, "/healthz"); code != 200 {
		t.Errorf("/healthz with a failing repair: %d %q %v", code, body, err)
	}
	_, body, _ := agentHealth(ctx, m, "/readyz")
	t.Logf("/readyz: %s", body)

	sysctl("0")
	start := time.Now()
	eventually(t, 20*time.Second, "IPv6 addresses back and /readyz well", func(ctx context.Context) error {
		if now, err := gatewayL3(m); err != nil || now != before {
			return fmt.Errorf("breth0 now:\n%s\nwant:\n%s\n(%v)", now, before, err)
		}
		if code, body, err := agentHealth(ctx, m, "/readyz"); code != 200 {
			return fmt.Errorf("/readyz: %d %q %v", code, body, err)
		}
		return nil
	})
	t.Logf("IPv6 enabled again: addresses back and ready %s later", time.Since(start).Round(time.Millisecond))
	text, err := agentMetrics(m)
	if err != nil {
		t.Fatal(err)
	}
	if g := seriesValue(text, `nodeflow_host_repairs_failing{what="node-address"}`); g != 0 {
		t.Errorf("gauge %v after the recovery, want 0", g)
	}
	var failing, recovered int
	for _, l := range strings.Split(readFrom(t, logPath, logStart), "\n") {
		if !strings.Contains(l, "repair=node-address") {
			continue
		}
		switch {
		case strings.Contains(l, "cannot repair the node's own configuration"):
			failing++
		case strings.Contains(l, "host repair works again"):
			recovered++
		}
	}
	if failing != 1 || recovered != 1 {
		t.Errorf("the agent logged the node-address episode %d times and its end %d times, want once each", failing, recovered)
	}
}

// agentLogOnFailure logs, when t failed, what node m's agent logged about
// the host's configuration since offset.
func agentLogOnFailure(t *testing.T, m *testbed.Member, offset int64) {
	if !t.Failed() {
		return
	}
	var keep []string
	for _, l := range strings.Split(readFrom(t, filepath.Join(m.Dir, "agent.log"), offset), "\n") {
		for _, w := range []string{"host side", "repair", "restored", "netlink", "subscri", "level=error", "level=warn"} {
			if strings.Contains(l, w) {
				keep = append(keep, l)
				break
			}
		}
	}
	t.Logf("%s's agent on the host's configuration:\n%s", m.Name, strings.Join(keep, "\n"))
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// readFrom returns the file at path from offset on.
func readFrom(t *testing.T, path string, offset int64) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if offset > int64(len(b)) {
		return ""
	}
	return string(b[offset:])
}
