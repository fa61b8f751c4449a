// Package fakeapi stands in, in unit tests, for the API server's storage
// of custom resources behind client-go's fake dynamic client.
//
// The fake client's own object tracker keeps no resourceVersions, ignores
// finalizers, has no status subresource and no preconditions, and its
// watchers panic when they fall 100 events behind. An API does what the
// API server does for what the cluster controllers rely on: unique names
// per namespace and resource (creating an object is a test-and-set), UIDs,
// resourceVersions from one counter, optimistic concurrency and UID
// preconditions on update and delete, finalizers holding a deleted object
// with a deletionTimestamp, a status subresource where a resource has one
// (status ignored on create and on update of the main resource,
// everything else ignored on a status update), lists with their
// resourceVersion, and watches from a resourceVersion that never drop a
// slow watcher. It runs no garbage collector: CollectGarbage does, when a
// test asks.
package fakeapi

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
)

// Resource is one resource the fake API serves.
type Resource struct {
	// GVR names the resource.
	GVR schema.GroupVersionResource
	// Kind is the kind of its objects; lists are of Kind + "List".
	Kind string
	// Status is true when the resource has a status subresource.
	Status bool
}

// API is the fake storage. It is safe for concurrent use.
type API struct {
	mu        sync.Mutex
	rv        int64
	uids      int
	resources map[string]Resource
	objs      map[string]map[string]*unstructured.Unstructured // resource -> namespace/name
	history   map[string][]watch.Event
	watchers  map[string][]*watcher
	requests  map[string]int // "verb resource[/subresource]", every request
	applied   map[string]int // the same, the writes that took effect
	// beforeWrite, when set, may fail a mutating request before it is
	// applied (fault injection).
	beforeWrite func(verb, resource, subresource string, u *unstructured.Unstructured) error
}

// New returns an empty API serving the resources. Its resourceVersion is
// 1, the empty store's, as in the API server; objects start at 2.
func New(resources ...Resource) *API {
	f := &API{rv: 1, resources: map[string]Resource{}, objs: map[string]map[string]*unstructured.Unstructured{},
		history: map[string][]watch.Event{}, watchers: map[string][]*watcher{},
		requests: map[string]int{}, applied: map[string]int{}}
	for _, r := range resources {
		f.resources[r.GVR.Resource] = r
		f.objs[r.GVR.Resource] = map[string]*unstructured.Unstructured{}
	}
	return f
}

// Client returns a new dynamic client of the fake API: each records its
// own actions.
func (f *API) Client() *dynamicfake.FakeDynamicClient {
	kinds := map[schema.GroupVersionResource]string{}
	for _, r := range f.resources {
		kinds[r.GVR] = r.Kind + "List"
	}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), kinds)
	for _, r := range f.resources {
		client.PrependReactor("*", r.GVR.Resource, f.react)
		client.PrependWatchReactor(r.GVR.Resource, f.watch)
	}
	return client
}

// SetBeforeWrite sets (nil: clears) a hook that runs, under the API's
// lock, before every mutating request is applied; an error it returns
// fails the request. It may call the *Locked methods.
func (f *API) SetBeforeWrite(hook func(verb, resource, subresource string, u *unstructured.Unstructured) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.beforeWrite = hook
}

func (f *API) gr(resource string) schema.GroupResource {
	return f.resources[resource].GVR.GroupResource()
}

func key(ns, name string) string { return ns + "/" + name }

// stamp gives u a UID and creationTimestamp when it has none, and the next
// resourceVersion. Under mu.
func (f *API) stamp(u *unstructured.Unstructured) {
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

func (f *API) emit(resource string, t watch.EventType, u *unstructured.Unstructured) {
	f.history[resource] = append(f.history[resource], watch.Event{Type: t, Object: u.DeepCopy()})
	f.watchers[resource] = slices.DeleteFunc(f.watchers[resource], (*watcher).stopped)
	for _, w := range f.watchers[resource] {
		w.push(watch.Event{Type: t, Object: u.DeepCopy()})
	}
}

// Seed stores an object as it is, status included, as if written by
// someone else; it returns the stored copy.
func (f *API) Seed(resource string, u *unstructured.Unstructured) *unstructured.Unstructured {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.SeedLocked(resource, u)
}

// SeedLocked is Seed under the API's lock: for a hook set with
// SetBeforeWrite to store what another client's request would have
// stored first.
func (f *API) SeedLocked(resource string, u *unstructured.Unstructured) *unstructured.Unstructured {
	u = u.DeepCopy()
	f.stamp(u)
	k := key(u.GetNamespace(), u.GetName())
	t := watch.Added
	if _, ok := f.objs[resource][k]; ok {
		t = watch.Modified
	}
	f.objs[resource][k] = u
	f.emit(resource, t, u)
	return u.DeepCopy()
}

// Get returns a copy of an object, nil when there is none.
func (f *API) Get(resource, ns, name string) *unstructured.Unstructured {
	f.mu.Lock()
	defer f.mu.Unlock()
	if u, ok := f.objs[resource][key(ns, name)]; ok {
		return u.DeepCopy()
	}
	return nil
}

// List returns copies of a resource's objects, by namespace and name.
func (f *API) List(resource string) []*unstructured.Unstructured {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ListLocked(resource)
}

// Snapshot lists several resources at one instant.
func (f *API) Snapshot(resources ...string) [][]*unstructured.Unstructured {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out [][]*unstructured.Unstructured
	for _, r := range resources {
		out = append(out, f.ListLocked(r))
	}
	return out
}

// ListLocked is List under the API's lock, for a SetBeforeWrite hook.
func (f *API) ListLocked(resource string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, k := range slices.Sorted(maps.Keys(f.objs[resource])) {
		out = append(out, f.objs[resource][k].DeepCopy())
	}
	return out
}

// Remove deletes an object as a client would, without preconditions; it
// reports whether there was one.
func (f *API) Remove(resource, ns, name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := key(ns, name)
	if _, ok := f.objs[resource][k]; !ok {
		return false
	}
	f.deleteLocked(resource, k)
	return true
}

// deleteLocked deletes an object that is there: a finalizer keeps it,
// terminating, with a deletionTimestamp.
func (f *API) deleteLocked(resource, k string) {
	u := f.objs[resource][k]
	if len(u.GetFinalizers()) > 0 {
		if u.GetDeletionTimestamp() == nil {
			now := metav1.Now()
			u.SetDeletionTimestamp(&now)
			f.stamp(u)
			f.emit(resource, watch.Modified, u)
		}
		return
	}
	delete(f.objs[resource], k)
	f.stamp(u)
	f.emit(resource, watch.Deleted, u)
}

// CollectGarbage does what the garbage collector does: it deletes every
// object with an owner that is gone, an owner being gone when its UID is
// one of gone (objects outside the fake) or when it is of a kind the fake
// serves and no object of that kind has its UID.
func (f *API) CollectGarbage(gone ...types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	dead := map[types.UID]bool{}
	for _, uid := range gone {
		dead[uid] = true
	}
	live := map[string]map[types.UID]bool{} // kind -> UIDs
	for res, r := range f.resources {
		live[r.Kind] = map[types.UID]bool{}
		for _, u := range f.objs[res] {
			live[r.Kind][u.GetUID()] = true
		}
	}
	for _, res := range slices.Sorted(maps.Keys(f.objs)) {
		for _, k := range slices.Sorted(maps.Keys(f.objs[res])) {
			for _, ref := range f.objs[res][k].GetOwnerReferences() {
				if uids, served := live[ref.Kind]; dead[ref.UID] || served && !uids[ref.UID] {
					f.deleteLocked(res, k)
					break
				}
			}
		}
	}
}

// Requests returns the requests served so far, by "verb
// resource[/subresource]", failed ones included.
func (f *API) Requests() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.requests)
}

// Count returns the requests served of "verb resource[/subresource]",
// failed ones included.
func (f *API) Count(what string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[what]
}

// Applied returns the writes (create, update, delete) that took effect so
// far, by "verb resource[/subresource]".
func (f *API) Applied(what string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applied[what]
}

func (f *API) react(action k8stesting.Action) (bool, runtime.Object, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	res, sub, ns := action.GetResource().Resource, action.GetSubresource(), action.GetNamespace()
	what := action.GetVerb() + " " + res
	if sub != "" {
		what += "/" + sub
	}
	f.requests[what]++
	// By verb: an update action satisfies CreateAction's interface too.
	var obj runtime.Object
	var err error
	switch action.GetVerb() {
	case "create":
		obj, err = f.create(res, sub, ns, action.(k8stesting.CreateAction))
	case "get":
		name := action.(k8stesting.GetAction).GetName()
		u, ok := f.objs[res][key(ns, name)]
		if !ok {
			return true, nil, apierrors.NewNotFound(f.gr(res), name)
		}
		return true, u.DeepCopy(), nil
	case "list":
		return f.list(res, ns, action.(k8stesting.ListAction))
	case "update":
		obj, err = f.update(res, sub, ns, action.(k8stesting.UpdateAction))
	case "delete":
		err = f.delete(res, sub, ns, action.(k8stesting.DeleteAction))
	default:
		return true, nil, fmt.Errorf("fakeapi: %s not supported", what)
	}
	if err == nil {
		f.applied[what]++
	}
	return true, obj, err
}

func (f *API) create(res, sub, ns string, a k8stesting.CreateAction) (runtime.Object, error) {
	u := a.GetObject().(*unstructured.Unstructured).DeepCopy()
	u.SetNamespace(ns)
	k := key(ns, u.GetName())
	if _, ok := f.objs[res][k]; ok {
		return nil, apierrors.NewAlreadyExists(f.gr(res), u.GetName())
	}
	if f.beforeWrite != nil {
		if err := f.beforeWrite("create", res, sub, u); err != nil {
			return nil, err
		}
	}
	u.SetUID("")
	u.SetCreationTimestamp(metav1.Time{})
	if f.resources[res].Status {
		delete(u.Object, "status")
	}
	f.stamp(u)
	f.objs[res][k] = u
	f.emit(res, watch.Added, u)
	return u.DeepCopy(), nil
}

func (f *API) list(res, ns string, a k8stesting.ListAction) (bool, runtime.Object, error) {
	r := a.GetListRestrictions()
	if !r.Labels.Empty() || !r.Fields.Empty() {
		return true, nil, fmt.Errorf("fakeapi: selectors not supported")
	}
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion(f.resources[res].GVR.GroupVersion().String())
	list.SetKind(f.resources[res].Kind + "List")
	list.SetResourceVersion(strconv.FormatInt(f.rv, 10))
	for _, k := range slices.Sorted(maps.Keys(f.objs[res])) {
		if u := f.objs[res][k]; ns == "" || u.GetNamespace() == ns {
			list.Items = append(list.Items, *u.DeepCopy())
		}
	}
	return true, list, nil
}

func (f *API) update(res, sub, ns string, a k8stesting.UpdateAction) (runtime.Object, error) {
	u := a.GetObject().(*unstructured.Unstructured).DeepCopy()
	k := key(ns, u.GetName())
	cur, ok := f.objs[res][k]
	if !ok {
		return nil, apierrors.NewNotFound(f.gr(res), u.GetName())
	}
	if rv := u.GetResourceVersion(); rv != "" && rv != cur.GetResourceVersion() {
		return nil, apierrors.NewConflict(f.gr(res), u.GetName(), fmt.Errorf("resourceVersion %s is not %s", rv, cur.GetResourceVersion()))
	}
	if uid := u.GetUID(); uid != "" && uid != cur.GetUID() {
		return nil, apierrors.NewConflict(f.gr(res), u.GetName(), fmt.Errorf("uid %s is not %s", uid, cur.GetUID()))
	}
	if f.beforeWrite != nil {
		if err := f.beforeWrite("update", res, sub, u); err != nil {
			return nil, err
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
	case f.resources[res].Status:
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
	next.SetDeletionTimestamp(cur.GetDeletionTimestamp())
	f.stamp(next)
	if next.GetDeletionTimestamp() != nil && len(next.GetFinalizers()) == 0 {
		delete(f.objs[res], k)
		f.emit(res, watch.Deleted, next)
		return next.DeepCopy(), nil
	}
	f.objs[res][k] = next
	f.emit(res, watch.Modified, next)
	return next.DeepCopy(), nil
}

func (f *API) delete(res, sub, ns string, a k8stesting.DeleteAction) error {
	k := key(ns, a.GetName())
	cur, ok := f.objs[res][k]
	if !ok {
		return apierrors.NewNotFound(f.gr(res), a.GetName())
	}
	if p := a.GetDeleteOptions().Preconditions; p != nil && p.UID != nil && *p.UID != cur.GetUID() {
		return apierrors.NewConflict(f.gr(res), a.GetName(), fmt.Errorf("uid precondition %s is not %s", *p.UID, cur.GetUID()))
	}
	if f.beforeWrite != nil {
		if err := f.beforeWrite("delete", res, sub, cur); err != nil {
			return err
		}
	}
	f.deleteLocked(res, k)
	return nil
}

func (f *API) watch(action k8stesting.Action) (bool, watch.Interface, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	res := action.GetResource().Resource
	from := int64(0)
	if wa, ok := action.(k8stesting.WatchAction); ok {
		r := wa.GetWatchRestrictions()
		if !r.Labels.Empty() || !r.Fields.Empty() {
			return true, nil, fmt.Errorf("fakeapi: selectors not supported")
		}
		if r.ResourceVersion != "" {
			from, _ = strconv.ParseInt(r.ResourceVersion, 10, 64)
		}
	}
	w := newWatcher()
	for _, ev := range f.history[res] {
		rv, _ := strconv.ParseInt(ev.Object.(*unstructured.Unstructured).GetResourceVersion(), 10, 64)
		if rv > from {
			w.push(watch.Event{Type: ev.Type, Object: ev.Object.DeepCopyObject()})
		}
	}
	f.watchers[res] = append(f.watchers[res], w)
	return true, w, nil
}
