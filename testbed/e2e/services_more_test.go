package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"nodeflow/testbed"
)

// routeVia adds a host route (/32, /128) for dst via gw in member m's
// namespace and removes it when the test ends.
func routeVia(t *testing.T, m *testbed.Member, dst, gw netip.Addr) {
	t.Helper()
	host := netip.PrefixFrom(dst, dst.BitLen()).String()
	route := []string{"-n", m.Netns, "route", "add", host, "via", gw.String()}
	if out, err := exec.Command("ip", route...).CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v\n%s", route, err, out)
	}
	t.Cleanup(func() {
		del := []string{"-n", m.Netns, "route", "del", host, "via", gw.String()}
		if out, err := exec.Command("ip", del...).CombinedOutput(); err != nil {
			t.Errorf("ip %v: %v\n%s", del, err, out)
		}
	})
}

// TestServicesExternal reaches a 3-replica Deployment from the external
// host through a Service's ExternalIP and through a LoadBalancer's ingress
// IP (spare fabric addresses routed to node1), and checks that ClientIP
// session affinity keeps one client pod on one backend.
func TestServicesExternal(t *testing.T) {
	e, ns := agentNamespace(t, "e2e-svc-more")
	ctx := context.Background()
	web := deployPods(t, e, ns, "web", 3)
	backends := map[string]bool{}
	for _, p := range web {
		backends[p.name] = true
	}
	tcpPorts := []v1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: v1.ProtocolTCP}}

	// extVia routes eip from ext1 via node1 and returns ext1.
	extVia := func(t *testing.T, eip netip.Addr) *testbed.Member {
		ext, ok := e.state.Member("ext1")
		if !ok {
			t.Skip("no ext1 in the topology")
		}
		n1, ok := e.state.Member("node1")
		if !ok {
			t.Fatal("no node1 in the topology")
		}
		routeVia(t, ext, eip, netip.MustParseAddr(n1.Addresses[0]))
		return ext
	}

	t.Run("externalip-from-external", func(t *testing.T) {
		eip := netip.MustParseAddr("172.30.0.200")
		if _, err := e.client.CoreV1().Services(ns).Create(ctx, newService("web-eip", v1.ServiceSpec{
			Selector:    map[string]string{"app": "web"},
			ExternalIPs: []string{eip.String()},
			Ports:       tcpPorts,
		}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		ext := extVia(t, eip)
		reach(t, "ext1 -> external IP "+eip.String(), ext.Netns, false, eip, 80, backends, netip.Addr{})
	})

	t.Run("loadbalancer-ingress-from-external", func(t *testing.T) {
		lbIP := netip.MustParseAddr("172.30.0.201")
		svc, err := e.client.CoreV1().Services(ns).Create(ctx, newService("web-lb", v1.ServiceSpec{
			Type:     v1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": "web"},
			Ports:    tcpPorts,
		}), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: lbIP.String()}}
		if _, err := e.client.CoreV1().Services(ns).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		ext := extVia(t, lbIP)
		reach(t, "ext1 -> ingress IP "+lbIP.String(), ext.Netns, false, lbIP, 80, backends, netip.Addr{})
	})

	t.Run("session-affinity-clientip", func(t *testing.T) {
		client := deployPods(t, e, ns, "client", 1)[0]
		svc, err := e.client.CoreV1().Services(ns).Create(ctx, newService("web-sticky", v1.ServiceSpec{
			Selector:        map[string]string{"app": "web"},
			SessionAffinity: v1.ServiceAffinityClientIP,
			Ports:           tcpPorts,
		}), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		vip := svcAddrs(t, svc)[0]
		var first string
		eventually(t, 30*time.Second, "first answer from "+vip.String(), func(ctx context.Context) error {
			pod, _, err := httpGet(ctx, client.netns, vip, 80)
			if err != nil {
				return err
			}
			if !backends[pod] {
				return fmt.Errorf("answer from %q, not a backend (%v)", pod, backends)
			}
			first = pod
			return nil
		})
		// Each request is a new connection (new source port); without
		// affinity 10 of them over 3 backends would almost surely spread.
		for i := range 10 {
			pod, _, err := httpGet(ctx, client.netns, vip, 80)
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			if pod != first {
				t.Fatalf("request %d answered by %s, want %s (ClientIP affinity)", i, pod, first)
			}
		}
	})
}
