package service

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"nodeflow/internal/testutil/waittest"
)

// TestTrackersFromInformers feeds both trackers from client-go informers
// over a fake clientset, the way the agent wires them.
func TestTrackersFromInformers(t *testing.T) {
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	st := NewServiceTracker(nil)
	et := NewEndpointsTracker(nil)
	asSvc := func(o any) *v1.Service { s, _ := o.(*v1.Service); return s }
	asSlice := func(o any) *discovery.EndpointSlice { s, _ := o.(*discovery.EndpointSlice); return s }
	tombstone := func(o any) any {
		if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
			return d.Obj
		}
		return o
	}
	if _, err := factory.Core().V1().Services().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { st.Record(nil, asSvc(o)) },
		UpdateFunc: func(o, n any) { st.Record(asSvc(o), asSvc(n)) },
		DeleteFunc: func(o any) { st.Record(asSvc(tombstone(o)), nil) },
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := factory.Discovery().V1().EndpointSlices().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { et.Record(nil, asSlice(o)) },
		UpdateFunc: func(o, n any) { et.Record(asSlice(o), asSlice(n)) },
		DeleteFunc: func(o any) { et.Record(asSlice(tombstone(o)), nil) },
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	// Shutdown waits for the informers, which stop only once ctx is done.
	defer func() { cancel(); factory.Shutdown() }()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())

	web := spn("default", "web", "http", v1.ProtocolTCP)
	if _, err := client.CoreV1().Services("default").Create(ctx, svc("default", "web", "10.96.0.10"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.DiscoveryV1().EndpointSlices("default").Create(ctx,
		slice("default", "web-1", "web", discovery.AddressTypeIPv4, "http", 8080, epSpec{ip: "10.128.0.2", node: "n1"}),
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waittest.Eventually(t, "service recorded", func() bool { return st.PendingCount() != 0 })
	waittest.Eventually(t, "slice recorded", func() bool { return et.PendingCount() != 0 })
	changed := st.Update()
	changed.Merge(et.Update())
	if !changed.Has(web) || len(changed) != 1 {
		t.Fatalf("changed: %v", changed.Sorted())
	}
	p, ok := st.Port(web)
	eps := et.Endpoints(web)
	if !ok || p.Port != 80 || len(eps) != 1 || eps[0].Port != 8080 {
		t.Fatalf("model: %+v %v", p, eps)
	}

	if err := client.DiscoveryV1().EndpointSlices("default").Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waittest.Eventually(t, "slice delete recorded", func() bool { return et.PendingCount() != 0 })
	if got := et.Update(); !got.Has(web) || len(et.Endpoints(web)) != 0 {
		t.Fatalf("after delete: %v %v", got.Sorted(), et.Endpoints(web))
	}
}

// TestTrimmedObjectsAreTheirOwnMeta checks that an informer reads a
// trimmed Slice's and Service's identity without an allocation: meta.Accessor
// finds a metav1.Object, with the object's namespace, name, version, UID
// and deletion time, and the key function keys it as the full object.
func TestTrimmedObjectsAreTheirOwnMeta(t *testing.T) {
	del := metav1.Now()
	om := metav1.ObjectMeta{Namespace: "shop", Name: "web-abc", ResourceVersion: "42", UID: "u-1", DeletionTimestamp: &del,
		Labels: map[string]string{discovery.LabelServiceName: "web"}}
	for _, obj := range []runtime.Object{
		SliceOf(&discovery.EndpointSlice{ObjectMeta: om, AddressType: discovery.AddressTypeIPv4}),
		ServiceOf(&v1.Service{ObjectMeta: om}),
	} {
		m, err := meta.Accessor(obj)
		if err != nil {
			t.Fatalf("%T: %v", obj, err)
		}
		if m.GetNamespace() != "shop" || m.GetName() != "web-abc" || m.GetResourceVersion() != "42" || m.GetUID() != "u-1" || m.GetDeletionTimestamp() != &del {
			t.Errorf("%T reads as %s/%s version %s uid %s deleted %v", obj, m.GetNamespace(), m.GetName(), m.GetResourceVersion(), m.GetUID(), m.GetDeletionTimestamp())
		}
		if allocs := testing.AllocsPerRun(100, func() { _, _ = meta.Accessor(obj) }); allocs != 0 {
			t.Errorf("%T: meta.Accessor allocates %.0f times, want none", obj, allocs)
		}
		if key, err := cache.MetaNamespaceKeyFunc(obj); err != nil || key != "shop/web-abc" {
			t.Errorf("%T keys as %q, %v", obj, key, err)
		}
	}
}
