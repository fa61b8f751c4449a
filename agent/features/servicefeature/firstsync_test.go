package servicefeature

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"nodeflow/datapath/plan"
	"nodeflow/datapath/serviceflows"
	"nodeflow/internal/testutil/featuretest"
	"nodeflow/model/service"
)

// TestFirstSyncHasEveryService starts the informers and calls Sync the
// moment their caches have listed everything, as a restarting agent may:
// the first build must hold every Service, not only those whose events
// the proxy's handlers, which run behind the caches, have already taken
// in. A first build without some would have the start-up bundle delete
// their flows, and a later pass put them back.
func TestFirstSyncHasEveryService(t *testing.T) {
	const n = 3000
	var objs []runtime.Object
	for i := range n {
		name := fmt.Sprintf("web-%d", i)
		ip := fmt.Sprintf("10.96.%d.%d", i/250, 1+i%250)
		svc := webService(ip)
		svc.Name = name
		sl := webSlice(fmt.Sprintf("10.244.%d.%d", i/250, 1+i%250))
		sl.Name, sl.Labels[discovery.LabelServiceName] = name+"-abc", name
		objs = append(objs, svc, sl)
	}
	h := featuretest.New(featuretest.DefaultNode(), objs...)
	p := testServiceProxyOn(t, h, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h.Informers().Start(ctx.Done())
	svcInf := h.Informers().Core().V1().Services().Informer()
	sliceInf := h.Informers().Discovery().V1().EndpointSlices().Informer()
	for !svcInf.HasSynced() || !sliceInf.HasSynced() {
		if ctx.Err() != nil {
			t.Fatal("the caches did not sync")
		}
		time.Sleep(50 * time.Microsecond)
	}
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	missing := 0
	for i := range n {
		port := service.ServicePortName{Port: "http", Protocol: v1.ProtocolTCP}
		port.Namespace, port.Name = metav1.NamespaceDefault, fmt.Sprintf("web-%d", i)
		if _, ok := store(p, plan.Pod).Get(serviceflows.Owner(port)); !ok {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("the first sync built %d of %d services", n-missing, n)
	}
}
