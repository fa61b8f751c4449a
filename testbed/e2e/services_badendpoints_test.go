package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// badEndpointTries is how many connections must all reach the good
// endpoint. With the four bad endpoints in the group beside it, a
// connection would go to the good one with probability 1/5: 40 tries all
// answered cannot happen by chance.
const badEndpointTries = 40

// TestServicesBadEndpoints gives a selectorless Service one EndpointSlice
// holding a good pod endpoint and addresses that the API server accepts but
// no endpoint can have: the Service's own ClusterIP, another Service's
// ClusterIP, 255.255.255.255, and the broadcast address of node1's pod
// subnet. From a pod on node1: every connection reaches the good pod, br0's
// group for the service holds one bucket and none for the bad addresses,
// and each bad address gets a Warning event on the slice naming its field.
func TestServicesBadEndpoints(t *testing.T) {
	e, ns := agentNamespace(t, "e2e-badep")
	ctx := context.Background()
	m, _ := e.state.Member("node1")
	good := deployPods(t, e, ns, "web", 1)[0]
	var client netPod
	for _, p := range deployPods(t, e, ns, "client", 2) {
		if p.node == "node1" {
			client = p
		}
	}
	if client.name == "" {
		t.Fatal("no client pod on node1")
	}

	mkSvc := func(name string) netip.Addr {
		t.Helper()
		s, err := e.client.CoreV1().Services(ns).Create(ctx, &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1.ServiceSpec{IPFamilies: []v1.IPFamily{v1.IPv4Protocol},
				Ports: []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return svcAddrs(t, s)[0]
	}
	vip := mkSvc("bad")
	otherVIP := mkSvc("other")

	node1, err := e.client.CoreV1().Nodes().Get(ctx, "node1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var podBroadcast netip.Addr
	for _, c := range node1.Spec.PodCIDRs {
		if p, err := netip.ParsePrefix(c); err == nil && p.Addr().Is4() && p.Bits() <= 30 {
			a := p.Masked().Addr().As4()
			host := uint32(1)<<(32-p.Bits()) - 1
			a[0], a[1], a[2], a[3] = a[0]|byte(host>>24), a[1]|byte(host>>16), a[2]|byte(host>>8), a[3]|byte(host)
			podBroadcast = netip.AddrFrom4(a)
		}
	}
	if !podBroadcast.IsValid() {
		t.Fatalf("node1 has no IPv4 pod CIDR: %v", node1.Spec.PodCIDRs)
	}

	// Entry 0 is good; the field of each bad one is its index.
	bad := []netip.Addr{vip, otherVIP, netip.MustParseAddr("255.255.255.255"), podBroadcast}
	eps := []discovery.Endpoint{readyEndpoint(good.ip(false), good.node)}
	for _, a := range bad {
		eps = append(eps, readyEndpoint(a, good.node))
	}
	sl := sliceFor("bad", "bad-1", discovery.AddressTypeIPv4,
		[]discovery.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8080)), Protocol: ptr.To(v1.ProtocolTCP)}}, eps...)
	if _, err := e.client.DiscoveryV1().EndpointSlices(ns).Create(ctx, sl, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the API server refused the slice (it should accept these addresses): %v", err)
	}
	t.Logf("service bad %s: good endpoint %s (%s), bad %v", vip, good.ip(false), good.name, bad)

	// The first answer says the service is programmed; then every
	// connection, each from a new source port, must reach the good pod.
	eventually(t, 30*time.Second, "service bad answers", func(ctx context.Context) error {
		_, _, err := httpGet(ctx, client.netns, vip, 80)
		return err
	})
	for i := range badEndpointTries {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		pod, _, err := httpGet(cctx, client.netns, vip, 80)
		cancel()
		if err != nil || pod != good.name {
			t.Fatalf("connection %d of %d to %s: answered by %q, %v; want %s", i+1, badEndpointTries, vip, pod, err, good.name)
		}
	}

	// br0's group: one bucket, the good endpoint's.
	eventually(t, 10*time.Second, "one bucket in service bad's group", func(context.Context) error {
		dump := ofctl(t, m, "dump-groups", "br0")
		line, ok := groupLoading(dump, good.ip(false))
		if !ok {
			return fmt.Errorf("no group of br0 loads %s:\n%s", good.ip(false), dump)
		}
		if n := strings.Count(line, "bucket="); n != 1 {
			return fmt.Errorf("group has %d buckets, want 1: %s", n, line)
		}
		for _, a := range bad {
			if l, ok := groupLoading(dump, a); ok {
				return fmt.Errorf("a group loads bad endpoint %s: %s", a, l)
			}
		}
		return nil
	})

	// A Warning event on the slice for each bad address, naming the field.
	// Every agent finds the same, and the first one's event stands for
	// all, so any node may be its source.
	for i, a := range bad {
		field := fmt.Sprintf("endpoints[%d].addresses[0]", i+1)
		eventually(t, 30*time.Second, "event for "+a.String(), func(ctx context.Context) error {
			evs, err := e.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=bad-1"})
			if err != nil {
				return err
			}
			var seen []string
			for _, ev := range evs.Items {
				if ev.Type == v1.EventTypeWarning && ev.Reason == "NodeflowBadInput" && ev.InvolvedObject.Kind == "EndpointSlice" &&
					ev.InvolvedObject.FieldPath == field && strings.Contains(ev.Message, " "+a.String()+" ") &&
					strings.Contains(ev.Message, "endpointslice "+ns+"/bad-1") && ev.Source.Component == "nodeflow-agent" && ev.Source.Host != "" {
					return nil
				}
				seen = append(seen, ev.Message)
			}
			return fmt.Errorf("no NodeflowBadInput event from an agent for %s at %s among %q", a, field, seen)
		})
	}
	if n := metricValue(t, m, "nodeflow_service_refused_endpoints"); n < float64(len(bad)) {
		t.Errorf("nodeflow_service_refused_endpoints on node1 is %v, want at least %d", n, len(bad))
	}
}

// groupLoading returns the line of a dump-groups output whose group has a
// bucket for IPv4 address a (a bucket commits the DNAT to it, or, with
// session affinity, loads it into a register), and whether there is one.
func groupLoading(dump string, a netip.Addr) (string, bool) {
	b := a.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	re := regexp.MustCompile(fmt.Sprintf(`set_field:%#x->x?x?reg\d+(,|\s|$)|nat\(dst=%s[:)]`, v, regexp.QuoteMeta(a.String())))
	for _, l := range strings.Split(dump, "\n") {
		if strings.Contains(l, "group_id=") && re.MatchString(l) {
			return l, true
		}
	}
	return "", false
}
