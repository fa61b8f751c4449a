package testbed

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"nodeflow/testbed/pki"
)

// The cluster DNS: CoreDNS (testbed/tools/build.sh coredns, part of `make
// testbed-deps`), one per node, on the node's network (as a hostNetwork
// DaemonSet would run it), answering for cluster.local from the API and
// forwarding the rest to the testbed's DNS server on the external host. The
// kube-dns Service in kube-system, at the tenth address of the service
// range as kubeadm places it, has the nodes as endpoints; the kubelets
// point ClusterFirst pods at it.

// clusterDNSUser is CoreDNS's identity at the API server.
const clusterDNSUser = "system:coredns"

// DefaultCoreDNS is where testbed/tools/build.sh puts CoreDNS, "" if it is
// not there.
func DefaultCoreDNS() string {
	return cachedTool("coredns", "coredns")
}

// DefaultE2ETest is where testbed/tools/build.sh puts the upstream
// e2e.test, "" if it is not there.
func DefaultE2ETest() string {
	return cachedTool("e2e.test", "e2e.test")
}

// corefile is the CoreDNS configuration of a node.
func corefile(kubeconfig string, upstreams []string) string {
	forward := ""
	if len(upstreams) > 0 {
		forward = "    forward . " + strings.Join(upstreams, " ") + "\n"
	}
	return fmt.Sprintf(`.:53 {
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig %s
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
%s    cache 30
    loop
    loadbalance
}
`, kubeconfig, forward)
}

// startClusterDNS starts CoreDNS on every node and creates kube-dns.
func (s *supervisor) startClusterDNS(ctx context.Context, nodes []string) error {
	if s.opts.CoreDNS == "" {
		s.log.Info("no cluster DNS: CoreDNS is not built (testbed/tools/build.sh coredns)")
		return nil
	}
	cp := s.cp
	crt, key, err := cp.ca.Issue(pki.Request{CommonName: clusterDNSUser, Client: true})
	if err != nil {
		return err
	}
	if err := s.clusterDNSRBAC(ctx); err != nil {
		return err
	}
	var endpoints []discoveryv1.Endpoint
	for _, n := range nodes {
		dir := s.nodeDir(n)
		kc := filepath.Join(dir, "coredns.kubeconfig")
		if err := pki.WriteKubeconfig(kc, s.top.Name, fmt.Sprintf("https://127.0.0.1:%d", nodeAPIPort), cp.ca.CertPEM,
			pki.Credentials{User: clusterDNSUser, CertPEM: crt, KeyPEM: key}); err != nil {
			return err
		}
		conf := filepath.Join(dir, "Corefile")
		if err := os.WriteFile(conf, []byte(corefile(kc, s.state.DNSServers)), 0o644); err != nil {
			return err
		}
		p, err := startProc("coredns "+n, filepath.Join(dir, "coredns.log"), memberNetns(s.top.Name, n), nil, s.opts.CoreDNS, "-conf", conf)
		if err != nil {
			return err
		}
		s.agents = append(s.agents, p)
		s.state.Processes = append(s.state.Processes, Process{Name: p.name, PID: p.pid()})
		for _, a := range s.top.Topology.Nodes[n].Addresses() {
			if a.Addr().Is4() {
				endpoints = append(endpoints, discoveryv1.Endpoint{
					Addresses:  []string{a.Addr().String()},
					Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
					NodeName:   ptr.To(n),
				})
			}
		}
	}
	return s.kubeDNSService(ctx, endpoints)
}

// clusterDNSRBAC lets CoreDNS read what its kubernetes plugin watches.
func (s *supervisor) clusterDNSRBAC(ctx context.Context) error {
	rbac := s.cp.admin.RbacV1()
	_, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: clusterDNSUser},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("testbed: cluster DNS role: %w", err)
	}
	_, err = rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: clusterDNSUser},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterDNSUser},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: clusterDNSUser}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("testbed: cluster DNS binding: %w", err)
	}
	return nil
}

// kubeDNSService creates kube-system/kube-dns, selectorless, with the
// nodes' CoreDNS as its endpoints.
func (s *supervisor) kubeDNSService(ctx context.Context, endpoints []discoveryv1.Endpoint) error {
	ip, err := tenthAddress(s.top.Kubernetes.ServiceCIDRs[0])
	if err != nil {
		return err
	}
	labels := map[string]string{"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}
	ports := []v1.ServicePort{
		{Name: "dns", Protocol: v1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(53)},
		{Name: "dns-tcp", Protocol: v1.ProtocolTCP, Port: 53, TargetPort: intstr.FromInt32(53)},
	}
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: metav1.NamespaceSystem, Labels: labels},
		Spec:       v1.ServiceSpec{ClusterIP: ip.String(), Ports: ports},
	}
	if _, err := s.cp.admin.CoreV1().Services(metav1.NamespaceSystem).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("testbed: kube-dns Service: %w", err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns-testbed", Namespace: metav1.NamespaceSystem,
			Labels: map[string]string{discoveryv1.LabelServiceName: "kube-dns", discoveryv1.LabelManagedBy: "testbed"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   endpoints,
	}
	for _, p := range ports {
		slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{Name: ptr.To(p.Name), Protocol: ptr.To(p.Protocol), Port: ptr.To(int32(53))})
	}
	if _, err := s.cp.admin.DiscoveryV1().EndpointSlices(metav1.NamespaceSystem).Create(ctx, slice, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("testbed: kube-dns EndpointSlice: %w", err)
	}
	return nil
}

// tenthAddress is the tenth address of a CIDR (10.96.0.10 of 10.96.0.0/16).
func tenthAddress(cidr string) (netip.Addr, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("testbed: service CIDR %q: %w", cidr, err)
	}
	b := p.Masked().Addr().AsSlice()
	b[len(b)-1] += 10
	a, _ := netip.AddrFromSlice(b)
	return a, nil
}
