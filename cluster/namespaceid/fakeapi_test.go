package namespaceid

import (
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"nodeflow/internal/testutil/fakeapi"
)

// lockAPI is the API server's NamespaceID storage, as a fake API (which
// see for what it does as the API server does) seen by the tests of
// lock objects.
type lockAPI struct{ *fakeapi.API }

func newLockAPI() (*lockAPI, *dynamicfake.FakeDynamicClient) {
	api := &lockAPI{fakeapi.New(fakeapi.Resource{GVR: GVR, Kind: Kind})}
	return api, api.Client()
}

// seed stores an object as it is, as if created by someone else.
func (api *lockAPI) seed(u *unstructured.Unstructured) { api.Seed(Resource, u) }

// get returns a copy of the object, nil when there is none.
func (api *lockAPI) get(name string) *unstructured.Unstructured { return api.Get(Resource, "", name) }

// list returns copies of every object.
func (api *lockAPI) list() []*unstructured.Unstructured { return api.List(Resource) }

// mutations returns the writes of locks that took effect, by verb.
func (api *lockAPI) mutations() (creates, updates, deletes int) {
	return api.Applied("create " + Resource), api.Applied("update " + Resource), api.Applied("delete " + Resource)
}

// collectGarbage does what the garbage collector does once a namespace is
// gone: it deletes the locks that the namespace owns.
func (api *lockAPI) collectGarbage(owner types.UID) { api.CollectGarbage(owner) }

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
