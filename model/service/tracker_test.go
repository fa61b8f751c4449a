package service

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

func changeSet(names ...ServicePortName) ChangeSet {
	s := ChangeSet{}
	for _, n := range names {
		s[n] = struct{}{}
	}
	return s
}

func TestServiceTracker(t *testing.T) {
	var sink errSink
	tr := NewServiceTracker(sink.report)
	web := spn("default", "web", "http", v1.ProtocolTCP)

	// An add, then an update of something the model ignores: one change.
	a := svc("default", "web", "10.96.0.10")
	if !tr.Record(nil, a) {
		t.Fatal("add not pending")
	}
	b := a.DeepCopy()
	b.ResourceVersion = "2"
	b.Labels = map[string]string{"x": "y"}
	tr.Record(a, b)
	if got := tr.Update(); !reflect.DeepEqual(got, changeSet(web)) {
		t.Fatalf("first update: %v", got.Sorted())
	}
	if got := tr.Update(); len(got) != 0 {
		t.Fatalf("empty update: %v", got.Sorted())
	}

	// A change that cancels out: port 80 -> 81 -> 80.
	c := b.DeepCopy()
	c.Spec.Ports[0].Port = 81
	if !tr.Record(b, c) {
		t.Fatal("port change not pending")
	}
	if tr.Record(c, b) {
		t.Fatal("change back still pending")
	}
	if tr.PendingCount() != 0 {
		t.Fatal("tracker still pending")
	}
	if got := tr.Update(); len(got) != 0 {
		t.Fatalf("cancelled change reported: %v", got.Sorted())
	}

	// Renaming a port removes one service port and adds another.
	d := b.DeepCopy()
	d.Spec.Ports[0].Name = "web"
	tr.Record(b, d)
	webRenamed := spn("default", "web", "web", v1.ProtocolTCP)
	if got := tr.Update(); !reflect.DeepEqual(got, changeSet(web, webRenamed)) {
		t.Fatalf("rename: %v", got.Sorted())
	}
	if _, ok := tr.Port(web); ok {
		t.Fatal("old port still active")
	}
	if p, ok := tr.Port(webRenamed); !ok || p.Port != 80 {
		t.Fatalf("renamed port: %+v %v", p, ok)
	}

	// Add then delete before Update: nothing happens.
	e := svc("default", "brief", "10.96.0.99")
	tr.Record(nil, e)
	tr.Record(e, nil)
	if got := tr.Update(); len(got) != 0 {
		t.Fatalf("add+delete reported: %v", got.Sorted())
	}

	// Delete.
	tr.Record(d, nil)
	if got := tr.Update(); !reflect.DeepEqual(got, changeSet(webRenamed)) {
		t.Fatalf("delete: %v", got.Sorted())
	}
	if len(tr.Ports()) != 0 {
		t.Fatalf("ports left: %v", tr.Ports())
	}
	if errs := sink.take(); len(errs) != 0 {
		t.Fatalf("unexpected errors: %v", errs)
	}
}

func TestServiceTrackerDuplicateClusterIP(t *testing.T) {
	var sink errSink
	tr := NewServiceTracker(sink.report)
	first := svc("default", "first", "10.96.0.10")
	second := svc("default", "second", "10.96.0.10", func(s *v1.Service) {
		s.CreationTimestamp.Time = t0.Add(time.Second)
	})
	other := svc("default", "other", "10.96.0.11")
	// Recorded in the "wrong" order: the older one still wins.
	tr.Record(nil, second)
	tr.Record(nil, first)
	tr.Record(nil, other)
	got := tr.Update()
	want := changeSet(spn("default", "first", "http", v1.ProtocolTCP), spn("default", "other", "http", v1.ProtocolTCP))
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("changes: %v", got.Sorted())
	}
	errs := sink.take()
	if len(errs) != 1 || !errors.Is(errs[0], ErrDuplicateIP) ||
		!strings.Contains(errs[0].Error(), "proxy: service default/second: spec.clusterIPs: cluster IP already in use: 10.96.0.10 is held by service default/first") {
		t.Fatalf("errors: %v", errs)
	}

	// Re-evaluated while blocked, it is not reported again.
	o2 := other.DeepCopy()
	o2.Spec.Ports[0].Port = 8080
	tr.Record(other, o2)
	tr.Update()
	if errs := sink.take(); len(errs) != 0 {
		t.Fatalf("blocked service reported again: %v", errs)
	}

	// The holder goes away: the second takes over in the same Update.
	tr.Record(first, nil)
	got = tr.Update()
	want = changeSet(spn("default", "first", "http", v1.ProtocolTCP), spn("default", "second", "http", v1.ProtocolTCP))
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after delete: %v", got.Sorted())
	}
	if _, ok := tr.Port(spn("default", "second", "http", v1.ProtocolTCP)); !ok {
		t.Fatal("second not active")
	}
}

func TestEndpointsTracker(t *testing.T) {
	var sink errSink
	tr := NewEndpointsTracker(sink.report)
	web := spn("default", "web", "http", v1.ProtocolTCP)

	s1 := slice("default", "web-a", "web", discovery.AddressTypeIPv4, "http", 8080,
		epSpec{ip: "10.128.0.2", node: "n1"}, epSpec{ip: "10.128.1.2", node: "n2", ready: ptr.To(false)})
	s1.Annotations = map[string]string{v1.EndpointsLastChangeTriggerTime: t0.Format(time.RFC3339Nano)}
	s2 := slice("default", "web-b", "web", discovery.AddressTypeIPv4, "http", 8080,
		epSpec{ip: "10.128.0.3", node: "n1"}, epSpec{ip: "10.128.0.2", node: "n1"})
	tr.Record(nil, s1)
	tr.Record(nil, s2)
	if got := tr.Update(); !reflect.DeepEqual(got, changeSet(web)) {
		t.Fatalf("add: %v", got.Sorted())
	}
	// Merged across slices, sorted, the duplicate dropped.
	want := []Endpoint{
		{IP: addr("10.128.0.2"), Port: 8080, NodeName: "n1", Ready: true, Serving: true},
		{IP: addr("10.128.0.3"), Port: 8080, NodeName: "n1", Ready: true, Serving: true},
		{IP: addr("10.128.1.2"), Port: 8080, NodeName: "n2"},
	}
	if got := tr.Endpoints(web); !reflect.DeepEqual(got, want) {
		t.Fatalf("endpoints:\n got %v\nwant %v", got, want)
	}
	if tt := tr.TakeTriggerTimes(); len(tt[types.NamespacedName{Namespace: "default", Name: "web"}]) != 1 {
		t.Fatalf("trigger times: %v", tt)
	}
	if tt := tr.TakeTriggerTimes(); len(tt) != 0 {
		t.Fatalf("trigger times not taken: %v", tt)
	}

	// An update that only bumps the resource version cancels out.
	s1b := s1.DeepCopy()
	s1b.ResourceVersion = "9"
	if tr.Record(s1, s1b) {
		t.Fatal("no-op update pending")
	}
	// Deleting a slice whose endpoints another slice also has: the merged
	// list loses only 10.128.1.2.
	tr.Record(s1b, nil)
	if got := tr.Update(); !reflect.DeepEqual(got, changeSet(web)) {
		t.Fatalf("delete: %v", got.Sorted())
	}
	if got := tr.Endpoints(web); len(got) != 2 {
		t.Fatalf("after delete: %v", got)
	}
	// A slice labelled headless serves nothing, as with kube-proxy; the
	// label taken off, it serves again.
	s2h := s2.DeepCopy()
	s2h.Labels[HeadlessLabel] = ""
	tr.Record(s2, s2h)
	if got := tr.Update(); !reflect.DeepEqual(got, changeSet(web)) || len(tr.Endpoints(web)) != 0 {
		t.Fatalf("headless label: %v, endpoints %v", got.Sorted(), tr.Endpoints(web))
	}
	tr.Record(s2h, s2)
	if got := tr.Update(); !reflect.DeepEqual(got, changeSet(web)) || len(tr.Endpoints(web)) != 2 {
		t.Fatalf("headless label off: %v, endpoints %v", got.Sorted(), tr.Endpoints(web))
	}
	// A slice moving to another Service changes both.
	s2b := s2.DeepCopy()
	s2b.Labels[discovery.LabelServiceName] = "api"
	tr.Record(s2, s2b)
	api := spn("default", "api", "http", v1.ProtocolTCP)
	if got := tr.Update(); !reflect.DeepEqual(got, changeSet(web, api)) {
		t.Fatalf("move: %v", got.Sorted())
	}
	if len(tr.Endpoints(web)) != 0 || len(tr.Endpoints(api)) != 2 {
		t.Fatalf("after move: web %v api %v", tr.Endpoints(web), tr.Endpoints(api))
	}
	// A Service of one slice shares the slice's (sorted) list; one with a
	// duplicate gets a copy without it, and the slice's own list stays
	// whole for later merges with other slices.
	ips := func(eps []Endpoint) (out []string) {
		for _, e := range eps {
			out = append(out, e.IP.String())
		}
		return out
	}
	s3 := slice("default", "web-c", "web", discovery.AddressTypeIPv4, "http", 8080,
		epSpec{ip: "10.128.0.9"}, epSpec{ip: "10.128.0.7"}, epSpec{ip: "10.128.0.9"})
	tr.Record(nil, s3)
	tr.Update()
	if got := ips(tr.Endpoints(web)); !reflect.DeepEqual(got, []string{"10.128.0.7", "10.128.0.9"}) {
		t.Fatalf("one slice with a duplicate: %v", got)
	}
	s4 := slice("default", "web-d", "web", discovery.AddressTypeIPv4, "http", 8080, epSpec{ip: "10.128.0.8"})
	tr.Record(nil, s4)
	tr.Update()
	if got := ips(tr.Endpoints(web)); !reflect.DeepEqual(got, []string{"10.128.0.7", "10.128.0.8", "10.128.0.9"}) {
		t.Fatalf("two slices: %v", got)
	}
	tr.Record(s4, nil)
	tr.Update()
	if got := ips(tr.Endpoints(web)); !reflect.DeepEqual(got, []string{"10.128.0.7", "10.128.0.9"}) {
		t.Fatalf("back to one slice: %v", got)
	}
	if errs := sink.take(); len(errs) != 0 {
		t.Fatalf("unexpected errors: %v", errs)
	}
}

func TestSliceEndpointsBadInput(t *testing.T) {
	tests := []struct {
		name    string
		slice   *discovery.EndpointSlice
		wantN   int
		wantErr []string
	}{
		{
			name:    "unknown address type",
			slice:   slice("default", "s", "web", "IPv5", "http", 80, epSpec{ip: "10.0.0.1"}),
			wantErr: []string{`proxy: endpointslice default/s: addressType: unknown address type "IPv5"`},
		},
		{
			name: "unparseable and wrong-family addresses are skipped",
			slice: slice("default", "s", "web", discovery.AddressTypeIPv4, "http", 80,
				epSpec{ip: "10.0.0.1"}, epSpec{ip: "10.0.0.x"}, epSpec{ip: "fd00::1"}),
			wantN: 1,
			wantErr: []string{
				`endpoints[1].addresses[0]: unparseable IP "10.0.0.x"`,
				`endpoints[2].addresses[0]: address of the wrong family "fd00::1"`,
			},
		},
		{
			name:    "port out of range",
			slice:   slice("default", "s", "web", discovery.AddressTypeIPv4, "http", 0, epSpec{ip: "10.0.0.1"}),
			wantErr: []string{`ports[0].port: port out of range: 0 (1-65535)`},
		},
		{
			name:  "FQDN is ignored",
			slice: slice("default", "s", "web", discovery.AddressTypeFQDN, "http", 80, epSpec{ip: "example.com"}),
		},
		{
			name: "no service label is ignored",
			slice: func() *discovery.EndpointSlice {
				s := slice("default", "s", "web", discovery.AddressTypeIPv4, "http", 80, epSpec{ip: "10.0.0.1"})
				s.Labels = nil
				return s
			}(),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ports, errs := SliceEndpoints(tc.slice)
			n := 0
			for _, eps := range ports {
				n += len(eps)
			}
			if n != tc.wantN {
				t.Errorf("got %d endpoints, want %d", n, tc.wantN)
			}
			if len(errs) != len(tc.wantErr) {
				t.Fatalf("errors: %v", errs)
			}
			for i, err := range errs {
				if !strings.Contains(err.Error(), tc.wantErr[i]) {
					t.Errorf("error %d: %q does not contain %q", i, err, tc.wantErr[i])
				}
			}
		})
	}
}

func TestCategorize(t *testing.T) {
	ep := func(ip, node string, ready, serving, terminating bool) Endpoint {
		return Endpoint{IP: addr(ip), Port: 80, NodeName: node, Ready: ready, Serving: serving, Terminating: terminating}
	}
	readyLocal := ep("10.0.0.1", "me", true, true, false)
	readyRemote := ep("10.0.0.2", "other", true, true, false)
	termLocal := ep("10.0.0.3", "me", false, true, true)
	termRemote := ep("10.0.0.4", "other", false, true, true)
	notServing := ep("10.0.0.5", "me", false, false, true)
	tests := []struct {
		name               string
		port               ServicePort
		eps                []Endpoint
		internal, external []Endpoint
	}{
		{"ready endpoints only", ServicePort{}, []Endpoint{readyLocal, readyRemote, termLocal, notServing},
			[]Endpoint{readyLocal, readyRemote}, []Endpoint{readyLocal, readyRemote}},
		{"fallback to serving terminating", ServicePort{}, []Endpoint{termLocal, termRemote, notServing},
			[]Endpoint{termLocal, termRemote}, []Endpoint{termLocal, termRemote}},
		{"ETP local keeps cluster for internal", ServicePort{ExternalPolicyLocal: true}, []Endpoint{readyRemote, termLocal},
			[]Endpoint{readyRemote}, []Endpoint{termLocal}},
		{"ITP local without local endpoints has none", ServicePort{InternalPolicyLocal: true}, []Endpoint{readyRemote},
			nil, []Endpoint{readyRemote}},
		{"nothing serving", ServicePort{}, []Endpoint{notServing}, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in, ex := Categorize(&tc.port, tc.eps, "me", "")
			if !reflect.DeepEqual(in, tc.internal) || !reflect.DeepEqual(ex, tc.external) {
				t.Errorf("got internal %v external %v, want %v %v", in, ex, tc.internal, tc.external)
			}
		})
	}
	if HasEndpoints([]Endpoint{notServing}) || !HasEndpoints([]Endpoint{termRemote}) {
		t.Error("HasEndpoints")
	}
}

// TestEndpointsTrackerMovesBeforeUpdate: a slice that moves twice between
// two Updates ends in the last Service only, and one recorded again as
// new (a relist that lost its old form) replaces itself.
func TestEndpointsTrackerMovesBeforeUpdate(t *testing.T) {
	tr := NewEndpointsTracker(nil)
	mk := func(svc string) *discovery.EndpointSlice {
		return slice("default", "s-1", svc, discovery.AddressTypeIPv4, "http", 8080, epSpec{ip: "10.128.0.2", node: "n1"})
	}
	web, api, db := mk("web"), mk("api"), mk("db")
	tr.Record(nil, web)
	tr.Update()
	tr.Record(web, api)
	tr.Record(api, db)
	names := func(svc string) ServicePortName { return spn("default", svc, "http", v1.ProtocolTCP) }
	if got := tr.Update(); !reflect.DeepEqual(got, changeSet(names("web"), names("db"))) {
		t.Fatalf("moved web -> api -> db: changed %v, want web and db", got.Sorted())
	}
	if len(tr.Endpoints(names("web"))) != 0 || len(tr.Endpoints(names("api"))) != 0 || len(tr.Endpoints(names("db"))) != 1 {
		t.Fatalf("after the moves: web %v api %v db %v", tr.Endpoints(names("web")), tr.Endpoints(names("api")), tr.Endpoints(names("db")))
	}
	db2 := slice("default", "s-1", "db", discovery.AddressTypeIPv4, "http", 8080, epSpec{ip: "10.128.0.3", node: "n1"})
	tr.Record(nil, db2)
	tr.Update()
	if got := tr.Endpoints(names("db")); len(got) != 1 || got[0].IP != addr("10.128.0.3") {
		t.Fatalf("recorded again as new: %v, want the new endpoint alone", got)
	}
}
