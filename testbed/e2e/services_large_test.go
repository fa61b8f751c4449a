package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"nodeflow/internal/testutil/flowtest"
	"nodeflow/testbed"
)

// largeEndpoints is the size of the large service: five EndpointSlices of
// a thousand endpoints, the most one slice holds.
const largeEndpoints = 5000

// largeEndpointIP is endpoint i of the large service: addresses in the
// cluster CIDR that no node's pod CIDR holds, so they count as pods on
// another node.
func largeEndpointIP(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 244, byte(200 + i/250), byte(1 + i%250)})
}

// largeSlice is EndpointSlice s of the large service (endpoints s*1000 to
// s*1000+999), with target port port.
func largeSlice(s int, port int32) *discovery.EndpointSlice {
	sl := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: fmt.Sprintf("big-%d", s), Labels: map[string]string{discovery.LabelServiceName: "big"}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(port), Protocol: ptr.To(v1.ProtocolTCP)}},
	}
	for i := s * 1000; i < (s+1)*1000; i++ {
		sl.Endpoints = append(sl.Endpoints, discovery.Endpoint{
			Addresses: []string{largeEndpointIP(i).String()}, NodeName: ptr.To("node2"),
			Conditions: discovery.EndpointConditions{Ready: ptr.To(true)},
		})
	}
	return sl
}

// TestServicesLargeGroup gives a selectorless Service 5,000 endpoints (in
// five EndpointSlices) and checks that node1's agent installs them as one
// select group that OVS uses: ofproto/trace of connections from a pod with
// different source ports lands on many distinct endpoints from every
// slice, each DNATed to its address and target port. Then one slice
// changes its target port and the group follows. A group this size does
// not fit one OpenFlow message, and Open vSwitch 3.1 cannot describe it
// back (dump-groups fails on it), hence the trace as the oracle; the
// reconciler installs it as an add and bucket inserts in one bundle (see
// lib/openflow/ofconn).
func TestServicesLargeGroup(t *testing.T) {
	e, ns := agentNamespace(t, "e2e-large")
	ctx := context.Background()
	m, _ := e.state.Member("node1")
	var client netPod
	for _, p := range deployPods(t, e, ns, "client", 2) {
		if p.node == "node1" {
			client = p
		}
	}
	if client.name == "" {
		t.Fatal("no client pod on node1")
	}
	errsBefore := metricValue(t, m, "nodeflow_service_build_errors_total")

	svc, err := e.client.CoreV1().Services(ns).Create(ctx, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "big"},
		Spec: v1.ServiceSpec{IPFamilies: []v1.IPFamily{v1.IPv4Protocol},
			Ports: []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vip := svcAddrs(t, svc)[0]
	created := make([]*discovery.EndpointSlice, largeEndpoints/1000)
	for s := range created {
		if created[s], err = e.client.DiscoveryV1().EndpointSlices(ns).Create(ctx, largeSlice(s, 8080), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	tr := newTracer(t, m, client, vip, 80)
	eventually(t, 90*time.Second, "5,000-endpoint group in use", func(ctx context.Context) error {
		return tr.spread(func(i int) int32 { return 8080 })
	})
	if after := metricValue(t, m, "nodeflow_service_build_errors_total"); after != errsBefore {
		t.Errorf("service build errors went from %v to %v", errsBefore, after)
	}

	// The last slice moves to another target port: the group follows.
	last := len(created) - 1
	upd := largeSlice(last, 9090)
	upd.ResourceVersion = created[last].ResourceVersion
	if _, err := e.client.DiscoveryV1().EndpointSlices(ns).Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "5,000-endpoint group updated", func(ctx context.Context) error {
		return tr.spread(func(i int) int32 {
			if i/1000 == last {
				return 9090
			}
			return 8080
		})
	})
}

// tracer asks node m's ovs-vswitchd where br0 sends a pod's TCP
// connections to a service address, with ofproto/trace.
type tracer struct {
	t      *testing.T
	m      *testbed.Member
	flow   string // the trace's flow without tp_src
	lookup map[netip.Addr]int
}

func newTracer(t *testing.T, m *testbed.Member, client netPod, vip netip.Addr, port int) *tracer {
	t.Helper()
	mac, err := exec.Command("ip", "netns", "exec", client.netns, "cat", "/sys/class/net/eth0/address").Output()
	if err != nil {
		t.Fatalf("MAC of %s: %v", client.name, err)
	}
	// The pod's gateway MAC: resolved once by a real packet toward the
	// service (its answer does not matter).
	gw := ""
	eventually(t, 20*time.Second, "pod's gateway resolved", func(ctx context.Context) error {
		c, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		_, _, _ = httpGet(c, client.netns, vip, port)
		out, err := exec.Command("ip", "-n", client.netns, "-4", "neigh", "show", "dev", "eth0").Output()
		if err != nil {
			return err
		}
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) >= 3 && f[1] == "lladdr" {
				gw = f[2]
				return nil
			}
		}
		return fmt.Errorf("no neighbour on eth0 yet: %q", out)
	})
	lookup := map[netip.Addr]int{}
	for i := range largeEndpoints {
		lookup[largeEndpointIP(i)] = i
	}
	return &tracer{t: t, m: m, lookup: lookup, flow: fmt.Sprintf("in_port=%d,tcp,dl_src=%s,dl_dst=%s,nw_src=%s,nw_dst=%s,tp_dst=%d",
		client.port, strings.TrimSpace(string(mac)), gw, client.ip(false), vip, port)}
}

var natDstRE = regexp.MustCompile(`nat\(dst=([0-9.]+):([0-9]+)\)`)

// spread traces 300 source ports and checks that they land on at least
// 250 distinct endpoints, from every slice, each with the target port
// portOf(i) gives for endpoint i.
func (tr *tracer) spread(portOf func(i int) int32) error {
	seen := map[int]bool{}
	slicesSeen := map[int]bool{}
	for sport := 20000; sport < 20300; sport++ {
		cmd := exec.Command("ovs-appctl", "-t", filepath.Join(tr.m.OVSRundir, "ovs-vswitchd.ctl"),
			"ofproto/trace", "br0", flowtest.NewConnTrace(fmt.Sprintf("%s,tp_src=%d", tr.flow, sport)))
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("ofproto/trace: %v: %s", err, out)
		}
		mm := natDstRE.FindStringSubmatch(string(out))
		if mm == nil {
			return fmt.Errorf("source port %d: no DNAT in the trace:\n%s", sport, out)
		}
		i, ok := tr.lookup[netip.MustParseAddr(mm[1])]
		if !ok {
			return fmt.Errorf("source port %d: DNAT to %s, not an endpoint", sport, mm[1])
		}
		if want := fmt.Sprint(portOf(i)); mm[2] != want {
			return fmt.Errorf("source port %d: endpoint %s with port %s, want %s", sport, mm[1], mm[2], want)
		}
		seen[i] = true
		slicesSeen[i/1000] = true
	}
	if len(seen) < 250 || len(slicesSeen) != largeEndpoints/1000 {
		return fmt.Errorf("300 connections reached %d endpoints from %d slices, want at least 250 from all %d",
			len(seen), len(slicesSeen), largeEndpoints/1000)
	}
	return nil
}
