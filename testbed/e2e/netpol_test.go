package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"nodeflow/agent/features/networkpolicyfeature"
	"nodeflow/model/networkpolicy"
)

// npMatrix is the upstream Netpol tests' matrix, with real traffic: pods
// a, b and c (labels app=a, ...) in three namespaces, each serving HTTP on
// TCP 8080 and an echo on UDP 5353, both families, spread over both nodes.
type npMatrix struct {
	e    *env
	ns   []string // x, y, z
	pods map[string]netPod
	meta map[string]*networkpolicy.Pod
}

func newNPMatrix(t *testing.T, e *env, prefix string) *npMatrix {
	t.Helper()
	m := &npMatrix{e: e, pods: map[string]netPod{}, meta: map[string]*networkpolicy.Pod{}}
	for _, n := range []string{"x", "y", "z"} {
		ns := createNamespace(t, e, prefix+"-"+n)
		m.ns = append(m.ns, ns)
		for _, name := range []string{"a", "b", "c"} {
			p := deployPods(t, e, ns, name, 1)[0]
			key := ns + "/" + name
			m.pods[key] = p
			m.meta[key] = &networkpolicy.Pod{Namespace: ns, Name: name, Labels: map[string]string{"app": name},
				Ports: []v1.ContainerPort{{ContainerPort: 8080}, {ContainerPort: 5353, Protocol: v1.ProtocolUDP}}}
		}
	}
	return m
}

// probeResult is one probe: from, to, protocol, family, and whether it got
// through.
type probeResult struct {
	from, to, proto string
	v6, ok          bool
}

func (r probeResult) String() string {
	return fmt.Sprintf("%s -> %s %s/%s", r.from, r.to, r.proto, family(r.v6))
}

// probeAll asks every pod from every other pod, TCP and UDP, both
// families, in parallel, each with a short deadline.
func (m *npMatrix) probeAll() []probeResult {
	keys := slices.Sorted(maps.Keys(m.pods))
	var jobs []probeResult
	for _, from := range keys {
		for _, to := range keys {
			if from == to {
				continue
			}
			for _, proto := range []string{"tcp", "udp"} {
				for _, v6 := range []bool{false, true} {
					jobs = append(jobs, probeResult{from: from, to: to, proto: proto, v6: v6})
				}
			}
		}
	}
	sem := make(chan struct{}, 48)
	var wg sync.WaitGroup
	for i := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func(j *probeResult) {
			defer func() { <-sem; wg.Done() }()
			src, dst := m.pods[j.from], m.pods[j.to]
			ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
			defer cancel()
			var err error
			if j.proto == "tcp" {
				_, _, err = httpGet(ctx, src.netns, dst.ip(j.v6), 8080)
			} else {
				_, _, err = udpEcho(ctx, src.netns, dst.ip(j.v6), 5353)
			}
			j.ok = err == nil
		}(&jobs[i])
	}
	wg.Wait()
	return jobs
}

// expect waits until the matrix reaches exactly what netpol's truth table
// says for nps, and fails with the differences when it does not.
func (m *npMatrix) expect(t *testing.T, what string, nps ...*networkingv1.NetworkPolicy) {
	t.Helper()
	cl := &networkpolicy.Cluster{Namespaces: map[string]map[string]string{}}
	for _, ns := range m.ns {
		cl.Namespaces[ns] = map[string]string{"kubernetes.io/metadata.name": ns}
	}
	for _, np := range nps {
		p, err := networkpolicy.Compile(np)
		if err != nil {
			t.Fatal(err)
		}
		cl.Policies = append(cl.Policies, p)
	}
	want := func(r probeResult) bool {
		proto, port := v1.ProtocolTCP, int32(8080)
		if r.proto == "udp" {
			proto, port = v1.ProtocolUDP, 5353
		}
		src, dst := m.pods[r.from], m.pods[r.to]
		return cl.Verdict(networkpolicy.Conn{
			Src: networkpolicy.Endpoint{Pod: m.meta[r.from], Addr: src.ip(r.v6)}, Dst: networkpolicy.Endpoint{Pod: m.meta[r.to], Addr: dst.ip(r.v6)},
			Protocol: proto, Port: port})
	}
	eventually(t, 60*time.Second, what, func(context.Context) error {
		var wrong []string
		denied := 0
		for _, r := range m.probeAll() {
			w := want(r)
			if !w {
				denied++
			}
			if r.ok != w {
				wrong = append(wrong, fmt.Sprintf("%s: got through %v, want %v", r, r.ok, w))
			}
		}
		if len(wrong) > 0 {
			return fmt.Errorf("%d of the probes wrong (%d should be denied):\n%s", len(wrong), denied, strings.Join(wrong, "\n"))
		}
		t.Logf("%s: the matrix is as the truth table says (%d probes denied)", what, denied)
		return nil
	})
}

func (m *npMatrix) apply(t *testing.T, np *networkingv1.NetworkPolicy) {
	t.Helper()
	ctx := context.Background()
	c := m.e.client.NetworkingV1().NetworkPolicies(np.Namespace)
	if old, err := c.Get(ctx, np.Name, metav1.GetOptions{}); err == nil {
		np.ResourceVersion = old.ResourceVersion
		if _, err := c.Update(ctx, np, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		return
	}
	if _, err := c.Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func npPolicy(ns, name string, spec networkingv1.NetworkPolicySpec) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
}

func npApp(app string) metav1.LabelSelector {
	return metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
}

func npNamespace(ns string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}
}

func npPort(proto v1.Protocol, port int32) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: ptr.To(proto), Port: ptr.To(intstr.FromInt32(port))}
}

// TestNetworkPolicy checks the policy cases of the upstream Netpol tests
// on the matrix with real traffic, TCP and UDP, IPv4 and IPv6, each
// against netpol's truth table: no policy; a default deny of ingress; an
// allowance from another namespace on one port; egress limited to one
// namespace on UDP; an ipBlock peer (a /32 and a /128) with pod and
// namespace selectors; egress to a ClusterIP judged by the endpoint it
// reaches; and everything deleted.
func TestNetworkPolicy(t *testing.T) {
	e := up(t)
	requireAgent(t, e)
	m := newNPMatrix(t, e, "e2e-np")
	x, y, z := m.ns[0], m.ns[1], m.ns[2]
	var nps []*networkingv1.NetworkPolicy
	step := func(what string, np *networkingv1.NetworkPolicy) {
		t.Helper()
		m.apply(t, np)
		nps = slices.DeleteFunc(nps, func(p *networkingv1.NetworkPolicy) bool { return p.Namespace == np.Namespace && p.Name == np.Name })
		nps = append(nps, np)
		m.expect(t, what, nps...)
	}
	m.expect(t, "no policy")

	step("x denies ingress", npPolicy(x, "deny-ingress", networkingv1.NetworkPolicySpec{
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}))
	// x's denied packets are counted, and logged once x asks for it.
	xa, xaNode := m.pods[x+"/a"], member(t, e, m.pods[x+"/a"].node)
	nsx, err := e.client.CoreV1().Namespaces().Get(context.Background(), x, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if nsx.Annotations == nil {
		nsx.Annotations = map[string]string{}
	}
	nsx.Annotations[networkpolicyfeature.LogAnnotation] = "deny"
	if _, err := e.client.CoreV1().Namespaces().Update(context.Background(), nsx, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "x/a's denied packets logged and counted", func(ctx context.Context) error {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, _, _ = httpGet(pctx, m.pods[y+"/a"].netns, xa.ip(false), 8080)
		cancel()
		b, err := os.ReadFile(filepath.Join(xaNode.Dir, "agent.log"))
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), `msg="NetworkPolicy denied a packet"`) || !strings.Contains(string(b), "namespace="+x) {
			return fmt.Errorf("no denied packet of namespace %s in %s's agent log", x, xaNode.Name)
		}
		text, err := agentMetrics(xaNode)
		if err != nil {
			return err
		}
		series := fmt.Sprintf(`nodeflow_netpol_denied_packets_total{direction="ingress",namespace=%q,pod=%q}`, x, xa.name)
		if v := seriesValue(text, series); v <= 0 {
			return fmt.Errorf("%s = %v", series, v)
		}
		return nil
	})
	step("x/a admits y on TCP 8080", npPolicy(x, "a-from-y", networkingv1.NetworkPolicySpec{
		PodSelector: npApp("a"),
		Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: npNamespace(y)}},
			Ports: []networkingv1.NetworkPolicyPort{npPort(v1.ProtocolTCP, 8080)}}}}))
	step("y/b reaches only z, on UDP", npPolicy(y, "b-to-z", networkingv1.NetworkPolicySpec{
		PodSelector: npApp("b"),
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
		Egress: []networkingv1.NetworkPolicyEgressRule{{
			To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: npNamespace(z)}},
			Ports: []networkingv1.NetworkPolicyPort{npPort(v1.ProtocolUDP, 5353)}}}}))
	ya := m.pods[y+"/a"]
	step("z/c admits y/a's addresses and z/b", npPolicy(z, "c-from-blocks", networkingv1.NetworkPolicySpec{
		PodSelector: npApp("c"),
		Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
			{IPBlock: &networkingv1.IPBlock{CIDR: ya.ip(false).String() + "/32"}},
			{IPBlock: &networkingv1.IPBlock{CIDR: ya.ip(true).String() + "/128"}},
			{PodSelector: ptr.To(npApp("b"))},
		}}}}))

	// Egress is judged after the DNAT, by the endpoint: y/b, whose egress
	// allows UDP to z's pods only, reaches a ClusterIP in front of z/a
	// (which nothing isolates) over UDP and not over TCP; y/a over both.
	svc := createService(t, e, z, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "za"},
		Spec: v1.ServiceSpec{Selector: map[string]string{"app": "a"}, IPFamilyPolicy: ptr.To(v1.IPFamilyPolicyRequireDualStack),
			Ports: webPorts},
	})
	yb := m.pods[y+"/b"]
	for _, vip := range svcAddrs(t, svc) {
		reach(t, "y/b to z's ClusterIP "+vip.String()+" over UDP", yb.netns, true, vip, 53, map[string]bool{m.pods[z+"/a"].name: true}, netip.Addr{})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, _, err := httpGet(ctx, yb.netns, vip, 80)
		cancel()
		if err == nil {
			t.Errorf("y/b reached z's ClusterIP %s over TCP, which its egress policy denies", vip)
		}
		reach(t, "y/a to z's ClusterIP "+vip.String(), ya.netns, false, vip, 80, map[string]bool{m.pods[z+"/a"].name: true}, netip.Addr{})
	}

	for _, np := range nps {
		if err := e.client.NetworkingV1().NetworkPolicies(np.Namespace).Delete(context.Background(), np.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	m.expect(t, "every policy deleted")
}

// TestNetworkPolicyUnderTraffic changes policies that allow the traffic of
// a Service's clients while they ask it without a pause: creating them,
// changing them and deleting them loses no request and no keep-alive
// connection.
func TestNetworkPolicyUnderTraffic(t *testing.T) {
	e, ns := agentNamespace(t, "e2e-np-traffic")
	clients, vips := serviceUnderTraffic(t, e, ns)
	tr := startServiceTraffic(t, clients, vips)
	defer tr.finish(t, "NetworkPolicy changes")
	c := e.client.NetworkingV1().NetworkPolicies(ns)
	ctx := context.Background()
	webIngress := npPolicy(ns, "web-ingress", networkingv1.NetworkPolicySpec{
		PodSelector: npApp("web"),
		Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From:  []networkingv1.NetworkPolicyPeer{{PodSelector: ptr.To(npApp("client"))}},
			Ports: []networkingv1.NetworkPolicyPort{npPort(v1.ProtocolTCP, 8080), npPort(v1.ProtocolUDP, 5353)}}}})
	if _, err := c.Create(ctx, webIngress, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr.settle(t, "an ingress policy on the web pods")
	clientEgress := npPolicy(ns, "client-egress", networkingv1.NetworkPolicySpec{
		PodSelector: npApp("client"),
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
		Egress: []networkingv1.NetworkPolicyEgressRule{{
			To:    []networkingv1.NetworkPolicyPeer{{PodSelector: ptr.To(npApp("web"))}},
			Ports: []networkingv1.NetworkPolicyPort{npPort(v1.ProtocolTCP, 8080), npPort(v1.ProtocolUDP, 5353)}}}})
	if _, err := c.Create(ctx, clientEgress, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr.settle(t, "an egress policy on the clients")
	got, err := c.Get(ctx, webIngress.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Spec.Ingress = append(got.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{
		From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "192.0.2.0/24"}}}})
	got.Spec.Ingress[0].Ports = append(got.Spec.Ingress[0].Ports, npPort(v1.ProtocolTCP, 9999))
	if _, err := c.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr.settle(t, "the ingress policy changed")
	for _, name := range []string{webIngress.Name, clientEgress.Name} {
		if err := c.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tr.settle(t, "the policies deleted")
}

// TestNetworkPolicyUnidle is the unidling cell: an idled Service whose
// pods admit one client pod ("ok") and not another ("no"), both of which
// connect while it sleeps. The agent holds both first SYNs and re-injects
// them through the whole pipeline once the pod is back: the admitted
// client is answered on its first attempt (the held SYN itself), the other
// never gets through, and its held SYN is one the pod's drop flow counted.
func TestNetworkPolicyUnidle(t *testing.T) {
	e, ns := agentNamespace(t, "e2e-np-unidle")
	ok := deployPods(t, e, ns, "ok", 1)[0]
	no := deployPods(t, e, ns, "no", 1)[0]
	deployPods(t, e, ns, "sleepy", 1)
	ctx := context.Background()
	if _, err := e.client.NetworkingV1().NetworkPolicies(ns).Create(ctx, npPolicy(ns, "sleepy", networkingv1.NetworkPolicySpec{
		PodSelector: npApp("sleepy"),
		Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From:  []networkingv1.NetworkPolicyPeer{{PodSelector: ptr.To(npApp("ok"))}},
			Ports: []networkingv1.NetworkPolicyPort{npPort(v1.ProtocolTCP, 8080)}}}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := createService(t, e, ns, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "sleepy"},
		Spec: v1.ServiceSpec{Selector: map[string]string{"app": "sleepy"}, IPFamilyPolicy: ptr.To(v1.IPFamilyPolicyRequireDualStack),
			Ports: []v1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: v1.ProtocolTCP}}},
	})
	cip := netip.MustParseAddr(svc.Spec.ClusterIPs[0])
	eventually(t, 30*time.Second, "ok reaches the service before idling", func(ctx context.Context) error {
		_, _, err := httpGet(ctx, ok.netns, cip, 80)
		return err
	})
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if _, _, err := httpGet(dctx, no.netns, cip, 80); err == nil {
		t.Fatal("no reached the service before idling")
	}
	cancel()

	svc, err := e.client.CoreV1().Services(ns).Get(ctx, "sleepy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Annotations = map[string]string{"idling.alpha.openshift.io/idled-at": time.Now().UTC().Format(time.RFC3339),
		"idling.alpha.openshift.io/unidle-targets": `[{"kind":"Deployment","name":"sleepy","group":"apps","replicas":1}]`}
	if _, err := e.client.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	scale(t, e, ns, "sleepy", 0)
	for _, c := range []netPod{ok, no} {
		m := member(t, e, c.node)
		eventually(t, 60*time.Second, "the idled port caught on "+c.node, func(context.Context) error {
			lines, err := tryDumpFlows(m, "br0")
			if err != nil {
				return err
			}
			for _, l := range lines {
				if strings.Contains(l, "nw_dst="+cip.String()+",") && strings.Contains(l, "controller(") {
					return nil
				}
			}
			return fmt.Errorf("no unidle flow for %s yet", cip)
		})
	}

	// The unidler: scale back up at the first NeedPods.
	uctx, ucancel := context.WithTimeout(ctx, 60*time.Second)
	defer ucancel()
	go func() {
		for uctx.Err() == nil {
			evs, err := e.client.CoreV1().Events(ns).List(uctx, metav1.ListOptions{FieldSelector: "reason=NeedPods,involvedObject.name=sleepy"})
			if err == nil && len(evs.Items) > 0 {
				_ = scaleErr(e, ns, "sleepy", 1)
				return
			}
			select {
			case <-uctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	type result struct {
		took    time.Duration
		retrans int
		err     error
	}
	connect := func(c netPod, timeout time.Duration) result {
		before := retransSegs(t, c.netns)
		start := time.Now()
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		_, _, err := httpGet(cctx, c.netns, cip, 80)
		return result{took: time.Since(start), retrans: retransSegs(t, c.netns) - before, err: err}
	}
	var wg sync.WaitGroup
	var okRes, noRes result
	wg.Add(2)
	go func() { defer wg.Done(); okRes = connect(ok, 40*time.Second) }()
	go func() { defer wg.Done(); noRes = connect(no, 15*time.Second) }()
	wg.Wait()
	if okRes.err != nil {
		t.Fatalf("the admitted client: %v after %s", okRes.err, okRes.took)
	}
	t.Logf("the admitted client was answered after %s, %d segments retransmitted", okRes.took.Round(time.Millisecond), okRes.retrans)
	if okRes.took < 900*time.Millisecond && okRes.retrans != 0 {
		t.Errorf("answered after %s, yet %d segments were retransmitted: the held SYN was not the one answered", okRes.took, okRes.retrans)
	}
	if noRes.err == nil {
		t.Fatalf("the client the policy does not admit reached the woken service (after %s)", noRes.took)
	}
	// Its held SYN was re-injected and judged: the sleepy pod's drop flow
	// counted it (and its retransmissions).
	pods, err := e.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=sleepy"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("sleepy pods: %v, %v", pods, err)
	}
	sleepy := pods.Items[0]
	m := member(t, e, sleepy.Spec.NodeName)
	var drops int
	for _, l := range dumpFlowStats(t, m, "br0") {
		if strings.Contains(l, "table=65,") && strings.Contains(l, "priority=100,") && strings.Contains(l, "nw_dst="+sleepy.Status.PodIPs[0].IP+" ") {
			drops = packetsOf(l)
		}
	}
	if drops == 0 {
		t.Errorf("the sleepy pod's ingress drop flow on %s counted nothing: the held SYN of the client it does not admit was not judged", m.Name)
	}
	t.Logf("the sleepy pod's drop flow counted %d packets of the client it does not admit", drops)
}
