package service

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// testCheck is node1's check in the testbed's default topology: service
// CIDRs of both families, node1's pod subnets, the cluster networks and the
// node's own network, and one Service ("other") whose ClusterIP lies
// outside the service CIDRs.
func testCheck() *EndpointCheck {
	p := netip.MustParsePrefix
	return &EndpointCheck{
		ServiceCIDRs: []netip.Prefix{p("10.96.0.0/16"), p("fd02::/112")},
		Subnets: []netip.Prefix{p("10.244.1.0/24"), p("fd00:10:244:1::/64"), p("10.244.0.0/16"),
			p("172.30.0.11/24"), p("192.0.2.8/31")},
		ClusterIP: func(a netip.Addr) (types.NamespacedName, bool) {
			if a == addr("10.97.0.5") {
				return types.NamespacedName{Namespace: "default", Name: "other"}, true
			}
			return types.NamespacedName{}, false
		},
	}
}

func TestEndpointCheck(t *testing.T) {
	c := testCheck()
	tests := []struct {
		ip      string
		want    error // nil: usable
		message string
	}{
		// Usable.
		{ip: "10.244.2.5"},
		{ip: "10.244.1.7"},
		{ip: "172.30.0.12"},
		{ip: "fd00:10:244:2::5"},
		{ip: "192.0.2.9"},  // a /31 has no broadcast address
		{ip: "10.244.1.0"}, // a network address is not refused
		{ip: "10.244.2.255", message: "another node's pod subnet is unknown here"},
		{ip: "fd00:10:244:1:ffff:ffff:ffff:ffff", message: "IPv6 has no broadcast"},
		{ip: "240.0.0.1", message: "class E: Linux routes it"},
		// Refused by the API server already, refused here too.
		{ip: "0.0.0.0", want: ErrEndpointAddress, message: "0.0.0.0 is the unspecified address"},
		{ip: "::", want: ErrEndpointAddress, message: ":: is the unspecified address"},
		{ip: "127.0.0.1", want: ErrEndpointAddress, message: "127.0.0.1 is a loopback address"},
		{ip: "::1", want: ErrEndpointAddress, message: "::1 is a loopback address"},
		{ip: "169.254.3.4", want: ErrEndpointAddress, message: "169.254.3.4 is a link-local address"},
		{ip: "fe80::1", want: ErrEndpointAddress, message: "fe80::1 is a link-local address"},
		{ip: "224.0.0.251", want: ErrEndpointAddress, message: "224.0.0.251 is a multicast address"},
		{ip: "ff02::1", want: ErrEndpointAddress, message: "ff02::1 is a multicast address"},
		// Accepted by the API server.
		{ip: "255.255.255.255", want: ErrEndpointAddress, message: "address cannot be an endpoint: 255.255.255.255 is the limited broadcast address"},
		{ip: "239.1.2.3", want: ErrEndpointAddress, message: "239.1.2.3 is a multicast address"},
		{ip: "ff05::1:3", want: ErrEndpointAddress, message: "ff05::1:3 is a multicast address"},
		{ip: "fd00::1%eth0", want: ErrEndpointAddress, message: "fd00::1%eth0 is an address with a zone"},
		{ip: "10.244.1.255", want: ErrEndpointAddress, message: "10.244.1.255 is the broadcast address of 10.244.1.0/24"},
		{ip: "10.244.255.255", want: ErrEndpointAddress, message: "10.244.255.255 is the broadcast address of 10.244.0.0/16"},
		{ip: "172.30.0.255", want: ErrEndpointAddress, message: "172.30.0.255 is the broadcast address of 172.30.0.0/24"},
		{ip: "10.96.0.10", want: ErrServiceAddress, message: "endpoint is a service address: 10.96.0.10 is in the service CIDR 10.96.0.0/16"},
		{ip: "10.96.255.255", want: ErrServiceAddress, message: "in the service CIDR 10.96.0.0/16"},
		{ip: "fd02::a", want: ErrServiceAddress, message: "fd02::a is in the service CIDR fd02::/112"},
		{ip: "10.97.0.5", want: ErrServiceAddress, message: "10.97.0.5 is the ClusterIP of service default/other"},
	}
	for _, tc := range tests {
		t.Run(tc.ip, func(t *testing.T) {
			err := c.Check(addr(tc.ip))
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused (%s): %v", tc.message, err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.message) {
				t.Errorf("%q does not contain %q", err, tc.message)
			}
		})
	}

	// The zero check knows no cluster: only what no cluster can use.
	var zero EndpointCheck
	if err := zero.Check(addr("10.96.0.10")); err != nil {
		t.Errorf("zero check refused a ClusterIP it cannot know: %v", err)
	}
	if err := zero.Check(addr("255.255.255.255")); !errors.Is(err, ErrEndpointAddress) {
		t.Errorf("zero check: 255.255.255.255: %v", err)
	}
}

func TestBroadcast(t *testing.T) {
	tests := []struct {
		prefix, want string // want "": none
	}{
		{"10.244.1.0/24", "10.244.1.255"},
		{"10.244.1.77/24", "10.244.1.255"}, // not masked
		{"10.244.0.0/16", "10.244.255.255"},
		{"10.0.0.0/9", "10.127.255.255"},
		{"192.0.2.4/30", "192.0.2.7"},
		{"0.0.0.0/0", "255.255.255.255"},
		{"192.0.2.8/31", ""},
		{"192.0.2.8/32", ""},
		{"fd00::/64", ""},
	}
	for _, tc := range tests {
		b, ok := broadcast(netip.MustParsePrefix(tc.prefix))
		if got := ""; ok {
			got = b.String()
			if got != tc.want {
				t.Errorf("broadcast(%s) = %s, want %q", tc.prefix, got, tc.want)
			}
		} else if tc.want != "" {
			t.Errorf("broadcast(%s): none, want %s", tc.prefix, tc.want)
		}
	}
}

func TestEndpointCheckFilter(t *testing.T) {
	c := testCheck()
	ep := func(ip string, port uint16) Endpoint { return Endpoint{IP: addr(ip), Port: port, Ready: true} }

	good := []Endpoint{ep("10.244.1.5", 80), ep("10.244.2.5", 80)}
	got, refused := c.Filter(good)
	if len(refused) != 0 || &got[0] != &good[0] || len(got) != 2 {
		t.Fatalf("nothing to refuse: got %v (shared %v), refused %v", got, &got[0] == &good[0], refused)
	}

	// A refused address on two ports is reported once; the input stays.
	mixed := []Endpoint{ep("10.96.0.10", 80), ep("10.96.0.10", 81), ep("10.244.1.5", 80), ep("255.255.255.255", 80), ep("10.244.2.5", 80)}
	before := append([]Endpoint(nil), mixed...)
	got, refused = c.Filter(mixed)
	if want := []Endpoint{ep("10.244.1.5", 80), ep("10.244.2.5", 80)}; !reflect.DeepEqual(got, want) {
		t.Errorf("kept %v, want %v", got, want)
	}
	if len(refused) != 2 || refused[0].IP != addr("10.96.0.10") || !errors.Is(refused[0].Err, ErrServiceAddress) ||
		refused[1].IP != addr("255.255.255.255") || !errors.Is(refused[1].Err, ErrEndpointAddress) {
		t.Errorf("refused %v, want 10.96.0.10 (service address) then 255.255.255.255", refused)
	}
	if !reflect.DeepEqual(mixed, before) {
		t.Errorf("input modified: %v", mixed)
	}

	// Nothing usable: an empty list, not nil's "nothing refused".
	got, refused = c.Filter([]Endpoint{ep("10.96.0.10", 80)})
	if len(got) != 0 || len(refused) != 1 {
		t.Errorf("all refused: kept %v, refused %v", got, refused)
	}
}

// TestEndpointsTrackerUsable checks that a refused address is left out of
// the port's endpoints and reported on every slice entry that holds it,
// naming the slice and the field, while the other endpoints stay.
func TestEndpointsTrackerUsable(t *testing.T) {
	var sink errSink
	tr := NewEndpointsTracker(sink.report)
	web := spn("default", "web", "http", v1.ProtocolTCP)
	tr.Record(nil, slice("default", "web-a", "web", discovery.AddressTypeIPv4, "http", 8080,
		epSpec{ip: "10.244.1.5"}, epSpec{ip: "10.244.1.x"}, epSpec{ip: "10.96.0.10"}, epSpec{ip: "255.255.255.255"}))
	tr.Record(nil, slice("default", "web-b", "web", discovery.AddressTypeIPv4, "http", 8080,
		epSpec{ip: "10.96.0.10"}, epSpec{ip: "10.244.2.5"}))
	tr.Update()
	if errs := sink.take(); len(errs) != 1 || !strings.Contains(errs[0].Error(), "unparseable IP") {
		t.Fatalf("errors while recording: %v", errs)
	}
	if n := len(tr.Endpoints(web)); n != 4 {
		t.Fatalf("%d endpoints tracked, want 4 (refusing is Usable's business)", n)
	}

	eps, errs := tr.Usable(web, testCheck())
	var ips []string
	for _, e := range eps {
		ips = append(ips, e.IP.String())
	}
	if want := []string{"10.244.1.5", "10.244.2.5"}; !reflect.DeepEqual(ips, want) {
		t.Errorf("usable endpoints %v, want %v", ips, want)
	}
	want := []string{
		"proxy: endpointslice default/web-a: endpoints[2].addresses[0]: endpoint is a service address: 10.96.0.10 is in the service CIDR 10.96.0.0/16",
		"proxy: endpointslice default/web-b: endpoints[0].addresses[0]: endpoint is a service address: 10.96.0.10 is in the service CIDR 10.96.0.0/16",
		"proxy: endpointslice default/web-a: endpoints[3].addresses[0]: address cannot be an endpoint: 255.255.255.255 is the limited broadcast address",
	}
	var got []string
	for _, err := range errs {
		var ie *InputError
		if !errors.As(err, &ie) || ie.Kind != "EndpointSlice" || ie.Namespace != "default" {
			t.Errorf("not an EndpointSlice InputError: %#v", err)
		}
		got = append(got, err.Error())
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("errors:\n got %q\nwant %q", got, want)
	}

	// Without a service CIDR, the address is usable: the check decides.
	if eps, errs := tr.Usable(web, &EndpointCheck{}); len(eps) != 3 || len(errs) != 1 {
		t.Errorf("zero check: %v %v, want 3 endpoints and the broadcast refused", eps, errs)
	}
}

// TestServiceTrackerClusterIPs follows ClusterIPs being taken and freed:
// TakeClusterIPChanges reports each address whose holder changed, once,
// and ClusterIPOwner answers for the Service holding it.
func TestServiceTrackerClusterIPs(t *testing.T) {
	tr := NewServiceTracker(nil)
	first := svc("default", "first", "10.97.0.5")
	second := svc("default", "second", "10.97.0.5", func(s *v1.Service) { s.CreationTimestamp.Time = t0.Add(1) })
	tr.Record(nil, first)
	tr.Update()
	if got := tr.TakeClusterIPChanges(); !reflect.DeepEqual(got, []netip.Addr{addr("10.97.0.5")}) {
		t.Fatalf("after add: %v", got)
	}
	if got := tr.TakeClusterIPChanges(); got != nil {
		t.Fatalf("taken twice: %v", got)
	}
	if o, ok := tr.ClusterIPOwner(addr("10.97.0.5")); !ok || o.Name != "first" {
		t.Fatalf("owner: %v %v", o, ok)
	}

	// A port change keeps the address: no change. A blocked duplicate
	// takes nothing either.
	f2 := first.DeepCopy()
	f2.Spec.Ports[0].Port = 8080
	tr.Record(first, f2)
	tr.Record(nil, second)
	tr.Update()
	if got := tr.TakeClusterIPChanges(); got != nil {
		t.Fatalf("port change and a blocked duplicate: %v", got)
	}

	// The holder goes, the duplicate takes over: the address changed
	// hands, once.
	tr.Record(f2, nil)
	tr.Update()
	if got := tr.TakeClusterIPChanges(); !reflect.DeepEqual(got, []netip.Addr{addr("10.97.0.5")}) {
		t.Fatalf("handover: %v", got)
	}
	if o, ok := tr.ClusterIPOwner(addr("10.97.0.5")); !ok || o.Name != "second" {
		t.Fatalf("owner after handover: %v %v", o, ok)
	}

	// A new address: the old one freed, the new one taken.
	s2 := second.DeepCopy()
	s2.Spec.ClusterIP, s2.Spec.ClusterIPs = "10.97.0.6", []string{"10.97.0.6"}
	tr.Record(second, s2)
	tr.Update()
	if got := tr.TakeClusterIPChanges(); !reflect.DeepEqual(got, []netip.Addr{addr("10.97.0.5"), addr("10.97.0.6")}) {
		t.Fatalf("readdressed: %v", got)
	}
	if _, ok := tr.ClusterIPOwner(addr("10.97.0.5")); ok {
		t.Fatal("a freed address still has an owner")
	}
}

func TestEndpointsTrackerPortsUsing(t *testing.T) {
	tr := NewEndpointsTracker(nil)
	tr.Record(nil, slice("default", "web-a", "web", discovery.AddressTypeIPv4, "http", 8080, epSpec{ip: "10.97.0.5"}, epSpec{ip: "10.244.1.5"}))
	tr.Record(nil, slice("default", "api-a", "api", discovery.AddressTypeIPv4, "http", 8080, epSpec{ip: "10.244.1.6"}))
	tr.Update()
	if got := tr.PortsUsing([]netip.Addr{addr("10.97.0.5"), addr("10.97.0.6")}); !reflect.DeepEqual(got, changeSet(spn("default", "web", "http", v1.ProtocolTCP))) {
		t.Errorf("ports using 10.97.0.5: %v", got.Sorted())
	}
	if got := tr.PortsUsing(nil); len(got) != 0 {
		t.Errorf("ports using nothing: %v", got.Sorted())
	}
}
