package service

import (
	"net/netip"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// svc returns a ClusterIP Service with one TCP port 80 -> "http", then
// applies the edits.
func svc(ns, name, ip string, edits ...func(*v1.Service)) *v1.Service {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(t0), ResourceVersion: "1"},
		Spec: v1.ServiceSpec{
			Type: v1.ServiceTypeClusterIP, ClusterIP: ip, ClusterIPs: []string{ip},
			Ports: []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP, TargetPort: intstr.FromString("web")}},
		},
	}
	for _, e := range edits {
		e(s)
	}
	return s
}

func spn(ns, name, port string, proto v1.Protocol) ServicePortName {
	return ServicePortName{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}, Port: port, Protocol: proto}
}

type epSpec struct {
	ip                          string
	node                        string
	ready, serving, terminating *bool
}

// slice returns an EndpointSlice for service svcName with one port.
func slice(ns, name, svcName string, at discovery.AddressType, portName string, port int32, eps ...epSpec) *discovery.EndpointSlice {
	s := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discovery.LabelServiceName: svcName}},
		AddressType: at,
		Ports:       []discovery.EndpointPort{{Name: ptr.To(portName), Port: ptr.To(port), Protocol: ptr.To(v1.ProtocolTCP)}},
	}
	for _, e := range eps {
		ep := discovery.Endpoint{Addresses: []string{e.ip}, Conditions: discovery.EndpointConditions{Ready: e.ready, Serving: e.serving, Terminating: e.terminating}}
		if e.node != "" {
			ep.NodeName = ptr.To(e.node)
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	return s
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// errSink collects reported errors.
type errSink struct {
	mu   sync.Mutex
	errs []error
}

func (s *errSink) report(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, err)
}

func (s *errSink) take() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.errs
	s.errs = nil
	return out
}

func intOrStr(i int) intstr.IntOrString { return intstr.FromInt32(int32(i)) }
