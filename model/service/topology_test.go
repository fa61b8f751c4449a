package service

import (
	"slices"
	"testing"
	"unique"

	discovery "k8s.io/api/discovery/v1"
)

func TestCategorizeTopology(t *testing.T) {
	h := func(zones, nodes string) unique.Handle[Hints] { return unique.Make(Hints{Zones: zones, Nodes: nodes}) }
	ep := func(ip, node string, hints unique.Handle[Hints]) Endpoint {
		return Endpoint{IP: addr(ip), Port: 80, NodeName: node, Ready: true, Serving: true, Hints: hints}
	}
	a1 := ep("10.0.0.1", "n1", h("a", "n1"))
	a2 := ep("10.0.0.2", "n2", h("a", "n2"))
	b3 := ep("10.0.0.3", "n3", h("b", "n3"))
	ab4 := ep("10.0.0.4", "n4", h("a,b", ""))
	plain := ep("10.0.0.5", "n5", unique.Handle[Hints]{})
	ips := func(eps []Endpoint) []string {
		var out []string
		for _, e := range eps {
			out = append(out, e.IP.String())
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		port       ServicePort
		eps        []Endpoint
		node, zone string
		internal   []string
		external   []string
	}{
		{"same zone", ServicePort{}, []Endpoint{a2, b3, ab4}, "n9", "a", []string{"10.0.0.2", "10.0.0.4"}, []string{"10.0.0.2", "10.0.0.4"}},
		{"other zone", ServicePort{}, []Endpoint{a2, b3, ab4}, "n9", "b", []string{"10.0.0.3", "10.0.0.4"}, []string{"10.0.0.3", "10.0.0.4"}},
		{"no endpoint for the zone: all", ServicePort{}, []Endpoint{a2, b3}, "n9", "c", []string{"10.0.0.2", "10.0.0.3"}, []string{"10.0.0.2", "10.0.0.3"}},
		{"node without a zone: all", ServicePort{}, []Endpoint{a2, b3}, "n9", "", []string{"10.0.0.2", "10.0.0.3"}, []string{"10.0.0.2", "10.0.0.3"}},
		{"one endpoint without hints: all", ServicePort{}, []Endpoint{a2, b3, plain}, "n9", "a", []string{"10.0.0.2", "10.0.0.3", "10.0.0.5"}, []string{"10.0.0.2", "10.0.0.3", "10.0.0.5"}},
		{"same node first", ServicePort{}, []Endpoint{a1, a2, b3}, "n1", "a", []string{"10.0.0.1"}, []string{"10.0.0.1"}},
		{"no endpoint for the node: same zone", ServicePort{}, []Endpoint{a1, a2, b3}, "n7", "b", []string{"10.0.0.3"}, []string{"10.0.0.3"}},
		{"a Local policy ignores hints", ServicePort{ExternalPolicyLocal: true},
			[]Endpoint{ep("10.0.0.6", "n3", h("b", "")), ep("10.0.0.7", "n2", h("a", ""))}, "n3", "a", []string{"10.0.0.7"}, []string{"10.0.0.6"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, ex := Categorize(&tc.port, tc.eps, tc.node, tc.zone)
			if !slices.Equal(ips(in), tc.internal) || !slices.Equal(ips(ex), tc.external) {
				t.Errorf("internal %v external %v, want %v %v", ips(in), ips(ex), tc.internal, tc.external)
			}
		})
	}
}

func TestSliceHintsParsed(t *testing.T) {
	s := slice("ns", "web-1", "web", discovery.AddressTypeIPv4, "http", 80, epSpec{ip: "10.0.0.1"}, epSpec{ip: "10.0.0.2"}, epSpec{ip: "10.0.0.3"})
	s.Endpoints[0].Hints = &discovery.EndpointHints{ForZones: []discovery.ForZone{{Name: "b"}, {Name: "a"}}, ForNodes: []discovery.ForNode{{Name: "n1"}}}
	s.Endpoints[1].Hints = &discovery.EndpointHints{ForZones: []discovery.ForZone{{Name: "a"}, {Name: "b"}}, ForNodes: []discovery.ForNode{{Name: "n1"}}}
	tr := NewEndpointsTracker(func(error) {})
	tr.Record(nil, s)
	tr.Update()
	eps := tr.Endpoints(spn("ns", "web", "http", "TCP"))
	if len(eps) != 3 {
		t.Fatalf("endpoints %v", eps)
	}
	if got := eps[0].hints(); got != (Hints{Zones: "a,b", Nodes: "n1"}) {
		t.Errorf("hints %+v, want zones a,b and node n1", got)
	}
	if eps[0].Hints != eps[1].Hints {
		t.Error("equal hints are not one interned value")
	}
	if got := eps[2].hints(); got != (Hints{}) {
		t.Errorf("an endpoint without hints has %+v", got)
	}
	// The same slice parsed again changes nothing.
	if tr.Record(s, s.DeepCopy()); len(tr.Update()) != 0 {
		t.Error("re-parsing the same hints is a change")
	}
}
