package servicefeature

import (
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"nodeflow/model/service"
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

// checkIdentity checks that an informer keys, versions and deletes obj as
// the object whose metadata is m.
func checkIdentity(t *testing.T, obj k8sruntime.Object, m *metav1.ObjectMeta) {
	t.Helper()
	acc, err := meta.Accessor(obj)
	if err != nil {
		t.Fatalf("meta.Accessor(%T): %v", obj, err)
	}
	if acc.GetNamespace() != m.Namespace || acc.GetName() != m.Name || acc.GetUID() != m.UID || acc.GetResourceVersion() != m.ResourceVersion {
		t.Errorf("identity lost: %s/%s uid %s version %s, want %s/%s uid %s version %s", acc.GetNamespace(), acc.GetName(), acc.GetUID(),
			acc.GetResourceVersion(), m.Namespace, m.Name, m.UID, m.ResourceVersion)
	}
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err != nil || key != m.Namespace+"/"+m.Name {
		t.Errorf("informer key %q (%v), want %s/%s", key, err, m.Namespace, m.Name)
	}
	if c := obj.DeepCopyObject(); !reflect.DeepEqual(c, obj) {
		t.Errorf("deep copy %+v differs from %+v", c, obj)
	}
}

// transformed returns what transform keeps of orig, as a T, and fails the
// test if the transform changed orig (keep is its copy from before).
func transformed[T any](t *testing.T, transform cache.TransformFunc, orig, keep any) T {
	t.Helper()
	obj, err := transform(orig)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := obj.(T)
	if !ok {
		t.Fatalf("the transform kept a %T", obj)
	}
	if !reflect.DeepEqual(orig, keep) {
		t.Error("the transform changed the object it was given")
	}
	return got
}

// TestProcessSlice checks that what the informer keeps gives the proxy the
// same endpoints and the same errors (naming the same fields) as the
// object, keeps the slice's identity, and leaves the object alone.
func TestProcessSlice(t *testing.T) {
	orig := controllerSlice()
	got := transformed[*service.Slice](t, processSlice, orig, orig.DeepCopy())
	// Recorded as received and as kept, in two trackers: the same
	// endpoints and the same errors.
	var errs [2][]error
	var trackers [2]*service.EndpointsTracker
	for i := range trackers {
		trackers[i] = service.NewEndpointsTracker(func(err error) { errs[i] = append(errs[i], err) })
	}
	trackers[0].Record(nil, orig)
	trackers[1].RecordSlice(nil, got)
	svcName, ports, _ := service.SliceEndpoints(orig)
	for i, tr := range trackers {
		if changed := tr.Update(); len(changed) != len(ports) {
			t.Errorf("tracker %d: %d ports changed, want %d", i, len(changed), len(ports))
		}
	}
	for name, want := range ports {
		if name.NamespacedName != svcName {
			t.Errorf("port %s of %s", name, svcName)
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
	checkIdentity(t, got, &orig.ObjectMeta)
	// A kept slice passes through again unchanged (a relist's replace).
	if again, err := processSlice(got); err != nil || again != any(got) {
		t.Errorf("a processed slice went through as %v (%v)", again, err)
	}
	// Not a slice: managed fields stripped, nothing else touched.
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", ManagedFields: []metav1.ManagedFieldsEntry{{}},
		Annotations: map[string]string{lastApplied: "{}", service.IdledAtAnnotation: "t"}}}
	if _, err := processSlice(svc); err != nil || svc.ManagedFields != nil || len(svc.Annotations) != 1 || svc.Annotations[service.IdledAtAnnotation] != "t" {
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
	decode := func(int) any {
		s := &discovery.EndpointSlice{}
		if err := json.Unmarshal(data, s); err != nil {
			b.Fatal(err)
		}
		return s
	}
	received := func(obj any) (any, error) { return obj, nil }
	heap := func(keep func(any) (any, error)) float64 { return keptHeap(n, decode, keep) }
	var whole, slim float64
	for range b.N {
		whole, slim = heap(received), heap(processSlice)
	}
	b.ReportMetric(whole, "B/slice-received")
	b.ReportMetric(slim, "B/slice-kept")
	b.ReportMetric(slim/whole, "ratio")
}

// apiService is a Service as the API server returns it, with everything
// the proxy does not read, and one bad port.
func apiService() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: "web", UID: "s1", ResourceVersion: "9",
			Labels:        map[string]string{"app": "web"},
			Annotations:   map[string]string{lastApplied: `{"kind":"Service"}`, "team": "a"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
				{Name: "bad", Port: 70000, Protocol: corev1.ProtocolTCP},
			},
		},
		Status: corev1.ServiceStatus{Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue}}},
	}
}

// TestProcessService checks that what the informer keeps gives the proxy
// the same service ports and the same errors as the object, keeps the
// Service's identity, and leaves the object alone.
func TestProcessService(t *testing.T) {
	orig := apiService()
	got := transformed[*service.Service](t, processService, orig, orig.DeepCopy())
	var errs [2][]error
	var trackers [2]*service.ServiceTracker
	for i := range trackers {
		trackers[i] = service.NewServiceTracker(func(err error) { errs[i] = append(errs[i], err) })
	}
	trackers[0].Record(nil, orig)
	trackers[1].RecordService(nil, got)
	for i, tr := range trackers {
		if changed := tr.Update(); len(changed) != 2 {
			t.Errorf("tracker %d: %d ports changed, want 2 (the bad one left out)", i, len(changed))
		}
	}
	if a, b := trackers[0].Ports(), trackers[1].Ports(); len(a) != 2 || !reflect.DeepEqual(a, b) {
		t.Errorf("ports as received %v, as kept %v; want the same two", a, b)
	}
	if len(errs[0]) != 1 || fmt.Sprint(errs[0]) != fmt.Sprint(errs[1]) {
		t.Errorf("errors as received %v, as kept %v; want the same one (port 70000)", errs[0], errs[1])
	}
	checkIdentity(t, got, &orig.ObjectMeta)
	if again, err := processService(got); err != nil || again != any(got) {
		t.Errorf("a processed Service went through as %v (%v)", again, err)
	}
	// Deleting the Service as kept removes its ports.
	trackers[1].RecordService(got, nil)
	if changed := trackers[1].Update(); len(changed) != 2 || len(trackers[1].Ports()) != 0 {
		t.Errorf("after the delete: %d ports changed, %d left", len(changed), len(trackers[1].Ports()))
	}
}

// BenchmarkSlimService reports the heap that 10,000 Services (decoded from
// JSON as an informer gets them, managed fields and kubectl's annotation
// already stripped as before) keep in a cache, as received and as the
// transform keeps them; ratio is kept/received.
func BenchmarkSlimService(b *testing.B) {
	const n = 10000
	data, err := json.Marshal(apiService())
	if err != nil {
		b.Fatal(err)
	}
	decode := func(i int) any {
		s := &corev1.Service{}
		if err := json.Unmarshal(data, s); err != nil {
			b.Fatal(err)
		}
		s.Name = fmt.Sprintf("web-%d", i)
		return s
	}
	heap := func(keep func(any) (any, error)) float64 { return keptHeap(n, decode, keep) }
	var whole, slim float64
	for range b.N {
		whole, slim = heap(stripManagedFields), heap(processService)
	}
	b.ReportMetric(whole, "B/service-received")
	b.ReportMetric(slim, "B/service-kept")
	b.ReportMetric(slim/whole, "ratio")
}

// keptHeap returns the heap, in bytes per object, that n objects keep
// when each is decoded and then kept as keep returns it.
func keptHeap(n int, decode func(i int) any, keep func(any) (any, error)) float64 {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	kept := make([]any, n)
	for i := range kept {
		kept[i], _ = keep(decode(i))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(kept)
	return float64(after.HeapInuse-before.HeapInuse) / float64(n)
}
