package idlingcontroller

import (
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"nodeflow/model/idling"
)

// Server-side filters of the two event informers: what the API can
// select of a NeedPods event about a Service.
const (
	coreEventSelector   = "reason=" + idling.NeedPodsReason + ",involvedObject.kind=Service"
	eventsEventSelector = "reason=" + idling.NeedPodsReason + ",regarding.kind=Service"
)

// needPods is what the controller keeps of a NeedPods event.
type needPods struct {
	service types.NamespacedName
	at      time.Time // when it was last observed
	// uid and count tell a new occurrence within the second of the last
	// one from a replay: core events' timestamps have whole seconds, and
	// a recorder counts a repeated event on the same object.
	uid   types.UID
	count int32
}

// newerThan says whether e is a later occurrence than last: observed
// later, or in the same second as another event object or as a higher
// count of the same one.
func (e needPods) newerThan(last needPods) bool {
	switch {
	case e.at.After(last.at):
		return true
	case e.at.Equal(last.at):
		return e.uid != last.uid || e.count > last.count
	}
	return false
}

// coreNeedPods reads a core/v1 Event; ok is false for any other event.
func coreNeedPods(e *v1.Event) (needPods, bool) {
	ref := e.InvolvedObject
	if e.Reason != idling.NeedPodsReason || !isService(ref, e.Namespace) {
		return needPods{}, false
	}
	at, count := latest(e.LastTimestamp.Time, e.EventTime.Time, e.FirstTimestamp.Time), e.Count
	if e.Series != nil {
		at, count = latest(at, e.Series.LastObservedTime.Time), max(count, e.Series.Count)
	}
	return needPods{service: serviceOf(ref, e.Namespace), at: orCreation(at, e.CreationTimestamp.Time), uid: e.UID, count: count}, true
}

// eventsNeedPods reads an events.k8s.io/v1 Event, the same object seen
// through the other API: it gives the same time as coreNeedPods.
func eventsNeedPods(e *eventsv1.Event) (needPods, bool) {
	ref := e.Regarding
	if e.Reason != idling.NeedPodsReason || !isService(ref, e.Namespace) {
		return needPods{}, false
	}
	at, count := latest(e.DeprecatedLastTimestamp.Time, e.EventTime.Time, e.DeprecatedFirstTimestamp.Time), e.DeprecatedCount
	if e.Series != nil {
		at, count = latest(at, e.Series.LastObservedTime.Time), max(count, e.Series.Count)
	}
	return needPods{service: serviceOf(ref, e.Namespace), at: orCreation(at, e.CreationTimestamp.Time), uid: e.UID, count: count}, true
}

// isService reports whether an Event in namespace eventNS is about a
// Service of that same namespace. An Event about another namespace's
// Service is ignored: whoever may write Events in one namespace must not
// wake up the Services of another.
func isService(ref v1.ObjectReference, eventNS string) bool {
	return ref.Kind == "Service" && (ref.APIVersion == "" || ref.APIVersion == "v1") && ref.Name != "" &&
		(ref.Namespace == "" || ref.Namespace == eventNS)
}

func serviceOf(ref v1.ObjectReference, eventNS string) types.NamespacedName {
	ns := ref.Namespace
	if ns == "" {
		ns = eventNS
	}
	return types.NamespacedName{Namespace: ns, Name: ref.Name}
}

func latest(ts ...time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if t.After(out) {
			out = t
		}
	}
	return out
}

func orCreation(at, created time.Time) time.Time {
	if at.IsZero() {
		return created
	}
	return at
}

// readEvent reads a NeedPods event of either API, or the last state of a
// deleted one.
func readEvent(obj any) (needPods, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	switch e := obj.(type) {
	case *v1.Event:
		return coreNeedPods(e)
	case *eventsv1.Event:
		return eventsNeedPods(e)
	}
	return needPods{}, false
}

// lastFired is the last NeedPods event seen per Service.
type lastFired struct {
	mu    sync.Mutex
	items map[types.NamespacedName]needPods
}

// addIfNewer records e and says whether it is newer than the last one
// seen for its Service.
func (l *lastFired) addIfNewer(e needPods) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if last, ok := l.items[e.service]; ok && !e.newerThan(last) {
		return false
	}
	l.items[e.service] = e
	return true
}

func (l *lastFired) get(s types.NamespacedName) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.items[s].at
}

// forget drops the Service's entry when its last event is deleted.
func (l *lastFired) forget(e needPods) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if last, ok := l.items[e.service]; ok && !last.at.After(e.at) {
		delete(l.items, e.service)
	}
}
