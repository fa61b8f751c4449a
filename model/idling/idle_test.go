package idling_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"nodeflow/internal/testutil/idlingtest"
	"nodeflow/model/idling"
)

const ns = "shop"

var idleTime = time.Date(2026, 3, 4, 5, 6, 7, 890, time.FixedZone("CET", 3600))

// world builds the objects of a test cluster.
type world struct{ objs []runtime.Object }

func ctrl(apiVersion, kind, name string) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID(kind + name), Controller: ptr.To(true)}}
}

func (w *world) add(o ...runtime.Object) *world { w.objs = append(w.objs, o...); return w }

// deployment adds a Deployment with its ReplicaSet and its pods.
func (w *world) deployment(name string, replicas int32, pods ...string) *world {
	w.add(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas)}})
	rs := name + "-5d4f"
	w.add(&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: rs, OwnerReferences: ctrl("apps/v1", "Deployment", name)},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(replicas)}})
	for _, p := range pods {
		w.pod(p, ctrl("apps/v1", "ReplicaSet", rs))
	}
	return w
}

func (w *world) statefulSet(name string, replicas int32, pods ...string) *world {
	w.add(&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(replicas)}})
	for _, p := range pods {
		w.pod(p, ctrl("apps/v1", "StatefulSet", name))
	}
	return w
}

func (w *world) pod(name string, owners []metav1.OwnerReference) *world {
	return w.add(&v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, OwnerReferences: owners}})
}

// service adds a Service and one EndpointSlice; a pod name ending in "!"
// is a not-ready endpoint.
func (w *world) service(name string, annotations map[string]string, pods ...string) *world {
	w.add(&v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations}})
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-abc", Labels: map[string]string{discoveryv1.LabelServiceName: name}}}
	for _, p := range pods {
		ready := !strings.HasSuffix(p, "!")
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)},
			TargetRef: &v1.ObjectReference{Kind: "Pod", Namespace: ns, Name: strings.TrimSuffix(p, "!")}})
	}
	return w.add(es)
}

func (w *world) client() *fake.Clientset {
	cs := fake.NewClientset(w.objs...)
	idlingtest.AddScaleReactors(cs)
	return cs
}

func idle(t *testing.T, cs *fake.Clientset, dryRun bool, svcs ...string) *idling.Report {
	t.Helper()
	return idleWith(t, idling.Options{Client: cs, DryRun: dryRun}, svcs...)
}

func idleWith(t *testing.T, opts idling.Options, svcs ...string) *idling.Report {
	t.Helper()
	var names []types.NamespacedName
	for _, s := range svcs {
		names = append(names, types.NamespacedName{Namespace: ns, Name: s})
	}
	opts.Now = func() time.Time { return idleTime }
	rep, err := idling.Idle(context.Background(), opts, names)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func svcAnnotations(t *testing.T, cs *fake.Clientset, name string) map[string]string {
	t.Helper()
	s, err := cs.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s.Annotations
}

func replicas(t *testing.T, cs *fake.Clientset, kind, name string) (int32, map[string]string) {
	t.Helper()
	ctx := context.Background()
	var obj metav1.Object
	var n *int32
	var err error
	switch kind {
	case "Deployment":
		d, e := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		obj, n, err = d, d.Spec.Replicas, e
	case "StatefulSet":
		d, e := cs.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
		obj, n, err = d, d.Spec.Replicas, e
	case "ReplicationController":
		d, e := cs.CoreV1().ReplicationControllers(ns).Get(ctx, name, metav1.GetOptions{})
		obj, n, err = d, d.Spec.Replicas, e
	}
	if err != nil {
		t.Fatal(err)
	}
	return *n, obj.GetAnnotations()
}

// scaleWrites counts the writes to the scale subresource.
func scaleWrites(cs *fake.Clientset) int {
	n := 0
	for _, a := range cs.Actions() {
		if a.GetVerb() == "update" && a.GetSubresource() == "scale" {
			n++
		}
	}
	return n
}

const at = "2026-03-04T04:06:07Z" // idleTime in UTC, to the second

func TestIdleDeploymentAndStatefulSet(t *testing.T) {
	cs := (&world{}).
		deployment("web", 3, "web-1", "web-2", "web-3").
		statefulSet("db", 2, "db-0", "db-1").
		service("web", nil, "web-1", "web-2", "web-3!").
		service("db", map[string]string{"keep": "me"}, "db-0", "db-1").
		client()
	rep := idle(t, cs, false, "web", "db")
	if err := rep.Err(); err != nil {
		t.Fatal(err)
	}
	if !rep.IdledAt.Equal(idleTime.Truncate(time.Second)) || rep.IdledAt.Location() != time.UTC {
		t.Errorf("IdledAt %v", rep.IdledAt)
	}
	for svc, want := range map[string]string{
		"web": `[{"kind":"Deployment","name":"web","group":"apps","replicas":3}]`,
		"db":  `[{"kind":"StatefulSet","name":"db","group":"apps","replicas":2}]`,
	} {
		a := svcAnnotations(t, cs, svc)
		if a[idling.IdledAtAnnotation] != at || a[idling.UnidleTargetsAnnotation] != want {
			t.Errorf("service %s annotations %v, want idled-at %s and targets %s", svc, a, at, want)
		}
	}
	if a := svcAnnotations(t, cs, "db"); a["keep"] != "me" {
		t.Errorf("db's other annotation lost: %v", a)
	}
	for kind, prev := range map[string]string{"Deployment/web": "3", "StatefulSet/db": "2"} {
		k, name, _ := strings.Cut(kind, "/")
		n, a := replicas(t, cs, k, name)
		if n != 0 || a[idling.PreviousScaleAnnotation] != prev || a[idling.IdledAtAnnotation] != at {
			t.Errorf("%s: %d replicas, annotations %v; want 0, previous-scale %s", kind, n, a, prev)
		}
	}
	if len(rep.Scalables) != 2 || rep.Scalables[0].Ref.Name != "web" || rep.Scalables[0].Previous != 3 {
		t.Errorf("scalables %+v", rep.Scalables)
	}
}

// The Service is annotated before anything is scaled: a request that
// comes while the pods go away finds it idled.
func TestIdleAnnotatesServiceFirst(t *testing.T) {
	cs := (&world{}).deployment("web", 1, "web-1").service("web", nil, "web-1").client()
	var order []string
	cs.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetVerb() == "update" || a.GetVerb() == "patch" {
			order = append(order, a.GetVerb()+" "+a.GetResource().Resource+"/"+a.GetSubresource())
		}
		return false, nil, nil
	})
	if err := idle(t, cs, false, "web").Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{"update services/", "patch deployments/", "update deployments/scale"}
	if !reflect.DeepEqual(order, want) {
		t.Errorf("writes %v, want %v", order, want)
	}
}

func TestIdleReplicationController(t *testing.T) {
	w := (&world{}).service("legacy", nil, "rc-a", "rc-b")
	w.add(&v1.ReplicationController{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "legacy-1"}, Spec: v1.ReplicationControllerSpec{Replicas: ptr.To(int32(2))}})
	w.pod("rc-a", ctrl("v1", "ReplicationController", "legacy-1")).pod("rc-b", ctrl("v1", "ReplicationController", "legacy-1"))
	cs := w.client()
	if err := idle(t, cs, false, "legacy").Err(); err != nil {
		t.Fatal(err)
	}
	if got, want := svcAnnotations(t, cs, "legacy")[idling.UnidleTargetsAnnotation], `[{"kind":"ReplicationController","name":"legacy-1","replicas":2}]`; got != want {
		t.Errorf("targets %s, want %s", got, want)
	}
	if n, a := replicas(t, cs, "ReplicationController", "legacy-1"); n != 0 || a[idling.PreviousScaleAnnotation] != "2" {
		t.Errorf("rc: %d replicas, %v", n, a)
	}
}

// Pods of a ReplicationController that a DeploymentConfig controls: the
// DeploymentConfig is the scalable, scaled through the scale subresource
// the API server serves for it, as `oc idle` does; without the discovered
// kinds it is refused by name.
func TestIdleDeploymentConfig(t *testing.T) {
	w := (&world{}).service("front", nil, "dc-a", "dc-b")
	w.add(&v1.ReplicationController{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "front-3", OwnerReferences: ctrl("apps.openshift.io/v1", "DeploymentConfig", "front")},
		Spec: v1.ReplicationControllerSpec{Replicas: ptr.To(int32(2))}})
	w.pod("dc-a", ctrl("v1", "ReplicationController", "front-3")).pod("dc-b", ctrl("v1", "ReplicationController", "front-3"))

	cs := w.client()
	err := idle(t, cs, false, "front").Err()
	if !errors.Is(err, idling.ErrUnsupportedKind) || !strings.Contains(err.Error(), "DeploymentConfig.apps.openshift.io/front") {
		t.Errorf("without the discovered kinds: %v, want the DeploymentConfig refused by name", err)
	}

	cs = w.client()
	d, dyn := idlingtest.Discovered(idlingtest.DeploymentConfig(ns, "front", 2))
	if err := idleWith(t, idling.Options{Client: cs, Discovered: d}, "front").Err(); err != nil {
		t.Fatal(err)
	}
	if got, want := svcAnnotations(t, cs, "front")[idling.UnidleTargetsAnnotation], `[{"kind":"DeploymentConfig","name":"front","group":"apps.openshift.io","replicas":2}]`; got != want {
		t.Errorf("targets %s, want %s", got, want)
	}
	dc, err := dyn.Resource(idlingtest.DeploymentConfigGVR).Namespace(ns).Get(context.Background(), "front", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n, _, _ := unstructured.NestedInt64(dc.Object, "spec", "replicas")
	if a := dc.GetAnnotations(); n != 0 || a[idling.PreviousScaleAnnotation] != "2" || a[idling.IdledAtAnnotation] != at {
		t.Errorf("DeploymentConfig at %d replicas, annotations %v", n, a)
	}
	if rc, _ := cs.CoreV1().ReplicationControllers(ns).Get(context.Background(), "front-3", metav1.GetOptions{}); *rc.Spec.Replicas != 2 {
		t.Errorf("the ReplicationController was scaled itself (%d): its DeploymentConfig owns its scale", *rc.Spec.Replicas)
	}

	// A kind the API server serves without a scale subresource is refused
	// by name before anything is written.
	w = (&world{}).service("agents", nil, "ds-a")
	w.pod("ds-a", ctrl("apps/v1", "DaemonSet", "agents"))
	cs = w.client()
	err = idleWith(t, idling.Options{Client: cs, Discovered: d}, "agents").Err()
	if !errors.Is(err, idling.ErrUnsupportedKind) || !strings.Contains(err.Error(), "DaemonSet.apps/agents") || !strings.Contains(err.Error(), "no scale subresource") {
		t.Errorf("a DaemonSet's pods: %v, want it refused for having no scale subresource", err)
	}
	if a := svcAnnotations(t, cs, "agents"); a[idling.IdledAtAnnotation] != "" {
		t.Errorf("the Service was annotated: %v", a)
	}
}

// A bare ReplicaSet (no Deployment) is itself the scalable.
func TestIdleBareReplicaSet(t *testing.T) {
	w := (&world{}).service("rs", nil, "rs-x")
	w.add(&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bare"}, Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(int32(1))}})
	w.pod("rs-x", ctrl("apps/v1", "ReplicaSet", "bare"))
	cs := w.client()
	rep := idle(t, cs, false, "rs")
	if err := rep.Err(); err != nil {
		t.Fatal(err)
	}
	if got, want := svcAnnotations(t, cs, "rs")[idling.UnidleTargetsAnnotation], `[{"kind":"ReplicaSet","name":"bare","group":"apps","replicas":1}]`; got != want {
		t.Errorf("targets %s, want %s", got, want)
	}
	rs, _ := cs.AppsV1().ReplicaSets(ns).Get(context.Background(), "bare", metav1.GetOptions{})
	if *rs.Spec.Replicas != 0 {
		t.Errorf("replicaset at %d", *rs.Spec.Replicas)
	}
}

func TestIdleDryRunWritesNothing(t *testing.T) {
	cs := (&world{}).deployment("web", 2, "web-1", "web-2").service("web", nil, "web-1", "web-2").client()
	rep := idle(t, cs, true, "web")
	if err := rep.Err(); err != nil {
		t.Fatal(err)
	}
	if !rep.DryRun || len(rep.Services) != 1 || !reflect.DeepEqual(rep.Services[0].Targets,
		[]idling.Target{{Ref: idling.Ref{Kind: "Deployment", Name: "web", Group: "apps"}, Replicas: 2}}) {
		t.Errorf("report %+v", rep)
	}
	for _, a := range cs.Actions() {
		if v := a.GetVerb(); v != "get" && v != "list" {
			t.Errorf("dry run wrote: %v", a)
		}
	}
}

// Idling again merges with the recorded list: a scalable already at 0
// keeps its recorded replicas, another recorded one stays listed.
func TestIdleMergesRecordedTargets(t *testing.T) {
	recorded := `[{"kind":"Deployment","name":"web","group":"apps","replicas":4},{"kind":"StatefulSet","name":"gone","group":"apps","replicas":2}]`
	cs := (&world{}).deployment("web", 0, "web-1").
		service("web", map[string]string{idling.UnidleTargetsAnnotation: recorded, idling.IdledAtAnnotation: "2020-01-01T00:00:00Z"}, "web-1").client()
	if err := idle(t, cs, false, "web").Err(); err != nil {
		t.Fatal(err)
	}
	a := svcAnnotations(t, cs, "web")
	want := `[{"kind":"Deployment","name":"web","group":"apps","replicas":4},{"kind":"StatefulSet","name":"gone","group":"apps","replicas":2}]`
	if a[idling.UnidleTargetsAnnotation] != want || a[idling.IdledAtAnnotation] != at {
		t.Errorf("annotations %v, want targets %s", a, want)
	}
	if _, da := replicas(t, cs, "Deployment", "web"); da[idling.PreviousScaleAnnotation] != "4" {
		t.Errorf("previous-scale %q, want the recorded 4", da[idling.PreviousScaleAnnotation])
	}
}

func TestIdleErrors(t *testing.T) {
	w := (&world{}).
		deployment("web", 1, "web-1").service("web", nil, "web-1").
		pod("lonely", nil).service("bare", nil, "lonely").
		pod("ds-1", ctrl("apps/v1", "DaemonSet", "agent")).service("daemon", nil, "ds-1").
		service("empty", nil, "web-1!").
		service("idled", map[string]string{idling.IdledAtAnnotation: "2020-01-01T00:00:00Z"}).
		deployment("other", 2, "other-1").service("malformed", map[string]string{idling.UnidleTargetsAnnotation: `[{"kind":`}, "other-1")
	w.pod("dc-pod", ctrl("v1", "ReplicationController", "app-3"))
	w.add(&v1.ReplicationController{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-3", OwnerReferences: ctrl("apps.openshift.io/v1", "DeploymentConfig", "app")}})
	w.service("dc", nil, "dc-pod")
	cs := w.client()
	rep := idle(t, cs, false, "bare", "daemon", "empty", "idled", "missing", "malformed", "dc", "web")
	want := map[string]string{
		"bare":      "service shop/bare: endpointslice bare-abc: pod shop/lonely has no controller",
		"daemon":    "pod shop/ds-1: its controller DaemonSet.apps/agent: not a Deployment",
		"empty":     "service shop/empty: no ready endpoint backed by a pod of a scalable",
		"idled":     "service shop/idled: already idled",
		"missing":   `service shop/missing: services "missing" not found`,
		"malformed": "service shop/malformed: annotation " + idling.UnidleTargetsAnnotation + ": not a JSON list",
		"dc":        "pod shop/dc-pod: its controller DeploymentConfig.apps.openshift.io/app: not a Deployment",
	}
	for _, r := range rep.Services {
		w, bad := want[r.Service.Name]
		switch {
		case !bad && r.Err != nil:
			t.Errorf("%s: %v", r.Service, r.Err)
		case bad && (r.Err == nil || !strings.Contains(r.Err.Error(), w)):
			t.Errorf("%s: error %v, want %q", r.Service, r.Err, w)
		}
	}
	var ae *idling.AnnotationError
	if !errors.As(rep.Err(), &ae) {
		t.Errorf("the malformed annotation's error is not an AnnotationError: %v", rep.Err())
	}
	// The good one is idled, the malformed one untouched.
	if n, _ := replicas(t, cs, "Deployment", "web"); n != 0 {
		t.Errorf("web at %d replicas", n)
	}
	if n, _ := replicas(t, cs, "Deployment", "other"); n != 2 {
		t.Errorf("other (behind the malformed annotation) at %d replicas, want 2", n)
	}
	if a := svcAnnotations(t, cs, "malformed"); a[idling.UnidleTargetsAnnotation] != `[{"kind":` || a[idling.IdledAtAnnotation] != "" {
		t.Errorf("malformed service changed: %v", a)
	}
	if scaleWrites(cs) != 1 {
		t.Errorf("%d scale writes, want 1", scaleWrites(cs))
	}
}

// Two Services in front of the same Deployment: both list it, it is
// scaled once.
func TestIdleSharedScalable(t *testing.T) {
	cs := (&world{}).deployment("web", 2, "web-1", "web-2").service("web", nil, "web-1").service("web-admin", nil, "web-2").client()
	rep := idle(t, cs, false, "web", "web-admin")
	if err := rep.Err(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"web", "web-admin"} {
		if got := svcAnnotations(t, cs, s)[idling.UnidleTargetsAnnotation]; got != `[{"kind":"Deployment","name":"web","group":"apps","replicas":2}]` {
			t.Errorf("%s: targets %s", s, got)
		}
	}
	if len(rep.Scalables) != 1 || scaleWrites(cs) != 1 {
		t.Errorf("scalables %+v, %d scale writes; want one", rep.Scalables, scaleWrites(cs))
	}
}

// A scale write that fails is reported; the Service still lists the
// scalable, so it is woken up with the rest.
func TestIdleScaleFailure(t *testing.T) {
	cs := (&world{}).deployment("web", 2, "web-1").service("web", nil, "web-1").client()
	cs.PrependReactor("update", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "scale" {
			return true, nil, errors.New("etcd is on fire")
		}
		return false, nil, nil
	})
	rep := idle(t, cs, false, "web")
	if err := rep.Err(); err == nil || !strings.Contains(err.Error(), "shop/Deployment.apps/web: update scale to 0: etcd is on fire") {
		t.Errorf("error %v", err)
	}
	if svcAnnotations(t, cs, "web")[idling.IdledAtAnnotation] != at {
		t.Error("service not annotated")
	}
}
