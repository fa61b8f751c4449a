package service

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestServicePorts(t *testing.T) {
	tests := []struct {
		name    string
		svc     *v1.Service
		want    map[ServicePortName]*ServicePort
		wantErr []string // substrings, one per error, in order
	}{
		{
			name: "cluster IP, named target port",
			svc:  svc("default", "web", "10.96.0.10"),
			want: map[ServicePortName]*ServicePort{
				spn("default", "web", "http", v1.ProtocolTCP): {
					Name: spn("default", "web", "http", v1.ProtocolTCP), Protocol: v1.ProtocolTCP, Port: 80,
					ClusterIPs: []netip.Addr{addr("10.96.0.10")},
				},
			},
		},
		{
			name: "headless is ignored",
			svc:  svc("default", "hl", "None"),
		},
		{
			name: "another proxy's service is ignored",
			svc: svc("default", "other", "10.96.0.11", func(s *v1.Service) {
				s.Labels = map[string]string{ServiceProxyNameLabel: "foo-bar"}
			}),
		},
		{
			name: "a service labelled headless is ignored",
			svc: svc("default", "hl2", "10.96.0.12", func(s *v1.Service) {
				s.Labels = map[string]string{HeadlessLabel: ""}
			}),
		},
		{
			name: "a service named for nodeflow is served",
			svc: svc("default", "web", "10.96.0.10", func(s *v1.Service) {
				s.Labels = map[string]string{ServiceProxyNameLabel: ProxyName}
			}),
			want: map[ServicePortName]*ServicePort{
				spn("default", "web", "http", v1.ProtocolTCP): {
					Name: spn("default", "web", "http", v1.ProtocolTCP), Protocol: v1.ProtocolTCP, Port: 80,
					ClusterIPs: []netip.Addr{addr("10.96.0.10")},
				},
			},
		},
		{
			name: "external name is ignored",
			svc: svc("default", "ext", "", func(s *v1.Service) {
				s.Spec.Type, s.Spec.ClusterIP, s.Spec.ClusterIPs = v1.ServiceTypeExternalName, "", nil
			}),
		},
		{
			name: "dual-stack load balancer with everything",
			svc: svc("ns", "lb", "fd00::10", func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeLoadBalancer
				s.Spec.ClusterIPs = []string{"fd00::10", "10.96.0.20"}
				s.Spec.Ports = []v1.ServicePort{
					{Name: "dns", Port: 53, NodePort: 30053, Protocol: v1.ProtocolUDP, TargetPort: intOrStr(5353)},
					{Name: "sctp", Port: 9, NodePort: 30009, Protocol: v1.ProtocolSCTP},
				}
				s.Spec.ExternalIPs = []string{"192.0.2.7", "2001:db8::7", "192.0.2.7"}
				s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
				s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](30)}}
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = 31000
				s.Spec.InternalTrafficPolicy = ptr.To(v1.ServiceInternalTrafficPolicyLocal)
				s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{
					{IP: "198.51.100.1"}, {Hostname: "lb.example"},
					{IP: "198.51.100.2", IPMode: ptr.To(v1.LoadBalancerIPModeProxy)},
				}
				s.Annotations = map[string]string{IdledAtAnnotation: "2026-01-01T00:00:00Z"}
			}),
			want: func() map[ServicePortName]*ServicePort {
				base := ServicePort{
					ClusterIPs:      []netip.Addr{addr("10.96.0.20"), addr("fd00::10")},
					ExternalIPs:     []netip.Addr{addr("192.0.2.7"), addr("2001:db8::7")},
					LoadBalancerIPs: []netip.Addr{addr("198.51.100.1")},
					AffinityTimeout: 30 * time.Second, ExternalPolicyLocal: true, InternalPolicyLocal: true,
					HealthCheckNodePort: 31000, Idled: true,
				}
				dns, sctp := base, base
				dns.Name, dns.Protocol, dns.Port, dns.NodePort = spn("ns", "lb", "dns", v1.ProtocolUDP), v1.ProtocolUDP, 53, 30053
				sctp.Name, sctp.Protocol, sctp.Port, sctp.NodePort = spn("ns", "lb", "sctp", v1.ProtocolSCTP), v1.ProtocolSCTP, 9, 30009
				return map[ServicePortName]*ServicePort{dns.Name: &dns, sctp.Name: &sctp}
			}(),
		},
		{
			name: "affinity without config gets the default timeout; node port ignored on ClusterIP type",
			svc: svc("default", "aff", "10.96.0.11", func(s *v1.Service) {
				s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
				s.Spec.Ports[0].NodePort = 30080
			}),
			want: map[ServicePortName]*ServicePort{
				spn("default", "aff", "http", v1.ProtocolTCP): {
					Name: spn("default", "aff", "http", v1.ProtocolTCP), Protocol: v1.ProtocolTCP, Port: 80,
					ClusterIPs: []netip.Addr{addr("10.96.0.11")}, AffinityTimeout: DefaultAffinityTimeout,
				},
			},
		},
		{
			name:    "unparseable cluster IP rejects the service",
			svc:     svc("default", "bad", "10.96.0.300"),
			wantErr: []string{`proxy: service default/bad: spec.clusterIPs[0]: unparseable IP "10.96.0.300"`},
		},
		{
			name: "bad external IP, bad ingress IP, port out of range and bad protocol skip only that entry",
			svc: svc("default", "partly", "10.96.0.12", func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeLoadBalancer
				s.Spec.ExternalIPs = []string{"nope", "192.0.2.1"}
				s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "198.51.100.1"}, {IP: "x.y"}}
				s.Spec.Ports = append(s.Spec.Ports,
					v1.ServicePort{Name: "big", Port: 70000},
					v1.ServicePort{Name: "icmp", Port: 1, Protocol: "ICMP"},
					v1.ServicePort{Name: "np", Port: 81, NodePort: 70001})
			}),
			want: func() map[ServicePortName]*ServicePort {
				common := ServicePort{ClusterIPs: []netip.Addr{addr("10.96.0.12")}, ExternalIPs: []netip.Addr{addr("192.0.2.1")},
					LoadBalancerIPs: []netip.Addr{addr("198.51.100.1")}, Protocol: v1.ProtocolTCP}
				http, np := common, common
				http.Name, http.Port = spn("default", "partly", "http", v1.ProtocolTCP), 80
				np.Name, np.Port = spn("default", "partly", "np", v1.ProtocolTCP), 81
				return map[ServicePortName]*ServicePort{http.Name: &http, np.Name: &np}
			}(),
			wantErr: []string{
				`spec.externalIPs[0]: unparseable IP "nope"`,
				`status.loadBalancer.ingress[1].ip: unparseable IP "x.y"`,
				`spec.ports[1].port: port out of range: 70000 (1-65535)`,
				`spec.ports[2].protocol: unsupported protocol "ICMP"`,
				`spec.ports[3].nodePort: port out of range: 70001 (1-65535)`,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, errs := ServicePorts(tc.svc)
			if len(tc.want) == 0 && len(got) == 0 {
				got = nil
				tc.want = nil
			}
			if !reflect.DeepEqual(got, tc.want) {
				for n, p := range got {
					t.Logf("got %s: %+v", n, *p)
				}
				for n, p := range tc.want {
					t.Logf("want %s: %+v", n, *p)
				}
				t.Errorf("ports differ")
			}
			if len(errs) != len(tc.wantErr) {
				t.Fatalf("errors: got %v, want %d", errs, len(tc.wantErr))
			}
			for i, err := range errs {
				if !strings.Contains(err.Error(), tc.wantErr[i]) {
					t.Errorf("error %d: %q does not contain %q", i, err, tc.wantErr[i])
				}
				var ie *InputError
				if !errors.As(err, &ie) || ie.Kind != "Service" || ie.Name != tc.svc.Name {
					t.Errorf("error %d: %v is not an InputError naming the service", i, err)
				}
			}
		})
	}
}

func TestServicePortNameString(t *testing.T) {
	if got := spn("default", "dns", "", v1.ProtocolUDP).String(); got != "default/dns:/UDP" {
		t.Errorf("got %q", got)
	}
}
