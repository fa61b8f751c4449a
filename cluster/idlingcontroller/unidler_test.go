package idlingcontroller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"nodeflow/internal/testutil/idlingtest"
	"nodeflow/model/idling"
)

const ns = "shop"

// idledAt is when the test Services were idled.
var idledAt = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// env is a fake cluster with a running Controller.
type env struct {
	t   *testing.T
	cs  *fake.Clientset
	c   *Controller
	rec *record.FakeRecorder
}

func idledService(name, targets string) *v1.Service {
	a := map[string]string{idling.IdledAtAnnotation: idledAt.Format(time.RFC3339), "keep": "me"}
	if targets != "" {
		a[idling.UnidleTargetsAnnotation] = targets
	}
	return &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: a}}
}

func idledDeployment(name string) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Annotations: map[string]string{idling.IdledAtAnnotation: idledAt.Format(time.RFC3339), idling.PreviousScaleAnnotation: "3"}},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(0))}}
}

// readySlice is an EndpointSlice of the Service with one endpoint.
func readySlice(svc string, ready bool) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svc + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}}}}
}

// coreEvent is a NeedPods event as the agent writes it, at t.
func coreEvent(name, svc string, t time.Time) *v1.Event {
	return &v1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		InvolvedObject: v1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: ns, Name: svc},
		Reason:         idling.NeedPodsReason, Message: fmt.Sprintf("The service-port %s/%s:http needs pods.", ns, svc), Type: v1.EventTypeNormal,
		FirstTimestamp: metav1.NewTime(t), LastTimestamp: metav1.NewTime(t), Count: 1}
}

// start runs a Controller over objs until the test ends; it returns once
// both event informers watch.
func start(t *testing.T, opts Options, objs ...runtime.Object) *env {
	t.Helper()
	cs := fake.NewClientset(objs...)
	idlingtest.AddScaleReactors(cs)
	var mu sync.Mutex
	watching := 0
	watched := make(chan struct{})
	cs.PrependWatchReactor("events", func(k8stesting.Action) (bool, watch.Interface, error) {
		mu.Lock()
		defer mu.Unlock()
		if watching++; watching == 2 {
			close(watched)
		}
		return false, nil, nil
	})
	rec := record.NewFakeRecorder(100)
	opts.Client, opts.Recorder = cs, rec
	if opts.RateLimiter == nil {
		opts.RateLimiter = workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](time.Millisecond, 20*time.Millisecond)
	}
	log := logrus.New()
	log.SetLevel(logrus.DebugLevel)
	opts.Log = log
	c := New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-watched:
	case <-time.After(10 * time.Second):
		t.Fatal("the informers do not watch")
	}
	return &env{t: t, cs: cs, c: c, rec: rec}
}

// eventually polls cond until it is nil, for up to 10 s.
func (e *env) eventually(what string, cond func() error) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
}

func (e *env) service(name string) *v1.Service {
	e.t.Helper()
	s, err := e.cs.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func (e *env) deployment(name string) *appsv1.Deployment {
	e.t.Helper()
	d, err := e.cs.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

func (e *env) emit(ev runtime.Object) {
	e.t.Helper()
	var err error
	switch ev := ev.(type) {
	case *v1.Event:
		_, err = e.cs.CoreV1().Events(ev.Namespace).Create(context.Background(), ev, metav1.CreateOptions{})
	case *eventsv1.Event:
		_, err = e.cs.EventsV1().Events(ev.Namespace).Create(context.Background(), ev, metav1.CreateOptions{})
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

// awake waits until svc carries no idling annotation any more.
func (e *env) awake(svc string) {
	e.t.Helper()
	e.eventually(svc+" woken up", func() error {
		a := e.service(svc).Annotations
		if _, ok := a[idling.IdledAtAnnotation]; ok {
			return fmt.Errorf("annotations %v", a)
		}
		if _, ok := a[idling.UnidleTargetsAnnotation]; ok {
			return fmt.Errorf("annotations %v", a)
		}
		if a["keep"] != "me" {
			return fmt.Errorf("other annotation lost: %v", a)
		}
		return nil
	})
}

// events drains the recorded events.
func (e *env) events() []string {
	var out []string
	for {
		select {
		case s := <-e.rec.Events:
			out = append(out, s)
		default:
			return out
		}
	}
}

func (e *env) wantEvent(prefix string, parts ...string) {
	e.t.Helper()
	evs := e.events()
	for _, s := range evs {
		if !strings.HasPrefix(s, prefix) {
			continue
		}
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(s, p)
		}
		if ok {
			return
		}
	}
	e.t.Errorf("no event %q with %q among %q", prefix, parts, evs)
}

const webTargets = `[{"kind":"Deployment","name":"web","group":"apps","replicas":3}]`

func TestUnidleOnNeedPods(t *testing.T) {
	e := start(t, Options{}, idledService("web", webTargets), idledDeployment("web"), readySlice("web", true))
	e.emit(coreEvent("web.1", "web", idledAt.Add(time.Second)))
	e.awake("web")
	d := e.deployment("web")
	if *d.Spec.Replicas != 3 {
		t.Errorf("web at %d replicas, want 3", *d.Spec.Replicas)
	}
	if len(d.Annotations) != 0 {
		t.Errorf("deployment keeps %v", d.Annotations)
	}
	e.wantEvent("Normal Unidled", "Deployment.apps/web up from 0 to 3 replicas")
	if n := testutil.ToFloat64(e.c.m.unidled); n != 1 {
		t.Errorf("unidled_total %v", n)
	}
	if n := testutil.ToFloat64(e.c.m.events); n != 1 {
		t.Errorf("needpods_events_total %v", n)
	}
}

// The same event seen through the events.k8s.io API works alone, and
// counts once with its core view.
// A Service idled again and asked for within the second of its last wake-up
// is woken again: the agent's recorder counts the repeated event on the
// same object, and core events' timestamps have whole seconds.
func TestUnidleTwiceInOneSecond(t *testing.T) {
	e := start(t, Options{}, idledService("web", webTargets), idledDeployment("web"), readySlice("web", true))
	ev := coreEvent("web.1", "web", idledAt)
	e.emit(ev)
	e.awake("web")
	ctx := context.Background()
	if _, err := e.cs.AppsV1().Deployments(ns).Update(ctx, idledDeployment("web"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := e.service("web")
	svc.Annotations = idledService("web", webTargets).Annotations
	if _, err := e.cs.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ev.Count = 2
	if _, err := e.cs.CoreV1().Events(ns).Update(ctx, ev, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.awake("web")
	if r := *e.deployment("web").Spec.Replicas; r != 3 {
		t.Errorf("web at %d replicas after the second NeedPods, want 3", r)
	}
}

// A target recorded by `oc idle` as a DeploymentConfig is scaled back up
// through the scale subresource the API server serves for it.
func TestUnidleDeploymentConfig(t *testing.T) {
	dc := idlingtest.DeploymentConfig(ns, "front", 0)
	dc.SetAnnotations(map[string]string{idling.IdledAtAnnotation: idledAt.Format(time.RFC3339), idling.PreviousScaleAnnotation: "2"})
	d, dyn := idlingtest.Discovered(dc)
	e := start(t, Options{Discovered: d}, idledService("front", `[{"kind":"DeploymentConfig","name":"front","group":"apps.openshift.io","replicas":2}]`),
		readySlice("front", true))
	e.emit(coreEvent("front.1", "front", idledAt.Add(time.Second)))
	e.awake("front")
	got, err := dyn.Resource(idlingtest.DeploymentConfigGVR).Namespace(ns).Get(context.Background(), "front", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n, _, _ := unstructured.NestedInt64(got.Object, "spec", "replicas")
	if a := got.GetAnnotations(); n != 2 || len(a) != 0 {
		t.Errorf("DeploymentConfig at %d replicas, annotations %v; want 2 and none", n, a)
	}
}

// One NeedPods event is one object that the API server serves through
// both Event APIs (the same uid; core's count is events.k8s.io's
// deprecatedCount): seen through both, it counts and wakes once.
func TestUnidleEventsAPI(t *testing.T) {
	e := start(t, Options{}, idledService("web", webTargets), idledDeployment("web"), readySlice("web", true))
	at := idledAt.Add(2 * time.Second)
	const uid = "9f0c3d4e-web-2"
	e.emit(&eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web.2", UID: uid}, EventTime: metav1.NewMicroTime(at),
		Regarding: v1.ObjectReference{Kind: "Service", Namespace: ns, Name: "web"}, Reason: idling.NeedPodsReason, DeprecatedCount: 1,
		ReportingController: "nodeflow", ReportingInstance: "node1", Action: "Unidle", Type: v1.EventTypeNormal, Note: "needs pods"})
	e.awake("web")
	core := coreEvent("web.2", "web", time.Time{})
	core.UID = uid
	core.FirstTimestamp, core.LastTimestamp, core.EventTime = metav1.Time{}, metav1.Time{}, metav1.NewMicroTime(at)
	e.emit(core)
	// A later event through the core API, about another Service: once it
	// is seen, the core view of web.2 was seen before it (one informer
	// hands its events over in order).
	e.emit(coreEvent("api.1", "api", at.Add(time.Second)))
	e.eventually("the core views seen", func() error {
		if e.c.fired.get(types.NamespacedName{Namespace: ns, Name: "api"}).IsZero() {
			return errors.New("not recorded")
		}
		return nil
	})
	if got := e.c.fired.get(types.NamespacedName{Namespace: ns, Name: "web"}); !got.Equal(at) {
		t.Errorf("web's NeedPods recorded at %v, want %v", got, at)
	}
	if n := testutil.ToFloat64(e.c.m.events); n != 2 {
		t.Errorf("needpods_events_total %v, want 2: web's event once though seen through two APIs, and api's", n)
	}
}

// An event older than the idling, a Service not idled, and an event about
// something else are ignored. One worker takes the Services in order, so
// once the last one is woken up the others were looked at.
func TestUnidleIgnores(t *testing.T) {
	plain := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"}}
	e := start(t, Options{Workers: 1},
		idledService("old", `[{"kind":"Deployment","name":"old","group":"apps","replicas":3}]`), idledDeployment("old"),
		plain, idledService("web", webTargets), idledDeployment("web"), readySlice("web", true))
	e.emit(coreEvent("old.1", "old", idledAt.Add(-time.Second)))
	e.emit(coreEvent("plain.1", "plain", idledAt.Add(time.Second)))
	pod := coreEvent("pod.1", "old", idledAt.Add(time.Second))
	pod.InvolvedObject.Kind = "Pod"
	e.emit(pod)
	other := coreEvent("other.1", "old", idledAt.Add(time.Second))
	other.Reason = "Scheduled"
	e.emit(other)
	e.eventually("two events seen", func() error {
		if n := testutil.ToFloat64(e.c.m.events); n != 2 {
			return fmt.Errorf("%v events", n)
		}
		return nil
	})
	e.emit(coreEvent("web.1", "web", idledAt.Add(time.Second)))
	e.awake("web")
	if r := *e.deployment("old").Spec.Replicas; r != 0 {
		t.Errorf("old woken up (%d replicas) by an event older than its idling", r)
	}
	if _, ok := e.service("old").Annotations[idling.IdledAtAnnotation]; !ok {
		t.Error("old lost its annotation")
	}
}

// Only an event newer than the last one seen queues the Service: observed
// later, or within the same second as another event object or as a higher
// count of the same one (core events have whole seconds); a replay of the
// same object and count does not.
func TestLastFired(t *testing.T) {
	l := lastFired{items: map[types.NamespacedName]needPods{}}
	s := types.NamespacedName{Namespace: ns, Name: "web"}
	for i, c := range []struct {
		at    time.Time
		uid   types.UID
		count int32
		want  bool
	}{
		{idledAt, "a", 1, true},
		{idledAt, "a", 1, false},                   // replayed
		{idledAt, "a", 2, true},                    // counted again in the same second
		{idledAt, "b", 1, true},                    // another node's event in the same second
		{idledAt.Add(-time.Second), "c", 5, false}, // older
		{idledAt.Add(time.Second), "a", 3, true},
	} {
		if got := l.addIfNewer(needPods{service: s, at: c.at, uid: c.uid, count: c.count}); got != c.want {
			t.Errorf("step %d: addIfNewer(%v, %s, %d) = %v", i, c.at, c.uid, c.count, got)
		}
	}
	l.forget(needPods{service: s, at: idledAt}) // an older event deleted: kept
	if l.get(s).IsZero() {
		t.Error("forgot on the deletion of an older event")
	}
	l.forget(needPods{service: s, at: idledAt.Add(time.Second)})
	if !l.get(s).IsZero() {
		t.Error("kept after its last event was deleted")
	}
}

func TestEventTimes(t *testing.T) {
	at := idledAt.Add(3 * time.Second)
	series := coreEvent("x", "web", idledAt)
	series.Series = &v1.EventSeries{Count: 4, LastObservedTime: metav1.NewMicroTime(at)}
	if e, ok := coreNeedPods(series); !ok || !e.at.Equal(at) || e.service.Name != "web" {
		t.Errorf("series: %+v %v", e, ok)
	}
	bare := coreEvent("x", "web", time.Time{})
	bare.FirstTimestamp, bare.LastTimestamp = metav1.Time{}, metav1.Time{}
	bare.CreationTimestamp = metav1.NewTime(at)
	bare.InvolvedObject.Namespace = ""
	if e, ok := coreNeedPods(bare); !ok || !e.at.Equal(at) || e.service.Namespace != ns {
		t.Errorf("no timestamps: %+v %v", e, ok)
	}
	ev := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns}, Reason: idling.NeedPodsReason, Regarding: v1.ObjectReference{Kind: "Service", APIVersion: "apps/v1", Name: "web"}}
	if _, ok := eventsNeedPods(ev); ok {
		t.Error("accepted a Service of another API group")
	}
	// An Event in one namespace about another namespace's Service: whoever
	// may write Events in the first must not wake the second.
	other := coreEvent("x", "web", at)
	other.InvolvedObject.Namespace = "someone-else"
	if e, ok := coreNeedPods(other); ok {
		t.Errorf("an Event of %s woke %s", other.Namespace, e.service)
	}
	otherEv := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns}, Reason: idling.NeedPodsReason,
		Regarding: v1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: "someone-else", Name: "web"}}
	if e, ok := eventsNeedPods(otherEv); ok {
		t.Errorf("an events.k8s.io Event of %s woke %s", ns, e.service)
	}
}

func TestUnidleMalformedTargets(t *testing.T) {
	e := start(t, Options{}, idledService("bad", `[{"kind":"Deployment","name":`), idledService("web", webTargets), idledDeployment("web"), readySlice("web", true))
	e.emit(coreEvent("bad.1", "bad", idledAt.Add(time.Second)))
	e.emit(coreEvent("web.1", "web", idledAt.Add(time.Second)))
	e.awake("web") // the rest keeps working
	e.eventually("malformed counted", func() error {
		if n := testutil.ToFloat64(e.c.m.failed.WithLabelValues(causeMalformed)); n != 1 {
			return fmt.Errorf("failed{malformed} %v", n)
		}
		return nil
	})
	e.wantEvent("Warning "+ReasonMalformedTargets, "service shop/bad: annotation "+idling.UnidleTargetsAnnotation+": not a JSON list")
	if a := e.service("bad").Annotations; a[idling.UnidleTargetsAnnotation] != `[{"kind":"Deployment","name":` {
		t.Errorf("malformed annotation changed: %v", a)
	}
}

// A missing target is dropped with a Warning; a target of a kind it
// cannot scale is kept with a Warning; the others are woken up.
func TestUnidleMissingAndUnsupportedTargets(t *testing.T) {
	targets := `[{"kind":"Deployment","name":"web","group":"apps","replicas":3},{"kind":"Deployment","name":"gone","group":"apps","replicas":1},` +
		`{"kind":"DeploymentConfig","name":"app","group":"apps.openshift.io","replicas":2}]`
	e := start(t, Options{}, idledService("web", targets), idledDeployment("web"), readySlice("web", true))
	e.emit(coreEvent("web.1", "web", idledAt.Add(time.Second)))
	e.eventually("list reduced to the DeploymentConfig", func() error {
		if got, want := e.service("web").Annotations[idling.UnidleTargetsAnnotation], `[{"kind":"DeploymentConfig","name":"app","group":"apps.openshift.io","replicas":2}]`; got != want {
			return fmt.Errorf("targets %s", got)
		}
		return nil
	})
	if r := *e.deployment("web").Spec.Replicas; r != 3 {
		t.Errorf("web at %d", r)
	}
	if _, ok := e.service("web").Annotations[idling.IdledAtAnnotation]; !ok {
		t.Error("idled-at removed while a target remains")
	}
	evs := strings.Join(e.events(), "\n")
	for _, want := range []string{
		"Warning " + ReasonTargetNotFound + " service shop/web: annotation " + idling.UnidleTargetsAnnotation + ": Deployment.apps/gone does not exist",
		"Warning " + ReasonTargetUnsupported + " service shop/web: annotation " + idling.UnidleTargetsAnnotation + ": DeploymentConfig.apps.openshift.io/app",
	} {
		if !strings.Contains(evs, want) {
			t.Errorf("no event %q in\n%s", want, evs)
		}
	}
}

// A target that fails stays listed and is retried; when it finally scales
// the annotations go.
func TestUnidleRetriesFailedTarget(t *testing.T) {
	db := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}, Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(int32(0))}}
	targets := `[{"kind":"Deployment","name":"web","group":"apps","replicas":3},{"kind":"StatefulSet","name":"db","group":"apps","replicas":2}]`
	e := start(t, Options{}, idledService("web", targets), idledDeployment("web"), db, readySlice("web", true))
	var mu sync.Mutex
	failures := 3
	e.cs.PrependReactor("update", "statefulsets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if a.GetSubresource() == "scale" && failures > 0 {
			failures--
			return true, nil, errors.New("apiserver overloaded")
		}
		return false, nil, nil
	})
	e.emit(coreEvent("web.1", "web", idledAt.Add(time.Second)))
	e.awake("web")
	s, _ := e.cs.AppsV1().StatefulSets(ns).Get(context.Background(), "db", metav1.GetOptions{})
	if *s.Spec.Replicas != 2 || *e.deployment("web").Spec.Replicas != 3 {
		t.Errorf("db at %d, web at %d", *s.Spec.Replicas, *e.deployment("web").Spec.Replicas)
	}
	if n := testutil.ToFloat64(e.c.m.failed.WithLabelValues(causeError)); n != 3 {
		t.Errorf("failed{error} %v, want 3", n)
	}
	// Between the failures the list held only the failing target.
	kept := 0
	for _, a := range e.cs.Actions() {
		if u, ok := a.(k8stesting.UpdateAction); ok && a.GetResource().Resource == "services" {
			if u.GetObject().(*v1.Service).Annotations[idling.UnidleTargetsAnnotation] == `[{"kind":"StatefulSet","name":"db","group":"apps","replicas":2}]` {
				kept++
			}
		}
	}
	if kept != 1 {
		t.Errorf("the failed target was written back %d times, want once", kept)
	}
}

// The annotations stay until the Service has a ready endpoint, so that an
// agent holding its packets does not reject them.
func TestUnidleWaitsForReadyEndpoint(t *testing.T) {
	e := start(t, Options{}, idledService("web", webTargets), idledDeployment("web"), readySlice("web", false))
	e.emit(coreEvent("web.1", "web", idledAt.Add(time.Second)))
	e.eventually("scaled up", func() error {
		if r := *e.deployment("web").Spec.Replicas; r != 3 {
			return fmt.Errorf("%d replicas", r)
		}
		return nil
	})
	// Polled at least twice without a ready endpoint: still idled.
	e.eventually("polled", func() error {
		e.c.mu.Lock()
		defer e.c.mu.Unlock()
		if w := e.c.waking[types.NamespacedName{Namespace: ns, Name: "web"}]; w == nil || w.polls < 2 {
			return errors.New("not polled twice")
		}
		return nil
	})
	if _, ok := e.service("web").Annotations[idling.IdledAtAnnotation]; !ok {
		t.Fatal("annotations removed before any endpoint was ready")
	}
	if _, err := e.cs.DiscoveryV1().EndpointSlices(ns).Update(context.Background(), readySlice("web", true), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.awake("web")
	if n := testutil.CollectAndCount(e.c.m.ready); n != 1 {
		t.Errorf("ready_seconds has %d series", n)
	}
}

func TestUnidleReadyTimeout(t *testing.T) {
	e := start(t, Options{ReadyTimeout: 300 * time.Millisecond}, idledService("web", webTargets), idledDeployment("web"))
	e.emit(coreEvent("web.1", "web", idledAt.Add(time.Second)))
	e.awake("web")
}

// Two candidates: one leads at a time, and the other takes over when the
// leader stops.
func TestRunLeader(t *testing.T) {
	cs := fake.NewClientset()
	var mu sync.Mutex
	leading, most := 0, 0
	started := make(chan string, 4)
	run := func(id string) func(ctx context.Context) {
		return func(ctx context.Context) {
			mu.Lock()
			leading++
			most = max(most, leading)
			mu.Unlock()
			started <- id
			<-ctx.Done()
			mu.Lock()
			leading--
			mu.Unlock()
		}
	}
	el := Election{Namespace: "kube-system", LeaseDuration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 50 * time.Millisecond}
	cancels := map[string]context.CancelFunc{}
	done := map[string]chan error{}
	for _, id := range []string{"a", "b"} {
		ctx, cancel := context.WithCancel(context.Background())
		ch := make(chan error, 1)
		cancels[id], done[id] = cancel, ch
		e := el
		e.Identity = id
		go func() { ch <- RunLeader(ctx, cs, e, logrus.New(), run(id)) }()
	}
	var first string
	select {
	case first = <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("no leader")
	}
	lease, err := cs.CoordinationV1().Leases("kube-system").Get(context.Background(), DefaultLeaseName, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != first {
		t.Fatalf("lease %+v, %v; want held by %s", lease, err, first)
	}
	cancels[first]()
	if err := <-done[first]; err != nil {
		t.Errorf("stopped leader: %v", err)
	}
	select {
	case second := <-started:
		if second == first {
			t.Errorf("%s led twice", first)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no takeover")
	}
	for id, c := range cancels {
		c()
		if id != first {
			if err := <-done[id]; err != nil {
				t.Errorf("%s: %v", id, err)
			}
		}
	}
	if most != 1 {
		t.Errorf("%d leaders at once", most)
	}
}
