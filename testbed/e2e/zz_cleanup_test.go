package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"nodeflow/host/netstack"
	"nodeflow/testbed"
)

// TestZZCleanup uninstalls nodeflow from one node as an operator would:
// the node's pods go (the node cordoned, its pods deleted through the API:
// their veths and namespaces are the kubelet's, and they were not there
// before the agent started either), its agents stop, and `nodeflow cleanup`
// runs in the node's namespace with the testbed's paths. Then the node's
// namespace, OVS and CNI configuration directory must be exactly as the
// testbed recorded them before the agent first started
// (testbed.SnapshotBeforeAgent): links, addresses, routes of all tables,
// permanent neighbours, the nftables ruleset, the uplink's sysctls, the
// bridges, the CNI configuration files. A second run finds nothing to do.
// Before all that, cleanup refuses to run beside a running agent, found by
// its socket and by its OVSDB lock. Last, on the node as it was before
// nodeflow, agents that cannot use their kubeconfig leave it so, and the
// agent that can takes it again (checkBeforeTaking). The node serves no
// test after this one; zz_down_test.go follows and takes the testbed down.
func TestZZCleanup(t *testing.T) {
	e := up(t)
	requireAgent(t, e)
	const node = "node2"
	m, ok := e.state.Member(node)
	if !ok {
		t.Fatalf("no member %s", node)
	}
	before, err := testbed.ReadNodeSnapshot(filepath.Join(m.Dir, testbed.SnapshotBeforeAgent))
	if err != nil {
		t.Fatalf("the testbed took no snapshot of %s before its agent started: %v", node, err)
	}
	if len(before.Bridges) != 0 {
		t.Fatalf("bridges before the agent started: %q", before.Bridges)
	}
	cleanup := func(args ...string) (string, error) {
		argv := append([]string{"netns", "exec", m.Netns, e.state.Nodeflow, "cleanup", "--ovs-rundir", m.OVSRundir,
			"--cni-conf-dir", filepath.Join(m.Dir, "net.d"), "--cni-bin", ""}, args...)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "ip", argv...).CombinedOutput()
		return string(out), err
	}

	// Not beside a running agent. A test before this one may have left
	// the node without one (its replacement stopped with it): start one.
	if len(nodeAgents(t, m)) == 0 {
		logf, err := os.OpenFile(filepath.Join(m.Dir, "agent-e2e.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		cmd := agentCommand(e, m, logf)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		keepRunning(cmd, func() { logf.Close() })
		t.Logf("no agent ran on %s: started one (pid %d)", node, cmd.Process.Pid)
	}
	eventually(t, 60*time.Second, "agent on "+node+" ready", func(ctx context.Context) error { return agentReady(ctx, m) })
	// Pods on the node, which must go before nodeflow does.
	ns := createNamespace(t, e, "e2e-cleanup")
	placed := false
	for _, p := range deployPods(t, e, ns, "cleanup", 2) {
		placed = placed || p.node == node
	}
	if !placed {
		t.Fatalf("no pod of %s/cleanup on %s", ns, node)
	}
	out, err := cleanup()
	if err == nil || !strings.Contains(out, "an agent is running on this node") {
		t.Fatalf("cleanup beside a running agent: %v\n%s", err, out)
	}
	// Found by its OVSDB lock too, where neither its socket nor its
	// health address is where cleanup looks.
	out, err = cleanup("--socket", "none", "--health-addr", "")
	if err == nil || !strings.Contains(out, "holds OVSDB lock nodeflow_agent") {
		t.Fatalf("cleanup beside a running agent it finds by the lock alone: %v\n%s", err, out)
	}
	if snap := snapshot(t, m); !strings.Contains(strings.Join(snap.Bridges, " "), "breth0") {
		t.Fatalf("cleanup refused, but the bridges are %q", snap.Bridges)
	}

	// The node's pods go first.
	ctx := context.Background()
	patch := []byte(`{"spec":{"unschedulable":true}}`)
	if _, err := e.client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("cordon %s: %v", node, err)
	}
	onNode := metav1.ListOptions{FieldSelector: "spec.nodeName=" + node}
	eventually(t, 3*time.Minute, "no pod left on "+node, func(ctx context.Context) error {
		pods, err := e.client.CoreV1().Pods("").List(ctx, onNode)
		if err != nil {
			return err
		}
		var left []string
		for _, p := range pods.Items {
			left = append(left, p.Namespace+"/"+p.Name)
			if p.DeletionTimestamp == nil {
				if err := e.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
					return err
				}
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("pods %s", strings.Join(left, ", "))
		}
		return nil
	})

	// Then the agents: the testbed's, or those tests started in its place.
	stopNodeAgents(t, m)

	// The agent recorded the uplink's sysctls before it first changed them.
	statePath := filepath.Join(m.Dir, "ipam", netstack.UplinkStateFile)
	b, err := os.ReadFile(statePath)
	if err != nil {
		t.Fatalf("the agent left no record of the uplink's sysctls: %v", err)
	}
	var st netstack.UplinkState
	if err := json.Unmarshal(b, &st); err != nil || st.Uplink != "eth0" || len(st.Sysctls) != 3 {
		t.Fatalf("record %s: %v: %s", statePath, err, b)
	}
	for name, v := range st.Sysctls {
		if want := before.Sysctls[sysctlKey(name)]; v != want {
			t.Errorf("recorded %s=%s, but it was %s before the agent started", name, v, want)
		}
	}
	if st.TxChecksum == nil || map[bool]string{true: "on", false: "off"}[*st.TxChecksum] != before.TxChecksum {
		t.Errorf("recorded TX checksum offload %v, but it was %s before the agent started", st.TxChecksum, before.TxChecksum)
	}

	out, err = cleanup()
	t.Logf("nodeflow cleanup:\n%s", out)
	if err != nil {
		t.Fatalf("nodeflow cleanup: %v", err)
	}
	for _, want := range []string{"deleted the bridge", "gave the node's address back to the uplink", "restored the uplink's sysctl",
		"removed the CNI configuration", "removed the record of the uplink's sysctls"} {
		if !strings.Contains(out, want) {
			t.Errorf("cleanup did not say %q", want)
		}
	}
	// The uplink's IPv6 link-local address comes back with IPv6, after
	// duplicate address detection: wait for it.
	var diff []string
	eventually(t, 30*time.Second, node+" as it was before its agent started", func(ctx context.Context) error {
		diff = before.Diff(snapshot(t, m))
		if len(diff) > 0 {
			return fmt.Errorf("%d differences (- before the agent, + after cleanup):\n%s", len(diff), strings.Join(diff, "\n"))
		}
		return nil
	})
	if _, err := os.Stat(statePath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record %s: still there (%v)", statePath, err)
	}

	out, err = cleanup()
	if err != nil || !strings.Contains(out, "nothing to do") {
		t.Errorf("second cleanup: %v, want nothing to do:\n%s", err, out)
	}

	// The node as it was before nodeflow: an agent that cannot use its
	// kubeconfig leaves it so, and the agent that can takes it again.
	t.Run("agent-checks-before-taking-the-node", func(t *testing.T) { checkBeforeTaking(t, e, m, before) })
}

// sysctlKey is the snapshot's key of the uplink's sysctl name.
func sysctlKey(name string) string {
	if name == "disable_ipv6" {
		return "ipv6/conf/eth0/" + name
	}
	return "ipv4/conf/eth0/" + name
}

func snapshot(t *testing.T, m *testbed.Member) *testbed.NodeSnapshot {
	t.Helper()
	s, err := testbed.TakeNodeSnapshot(m.Netns, m.OVSRundir, filepath.Join(m.Dir, "net.d"), "eth0")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// stopNodeAgents stops every `nodeflow agent` in m's network namespace and
// waits until they have exited.
func stopNodeAgents(t *testing.T, m *testbed.Member) {
	t.Helper()
	pids := nodeAgents(t, m)
	if len(pids) == 0 {
		t.Fatalf("no agent runs on %s", m.Name)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Fatalf("stop agent %d on %s: %v", pid, m.Name, err)
		}
	}
	eventually(t, 20*time.Second, "agents on "+m.Name+" exit", func(ctx context.Context) error {
		if left := nodeAgents(t, m); len(left) > 0 {
			return fmt.Errorf("pids %v still run", left)
		}
		return nil
	})
	t.Logf("stopped the agents of %s: pids %v", m.Name, pids)
}

// nodeAgents lists the live `nodeflow agent` processes in m's namespace.
func nodeAgents(t *testing.T, m *testbed.Member) []int {
	t.Helper()
	var ns syscall.Stat_t
	if err := syscall.Stat(filepath.Join("/run/netns", m.Netns), &ns); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join("/proc", ent.Name())
		cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil {
			continue
		}
		argv := strings.Split(string(cmdline), "\x00")
		if len(argv) < 2 || !strings.HasPrefix(filepath.Base(argv[0]), "nodeflow") || argv[1] != "agent" {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join(dir, "ns", "net"), &st) != nil || st.Ino != ns.Ino {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join(dir, "stat")); err != nil || zombie.Match(stat) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}
