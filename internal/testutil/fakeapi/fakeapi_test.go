package fakeapi

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

var (
	owners = Resource{GVR: schema.GroupVersionResource{Group: "example.io", Version: "v1", Resource: "owners"}, Kind: "Owner", Status: true}
	things = Resource{GVR: schema.GroupVersionResource{Group: "example.io", Version: "v1", Resource: "things"}, Kind: "Thing"}
)

func object(r Resource, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"n": int64(1)}, "status": map[string]any{"s": "set"}}}
	u.SetAPIVersion(r.GVR.GroupVersion().String())
	u.SetKind(r.Kind)
	u.SetNamespace("ns")
	u.SetName(name)
	return u
}

// TestAsTheAPIServer checks what the fake does as the API server does:
// unique names, resourceVersions, optimistic concurrency, the status
// subresource, finalizers, watches from a resourceVersion and the garbage
// collector.
func TestAsTheAPIServer(t *testing.T) {
	ctx := context.Background()
	f := New(owners, things)
	c := f.Client()
	ow, th := c.Resource(owners.GVR).Namespace("ns"), c.Resource(things.GVR).Namespace("ns")

	o, err := ow.Create(ctx, object(owners, "o"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if o.GetUID() == "" || o.GetResourceVersion() != "2" || o.Object["status"] != nil {
		t.Errorf("created %v: want a UID, resourceVersion 2 and no status", o.Object)
	}
	if _, err := ow.Create(ctx, object(owners, "o"), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Errorf("second create: %v, want AlreadyExists", err)
	}
	stale := o.DeepCopy()
	if o, err = ow.UpdateStatus(ctx, object(owners, "o"), metav1.UpdateOptions{}); err != nil || o.Object["status"] == nil || o.GetResourceVersion() != "3" {
		t.Errorf("status update: %v, %v", o, err)
	}
	if _, err := ow.Update(ctx, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("update at an old resourceVersion: %v, want Conflict", err)
	}
	w, err := ow.Watch(ctx, metav1.ListOptions{ResourceVersion: "2"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	select {
	case ev := <-w.ResultChan():
		if ev.Type != watch.Modified || ev.Object.(*unstructured.Unstructured).GetResourceVersion() != "3" {
			t.Errorf("watch from 2: %s %v", ev.Type, ev.Object)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch from 2: no event")
	}

	kept := object(things, "kept")
	kept.SetFinalizers([]string{"example.io/hold"})
	kept.SetOwnerReferences([]metav1.OwnerReference{{Kind: "Owner", Name: "o", UID: o.GetUID()}})
	if _, err := th.Create(ctx, kept, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	orphan := object(things, "orphan")
	orphan.SetOwnerReferences([]metav1.OwnerReference{{Kind: "Elsewhere", Name: "x", UID: "uid-x"}})
	f.Seed(things.GVR.Resource, orphan)
	if err := th.Delete(ctx, "kept", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if u := f.Get(things.GVR.Resource, "ns", "kept"); u == nil || u.GetDeletionTimestamp() == nil {
		t.Errorf("a finalizer did not keep %v, terminating", u)
	}
	f.Remove(owners.GVR.Resource, "ns", "o")
	f.CollectGarbage("uid-x")
	if n := len(f.List(things.GVR.Resource)); n != 1 {
		t.Errorf("%d things after the garbage collection, want the terminating one", n)
	}
	if got := f.Applied("create things") + f.Applied("create owners"); got != 2 {
		t.Errorf("%d creates applied, want 2", got)
	}
	if got := f.Count("create owners"); got != 2 {
		t.Errorf("%d creates of owners served, want 2", got)
	}
}
