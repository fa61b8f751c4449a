package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"nodeflow/internal/testutil/flowtest"
	"nodeflow/model/service"
	"nodeflow/testbed"
)

// TestUnidle idles a Deployment-backed Service (annotation, zero
// replicas, as `nodeflow idle` does) and connects to its ClusterIP from a
// pod: the agent catches the SYN in br0, emits one NeedPods event on the
// Service, holds the SYN, and re-injects it once the pods are back, so the
// client's first connect succeeds. The test plays the unidler: it scales
// the Deployment back up when it sees the event.
func TestUnidle(t *testing.T) {
	e, ns := agentNamespace(t, "e2e-unidle")
	clients := deployPods(t, e, ns, "client", 2)
	deployPods(t, e, ns, "sleepy", 1)
	svc := createService(t, e, ns, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "sleepy"},
		Spec: v1.ServiceSpec{Selector: map[string]string{"app": "sleepy"}, IPFamilyPolicy: ptrPolicy(v1.IPFamilyPolicyRequireDualStack),
			Ports: []v1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: v1.ProtocolTCP}}},
	})
	ctx := context.Background()
	cip := netip.MustParseAddr(svc.Spec.ClusterIPs[0])
	client := clients[0]
	eventually(t, 30*time.Second, "service answers before idling", func(ctx context.Context) error {
		_, _, err := httpGet(ctx, client.netns, cip, 80)
		return err
	})

	// Idle it: the annotation first, then zero replicas.
	svc.Annotations = map[string]string{service.IdledAtAnnotation: time.Now().UTC().Format(time.RFC3339),
		"idling.alpha.openshift.io/unidle-targets": `[{"kind":"Deployment","name":"sleepy","group":"apps","replicas":1}]`}
	if _, err := e.client.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	scale(t, e, ns, "sleepy", 0)
	m, _ := e.state.Member(client.node)
	eventually(t, 60*time.Second, "the idled port caught on "+client.node, func(context.Context) error {
		lines, err := tryDumpFlows(m, "br0")
		if err != nil {
			return err
		}
		for _, l := range lines {
			if strings.Contains(l, "priority=195") && strings.Contains(l, "nw_dst="+cip.String()+",") && strings.Contains(l, "controller(") {
				return nil
			}
		}
		return fmt.Errorf("no priority-195 unidle flow for %s yet", cip)
	})

	// The unidler: scale back up at the first NeedPods.
	var wg sync.WaitGroup
	wg.Add(1)
	asked := make(chan time.Time, 1)
	uctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	go func() {
		defer wg.Done()
		for uctx.Err() == nil {
			evs, err := e.client.CoreV1().Events(ns).List(uctx, metav1.ListOptions{FieldSelector: "reason=NeedPods,involvedObject.name=sleepy"})
			if err == nil && len(evs.Items) > 0 {
				asked <- time.Now()
				_ = scaleErr(e, ns, "sleepy", 1)
				return
			}
			select {
			case <-uctx.Done():
			case <-time.After(20 * time.Millisecond): // the unidler's polling interval
			}
		}
	}()

	before := retransSegs(t, client.netns)
	classifier0, security0 := podFlowPackets(t, m, client.ip(false))
	sent0 := flowtest.SNMPCounter(t, client.netns, "Ip", "OutRequests")
	late0 := lateUnidlePackets(t, m)
	start := time.Now()
	cctx, ccancel := context.WithTimeout(ctx, 40*time.Second)
	pod, _, err := httpGet(cctx, client.netns, cip, 80)
	ccancel()
	took := time.Since(start)
	wg.Wait()
	if err != nil {
		t.Fatalf("first connection to the idled service: %v (after %s)", err, took)
	}
	if !strings.HasPrefix(pod, "sleepy-") {
		t.Errorf("answered by %q, want a sleepy pod", pod)
	}
	retrans := retransSegs(t, client.netns) - before
	t.Logf("idled service answered the first connection after %s; the client retransmitted %d segments", took.Round(time.Millisecond), retrans)
	// The held SYN itself got through: within the client's first
	// retransmission timer (1 s) nothing was retransmitted.
	if took < 900*time.Millisecond && retrans != 0 {
		t.Errorf("answered after %s, yet the client retransmitted %d segments: the held SYN was not the one answered", took, retrans)
	}
	// The held SYN went through the whole pipeline twice: caught, then
	// re-injected. br0's classifier (table 0) and port security (table
	// 10) counted it twice, every other IPv4 packet of the client once,
	// but for late packets: those that a catch flow still cached in the
	// datapath sent to the agent just after the release (on loaded
	// cores, the client's next segments), which it re-injects too.
	eventually(t, 10*time.Second, "the re-injected SYN counted on the client's classifier and port-security flows", func(context.Context) error {
		classifier, security := podFlowPackets(t, m, client.ip(false))
		sent := flowtest.SNMPCounter(t, client.netns, "Ip", "OutRequests") - sent0
		late := lateUnidlePackets(t, m) - late0
		if want := sent + 1 + late; security-security0 != want || classifier-classifier0 < want {
			return fmt.Errorf("the client sent %d IPv4 packets, %d came late; table 0 counted %d, table 10 %d; want %d on table 10 and at least as many on table 0",
				sent, late, classifier-classifier0, security-security0, want)
		}
		return nil
	})
	select {
	case at := <-asked:
		t.Logf("NeedPods seen %s after the connect", at.Sub(start).Round(time.Millisecond))
	default:
		t.Error("no NeedPods event")
	}
	evs, err := e.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=NeedPods,involvedObject.name=sleepy"})
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	for _, ev := range evs.Items {
		count += int(max(ev.Count, 1))
		if want := fmt.Sprintf("The service-port %s/sleepy:http needs pods.", ns); ev.Message != want || ev.InvolvedObject.Kind != "Service" {
			t.Errorf("event %q on %s, want %q on the Service", ev.Message, ev.InvolvedObject.Kind, want)
		}
	}
	if count != 1 {
		t.Errorf("%d NeedPods events, want exactly 1 for one wait cycle of one port", count)
	}
	// Unidled: the catch flows are gone from br0.
	eventually(t, 10*time.Second, "unidle flows removed", func(context.Context) error {
		lines, err := tryDumpFlows(m, "br0")
		if err != nil {
			return err
		}
		for _, l := range lines {
			if strings.Contains(l, "priority=195") && strings.Contains(l, "nw_dst="+cip.String()+",") {
				return fmt.Errorf("still there: %s", l)
			}
		}
		return nil
	})
}

// scale sets a Deployment's replicas.
func scale(t *testing.T, e *env, ns, name string, n int32) {
	t.Helper()
	if err := scaleErr(e, ns, name, n); err != nil {
		t.Fatal(err)
	}
}

func scaleErr(e *env, ns, name string, n int32) error {
	ctx := context.Background()
	s, err := e.client.AppsV1().Deployments(ns).GetScale(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	s.Spec.Replicas = n
	_, err = e.client.AppsV1().Deployments(ns).UpdateScale(ctx, name, s, metav1.UpdateOptions{})
	return err
}

// retransSegs reads the TCP retransmission counter of a network
// namespace (/proc/net/snmp is per namespace).
func retransSegs(t *testing.T, netns string) int {
	t.Helper()
	return flowtest.SNMPCounter(t, netns, "Tcp", "RetransSegs")
}

// podFlowPackets returns n_packets of a local pod's br0 classifier flow
// (table 0, its in_port) and of its IPv4 port-security flow (table 10,
// its address).
func podFlowPackets(t *testing.T, m *testbed.Member, ip netip.Addr) (classifier, security int) {
	t.Helper()
	inPort := ""
	for _, l := range flowLines(t, m, "br0", "table=10") {
		if strings.Contains(l, "nw_src="+ip.String()+" ") || strings.Contains(l, "nw_src="+ip.String()+",") {
			if sm := regexp.MustCompile(`in_port=([^, ]+)`).FindStringSubmatch(l); sm != nil {
				inPort, security = sm[1], packetsOf(l)
			}
		}
	}
	if inPort == "" {
		t.Fatalf("br0 on %s: no port-security flow for %s", m.Name, ip)
	}
	for _, l := range flowLines(t, m, "br0", "table=0") {
		if strings.Contains(l, "priority=100,in_port="+inPort+" ") {
			return packetsOf(l), security
		}
	}
	t.Fatalf("br0 on %s: no classifier flow for in_port=%s", m.Name, inPort)
	return 0, 0
}

// lateUnidlePackets is the agent's count of packet-ins of ports released
// a moment before (nodeflow_unidle_late_packets_total), re-injected.
func lateUnidlePackets(t *testing.T, m *testbed.Member) int {
	t.Helper()
	text, err := agentMetrics(m)
	if err != nil {
		t.Fatal(err)
	}
	return int(max(seriesValue(text, "nodeflow_unidle_late_packets_total"), 0))
}
