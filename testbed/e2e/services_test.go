package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"nodeflow/testbed"
	"nodeflow/testbed/nsutil"
	"nodeflow/testbed/workload"
)

// deployPods starts a Deployment of replicas test-server pods labelled
// app=name, spread over both nodes, and returns them once each is running
// with both addresses and its br0 port.
func deployPods(t testing.TB, e *env, ns, name string, replicas int) []netPod {
	t.Helper()
	dep := spreadDeployment(ns, name, replicas, v1.ContainerPort{ContainerPort: 8080}, v1.ContainerPort{ContainerPort: 5353, Protocol: v1.ProtocolUDP})
	if _, err := e.client.AppsV1().Deployments(ns).Create(context.Background(), dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return runningPods(t, e, ns, name, replicas)
}

// service is a Service named name with spec, to create in a namespace.
func newService(name string, spec v1.ServiceSpec) *v1.Service {
	return &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
}

// spreadDeployment is a Deployment of replicas test-server pods labelled
// app=name, serving ports, spread over both nodes.
func spreadDeployment(ns, name string, replicas int, ports ...v1.ContainerPort) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: v1.PodSpec{
					TopologySpreadConstraints: []v1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: v1.DoNotSchedule,
						LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
					}},
					TerminationGracePeriodSeconds: ptr.To(int64(2)),
					Containers:                    []v1.Container{{Name: "web", Image: "testbed/web", Ports: ports}},
				},
			},
		},
	}
}

// svcAddrs returns a Service's ClusterIP of each family (IPv4 first).
func svcAddrs(t *testing.T, s *v1.Service) []netip.Addr {
	t.Helper()
	var out []netip.Addr
	for _, c := range s.Spec.ClusterIPs {
		a, err := netip.ParseAddr(c)
		if err != nil {
			t.Fatalf("service %s: cluster IP %q: %v", s.Name, c, err)
		}
		out = append(out, a)
	}
	if len(out) == 2 && out[0].Is6() {
		out[0], out[1] = out[1], out[0]
	}
	return out
}

// ask asks dst:port from netns once, over TCP (HTTP) or UDP (echo), and
// returns the answering pod and the client address it saw.
func ask(ctx context.Context, netns string, udp bool, dst netip.Addr, port int) (pod, client string, err error) {
	if udp {
		return udpEcho(ctx, netns, dst, port)
	}
	return httpGet(ctx, netns, dst, port)
}

// reach asks a service address from netns over TCP (HTTP) or UDP (echo)
// until every backend in want has answered once, checking each answer's
// pod and, when wantClient is valid, the client address the server saw.
func reach(t *testing.T, what, netns string, udp bool, dst netip.Addr, port int, want map[string]bool, wantClient netip.Addr) {
	t.Helper()
	each := map[string]netip.Addr{}
	for pod, ok := range want {
		if ok {
			each[pod] = wantClient
		}
	}
	reachEach(t, what, netns, udp, dst, port, each)
}

// reachEach is reach with a client address to check per backend (not
// checked where invalid).
func reachEach(t *testing.T, what, netns string, udp bool, dst netip.Addr, port int, want map[string]netip.Addr) {
	t.Helper()
	seen := map[string]string{}
	eventually(t, 30*time.Second, what, func(ctx context.Context) error {
		pod, client, err := ask(ctx, netns, udp, dst, port)
		if err != nil {
			return err
		}
		wc, ok := want[pod]
		if !ok {
			return fmt.Errorf("answer from %q, not a backend (%v)", pod, slices.Sorted(maps.Keys(want)))
		}
		if wc.IsValid() && hostOf(client) != wc.String() {
			t.Errorf("%s: backend %s saw client %s, want %s", what, pod, hostOf(client), wc)
		}
		seen[pod] = hostOf(client)
		if len(seen) < len(want) {
			return fmt.Errorf("%d of %d backends answered so far: %v", len(seen), len(want), seen)
		}
		return nil
	})
}

// TestServices runs the agent's service proxy with real traffic: ClusterIP
// over TCP and UDP from a pod on each node to a 3-replica Deployment (every
// backend answers, the client address is kept), both IP families; NodePort
// from the external host; a node's host to a ClusterIP (through breth0);
// and an immediate TCP reset from a service without endpoints.
func TestServices(t *testing.T) {
	e, ns := agentNamespace(t, "e2e-svc")
	ctx := context.Background()
	web := deployPods(t, e, ns, "web", 3)
	clients := deployPods(t, e, ns, "client", 2)
	if clients[0].node == clients[1].node {
		t.Fatalf("client pods not spread: %+v", clients)
	}
	backends := map[string]bool{}
	for _, p := range web {
		backends[p.name] = true
	}

	svc, err := e.client.CoreV1().Services(ns).Create(ctx, newService("web", v1.ServiceSpec{
		Type:           v1.ServiceTypeNodePort,
		Selector:       map[string]string{"app": "web"},
		IPFamilyPolicy: ptr.To(v1.IPFamilyPolicyPreferDualStack),
		Ports:          slices.Clone(webPorts),
	}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vips := svcAddrs(t, svc)
	var nodePortTCP, nodePortUDP int
	for _, p := range svc.Spec.Ports {
		if p.Protocol == v1.ProtocolUDP {
			nodePortUDP = int(p.NodePort)
		} else {
			nodePortTCP = int(p.NodePort)
		}
	}
	t.Logf("service web: %v, node ports tcp %d udp %d", vips, nodePortTCP, nodePortUDP)

	t.Run("clusterip", func(t *testing.T) {
		for _, c := range clients {
			for _, vip := range vips {
				for _, udp := range []bool{false, true} {
					proto, port := "tcp", 80
					if udp {
						proto, port = "udp", 53
					}
					name := fmt.Sprintf("%s/%s/%s", c.node, proto, family(vip.Is6()))
					t.Run(name, func(t *testing.T) {
						reach(t, "pod "+c.name+" -> "+vip.String(), c.netns, udp, vip, port, backends, c.ip(vip.Is6()))
					})
				}
			}
		}
	})

	t.Run("nodeport-from-external", func(t *testing.T) {
		ext, ok := e.state.Member("ext1")
		if !ok {
			t.Skip("no ext1 in the topology")
		}
		for _, nodeName := range []string{clients[0].node, clients[1].node} {
			m, _ := e.state.Member(nodeName)
			nodeIP := netip.MustParseAddr(m.Addresses[0])
			for _, udp := range []bool{false, true} {
				proto, port := "tcp", nodePortTCP
				if udp {
					proto, port = "udp", nodePortUDP
				}
				t.Run(nodeName+"/"+proto, func(t *testing.T) {
					reach(t, "ext1 -> "+nodeIP.String()+":"+strconv.Itoa(port), ext.Netns, udp, nodeIP, port, backends, netip.Addr{})
				})
			}
		}
	})

	t.Run("host-to-clusterip", func(t *testing.T) {
		for _, nodeName := range []string{clients[0].node, clients[1].node} {
			m, _ := e.state.Member(nodeName)
			for _, vip := range vips {
				for _, udp := range []bool{false, true} {
					proto, port := "tcp", 80
					if udp {
						proto, port = "udp", 53
					}
					t.Run(nodeName+"/"+proto+"/"+family(vip.Is6()), func(t *testing.T) {
						reach(t, "host "+nodeName+" -> "+vip.String(), m.Netns, udp, vip, port, backends, netip.Addr{})
					})
				}
			}
			// The seed's host-to-service flow on breth0 carried them.
			t.Run(nodeName+"/breth0-counts", func(t *testing.T) {
				hits := 0
				for _, l := range dumpFlowStats(t, m, "breth0") {
					if strings.Contains(l, "in_port=LOCAL") && strings.Contains(l, "nw_dst=10.96.0.0/16") && !strings.Contains(l, "n_packets=0,") {
						hits++
					}
				}
				if hits == 0 {
					t.Errorf("breth0 on %s: no host-to-service flow (in_port=LOCAL, nw_dst=10.96.0.0/16) with packets", nodeName)
				}
			})
		}
	})

	t.Run("no-endpoints-rejects", func(t *testing.T) {
		empty, err := e.client.CoreV1().Services(ns).Create(ctx, newService("empty", v1.ServiceSpec{
			Selector:       map[string]string{"app": "nothing"},
			IPFamilyPolicy: ptr.To(v1.IPFamilyPolicyPreferDualStack),
			Ports:          slices.Clone(webPorts),
		}), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		hostNS := func(p netPod) string { m, _ := e.state.Member(p.node); return m.Netns }
		for _, vip := range svcAddrs(t, empty) {
			for _, src := range []struct{ name, netns string }{
				{"pod", clients[0].netns}, {"host", hostNS(clients[1])},
			} {
				addr := net.JoinHostPort(vip.String(), "80")
				t.Run(src.name+"/tcp/"+family(vip.Is6()), func(t *testing.T) {
					// The reject flow appears within a sync; from then on
					// every connection is refused at once.
					eventually(t, 20*time.Second, "connection refused by "+addr, func(ctx context.Context) error {
						conn, err := nsutil.Dial(ctx, src.netns, "tcp", addr, 2*time.Second)
						if err == nil {
							conn.Close()
							return fmt.Errorf("connected to a service without endpoints")
						}
						if !errors.Is(err, syscall.ECONNREFUSED) {
							return err
						}
						return nil
					})
					start := time.Now()
					_, err := nsutil.Dial(ctx, src.netns, "tcp", addr, 2*time.Second)
					if !errors.Is(err, syscall.ECONNREFUSED) {
						t.Fatalf("dial %s: %v, want connection refused", addr, err)
					}
					if d := time.Since(start); d > time.Second {
						t.Errorf("refusal took %s, want it immediate", d)
					}
				})
			}
			// UDP: an ICMP port unreachable, which a connected socket
			// reports as connection refused.
			t.Run("pod/udp/"+family(vip.Is6()), func(t *testing.T) {
				addr := net.JoinHostPort(vip.String(), "53")
				eventually(t, 20*time.Second, "udp refused by "+addr, func(ctx context.Context) error {
					conn, err := nsutil.Dial(ctx, clients[0].netns, "udp", addr, 2*time.Second)
					if err != nil {
						return err
					}
					defer conn.Close()
					if _, err := conn.Write([]byte("hello")); err != nil {
						return err
					}
					_ = conn.SetReadDeadline(time.Now().Add(time.Second))
					_, err = conn.Read(make([]byte, 100))
					if !errors.Is(err, syscall.ECONNREFUSED) {
						return fmt.Errorf("read: %v, want connection refused", err)
					}
					return nil
				})
			})
		}
		// Answering the host must not have upset either switch (a reset
		// sent back through breth0's NAT conntrack aborts Open vSwitch
		// 3.1).
		for _, p := range clients {
			m, _ := e.state.Member(p.node)
			if b, err := os.ReadFile(m.OVSRundir + "/ovs-vswitchd.log"); err != nil || strings.Contains(string(b), "|EMER|") {
				t.Errorf("ovs-vswitchd on %s: log unreadable (%v) or reports an abort", p.node, err)
			}
			dumpFlowStats(t, m, "breth0")
		}
		m, _ := e.state.Member(clients[0].node)
		if n := metricValue(t, m, "nodeflow_service_rejects_total"); n < 4 {
			t.Errorf("nodeflow_service_rejects_total on %s: %v, want the agent to have answered at least 4", m.Name, n)
		}
	})

	// Last, as it replaces a backend: a UDP client's flow moves to a live
	// endpoint as soon as its endpoint leaves (the stale conntrack entry
	// is flushed), although it keeps sending from the same port.
	t.Run("udp-switches-endpoint", func(t *testing.T) {
		c := clients[0]
		vip := vips[0]
		conn, err := nsutil.Dial(ctx, c.netns, "udp", net.JoinHostPort(vip.String(), "53"), 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ask := func() (string, error) {
			if _, err := conn.Write([]byte("hello")); err != nil {
				return "", err
			}
			_ = conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			buf := make([]byte, 2048)
			n, err := conn.Read(buf)
			if err != nil {
				return "", err
			}
			pod, _, _, err := workload.ParseReply(string(buf[:n]))
			return pod, err
		}
		var first string
		eventually(t, 10*time.Second, "first udp answer", func(ctx context.Context) error {
			first, err = ask()
			return err
		})
		// The same source port keeps the same endpoint.
		for range 3 {
			if pod, err := ask(); err != nil || pod != first {
				t.Fatalf("answer from %q (%v), want %s again", pod, err, first)
			}
		}
		if err := e.client.CoreV1().Pods(ns).Delete(ctx, first, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 15*time.Second, "udp answer from another endpoint", func(ctx context.Context) error {
			pod, err := ask()
			if err != nil {
				return err
			}
			if pod == first {
				return fmt.Errorf("still answered by %s", first)
			}
			return nil
		})
		m, _ := e.state.Member(c.node)
		if n := metricValue(t, m, "nodeflow_service_stale_flushes_total"); n < 1 {
			t.Errorf("nodeflow_service_stale_flushes_total on %s: %v, want at least 1", m.Name, n)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		for _, nodeName := range []string{clients[0].node, clients[1].node} {
			m, _ := e.state.Member(nodeName)
			for _, name := range []string{
				"kubeproxy_sync_proxy_rules_duration_seconds_count",
				"kubeproxy_network_programming_duration_seconds_count",
				"kubeproxy_sync_proxy_rules_endpoint_changes_total",
				"kubeproxy_sync_proxy_rules_service_changes_total",
				"nodeflow_service_ports",
			} {
				if v := metricValue(t, m, name); v <= 0 {
					t.Errorf("%s on %s: %v, want > 0", name, nodeName, v)
				}
			}
			if v := metricValue(t, m, "nodeflow_service_build_errors_total"); v != 0 {
				t.Errorf("nodeflow_service_build_errors_total on %s: %v", nodeName, v)
			}
		}
	})
}

// dumpFlowStats returns bridge's flows with their packet counts.
func dumpFlowStats(t *testing.T, m *testbed.Member, bridge string) []string {
	t.Helper()
	cmd := exec.Command("ovs-ofctl", "-O", "OpenFlow15", "dump-flows", bridge)
	cmd.Env = append(os.Environ(), "OVS_RUNDIR="+m.OVSRundir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("dump-flows %s on %s: %v", bridge, m.Name, err)
	}
	return strings.Split(string(out), "\n")
}

// metricValue reads one unlabelled metric from the agent on m.
func metricValue(t *testing.T, m *testbed.Member, name string) float64 {
	t.Helper()
	text, err := agentMetrics(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metric %s: %q: %v", name, v, err)
			}
			return f
		}
	}
	t.Fatalf("agent on %s has no metric %s", m.Name, name)
	return 0
}
