package namespaceid

import (
	"sort"
	"sync"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// Table answers which id a namespace has, on every node, from an informer
// on the NamespaceID locks and one on the Namespaces. A namespace's id is
// the lowest id among the live (not terminating) well-formed locks that
// name the namespace's current UID. It satisfies the agent's
// feature.NamespaceIDs.
type Table struct {
	log logrus.FieldLogger

	mu    sync.Mutex
	locks map[string]tableLock // by lock name
	// byNS holds the names of the well-formed locks of each namespace name.
	byNS  map[string]map[string]struct{}
	nsUID map[string]types.UID
	// acked holds the terminating locks (by object UID) whose change
	// subscribers have been called: only those count as released here.
	acked map[types.UID]bool
	subs  []func(namespace string)
	hooks []func()

	synced []cache.InformerSynced
}

type tableLock struct {
	Lock
	err error // nil when well-formed
}

func newTable(log logrus.FieldLogger, locks, namespaces cache.SharedIndexInformer) (*Table, error) {
	t := &Table{
		log:   log,
		locks: map[string]tableLock{},
		byNS:  map[string]map[string]struct{}{},
		nsUID: map[string]types.UID{},
		acked: map[types.UID]bool{},
	}
	lockReg, err := locks.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { t.lockEvent(obj, false) },
		UpdateFunc: func(_, obj any) { t.lockEvent(obj, false) },
		DeleteFunc: func(obj any) { t.lockEvent(obj, true) },
	})
	if err != nil {
		return nil, err
	}
	nsReg, err := namespaces.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { t.namespaceEvent(obj, false) },
		UpdateFunc: func(_, obj any) { t.namespaceEvent(obj, false) },
		DeleteFunc: func(obj any) { t.namespaceEvent(obj, true) },
	})
	if err != nil {
		return nil, err
	}
	// The table is built by the handlers, which run behind the caches:
	// a cache that has listed everything has not yet handed every object
	// to them. The registrations say when they have.
	t.synced = []cache.InformerSynced{lockReg.HasSynced, nsReg.HasSynced}
	return t, nil
}

// Lookup returns namespace's id; false when it has none (yet). It never
// returns the id of a terminating lock.
func (t *Table) Lookup(namespace string) (uint32, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	id := t.lookupLocked(namespace)
	return id, id != None
}

// OnChange registers f to be called with the name of a namespace whose
// Lookup answer changed (assigned, moved to another id, or released). f is
// called from the informers' goroutines without locks held and must not
// block for long. Register before the informers start.
func (t *Table) OnChange(f func(namespace string)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.subs = append(t.subs, f)
}

// HasSynced reports whether both informers have listed everything and
// the table has taken in all of it.
func (t *Table) HasSynced() bool {
	for _, s := range t.synced {
		if !s() {
			return false
		}
	}
	return true
}

// Terminating returns the ids in quarantine: those of the locks that are
// being deleted, sorted.
func (t *Table) Terminating() []uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []uint32
	for _, l := range t.locks {
		if l.Terminating && l.ID != None {
			out = append(out, l.ID)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Malformed returns the problems of the malformed lock objects, one line
// per object, sorted. Malformed locks give no namespace an id.
func (t *Table) Malformed() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, l := range t.locks {
		if l.err != nil {
			out = append(out, l.err.Error())
		}
	}
	sort.Strings(out)
	return out
}

func (t *Table) lookupLocked(namespace string) uint32 {
	uid, ok := t.nsUID[namespace]
	if !ok {
		return None
	}
	best := None
	for name := range t.byNS[namespace] {
		l := t.locks[name]
		if !l.Terminating && l.NamespaceUID == uid && (best == None || l.ID < best) {
			best = l.ID
		}
	}
	return best
}

// lockEvent applies a lock's new state (or its deletion).
func (t *Table) lockEvent(obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, deleted = d.Obj, true
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	l, err := ParseLock(u)

	t.mu.Lock()
	prev, had := t.locks[l.Name]
	affected := map[string]uint32{}
	if had && prev.err == nil {
		affected[prev.Namespace] = None
	}
	if !deleted && err == nil {
		affected[l.Namespace] = None
	}
	for ns := range affected {
		affected[ns] = t.lookupLocked(ns)
	}
	if had {
		if set := t.byNS[prev.Namespace]; set != nil {
			delete(set, prev.Name)
			if len(set) == 0 {
				delete(t.byNS, prev.Namespace)
			}
		}
		if deleted || prev.UID != l.UID {
			delete(t.acked, prev.UID)
		}
	}
	if deleted {
		delete(t.locks, l.Name)
	} else {
		t.locks[l.Name] = tableLock{Lock: l, err: err}
		if err == nil {
			if t.byNS[l.Namespace] == nil {
				t.byNS[l.Namespace] = map[string]struct{}{}
			}
			t.byNS[l.Namespace][l.Name] = struct{}{}
		}
		if err != nil && (!had || prev.err == nil || prev.err.Error() != err.Error()) {
			t.log.WithError(err).WithField("lock", l.Name).Warn("malformed NamespaceID lock ignored")
		}
	}
	var changed []string
	for ns, before := range affected {
		if t.lookupLocked(ns) != before {
			changed = append(changed, ns)
		}
	}
	newlyTerminating := !deleted && l.Terminating && !t.acked[l.UID]
	subs := t.subs
	hooks := t.hooks
	t.mu.Unlock()

	sort.Strings(changed)
	for _, ns := range changed {
		for _, f := range subs {
			f(ns)
		}
	}
	if newlyTerminating {
		// Only now, after the subscribers have heard that the namespace's
		// answer changed, may the releaser count the lock as released here.
		t.mu.Lock()
		if cur, ok := t.locks[l.Name]; ok && cur.UID == l.UID {
			t.acked[l.UID] = true
		}
		t.mu.Unlock()
	}
	for _, h := range hooks {
		h()
	}
}

func (t *Table) namespaceEvent(obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, deleted = d.Obj, true
	}
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return
	}
	t.mu.Lock()
	before := t.lookupLocked(ns.Name)
	if deleted {
		delete(t.nsUID, ns.Name)
	} else {
		t.nsUID[ns.Name] = ns.UID
	}
	changed := t.lookupLocked(ns.Name) != before
	subs := t.subs
	t.mu.Unlock()
	if changed {
		for _, f := range subs {
			f(ns.Name)
		}
	}
}

// afterLockChange registers an internal hook called after every lock event.
func (t *Table) afterLockChange(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.hooks = append(t.hooks, f)
}

// releasedHere reports whether this node's Table has seen the lock object
// uid terminating and told its subscribers.
func (t *Table) releasedHere(uid types.UID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.acked[uid]
}

// pendingAbove reports whether a terminating lock with an id has a
// resourceVersion above the watermark w (or one that cannot be compared).
func (t *Table) pendingAbove(w string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, l := range t.locks {
		if !l.Terminating || l.ID == None {
			continue
		}
		if c, err := compareRV(l.ResourceVersion, w); err != nil || c > 0 {
			return true
		}
	}
	return false
}
