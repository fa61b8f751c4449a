package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"nodeflow/testbed"
)

// The tenant boundary for the addresses a Service claims: a namespace user
// who may create Services (and, in some clusters, write their status)
// tries to capture other people's traffic with spec.externalIPs and
// status.loadBalancer.ingress. The admission policy refuses it at the API
// (deploy/service-address-policy.yaml), and with the policy out of the way
// the agents still refuse to program it, telling the user with a Warning
// event; the legitimate uses keep working.

// addressPolicyBinding is the admission policy's binding, which
// suspendAdmission takes away.
const addressPolicyBinding = "nodeflow-service-addresses"

// badExternalIP is a Service a probe of the admission policy creates with
// dry run: its external IP is no one's to take.
func badExternalIP(ns string) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "admission-probe", Namespace: ns},
		Spec: v1.ServiceSpec{ExternalIPs: []string{"172.30.0.11"},
			Ports: []v1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: v1.ProtocolTCP}}},
	}
}

// waitAdmission waits until the admission policy is (on) or is not (off)
// enforced for kc, by a dry-run probe.
func waitAdmission(t *testing.T, kc kubernetes.Interface, ns string, on bool) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("address admission policy enforced=%v", on), func(ctx context.Context) error {
		_, err := kc.CoreV1().Services(ns).Create(ctx, badExternalIP(ns), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case on && err == nil:
			return fmt.Errorf("a node's address was admitted")
		case on && !strings.Contains(err.Error(), "spec.externalIPs: 172.30.0.11 not allowed"):
			return fmt.Errorf("refused for another reason: %v", err)
		case !on && err != nil:
			return err
		}
		return nil
	})
}

// suspendAdmission takes the admission policy's binding away until the
// test ends: what a cluster without the policy (or with admission
// bypassed) lets a user create, for the agents to judge alone.
func suspendAdmission(t *testing.T, e *env, ns string) {
	t.Helper()
	ctx := context.Background()
	b, err := e.client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, addressPolicyBinding, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the testbed runs no address admission policy: %v", err)
	}
	if err := e.client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, addressPolicyBinding, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.ResourceVersion, b.UID = "", ""
		if _, err := e.client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(context.Background(), b, metav1.CreateOptions{}); err != nil {
			t.Errorf("restore the address admission policy: %v", err)
			return
		}
		waitAdmission(t, e.client, ns, true)
	})
	waitAdmission(t, e.client, ns, false)
}

// waitAddressRefused waits for an agent's NodeflowAddressRefused Warning
// on a Service whose message holds every part.
func waitAddressRefused(t *testing.T, e *env, ns, svc string, parts ...string) {
	t.Helper()
	eventually(t, 30*time.Second, "NodeflowAddressRefused on "+ns+"/"+svc, func(ctx context.Context) error {
		evs, err := e.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=NodeflowAddressRefused,involvedObject.name=" + svc})
		if err != nil {
			return err
		}
	events:
		for _, ev := range evs.Items {
			if ev.Type != v1.EventTypeWarning || ev.Source.Component != "nodeflow-agent" || ev.InvolvedObject.Kind != "Service" {
				continue
			}
			for _, p := range parts {
				if !strings.Contains(ev.Message, p) {
					continue events
				}
			}
			return nil
		}
		return fmt.Errorf("%d events, none with %q", len(evs.Items), parts)
	})
}

// noWarnings fails when a Service got a Warning from the agents.
func noWarnings(t *testing.T, e *env, ns, svc string) {
	t.Helper()
	evs, err := e.client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + svc})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Items {
		if ev.Type == v1.EventTypeWarning && ev.Source.Component == "nodeflow-agent" {
			t.Errorf("%s/%s got a Warning: %s: %s", ns, svc, ev.Reason, ev.Message)
		}
	}
}

// dumpBridges returns node m's br0 and breth0 flows.
func dumpBridges(t *testing.T, m *testbed.Member) string {
	t.Helper()
	var sb strings.Builder
	for _, br := range []string{"br0", "breth0"} {
		out, err := exec.Command("ip", "netns", "exec", m.Netns, "env", "OVS_RUNDIR="+m.OVSRundir,
			"ovs-ofctl", "-O", "OpenFlow15", "dump-flows", br).CombinedOutput()
		if err != nil {
			t.Fatalf("dump-flows %s on %s: %v\n%s", br, m.Name, err, out)
		}
		sb.Write(out)
	}
	return sb.String()
}

// serviceFlow returns the first of flows (dump-flows output) that matches
// the destination addr and port, "" when none does.
func serviceFlow(flows, addr string, port int) string {
	dst := regexp.MustCompile(`(nw_dst|ipv6_dst|ct_nw_dst|ct_ipv6_dst)=` + regexp.QuoteMeta(addr) + `[,\s]`)
	tp := regexp.MustCompile(`tp_dst=` + strconv.Itoa(port) + `[,\s]`)
	for _, line := range strings.Split(flows, "\n") {
		if dst.MatchString(line) && tp.MatchString(line) {
			return line
		}
	}
	return ""
}

// tenantService is a Service of the tenant's grab pods on port (to 8080).
func tenantService(name string, port int32, externalIPs ...string) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.ServiceSpec{Selector: map[string]string{"app": "grab"}, ExternalIPs: externalIPs,
			Ports: []v1.ServicePort{{Name: "http", Port: port, TargetPort: intstr.FromInt32(8080), Protocol: v1.ProtocolTCP}}},
	}
}

// TestTenantExternalIPs: a namespace user lists, in its Services'
// spec.externalIPs, another node's address on the kubelet's port, another
// namespace's pod, a host outside the cluster and a service address no
// Service holds yet. Admission refuses each; without admission the agents
// program none of them, say so on the tenant's Service, and the traffic
// meant for the kubelet, the pod and the later Service reaches them. An
// external IP from the operator's allowed range works from outside.
func TestTenantExternalIPs(t *testing.T) {
	e := up(t)
	requireAgent(t, e)
	ctx := context.Background()
	tn := newTenant(t, e, "e2e-tenant-eip")
	victimNS := createNamespace(t, e, "e2e-tenant-eip-victim")
	victims := deployPods(t, e, victimNS, "web", 2)
	client := deployPods(t, e, victimNS, "client", 1)[0]
	grab := deployPods(t, tn.as(e), tn.ns, "grab", 2)
	grabbers := map[string]bool{}
	for _, p := range grab {
		grabbers[p.name] = true
	}
	n1, n2, ext := member(t, e, "node1"), member(t, e, "node2"), member(t, e, "ext1")
	node2IP := memberIP(t, n2, false)
	victimIP := victims[0].ip(false)
	const outside, unallocated = "172.30.0.100", "10.96.200.200"

	t.Run("admission-refuses", func(t *testing.T) {
		for _, addr := range []string{node2IP.String(), victimIP.String(), outside, unallocated, "fd00:10:244::5"} {
			_, err := tn.client.CoreV1().Services(tn.ns).Create(ctx, tenantService("refused", 80, addr), metav1.CreateOptions{})
			if err == nil || !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "spec.externalIPs: "+addr+" not allowed") {
				t.Errorf("external IP %s: %v, want refused by the admission policy", addr, err)
			}
		}
	})

	t.Run("allowed-range-works", func(t *testing.T) {
		eip := netip.MustParseAddr("172.30.0.207")
		if _, err := tn.client.CoreV1().Services(tn.ns).Create(ctx, tenantService("own", 80, eip.String()), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		routeVia(t, ext, eip, memberIP(t, n1, false))
		reach(t, "ext1 -> the tenant's own external IP", ext.Netns, false, eip, 80, grabbers, netip.Addr{})
		noWarnings(t, e, tn.ns, "own")
	})

	t.Run("agents-refuse-without-admission", func(t *testing.T) {
		suspendAdmission(t, e, tn.ns)
		for _, s := range []*v1.Service{
			tenantService("kubelet", 10250, node2IP.String()),
			tenantService("pod", 8080, victimIP.String()),
			tenantService("outside", 80, outside),
			tenantService("preclaim", 80, unallocated),
		} {
			if _, err := tn.client.CoreV1().Services(tn.ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
				t.Fatalf("%s: %v", s.Name, err)
			}
		}
		waitAddressRefused(t, e, tn.ns, "kubelet", "spec.externalIPs", node2IP.String(), "is an address of node node2")
		waitAddressRefused(t, e, tn.ns, "pod", "spec.externalIPs", victimIP.String(), "in the pod network")
		waitAddressRefused(t, e, tn.ns, "outside", "spec.externalIPs", outside, "outside the allowed ranges")
		waitAddressRefused(t, e, tn.ns, "preclaim", "spec.externalIPs", unallocated, "in the service CIDR")
		// The traffic meant for the kubelet, the pod, the outside host and
		// the later Service is nobody else's: no flow takes it.
		for _, m := range []*testbed.Member{n1, n2} {
			flows := dumpBridges(t, m)
			for _, c := range []struct {
				addr string
				port int
			}{{node2IP.String(), 10250}, {victimIP.String(), 8080}, {outside, 80}, {unallocated, 80}} {
				if line := serviceFlow(flows, c.addr, c.port); line != "" {
					t.Errorf("%s: a service flow for %s port %d: %s", m.Name, c.addr, c.port, line)
				}
			}
		}
		// The kubelet's API still answers the API server (kubectl logs of
		// a pod on node2), and a pod's connection to node2:10250 meets the
		// kubelet, not the tenant.
		for _, p := range victims {
			if p.node != "node2" {
				continue
			}
			if _, err := e.client.CoreV1().Pods(victimNS).GetLogs(p.name, &v1.PodLogOptions{}).DoRaw(ctx); err != nil {
				t.Errorf("kubectl logs %s on node2: %v", p.name, err)
			}
		}
		for i := 0; i < 3; i++ {
			if pod, _, err := httpGet(ctx, client.netns, node2IP, 10250); err == nil && grabbers[pod] {
				t.Fatalf("node2:10250 answered by the tenant's pod %s", pod)
			}
		}
		reach(t, "client -> the victim pod's own address", client.netns, false, victimIP, 8080, map[string]bool{victims[0].name: true}, netip.Addr{})
		if text, err := agentMetrics(n1); err != nil {
			t.Error(err)
		} else if v := seriesValue(text, `nodeflow_service_refused_addresses{field="spec.externalIPs",reason="node-address"}`); v < 1 {
			t.Errorf("node1's refused node addresses: %v, want at least 1", v)
		}

		// The API server gives the address to a later Service as its
		// ClusterIP: that Service works on every node, and only the
		// tenant hears of it.
		victimSvc, err := e.client.CoreV1().Services(victimNS).Create(ctx, &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "later"},
			Spec: v1.ServiceSpec{ClusterIP: unallocated, Selector: map[string]string{"app": "web"},
				Ports: []v1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: v1.ProtocolTCP}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]bool{}
		for _, p := range victims {
			want[p.name] = true
		}
		reach(t, "client -> the later Service's ClusterIP", client.netns, false, netip.MustParseAddr(victimSvc.Spec.ClusterIP), 80, want, netip.Addr{})
		noWarnings(t, e, victimNS, "later")
		waitAddressRefused(t, e, tn.ns, "preclaim", unallocated)
	})
}

// TestTenantLoadBalancerIPs: status.loadBalancer.ingress is the
// load-balancer controller's to write. A tenant allowed by RBAC to write
// its Services' status is refused at admission, whatever the address; the
// controller's identity sets an address from the allowed range, which
// works, and spec.loadBalancerSourceRanges admits only the sources listed,
// both families. Without admission, the agents refuse a node's and a
// pod's address as ingress IPs.
func TestTenantLoadBalancerIPs(t *testing.T) {
	e := up(t)
	requireAgent(t, e)
	ctx := context.Background()
	tn := newTenant(t, e, "e2e-tenant-lb", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"services/status"}, Verbs: []string{"get", "update", "patch"}})
	grab := deployPods(t, tn.as(e), tn.ns, "grab", 2)
	grabbers := map[string]bool{}
	for _, p := range grab {
		grabbers[p.name] = true
	}
	client := deployPods(t, tn.as(e), tn.ns, "client", 1)[0]
	lb := loadBalancerController(t, e)
	n1, n2, ext := member(t, e, "node1"), member(t, e, "node2"), member(t, e, "ext1")
	node2IP := memberIP(t, n2, false)

	newLB := func(t *testing.T, name string, ranges ...string) *v1.Service {
		s := tenantService(name, 80)
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicyPreferDualStack)
		s.Spec.LoadBalancerSourceRanges = ranges
		s, err := tn.client.CoreV1().Services(tn.ns).Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	setIngress := func(kc kubernetes.Interface, name string, ips ...string) error {
		return retryConflict(ctx, func() error {
			s, err := kc.CoreV1().Services(tn.ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			s.Status.LoadBalancer.Ingress = nil
			for _, ip := range ips {
				s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip})
			}
			_, err = kc.CoreV1().Services(tn.ns).UpdateStatus(ctx, s, metav1.UpdateOptions{})
			return err
		})
	}

	t.Run("only-the-controller-sets-ingress", func(t *testing.T) {
		newLB(t, "grab-lb")
		for _, ip := range []string{node2IP.String(), "172.30.0.208"} {
			err := setIngress(tn.client, "grab-lb", ip)
			if err == nil || !strings.Contains(err.Error(), "may not set load-balancer addresses") {
				t.Errorf("tenant sets ingress %s: %v, want refused", ip, err)
			}
		}
		if err := setIngress(lb, "grab-lb", node2IP.String()); err == nil || !strings.Contains(err.Error(), "not allowed") {
			t.Errorf("the controller sets a node's address: %v, want refused", err)
		}
		lbIP := netip.MustParseAddr("172.30.0.208")
		if err := setIngress(lb, "grab-lb", lbIP.String()); err != nil {
			t.Fatalf("the controller sets an allowed address: %v", err)
		}
		routeVia(t, ext, lbIP, memberIP(t, n1, false))
		reach(t, "ext1 -> ingress IP", ext.Netns, false, lbIP, 80, grabbers, netip.Addr{})
	})

	t.Run("source-ranges", func(t *testing.T) {
		extV4, extV6 := memberIP(t, ext, false), memberIP(t, ext, true)
		newLB(t, "ranged", netip.PrefixFrom(extV4, 32).String(), netip.PrefixFrom(extV6, 128).String())
		ips := []netip.Addr{netip.MustParseAddr("172.30.0.209"), netip.MustParseAddr("fd00:172:30::209")}
		if err := setIngress(lb, "ranged", ips[0].String(), ips[1].String()); err != nil {
			t.Fatal(err)
		}
		for _, ip := range ips {
			routeVia(t, ext, ip, memberIP(t, n1, ip.Is6()))
			reach(t, "ext1 (listed) -> "+ip.String(), ext.Netns, false, ip, 80, grabbers, netip.Addr{})
			// The tenant's own pod is not listed: dropped, on either node.
			for i := 0; i < 2; i++ {
				if pod, _, err := httpGet(ctx, client.netns, ip, 80); err == nil {
					t.Errorf("unlisted pod %s reached %s (answered by %s)", client.name, ip, pod)
				}
			}
		}
		if !strings.Contains(dumpBridges(t, n1), "priority=180,ct_state=+new+trk,ct_nw_dst=172.30.0.209") {
			t.Error("no source-range drop for the ingress IP on node1")
		}
	})

	t.Run("agents-refuse-without-admission", func(t *testing.T) {
		suspendAdmission(t, e, tn.ns)
		newLB(t, "steal")
		victim := netip.MustParseAddr("10.244.0.77")
		if err := setIngress(tn.client, "steal", node2IP.String(), victim.String()); err != nil {
			t.Fatal(err)
		}
		waitAddressRefused(t, e, tn.ns, "steal", "status.loadBalancer.ingress", node2IP.String(), "is an address of node node2")
		waitAddressRefused(t, e, tn.ns, "steal", "status.loadBalancer.ingress", victim.String(), "in the pod network")
		for _, m := range []*testbed.Member{n1, n2} {
			flows := dumpBridges(t, m)
			for _, a := range []netip.Addr{node2IP, victim} {
				if line := serviceFlow(flows, a.String(), 80); line != "" {
					t.Errorf("%s: a flow for the refused ingress IP %s: %s", m.Name, a, line)
				}
			}
		}
	})
}

// loadBalancerController returns a client acting as the testbed's
// load-balancer controller (testbed.LoadBalancerController): a
// ServiceAccount allowed to write every Service's status.
func loadBalancerController(t *testing.T, e *env) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	const ns, name = "kube-system", "service-controller"
	if "system:serviceaccount:"+ns+":"+name != testbed.LoadBalancerController {
		t.Fatalf("the controller's identity is %s", testbed.LoadBalancerController)
	}
	ignoreExists := func(err error) {
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	_, err := e.client.CoreV1().ServiceAccounts(ns).Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	ignoreExists(err)
	_, err = e.client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e:load-balancer-controller"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"services/status"}, Verbs: []string{"get", "update", "patch"}}},
	}, metav1.CreateOptions{})
	ignoreExists(err)
	_, err = e.client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e:load-balancer-controller"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "e2e:load-balancer-controller"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
	}, metav1.CreateOptions{})
	ignoreExists(err)
	kc, _ := accountClient(t, e, ns, name)
	return kc
}

// retryConflict runs f again while it fails with a conflict (a status
// written meanwhile), up to a few times.
func retryConflict(ctx context.Context, f func() error) error {
	var err error
	for i := 0; i < 5; i++ {
		if err = f(); !apierrors.IsConflict(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return err
}

// TestTenantImpossibleEndpoints: a tenant who may write EndpointSlices
// lists another node's pod subnet's broadcast and network addresses as
// endpoints of its Service next to one real pod. No agent programs them;
// each is reported on the slice; the real endpoint takes every connection.
func TestTenantImpossibleEndpoints(t *testing.T) {
	e := up(t)
	requireAgent(t, e)
	ctx := context.Background()
	tn := newTenant(t, e, "e2e-tenant-eps", rbacv1.PolicyRule{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"create", "get", "list", "update", "delete"}})
	grab := deployPods(t, tn.as(e), tn.ns, "grab", 1)[0]
	client := deployPods(t, tn.as(e), tn.ns, "client", 2)
	n2, err := e.client.CoreV1().Nodes().Get(ctx, "node2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var subnet netip.Prefix
	for _, c := range n2.Spec.PodCIDRs {
		if p := netip.MustParsePrefix(c); p.Addr().Is4() {
			subnet = p
		}
	}
	last := subnet.Addr().As4()
	last[3] |= byte(1<<(32-subnet.Bits()) - 1)
	bcast, network := netip.AddrFrom4(last), subnet.Addr()
	svc := tenantService("manual", 80)
	svc.Spec.Selector = nil
	svc, err = tn.client.CoreV1().Services(tn.ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slice := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "manual-1", Labels: map[string]string{discovery.LabelServiceName: "manual"}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8080)), Protocol: ptr.To(v1.ProtocolTCP)}},
	}
	for _, a := range []netip.Addr{bcast, network, grab.ip(false)} {
		slice.Endpoints = append(slice.Endpoints, discovery.Endpoint{Addresses: []string{a.String()}, Conditions: discovery.EndpointConditions{Ready: ptr.To(true)}})
	}
	if _, err := tn.client.DiscoveryV1().EndpointSlices(tn.ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for what, a := range map[string]netip.Addr{"broadcast": bcast, "network": network} {
		eventually(t, 30*time.Second, what+" address reported on the slice", func(ctx context.Context) error {
			evs, err := e.client.CoreV1().Events(tn.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=manual-1,reason=NodeflowBadInput"})
			if err != nil {
				return err
			}
			for _, ev := range evs.Items {
				if strings.Contains(ev.Message, a.String()+" is the "+what+" address of node node2's pod subnet "+subnet.String()) {
					return nil
				}
			}
			return fmt.Errorf("%d events, none about %s", len(evs.Items), a)
		})
	}
	vip := svcAddrs(t, svc)[0]
	for _, c := range client {
		for i := 0; i < 6; i++ {
			pod, _, err := httpGet(ctx, c.netns, vip, 80)
			if err != nil || pod != grab.name {
				t.Errorf("%s -> %s: %q %v, want every connection on %s", c.node, vip, pod, err, grab.name)
			}
		}
	}
}

// TestNodePortAddresses: with nodePortAddresses listing only node2's IPv6
// address, node2 answers a NodePort there and no longer on its IPv4
// address, while node1 (the default, its node IPs) answers on both.
func TestNodePortAddresses(t *testing.T) {
	e := up(t)
	requireAgent(t, e)
	ctx := context.Background()
	ns := createNamespace(t, e, "e2e-nodeport-addrs")
	web := deployPods(t, e, ns, "web", 2)
	backends := map[string]bool{}
	for _, p := range web {
		backends[p.name] = true
	}
	svc, err := e.client.CoreV1().Services(ns).Create(ctx, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: v1.ServiceSpec{Type: v1.ServiceTypeNodePort, IPFamilyPolicy: ptr.To(v1.IPFamilyPolicyPreferDualStack),
			Selector: map[string]string{"app": "web"},
			Ports:    []v1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: v1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodePort := int(svc.Spec.Ports[0].NodePort)
	n1, n2, ext := member(t, e, "node1"), member(t, e, "node2"), member(t, e, "ext1")
	v6 := memberIP(t, n2, true)
	replaceAgent(t, e, n2, "NODEFLOW_NODEPORT_ADDRESSES="+netip.PrefixFrom(v6, 128).String())
	t.Cleanup(func() {
		replaceAgent(t, e, n2)
		eventually(t, 60*time.Second, "node2's agent back", func(ctx context.Context) error { return agentReady(ctx, n2) })
	})
	eventually(t, 60*time.Second, "node2's replaced agent ready", func(ctx context.Context) error { return agentReady(ctx, n2) })
	reach(t, "ext1 -> node2's IPv6 node port", ext.Netns, false, v6, nodePort, backends, netip.Addr{})
	for _, v6 := range []bool{false, true} {
		reach(t, "ext1 -> node1's node port", ext.Netns, false, memberIP(t, n1, v6), nodePort, backends, netip.Addr{})
	}
	if line := serviceFlow(dumpBridges(t, n2), memberIP(t, n2, false).String(), nodePort); line != "" {
		t.Errorf("node2 keeps its IPv4 node port: %s", line)
	}
	if pod, _, err := httpGet(ctx, ext.Netns, memberIP(t, n2, false), nodePort); err == nil {
		t.Errorf("node2's IPv4 address answered the node port (%s)", pod)
	}
}

// TestTenantHostPorts: a tenant's pod asks for a hostPort on the cluster
// DNS's ClusterIP (hostIP 10.96.0.10, port 53) and on the kubelet's port.
// Neither is served, the pod is told, and the cluster DNS and the
// kubelet's API keep answering on the pod's node.
func TestTenantHostPorts(t *testing.T) {
	e := up(t)
	requireAgent(t, e)
	ctx := context.Background()
	tn := newTenant(t, e, "e2e-tenant-hostport")
	dnsSvc, err := e.client.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dnsIP := netip.MustParseAddr(dnsSvc.Spec.ClusterIP)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "grab", Labels: map[string]string{"app": "grab"}},
		Spec: v1.PodSpec{NodeName: "node1", TerminationGracePeriodSeconds: ptr.To(int64(1)), Containers: []v1.Container{{
			Name: "web", Image: "testbed/web",
			Ports: []v1.ContainerPort{
				{ContainerPort: 5353, HostPort: 53, HostIP: dnsIP.String(), Protocol: v1.ProtocolUDP},
				{ContainerPort: 8080, HostPort: 10250, Protocol: v1.ProtocolTCP},
				{ContainerPort: 8081, HostPort: 18081, Protocol: v1.ProtocolTCP}, // its own, served
			},
		}}},
	}
	if _, err := tn.client.CoreV1().Pods(tn.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "HostPortNotServed on the tenant's pod", func(ctx context.Context) error {
		evs, err := e.client.CoreV1().Events(tn.ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=HostPortNotServed,involvedObject.name=grab"})
		if err != nil {
			return err
		}
		for _, ev := range evs.Items {
			if strings.Contains(ev.Message, "the hostIP "+dnsIP.String()+" is not an address of this node") && strings.Contains(ev.Message, "port 10250/TCP is the node's own") {
				return nil
			}
		}
		return fmt.Errorf("%d events, none naming both refusals", len(evs.Items))
	})
	n1 := member(t, e, "node1")
	eventually(t, 30*time.Second, "the tenant's own hostPort served", func(ctx context.Context) error {
		if serviceFlow(dumpBridges(t, n1), memberIP(t, n1, false).String(), 18081) == "" {
			return fmt.Errorf("no flow for hostPort 18081 on node1")
		}
		return nil
	})
	flows := dumpBridges(t, n1)
	for _, c := range []struct {
		addr string
		port int
	}{{dnsIP.String(), 53}, {memberIP(t, n1, false).String(), 10250}} {
		for _, line := range strings.Split(flows, "\n") {
			if strings.Contains(line, "priority=250") && serviceFlow(line, c.addr, c.port) != "" {
				t.Errorf("node1 serves the refused hostPort %s:%d: %s", c.addr, c.port, line)
			}
		}
	}
	// The cluster DNS still answers a pod on node1, and the kubelet its API.
	client := deployPods(t, tn.as(e), tn.ns, "client", 2)
	for _, c := range client {
		if c.node != "node1" {
			continue
		}
		eventually(t, 30*time.Second, "cluster DNS from node1", func(context.Context) error {
			_, err := resolve(c.netns, dnsIP, "kubernetes.default.svc.cluster.local.", dns.TypeA)
			return err
		})
	}
	if _, err := kubectl(t, e, "logs", "-n", tn.ns, "grab"); err != nil {
		t.Errorf("kubectl logs of a pod on node1: %v", err)
	}
}
