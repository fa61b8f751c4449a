package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"nodeflow/testbed"
)

var benchSetup sync.Once

// fakeNodes registers n extra Node objects with podCIDRs and addresses, so
// that the agent programs tunnels to them as to real nodes, (the
// testbed's down removes them with the cluster).
func fakeNodes(b testing.TB, e *env, n int) {
	b.Helper()
	ctx := context.Background()
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("fake%d", i)
		node := &v1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1.NodeSpec{PodCIDRs: []string{fmt.Sprintf("10.244.%d.0/24", 100+i), fmt.Sprintf("fd00:10:244:%x::/64", 0x100+i)},
				PodCIDR: fmt.Sprintf("10.244.%d.0/24", 100+i)},
		}
		if _, err := e.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		// The controller manager updates new Nodes too: retry on conflicts.
		eventually(b, 30*time.Second, "address of "+name, func(ctx context.Context) error {
			cur, err := e.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: fmt.Sprintf("172.30.0.%d", 200+i)}}
			_, err = e.client.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
			return err
		})
	}
}

// manyPods runs a Deployment of n pods pinned to node and waits until
// every pod has its port on br0.
func manyPods(b testing.TB, e *env, ns, node string, n int) {
	b.Helper()
	labels := map[string]string{"app": "many"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "many", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(n)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: v1.PodSpec{
					NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
					TerminationGracePeriodSeconds: ptr.To(int64(1)),
					Containers:                    []v1.Container{{Name: "many", Image: "testbed/web"}},
				},
			},
		},
	}
	if _, err := e.client.AppsV1().Deployments(ns).Create(context.Background(), dep, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	m, _ := e.state.Member(node)
	eventually(b, 10*time.Minute, fmt.Sprintf("%d pods on %s", n, node), func(ctx context.Context) error {
		list, err := e.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		running := 0
		for _, p := range list.Items {
			if p.Status.Phase == v1.PodRunning {
				running++
			}
		}
		if running < n {
			return fmt.Errorf("%d of %d running", running, n)
		}
		if ports := len(cniPorts(b, m)); ports < n {
			return fmt.Errorf("%d of %d ports", ports, n)
		}
		return nil
	})
}

// rssKiB reads a process's resident set size.
func rssKiB(pid int) (int, error) { return procStatusKiB(pid, "VmRSS") }

// procStatusKiB returns a KiB field of /proc/PID/status: VmRSS, or VmHWM
// (the peak RSS).
func procStatusKiB(pid int, field string) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, field+":") {
			return strconv.Atoi(strings.Fields(l)[1])
		}
	}
	return 0, fmt.Errorf("no %s for pid %d", field, pid)
}

// rssParts says what a process's resident set is made of: anonymous
// memory (the Go heap, stacks and the runtime's own) and file pages (the
// binary's code and data that it touched).
func rssParts(pid int) string {
	var parts []string
	for _, f := range []string{"RssAnon", "RssFile", "RssShmem"} {
		kib, err := procStatusKiB(pid, f)
		if err != nil {
			return err.Error()
		}
		parts = append(parts, fmt.Sprintf("%s %d KiB", strings.TrimPrefix(f, "Rss"), kib))
	}
	return strings.Join(parts, ", ")
}

// replaceFlows times `ovs-ofctl --bundle replace-flows` of bridge's own
// flows (the full-replace approach of the ovn-kubernetes gateway), as the
// reference for the agent's start-up reconcile.
func replaceFlows(b testing.TB, m *testbed.Member, bridge string) time.Duration {
	b.Helper()
	env := append(os.Environ(), "OVS_RUNDIR="+m.OVSRundir)
	dump := exec.Command("ovs-ofctl", "-O", "OpenFlow15", "dump-flows", "--no-stats", bridge)
	dump.Env = env
	out, err := dump.Output()
	if err != nil {
		b.Fatal(err)
	}
	file := filepath.Join(b.TempDir(), bridge+".flows")
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, " ") {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	cmd := exec.Command("ovs-ofctl", "-O", "OpenFlow15", "--bundle", "replace-flows", bridge, file)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("replace-flows: %v\n%s", err, out)
	}
	return time.Since(start)
}

// BenchmarkAgentStartup100Pods measures `nodeflow agent` on a node with 100
// pods, in a cluster of 10 nodes (the testbed's two and eight registered
// Node objects): the time from process start to both bridges reconciled
// (/readyz), the same reconcile done by `ovs-ofctl --bundle replace-flows`
// of both bridges' flows as the reference, and the agent's RSS at idle.
//
// It uses the shared testbed, so run it without the tests (the last of
// them takes the testbed down):
//
//	NODEFLOW_REQUIRE_OVS=1 go test -run '^$' -bench AgentStartup100Pods -benchtime 5x ./testbed/e2e
func BenchmarkAgentStartup100Pods(b *testing.B) {
	e := up(b)
	if !e.state.Agent {
		b.Skipf("nodeflow agent does not run: %s", e.state.AgentReason)
	}
	const node, pods = "node1", 100
	m, _ := e.state.Member(node)
	// The benchmark function runs more than once (b.N = 1, then more):
	// the cluster is prepared once, and left for the testbed's down.
	benchSetup.Do(func() {
		ns := fmt.Sprintf("bench-agent-%d", os.Getpid()%10000)
		if _, err := e.client.CoreV1().Namespaces().Create(context.Background(), &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		fakeNodes(b, e, 8)
		manyPods(b, e, ns, node, pods)
		stopAgentProcess(b, e, node)
	})
	var total, ref time.Duration
	var rss int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		cmd := startAgent(b, e, m)
		eventually(b, 2*time.Minute, "agent ready", func(ctx context.Context) error { return agentReady(ctx, m) })
		took := time.Since(start)
		total += took
		b.StopTimer()
		ref += replaceFlows(b, m, "br0") + replaceFlows(b, m, "breth0")
		time.Sleep(3 * time.Second) // idle, by design: RSS after start-up settles
		if kb, err := rssKiB(cmd.Process.Pid); err == nil && kb > rss {
			rss = kb
		}
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		b.StartTimer()
	}
	b.StopTimer()
	per := total / time.Duration(b.N)
	refPer := ref / time.Duration(b.N)
	flows := len(mustDump(b, m, "br0")) + len(mustDump(b, m, "breth0"))
	b.ReportMetric(per.Seconds()*1000, "ms/startup")
	b.ReportMetric(refPer.Seconds()*1000, "ms/replace-flows")
	b.ReportMetric(per.Seconds()/refPer.Seconds(), "ratio")
	b.ReportMetric(float64(rss)/1024, "MiB-RSS")
	b.ReportMetric(float64(flows), "flows")
}

func mustDump(b testing.TB, m *testbed.Member, bridge string) []string {
	lines, err := tryDumpFlows(m, bridge)
	if err != nil {
		b.Fatal(err)
	}
	return lines
}
