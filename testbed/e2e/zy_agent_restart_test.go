package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"nodeflow/agent/features/vnetfeature"
	"nodeflow/host/cni"
	"nodeflow/testbed"
	"nodeflow/testbed/nsutil"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// agentHealthAddr is where `nodeflow agent` serves /readyz by default,
// inside the node's network namespace.
const agentHealthAddr = "127.0.0.1:9476"

// agentReady polls the agent's /readyz inside the node's namespace.
func agentReady(ctx context.Context, m *testbed.Member) error {
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return nsutil.Dial(ctx, m.Netns, network, addr, time.Second)
	}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 2 * time.Second}).Get("http://" + agentHealthAddr + "/readyz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("readyz: %s", resp.Status)
	}
	return nil
}

// agentCommand returns `nodeflow agent` in m's namespace with the
// environment the testbed gives it, logging to logf.
func agentCommand(e *env, m *testbed.Member, logf *os.File) *exec.Cmd {
	return agentCommandBinary(e, m, logf, e.state.Nodeflow)
}

// agentCommandBinary is agentCommand with another nodeflow binary.
func agentCommandBinary(e *env, m *testbed.Member, logf *os.File, nodeflow string) *exec.Cmd {
	// In the node's network namespace only, as the testbed runs its agents
	// (testbed.startInNetns): the network namespaces it makes are mounted
	// where everyone sees them.
	cmd := exec.Command("nsenter", "--net="+filepath.Join("/run/netns", m.Netns), "--", nodeflow, "agent")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+m.Kubeconfig, "NODE_NAME="+m.Name, "NODEFLOW_NODE_NAME="+m.Name,
		"OVS_RUNDIR="+m.OVSRundir, "NODEFLOW_CNI_CONF_DIR="+filepath.Join(m.Dir, "net.d"))
	cmd.Env = append(cmd.Env, e.state.AgentEnv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	return cmd
}

// startAgent starts `nodeflow agent` in the node's namespace with the
// environment the testbed gives it, and stops it when the test ends.
func startAgent(t testing.TB, e *env, m *testbed.Member) *exec.Cmd {
	t.Helper()
	return startAgentEnv(t, e, m)
}

// startAgentEnv is startAgent with env added to the agent's environment.
func startAgentEnv(t testing.TB, e *env, m *testbed.Member, env ...string) *exec.Cmd {
	t.Helper()
	logf, err := os.Create(filepath.Join(t.TempDir(), "agent-"+m.Name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := agentCommand(e, m, logf)
	cmd.Env = append(cmd.Env, env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		terminate(cmd)
		logf.Close()
		if dir := os.Getenv("NODEFLOW_BENCH_PPROF"); dir != "" {
			// Kept with the profiles, for the timeline of a start.
			if b, err := os.ReadFile(logf.Name()); err == nil {
				_ = os.WriteFile(filepath.Join(dir, filepath.Base(logf.Name())), b, 0o644)
			}
		}
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("agent log:\n%s", b)
		}
	})
	return cmd
}

// stopAgentProcess stops the testbed's agent on the node (SIGTERM) and
// waits for it to exit.
func stopAgentProcess(t testing.TB, e *env, node string) {
	t.Helper()
	for _, p := range e.state.Processes {
		if p.Name != "agent "+node {
			continue
		}
		proc, err := os.FindProcess(p.PID)
		if err != nil {
			t.Fatal(err)
		}
		if err := proc.Signal(syscall.SIGTERM); err != nil {
			t.Fatalf("stop agent %s (pid %d): %v", node, p.PID, err)
		}
		eventually(t, 15*time.Second, "agent exits", func(ctx context.Context) error {
			if err := proc.Signal(syscall.Signal(0)); err == nil {
				return fmt.Errorf("pid %d still running", p.PID)
			}
			return nil
		})
		return
	}
	t.Fatalf("no agent process for %s in the testbed state", node)
}

// settled waits until nothing in the cluster is being torn down: no
// namespace is terminating, no pod is being deleted, and every port on each
// node's br0 that a pod or a virtual-network attachment made still has its
// owner. Earlier tests leave namespaces to be deleted behind them, and the
// userspace datapath may drop a packet in flight on any port while another
// port is added or removed (docs/pipeline.md): a test that counts lost
// packets waits for that to be over first.
func settled(t *testing.T, e *env) {
	t.Helper()
	d := vnetClient(t, e)
	eventually(t, 3*time.Minute, "no teardown in progress", func(ctx context.Context) error {
		nss, err := e.client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, ns := range nss.Items {
			if ns.Status.Phase == corev1.NamespaceTerminating {
				return fmt.Errorf("namespace %s is terminating", ns.Name)
			}
		}
		pods, err := e.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		live := map[string]bool{}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				return fmt.Errorf("pod %s/%s is being deleted", p.Namespace, p.Name)
			}
			live[p.Namespace+"/"+p.Name] = true
		}
		atts, err := attachments(ctx, d, "")
		if err != nil {
			return err
		}
		ifcs := map[string]bool{}
		for _, a := range atts {
			ifcs[a.Status.IfcName] = true
		}
		for i := range e.state.Members {
			m := &e.state.Members[i]
			if m.OVSRundir == "" {
				continue // the fabric and outside hosts
			}
			for _, p := range cniPorts(t, m) {
				if key := p.ExternalIDs[cni.ExternalIDPodNamespace] + "/" + p.ExternalIDs[cni.ExternalIDPodName]; !live[key] {
					return fmt.Errorf("%s: port %s of deleted pod %s is still on br0", m.Name, p.Name, key)
				}
			}
			for _, name := range strings.Fields(vsctl(t, m, "list-ports", "br0")) {
				if strings.HasPrefix(name, vnetfeature.InterfacePrefix) && !ifcs[name] {
					return fmt.Errorf("%s: port %s of a deleted attachment is still on br0", m.Name, name)
				}
			}
		}
		return nil
	})
}

// TestAgentRestartZeroLoss restarts the agent of one node under continuous
// ping and TCP traffic between pods on both nodes, and requires that not a
// packet nor a connection is lost; then it restarts that node's
// ovs-vswitchd and measures how long the flows take to come back. Its file
// sorts just before zz_down_test.go: the replacement agent stops when the
// test ends, and no later test should run without it.
func TestAgentRestartZeroLoss(t *testing.T) {
	e, ns := agentNamespace(t, "e2e-restart")
	pods := netPods(t, e, ns)
	// The pods are isolated both ways by a NetworkPolicy that admits each
	// other: the traffic crosses the policy tables' conjunctions, which the
	// restarted agent must take over without a gap.
	if _, err := e.client.NetworkingV1().NetworkPolicies(ns).Create(context.Background(), npPolicy(ns, "net", networkingv1.NetworkPolicySpec{
		PodSelector: npApp("net"),
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: ptr.To(npApp("net"))}}}},
		Egress:      []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{PodSelector: ptr.To(npApp("net"))}}}},
	}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a, _, other := pairs(t, pods)
	m, _ := e.state.Member(a.node)
	dst := other.ip(false)
	settled(t, e)
	eventually(t, 20*time.Second, "path warm", func(ctx context.Context) error {
		if n, out := ping(a.netns, dst, 1); n != 1 {
			return fmt.Errorf("%s", out)
		}
		_, _, err := httpGet(ctx, a.netns, dst, 8080)
		return err
	})

	// Continuous traffic: 500 pings 10 ms apart, and a new TCP connection
	// every 20 ms, from a pod on this node to a pod on the other.
	const pings = 500
	var pingReplies int
	var pingOut string
	pingDone := make(chan struct{})
	go func() {
		defer close(pingDone)
		out, _ := exec.Command("ip", "netns", "exec", a.netns, "ping", "-n", "-q", "-c", strconv.Itoa(pings), "-i", "0.01", "-W", "2", dst.String()).CombinedOutput()
		pingOut = string(out)
		if i := strings.Index(pingOut, "transmitted, "); i >= 0 {
			pingReplies, _ = strconv.Atoi(strings.Fields(pingOut[i+len("transmitted, "):])[0])
		}
	}()
	load := newBackground()
	var tcp tally
	load.loop(&tcp, 20*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if pod, _, err := httpGet(ctx, a.netns, dst, 8080); err != nil || pod != other.name {
			return fmt.Errorf("%v (pod %q)", err, pod)
		}
		return nil
	})

	time.Sleep(500 * time.Millisecond) // traffic before the restart, by design of the scenario
	start := time.Now()
	stopAgentProcess(t, e, a.node)
	startAgent(t, e, m)
	eventually(t, 60*time.Second, "restarted agent ready", func(ctx context.Context) error { return agentReady(ctx, m) })
	t.Logf("agent restart: stopped and ready again in %s", time.Since(start).Round(time.Millisecond))
	checkMetrics(t, m)
	<-pingDone
	load.end()
	if pingReplies != pings {
		t.Errorf("ping across the agent restart: %d of %d replies\n%s", pingReplies, pings, pingOut)
	}
	if tcp.fail.Load() != 0 || tcp.ok.Load() == 0 {
		t.Errorf("TCP across the agent restart: %s", &tcp)
	}
	t.Logf("across the agent restart: %d/%d pings, %d TCP connections, %d failed", pingReplies, pings, tcp.ok.Load(), tcp.fail.Load())

	t.Run("ovs-vswitchd-restart", func(t *testing.T) {
		restored := restartVswitchd(t, m)
		start := time.Now()
		// The new ovs-vswitchd's userspace tunnels know no next hop's MAC,
		// and drop a packet that finds none while they ask. The agent asks
		// the other node for its MAC once breth0 holds its flows again
		// (nodenet's tunnel warm-up), before any pod sends to it, so the
		// first ping after the restart is answered.
		mo, _ := e.state.Member(other.node)
		peer := memberIP(t, mo, false)
		eventually(t, 30*time.Second, "the new ovs-vswitchd knows tunnel neighbour "+peer.String(), func(ctx context.Context) error {
			out, err := appctl(m, "tnl/neigh/show")
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			if !strings.Contains(out, peer.String()+" ") {
				return fmt.Errorf("not yet:\n%s", out)
			}
			return nil
		})
		known := time.Since(start)
		if n, out := ping(a.netns, dst, 1); n != 1 {
			t.Errorf("the first ping across nodes after the ovs-vswitchd restart went unanswered:\n%s", out)
		}
		eventually(t, 60*time.Second, "pod traffic after the ovs-vswitchd restart", func(ctx context.Context) error {
			if n, out := ping(a.netns, dst, 1); n != 1 {
				return fmt.Errorf("%s", out)
			}
			_, _, err := httpGet(ctx, a.netns, dst, 8080)
			return err
		})
		t.Logf("ovs-vswitchd restart: flows back %s after it started, tunnel neighbour known %s and traffic %s after that",
			restored.Round(time.Millisecond), known.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	})
}

// restartVswitchd kills the node's ovs-vswitchd and starts it again with
// the same command line, and returns how long after the new one started the
// agent's flows were back on br0 (the version note in table 253).
func restartVswitchd(t *testing.T, m *testbed.Member) time.Duration {
	t.Helper()
	pid := ovsPID(m)
	if pid == 0 {
		t.Fatalf("cannot find ovs-vswitchd of %s (no pidfile, no process with its run directory)", m.Name)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	proc, _ := os.FindProcess(pid)
	if err := proc.Kill(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "ovs-vswitchd exits", func(ctx context.Context) error {
		// Its parent (the testbed) reaps it; a zombie counts as gone.
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err == nil && !zombie.Match(b) {
			return fmt.Errorf("still running")
		}
		return nil
	})
	cmd := exec.Command("ip", append([]string{"netns", "exec", m.Netns}, args...)...)
	cmd.Env = append(os.Environ(), "OVS_RUNDIR="+m.OVSRundir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The testbed does not know this process: it runs on for the tests
	// after this one, and is stopped before the testbed goes down.
	keepRunning(cmd, nil)
	started := time.Now()
	eventually(t, 60*time.Second, "flows back on br0", func(ctx context.Context) error {
		lines, err := tryDumpFlows(m, "br0")
		if err != nil {
			return err
		}
		for _, l := range lines {
			if strings.HasPrefix(l, "table=253,") {
				return nil
			}
		}
		return fmt.Errorf("no version note on br0 yet")
	})
	return time.Since(started)
}

// checkMetrics reads the agent's Prometheus metrics inside the node's
// namespace and checks the ones the agent promises.
func checkMetrics(t *testing.T, m *testbed.Member) {
	t.Helper()
	text, err := agentMetrics(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`nodeflow_sync_duration_seconds_count{bridge="br0",kind="startup"} 1`,
		`nodeflow_sync_duration_seconds_count{bridge="breth0",kind="startup"} 1`,
		`nodeflow_reconcile_errors_total`,
		`nodeflow_packet_ins_total`,
	} {
		if want == "nodeflow_reconcile_errors_total" || want == "nodeflow_packet_ins_total" {
			if !strings.Contains(text, "# HELP "+want) {
				t.Errorf("metrics lack %s", want)
			}
			continue
		}
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if !regexp.MustCompile(`nodeflow_flows\{bridge="br0"\} [1-9]`).MatchString(text) {
		t.Errorf("metrics: no non-zero nodeflow_flows for br0")
	}
}
