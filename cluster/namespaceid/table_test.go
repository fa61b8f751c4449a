package namespaceid

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// TestTableSyncedMeansComplete checks that the Table says it has synced
// only once every namespace the caches listed has its id in it. The
// table is built by event handlers, which run behind the caches; with
// thousands of namespaces a restarted agent once built its pods' flows in
// between, found no id for some, and its start-up bundle deleted their
// flows. Here each change a handler makes is slowed down, so the caches
// have listed everything long before the handlers are through.
func TestTableSyncedMeansComplete(t *testing.T) {
	const n = 300
	api, dyn := newLockAPI()
	objs := namespaces(n)
	for i, o := range objs {
		api.seed(newLockObject(uint32(1000+i), o.(*corev1.Namespace)))
	}
	kube := kubefake.NewSimpleClientset(objs...)
	nsInf := informers.NewSharedInformerFactory(kube, 0).Core().V1().Namespaces().Informer()
	lockInf := dynamicinformer.NewFilteredDynamicInformer(dyn, GVR, "", 0, cache.Indexers{}, nil).Informer()
	log := logrus.New()
	log.SetOutput(io.Discard)
	tbl, err := newTable(log, lockInf, nsInf)
	if err != nil {
		t.Fatal(err)
	}
	tbl.OnChange(func(string) { time.Sleep(100 * time.Microsecond) })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go nsInf.Run(ctx.Done())
	go lockInf.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), nsInf.HasSynced, lockInf.HasSynced) {
		t.Fatal("the caches did not sync")
	}
	for !tbl.HasSynced() {
		if ctx.Err() != nil {
			t.Fatal("the table never synced")
		}
		time.Sleep(50 * time.Microsecond)
	}
	missing := 0
	for i, o := range objs {
		ns := o.(*corev1.Namespace).Name
		if id, ok := tbl.Lookup(ns); !ok || id != uint32(1000+i) {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("the table said it had synced with %d of %d namespaces without their id", missing, n)
	}
}
