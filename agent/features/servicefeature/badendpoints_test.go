package servicefeature

import (
	"context"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"nodeflow/datapath/plan"
	"nodeflow/datapath/serviceflows"
	"nodeflow/internal/testutil/featuretest"
)

// eventLog collects the Events the proxy creates through the fake
// clientset.
type eventLog struct {
	mu     sync.Mutex
	events []*v1.Event
}

func (l *eventLog) react(a k8stesting.Action) (bool, runtime.Object, error) {
	ev := a.(k8stesting.CreateAction).GetObject().(*v1.Event)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, ev.DeepCopy())
	return true, ev, nil
}

// find returns the Warning events on EndpointSlice name whose message
// contains text.
func (l *eventLog) find(name, text string) []*v1.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*v1.Event
	for _, ev := range l.events {
		o := ev.InvolvedObject
		if o.Kind == "EndpointSlice" && o.Name == name && ev.Type == v1.EventTypeWarning &&
			ev.Reason == "NodeflowBadInput" && strings.Contains(ev.Message, text) {
			out = append(out, ev)
		}
	}
	return out
}

// usedIPs returns the addresses of the endpoints built for webPort.
func usedIPs(p *Proxy) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, e := range p.built[webPort].used {
		out = append(out, e.IP.String())
	}
	return out
}

// buckets returns the number of buckets of webPort's group on br0.
func buckets(t *testing.T, p *Proxy) int {
	t.Helper()
	st, ok := store(p, plan.Pod).Get(serviceflows.Owner(webPort))
	if !ok || len(st.Groups) != 1 {
		t.Fatalf("br0 state of %s: %d groups, want 1", webPort, len(st.Groups))
	}
	return len(st.Groups[0].Buckets)
}

// TestServiceProxyBadEndpoints gives a service endpoints that cannot be
// right among good ones: its own ClusterIP, another address of the
// service CIDR, a ClusterIP outside the service CIDR, 255.255.255.255, a
// multicast group and the broadcast address of this node's pod subnet.
// Only the good ones are programmed; each bad one gets a Warning event
// naming the slice and the field, once; and the check follows the
// Services and the node: a ClusterIP taken or freed, a pod subnet added.
func TestServiceProxyBadEndpoints(t *testing.T) {
	h := featuretest.New(featuretest.DefaultNode())
	client := fake.NewClientset()
	var evs eventLog
	client.PrependReactor("create", "events", evs.react)
	h.Client = client
	p := testServiceProxyOn(t, h, Options{})
	ctx := context.Background()
	sync := func() {
		t.Helper()
		if err := p.sync(ctx, false); err != nil {
			t.Fatal(err)
		}
	}

	// clusterIPService is a Service holding ip and nothing else.
	clusterIPService := func(name, ip string) *v1.Service {
		s := webService(ip)
		s.Name, s.Spec.Type, s.Spec.Ports[0].NodePort = name, v1.ServiceTypeClusterIP, 0
		return s
	}
	web := webService("10.96.0.10")
	other := clusterIPService("other", "10.97.0.5") // outside the service CIDR 10.96.0.0/16
	p.svcs.Record(nil, web)
	p.svcs.Record(nil, other)
	slice := webSlice("10.244.2.5", "10.96.0.10", "255.255.255.255", "10.97.0.5", "10.96.7.7",
		"239.1.2.3", "10.244.1.255", "10.97.0.6", "10.244.9.255")
	p.eps.Record(nil, slice)
	sync()

	want := []string{"10.97.0.6", "10.244.2.5", "10.244.9.255"}
	if got := usedIPs(p); !reflect.DeepEqual(got, want) {
		t.Errorf("endpoints programmed: %v, want %v", got, want)
	}
	if n := buckets(t, p); n != 3 {
		t.Errorf("group has %d buckets, want 3", n)
	}
	bad := map[string]string{ // address -> field and reason
		"10.96.0.10":      "endpoints[1].addresses[0]: endpoint is a service address: 10.96.0.10 is the ClusterIP of service default/web",
		"255.255.255.255": "endpoints[2].addresses[0]: address cannot be an endpoint: 255.255.255.255 is the limited broadcast address",
		"10.97.0.5":       "endpoints[3].addresses[0]: endpoint is a service address: 10.97.0.5 is the ClusterIP of service default/other",
		"10.96.7.7":       "endpoints[4].addresses[0]: endpoint is a service address: 10.96.7.7 is in the service CIDR 10.96.0.0/16",
		"239.1.2.3":       "endpoints[5].addresses[0]: address cannot be an endpoint: 239.1.2.3 is a multicast address",
		"10.244.1.255":    "endpoints[6].addresses[0]: address cannot be an endpoint: 10.244.1.255 is the broadcast address of 10.244.1.0/24",
	}
	for ip, msg := range bad {
		if !featuretest.WaitFor(5*time.Second, func() bool { return len(evs.find("web-abc", msg)) > 0 }) {
			t.Errorf("no Warning event on web-abc for %s (%q)", ip, msg)
			continue
		}
		ev := evs.find("web-abc", msg)[0]
		if field, _, _ := strings.Cut(msg, ":"); ev.InvolvedObject.FieldPath != field || ev.InvolvedObject.Namespace != "default" ||
			ev.InvolvedObject.APIVersion != "discovery.k8s.io/v1" {
			t.Errorf("event for %s on %+v, want field %s of discovery.k8s.io/v1 default/web-abc", ip, ev.InvolvedObject, field)
		}
	}
	if n := value(t, p.metrics.inputErrors.WithLabelValues("EndpointSlice")); n != float64(len(bad)) {
		t.Errorf("EndpointSlice input errors %v, want %d", n, len(bad))
	}
	if n := value(t, p.metrics.refusedEndpoints); n != float64(len(bad)) {
		t.Errorf("refused endpoints gauge %v, want %d", n, len(bad))
	}

	// A full sync refuses them again, without new reports.
	if err := p.sync(ctx, true); err != nil {
		t.Fatal(err)
	}
	if n := value(t, p.metrics.inputErrors.WithLabelValues("EndpointSlice")); n != float64(len(bad)) {
		t.Errorf("EndpointSlice input errors %v after a full sync, want still %d", n, len(bad))
	}
	if got := usedIPs(p); !reflect.DeepEqual(got, want) {
		t.Errorf("endpoints after a full sync: %v, want %v", got, want)
	}

	// A new Service takes 10.97.0.6 (outside the service CIDR): web's
	// endpoint there is left out at the next partial sync.
	late := clusterIPService("late", "10.97.0.6")
	p.svcs.Record(nil, late)
	sync()
	want = []string{"10.244.2.5", "10.244.9.255"}
	if got := usedIPs(p); !reflect.DeepEqual(got, want) {
		t.Errorf("after service late took 10.97.0.6: %v, want %v", got, want)
	}
	if !featuretest.WaitFor(5*time.Second, func() bool {
		return len(evs.find("web-abc", "endpoints[7].addresses[0]: endpoint is a service address: 10.97.0.6 is the ClusterIP of service default/late")) > 0
	}) {
		t.Error("no event for 10.97.0.6")
	}
	// It frees it: the endpoint is back.
	p.svcs.Record(late, nil)
	sync()
	want = []string{"10.97.0.6", "10.244.2.5", "10.244.9.255"}
	if got := usedIPs(p); !reflect.DeepEqual(got, want) {
		t.Errorf("after service late left: %v, want %v", got, want)
	}

	// The node gets a pod subnet whose broadcast address is an endpoint.
	n := featuretest.DefaultNode()
	n.PodCIDRs = append(n.PodCIDRs, netip.MustParsePrefix("10.244.9.0/24"))
	h.SetNode(n)
	sync()
	want = []string{"10.97.0.6", "10.244.2.5"}
	if got := usedIPs(p); !reflect.DeepEqual(got, want) {
		t.Errorf("after the node got 10.244.9.0/24: %v, want %v", got, want)
	}
	if n := value(t, p.metrics.refusedEndpoints); n != float64(len(bad)+1) {
		t.Errorf("refused endpoints gauge %v, want %d", n, len(bad)+1)
	}

	// Only bad endpoints left: the service rejects, as without endpoints.
	cur := webSlice("10.96.0.10", "255.255.255.255")
	p.eps.Record(slice, cur)
	sync()
	st, _ := store(p, plan.Pod).Get(serviceflows.Owner(webPort))
	rejects := 0
	for _, f := range st.Flows {
		if hasController(f) {
			rejects++
		}
	}
	if len(st.Groups) != 0 || rejects == 0 {
		t.Errorf("only bad endpoints: %d groups, %d reject flows; want a reject and no group", len(st.Groups), rejects)
	}
	// The service goes: nothing is counted as refused any more.
	p.svcs.Record(web, nil)
	sync()
	if n := value(t, p.metrics.refusedEndpoints); n != 0 {
		t.Errorf("refused endpoints gauge %v after the service left, want 0", n)
	}
}

// TestServiceProxyBadEndpointsHealthCheck checks that a refused endpoint
// on this node does not count as a local endpoint in the health check a
// load balancer asks (it would send traffic that has nowhere to go).
func TestServiceProxyBadEndpointsHealthCheck(t *testing.T) {
	p := testServiceProxy(t)
	p.health.listen = func(uint16) (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
	t.Cleanup(p.health.closeAll)
	lb := webService("10.96.0.10")
	lb.Spec.Type = v1.ServiceTypeLoadBalancer
	lb.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	lb.Spec.HealthCheckNodePort = 30100
	p.svcs.Record(nil, lb)
	sl := webSlice("10.244.1.5", "10.244.1.255", "10.244.2.5")
	for i := range 2 {
		sl.Endpoints[i].NodeName = ptr.To("node1")
	}
	p.eps.Record(nil, sl)
	if err := p.sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	p.health.mu.Lock()
	local := p.health.ports[webPort].local
	p.health.mu.Unlock()
	if want := []netip.Addr{netip.MustParseAddr("10.244.1.5")}; !reflect.DeepEqual(local, want) {
		t.Errorf("local endpoints in the health check: %v, want %v", local, want)
	}
}
