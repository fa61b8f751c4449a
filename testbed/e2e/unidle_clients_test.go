package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"nodeflow/testbed"
	"nodeflow/testbed/nsutil"
	"nodeflow/testbed/workload"
)

// unidleClient is one client of the idled Service: where it connects from,
// to which address, and how.
type unidleClient struct {
	name  string
	netns string
	udp   bool
	dst   netip.Addr
	port  int
	// crowd: one of many connections from the same pod, reported together.
	crowd bool
}

// crowdPerPod is how many more connections each client pod opens at once
// to the idled Service (100 in all from the two pods).
const crowdPerPod = 50

// unidleResult is what one client saw.
type unidleResult struct {
	took time.Duration
	pod  string
	// synRetrans is how many times the client's kernel sent the SYN
	// again before the connection was established (TCP_INFO).
	synRetrans int
	err        error
}

// TestUnidleClients idles a Deployment-backed Service with `nodeflow idle`,
// runs `nodeflow unidler`, and connects to it at once from everywhere a
// client can be: a pod on each node over IPv4 and IPv6, TCP and UDP, the
// nodes' own hosts, and the external host through a NodePort, an
// ExternalIP and a LoadBalancer ingress address, and 100 more connections
// from the two client pods. Every client's first attempt must be answered
// by the woken pod, and every TCP client's first SYN must be the one
// answered: the agents hold the first packets (a SYN, a datagram) and
// re-inject them into the pipeline of the bridge they entered. Then, with
// no unidler running, a held connection to a Service that is deleted is
// answered with a reset.
func TestUnidleClients(t *testing.T) {
	e, ns := agentNamespace(t, "e2e-unidle-clients")
	ctx := context.Background()
	clients := deployPods(t, e, ns, "client", 2)
	deployPods(t, e, ns, "sleepy", 2)
	eip, lbIP := netip.MustParseAddr("172.30.0.240"), netip.MustParseAddr("172.30.0.241") // 172.30.0.24x: this file's range
	svc := createService(t, e, ns, newService("sleepy", v1.ServiceSpec{
		Type:           v1.ServiceTypeLoadBalancer,
		Selector:       map[string]string{"app": "sleepy"},
		IPFamilyPolicy: ptrPolicy(v1.IPFamilyPolicyRequireDualStack),
		ExternalIPs:    []string{eip.String()},
		Ports: []v1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: v1.ProtocolTCP},
			{Name: "echo", Port: 53, TargetPort: intstr.FromInt32(5353), Protocol: v1.ProtocolUDP},
		},
	}))
	svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: lbIP.String()}}
	if _, err := e.client.CoreV1().Services(ns).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	vips := svcAddrs(t, svc)
	nodePort := int(svc.Spec.Ports[0].NodePort)

	n1, ok1 := e.state.Member("node1")
	n2, ok2 := e.state.Member("node2")
	ext, okExt := e.state.Member("ext1")
	if !ok1 || !ok2 || !okExt {
		t.Fatal("the topology lacks node1, node2 or ext1")
	}
	routeVia(t, ext, eip, netip.MustParseAddr(n1.Addresses[0]))
	routeVia(t, ext, lbIP, netip.MustParseAddr(n1.Addresses[0]))

	var all []unidleClient
	for i, c := range clients {
		v6 := i == 1
		all = append(all,
			unidleClient{name: fmt.Sprintf("pod on %s, TCP %s", c.node, family(v6)), netns: c.netns, dst: vips[i], port: 80},
			unidleClient{name: fmt.Sprintf("pod on %s, UDP %s", c.node, family(v6)), netns: c.netns, udp: true, dst: vips[i], port: 53},
		)
	}
	all = append(all,
		unidleClient{name: "node1's host, TCP IPv4", netns: n1.Netns, dst: vips[0], port: 80},
		unidleClient{name: "node2's host, TCP IPv6", netns: n2.Netns, dst: vips[1], port: 80},
		unidleClient{name: "ext1 -> NodePort on node1", netns: ext.Netns, dst: netip.MustParseAddr(n1.Addresses[0]), port: nodePort},
		unidleClient{name: "ext1 -> ExternalIP", netns: ext.Netns, dst: eip, port: 80},
		unidleClient{name: "ext1 -> LoadBalancer ingress", netns: ext.Netns, dst: lbIP, port: 80},
	)
	// Everything answers before idling.
	for _, c := range all {
		eventually(t, 30*time.Second, c.name+" answered by sleepy before idling", func(ctx context.Context) error {
			pod, _, err := firstAttempt(ctx, c, 2*time.Second)
			if err == nil && !strings.HasPrefix(pod, "sleepy-") {
				return fmt.Errorf("answered by %q", pod)
			}
			return err
		})
	}

	unidler := startUnidler(t, e, "unidler-clients")
	runNodeflow(t, e, "", "idle", "--kubeconfig", e.state.Kubeconfig, "-n", ns, "sleepy")
	waitCaught(t, e, []*testbed.Member{n1, n2}, vips[0])

	// And a crowd: crowdPerPod more connections from each client pod to
	// the IPv4 ClusterIP, each on its own socket.
	for _, c := range clients {
		for j := range crowdPerPod {
			all = append(all, unidleClient{name: fmt.Sprintf("pod on %s, TCP ipv4, crowd connection %d", c.node, j), netns: c.netns, dst: vips[0], port: 80, crowd: true})
		}
	}

	// All at once, each its first attempt.
	drops0 := map[string]map[string]float64{}
	for _, m := range []*testbed.Member{n1, n2} {
		drops0[m.Name] = unidleDrops(t, m)
	}
	readyAt := watchReadyFamilies(t, e, ns, "sleepy")
	results := make([]unidleResult, len(all))
	var wg sync.WaitGroup
	start := time.Now()
	for i, c := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := time.Now()
			pod, retrans, err := firstAttempt(ctx, c, 30*time.Second)
			results[i] = unidleResult{took: time.Since(s), pod: pod, synRetrans: retrans, err: err}
		}()
	}
	wg.Wait()
	for _, m := range []*testbed.Member{n1, n2} {
		t.Logf("%s: %s", m.Name, unidleMetrics(t, m))
		// A packet-in of a port idled or released a moment before is
		// never dropped as unknown, and no held packet is lost: the one
		// drop allowed is a retransmission of a packet already held.
		for cause, n := range unidleDrops(t, m) {
			if d := n - drops0[m.Name][cause]; d != 0 && cause != "retransmit" {
				t.Errorf("%s dropped %v packets as %s", m.Name, d, cause)
			}
		}
	}
	t.Logf("all %d clients done %s after the first connect", len(all), time.Since(start).Round(time.Millisecond))
	// The port stays idled until every family has endpoints, so the held
	// packets wait for the later of the two publications, and then for
	// the agents to program the flows and re-inject them. Endpoints
	// published so late that this could not be done before a TCP
	// client's 1 s SYN timer fired excuse the client's retransmission
	// (its held SYN is still re-injected: no drop but a retransmission's
	// is allowed above); nothing else does. How long the re-injection
	// takes is measured by BenchmarkUnidle, not here.
	var published time.Duration
	for v6, at := range readyAt() {
		published = max(published, at.Sub(start))
		t.Logf("%s endpoints ready %s after the first connect", family(v6), at.Sub(start).Round(time.Millisecond))
	}
	excused := published > time.Second-reinjectAllowance
	var crowd []time.Duration
	for i, c := range all {
		r := results[i]
		switch {
		case r.err != nil:
			t.Errorf("%s: first attempt failed after %s: %v", c.name, r.took.Round(time.Millisecond), r.err)
		case !strings.HasPrefix(r.pod, "sleepy-"):
			t.Errorf("%s: answered by %q, want a sleepy pod", c.name, r.pod)
		case r.synRetrans != 0 && excused:
			t.Logf("%s: answered after %s, the client's SYN sent %d more times: the endpoints were published %s after the first connect", c.name, r.took.Round(time.Millisecond), r.synRetrans, published.Round(time.Millisecond))
		case r.synRetrans != 0:
			// The held SYN is the one to be answered.
			t.Errorf("%s: answered after %s, yet the client sent its SYN %d more times: its held first SYN was not the one answered", c.name, r.took.Round(time.Millisecond), r.synRetrans)
		case c.crowd:
			crowd = append(crowd, r.took)
		default:
			t.Logf("%s: first attempt answered after %s", c.name, r.took.Round(time.Millisecond))
		}
	}
	if len(crowd) > 0 {
		slices.Sort(crowd)
		t.Logf("crowd: %d of %d connections answered on their first SYN, in %s to %s", len(crowd), crowdPerPod*len(clients),
			crowd[0].Round(time.Millisecond), crowd[len(crowd)-1].Round(time.Millisecond))
	}

	// One NeedPods per port per wait cycle on each node that caught
	// packets, and one for each port that was asked.
	evs, err := e.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=NeedPods,involvedObject.name=sleepy"})
	if err != nil {
		t.Fatal(err)
	}
	perPort := map[string]int{}
	for _, ev := range evs.Items {
		perPort[ev.Message] += int(max(ev.Count, 1))
	}
	for _, port := range []string{"http", "echo"} {
		msg := fmt.Sprintf("The service-port %s/sleepy:%s needs pods.", ns, port)
		if n := perPort[msg]; n < 1 || n > 2 {
			t.Errorf("%d NeedPods events %q, want one per node that caught a packet (1 or 2): %v", n, msg, perPort)
		}
	}
	eventually(t, 60*time.Second, "sleepy woken up", func(ctx context.Context) error {
		n, _, err := scalableStateErr(e, ns, "Deployment", "sleepy")
		if err != nil || n != 2 {
			return fmt.Errorf("%d replicas, %v", n, err)
		}
		s, err := e.client.CoreV1().Services(ns).Get(ctx, "sleepy", metav1.GetOptions{})
		if err != nil || len(s.Annotations) != 0 {
			return fmt.Errorf("service annotations %v, %v", s.Annotations, err)
		}
		return nil
	})
	waitReadyEndpoints(t, e, ns, "sleepy", 4) // two pods, each in the IPv4 and the IPv6 slice
	unidler.stop(t)

	// A held connection whose Service is deleted is reset, not left to
	// time out.
	runNodeflow(t, e, "", "idle", "--kubeconfig", e.state.Kubeconfig, "-n", ns, "sleepy")
	waitCaught(t, e, []*testbed.Member{n1, n2}, vips[0])
	c := all[0]
	m, _ := e.state.Member(clients[0].node)
	held := metricValue(t, m, "nodeflow_unidle_held_packets")
	done := make(chan unidleResult, 1)
	go func() {
		s := time.Now()
		pod, _, err := firstAttempt(ctx, c, 30*time.Second)
		done <- unidleResult{took: time.Since(s), pod: pod, err: err}
	}()
	eventually(t, 10*time.Second, "the connection held on "+m.Name, func(context.Context) error {
		if v := metricValue(t, m, "nodeflow_unidle_held_packets"); v <= held {
			return fmt.Errorf("%v packets held", v)
		}
		return nil
	})
	deleted := time.Now()
	if err := e.client.CoreV1().Services(ns).Delete(ctx, "sleepy", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if !errors.Is(r.err, syscall.ECONNREFUSED) {
			t.Errorf("held connection to a deleted Service: %q, %v; want connection refused", r.pod, r.err)
		} else {
			t.Logf("held connection refused %s after the Service was deleted", time.Since(deleted).Round(time.Millisecond))
		}
	case <-time.After(20 * time.Second):
		t.Error("held connection to a deleted Service not answered within 20 s")
	}
}

// waitCaught waits until every node catches the idled port's new
// connections (its priority-195 flows send them to the controller).
func waitCaught(t testing.TB, e *env, nodes []*testbed.Member, vip netip.Addr) {
	t.Helper()
	for _, m := range nodes {
		eventually(t, 60*time.Second, "the idled port caught on "+m.Name, func(context.Context) error {
			lines, err := tryDumpFlows(m, "br0")
			if err != nil {
				return err
			}
			for _, l := range lines {
				if strings.Contains(l, "priority=195") && strings.Contains(l, "nw_dst="+vip.String()+",") && strings.Contains(l, "controller(") {
					return nil
				}
			}
			return fmt.Errorf("no priority-195 unidle flow for %s yet", vip)
		})
	}
}

// firstAttempt makes one request as c: an HTTP GET on one TCP connection,
// or one UDP datagram, waiting up to timeout for the answer (the kernel may
// retransmit a SYN meanwhile; the UDP datagram is sent once). It returns
// the answering pod and, for TCP, how many times the SYN was sent again.
func firstAttempt(ctx context.Context, c unidleClient, timeout time.Duration) (string, int, error) {
	addr := net.JoinHostPort(c.dst.String(), strconv.Itoa(c.port))
	if c.udp {
		conn, err := nsutil.Dial(ctx, c.netns, "udp", addr, timeout)
		if err != nil {
			return "", 0, err
		}
		defer conn.Close()
		if _, err := conn.Write([]byte("hello")); err != nil {
			return "", 0, err
		}
		_ = conn.SetReadDeadline(time.Now().Add(timeout))
		buf := make([]byte, 2048)
		n, err := conn.Read(buf)
		if err != nil {
			return "", 0, err
		}
		pod, _, _, err := workload.ParseReply(string(buf[:n]))
		return pod, 0, err
	}
	retrans := 0
	tr := &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
		conn, err := nsutil.Dial(ctx, c.netns, network, a, timeout)
		if err != nil {
			return nil, err
		}
		if retrans, err = synRetransmits(conn); err != nil {
			conn.Close()
			return nil, err
		}
		return conn, nil
	}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: timeout + 5*time.Second}).Get("http://" + addr + "/")
	if err != nil {
		return "", retrans, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", retrans, err
	}
	pod, _, _, err := workload.ParseReply(string(b))
	return pod, retrans, err
}

// synRetransmits reads, on a TCP connection just established, how many
// segments its kernel retransmitted: the SYN's retransmissions.
func synRetransmits(conn net.Conn) (int, error) {
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return 0, fmt.Errorf("not a TCP connection: %T", conn)
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var info *unix.TCPInfo
	var serr error
	if err := raw.Control(func(fd uintptr) { info, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, fmt.Errorf("TCP_INFO: %w", serr)
	}
	return int(info.Total_retrans), nil
}

// reinjectAllowance is the time TestUnidleClients gives the agents, once
// the endpoints are published, to program the flows and re-inject the
// held packets before a client's retransmission counts against them: well
// above the latency of an endpoint change on the slowest machine measured
// (docs/benchmarks.md), so that only a lost or forgotten held packet fails.
const reinjectAllowance = 300 * time.Millisecond

// unidleDrops reads the agent's counts of dropped packet-ins, by cause.
func unidleDrops(t testing.TB, m *testbed.Member) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for labels, v := range scrapeAgent(t, m).series("nodeflow_unidle_dropped_packets_total", "cause=") {
		_, cause, _ := strings.Cut(labels, `cause="`)
		cause, _, _ = strings.Cut(cause, `"`)
		out[cause] = v
	}
	if _, ok := out["not-idled"]; !ok {
		t.Fatalf("%s: no nodeflow_unidle_dropped_packets_total{cause=\"not-idled\"} in the agent's metrics", m.Name)
	}
	return out
}

// unidleMetrics returns the node agent's unidle metrics in one line.
func unidleMetrics(t testing.TB, m *testbed.Member) string {
	t.Helper()
	text, err := agentMetrics(m)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "nodeflow_unidle_") && !strings.Contains(l, "_bucket") {
			out = append(out, strings.TrimPrefix(l, "nodeflow_unidle_"))
		}
	}
	return strings.Join(out, "; ")
}

// watchReadyFamilies watches the EndpointSlices of a Service and returns a
// function that reports, per family (true for IPv6), when a ready endpoint
// first appeared after the call.
func watchReadyFamilies(t *testing.T, e *env, ns, svc string) func() map[bool]time.Time {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := e.client.DiscoveryV1().EndpointSlices(ns).Watch(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[bool]time.Time{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			es, ok := ev.Object.(*discoveryv1.EndpointSlice)
			if !ok {
				continue
			}
			for _, ep := range es.Endpoints {
				if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
					v6 := es.AddressType == discoveryv1.AddressTypeIPv6
					mu.Lock()
					if _, ok := seen[v6]; !ok {
						seen[v6] = time.Now()
					}
					mu.Unlock()
					break
				}
			}
		}
	}()
	t.Cleanup(func() { w.Stop(); cancel(); <-done })
	return func() map[bool]time.Time {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(seen)
	}
}
