package services

import (
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"nodeflow/proxy"
)

// controllerSlice is an EndpointSlice as the EndpointSlice controller
// writes it, with everything the proxy does not read, and bad input.
func controllerSlice() *discovery.EndpointSlice {
	s := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: "web-abcde", GenerateName: "web-", UID: "u1", ResourceVersion: "7",
			Labels: map[string]string{
				discovery.LabelServiceName: "web", discovery.LabelManagedBy: "endpointslice-controller.k8s.io", "app": "web",
			},
			Annotations:     map[string]string{corev1.EndpointsLastChangeTriggerTime: "2026-11-25T10:00:00Z", "other": "x"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "web", UID: "s1"}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}},
		},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8080)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for i := range 6 {
		e := discovery.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.244.1.%d", i+1), "10.244.9.9"},
			Conditions: discovery.EndpointConditions{Ready: ptr.To(i%2 == 0), Serving: ptr.To(true), Terminating: ptr.To(i == 3)},
			NodeName:   ptr.To(fmt.Sprintf("node%d", i%2)),
			Zone:       ptr.To("zone-a"),
			Hostname:   ptr.To("h"),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: fmt.Sprintf("web-%d", i), UID: "p"},
			Hints:      &discovery.EndpointHints{ForZones: []discovery.ForZone{{Name: "zone-a"}}},
		}
		switch i {
		case 4:
			e.Addresses = []string{"not-an-ip"}
		case 5:
			e.Addresses = nil
		}
		s.Endpoints = append(s.Endpoints, e)
	}
	return s
}

// TestProcessSlice checks that what the informer keeps gives the proxy the
// same endpoints and the same errors (naming the same fields) as the
// object, keeps the slice's identity, and leaves the object alone.
func TestProcessSlice(t *testing.T) {
	orig := controllerSlice()
	keep := orig.DeepCopy()
	obj, err := processSlice(orig)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := obj.(*proxy.Slice)
	if !ok {
		t.Fatalf("the transform kept a %T", obj)
	}
	if !reflect.DeepEqual(orig, keep) {
		t.Error("the transform changed the object it was given")
	}
	// Recorded as received and as kept, in two trackers: the same
	// endpoints and the same errors.
	var errs [2][]error
	var trackers [2]*proxy.EndpointsTracker
	for i := range trackers {
		trackers[i] = proxy.NewEndpointsTracker(func(err error) { errs[i] = append(errs[i], err) })
	}
	trackers[0].Record(nil, orig)
	trackers[1].RecordSlice(nil, got)
	service, ports, _ := proxy.SliceEndpoints(orig)
	for i, tr := range trackers {
		if changed := tr.Update(); len(changed) != len(ports) {
			t.Errorf("tracker %d: %d ports changed, want %d", i, len(changed), len(ports))
		}
	}
	for name, want := range ports {
		if name.NamespacedName != service {
			t.Errorf("port %s of %s", name, service)
		}
		for i, tr := range trackers {
			if eps := tr.Endpoints(name); !reflect.DeepEqual(eps, want) {
				t.Errorf("tracker %d: %s: %v, want %v", i, name, eps, want)
			}
		}
	}
	if len(errs[0]) == 0 || fmt.Sprint(errs[0]) != fmt.Sprint(errs[1]) {
		t.Errorf("errors as received %v, as kept %v; want the same, and some (the slice has bad input)", errs[0], errs[1])
	}
	if got.Name != orig.Name || got.Namespace != orig.Namespace || got.UID != orig.UID || got.ResourceVersion != orig.ResourceVersion {
		t.Errorf("identity lost: %+v", got.ObjectMeta)
	}
	if got.Labels != nil || got.Annotations != nil || got.OwnerReferences != nil || got.ManagedFields != nil {
		t.Errorf("metadata kept: %+v", got.ObjectMeta)
	}
	// A kept slice passes through again unchanged (a relist's replace).
	if again, err := processSlice(got); err != nil || again != any(got) {
		t.Errorf("a processed slice went through as %v (%v)", again, err)
	}
	// Not a slice: managed fields stripped, nothing else touched.
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", ManagedFields: []metav1.ManagedFieldsEntry{{}},
		Annotations: map[string]string{lastApplied: "{}", proxy.IdledAtAnnotation: "t"}}}
	if _, err := processSlice(svc); err != nil || svc.ManagedFields != nil || len(svc.Annotations) != 1 || svc.Annotations[proxy.IdledAtAnnotation] != "t" {
		t.Errorf("service after the transform: %+v (%v)", svc.ObjectMeta, err)
	}
}

// BenchmarkSlimEndpointSlice reports the heap that 10,000 slices of the
// EndpointSlice controller's shape (10 endpoints each, decoded from JSON
// as an informer gets them) keep in a cache, as received and as the
// transform keeps them (which the tracker shares); ratio is kept/received.
func BenchmarkSlimEndpointSlice(b *testing.B) {
	const n = 10000
	proto := controllerSlice()
	for len(proto.Endpoints) < 10 {
		proto.Endpoints = append(proto.Endpoints, proto.Endpoints[0])
	}
	for i := range proto.Endpoints {
		proto.Endpoints[i].Addresses = []string{fmt.Sprintf("10.244.1.%d", i+1)}
	}
	data, err := json.Marshal(proto)
	if err != nil {
		b.Fatal(err)
	}
	heap := func(slim bool) float64 {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		kept := make([]any, n)
		for i := range kept {
			s := &discovery.EndpointSlice{}
			if err := json.Unmarshal(data, s); err != nil {
				b.Fatal(err)
			}
			kept[i] = s
			if slim {
				kept[i], _ = processSlice(s)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(kept)
		return float64(after.HeapInuse-before.HeapInuse) / n
	}
	var received, slim float64
	for range b.N {
		received, slim = heap(false), heap(true)
	}
	b.ReportMetric(received, "B/slice-received")
	b.ReportMetric(slim, "B/slice-kept")
	b.ReportMetric(slim/received, "ratio")
}
