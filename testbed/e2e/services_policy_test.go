package e2e

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"nodeflow/host/cni"
	"nodeflow/testbed"
	"nodeflow/testbed/nsutil"
)

// webPorts are the test server's ports as a Service exposes them.
var webPorts = []v1.ServicePort{
	{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: v1.ProtocolTCP},
	{Name: "echo", Port: 53, TargetPort: intstr.FromInt32(5353), Protocol: v1.ProtocolUDP},
}

// createService creates svc in ns and, when ingress is given, sets it as
// the LoadBalancer's status; it returns the Service as the API server
// completed it (ClusterIPs, node ports).
func createService(t testing.TB, e *env, ns string, svc *v1.Service, ingress ...netip.Addr) *v1.Service {
	t.Helper()
	ctx := context.Background()
	out, err := e.client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service %s: %v", svc.Name, err)
	}
	if len(ingress) > 0 {
		for _, a := range ingress {
			out.Status.LoadBalancer.Ingress = append(out.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: a.String()})
		}
		if out, err = e.client.CoreV1().Services(ns).UpdateStatus(ctx, out, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("service %s: set ingress: %v", svc.Name, err)
		}
	}
	return out
}

// nodePortOf returns the node port of svc's port of protocol proto.
func nodePortOf(t *testing.T, svc *v1.Service, proto v1.Protocol) int {
	t.Helper()
	for _, p := range svc.Spec.Ports {
		if p.Protocol == proto && p.NodePort != 0 {
			return int(p.NodePort)
		}
	}
	t.Fatalf("service %s has no %s node port", svc.Name, proto)
	return 0
}

// member returns the testbed member name or fails (skips for ext1, which
// a topology may lack).
func member(t testing.TB, e *env, name string) *testbed.Member {
	t.Helper()
	m, ok := e.state.Member(name)
	if !ok {
		if name == "ext1" {
			t.Skip("no ext1 in the topology")
		}
		t.Fatalf("no member %s in the testbed", name)
	}
	return m
}

// addr returns member m's address of one family.
func addr(t *testing.T, m *testbed.Member, v6 bool) netip.Addr {
	t.Helper()
	for _, s := range m.Addresses {
		if a, err := netip.ParseAddr(s); err == nil && a.Is6() == v6 {
			return a
		}
	}
	t.Fatalf("member %s has no %s address (%v)", m.Name, family(v6), m.Addresses)
	return netip.Addr{}
}

// routeVia6 is routeVia for an IPv6 destination (a /128).
func routeVia6(t *testing.T, m *testbed.Member, dst, gw netip.Addr) {
	t.Helper()
	route := []string{"-n", m.Netns, "-6", "route", "add", dst.String() + "/128", "via", gw.String()}
	if out, err := exec.Command("ip", route...).CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v\n%s", route, err, out)
	}
	t.Cleanup(func() {
		del := []string{"-n", m.Netns, "-6", "route", "del", dst.String() + "/128", "via", gw.String()}
		if out, err := exec.Command("ip", del...).CombinedOutput(); err != nil {
			t.Errorf("ip %v: %v\n%s", del, err, out)
		}
	})
}

// dropped checks that a TCP connection to dst:port from netns is neither
// accepted nor refused, several times: the packets are dropped, as
// kube-proxy drops traffic a Local policy leaves without endpoints.
func dropped(t *testing.T, what, netns string, dst netip.Addr, port int) {
	t.Helper()
	a := net.JoinHostPort(dst.String(), strconv.Itoa(port))
	for i := range 3 {
		c, err := nsutil.Dial(context.Background(), netns, "tcp", a, 1500*time.Millisecond)
		if err == nil {
			pod := ""
			if b, rerr := askOnce(c); rerr == nil {
				pod = b
			}
			c.Close()
			t.Fatalf("%s: attempt %d connected to %s (answered by %q), want it dropped", what, i, a, pod)
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("%s: attempt %d: %v, want a timeout (dropped, not rejected)", what, i, err)
		}
	}
}

// askOnce sends one HTTP request on c and returns the answering pod.
func askOnce(c net.Conn) (string, error) {
	k := &keepConn{c: c, r: bufio.NewReader(c)}
	pod, _, err := k.ask()
	return pod, err
}

// keepConn is one long-lived HTTP/1.1 connection to the test server, which
// keeps it open and answers every request on it.
type keepConn struct {
	c   net.Conn
	r   *bufio.Reader
	pod string // the backend that answered first
}

// ask sends one request on the connection and returns the answer's pod and
// client.
func (k *keepConn) ask() (pod, client string, err error) {
	_ = k.c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(k.c, "GET / HTTP/1.1\r\nHost: svc\r\n\r\n"); err != nil {
		return "", "", err
	}
	resp, err := http.ReadResponse(k.r, nil)
	if err != nil {
		return "", "", err
	}
	return readReply(resp)
}

// healthCheck asks a health-check node port from netns and returns the
// status code and decoded body.
func healthCheck(ctx context.Context, netns string, dst netip.Addr, port int) (int, hcAnswer, error) {
	tr := &http.Transport{DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
		return nsutil.Dial(ctx, netns, network, a, 2*time.Second)
	}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 3 * time.Second}).Get("http://" + net.JoinHostPort(dst.String(), strconv.Itoa(port)) + "/healthz")
	if err != nil {
		return 0, hcAnswer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, hcAnswer{}, err
	}
	var h hcAnswer
	if err := json.Unmarshal(b, &h); err != nil {
		return resp.StatusCode, h, fmt.Errorf("health check body %q: %w", b, err)
	}
	h.raw = string(b)
	return resp.StatusCode, h, nil
}

// hcAnswer is kube-proxy's health-check body.
type hcAnswer struct {
	Service struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"service"`
	LocalEndpoints      int  `json:"localEndpoints"`
	ServiceProxyHealthy bool `json:"serviceProxyHealthy"`
	raw                 string
}

// byNode groups pod names by node.
func byNode(pods []netPod) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, p := range pods {
		if out[p.node] == nil {
			out[p.node] = map[string]bool{}
		}
		out[p.node][p.name] = true
	}
	return out
}

func names(pods []netPod) map[string]bool {
	out := map[string]bool{}
	for _, p := range pods {
		out[p.name] = true
	}
	return out
}

// TestServicesPolicy covers the traffic policies with real traffic.
//
// externalTrafficPolicy=Local, from the external host: a node's NodePort
// and a LoadBalancer ingress IP routed to it answer only from that node's
// endpoints, and the server sees the external host's own address; a node
// without a local endpoint drops the traffic. Inside the cluster, pods and
// hosts still reach the ClusterIP on every endpoint, and a pod reaching an
// external VIP (its node's NodePort, an ingress IP) is served by every
// endpoint too, as kube-proxy short-circuits it. Each node answers the
// Service's healthCheckNodePort like kube-proxy: 200 with local endpoints,
// 503 without, and a JSON body naming the Service and the count.
//
// internalTrafficPolicy=Local: a pod reaches only the endpoints on its own
// node, and gets no service (dropped) on a node without one.
func TestServicesPolicy(t *testing.T) {
	e, ns := agentNamespace(t, "e2e-svc-policy")
	web := deployPods(t, e, ns, "web", 3)
	solo := deployPods(t, e, ns, "solo", 1)[0]
	clients := deployPods(t, e, ns, "client", 2)
	if clients[0].node == clients[1].node {
		t.Fatalf("client pods not spread: %+v", clients)
	}
	local := byNode(web)
	all := names(web)
	if len(local) != 2 {
		t.Fatalf("web pods not on both nodes: %v", local)
	}
	otherNode := clients[0].node
	if otherNode == solo.node {
		otherNode = clients[1].node
	}
	ext := member(t, e, "ext1")
	extIP := addr(t, ext, false)
	t.Logf("web pods by node %v; solo on %s", local, solo.node)

	lbIP := netip.MustParseAddr("172.30.0.210")
	soloIngress := netip.MustParseAddr("172.30.0.211")
	etp := createService(t, e, ns, newService("web-local", v1.ServiceSpec{
		Type: v1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: v1.ServiceExternalTrafficPolicyLocal,
		Selector: map[string]string{"app": "web"}, Ports: webPorts,
	}), lbIP)
	soloLB := createService(t, e, ns, newService("solo-local", v1.ServiceSpec{
		Type: v1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: v1.ServiceExternalTrafficPolicyLocal,
		Selector: map[string]string{"app": "solo"}, Ports: webPorts,
	}), soloIngress)
	if etp.Spec.HealthCheckNodePort == 0 || soloLB.Spec.HealthCheckNodePort == 0 {
		t.Fatalf("no healthCheckNodePort allocated: %d, %d", etp.Spec.HealthCheckNodePort, soloLB.Spec.HealthCheckNodePort)
	}

	t.Run("etp-local/nodeport-from-external", func(t *testing.T) {
		for node, want := range local {
			nodeIP := addr(t, member(t, e, node), false)
			for _, udp := range []bool{false, true} {
				proto, port := "tcp", nodePortOf(t, etp, v1.ProtocolTCP)
				if udp {
					proto, port = "udp", nodePortOf(t, etp, v1.ProtocolUDP)
				}
				t.Run(node+"/"+proto, func(t *testing.T) {
					reach(t, "ext1 -> "+nodeIP.String()+":"+strconv.Itoa(port)+" (local endpoints only, client kept)",
						ext.Netns, udp, nodeIP, port, want, extIP)
				})
			}
		}
	})

	t.Run("etp-local/ingress-from-external", func(t *testing.T) {
		for node, want := range local {
			t.Run(node, func(t *testing.T) {
				routeVia(t, ext, lbIP, addr(t, member(t, e, node), false))
				reach(t, "ext1 -> ingress "+lbIP.String()+" via "+node, ext.Netns, false, lbIP, 80, want, extIP)
			})
		}
	})

	t.Run("etp-local/no-local-endpoint-drops", func(t *testing.T) {
		port := nodePortOf(t, soloLB, v1.ProtocolTCP)
		withIP := addr(t, member(t, e, solo.node), false)
		reach(t, "ext1 -> "+solo.node+" (has the endpoint)", ext.Netns, false, withIP, port, map[string]bool{solo.name: true}, extIP)
		dropped(t, "ext1 -> "+otherNode+" (no local endpoint)", ext.Netns, addr(t, member(t, e, otherNode), false), port)
	})

	t.Run("etp-local/cluster-traffic-uses-every-endpoint", func(t *testing.T) {
		for _, vip := range svcAddrs(t, etp) {
			for _, c := range clients {
				t.Run("pod-"+c.node+"/"+family(vip.Is6()), func(t *testing.T) {
					reach(t, "pod "+c.name+" -> "+vip.String(), c.netns, false, vip, 80, all, c.ip(vip.Is6()))
				})
				t.Run("host-"+c.node+"/"+family(vip.Is6()), func(t *testing.T) {
					reach(t, "host "+c.node+" -> "+vip.String(), member(t, e, c.node).Netns, false, vip, 80, all, netip.Addr{})
				})
			}
		}
		soloVIP := svcAddrs(t, soloLB)[0]
		for _, c := range clients {
			reach(t, "pod on "+c.node+" -> solo ClusterIP", c.netns, false, soloVIP, 80, map[string]bool{solo.name: true}, c.ip(false))
		}
	})

	// kube-proxy's short-circuit: a pod's own traffic to an external VIP
	// of the service is not external, and goes to any endpoint, even from
	// a node without a local one.
	t.Run("etp-local/pod-to-external-vip-uses-every-endpoint", func(t *testing.T) {
		var c netPod
		for _, p := range clients {
			if p.node == otherNode {
				c = p
			}
		}
		want := map[string]bool{solo.name: true}
		nodeIP := addr(t, member(t, e, otherNode), false)
		port := nodePortOf(t, soloLB, v1.ProtocolTCP)
		reach(t, "pod on "+otherNode+" -> its node's NodePort "+nodeIP.String()+":"+strconv.Itoa(port), c.netns, false, nodeIP, port, want, c.ip(false))
		reach(t, "pod on "+otherNode+" -> ingress "+soloIngress.String(), c.netns, false, soloIngress, 80, want, c.ip(false))
		reach(t, "pod on "+otherNode+" -> ingress "+soloIngress.String()+" (udp)", c.netns, true, soloIngress, 53, want, c.ip(false))
	})

	t.Run("healthcheck-nodeport", func(t *testing.T) {
		cases := []struct {
			svc   *v1.Service
			node  string
			code  int
			local int
		}{
			{soloLB, solo.node, http.StatusOK, 1},
			{soloLB, otherNode, http.StatusServiceUnavailable, 0},
		}
		for node, pods := range local {
			cases = append(cases, struct {
				svc   *v1.Service
				node  string
				code  int
				local int
			}{etp, node, http.StatusOK, len(pods)})
		}
		for _, c := range cases {
			m := member(t, e, c.node)
			for _, v6 := range []bool{false, true} {
				nodeIP := addr(t, m, v6)
				port := int(c.svc.Spec.HealthCheckNodePort)
				t.Run(c.svc.Name+"/"+c.node+"/"+family(v6), func(t *testing.T) {
					var last hcAnswer
					eventually(t, 20*time.Second, fmt.Sprintf("health check %s:%d", nodeIP, port), func(ctx context.Context) error {
						code, h, err := healthCheck(ctx, ext.Netns, nodeIP, port)
						if err != nil {
							return err
						}
						last = h
						if code != c.code || h.LocalEndpoints != c.local || h.Service.Namespace != ns || h.Service.Name != c.svc.Name || !h.ServiceProxyHealthy {
							return fmt.Errorf("answer %d %s, want %d with %d local endpoints of %s/%s", code, h.raw, c.code, c.local, ns, c.svc.Name)
						}
						return nil
					})
					t.Logf("health check %s:%d answered %d: %s", nodeIP, port, c.code, last.raw)
				})
			}
		}
		// Deleting the Service closes its health-check port.
		if err := e.client.CoreV1().Services(ns).Delete(context.Background(), soloLB.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		nodeIP := addr(t, member(t, e, solo.node), false)
		a := net.JoinHostPort(nodeIP.String(), strconv.Itoa(int(soloLB.Spec.HealthCheckNodePort)))
		eventually(t, 20*time.Second, "health check port "+a+" closed", func(ctx context.Context) error {
			c, err := nsutil.Dial(ctx, ext.Netns, "tcp", a, time.Second)
			if err == nil {
				c.Close()
				return fmt.Errorf("%s still accepts connections", a)
			}
			return nil
		})
	})

	t.Run("itp-local", func(t *testing.T) {
		itp := func(name, app string) *v1.Service {
			return createService(t, e, ns, newService(name, v1.ServiceSpec{
				Selector: map[string]string{"app": app}, Ports: webPorts,
				InternalTrafficPolicy: ptr.To(v1.ServiceInternalTrafficPolicyLocal),
				IPFamilyPolicy:        ptr.To(v1.IPFamilyPolicyPreferDualStack),
			}))
		}
		webITP, soloITP := itp("web-itp", "web"), itp("solo-itp", "solo")
		for _, c := range clients {
			for _, vip := range svcAddrs(t, webITP) {
				for _, udp := range []bool{false, true} {
					proto, port := "tcp", 80
					if udp {
						proto, port = "udp", 53
					}
					t.Run("local-only/"+c.node+"/"+proto+"/"+family(vip.Is6()), func(t *testing.T) {
						reach(t, "pod on "+c.node+" -> "+vip.String()+" (its node's endpoints only)", c.netns, udp, vip, port, local[c.node], c.ip(vip.Is6()))
					})
				}
			}
		}
		for _, c := range clients {
			vip := svcAddrs(t, soloITP)[0]
			if c.node == solo.node {
				reach(t, "pod on "+c.node+" -> solo-itp (local endpoint)", c.netns, false, vip, 80, map[string]bool{solo.name: true}, c.ip(false))
				continue
			}
			t.Run("no-local-endpoint-drops/"+c.node, func(t *testing.T) {
				dropped(t, "pod on "+c.node+" -> solo-itp", c.netns, vip, 80)
			})
		}
	})
}

// TestServicesPolicyExternalIPv6 reaches a dual-stack Service from the
// external host over IPv6: its IPv6 ExternalIP and its LoadBalancer's
// IPv6 ingress address, each routed to a node.
func TestServicesPolicyExternalIPv6(t *testing.T) {
	e, ns := agentNamespace(t, "e2e-svc-ext6")
	web := deployPods(t, e, ns, "web", 3)
	all := names(web)
	ext := member(t, e, "ext1")
	eip := netip.MustParseAddr("fd00:172:30::200")
	lbIP := netip.MustParseAddr("fd00:172:30::201")
	createService(t, e, ns, newService("web-eip6", v1.ServiceSpec{
		Selector: map[string]string{"app": "web"}, ExternalIPs: []string{eip.String()}, Ports: webPorts,
		IPFamilyPolicy: ptr.To(v1.IPFamilyPolicyPreferDualStack),
	}))
	createService(t, e, ns, newService("web-lb6", v1.ServiceSpec{
		Type: v1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"}, Ports: webPorts,
		IPFamilyPolicy: ptr.To(v1.IPFamilyPolicyPreferDualStack),
	}), lbIP)
	for _, node := range []string{"node1", "node2"} {
		gw := addr(t, member(t, e, node), true)
		for _, c := range []struct {
			name string
			vip  netip.Addr
		}{{"externalip", eip}, {"ingress", lbIP}} {
			t.Run(c.name+"/"+node, func(t *testing.T) {
				routeVia6(t, ext, c.vip, gw)
				reach(t, "ext1 -> "+c.name+" "+c.vip.String()+" via "+node, ext.Netns, false, c.vip, 80, all, netip.Addr{})
				reach(t, "ext1 -> "+c.name+" "+c.vip.String()+" via "+node+" (udp)", ext.Netns, true, c.vip, 53, all, netip.Addr{})
			})
		}
	}
}

// TestServicesBehaviourAffinityExpiry checks ClientIP session affinity
// with a short timeout, over TCP and UDP: new connections of one client
// stick to one backend while they come within the timeout, and once the
// timeout has passed without traffic, new connections spread again.
func TestServicesBehaviourAffinityExpiry(t *testing.T) {
	e, ns := agentNamespace(t, "e2e-svc-aff")
	web := deployPods(t, e, ns, "web", 3)
	all := names(web)
	client := deployPods(t, e, ns, "client", 1)[0]
	const timeout = 3 * time.Second
	svc := createService(t, e, ns, newService("web-sticky", v1.ServiceSpec{
		Selector: map[string]string{"app": "web"}, Ports: webPorts,
		SessionAffinity:       v1.ServiceAffinityClientIP,
		SessionAffinityConfig: &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To(int32(timeout / time.Second))}},
	}))
	vip := svcAddrs(t, svc)[0]
	for _, udp := range []bool{false, true} {
		proto, port := "tcp", 80
		if udp {
			proto, port = "udp", 53
		}
		ask := func(ctx context.Context) (string, error) {
			var pod string
			var err error
			if udp {
				pod, _, err = udpEcho(ctx, client.netns, vip, port)
			} else {
				pod, _, err = httpGet(ctx, client.netns, vip, port)
			}
			if err == nil && !all[pod] {
				err = fmt.Errorf("answer from %q, not a backend", pod)
			}
			return pod, err
		}
		t.Run(proto, func(t *testing.T) {
			var first string
			var last time.Time
			eventually(t, 30*time.Second, "first answer", func(ctx context.Context) error {
				pod, err := ask(ctx)
				first, last = pod, time.Now()
				return err
			})
			// Within the timeout every new connection sticks.
			for i := range 8 {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				pod, err := ask(ctx)
				cancel()
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				if since := time.Since(last); since >= timeout {
					t.Fatalf("request %d came %s after the previous one, past the %s timeout; the check is void", i, since, timeout)
				}
				last = time.Now()
				if pod != first {
					t.Fatalf("request %d answered by %s, want %s (affinity within %s)", i, pod, first, timeout)
				}
			}
			// After the timeout without traffic the binding is gone: new
			// connections are spread again. Each try waits out the
			// timeout first, since its own connection binds again.
			seen := map[string]bool{}
			eventually(t, 90*time.Second, "two different backends after the affinity expired", func(ctx context.Context) error {
				if since := time.Since(last); since < timeout+time.Second {
					return fmt.Errorf("%s since the last request, waiting for the %s timeout to pass", since.Round(time.Millisecond), timeout)
				}
				pod, err := ask(ctx)
				last = time.Now()
				if err != nil {
					return err
				}
				seen[pod] = true
				if len(seen) < 2 {
					return fmt.Errorf("only %v answered after expiry", seen)
				}
				return nil
			})
			t.Logf("%s: stuck to %s; after expiry answered by %v", proto, first, seen)
		})
	}
}

// TestServicesBehaviourScaling keeps long-lived TCP connections through a
// ClusterIP open while the Deployment behind it scales up and down: every
// established connection keeps answering from its backend (no reset), new
// endpoints take new connections, and after the scale-down, which removes
// the newer pods (they are given the lower pod-deletion-cost), new
// connections reach only the remaining ones.
func TestServicesBehaviourScaling(t *testing.T) {
	e, ns := agentNamespace(t, "e2e-svc-scale")
	ctx := context.Background()
	initial := deployPods(t, e, ns, "web", 2)
	client := deployPods(t, e, ns, "client", 1)[0]
	svc := createService(t, e, ns, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       v1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: webPorts[:1]},
	})
	vip := svcAddrs(t, svc)[0]
	before := names(initial)
	reach(t, "first answers from "+vip.String(), client.netns, false, vip, 80, before, client.ip(false))

	// Long-lived connections, spread over the initial backends.
	var conns []*keepConn
	t.Cleanup(func() {
		for _, k := range conns {
			k.c.Close()
		}
	})
	held := map[string]int{}
	for i := 0; len(conns) < 8 || len(held) < len(before); i++ {
		if i > 40 {
			t.Fatalf("40 connections did not reach every initial backend: %v", held)
		}
		c, err := nsutil.Dial(ctx, client.netns, "tcp", net.JoinHostPort(vip.String(), "80"), 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		k := &keepConn{c: c, r: bufio.NewReader(c)}
		if k.pod, _, err = k.ask(); err != nil {
			c.Close()
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, k)
		held[k.pod]++
	}
	t.Logf("%d connections held by %v", len(conns), held)
	checkConns := func(t *testing.T, when string) {
		t.Helper()
		for i, k := range conns {
			for range 2 {
				pod, _, err := k.ask()
				if err != nil {
					t.Fatalf("%s: connection %d (to %s): %v", when, i, k.pod, err)
				}
				if pod != k.pod {
					t.Fatalf("%s: connection %d answered by %s, want %s", when, i, pod, k.pod)
				}
			}
		}
	}
	scale := func(t *testing.T, n int) {
		t.Helper()
		patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, n))
		if _, err := e.client.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	running := func(ctx context.Context, n int) (map[string]bool, error) {
		list, err := e.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return nil, err
		}
		out := map[string]bool{}
		for _, p := range list.Items {
			if p.DeletionTimestamp != nil {
				return nil, fmt.Errorf("pod %s terminating", p.Name)
			}
			if p.Status.Phase != v1.PodRunning {
				return nil, fmt.Errorf("pod %s %s", p.Name, p.Status.Phase)
			}
			out[p.Name] = true
		}
		if len(out) != n {
			return nil, fmt.Errorf("%d of %d pods", len(out), n)
		}
		return out, nil
	}

	t.Run("up", func(t *testing.T) {
		scale(t, 4)
		var now map[string]bool
		eventually(t, 90*time.Second, "4 web pods running", func(ctx context.Context) error {
			var err error
			now, err = running(ctx, 4)
			return err
		})
		// New connections reach every backend, the new ones included.
		reach(t, "new connections after scaling up", client.netns, false, vip, 80, now, client.ip(false))
		checkConns(t, "after scaling up")
		// The newer pods go first on the way down.
		for p := range now {
			if before[p] {
				continue
			}
			patch := []byte(`{"metadata":{"annotations":{"controller.kubernetes.io/pod-deletion-cost":"-100"}}}`)
			if _, err := e.client.CoreV1().Pods(ns).Patch(ctx, p, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("down", func(t *testing.T) {
		scale(t, 2)
		eventually(t, 90*time.Second, "the 2 initial web pods left", func(ctx context.Context) error {
			now, err := running(ctx, 2)
			if err != nil {
				return err
			}
			for p := range now {
				if !before[p] {
					return fmt.Errorf("pod %s kept, want the initial pods %v", p, before)
				}
			}
			return nil
		})
		reach(t, "new connections after scaling down", client.netns, false, vip, 80, before, client.ip(false))
		// And only those: a few more new connections.
		for i := range 6 {
			pod, _, err := httpGet(ctx, client.netns, vip, 80)
			if err != nil || !before[pod] {
				t.Fatalf("new connection %d after scaling down: %q, %v; want one of %v", i, pod, err, before)
			}
		}
		checkConns(t, "after scaling down")
	})
}

// sctpPacket builds an SCTP packet (common header and one chunk, no IP
// header) with its CRC32c.
func sctpPacket(t *testing.T, sport, dport uint16, vtag uint32, chunk gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	hdr := &layers.SCTP{SrcPort: layers.SCTPPort(sport), DstPort: layers.SCTPPort(dport), VerificationTag: vtag}
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}, hdr, chunk); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// sctpInit is an INIT (or INIT-ACK) chunk with initiate tag tag.
func sctpInit(ack bool, tag uint32) *layers.SCTPInit {
	typ := layers.SCTPChunkTypeInit
	if ack {
		typ = layers.SCTPChunkTypeInitAck
	}
	return &layers.SCTPInit{SCTPChunk: layers.SCTPChunk{Type: typ}, InitiateTag: tag,
		AdvertisedReceiverWindowCredit: 65535, OutboundStreams: 1, InboundStreams: 1, InitialTSN: 1}
}

// sctpGot is one SCTP packet a raw socket received.
type sctpGot struct {
	src, dst   netip.AddrPort
	vtag       uint32
	chunk      layers.SCTPChunkType
	initTag    uint32 // INIT and INIT-ACK
	crcOK      bool
	receivedBy string
}

func (g sctpGot) String() string {
	return fmt.Sprintf("%s %s -> %s vtag %#x crc ok %v (at %s)", g.chunk, g.src, g.dst, g.vtag, g.crcOK, g.receivedBy)
}

// parseRawSCTP decodes what an IPv4 raw socket returns: the IP header,
// then the SCTP packet, whose CRC32c it checks.
func parseRawSCTP(b []byte) (sctpGot, bool) {
	if len(b) < 20 || b[0]>>4 != 4 || b[9] != 132 {
		return sctpGot{}, false
	}
	ihl := int(b[0]&0xf) * 4
	if len(b) < ihl+16 {
		return sctpGot{}, false
	}
	src, _ := netip.AddrFromSlice(b[12:16])
	dst, _ := netip.AddrFromSlice(b[16:20])
	l4 := slices.Clone(b[ihl:])
	//	0: src port, 2: dst port, 4: verification tag, 8: CRC32c (little-endian)
	//	12: first chunk: type, flags, length; INIT/INIT-ACK: 16: initiate tag
	g := sctpGot{
		src:   netip.AddrPortFrom(src, binary.BigEndian.Uint16(l4[0:2])),
		dst:   netip.AddrPortFrom(dst, binary.BigEndian.Uint16(l4[2:4])),
		vtag:  binary.BigEndian.Uint32(l4[4:8]),
		chunk: layers.SCTPChunkType(l4[12]),
	}
	if len(l4) >= 20 {
		g.initTag = binary.BigEndian.Uint32(l4[16:20])
	}
	want := binary.LittleEndian.Uint32(l4[8:12])
	copy(l4[8:12], []byte{0, 0, 0, 0})
	g.crcOK = crc32.Checksum(l4, crc32.MakeTable(crc32.Castagnoli)) == want
	return g, true
}

// rawSCTP is an IPv4 raw socket of protocol 132 (SCTP) in a network
// namespace: it sends SCTP packets (the kernel adds the IP header) and
// receives every SCTP packet addressed to the namespace. The kernel here
// has no SCTP sockets, and with a raw socket open it does not answer SCTP
// with ICMP protocol unreachable either.
type rawSCTP struct {
	fd   int
	name string
}

func openRawSCTP(t *testing.T, netns, name string) *rawSCTP {
	t.Helper()
	var fd int
	err := nsutil.Do(netns, func() error {
		var err error
		fd, err = syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, 132)
		return err
	})
	if err != nil {
		t.Fatalf("raw SCTP socket in %s: %v", name, err)
	}
	tv := syscall.NsecToTimeval((50 * time.Millisecond).Nanoseconds())
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	r := &rawSCTP{fd: fd, name: name}
	t.Cleanup(func() { syscall.Close(fd) })
	return r
}

func (r *rawSCTP) send(dst netip.Addr, pkt []byte) error {
	return syscall.Sendto(r.fd, pkt, 0, &syscall.SockaddrInet4{Addr: dst.As4()})
}

// recv returns the packets received within d.
func (r *rawSCTP) recv(d time.Duration) []sctpGot {
	var out []sctpGot
	buf := make([]byte, 65536)
	for end := time.Now().Add(d); time.Now().Before(end); {
		n, _, err := syscall.Recvfrom(r.fd, buf, 0)
		if err != nil {
			continue // the receive timeout
		}
		if g, ok := parseRawSCTP(buf[:n]); ok {
			g.receivedBy = r.name
			out = append(out, g)
		}
	}
	return out
}

// TestServicesBehaviourSCTP load-balances SCTP with real packets. The
// kernel here has no SCTP sockets, so the test speaks SCTP over raw
// sockets: a client pod (one on each node) sends an INIT to the ClusterIP
// and service port of an SCTP Service whose targetPort differs; an
// endpoint pod receives it DNATed to its own address and the targetPort,
// with a valid CRC32c; its INIT-ACK reaches the client from the ClusterIP
// and service port; the association's next packet (DATA) and a second
// association of the same client reach the same endpoint's targetPort.
// Then the endpoint is deleted, and the client's next INIT reaches a live
// endpoint at once (the stale conntrack entry, which Open vSwitch keys by
// address only for SCTP, is flushed).
func TestServicesBehaviourSCTP(t *testing.T) {
	e, ns := agentNamespace(t, "e2e-svc-sctp")
	ctx := context.Background()
	deployPods(t, e, ns, "sctp", 2)
	clients := deployPods(t, e, ns, "client", 2)
	svc := createService(t, e, ns, newService("sctp", v1.ServiceSpec{
		Selector: map[string]string{"app": "sctp"},
		Ports:    []v1.ServicePort{{Name: "assoc", Port: 9999, TargetPort: intstr.FromInt32(7777), Protocol: v1.ProtocolSCTP}},
	}))
	vip := svcAddrs(t, svc)[0]
	const svcPort, targetPort = 9999, 7777

	socks := func(t *testing.T, pods []netPod) map[netip.Addr]*rawSCTP {
		out := map[netip.Addr]*rawSCTP{}
		for _, p := range pods {
			out[p.ip(false)] = openRawSCTP(t, p.netns, p.name)
		}
		return out
	}
	listPods := func(t *testing.T, n int) []netPod {
		t.Helper()
		var pods []netPod
		eventually(t, 90*time.Second, fmt.Sprintf("%d sctp pods running", n), func(ctx context.Context) error {
			list, err := e.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=sctp"})
			if err != nil {
				return err
			}
			pods = pods[:0]
			for _, p := range list.Items {
				if p.DeletionTimestamp != nil || p.Status.Phase != v1.PodRunning || len(p.Status.PodIPs) == 0 {
					return fmt.Errorf("pod %s: %s", p.Name, p.Status.Phase)
				}
				np := netPod{name: p.Name, node: p.Spec.NodeName}
				for _, ip := range p.Status.PodIPs {
					np.ips = append(np.ips, netip.MustParseAddr(ip.IP))
				}
				m := member(t, e, p.Spec.NodeName)
				for _, op := range cniPorts(t, m) {
					if op.ExternalIDs[cni.ExternalIDPodName] == p.Name && op.ExternalIDs[cni.ExternalIDPodNamespace] == ns {
						np.netns = strings.TrimPrefix(op.ExternalIDs[cni.ExternalIDNetns], "/run/netns/")
					}
				}
				if np.netns == "" {
					return fmt.Errorf("pod %s: no netns yet", p.Name)
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

	// initTo sends INITs from c until an endpoint receives one, and
	// returns the endpoint and what it received.
	initTo := func(t *testing.T, within time.Duration, c *rawSCTP, client netip.Addr, sport uint16, tag uint32, eps map[netip.Addr]*rawSCTP) (netip.Addr, sctpGot) {
		t.Helper()
		var at netip.Addr
		var got sctpGot
		eventually(t, within, fmt.Sprintf("INIT from %s:%d to %s:%d received by an endpoint", client, sport, vip, svcPort), func(ctx context.Context) error {
			if err := c.send(vip, sctpPacket(t, sport, svcPort, 0, sctpInit(false, tag))); err != nil {
				return err
			}
			var seen []string
			for ip, s := range eps {
				for _, g := range s.recv(100 * time.Millisecond) {
					if g.src.Addr() != client || g.src.Port() != sport || g.chunk != layers.SCTPChunkTypeInit {
						continue
					}
					seen = append(seen, g.String())
					at, got = ip, g
				}
			}
			if len(seen) == 0 {
				return fmt.Errorf("no endpoint received it")
			}
			if len(seen) > 1 {
				t.Fatalf("INIT from %s:%d received more than once: %v", client, sport, seen)
			}
			return nil
		})
		if got.dst != netip.AddrPortFrom(at, targetPort) || !got.crcOK || got.initTag != tag {
			t.Fatalf("endpoint %s received %s (init tag %#x), want it addressed to %s:%d with a valid CRC32c and init tag %#x",
				at, got, got.initTag, at, targetPort, tag)
		}
		return at, got
	}
	// expect waits for a packet at r that match accepts.
	expect := func(t *testing.T, r *rawSCTP, what string, match func(sctpGot) bool) sctpGot {
		t.Helper()
		var seen []string
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
			for _, g := range r.recv(100 * time.Millisecond) {
				if match(g) {
					return g
				}
				seen = append(seen, g.String())
			}
		}
		t.Fatalf("%s: not received within 5s; %s received %v", what, r.name, seen)
		return sctpGot{}
	}

	eps := socks(t, listPods(t, 2))
	chosen := map[string]netip.Addr{}
	for i, c := range clients {
		t.Run("association/from-"+c.node, func(t *testing.T) {
			cs := openRawSCTP(t, c.netns, c.name)
			client := c.ip(false)
			sport := uint16(41000 + i)
			tag := uint32(0x1000 + i)
			at, _ := initTo(t, 30*time.Second, cs, client, sport, tag, eps)
			chosen[c.name] = at
			t.Logf("client %s on %s: INIT reached %s:%d", c.name, c.node, at, targetPort)
			// The endpoint answers; the client sees the ClusterIP.
			if err := eps[at].send(client, sctpPacket(t, targetPort, sport, tag, sctpInit(true, 0x9000+uint32(i)))); err != nil {
				t.Fatal(err)
			}
			ack := expect(t, cs, "INIT-ACK at the client", func(g sctpGot) bool { return g.chunk == layers.SCTPChunkTypeInitAck })
			if ack.src != netip.AddrPortFrom(vip, svcPort) || ack.dst != netip.AddrPortFrom(client, sport) || !ack.crcOK || ack.vtag != tag {
				t.Fatalf("client received %s, want it from %s:%d to %s:%d with vtag %#x and a valid CRC32c", ack, vip, svcPort, client, sport, tag)
			}
			// The association goes on: DATA reaches the same endpoint's
			// targetPort.
			data := &layers.SCTPData{SCTPChunk: layers.SCTPChunk{Type: layers.SCTPChunkTypeData, Flags: 3}, TSN: 1}
			if err := cs.send(vip, sctpPacket(t, sport, svcPort, 0x9000+uint32(i), data)); err != nil {
				t.Fatal(err)
			}
			d := expect(t, eps[at], "DATA at the endpoint", func(g sctpGot) bool { return g.chunk == layers.SCTPChunkTypeData && g.src.Port() == sport })
			if d.dst != netip.AddrPortFrom(at, targetPort) || d.src.Addr() != client || !d.crcOK {
				t.Fatalf("endpoint received %s, want it from %s:%d to %s:%d with a valid CRC32c", d, client, sport, at, targetPort)
			}
			// A second association of the client follows its conntrack
			// entry (keyed by addresses) to the same endpoint.
			at2, _ := initTo(t, 5*time.Second, cs, client, sport+100, tag+100, eps)
			if at2 != at {
				t.Errorf("second association reached %s, want %s (one conntrack entry per client and VIP)", at2, at)
			}
		})
	}

	t.Run("endpoint-deleted", func(t *testing.T) {
		c := clients[0]
		old, ok := chosen[c.name]
		if !ok {
			t.Skip("no association from the first client")
		}
		var oldPod string
		for ip, s := range eps {
			if ip == old {
				oldPod = s.name
			}
		}
		if err := e.client.CoreV1().Pods(ns).Delete(ctx, oldPod, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, "pod "+oldPod+" gone", func(ctx context.Context) error {
			_, err := e.client.CoreV1().Pods(ns).Get(ctx, oldPod, metav1.GetOptions{})
			if err == nil {
				return fmt.Errorf("pod %s still exists", oldPod)
			}
			return nil
		})
		live := socks(t, listPods(t, 2))
		if _, ok := live[old]; ok {
			t.Fatalf("address %s of the deleted pod is in use again", old)
		}
		cs := openRawSCTP(t, c.netns, c.name+"-2")
		// Within 10 s: far less than the idle timeout of Open vSwitch's
		// generic conntrack entries (30 s and more), so only the flush
		// can have moved the client.
		at, _ := initTo(t, 10*time.Second, cs, c.ip(false), 42000, 0x7777, live)
		t.Logf("after deleting %s (%s), the client's INIT reached %s", oldPod, old, at)
	})
}
