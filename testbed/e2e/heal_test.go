package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"nodeflow/host/cni"
	"nodeflow/testbed"
)

// TestHeal makes an operator's mistakes on one node under traffic and
// measures how long the node takes to heal: the pod bridge deleted with
// every port on it, one pod's port deleted, the VXLAN port deleted, and
// all of breth0's flows deleted, and breth0 deleted with the uplink and the
// node's addresses. Each time, pod-to-pod traffic on the node
// and across nodes must come back, and the time from the deletion to the
// first answered request is logged (the goal is under a second).
func TestHeal(t *testing.T) {
	e, ns := agentNamespace(t, "e2e-heal")
	pods := netPods(t, e, ns)
	a, same, other := pairs(t, pods)
	m, _ := e.state.Member(a.node)
	// A new TCP connection to a pod on the node and one on the other node,
	// each given 100 ms: the handshake proves the path both ways, and a
	// lost SYN is not waited for (its retransmit would come after 1 s).
	reach := func(context.Context) error {
		for _, dst := range []netPod{same, other} {
			if err := tcpConnect(a.netns, dst.ip(false), 8080, 100*time.Millisecond); err != nil {
				return fmt.Errorf("%s -> %s: %w", a.name, dst.name, err)
			}
		}
		return nil
	}
	eventually(t, 30*time.Second, "traffic before the mistakes", func(ctx context.Context) error {
		for _, dst := range []netPod{same, other} {
			if pod, _, err := httpGet(ctx, a.netns, dst.ip(false), 8080); err != nil || pod != dst.name {
				return fmt.Errorf("%s -> %s: %q, %v", a.name, dst.name, pod, err)
			}
		}
		return nil
	})

	l3, err := nodeL3(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range m.Addresses {
		if !strings.Contains(l3, a+"/") {
			t.Fatalf("%s: node address %s not on breth0: %s", m.Name, a, l3)
		}
	}
	// The node's own addresses and routes must be back too.
	reachAndL3 := func(ctx context.Context) error {
		if err := reach(ctx); err != nil {
			return err
		}
		if now, err := nodeL3(m); err != nil || now != l3 {
			return fmt.Errorf("%s: breth0 has %q, want %q (%v)", m.Name, now, l3, err)
		}
		return nil
	}
	for _, tc := range []struct {
		name string
		do   func(t *testing.T)
	}{
		{"del-br br0", func(t *testing.T) { vsctl(t, m, "del-br", "br0") }},
		{"del-port of a pod", func(t *testing.T) { vsctl(t, m, "del-port", "br0", portName(t, m, ns, a.name)) }},
		{"del-port vxlan0", func(t *testing.T) { vsctl(t, m, "del-port", "br0", "vxlan0") }},
		{"del-flows breth0", func(t *testing.T) { ofctl(t, m, "del-flows", "breth0") }},
		{"del-br breth0", func(t *testing.T) { vsctl(t, m, "del-br", "breth0") }},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "-"), func(t *testing.T) {
			start := time.Now()
			tc.do(t)
			deadline := start.Add(30 * time.Second)
			var last error
			for time.Now().Before(deadline) {
				if last = reachAndL3(context.Background()); last == nil {
					t.Logf("%s: traffic back %s after the deletion", tc.name, time.Since(start).Round(time.Millisecond))
					return
				}
				time.Sleep(5 * time.Millisecond) // the probe interval
			}
			t.Fatalf("%s: traffic not back within 30 s: %v", tc.name, last)
		})
		// Every later case starts from a healed node.
		eventually(t, 30*time.Second, "healed before the next case", reachAndL3)
	}
}

// nodeL3 reads the node's addresses (both families) and default routes on
// breth0, which deleting breth0 takes with it, in a form to compare.
func nodeL3(m *testbed.Member) (string, error) {
	var b strings.Builder
	out, err := exec.Command("ip", "-n", m.Netns, "-o", "addr", "show", "dev", "breth0", "scope", "global").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s: ip addr: %v: %s", m.Name, err, out)
	}
	var addrs []string
	for _, f := range strings.Fields(string(out)) {
		if strings.Contains(f, "/") {
			addrs = append(addrs, f)
		}
	}
	slices.Sort(addrs)
	b.WriteString(strings.Join(addrs, " ") + "; ")
	for _, fam := range []string{"-4", "-6"} {
		out, err := exec.Command("ip", "-n", m.Netns, fam, "route", "show", "default", "dev", "breth0").CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("%s: ip route: %v: %s", m.Name, err, out)
		}
		b.WriteString(strings.Join(strings.Fields(string(out)), " ") + "; ")
	}
	return b.String(), nil
}

// vsctl runs ovs-vsctl against the node's OVS.
func vsctl(t *testing.T, m *testbed.Member, args ...string) string {
	t.Helper()
	out, err := exec.Command("ovs-vsctl", append([]string{"--db=unix:" + filepath.Join(m.OVSRundir, "db.sock")}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ovs-vsctl %v on %s: %v: %s", args, m.Name, err, out)
	}
	return strings.TrimSpace(string(out))
}

// portName returns the name of pod ns/name's port on the node's br0 (its
// ofport changes when the port is re-added).
func portName(t *testing.T, m *testbed.Member, ns, name string) string {
	t.Helper()
	for _, p := range cniPorts(t, m) {
		if p.ExternalIDs[cni.ExternalIDPodName] == name && p.ExternalIDs[cni.ExternalIDPodNamespace] == ns {
			return p.Name
		}
	}
	t.Fatalf("%s: no port of pod %s/%s", m.Name, ns, name)
	return ""
}
