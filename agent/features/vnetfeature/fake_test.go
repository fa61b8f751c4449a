package vnetfeature

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"nodeflow/model/vnet"
)

// fakeAPI is client-go's fake dynamic client with what the agent relies on
// from the API server and the fake lacks: field selectors on spec.node
// and spec.vni for lists and watches (the CRDs' selectableFields), and
// server-side apply of the status subresource (only the agent's fields,
// with the UID as a precondition). It counts the watches open per
// selector, and records the applies.
type fakeAPI struct {
	t      *testing.T
	client *dynamicfake.FakeDynamicClient

	mu      sync.Mutex
	watches map[string]int // "resource?selector" -> open watches
	applies []applied
	uids    int
}

// applied is one status apply.
type applied struct {
	key, manager string
	status       map[string]any
}

func newFakeAPI(t *testing.T) *fakeAPI {
	f := &fakeAPI{t: t, watches: map[string]int{}}
	kinds := map[schema.GroupVersionResource]string{
		vnet.NetworkAttachmentGVR: vnet.KindNetworkAttachment + "List",
		vnet.SubnetGVR:            vnet.KindSubnet + "List",
		vnet.IPLockGVR:            vnet.KindIPLock + "List",
	}
	f.client = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), kinds)
	for _, gvr := range []schema.GroupVersionResource{vnet.NetworkAttachmentGVR, vnet.SubnetGVR} {
		f.client.PrependReactor("list", gvr.Resource, f.list(gvr))
		f.client.PrependWatchReactor(gvr.Resource, f.watch(gvr))
	}
	f.client.PrependReactor("patch", vnet.ResourceNetworkAttachments, f.applyStatus)
	return f
}

// selectable returns the selectable fields of u.
func selectable(u *unstructured.Unstructured) fields.Set {
	set := fields.Set{"metadata.name": u.GetName(), "metadata.namespace": u.GetNamespace()}
	if n, ok, _ := unstructured.NestedString(u.Object, "spec", "node"); ok {
		set["spec.node"] = n
	}
	if v, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "vni"); ok {
		set["spec.vni"] = fmt.Sprint(v)
	}
	return set
}

func selectorOf(r fields.Selector) fields.Selector {
	if r == nil {
		return fields.Everything()
	}
	return r
}

func (f *fakeAPI) list(gvr schema.GroupVersionResource) k8stesting.ReactionFunc {
	return func(action k8stesting.Action) (bool, runtime.Object, error) {
		la := action.(k8stesting.ListActionImpl)
		sel := selectorOf(la.GetListRestrictions().Fields)
		obj, err := f.client.Tracker().List(gvr, la.GetKind(), la.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		l := obj.(*unstructured.UnstructuredList)
		out := &unstructured.UnstructuredList{Object: l.Object}
		for i := range l.Items {
			if sel.Matches(selectable(&l.Items[i])) {
				out.Items = append(out.Items, l.Items[i])
			}
		}
		return true, out, nil
	}
}

func watchKey(resource string, sel fields.Selector) string { return resource + "?" + sel.String() }

func (f *fakeAPI) watch(gvr schema.GroupVersionResource) k8stesting.WatchReactionFunc {
	return func(action k8stesting.Action) (bool, watch.Interface, error) {
		wa := action.(k8stesting.WatchActionImpl)
		sel := selectorOf(wa.GetWatchRestrictions().Fields)
		w, err := f.client.Tracker().Watch(gvr, wa.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		key := watchKey(gvr.Resource, sel)
		f.mu.Lock()
		f.watches[key]++
		f.mu.Unlock()
		filtered := watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
			u, ok := ev.Object.(*unstructured.Unstructured)
			return ev, !ok || sel.Matches(selectable(u))
		})
		return true, &countedWatch{Interface: filtered, done: func() {
			f.mu.Lock()
			f.watches[key]--
			f.mu.Unlock()
		}}, nil
	}
}

// countedWatch calls done once when stopped.
type countedWatch struct {
	watch.Interface
	once sync.Once
	done func()
}

func (w *countedWatch) Stop() {
	w.once.Do(w.done)
	w.Interface.Stop()
}

// openWatches returns the watches open on resource with the field selector
// key=value.
func (f *fakeAPI) openWatches(resource, key, value string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.watches[watchKey(resource, fields.OneTermEqualSelector(key, value))]
}

// applyStatus serves a server-side apply of an attachment's status: the
// fields of the patch replace the agent's (hostIP, ifcName, errors.host),
// a field left out is removed, the rest of the object is kept.
func (f *fakeAPI) applyStatus(action k8stesting.Action) (bool, runtime.Object, error) {
	pa := action.(k8stesting.PatchActionImpl)
	if pa.GetPatchType() != types.ApplyPatchType {
		return false, nil, nil
	}
	if pa.GetSubresource() != "status" {
		return true, nil, fmt.Errorf("fake: apply to %q, want the status subresource", pa.GetSubresource())
	}
	var patch unstructured.Unstructured
	if err := json.Unmarshal(pa.GetPatch(), &patch.Object); err != nil {
		return true, nil, err
	}
	gvr := vnet.NetworkAttachmentGVR
	obj, err := f.client.Tracker().Get(gvr, pa.GetNamespace(), pa.GetName())
	if err != nil {
		return true, nil, err
	}
	cur := obj.(*unstructured.Unstructured).DeepCopy()
	if uid := patch.GetUID(); uid != "" && uid != cur.GetUID() {
		return true, nil, apierrors.NewConflict(schema.GroupResource{Group: vnet.Group, Resource: gvr.Resource}, pa.GetName(),
			fmt.Errorf("uid %s in the apply, %s on the object", uid, cur.GetUID()))
	}
	for _, k := range []string{"hostIP", "ifcName"} {
		if v, ok, _ := unstructured.NestedString(patch.Object, "status", k); ok {
			_ = unstructured.SetNestedField(cur.Object, v, "status", k)
		} else {
			unstructured.RemoveNestedField(cur.Object, "status", k)
		}
	}
	if v, ok, _ := unstructured.NestedSlice(patch.Object, "status", "errors", "host"); ok {
		_ = unstructured.SetNestedSlice(cur.Object, v, "status", "errors", "host")
	}
	bumpRV(cur)
	if err := f.client.Tracker().Update(gvr, cur, pa.GetNamespace()); err != nil {
		return true, nil, err
	}
	st, _, _ := unstructured.NestedMap(patch.Object, "status")
	f.mu.Lock()
	f.applies = append(f.applies, applied{key: pa.GetNamespace() + "/" + pa.GetName(), manager: pa.GetPatchOptions().FieldManager, status: st})
	f.mu.Unlock()
	return true, cur, nil
}

func bumpRV(u *unstructured.Unstructured) {
	rv, _ := strconv.Atoi(u.GetResourceVersion())
	u.SetResourceVersion(strconv.Itoa(rv + 1))
}

// appliedTo returns the applies to the attachment namespace/name.
func (f *fakeAPI) appliedTo(key string) []applied {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []applied
	for _, a := range f.applies {
		if a.key == key {
			out = append(out, a)
		}
	}
	return out
}

// create adds obj with a fresh UID.
func (f *fakeAPI) create(obj runtime.Object) *unstructured.Unstructured {
	f.t.Helper()
	var u *unstructured.Unstructured
	var err error
	var gvr schema.GroupVersionResource
	switch o := obj.(type) {
	case *vnet.NetworkAttachment:
		u, err = vnet.ToUnstructured(o)
		gvr = vnet.NetworkAttachmentGVR
	case *vnet.Subnet:
		u, err = vnet.ToUnstructured(o)
		gvr = vnet.SubnetGVR
	default:
		f.t.Fatalf("fake: create %T", obj)
	}
	if err != nil {
		f.t.Fatal(err)
	}
	f.mu.Lock()
	f.uids++
	u.SetUID(types.UID(fmt.Sprintf("uid-%d", f.uids)))
	f.mu.Unlock()
	u.SetResourceVersion("1")
	if err := f.client.Tracker().Create(gvr, u, u.GetNamespace()); err != nil {
		f.t.Fatal(err)
	}
	return u
}

// get returns the attachment namespace/name, nil when there is none.
func (f *fakeAPI) get(namespace, name string) *vnet.NetworkAttachment {
	obj, err := f.client.Tracker().Get(vnet.NetworkAttachmentGVR, namespace, name)
	if err != nil {
		return nil
	}
	a, err := vnet.FromUnstructured[*vnet.NetworkAttachment](obj.(*unstructured.Unstructured))
	if err != nil {
		f.t.Fatal(err)
	}
	return a
}

// update changes the attachment namespace/name.
func (f *fakeAPI) update(namespace, name string, change func(a *vnet.NetworkAttachment)) {
	f.t.Helper()
	a := f.get(namespace, name)
	change(a)
	u, err := vnet.ToUnstructured(a)
	if err != nil {
		f.t.Fatal(err)
	}
	bumpRV(u)
	if err := f.client.Tracker().Update(vnet.NetworkAttachmentGVR, u, namespace); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeAPI) delete(gvr schema.GroupVersionResource, namespace, name string) {
	f.t.Helper()
	if err := f.client.Tracker().Delete(gvr, namespace, name); err != nil {
		f.t.Fatal(err)
	}
}

// fakeHost is a hostSide that records what it is asked, and can fail.
type fakeHost struct {
	mu       sync.Mutex
	made     map[string]string // interface -> netns
	ports    map[string]uint32
	next     uint32
	attaches int
	kept     []map[string]string // every collect's keep
	failWith error
}

func newFakeHost(existing map[string]string) *fakeHost {
	h := &fakeHost{made: map[string]string{}, ports: map[string]uint32{}, next: 10}
	maps.Copy(h.made, existing)
	for name := range existing {
		h.ports[name] = h.next
		h.next++
	}
	return h
}

func (h *fakeHost) attach(_ context.Context, d desired) (uint32, bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.attaches++
	if h.failWith != nil {
		return 0, false, h.failWith
	}
	if ns, ok := h.made[d.link.Name]; ok && ns == d.link.Netns {
		return h.ports[d.link.Name], true, nil
	}
	h.made[d.link.Name] = d.link.Netns
	h.ports[d.link.Name] = h.next
	h.next++
	return h.ports[d.link.Name], false, nil
}

func (h *fakeHost) detach(_ context.Context, name, _ string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.made, name)
	delete(h.ports, name)
	return nil
}

func (h *fakeHost) collect(_ context.Context, keep map[string]string) ([]string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.kept = append(h.kept, maps.Clone(keep))
	var removed []string
	for name := range h.made {
		if _, ok := keep[name]; !ok {
			delete(h.made, name)
			delete(h.ports, name)
			removed = append(removed, name)
		}
	}
	slices.Sort(removed)
	return removed, nil
}

func (h *fakeHost) interfaces() map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.made)
}

// eventually waits for cond, failing with what it says last after 10 s.
func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
