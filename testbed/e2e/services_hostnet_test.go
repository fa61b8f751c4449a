package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"nodeflow/testbed"
	"nodeflow/testbed/nsutil"
	"nodeflow/testbed/workload"
)

// The host-network part of the services traffic matrix: services whose
// endpoints are host addresses, reached from pods, from the nodes' hosts and
// from the external host, along the three paths of the host-to-services
// design (see docs/pipeline.md).
//
// Endpoints:
//   - H1: a hostNetwork pod on node1 (node1's IPs), service "host1";
//   - H2: a hostNetwork pod on node2 (node2's IPs), service "host2";
//   - S:  a server bound to extra addresses on node1's lo (172.20.0.2 and
//     fd00:172:20::2, the seed's secondary-IP case), selectorless service
//     "hostsec" with manual EndpointSlices;
//   - a selectorless service "mixed" whose endpoints are H1 and a pod.
//
// Sources: a pod on node1, a pod on node2, node1's host, node2's host
// (ClusterIP), and ext1 and the other node's host (NodePort on each node).
// node2 reaches S through the fabric's router, which gets a route to S via
// node1 (as a real network would route a node's extra address).
//
// The client address an endpoint sees, per cell (v4 shown; IPv6 is the same
// with fd69::/125 and the nodes' IPv6 addresses):
//   - an endpoint on the node that load-balanced the connection (H1 or S
//     behind node1, H2 behind node2): br0 DNATs to it (H1/H2 as the host
//     masquerade address 169.254.169.2), SNATs to the node IP (SNATToNodeIP),
//     and breth0 hairpins it to the host through zones 64001 and 64002,
//     whose SNAT to the router masquerade address hides the node IP from the
//     host: the endpoint sees 169.254.169.1, whoever the client was (pod,
//     host, or a NodePort client);
//   - an endpoint on the other node (H2 or S behind node1, H1 behind node2):
//     br0 SNATs to the load-balancing node's IP (SNATToNodeIP), and the
//     connection leaves through breth0's zone 64000 with ct_mark 0x1: the
//     endpoint sees that node's IP (172.30.0.11 or 172.30.0.12);
//   - mixed: a pod endpoint sees what the pod matrix defines; only that
//     every endpoint answers is checked.

// Ports of the host-network servers. The hostNetwork pods serve on the
// node's wildcard address (like any hostNetwork workload); the secondary
// server binds to its addresses only, on ports of its own (a wildcard
// listener on the same port would exclude it). Bound, its UDP replies leave
// from the secondary address, which is what breth0's zone 64002 expects
// back; a wildcard socket would answer from the node IP (the source of the
// host's route to 169.254.169.1).
const (
	hostnetTCP = 8080
	hostnetUDP = 5353
	secTCP     = 18081
	secUDP     = 15354
)

// conntrackHostMasq is the host masquerade address of a family.
func conntrackHostMasq(v6 bool) string {
	if v6 {
		return "fd69::2"
	}
	return "169.254.169.2"
}

var (
	secondaryV4 = netip.MustParseAddr("172.20.0.2")
	secondaryV6 = netip.MustParseAddr("fd00:172:20::2")
	masqRouter  = map[bool]netip.Addr{false: netip.MustParseAddr("169.254.169.1"), true: netip.MustParseAddr("fd69::1")}
)

// cellResult is one cell of the matrix, for the summary table.
type cellResult struct {
	name, client string
	ok           bool
}

// matrix collects the cells' results.
type matrix struct {
	mu    sync.Mutex
	cells []cellResult
}

func (mx *matrix) add(c cellResult) {
	mx.mu.Lock()
	defer mx.mu.Unlock()
	mx.cells = append(mx.cells, c)
}

func (mx *matrix) log(t *testing.T) {
	mx.mu.Lock()
	defer mx.mu.Unlock()
	sort.SliceStable(mx.cells, func(i, j int) bool { return mx.cells[i].name < mx.cells[j].name })
	var b strings.Builder
	fmt.Fprintf(&b, "host-network services matrix (%d cells):\n", len(mx.cells))
	for _, c := range mx.cells {
		st := "PASS"
		if !c.ok {
			st = "FAIL"
		}
		fmt.Fprintf(&b, "  %-4s %-70s client=%s\n", st, c.name, c.client)
	}
	t.Log(b.String())
}

// cell asks dst:port from netns until backend answers, then checks the
// client address it saw (when wantClient is valid), and records the cell.
func (mx *matrix) cell(t *testing.T, name, netns string, udp bool, dst netip.Addr, port int, backend string, wantClient netip.Addr) {
	t.Helper()
	res := cellResult{name: name}
	defer func() {
		res.ok = !t.Failed()
		mx.add(res)
	}()
	eventually(t, 30*time.Second, name, func(ctx context.Context) error {
		pod, client, err := ask(ctx, netns, udp, dst, port)
		if err != nil {
			return err
		}
		if pod != backend {
			return fmt.Errorf("answer from %q, want %q", pod, backend)
		}
		res.client = hostOf(client)
		return nil
	})
	if wantClient.IsValid() && res.client != wantClient.String() {
		t.Errorf("%s: %s saw client %s, want %s", name, backend, res.client, wantClient)
	}
}

// hostnetPod runs a testbed/web hostNetwork pod on node and waits until it is
// Ready.
func hostnetPod(t *testing.T, e *env, ns, name, node string, labels map[string]string) {
	t.Helper()
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: v1.PodSpec{
			NodeName:                      node,
			HostNetwork:                   true,
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			Containers: []v1.Container{{
				Name: "web", Image: "testbed/web",
				Ports: []v1.ContainerPort{
					{Name: "http", ContainerPort: hostnetTCP, Protocol: v1.ProtocolTCP},
					{Name: "echo", ContainerPort: hostnetUDP, Protocol: v1.ProtocolUDP},
				},
				ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(hostnetTCP)}}, PeriodSeconds: 1},
			}},
		},
	}
	if _, err := e.client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "hostNetwork pod "+name+" Ready", func(ctx context.Context) error {
		p, err := e.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !ready(p.Status.Conditions) {
			return fmt.Errorf("not Ready: %+v", p.Status.Conditions)
		}
		return nil
	})
}

// serveSecondary serves the workload's protocol on addrs only (TCP and UDP),
// inside netns, until the test ends, reporting itself as name.
func serveSecondary(t *testing.T, netns, name string, addrs []netip.Addr) {
	t.Helper()
	for _, a := range addrs {
		l, err := nsutil.Listen(netns, "tcp", net.JoinHostPort(a.String(), strconv.Itoa(secTCP)))
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintln(w, workload.Reply(name, r.RemoteAddr))
		})}
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(func() { srv.Close() })
		var pc net.PacketConn
		if err := nsutil.Do(netns, func() error {
			var err error
			pc, err = net.ListenPacket("udp", net.JoinHostPort(a.String(), strconv.Itoa(secUDP)))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		go serveDatagrams(pc, 2048, func(b []byte, from net.Addr) {
			_, _ = pc.WriteTo(append([]byte(workload.Reply(name, from.String())+" "), b...), from)
		})
	}
}

// ipIn runs `ip args...` in member m's namespace.
func ipIn(t *testing.T, m *testbed.Member, args ...string) {
	t.Helper()
	full := append([]string{"-n", m.Netns}, args...)
	if out, err := exec.Command("ip", full...).CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v\n%s", full, err, out)
	}
}

// hostRouteVia routes dst (a host route of either family) via gw in m's
// namespace until the test ends.
func hostRouteVia(t *testing.T, m *testbed.Member, dst, gw netip.Addr) {
	t.Helper()
	p := netip.PrefixFrom(dst, dst.BitLen()).String()
	ipIn(t, m, "route", "replace", p, "via", gw.String())
	t.Cleanup(func() { _ = exec.Command("ip", "-n", m.Netns, "route", "del", p, "via", gw.String()).Run() })
}

// sliceFor is a manual EndpointSlice of service svc.
func sliceFor(svc, name string, at discovery.AddressType, ports []discovery.EndpointPort, eps ...discovery.Endpoint) *discovery.EndpointSlice {
	return &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{discovery.LabelServiceName: svc, discovery.LabelManagedBy: "e2e"}},
		AddressType: at,
		Endpoints:   eps,
		Ports:       ports,
	}
}

func readyEndpoint(ip netip.Addr, node string) discovery.Endpoint {
	return discovery.Endpoint{Addresses: []string{ip.String()}, NodeName: ptr.To(node),
		Conditions: discovery.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}}
}

func epPorts(tcp, udp int32) []discovery.EndpointPort {
	return []discovery.EndpointPort{
		{Name: ptr.To("http"), Port: ptr.To(tcp), Protocol: ptr.To(v1.ProtocolTCP)},
		{Name: ptr.To("echo"), Port: ptr.To(udp), Protocol: ptr.To(v1.ProtocolUDP)},
	}
}

// memberIPs returns a member's address of each family.
func memberIP(t testing.TB, m *testbed.Member, v6 bool) netip.Addr {
	t.Helper()
	for _, s := range m.Addresses {
		s, _, _ = strings.Cut(s, "/")
		a, err := netip.ParseAddr(s)
		if err == nil && a.Is6() == v6 {
			return a
		}
	}
	t.Fatalf("member %s has no %s address (%v)", m.Name, family(v6), m.Addresses)
	return netip.Addr{}
}

// appctl runs ovs-appctl against the OVS of node m.
func appctl(m *testbed.Member, args ...string) (string, error) {
	cmd := exec.Command("ovs-appctl", append([]string{"-t", filepath.Join(m.OVSRundir, "ovs-vswitchd.ctl")}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// flowPackets returns the packet count of the first flow of lines that
// contains every one of parts, and whether there was one.
func flowPackets(lines []string, parts ...string) (int, string, bool) {
	re := regexp.MustCompile(`n_packets=(\d+)`)
next:
	for _, l := range lines {
		for _, p := range parts {
			if !strings.Contains(l, p) {
				continue next
			}
		}
		m := re.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		return n, strings.TrimSpace(l), true
	}
	return 0, "", false
}

// maxRecirculations is the userspace datapath's limit (plan.MaxRecirculations).
const maxRecirculations = 6

// dpPacket is what recircChain knows of a packet's addresses as it moves
// through the datapath flows (src is unknown until a NAT sets it).
type dpPacket struct {
	src, dst netip.Addr
	proto    string // IP protocol number
	dport    uint64 // TCP destination port, 0 when unknown
}

var (
	dpIDRe    = regexp.MustCompile(`(?:^|,)recirc_id\((0x[0-9a-f]+|\d+)\)`)
	dpNextRe  = regexp.MustCompile(`recirc\((0x[0-9a-f]+|\d+)\)`)
	dpEthRe   = regexp.MustCompile(`eth_type\((0x[0-9a-f]+)\)`)
	dpIPRe    = regexp.MustCompile(`ipv[46]\(([^)]*)\)`)
	dpStateRe = regexp.MustCompile(`ct_state\(([^)]*)\)`)
	dpNATRe   = regexp.MustCompile(`nat\((src|dst)=([^,)]+)`)
	dpTCPRe   = regexp.MustCompile(`tcp\(([^)]*)\)`)
)

// dpMatches reports whether a datapath flow's match admits p, the first
// packet of a new connection: its address matches (with their masks) and
// no ct_state that only established or reply packets have.
func dpMatches(match string, p dpPacket) bool {
	if m := dpStateRe.FindStringSubmatch(match); m != nil {
		for _, f := range []string{"+est", "+rpl", "-new", "+inv"} {
			if strings.Contains(m[1], f) {
				return false
			}
		}
	}
	if m := dpTCPRe.FindStringSubmatch(match); m != nil && p.dport != 0 {
		for _, kv := range strings.Split(m[1], ",") {
			k, v, _ := strings.Cut(kv, "=")
			if k != "dst" {
				continue
			}
			val, mask, masked := strings.Cut(v, "/")
			x, err := strconv.ParseUint(val, 0, 16)
			if err != nil {
				return false
			}
			mk := uint64(0xffff)
			if masked {
				if mk, err = strconv.ParseUint(mask, 0, 16); err != nil {
					return false
				}
			}
			if x&mk != p.dport&mk {
				return false
			}
		}
	}
	m := dpIPRe.FindStringSubmatch(match)
	if m == nil {
		return true
	}
	for _, kv := range strings.Split(m[1], ",") {
		k, v, _ := strings.Cut(kv, "=")
		var cur netip.Addr
		switch k {
		case "src":
			cur = p.src
		case "dst":
			cur = p.dst
		case "proto":
			if p.proto != "" && v != p.proto {
				return false
			}
			continue
		default:
			continue
		}
		if !cur.IsValid() {
			continue
		}
		val, mask, masked := strings.Cut(v, "/")
		a, err := netip.ParseAddr(val)
		if err != nil {
			return false
		}
		if !masked {
			if a != cur {
				return false
			}
			continue
		}
		mk, err := netip.ParseAddr(mask)
		if err != nil || mk.BitLen() != cur.BitLen() {
			return false
		}
		x, y, z := a.AsSlice(), cur.AsSlice(), mk.AsSlice()
		for i := range x {
			if x[i]&z[i] != y[i]&z[i] {
				return false
			}
		}
	}
	return true
}

// dpNAT applies the NAT actions of a datapath flow's actions to p.
func dpNAT(acts string, p dpPacket) dpPacket {
	for _, m := range dpNATRe.FindAllStringSubmatch(acts, -1) {
		v, port := m[2], ""
		if strings.HasPrefix(v, "[") {
			v, port, _ = strings.Cut(strings.TrimPrefix(v, "["), "]")
			port = strings.TrimPrefix(port, ":")
		} else if strings.Contains(v, ".") {
			v, port, _ = strings.Cut(v, ":")
		}
		if n, err := strconv.ParseUint(port, 10, 16); err == nil && m[1] == "dst" {
			p.dport = n
		}
		v, _, _ = strings.Cut(v, "-")
		a, err := netip.ParseAddr(v)
		if err != nil {
			continue
		}
		if m[1] == "src" {
			p.src = a
		} else {
			p.dst = a
		}
	}
	return p
}

// recircChain dumps the datapath flows of node m and follows the first
// packet of a new TCP connection to dst:dport through them: from a first-pass flow
// (recirc_id(0)) whose actions contain root, each recirculation to id N
// continues with a flow that matches recirc_id(N) and admits the packet as
// the NAT actions so far left it. It returns the most recirculations found
// that way and the flows of that chain.
func recircChain(m *testbed.Member, root string, dst netip.Addr, dport int) (int, []string, error) {
	out, err := appctl(m, "dpctl/dump-flows")
	if err != nil {
		return 0, nil, fmt.Errorf("dpctl/dump-flows on %s: %v\n%s", m.Name, err, out)
	}
	type dpFlow struct {
		line, eth, match, acts string
	}
	byID := map[uint64][]dpFlow{}
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		match, acts, _ := strings.Cut(l, "actions:")
		mm := dpIDRe.FindStringSubmatch(match)
		em := dpEthRe.FindStringSubmatch(match)
		if mm == nil || em == nil {
			continue
		}
		id, _ := strconv.ParseUint(mm[1], 0, 64)
		byID[id] = append(byID[id], dpFlow{line: l, eth: em[1], match: match, acts: acts})
	}
	var walk func(f dpFlow, p dpPacket, seen int) (int, []string)
	walk = func(f dpFlow, p dpPacket, seen int) (int, []string) {
		depth, chain := 0, []string{f.line}
		if seen > 2*maxRecirculations {
			return depth, chain
		}
		p = dpNAT(f.acts, p)
		for _, nm := range dpNextRe.FindAllStringSubmatch(f.acts, -1) {
			next, _ := strconv.ParseUint(nm[1], 0, 64)
			// A recirculation counts even when no flow follows it.
			d, c := 0, []string{fmt.Sprintf("recirc_id(%#x): no flow for the packet", next)}
			found := false
			for _, g := range byID[next] {
				if g.eth != f.eth || !dpMatches(g.match, p) {
					continue
				}
				if gd, gc := walk(g, p, seen+1); !found || gd > d {
					d, c, found = gd, gc, true
				}
			}
			if d+1 > depth {
				depth, chain = d+1, append([]string{f.line}, c...)
			}
		}
		return depth, chain
	}
	best, bestChain := -1, []string(nil)
	for _, f := range byID[0] {
		p := dpPacket{dst: dst, proto: "6", dport: uint64(dport)}
		if !strings.Contains(f.acts, root) || !dpMatches(f.match, p) {
			continue
		}
		if d, c := walk(f, p, 0); d > best {
			best, bestChain = d, c
		}
	}
	if best < 0 {
		return 0, nil, fmt.Errorf("%s: no first-pass datapath flow to %s with %q", m.Name, dst, root)
	}
	return best, bestChain, nil
}

// TestServicesHostNetwork runs the host-network endpoint cells of the
// services traffic matrix (see the comment above) and checks breth0's
// masquerade flows carried them, with no packet dropped for exceeding the
// datapath's recirculation limit.
func TestServicesHostNetwork(t *testing.T) {
	e := up(t)
	requireAgent(t, e)
	ctx := context.Background()
	n1, ok1 := e.state.Member("node1")
	n2, ok2 := e.state.Member("node2")
	if !ok1 || !ok2 {
		t.Fatal("the topology has no node1 and node2")
	}
	ns := createNamespace(t, e, "e2e-svc-hostnet")

	// The secondary addresses go on node1's lo before anything else, so
	// that the agent has time to find them while the pods start.
	ipIn(t, n1, "addr", "add", secondaryV4.String()+"/32", "dev", "lo")
	ipIn(t, n1, "addr", "add", secondaryV6.String()+"/128", "dev", "lo", "nodad")
	t.Cleanup(func() {
		_ = exec.Command("ip", "-n", n1.Netns, "addr", "del", secondaryV4.String()+"/32", "dev", "lo").Run()
		_ = exec.Command("ip", "-n", n1.Netns, "addr", "del", secondaryV6.String()+"/128", "dev", "lo").Run()
	})
	serveSecondary(t, n1.Netns, "secondary-node1", []netip.Addr{secondaryV4, secondaryV6})
	// node2 reaches the secondary addresses through the fabric's router.
	if fab, ok := e.state.Member("fabric"); ok {
		for _, v6 := range []bool{false, true} {
			sec := secondaryV4
			if v6 {
				sec = secondaryV6
			}
			hostRouteVia(t, fab, sec, memberIP(t, n1, v6))
		}
	}

	clients := deployPods(t, e, ns, "client", 2)
	if clients[0].node == clients[1].node {
		t.Fatalf("client pods not spread: %+v", clients)
	}
	podOn := map[string]netPod{}
	for _, c := range clients {
		podOn[c.node] = c
	}
	hostnetPod(t, e, ns, "hostweb-node1", "node1", map[string]string{"hostweb": "node1"})
	hostnetPod(t, e, ns, "hostweb-node2", "node2", map[string]string{"hostweb": "node2"})

	mkSvc := func(t *testing.T, name string, selector map[string]string, tcpTarget, udpTarget int32) *v1.Service {
		t.Helper()
		s, err := e.client.CoreV1().Services(ns).Create(ctx, newService(name, v1.ServiceSpec{
			Type:           v1.ServiceTypeNodePort,
			Selector:       selector,
			IPFamilyPolicy: ptr.To(v1.IPFamilyPolicyRequireDualStack),
			Ports: []v1.ServicePort{
				{Name: "http", Port: 80, TargetPort: intstr.FromInt32(tcpTarget), Protocol: v1.ProtocolTCP},
				{Name: "echo", Port: 53, TargetPort: intstr.FromInt32(udpTarget), Protocol: v1.ProtocolUDP},
			},
		}), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	type target struct {
		svc     *v1.Service
		backend string
		node    string // where the endpoint lives
	}
	targets := []target{
		{mkSvc(t, "host1", map[string]string{"hostweb": "node1"}, hostnetTCP, hostnetUDP), "hostweb-node1", "node1"},
		{mkSvc(t, "host2", map[string]string{"hostweb": "node2"}, hostnetTCP, hostnetUDP), "hostweb-node2", "node2"},
		{mkSvc(t, "hostsec", nil, secTCP, secUDP), "secondary-node1", "node1"},
	}
	for _, sl := range []*discovery.EndpointSlice{
		sliceFor("hostsec", "hostsec-v4", discovery.AddressTypeIPv4, epPorts(secTCP, secUDP), readyEndpoint(secondaryV4, "node1")),
		sliceFor("hostsec", "hostsec-v6", discovery.AddressTypeIPv6, epPorts(secTCP, secUDP), readyEndpoint(secondaryV6, "node1")),
	} {
		if _, err := e.client.DiscoveryV1().EndpointSlices(ns).Create(ctx, sl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	nodePorts := func(s *v1.Service) (tcp, udp int) {
		for _, p := range s.Spec.Ports {
			if p.Protocol == v1.ProtocolUDP {
				udp = int(p.NodePort)
			} else {
				tcp = int(p.NodePort)
			}
		}
		return tcp, udp
	}
	// wantFrom is the client address an endpoint on epNode sees when lbNode
	// load-balanced the connection (see the comment at the top).
	wantFrom := func(lbNode, epNode string, v6 bool) netip.Addr {
		if lbNode == epNode {
			return masqRouter[v6]
		}
		m, _ := e.state.Member(lbNode)
		return memberIP(t, m, v6)
	}
	protos := []struct {
		name string
		udp  bool
	}{{"tcp", false}, {"udp", true}}

	mx := &matrix{}
	defer mx.log(t)

	t.Run("clusterip", func(t *testing.T) {
		type source struct {
			name, netns, node string
		}
		sources := []source{
			{"pod@node1", podOn["node1"].netns, "node1"},
			{"pod@node2", podOn["node2"].netns, "node2"},
			{"host@node1", n1.Netns, "node1"},
			{"host@node2", n2.Netns, "node2"},
		}
		for _, tg := range targets {
			vips := svcAddrs(t, tg.svc)
			for _, src := range sources {
				for _, vip := range vips {
					for _, pr := range protos {
						port := 80
						if pr.udp {
							port = 53
						}
						name := fmt.Sprintf("%s/%s/%s/%s", tg.svc.Name, src.name, pr.name, family(vip.Is6()))
						t.Run(name, func(t *testing.T) {
							mx.cell(t, "clusterip "+name, src.netns, pr.udp, vip, port, tg.backend, wantFrom(src.node, tg.node, vip.Is6()))
						})
					}
				}
			}
		}
	})

	t.Run("nodeport", func(t *testing.T) {
		type source struct {
			name, netns string
		}
		for _, tg := range targets {
			tcpNP, udpNP := nodePorts(tg.svc)
			for _, lb := range []*testbed.Member{n1, n2} {
				// ext1, and the host of the other node.
				other := n2
				if lb == n2 {
					other = n1
				}
				// A host to its own node IP's NodePort is DNATed to the
				// ClusterIP by the agent's host NAT (package hostnat),
				// then takes the host -> ClusterIP path: the endpoint
				// sees what it sees from that host's ClusterIP cells.
				sources := []source{{"host@" + other.Name, other.Netns}, {"host@" + lb.Name, lb.Netns}}
				if ext, ok := e.state.Member("ext1"); ok {
					sources = append(sources, source{"ext1", ext.Netns})
				}
				for _, src := range sources {
					for _, v6 := range []bool{false, true} {
						dst := memberIP(t, lb, v6)
						for _, pr := range protos {
							port := tcpNP
							if pr.udp {
								port = udpNP
							}
							name := fmt.Sprintf("%s/%s->%s/%s/%s", tg.svc.Name, src.name, lb.Name, pr.name, family(v6))
							t.Run(name, func(t *testing.T) {
								mx.cell(t, "nodeport "+name, src.netns, pr.udp, dst, port, tg.backend, wantFrom(lb.Name, tg.node, v6))
							})
						}
					}
				}
			}
		}
	})

	// ExternalIPs (spare fabric addresses routed to node1 from ext1) of
	// services with a host endpoint on node1 (the hairpin: 169.254.169.1)
	// and on node2 (SNAT to node1's IP).
	t.Run("externalip-from-external", func(t *testing.T) {
		ext, ok := e.state.Member("ext1")
		if !ok {
			t.Skip("no ext1 in the topology")
		}
		for i, tg := range targets[:2] {
			eip := netip.AddrFrom4([4]byte{172, 30, 0, byte(220 + i)}) // 172.30.0.2xx: one range per test file
			if _, err := e.client.CoreV1().Services(ns).Create(ctx, newService(tg.svc.Name+"-eip", v1.ServiceSpec{
				Selector:    tg.svc.Spec.Selector,
				ExternalIPs: []string{eip.String()},
				Ports: []v1.ServicePort{
					{Name: "http", Port: 80, TargetPort: intstr.FromInt32(hostnetTCP), Protocol: v1.ProtocolTCP},
					{Name: "echo", Port: 53, TargetPort: intstr.FromInt32(hostnetUDP), Protocol: v1.ProtocolUDP},
				},
			}), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			routeVia(t, ext, eip, memberIP(t, n1, false))
			for _, pr := range protos {
				port := 80
				if pr.udp {
					port = 53
				}
				name := fmt.Sprintf("%s-eip/ext1->%s/%s/ipv4", tg.svc.Name, eip, pr.name)
				t.Run(name, func(t *testing.T) {
					mx.cell(t, "externalip "+name, ext.Netns, pr.udp, eip, port, tg.backend, wantFrom("node1", tg.node, false))
				})
			}
		}
	})

	// A service whose endpoints are a host-network endpoint (H1) and a
	// pod: every endpoint answers from either node.
	t.Run("mixed", func(t *testing.T) {
		pod := podOn["node2"]
		mkSvc(t, "mixed", nil, hostnetTCP, hostnetUDP)
		for _, v6 := range []bool{false, true} {
			at := discovery.AddressTypeIPv4
			if v6 {
				at = discovery.AddressTypeIPv6
			}
			sl := sliceFor("mixed", "mixed-"+family(v6), at, epPorts(hostnetTCP, hostnetUDP),
				readyEndpoint(memberIP(t, n1, v6), "node1"), readyEndpoint(pod.ip(v6), pod.node))
			if _, err := e.client.DiscoveryV1().EndpointSlices(ns).Create(ctx, sl, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		s, err := e.client.CoreV1().Services(ns).Get(ctx, "mixed", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]bool{"hostweb-node1": true, pod.name: true}
		for _, src := range []struct{ name, netns string }{
			{"pod@node1", podOn["node1"].netns}, {"host@node1", n1.Netns}, {"host@node2", n2.Netns},
		} {
			for _, vip := range svcAddrs(t, s) {
				for _, pr := range protos {
					port := 80
					if pr.udp {
						port = 53
					}
					name := fmt.Sprintf("mixed/%s/%s/%s", src.name, pr.name, family(vip.Is6()))
					t.Run(name, func(t *testing.T) {
						reach(t, name, src.netns, pr.udp, vip, port, want, netip.Addr{})
						mx.add(cellResult{name: "clusterip " + name, client: "(both endpoints answered)", ok: !t.Failed()})
					})
				}
			}
		}
	})

	// breth0 on node1 carried the seed's flows: the host-to-service SNAT
	// and its return, the hairpin to the node IP (169.254.169.2) and to
	// the secondary address, the second masquerade (zone 64002) and its
	// return, and the commits toward the uplink (zone 64000).
	t.Run("breth0-flows", func(t *testing.T) {
		lines := dumpFlowStats(t, n1, "breth0")
		n1v4 := memberIP(t, n1, false).String()
		n1v6 := memberIP(t, n1, true).String()
		checks := []struct {
			what  string
			parts []string
		}{
			{"host to service (zone 64001 SNAT)", []string{"priority=500", "in_port=LOCAL", "nw_dst=10.96.0.0/16", "zone=64001", "nat(src=169.254.169.2)"}},
			{"service replies to the host", []string{"priority=500", "nw_src=10.96.0.0/16", "nw_dst=169.254.169.2", "zone=64001"}},
			{"hairpin to the node IP (169.254.169.2)", []string{"priority=500", "nw_src=" + n1v4 + ",nw_dst=169.254.169.2", "zone=64001", "nat(dst=" + n1v4 + ")"}},
			{"hairpin to the secondary IP", []string{"priority=500", "nw_src=" + n1v4 + ",nw_dst=" + secondaryV4.String(), "zone=64001"}},
			{"hairpin replies (zone 64002)", []string{"priority=500", "in_port=LOCAL", "nw_dst=169.254.169.1", "zone=64002"}},
			{"hairpin to the node IP, IPv6", []string{"priority=500", "ipv6_src=" + n1v6 + ",ipv6_dst=fd69::2", "zone=64001"}},
			{"hairpin to the secondary IP, IPv6", []string{"priority=500", "ipv6_src=" + n1v6 + ",ipv6_dst=" + secondaryV6.String(), "zone=64001"}},
			{"table 4: SNAT to 169.254.169.1 (zone 64002)", []string{"table=4", "ip", "zone=64002", "nat(src=169.254.169.1)"}},
			{"table 4: SNAT to fd69::1 (zone 64002)", []string{"table=4", "ipv6", "zone=64002", "nat(src=fd69::1)"}},
			{"table 5: hairpin return (zone 64001)", []string{"table=5", "priority=100,ip actions=ct(commit,table=2,zone=64001,nat)"}},
			{"table 5: hairpin return, IPv6 (zone 64001)", []string{"table=5", "priority=100,ipv6 actions=ct(commit,table=2,zone=64001,nat)"}},
			{"commit from br0 to the uplink (zone 64000, mark 0x1)", []string{"priority=100", "zone=64000", "0x1->ct_mark"}},
			{"uplink replies back to br0", []string{"table=1", "ct_mark=0x1", "ip"}},
		}
		for _, c := range checks {
			n, l, ok := flowPackets(lines, c.parts...)
			switch {
			case !ok:
				t.Errorf("breth0 on node1: no flow for %s (want one containing %q)", c.what, c.parts)
			case n == 0:
				t.Errorf("breth0 on node1: %s: no packets: %s", c.what, l)
			default:
				t.Logf("%s: n_packets=%d: %s", c.what, n, l)
			}
		}
		if t.Failed() {
			t.Logf("breth0 on node1:\n%s", strings.Join(lines, "\n"))
		}
	})

	// Nothing was dropped for exceeding the recirculation limit, on
	// either node; and the longest chain of recirculations the datapath
	// holds right after the longest path (host -> ClusterIP -> host
	// endpoint on the same node, and the secondary IP) carried traffic.
	t.Run("recirculation-budget", func(t *testing.T) {
		for _, tg := range targets {
			if tg.node != "node1" {
				continue
			}
			for _, vip := range svcAddrs(t, tg.svc) {
				if _, _, err := httpGet(ctx, n1.Netns, vip, 80); err != nil {
					t.Errorf("host@node1 -> %s %s: %v", tg.svc.Name, vip, err)
				}
			}
		}
		// docs/pipeline.md: host -> ClusterIP -> host endpoint on this
		// node (the node IP, or a secondary IP) is the longest path, and
		// takes all six.
		for _, tg := range targets {
			if tg.node != "node1" {
				continue
			}
			for _, vip := range svcAddrs(t, tg.svc) {
				root := "zone=64001,nat(src=" + conntrackHostMasq(vip.Is6()) + ")"
				depth, chain, err := recircChain(n1, root, vip, 80)
				if err != nil {
					t.Error(err)
					continue
				}
				t.Logf("node1: host -> %s %s -> %s: %d recirculations\n%s", tg.svc.Name, vip, tg.backend, depth, strings.Join(chain, "\n"))
				if depth != maxRecirculations {
					t.Errorf("node1: host -> %s %s: %d recirculations, want the documented %d", tg.svc.Name, vip, depth, maxRecirculations)
				}
			}
		}
		// outside -> NodePort -> host endpoint on this node takes six too:
		// its first recirculation is br0's un-SNAT lookup for the node IP.
		if ext, ok := e.state.Member("ext1"); ok {
			tcpNP, _ := nodePorts(targets[0].svc)
			for _, v6 := range []bool{false, true} {
				dst := memberIP(t, n1, v6)
				if _, _, err := httpGet(ctx, ext.Netns, dst, tcpNP); err != nil {
					t.Errorf("ext1 -> %s:%d: %v", dst, tcpNP, err)
					continue
				}
				depth, chain, err := recircChain(n1, "zone=65001,nat)", dst, tcpNP)
				if err != nil {
					t.Error(err)
					continue
				}
				t.Logf("node1: ext1 -> NodePort %s:%d -> hostweb-node1: %d recirculations\n%s", dst, tcpNP, depth, strings.Join(chain, "\n"))
				if depth != maxRecirculations {
					t.Errorf("node1: ext1 -> NodePort %s:%d: %d recirculations, want the documented %d", dst, tcpNP, depth, maxRecirculations)
				}
			}
		}
		for _, m := range []*testbed.Member{n1, n2} {
			out, err := appctl(m, "coverage/read-counter", "datapath_drop_recirc_error")
			if err != nil {
				t.Fatalf("coverage on %s: %v\n%s", m.Name, err, out)
			}
			if v, err := strconv.Atoi(strings.TrimSpace(out)); err != nil || v != 0 {
				t.Errorf("%s: datapath_drop_recirc_error = %q, want 0", m.Name, strings.TrimSpace(out))
			}
			if b, err := os.ReadFile(m.OVSRundir + "/ovs-vswitchd.log"); err == nil && strings.Contains(string(b), "recirculation depth") {
				t.Errorf("%s: ovs-vswitchd reports packets over the recirculation depth", m.Name)
			}
		}
	})

	// The agent follows the host's addresses: the secondary-IP flow leaves
	// breth0 when the address leaves lo, and comes back with it, within a
	// second or two; the cell passes again.
	t.Run("secondary-address-follows", func(t *testing.T) {
		secFlow := func() bool {
			_, _, ok := flowPackets(dumpFlowStats(t, n1, "breth0"), "priority=500", "nw_dst="+secondaryV4.String()+" ")
			return ok
		}
		if !secFlow() {
			t.Fatalf("breth0 on node1: no secondary-IP flow for %s to begin with", secondaryV4)
		}
		start := time.Now()
		ipIn(t, n1, "addr", "del", secondaryV4.String()+"/32", "dev", "lo")
		eventually(t, 5*time.Second, "secondary-IP flow removed", func(context.Context) error {
			if secFlow() {
				return fmt.Errorf("breth0 still has the flow for %s", secondaryV4)
			}
			return nil
		})
		t.Logf("flow for %s gone %s after the address left lo", secondaryV4, time.Since(start).Round(time.Millisecond))
		start = time.Now()
		ipIn(t, n1, "addr", "add", secondaryV4.String()+"/32", "dev", "lo")
		eventually(t, 5*time.Second, "secondary-IP flow back", func(context.Context) error {
			if !secFlow() {
				return fmt.Errorf("breth0 has no flow for %s yet", secondaryV4)
			}
			return nil
		})
		t.Logf("flow for %s back %s after the address came back", secondaryV4, time.Since(start).Round(time.Millisecond))
		// The listener bound to the address survived it (it was bound
		// before); the cell passes again.
		vip := svcAddrs(t, targets[2].svc)[0]
		mx.cell(t, "clusterip hostsec/host@node1/tcp/ipv4 (address re-added)", n1.Netns, false, vip, 80, "secondary-node1", masqRouter[false])
	})
}
