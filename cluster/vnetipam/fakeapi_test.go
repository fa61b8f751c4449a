package vnetipam

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"nodeflow/internal/testutil/watchtest"
	"nodeflow/model/vnet"
)

// fakeAPI stands in for the API server's storage of the three vnet
// resources behind client-go's fake dynamic client. The fake's own object
// tracker keeps no resourceVersions, has no status subresource and no
// delete preconditions; fakeAPI does what the API server does for what the
// IPAM controller relies on: unique names per namespace and resource
// (creating a lock is the test-and-set), UIDs, resourceVersions from one
// counter, optimistic concurrency on update, UID preconditions on update
// and delete, a status subresource (status ignored on create and on
// update of the main resource, everything else ignored on a status
// update), lists with their resourceVersion, and watches from a
// resourceVersion that never drop a slow watcher. It runs no garbage
// collector: collectGarbage does, when a test asks.
type fakeAPI struct {
	mu       sync.Mutex
	rv       int64
	uids     int
	objs     map[string]map[string]*unstructured.Unstructured // resource -> namespace/name
	history  map[string][]watch.Event
	watchers map[string][]*watchtest.Watcher
	// requests counts the requests served, by "verb resource[/subresource]".
	requests map[string]int
	// beforeWrite, when set, may fail a mutating request before it is
	// applied (fault injection).
	beforeWrite func(verb, resource, subresource string, u *unstructured.Unstructured) error
}

var resources = []schema.GroupVersionResource{vnet.SubnetGVR, vnet.NetworkAttachmentGVR, vnet.IPLockGVR}

var listKinds = map[string]string{
	vnet.ResourceSubnets:            vnet.KindSubnet + "List",
	vnet.ResourceNetworkAttachments: vnet.KindNetworkAttachment + "List",
	vnet.ResourceIPLocks:            vnet.KindIPLock + "List",
}

func hasStatus(resource string) bool { return resource != vnet.ResourceIPLocks }

func newFakeAPI() *fakeAPI {
	f := &fakeAPI{rv: 1, objs: map[string]map[string]*unstructured.Unstructured{}, history: map[string][]watch.Event{},
		watchers: map[string][]*watchtest.Watcher{}, requests: map[string]int{}}
	for _, gvr := range resources {
		f.objs[gvr.Resource] = map[string]*unstructured.Unstructured{}
	}
	return f
}

// client returns a new dynamic client of the fake API: each records its
// own actions.
func (f *fakeAPI) client() *dynamicfake.FakeDynamicClient {
	kinds := map[schema.GroupVersionResource]string{}
	for _, gvr := range resources {
		kinds[gvr] = listKinds[gvr.Resource]
	}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), kinds)
	for _, gvr := range resources {
		client.PrependReactor("*", gvr.Resource, f.react)
		client.PrependWatchReactor(gvr.Resource, f.watch)
	}
	return client
}

func gr(resource string) schema.GroupResource {
	return schema.GroupResource{Group: vnet.Group, Resource: resource}
}

func nsName(ns, name string) string { return ns + "/" + name }

// stamp gives u a UID and creationTimestamp when it has none, and the next
// resourceVersion. Under mu.
func (f *fakeAPI) stamp(u *unstructured.Unstructured) {
	if u.GetUID() == "" {
		f.uids++
		u.SetUID(types.UID(fmt.Sprintf("uid-%s-%d", u.GetName(), f.uids)))
	}
	if ts := u.GetCreationTimestamp(); ts.IsZero() {
		u.SetCreationTimestamp(metav1.Now())
	}
	f.rv++
	u.SetResourceVersion(strconv.FormatInt(f.rv, 10))
}

func (f *fakeAPI) emit(resource string, t watch.EventType, u *unstructured.Unstructured) {
	f.history[resource] = append(f.history[resource], watch.Event{Type: t, Object: u.DeepCopy()})
	f.watchers[resource] = slices.DeleteFunc(f.watchers[resource], (*watchtest.Watcher).Stopped)
	for _, w := range f.watchers[resource] {
		w.Push(watch.Event{Type: t, Object: u.DeepCopy()})
	}
}

// seed stores an object as it is, status included, as if written by
// someone else; it returns the stored copy.
func (f *fakeAPI) seed(resource string, u *unstructured.Unstructured) *unstructured.Unstructured {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seedLocked(resource, u)
}

// seedLocked is seed under mu: for a beforeWrite hook, which runs under
// it, to store what another client's request would have stored first.
func (f *fakeAPI) seedLocked(resource string, u *unstructured.Unstructured) *unstructured.Unstructured {
	u = u.DeepCopy()
	f.stamp(u)
	k := nsName(u.GetNamespace(), u.GetName())
	t := watch.Added
	if _, ok := f.objs[resource][k]; ok {
		t = watch.Modified
	}
	f.objs[resource][k] = u
	f.emit(resource, t, u)
	return u.DeepCopy()
}

// get returns a copy of an object, nil when there is none.
func (f *fakeAPI) get(resource, ns, name string) *unstructured.Unstructured {
	f.mu.Lock()
	defer f.mu.Unlock()
	if u, ok := f.objs[resource][nsName(ns, name)]; ok {
		return u.DeepCopy()
	}
	return nil
}

// list returns copies of a resource's objects, by namespace and name.
func (f *fakeAPI) list(resource string) []*unstructured.Unstructured {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.listLocked(resource)
}

// snapshot lists several resources at one instant.
func (f *fakeAPI) snapshot(resources ...string) [][]*unstructured.Unstructured {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out [][]*unstructured.Unstructured
	for _, r := range resources {
		out = append(out, f.listLocked(r))
	}
	return out
}

func (f *fakeAPI) listLocked(resource string) []*unstructured.Unstructured {
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range f.objs[resource] {
			if !yield(k) {
				return
			}
		}
	})
	var out []*unstructured.Unstructured
	for _, k := range keys {
		out = append(out, f.objs[resource][k].DeepCopy())
	}
	return out
}

// remove deletes an object as a client would, without preconditions.
func (f *fakeAPI) remove(resource, ns, name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deleteLocked(resource, nsName(ns, name))
}

func (f *fakeAPI) deleteLocked(resource, k string) bool {
	u, ok := f.objs[resource][k]
	if !ok {
		return false
	}
	delete(f.objs[resource], k)
	f.stamp(u)
	f.emit(resource, watch.Deleted, u)
	return true
}

// collectGarbage does what the garbage collector does: it deletes the
// locks whose owner attachment (by UID) is gone.
func (f *fakeAPI) collectGarbage() {
	f.mu.Lock()
	defer f.mu.Unlock()
	live := map[types.UID]bool{}
	for _, a := range f.objs[vnet.ResourceNetworkAttachments] {
		live[a.GetUID()] = true
	}
	for k, l := range f.objs[vnet.ResourceIPLocks] {
		for _, ref := range l.GetOwnerReferences() {
			if !live[ref.UID] {
				f.deleteLocked(vnet.ResourceIPLocks, k)
				break
			}
		}
	}
}

// count returns the requests served of "verb resource[/subresource]".
func (f *fakeAPI) count(what string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[what]
}

func (f *fakeAPI) react(action k8stesting.Action) (bool, runtime.Object, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	res, sub, ns := action.GetResource().Resource, action.GetSubresource(), action.GetNamespace()
	what := action.GetVerb() + " " + res
	if sub != "" {
		what += "/" + sub
	}
	f.requests[what]++
	store := f.objs[res]
	// By verb: an update action satisfies CreateAction's interface too.
	switch action.GetVerb() {
	case "create":
		u := action.(k8stesting.CreateAction).GetObject().(*unstructured.Unstructured).DeepCopy()
		u.SetNamespace(ns)
		k := nsName(ns, u.GetName())
		if _, ok := store[k]; ok {
			return true, nil, apierrors.NewAlreadyExists(gr(res), u.GetName())
		}
		if f.beforeWrite != nil {
			if err := f.beforeWrite("create", res, sub, u); err != nil {
				return true, nil, err
			}
		}
		u.SetUID("")
		u.SetCreationTimestamp(metav1.Time{})
		if hasStatus(res) {
			delete(u.Object, "status")
		}
		f.stamp(u)
		store[k] = u
		f.emit(res, watch.Added, u)
		return true, u.DeepCopy(), nil
	case "get":
		u, ok := store[nsName(ns, action.(k8stesting.GetAction).GetName())]
		if !ok {
			return true, nil, apierrors.NewNotFound(gr(res), action.(k8stesting.GetAction).GetName())
		}
		return true, u.DeepCopy(), nil
	case "list":
		r := action.(k8stesting.ListAction).GetListRestrictions()
		if !r.Labels.Empty() || !r.Fields.Empty() {
			return true, nil, fmt.Errorf("fakeAPI: selectors not supported")
		}
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion(vnet.APIVersion)
		list.SetKind(listKinds[res])
		list.SetResourceVersion(strconv.FormatInt(f.rv, 10))
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range store {
				if !yield(k) {
					return
				}
			}
		})
		for _, k := range keys {
			if u := store[k]; ns == "" || u.GetNamespace() == ns {
				list.Items = append(list.Items, *u.DeepCopy())
			}
		}
		return true, list, nil
	case "update":
		u := action.(k8stesting.UpdateAction).GetObject().(*unstructured.Unstructured).DeepCopy()
		k := nsName(ns, u.GetName())
		cur, ok := store[k]
		if !ok {
			return true, nil, apierrors.NewNotFound(gr(res), u.GetName())
		}
		if rv := u.GetResourceVersion(); rv != "" && rv != cur.GetResourceVersion() {
			return true, nil, apierrors.NewConflict(gr(res), u.GetName(), fmt.Errorf("resourceVersion %s is not %s", rv, cur.GetResourceVersion()))
		}
		if uid := u.GetUID(); uid != "" && uid != cur.GetUID() {
			return true, nil, apierrors.NewConflict(gr(res), u.GetName(), fmt.Errorf("uid %s is not %s", uid, cur.GetUID()))
		}
		if f.beforeWrite != nil {
			if err := f.beforeWrite("update", res, sub, u); err != nil {
				return true, nil, err
			}
		}
		next := cur.DeepCopy()
		switch {
		case sub == "status":
			if st, ok := u.Object["status"]; ok {
				next.Object["status"] = st
			} else {
				delete(next.Object, "status")
			}
		case hasStatus(res):
			st, had := cur.Object["status"]
			next = u
			delete(next.Object, "status")
			if had {
				next.Object["status"] = runtime.DeepCopyJSONValue(st)
			}
		default:
			next = u
		}
		next.SetUID(cur.GetUID())
		next.SetCreationTimestamp(cur.GetCreationTimestamp())
		f.stamp(next)
		store[k] = next
		f.emit(res, watch.Modified, next)
		return true, next.DeepCopy(), nil
	case "delete":
		a := action.(k8stesting.DeleteAction)
		k := nsName(ns, a.GetName())
		cur, ok := store[k]
		if !ok {
			return true, nil, apierrors.NewNotFound(gr(res), a.GetName())
		}
		if p := a.GetDeleteOptions().Preconditions; p != nil && p.UID != nil && *p.UID != cur.GetUID() {
			return true, nil, apierrors.NewConflict(gr(res), a.GetName(), fmt.Errorf("uid precondition %s is not %s", *p.UID, cur.GetUID()))
		}
		if f.beforeWrite != nil {
			if err := f.beforeWrite("delete", res, sub, cur); err != nil {
				return true, nil, err
			}
		}
		f.deleteLocked(res, k)
		return true, nil, nil
	}
	return true, nil, fmt.Errorf("fakeAPI: %s not supported", what)
}

func (f *fakeAPI) watch(action k8stesting.Action) (bool, watch.Interface, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	res := action.GetResource().Resource
	from := int64(0)
	if wa, ok := action.(k8stesting.WatchAction); ok {
		r := wa.GetWatchRestrictions()
		if !r.Labels.Empty() || !r.Fields.Empty() {
			return true, nil, fmt.Errorf("fakeAPI: selectors not supported")
		}
		if r.ResourceVersion != "" {
			from, _ = strconv.ParseInt(r.ResourceVersion, 10, 64)
		}
	}
	w := watchtest.New()
	for _, ev := range f.history[res] {
		rv, _ := strconv.ParseInt(ev.Object.(*unstructured.Unstructured).GetResourceVersion(), 10, 64)
		if rv > from {
			w.Push(watch.Event{Type: ev.Type, Object: ev.Object.DeepCopyObject()})
		}
	}
	f.watchers[res] = append(f.watchers[res], w)
	return true, w, nil
}

// rivalLocked returns the lock that another controller would have created
// for the same address as the lock l, for another attachment of its VNI,
// or nil when there is none. Under mu.
func (f *fakeAPI) rivalLocked(t *testing.T, l *unstructured.Unstructured) *unstructured.Unstructured {
	vni, ip, err := vnet.ParseLockName(l.GetName())
	if err != nil {
		t.Errorf("lock %s: %v", l.GetName(), err)
		return nil
	}
	holder, _, _ := unstructured.NestedString(l.Object, "spec", "attachment")
	for _, u := range f.listLocked(vnet.ResourceNetworkAttachments) {
		att, err := vnet.FromUnstructured[*vnet.NetworkAttachment](u)
		if err != nil || att.Namespace != l.GetNamespace() || att.Name == holder || att.Spec.VNI != vni {
			continue
		}
		return mustU(t, vnet.NewIPLock(att, vni, ip))
	}
	return nil
}
