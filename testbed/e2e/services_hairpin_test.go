package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestServicesHairpin has a pod reach itself through its own Service's
// ClusterIP, over TCP and UDP in both families, without and with ClientIP
// session affinity. br0 DNATs the connection
// back to the pod and SNATs it to the gateway address of the node's pod
// subnet, so that the reply comes back through br0 and is un-NATed; the
// pod sees that gateway address as its client.
func TestServicesHairpin(t *testing.T) {
	e, ns := agentNamespace(t, "e2e-hairpin")
	ctx := context.Background()
	solo := deployPods(t, e, ns, "solo", 1)[0]
	// The same with ClientIP affinity, whose DNAT is committed by a flow
	// of table 35 after the binding is learned rather than by the bucket.
	var svcs []*v1.Service
	for _, affinity := range []v1.ServiceAffinity{v1.ServiceAffinityNone, v1.ServiceAffinityClientIP} {
		name := "solo"
		if affinity == v1.ServiceAffinityClientIP {
			name = "solo-sticky"
		}
		svc, err := e.client.CoreV1().Services(ns).Create(ctx, newService(name, v1.ServiceSpec{
			Selector:        map[string]string{"app": "solo"},
			IPFamilyPolicy:  ptr.To(v1.IPFamilyPolicyPreferDualStack),
			Ports:           slices.Clone(webPorts),
			SessionAffinity: affinity,
		}), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		svcs = append(svcs, svc)
	}
	node, err := e.client.CoreV1().Nodes().Get(ctx, solo.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gateway := map[bool]netip.Addr{}
	for _, c := range node.Spec.PodCIDRs {
		p := netip.MustParsePrefix(c)
		gateway[p.Addr().Is6()] = p.Masked().Addr().Next()
	}
	for _, svc := range svcs {
		for _, vip := range svcAddrs(t, svc) {
			for _, udp := range []bool{false, true} {
				proto, port := "tcp", 80
				if udp {
					proto, port = "udp", 53
				}
				gw, ok := gateway[vip.Is6()]
				if !ok {
					t.Fatalf("node %s has no %s pod CIDR: %v", solo.node, family(vip.Is6()), node.Spec.PodCIDRs)
				}
				name := fmt.Sprintf("%s/%s/%s", svc.Name, proto, family(vip.Is6()))
				t.Run(name, func(t *testing.T) {
					reach(t, "hairpin "+name, solo.netns, udp, vip, port, map[string]bool{solo.name: true}, gw)
				})
			}
		}
	}
}
