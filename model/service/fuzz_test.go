package service

import (
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// FuzzObjects feeds arbitrary addresses, ports and types to the Service
// and EndpointSlice processing: it must never panic, every error must be an
// InputError, and every model it keeps must hold parsed addresses and
// ports in range, which the endpoint check judges without failing.
func FuzzObjects(f *testing.F) {
	f.Add("10.96.0.10", "fd00::10", "192.0.2.1", int32(80), int32(30080), "TCP", "IPv4", "10.128.0.2", int32(8080))
	f.Add("None", "", "", int32(0), int32(0), "UDP", "IPv6", "fd01::2", int32(53))
	f.Add("10.96.0.300", "::ffff:10.0.0.1", "x", int32(70000), int32(-1), "ICMP", "IPv5", "10.0.0.x", int32(0))
	f.Fuzz(func(t *testing.T, cip, cip2, ext string, port, nodePort int32, proto, addrType, epIP string, epPort int32) {
		s := svc("ns", "fuzz", cip, func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeNodePort
			s.Spec.ClusterIPs = []string{cip, cip2}
			s.Spec.ExternalIPs = []string{ext}
			s.Spec.Ports = []v1.ServicePort{{Port: port, NodePort: nodePort, Protocol: v1.Protocol(proto)}}
		})
		ports, errs := ServicePorts(s)
		for _, err := range errs {
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("not an InputError: %v", err)
			}
		}
		for _, p := range ports {
			if p.Port == 0 || len(p.ClusterIPs) == 0 {
				t.Fatalf("bad model %+v", p)
			}
			for _, a := range p.ClusterIPs {
				if !a.IsValid() || a.Is4In6() {
					t.Fatalf("bad cluster IP %v", a)
				}
			}
		}
		sl := slice("ns", "s", "fuzz", discovery.AddressType(addrType), "", epPort, epSpec{ip: epIP, ready: ptr.To(true)})
		_, eps, errs := SliceEndpoints(sl)
		for _, err := range errs {
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("not an InputError: %v", err)
			}
		}
		for _, list := range eps {
			for _, e := range list {
				if !e.IP.IsValid() || e.Port == 0 {
					t.Fatalf("bad endpoint %+v", e)
				}
				if err := testCheck().Check(e.IP); err != nil && !errors.Is(err, ErrEndpointAddress) && !errors.Is(err, ErrServiceAddress) {
					t.Fatalf("check of %v: %v", e.IP, err)
				}
			}
		}
	})
}
