package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	authorizationv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"nodeflow/testbed"
)

// TestTenantDNS: the DNS learner trusts only the cluster's DNS. A
// namespace user whose egress firewall allows *.tenantdns.test and denies
// everything else runs its own DNS server (CoreDNS, on the other node)
// behind its own Service, named kube-dns like the cluster's, whose
// EndpointSlice the EndpointSlice controller made, and has it answer
// evil.tenantdns.test with an address it wants to reach. Its pod receives
// the answer, through the Service and straight from the server's pod, but
// the firewall learns nothing: the address stays denied, the replies are
// counted as untrusted and none of them is sent to the agent. A Service
// that claims the cluster DNS ClusterIP as an externalIP (refused or not
// by the API server and the service proxy) teaches nothing either. The
// cluster DNS does teach it: its answer for good.tenantdns.test, through
// its ClusterIP and straight from one of its pods, opens that address at
// once, also after a CoreDNS pod is replaced (the trusted endpoints follow
// the EndpointSlice).
func TestTenantDNS(t *testing.T) {
	requireTool(t, "coredns", testbed.DefaultCoreDNS())
	g := egfwSetup(t)
	g.diagnoseOnFailure(t)
	e := g.e
	ctx := context.Background()
	const ns = "e2e-tenant-dns"
	tn := newTenant(t, e, ns)
	t.Cleanup(func() {
		if err := e.client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete namespace %s: %v", ns, err)
		}
	})
	// The tenant cannot write its own egress firewall: its admin role
	// does not reach the CRD.
	for _, verb := range []string{"create", "update", "patch", "delete"} {
		tn.mustBeAllowed(t, false, authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: "k8s.ovn.org", Resource: "egressfirewalls"})
	}
	forged, real, direct := ext(false, 171), ext(false, 172), ext(false, 173)
	dnsIP := clusterDNSIP(t, e)

	// The tenant's DNS server: CoreDNS answering evil.tenantdns.test, on
	// node2, behind a Service named kube-dns; its client on node1.
	labels := map[string]string{"app": "tenant-dns"}
	corefile := fmt.Sprintf(".:53 {\n    hosts {\n        %s evil.tenantdns.test\n        ttl 300\n    }\n}\n", forged)
	if _, err := tn.client.CoreV1().ConfigMaps(ns).Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dns"},
		Data: map[string]string{"Corefile": corefile}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.client.CoreV1().Pods(ns).Create(ctx, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "dns", Labels: labels},
		Spec: v1.PodSpec{
			NodeName: "node2", TerminationGracePeriodSeconds: ptr.To(int64(1)), DNSPolicy: v1.DNSDefault,
			Containers: []v1.Container{{
				Name: "coredns", Image: testbed.CoreDNSImage, Args: []string{"-conf", "/etc/coredns/Corefile"},
				Ports:        []v1.ContainerPort{{Name: "dns", Protocol: v1.ProtocolUDP, ContainerPort: 53}},
				VolumeMounts: []v1.VolumeMount{{Name: "config", MountPath: "/etc/coredns", ReadOnly: true}},
			}},
			Volumes: []v1.Volume{{Name: "config", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
				LocalObjectReference: v1.LocalObjectReference{Name: "dns"}}}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := tn.client.CoreV1().Services(ns).Create(ctx, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns"},
		Spec: v1.ServiceSpec{Selector: labels, Ports: []v1.ServicePort{
			{Name: "dns", Protocol: v1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(53)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tenantSvcIP := netip.MustParseAddr(svc.Spec.ClusterIP)
	if _, err := tn.client.CoreV1().Pods(ns).Create(ctx, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "client", Labels: map[string]string{"app": "client"}},
		Spec: v1.PodSpec{NodeName: "node1", TerminationGracePeriodSeconds: ptr.To(int64(1)),
			Containers: []v1.Container{{Name: "web", Image: "testbed/web"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	client := runningPods(t, e, ns, "client", 1)[0]
	serverPod := runningPods(t, e, ns, "tenant-dns", 1)[0]
	// The look-alike is as close as a namespace user can make it: the
	// controller's own slice, labelled kube-dns.
	eventually(t, 60*time.Second, "the tenant's kube-dns EndpointSlice", func(ctx context.Context) error {
		list, err := e.client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discovery.LabelServiceName + "=kube-dns"})
		if err != nil {
			return err
		}
		for _, sl := range list.Items {
			if sl.Labels[discovery.LabelManagedBy] == "endpointslice-controller.k8s.io" && len(sl.Endpoints) > 0 {
				return nil
			}
		}
		return fmt.Errorf("%d slices, none of the controller's with endpoints", len(list.Items))
	})
	eventually(t, 60*time.Second, "the tenant's DNS server answers", func(context.Context) error {
		got, err := resolve(client.netns, tenantSvcIP, "evil.tenantdns.test", dns.TypeA)
		if err != nil {
			return err
		}
		if !slices.Equal(got, []netip.Addr{forged}) {
			return fmt.Errorf("answer %v, want %s", got, forged)
		}
		return nil
	})
	// Without a firewall, the address the tenant wants answers: the
	// checks below can fail.
	verdict(t, client, "tcp", forged, true)

	// The cluster's admin gives the namespace its firewall.
	g.setFirewall(t, ns, rules("Allow dns:*.tenantdns.test", "Deny 0.0.0.0/0", "Deny ::/0"))
	t.Cleanup(func() { g.deleteFirewall(t, ns) })
	g.waitStatus(t, ns, "EgressFirewall Rules applied", "EgressFirewall Rules applied")
	// Every address is denied until an answer teaches otherwise. (Checked
	// now, long before the answers: a connection the switch dropped a
	// moment ago may meet its cached datapath flow for a moment after
	// the rules change.)
	for _, a := range []netip.Addr{forged, real, direct} {
		verdict(t, client, "tcp", a, false)
	}

	node1 := member(t, e, client.node)
	metric := func(series string) float64 {
		t.Helper()
		text, err := agentMetrics(node1)
		if err != nil {
			t.Fatal(err)
		}
		return seriesValue(text, series)
	}
	const (
		pinsDNS   = `nodeflow_packet_ins_received_total{category="dns"}`
		untrusted = `nodeflow_egress_firewall_dns_replies_total{result="untrusted"}`
		learned   = `nodeflow_egress_firewall_dns_replies_total{result="learned"}`
	)
	pins0, untrusted0 := metric(pinsDNS), metric(untrusted)
	forgedAnswer := func(t *testing.T, server netip.Addr) {
		t.Helper()
		for range 3 {
			got, err := resolve(client.netns, server, "evil.tenantdns.test", dns.TypeA)
			if err != nil || !slices.Equal(got, []netip.Addr{forged}) {
				t.Fatalf("the tenant's own server (%s): %v %v, want %s", server, got, err, forged)
			}
			if ans, err := extReach(client.netns, "tcp", forged, 900*time.Millisecond); err == nil {
				t.Fatalf("the forged address %s is reachable after the tenant's answer from %s (answered by %s)", forged, server, ans)
			}
		}
	}
	t.Run("through the tenant's Service", func(t *testing.T) { forgedAnswer(t, tenantSvcIP) })
	t.Run("straight from the tenant's DNS pod", func(t *testing.T) { forgedAnswer(t, serverPod.ip(false)) })
	t.Run("counted, never sent to the agent", func(t *testing.T) {
		if d := metric(pinsDNS) - pins0; d != 0 {
			t.Errorf("%v DNS packet-ins on %s for the tenant's replies, want none", d, client.node)
		}
		// The switch's counters are read every 10 s.
		eventually(t, 40*time.Second, "the untrusted replies counted", func(context.Context) error {
			if d := metric(untrusted) - untrusted0; d < 6 {
				return fmt.Errorf("%v untrusted replies counted, want at least 6", d)
			}
			return nil
		})
	})

	t.Run("a Service claiming the cluster DNS ClusterIP", func(t *testing.T) {
		claim, err := tn.client.CoreV1().Services(ns).Create(ctx, &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "claim"},
			Spec: v1.ServiceSpec{Selector: labels, ExternalIPs: []string{dnsIP.String()}, Ports: []v1.ServicePort{
				{Name: "dns", Protocol: v1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(53)}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Logf("the API server refuses the claim: %v", err)
			return
		}
		defer func() {
			if err := tn.client.CoreV1().Services(ns).Delete(ctx, claim.Name, metav1.DeleteOptions{}); err != nil {
				t.Error(err)
			}
		}()
		// Whoever answers the cluster DNS address now (the tenant's
		// server, if the service proxy let the claim through), the
		// firewall learns nothing from the tenant.
		deadline := time.Now().Add(5 * time.Second)
		hijacked := false
		for time.Now().Before(deadline) {
			got, _ := resolve(client.netns, dnsIP, "evil.tenantdns.test", dns.TypeA)
			hijacked = hijacked || slices.Equal(got, []netip.Addr{forged})
			if ans, err := extReach(client.netns, "tcp", forged, 900*time.Millisecond); err == nil {
				t.Fatalf("the forged address %s is reachable after asking %s (answered by %s)", forged, dnsIP, ans)
			}
		}
		t.Logf("the tenant's server answered for %s: %v", dnsIP, hijacked)
	})

	// The cluster DNS (CoreDNS, which forwards to the testbed's DNS
	// server) teaches the firewall through its ClusterIP.
	eventually(t, 30*time.Second, "the cluster DNS answers again", func(context.Context) error {
		_, err := resolve(client.netns, dnsIP, "kubernetes.default.svc.cluster.local", dns.TypeA)
		return err
	})
	learned0 := metric(learned)
	t.Run("the cluster DNS teaches the firewall", func(t *testing.T) {
		if err := g.dns.Set("good.tenantdns.test", 60, real); err != nil {
			t.Fatal(err)
		}
		got, err := resolve(client.netns, dnsIP, "good.tenantdns.test", dns.TypeA)
		if err != nil || !slices.Equal(got, []netip.Addr{real}) {
			t.Fatalf("cluster DNS: %v %v, want %s", got, err, real)
		}
		// At once: the first SYN, within TCP's first retransmission.
		if ans, err := extReach(client.netns, "tcp", real, 900*time.Millisecond); err != nil || ans != real.String() {
			t.Errorf("the address the cluster DNS gave: %q %v, want allowed at once", ans, err)
			if fl, err := table50(node1); err == nil {
				t.Logf("%s table 50:\n%s", node1.Name, strings.Join(fl, "\n"))
			}
			verdict(t, client, "tcp", real, true)
		}
		verdict(t, client, "tcp", forged, false)
		if d := metric(learned) - learned0; d < 1 {
			t.Errorf("%v replies learned on %s, want at least 1", d, client.node)
		}
	})

	t.Run("straight from a new CoreDNS pod", func(t *testing.T) {
		// A CoreDNS pod is replaced; the trusted endpoints follow its
		// EndpointSlice, and a query to the new pod's address teaches the
		// firewall.
		pods, err := e.client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
		if err != nil || len(pods.Items) == 0 {
			t.Fatalf("CoreDNS pods: %v, %d", err, len(pods.Items))
		}
		old := pods.Items[0]
		if err := e.client.CoreV1().Pods("kube-system").Delete(ctx, old.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
			t.Fatal(err)
		}
		var fresh netip.Addr
		eventually(t, 90*time.Second, "a new CoreDNS pod in the kube-dns slice", func(ctx context.Context) error {
			list, err := e.client.DiscoveryV1().EndpointSlices("kube-system").List(ctx, metav1.ListOptions{LabelSelector: discovery.LabelServiceName + "=kube-dns"})
			if err != nil {
				return err
			}
			for _, sl := range list.Items {
				if sl.AddressType != discovery.AddressTypeIPv4 {
					continue
				}
				for _, ep := range sl.Endpoints {
					if ep.TargetRef == nil || ep.TargetRef.Name == old.Name || ep.Conditions.Ready == nil || !*ep.Conditions.Ready || len(ep.Addresses) == 0 {
						continue
					}
					if a, err := netip.ParseAddr(ep.Addresses[0]); err == nil && ep.TargetRef.UID != old.UID {
						p, err := e.client.CoreV1().Pods("kube-system").Get(ctx, ep.TargetRef.Name, metav1.GetOptions{})
						if err == nil && p.CreationTimestamp.After(old.CreationTimestamp.Time) {
							fresh = a
							return nil
						}
					}
				}
			}
			return fmt.Errorf("no ready endpoint of a pod newer than %s", old.Name)
		})
		if err := g.dns.Set("direct.tenantdns.test", 60, direct); err != nil {
			t.Fatal(err)
		}
		// The agents may see the slice a moment after the API server
		// has it; a reply before that is released unlearned.
		eventually(t, 30*time.Second, "an answer from "+fresh.String()+" learned", func(context.Context) error {
			got, err := resolve(client.netns, fresh, "direct.tenantdns.test", dns.TypeA)
			if err != nil || !slices.Equal(got, []netip.Addr{direct}) {
				return fmt.Errorf("the new CoreDNS pod: %v %v, want %s", got, err, direct)
			}
			if ans, err := extReach(client.netns, "tcp", direct, 900*time.Millisecond); err != nil || ans != direct.String() {
				return fmt.Errorf("%s after its answer: %q %v", direct, ans, err)
			}
			return nil
		})
		verdict(t, client, "tcp", forged, false)
	})
}

// clusterDNSIP returns the kube-dns Service's IPv4 ClusterIP.
func clusterDNSIP(t *testing.T, e *env) netip.Addr {
	t.Helper()
	s, err := e.client.CoreV1().Services("kube-system").Get(context.Background(), "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the cluster DNS Service: %v", err)
	}
	for _, c := range s.Spec.ClusterIPs {
		if a, err := netip.ParseAddr(c); err == nil && a.Is4() {
			return a
		}
	}
	t.Fatalf("kube-dns has no IPv4 ClusterIP: %v", s.Spec.ClusterIPs)
	return netip.Addr{}
}
