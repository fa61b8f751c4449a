package testbed

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// The cluster DNS: CoreDNS (testbed/tools/build.sh coredns, part of `make
// testbed-deps`) as a cluster runs it: the Deployment kube-system/coredns
// of two pods (the kubelet stand-in maps the coredns image to the binary),
// its Corefile in the ConfigMap kube-system/coredns, answering for
// cluster.local from the API with its service account and forwarding the
// rest to the node's resolver (the testbed's DNS server on the external
// host); the kube-dns Service, at the tenth address of the service range as
// kubeadm places it, selects the pods. The kubelets point ClusterFirst pods
// at it.

// clusterDNSName names CoreDNS's Deployment, ConfigMap, ServiceAccount and
// ClusterRole (as kubeadm names them).
const clusterDNSName = "coredns"

// CoreDNSImage is the image of the CoreDNS Deployment.
const CoreDNSImage = "registry.k8s.io/coredns/coredns:v1.12.1"

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

// DefaultRegressionIssue74839 is where testbed/tools/build.sh puts the
// upstream regression-issue-74839 test image's program, "" if it is not
// there.
func DefaultRegressionIssue74839() string {
	return cachedTool("regression-issue-74839", "regression-issue-74839")
}

// DefaultGinkgo is where testbed/tools/build.sh puts the ginkgo runner, ""
// if it is not there.
func DefaultGinkgo() string {
	return cachedTool("ginkgo", "ginkgo")
}

// corefile is the cluster DNS's configuration (kubeadm's, without the
// metrics port).
const corefile = `.:53 {
    errors
    health {
        lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    forward . /etc/resolv.conf {
        max_concurrent 1000
    }
    cache 30
    loop
    reload
    loadbalance
}
`

// startClusterDNS creates CoreDNS's objects and the kube-dns Service.
func (s *supervisor) startClusterDNS(ctx context.Context) error {
	if s.opts.CoreDNS == "" {
		s.log.Info("no cluster DNS: CoreDNS is not built (testbed/tools/build.sh coredns)")
		return nil
	}
	c := s.cp.admin
	ns := metav1.NamespaceSystem
	labels := map[string]string{"k8s-app": "kube-dns"}
	create := func(what string, err error) error {
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("testbed: cluster DNS: %s: %w", what, err)
		}
		return nil
	}
	_, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: clusterDNSName}}, metav1.CreateOptions{})
	if err := create("service account", err); err != nil {
		return err
	}
	_, err = c.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "system:" + clusterDNSName},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}, metav1.CreateOptions{})
	if err := create("cluster role", err); err != nil {
		return err
	}
	_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "system:" + clusterDNSName},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:" + clusterDNSName},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: clusterDNSName, Namespace: ns}},
	}, metav1.CreateOptions{})
	if err := create("cluster role binding", err); err != nil {
		return err
	}
	_, err = c.CoreV1().ConfigMaps(ns).Create(ctx, &v1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: clusterDNSName}, Data: map[string]string{"Corefile": corefile},
	}, metav1.CreateOptions{})
	if err := create("config map", err); err != nil {
		return err
	}
	port := func(name string, proto v1.Protocol, n int32) v1.ContainerPort {
		return v1.ContainerPort{Name: name, Protocol: proto, ContainerPort: n}
	}
	probe := func(path string, port int32) *v1.Probe {
		return &v1.Probe{PeriodSeconds: 2, ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: path, Port: intstr.FromInt32(port)}}}
	}
	_, err = c.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: clusterDNSName, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: v1.PodSpec{
					ServiceAccountName: clusterDNSName,
					DNSPolicy:          v1.DNSDefault,
					PriorityClassName:  "system-cluster-critical",
					TopologySpreadConstraints: []v1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: v1.ScheduleAnyway,
						LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
					}},
					Containers: []v1.Container{{
						Name: clusterDNSName, Image: CoreDNSImage, Args: []string{"-conf", "/etc/coredns/Corefile"},
						Ports:          []v1.ContainerPort{port("dns", v1.ProtocolUDP, 53), port("dns-tcp", v1.ProtocolTCP, 53)},
						VolumeMounts:   []v1.VolumeMount{{Name: "config-volume", MountPath: "/etc/coredns", ReadOnly: true}},
						ReadinessProbe: probe("/ready", 8181),
						LivenessProbe:  probe("/health", 8080),
					}},
					Volumes: []v1.Volume{{Name: "config-volume", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
						LocalObjectReference: v1.LocalObjectReference{Name: clusterDNSName},
						Items:                []v1.KeyToPath{{Key: "Corefile", Path: "Corefile"}},
					}}}},
				},
			},
		},
	}, metav1.CreateOptions{})
	if err := create("deployment", err); err != nil {
		return err
	}
	ip, err := tenthAddress(s.top.Kubernetes.ServiceCIDRs[0])
	if err != nil {
		return err
	}
	_, err = c.CoreV1().Services(ns).Create(ctx, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Labels: map[string]string{"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}},
		Spec: v1.ServiceSpec{ClusterIP: ip.String(), Selector: labels, Ports: []v1.ServicePort{
			{Name: "dns", Protocol: v1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(53)},
			{Name: "dns-tcp", Protocol: v1.ProtocolTCP, Port: 53, TargetPort: intstr.FromInt32(53)},
		}},
	}, metav1.CreateOptions{})
	return create("kube-dns Service", err)
}

// waitClusterDNS waits until CoreDNS's pods are ready (no cluster DNS: at
// once).
func (s *supervisor) waitClusterDNS(ctx context.Context, timeout time.Duration) error {
	if s.opts.CoreDNS == "" {
		return nil
	}
	deadline := time.Now().Add(timeout)
	last := "no answer"
	for time.Now().Before(deadline) {
		d, err := s.cp.admin.AppsV1().Deployments(metav1.NamespaceSystem).Get(ctx, clusterDNSName, metav1.GetOptions{})
		switch {
		case err != nil:
			last = err.Error()
		case d.Status.ReadyReplicas > 0 && d.Status.ReadyReplicas == ptr.Deref(d.Spec.Replicas, 1):
			return nil
		default:
			last = fmt.Sprintf("%d of %d pods ready", d.Status.ReadyReplicas, ptr.Deref(d.Spec.Replicas, 1))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("testbed: cluster DNS not ready after %s: %s (see kubectl -n kube-system get pods)", timeout, last)
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
