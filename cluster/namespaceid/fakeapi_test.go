package namespaceid

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

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
)

// lockAPI stands in for the API server's NamespaceID storage behind a
// client-go fake dynamic client. The fake's own object tracker stores no
// resourceVersions in objects, ignores finalizers and panics when a
// watcher falls 100 events behind; lockAPI does what the API server does
// for what nsid relies on: unique names, resourceVersions from one counter,
// optimistic concurrency on update, UID preconditions on delete,
// finalizers holding a deleted object with a deletionTimestamp, lists with
// their resourceVersion, and watches from a resourceVersion with no limit
// on how far a watcher may fall behind.
type lockAPI struct {
	mu       sync.Mutex
	rv       int64
	uids     int
	objs     map[string]*unstructured.Unstructured
	history  []watch.Event
	watchers []*watchtest.Watcher
	// Mutating requests served, by verb.
	creates, updates, deletes int
}

var lockGR = schema.GroupResource{Group: Group, Resource: Resource}

func newLockAPI() (*lockAPI, *dynamicfake.FakeDynamicClient) {
	// resourceVersion 1 is the empty store's, as in the API server; objects
	// start at 2.
	api := &lockAPI{rv: 1, objs: map[string]*unstructured.Unstructured{}}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{GVR: Kind + "List"})
	client.PrependReactor("*", Resource, api.react)
	client.PrependWatchReactor(Resource, api.watch)
	return api, client
}

// seed stores an object as it is, as if created by someone else.
func (api *lockAPI) seed(u *unstructured.Unstructured) {
	api.mu.Lock()
	defer api.mu.Unlock()
	u = u.DeepCopy()
	api.stamp(u)
	api.objs[u.GetName()] = u
	api.emit(watch.Added, u)
}

func (api *lockAPI) stamp(u *unstructured.Unstructured) {
	if u.GetUID() == "" {
		api.uids++
		u.SetUID(types.UID(fmt.Sprintf("lock-uid-%d", api.uids)))
	}
	if ts := u.GetCreationTimestamp(); ts.IsZero() {
		u.SetCreationTimestamp(metav1.Now())
	}
	api.rv++
	u.SetResourceVersion(strconv.FormatInt(api.rv, 10))
}

func (api *lockAPI) emit(t watch.EventType, u *unstructured.Unstructured) {
	ev := watch.Event{Type: t, Object: u.DeepCopy()}
	api.history = append(api.history, ev)
	for _, w := range api.watchers {
		w.Push(watch.Event{Type: t, Object: u.DeepCopy()})
	}
}

// get returns a copy of the object, nil when there is none.
func (api *lockAPI) get(name string) *unstructured.Unstructured {
	api.mu.Lock()
	defer api.mu.Unlock()
	if u, ok := api.objs[name]; ok {
		return u.DeepCopy()
	}
	return nil
}

// list returns copies of every object.
func (api *lockAPI) list() []*unstructured.Unstructured {
	api.mu.Lock()
	defer api.mu.Unlock()
	var out []*unstructured.Unstructured
	for _, u := range api.objs {
		out = append(out, u.DeepCopy())
	}
	return out
}

func (api *lockAPI) mutations() (creates, updates, deletes int) {
	api.mu.Lock()
	defer api.mu.Unlock()
	return api.creates, api.updates, api.deletes
}

// collectGarbage does what the garbage collector does once a namespace is
// gone: it deletes the locks that the namespace owns.
func (api *lockAPI) collectGarbage(owner types.UID) {
	api.mu.Lock()
	defer api.mu.Unlock()
	for name, u := range api.objs {
		for _, ref := range u.GetOwnerReferences() {
			if ref.UID == owner {
				api.deleteLocked(name)
			}
		}
	}
}

func (api *lockAPI) deleteLocked(name string) {
	u := api.objs[name]
	if len(u.GetFinalizers()) > 0 {
		if u.GetDeletionTimestamp() == nil {
			now := metav1.Now()
			u.SetDeletionTimestamp(&now)
			api.stamp(u)
			api.emit(watch.Modified, u)
		}
		return
	}
	delete(api.objs, name)
	api.stamp(u)
	api.emit(watch.Deleted, u)
}

func (api *lockAPI) react(action k8stesting.Action) (bool, runtime.Object, error) {
	api.mu.Lock()
	defer api.mu.Unlock()
	// By verb: an update action satisfies CreateAction's interface too.
	switch action.GetVerb() {
	case "create":
		a := action.(k8stesting.CreateAction)
		u := a.GetObject().(*unstructured.Unstructured).DeepCopy()
		if _, ok := api.objs[u.GetName()]; ok {
			return true, nil, apierrors.NewAlreadyExists(lockGR, u.GetName())
		}
		api.creates++
		u.SetUID("")
		api.stamp(u)
		api.objs[u.GetName()] = u
		api.emit(watch.Added, u)
		return true, u.DeepCopy(), nil
	case "get":
		a := action.(k8stesting.GetAction)
		u, ok := api.objs[a.GetName()]
		if !ok {
			return true, nil, apierrors.NewNotFound(lockGR, a.GetName())
		}
		return true, u.DeepCopy(), nil
	case "list":
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion(Group + "/" + Version)
		list.SetKind(Kind + "List")
		list.SetResourceVersion(strconv.FormatInt(api.rv, 10))
		names := make([]string, 0, len(api.objs))
		for n := range api.objs {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			list.Items = append(list.Items, *api.objs[n].DeepCopy())
		}
		return true, list, nil
	case "update":
		a := action.(k8stesting.UpdateAction)
		u := a.GetObject().(*unstructured.Unstructured).DeepCopy()
		cur, ok := api.objs[u.GetName()]
		if !ok {
			return true, nil, apierrors.NewNotFound(lockGR, u.GetName())
		}
		if rv := u.GetResourceVersion(); rv != "" && rv != cur.GetResourceVersion() {
			return true, nil, apierrors.NewConflict(lockGR, u.GetName(), fmt.Errorf("resourceVersion %s is not %s", rv, cur.GetResourceVersion()))
		}
		api.updates++
		u.SetUID(cur.GetUID())
		u.SetCreationTimestamp(cur.GetCreationTimestamp())
		u.SetDeletionTimestamp(cur.GetDeletionTimestamp())
		if u.GetDeletionTimestamp() != nil && len(u.GetFinalizers()) == 0 {
			delete(api.objs, u.GetName())
			api.stamp(u)
			api.emit(watch.Deleted, u)
			return true, u.DeepCopy(), nil
		}
		api.stamp(u)
		api.objs[u.GetName()] = u
		api.emit(watch.Modified, u)
		return true, u.DeepCopy(), nil
	case "delete":
		a := action.(k8stesting.DeleteAction)
		cur, ok := api.objs[a.GetName()]
		if !ok {
			return true, nil, apierrors.NewNotFound(lockGR, a.GetName())
		}
		if p := a.GetDeleteOptions().Preconditions; p != nil && p.UID != nil && *p.UID != cur.GetUID() {
			return true, nil, apierrors.NewConflict(lockGR, a.GetName(), fmt.Errorf("uid precondition %s is not %s", *p.UID, cur.GetUID()))
		}
		api.deletes++
		api.deleteLocked(a.GetName())
		return true, nil, nil
	}
	return true, nil, fmt.Errorf("lockAPI: %s not supported", action.GetVerb())
}

func (api *lockAPI) watch(action k8stesting.Action) (bool, watch.Interface, error) {
	api.mu.Lock()
	defer api.mu.Unlock()
	from := int64(0)
	if wa, ok := action.(k8stesting.WatchAction); ok {
		if rv := wa.GetWatchRestrictions().ResourceVersion; rv != "" {
			from, _ = strconv.ParseInt(rv, 10, 64)
		}
	}
	w := watchtest.New()
	for _, ev := range api.history {
		rv, _ := strconv.ParseInt(ev.Object.(*unstructured.Unstructured).GetResourceVersion(), 10, 64)
		if rv > from {
			w.Push(watch.Event{Type: ev.Type, Object: ev.Object.DeepCopyObject()})
		}
	}
	api.watchers = append(api.watchers, w)
	return true, w, nil
}

// lockObject builds a lock object as a test wants it, well-formed or not.
func lockObject(name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	if spec != nil {
		u.Object["spec"] = spec
	}
	u.SetAPIVersion(Group + "/" + Version)
	u.SetKind(Kind)
	u.SetName(name)
	return u
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(timeout time.Duration, cond func() (bool, string)) (bool, string) {
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok || time.Now().After(deadline) {
			return ok, why
		}
		time.Sleep(5 * time.Millisecond)
	}
}
