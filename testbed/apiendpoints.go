//lint:file-ignore SA1019 the upstream conformance tests read the kubernetes Service's Endpoints, which the API server would write

package testbed

import (
	"context"
	"fmt"
	"net"
	"strconv"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The API server listens on the host's loopback, which pods cannot reach,
// and so does not maintain the endpoints of the kubernetes Service itself
// (--endpoint-reconciler-type none). The testbed does: every node relays
// its InternalIP (IPv4) at the API server's port to the API server, as a
// control-plane node would serve it, and default/kubernetes has those
// addresses as its Endpoints and EndpointSlice. Pods then reach the API
// at https://kubernetes.default.svc (10.96.0.1:443), through nodeflow's
// service proxy, with their service account tokens.

// publishAPIServer starts the relays and writes the endpoints.
func (s *supervisor) publishAPIServer(ctx context.Context, nodes []string) error {
	port := s.cp.apiPort
	var addrs []string
	for _, n := range nodes {
		for _, a := range s.top.Topology.Nodes[n].Addresses() {
			if !a.Addr().Is4() {
				continue
			}
			listen := net.JoinHostPort(a.Addr().String(), strconv.Itoa(port))
			p, err := startNodeProxy(memberNetns(s.top.Name, n), listen, "127.0.0.1:"+strconv.Itoa(port))
			if err != nil {
				return fmt.Errorf("testbed: node %s: API relay on %s: %w", n, listen, err)
			}
			s.proxies = append(s.proxies, p)
			addrs = append(addrs, a.Addr().String())
		}
	}
	ep := &v1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: metav1.NamespaceDefault,
			// The API server marks its own Endpoints so; the mirroring
			// controller leaves them alone.
			Labels: map[string]string{discoveryv1.LabelSkipMirror: "true"}},
		Subsets: []v1.EndpointSubset{{Ports: []v1.EndpointPort{{Name: "https", Port: int32(port), Protocol: v1.ProtocolTCP}}}},
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: metav1.NamespaceDefault,
			Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes", discoveryv1.LabelManagedBy: "testbed"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(port)), Protocol: ptr.To(v1.ProtocolTCP)}},
	}
	for _, a := range addrs {
		ep.Subsets[0].Addresses = append(ep.Subsets[0].Addresses, v1.EndpointAddress{IP: a})
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	c := s.cp.admin
	if _, err := c.CoreV1().Endpoints(metav1.NamespaceDefault).Create(ctx, ep, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("testbed: endpoints of the kubernetes Service: %w", err)
	}
	if _, err := c.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Create(ctx, slice, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("testbed: EndpointSlice of the kubernetes Service: %w", err)
	}
	return nil
}
