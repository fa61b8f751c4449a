package serviceflows

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"nodeflow/datapath/plan"
	"nodeflow/lib/openflow"
	"nodeflow/model/service"
)

// TestLargeGroup builds a service with 5,000 endpoints: one bucket and one
// DNAT flow per endpoint, distinct bucket ids, and group mods that split
// into messages that each fit, carrying every bucket once.
func TestLargeGroup(t *testing.T) {
	const n = 5000
	var eps []service.Endpoint
	for i := 0; i < n; i++ {
		ip := netip.AddrFrom4([4]byte{10, 128 + byte(i>>16), byte(i >> 8), byte(i)})
		node := "node2"
		if i%2 == 0 {
			node = "node1"
		}
		eps = append(eps, service.Endpoint{IP: ip, Port: 8080, NodeName: node, Ready: true, Serving: true})
	}
	p := &service.ServicePort{Name: name("big", "http", v1.ProtocolTCP), Protocol: v1.ProtocolTCP, Port: 80,
		ClusterIPs: []netip.Addr{a("10.96.0.50")}}
	out, err := Build(testNode(), Input{Port: p, Endpoints: eps}, fixedIDs())
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Pod.Groups) != 1 {
		t.Fatalf("%d groups", len(out.Pod.Groups))
	}
	g := out.Pod.Groups[0]
	if len(g.Buckets) != n {
		t.Fatalf("%d buckets, want %d", len(g.Buckets), n)
	}
	seen := map[uint32]bool{}
	for i, b := range g.Buckets {
		if seen[b.ID] || b.Weight != 1 {
			t.Fatalf("bucket %d: id %d weight %d", i, b.ID, b.Weight)
		}
		seen[b.ID] = true
	}
	// Each bucket commits its endpoint's DNAT: no flow per endpoint.
	for _, f := range out.Pod.Flows {
		if f.Table == uint8(plan.PodEndpointDNAT) {
			t.Fatalf("a flow per endpoint: %s", f)
		}
	}
	for i, b := range g.Buckets {
		if ct, ok := b.Actions[len(b.Actions)-1].(openflow.CT); !ok || !ct.Commit {
			t.Fatalf("bucket %d does not end in the DNAT's commit: %v", i, b.Actions)
		}
	}
	mods, err := g.Mods(openflow.GroupAdd, openflow.Version15, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) < 2 {
		t.Fatalf("5,000 buckets fit in %d message(s)", len(mods))
	}
	total := 0
	for i, m := range mods {
		b, err := openflow.Marshal(openflow.Version15, uint32(i+1), m)
		if err != nil {
			t.Fatalf("mod %d: %v", i, err)
		}
		if len(b) > openflow.MaxMessageLen {
			t.Fatalf("mod %d: %d bytes", i, len(b))
		}
		if i == 0 && (m.Command != openflow.GroupAdd || m.SelectionMethod != "hash") {
			t.Fatalf("first mod: %v %q", m.Command, m.SelectionMethod)
		}
		if i > 0 && (m.Command != openflow.GroupInsertBucket || m.CommandBucketID != openflow.BucketLast) {
			t.Fatalf("mod %d: %v bucket %d", i, m.Command, m.CommandBucketID)
		}
		total += len(m.Buckets)
	}
	if total != n {
		t.Fatalf("mods carry %d buckets, want %d", total, n)
	}
	t.Logf("5,000 buckets in %d group mods", len(mods))
}

// TestGroupIDsPerFamilyAndPolicy checks that both families and external
// traffic with a Local policy get their own stable keys and ids, and that
// a failing allocator is reported.
func TestGroupIDsPerFamilyAndPolicy(t *testing.T) {
	p := &service.ServicePort{Name: name("ds", "http", v1.ProtocolTCP), Protocol: v1.ProtocolTCP, Port: 80, NodePort: 30090,
		ClusterIPs: []netip.Addr{a("10.96.0.60"), a("fd02::60")}, ExternalPolicyLocal: true}
	eps := []service.Endpoint{ready("10.128.0.2", 80, "node1"), ready("10.128.1.2", 80, "node2"), ready("fd01::2", 80, "node2")}
	alloc := plan.NewIDAllocator(plan.ServiceGroups)
	out, err := Build(testNode(), Input{Port: p, Endpoints: eps}, alloc.Get)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"service/default/ds:http/TCP/IPv4", "service/default/ds:http/TCP/IPv4/external",
		"service/default/ds:http/TCP/IPv6", "service/default/ds:http/TCP/IPv6/external",
	}
	ids := map[uint32]bool{}
	for _, k := range want {
		id, ok := out.GroupIDs[k]
		if !ok {
			t.Fatalf("no id for %s: %v", k, out.GroupIDs)
		}
		ids[id] = true
	}
	if len(ids) != len(want) {
		t.Fatalf("ids not distinct: %v", out.GroupIDs)
	}
	// IPv4: internal group with both, external with the local one. IPv6:
	// internal group; external has no local endpoint, so its NodePort drops.
	if len(out.Pod.Groups) != 3 {
		t.Fatalf("%d groups: %v", len(out.Pod.Groups), out.Pod.Groups)
	}
	again, _ := Build(testNode(), Input{Port: p, Endpoints: eps}, alloc.Get)
	for k, id := range out.GroupIDs {
		if again.GroupIDs[k] != id {
			t.Errorf("%s: id %d then %d", k, id, again.GroupIDs[k])
		}
	}
	var dropped bool
	for _, f := range out.Pod.Flows {
		if f.Priority == uint16(plan.PriorityServiceNoEndpoints) && strings.Contains(f.String(), "ct_ipv6_dst=fd00:18::3,") && strings.Contains(f.String(), "ct_tp_dst=30090,ipv6 actions=drop") {
			dropped = true
		}
	}
	if !dropped {
		t.Error("IPv6 NodePort without a local endpoint is not dropped")
	}

	boom := errors.New("no ids left")
	_, err = Build(testNode(), Input{Port: p, Endpoints: eps}, func(string) (uint32, error) { return 0, boom })
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "service: default/ds:http/TCP: IPv4: group id of service/default/ds:http/TCP/IPv4") {
		t.Fatalf("allocator error: %v", err)
	}
	_, err = Build(testNode(), Input{Port: p}, func(string) (uint32, error) { return 0, nil })
	if err == nil || !strings.Contains(err.Error(), "outside ServiceGroups") {
		t.Fatalf("group id 0: %v", err)
	}
}

// TestNoEndpointCases covers reject, drop and idled.
func TestNoEndpointCases(t *testing.T) {
	base := func() *service.ServicePort {
		return &service.ServicePort{Name: name("x", "", v1.ProtocolUDP), Protocol: v1.ProtocolUDP, Port: 53,
			ClusterIPs: []netip.Addr{a("10.96.0.70")}}
	}
	notReady := service.Endpoint{IP: a("10.128.0.2"), Port: 53, NodeName: "node1"}
	tests := []struct {
		name     string
		port     func(*service.ServicePort)
		eps      []service.Endpoint
		want     string
		idled    bool
		wantNone string
	}{
		{name: "no endpoints: reject", want: "controller(id=28262,userdata=02.00.00.00.0a,meter_id=2)"},
		{name: "only unready endpoints: reject", eps: []service.Endpoint{notReady}, want: "controller("},
		{name: "idled without endpoints: held back (drop)", port: func(p *service.ServicePort) { p.Idled = true }, idled: true,
			want: "priority=190,ct_state=+new+trk,ct_nw_dst=10.96.0.70,ct_nw_proto=17,ct_tp_dst=53,ip actions=drop", wantNone: "controller("},
		{name: "idled with endpoints: normal", port: func(p *service.ServicePort) { p.Idled = true },
			eps: []service.Endpoint{ready("10.128.0.2", 53, "node1")}, want: "group:10"},
		{name: "ITP local without local endpoints: drop", port: func(p *service.ServicePort) { p.InternalPolicyLocal = true },
			eps: []service.Endpoint{ready("10.128.1.2", 53, "node2")}, want: "ct_tp_dst=53,ip actions=drop", wantNone: "controller("},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := base()
			if tc.port != nil {
				tc.port(p)
			}
			out, err := Build(testNode(), Input{Port: p, Endpoints: tc.eps}, fixedIDs())
			if err != nil {
				t.Fatal(err)
			}
			if out.Idled != tc.idled {
				t.Errorf("idled = %v", out.Idled)
			}
			var text strings.Builder
			for _, f := range out.Pod.Flows {
				fmt.Fprintln(&text, f.String())
			}
			if tc.want != "" && !strings.Contains(text.String(), tc.want) {
				t.Errorf("no %q in\n%s", tc.want, text.String())
			}
			if tc.wantNone != "" && strings.Contains(text.String(), tc.wantNone) {
				t.Errorf("unexpected %q in\n%s", tc.wantNone, text.String())
			}
		})
	}
}

// TestIdledUntilEveryFamilyHasEndpoints: a dual-stack idled port whose
// IPv4 EndpointSlice turned ready before the IPv6 one stays idled, so
// that its held IPv6 connections are not released to a reject; and so
// does one whose Service lost its idling annotations before its pods
// were ready.
func TestIdledUntilEveryFamilyHasEndpoints(t *testing.T) {
	p := &service.ServicePort{Name: name("x", "", v1.ProtocolTCP), Protocol: v1.ProtocolTCP, Port: 80,
		ClusterIPs: []netip.Addr{a("10.96.0.71"), a("fd00:10:96::71")}, Idled: true}
	v4 := ready("10.128.0.2", 80, "node1")
	v6 := ready("fd00:10:128::2", 80, "node1")
	for _, tc := range []struct {
		eps   []service.Endpoint
		idled bool
	}{
		{nil, true},
		{[]service.Endpoint{v4}, true},
		{[]service.Endpoint{v6}, true},
		{[]service.Endpoint{v4, v6}, false},
	} {
		out, err := Build(testNode(), Input{Port: p, Endpoints: tc.eps}, fixedIDs())
		if err != nil {
			t.Fatal(err)
		}
		if out.Idled != tc.idled {
			t.Errorf("endpoints %v: idled = %v, want %v", tc.eps, out.Idled, tc.idled)
		}
		// The unidler removes the annotations before the pods are
		// ready: a port that was idled stays so until then.
		woken := *p
		woken.Idled = false
		out, err = Build(testNode(), Input{Port: &woken, Endpoints: tc.eps, WasIdled: true}, fixedIDs())
		if err != nil {
			t.Fatal(err)
		}
		if out.Idled != tc.idled {
			t.Errorf("annotations removed, endpoints %v: idled = %v, want %v", tc.eps, out.Idled, tc.idled)
		}
		out, err = Build(testNode(), Input{Port: &woken, Endpoints: tc.eps}, fixedIDs())
		if err != nil {
			t.Fatal(err)
		}
		if out.Idled {
			t.Errorf("never idled, endpoints %v: idled", tc.eps)
		}
	}
}
