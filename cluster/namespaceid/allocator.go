package namespaceid

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"nodeflow/cluster/leader"
)

// fieldManager is nsid's field manager on the objects it writes.
const fieldManager = "nodeflow-nsid"

// Worker counts of the allocator's two queues.
const (
	namespaceWorkers = 4
	lockWorkers      = 2
	// maxCreateTries bounds the creates of one namespace sync that find
	// their candidate taken by a lock the cache does not show yet.
	maxCreateTries = 64
)

// allocator gives every namespace a lock and releases the locks nobody
// needs. Only the elected allocator runs (run); it is safe, though
// wasteful, when two run.
type allocator struct {
	s   *Service
	log logrus.FieldLogger

	mu sync.Mutex
	// claims are the ids this allocator created a lock for (or found
	// taken) and does not see in its cache yet, with the namespace UID
	// holding them; uid "" is a create in flight or another's lock.
	claims      map[uint32]claim
	orphanSince map[types.UID]time.Time

	leading atomic.Bool
	runMu   sync.Mutex // one term at a time
	cur     *term      // the running term, under mu

	// Counters, for tests and logs: syncs done and in progress.
	nsSyncs, lockSyncs, busy atomic.Int64
}

type claim struct {
	uid types.UID
	at  time.Time
}

// term is one leadership term's queues.
type term struct {
	nsQ, lockQ workqueue.TypedRateLimitingInterface[string]
}

func newAllocator(s *Service) *allocator {
	return &allocator{s: s, log: s.log.WithField("part", "allocator"), claims: map[uint32]claim{}, orphanSince: map[types.UID]time.Time{}}
}

func newQueue(name string) workqueue.TypedRateLimitingInterface[string] {
	// Retries back off per item, from 20 ms to 30 s; the clients' QPS
	// bounds the total.
	rl := workqueue.NewTypedItemExponentialFailureRateLimiter[string](20*time.Millisecond, 30*time.Second)
	return workqueue.NewTypedRateLimitingQueueWithConfig(rl, workqueue.TypedRateLimitingQueueConfig[string]{Name: name})
}

// runAllocator runs the allocator while this node is the elected one, and
// stands for election again when it loses, until ctx is done.
func (s *Service) runAllocator(ctx context.Context) {
	e := s.cfg.Election
	if e.Disabled {
		s.alloc.run(ctx)
		return
	}
	for ctx.Err() == nil {
		err := leader.Run(ctx, s.kube, leader.Election{
			Namespace: e.Namespace, Name: e.Name, Identity: e.Identity, Work: "allocating namespace ids",
			LeaseDuration: e.LeaseDuration, RenewDeadline: e.RenewDeadline, RetryPeriod: e.RetryPeriod,
		}, s.alloc.log, s.alloc.run)
		if err != nil && !errors.Is(err, leader.ErrLost) {
			s.alloc.log.WithError(err).Error("nsid: leader election")
			return
		}
	}
}

// run is one term: it allocates and releases until ctx is done.
func (a *allocator) run(ctx context.Context) {
	a.runMu.Lock()
	defer a.runMu.Unlock()
	a.leading.Store(true)
	defer a.leading.Store(false)
	t := &term{nsQ: newQueue("nsid-namespaces"), lockQ: newQueue("nsid-locks")}
	defer t.nsQ.ShutDown()
	defer t.lockQ.ShutDown()
	a.mu.Lock()
	a.cur = t
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.cur = nil
		a.mu.Unlock()
	}()

	regs, err := a.addHandlers(t)
	defer func() {
		for _, r := range regs {
			_ = r.inf.RemoveEventHandler(r.reg)
		}
	}()
	if err != nil {
		a.log.WithError(err).Error("nsid: allocator handlers")
		return
	}
	if !cache.WaitForCacheSync(ctx.Done(), a.s.locks.HasSynced, a.s.namespaces.HasSynced, a.s.nodes.HasSynced) {
		return
	}
	var wg sync.WaitGroup
	for range namespaceWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.work(ctx, t.nsQ, func(k string) error { a.nsSyncs.Add(1); return a.syncNamespace(ctx, t, k) })
		}()
	}
	for range lockWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.work(ctx, t.lockQ, func(k string) error { a.lockSyncs.Add(1); return a.syncLock(ctx, t, k) })
		}()
	}
	<-ctx.Done()
	t.nsQ.ShutDown()
	t.lockQ.ShutDown()
	wg.Wait()
}

type registration struct {
	inf cache.SharedIndexInformer
	reg cache.ResourceEventHandlerRegistration
}

// addHandlers feeds the term's queues. Handlers added to running informers
// get every existing object as an Add, so a new term starts with a full
// pass.
func (a *allocator) addHandlers(t *term) ([]registration, error) {
	var regs []registration
	add := func(inf cache.SharedIndexInformer, h cache.ResourceEventHandler) error {
		r, err := inf.AddEventHandler(h)
		if err == nil {
			regs = append(regs, registration{inf, r})
		}
		return err
	}
	nsEvent := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if ns, ok := obj.(*corev1.Namespace); ok {
			t.nsQ.Add(ns.Name)
			// Its locks may be orphans now.
			objs, _ := a.s.locks.GetIndexer().ByIndex(byNamespaceUID, string(ns.UID))
			for _, o := range objs {
				if u, ok := o.(*unstructured.Unstructured); ok {
					t.lockQ.Add(u.GetName())
				}
			}
		}
	}
	err := add(a.s.namespaces, cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if ns, ok := obj.(*corev1.Namespace); ok {
				t.nsQ.Add(ns.Name)
			}
		},
		UpdateFunc: func(_, obj any) {
			if ns, ok := obj.(*corev1.Namespace); ok {
				t.nsQ.Add(ns.Name)
			}
		},
		DeleteFunc: nsEvent,
	})
	if err != nil {
		return regs, err
	}
	lockEvent := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		t.lockQ.Add(u.GetName())
		if id, err := ParseID(u.GetName()); err == nil {
			a.mu.Lock()
			delete(a.claims, id)
			a.mu.Unlock()
		}
		if ns, _, _ := unstructured.NestedString(u.Object, "spec", "namespace"); ns != "" {
			t.nsQ.Add(ns)
		}
	}
	err = add(a.s.locks, cache.ResourceEventHandlerFuncs{
		AddFunc:    lockEvent,
		UpdateFunc: func(_, obj any) { lockEvent(obj) },
		DeleteFunc: lockEvent,
	})
	if err != nil {
		return regs, err
	}
	// A watermark that moves, or a node that goes, may free terminating
	// locks.
	err = add(a.s.nodes, cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*corev1.Node)
			c, ok2 := cur.(*corev1.Node)
			if ok1 && ok2 && o.Annotations[ReleasedAnnotation] != c.Annotations[ReleasedAnnotation] {
				a.enqueueTerminating(t)
			}
		},
		DeleteFunc: func(any) { a.enqueueTerminating(t) },
	})
	return regs, err
}

func (a *allocator) enqueueTerminating(t *term) {
	for _, o := range a.s.locks.GetStore().List() {
		if u, ok := o.(*unstructured.Unstructured); ok && u.GetDeletionTimestamp() != nil && slices.Contains(u.GetFinalizers(), Finalizer) {
			t.lockQ.Add(u.GetName())
		}
	}
}

func (a *allocator) work(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], sync func(string) error) {
	for {
		key, quit := q.Get()
		if quit {
			return
		}
		a.busy.Add(1)
		err := sync(key)
		switch {
		case err == nil:
			q.Forget(key)
		case ctx.Err() != nil:
			q.Forget(key)
		default:
			a.log.WithError(err).WithField("key", key).WithField("retries", q.NumRequeues(key)).Warn("nsid: will retry")
			q.AddRateLimited(key)
		}
		q.Done(key)
		a.busy.Add(-1)
	}
}

// idle reports whether a term runs with nothing queued or in progress
// (items waiting for AddAfter are not counted).
func (a *allocator) idle() bool {
	a.mu.Lock()
	t := a.cur
	a.mu.Unlock()
	return t != nil && t.nsQ.Len() == 0 && t.lockQ.Len() == 0 && a.busy.Load() == 0
}

// syncNamespace makes sure that a live namespace holds one live lock.
func (a *allocator) syncNamespace(ctx context.Context, t *term, name string) error {
	ns, err := a.s.nsLister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("nsid: namespace %s: %w", name, err)
	}
	if ns.DeletionTimestamp != nil {
		return nil // going away: its pods are, too
	}
	if live := a.liveLocks(ns.UID); len(live) > 0 {
		for _, extra := range live[1:] {
			t.lockQ.Add(FormatID(extra)) // released by syncLock
		}
		return nil
	}
	from := uint32(0)
	for range maxCreateTries {
		id, attempt, err := Choose(name, from, a.taken)
		if err != nil {
			return fmt.Errorf("nsid: namespace %s: %w", name, err)
		}
		from = attempt + 1
		a.setClaim(id, "")
		_, err = a.s.dyn.Create(ctx, newLockObject(id, ns), metav1.CreateOptions{FieldManager: fieldManager})
		if err == nil {
			a.setClaim(id, ns.UID)
			a.log.WithFields(logrus.Fields{"namespace": name, "id": id, "probes": attempt + 1}).Info("namespace id allocated")
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			a.dropClaim(id)
			return fmt.Errorf("nsid: namespace %s: create lock %d: %w", name, id, err)
		}
		// Taken by a lock the cache does not show yet: ours from an
		// earlier pass or another allocator's, or someone else's.
		cur, gerr := a.s.dyn.Get(ctx, FormatID(id), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(gerr):
			a.dropClaim(id) // gone again; the next pass may take it
		case gerr != nil:
			a.dropClaim(id)
			return fmt.Errorf("nsid: namespace %s: read lock %d: %w", name, id, gerr)
		default:
			l, perr := ParseLock(cur)
			if perr == nil && !l.Terminating && l.NamespaceUID == ns.UID {
				a.setClaim(id, ns.UID)
				return nil
			}
			a.setClaim(id, "") // someone else's
		}
	}
	return fmt.Errorf("nsid: namespace %s: %d candidate ids taken by locks not in the cache yet", name, maxCreateTries)
}

// taken reports whether id has a lock in the cache or a fresh claim.
func (a *allocator) taken(id uint32) bool {
	if _, ok, _ := a.s.locks.GetStore().GetByKey(FormatID(id)); ok {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.claims[id]
	if ok && a.now().Sub(c.at) > a.s.cfg.Timing.ClaimTTL {
		delete(a.claims, id)
		return false
	}
	return ok
}

func (a *allocator) now() time.Time { return a.s.cfg.Timing.Clock.Now() }

func (a *allocator) setClaim(id uint32, uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.claims[id] = claim{uid: uid, at: a.now()}
}

func (a *allocator) dropClaim(id uint32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.claims, id)
}

// liveLocks returns the ids of the live, well-formed locks held by the
// namespace uid, in the cache or freshly claimed, lowest first.
func (a *allocator) liveLocks(uid types.UID) []uint32 {
	var ids []uint32
	objs, _ := a.s.locks.GetIndexer().ByIndex(byNamespaceUID, string(uid))
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		if l, err := ParseLock(u); err == nil && !l.Terminating {
			ids = append(ids, l.ID)
		}
	}
	a.mu.Lock()
	for id, c := range a.claims {
		if c.uid != uid || a.now().Sub(c.at) > a.s.cfg.Timing.ClaimTTL {
			continue
		}
		if _, inCache, _ := a.s.locks.GetStore().GetByKey(FormatID(id)); inCache {
			delete(a.claims, id) // the cache knows better now
			continue
		}
		ids = append(ids, id)
	}
	a.mu.Unlock()
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// syncLock releases a live lock nobody should hold (a namespace's extra
// lock, or one whose namespace is gone), and lets a terminating lock go
// once every node has released its id.
func (a *allocator) syncLock(ctx context.Context, t *term, name string) error {
	obj, ok, err := a.s.locks.GetStore().GetByKey(name)
	if err != nil || !ok {
		return err
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	l, perr := ParseLock(u)
	log := a.log.WithField("lock", name)
	if l.Terminating {
		a.mu.Lock()
		delete(a.orphanSince, l.UID)
		a.mu.Unlock()
		if !l.Finalizer {
			return nil
		}
		if l.ID != None {
			if blocking := a.blockingNodes(l.ResourceVersion); len(blocking) > 0 {
				log.WithField("nodes", blocking).Debug("released id still quarantined")
				return nil // the nodes' watermark updates requeue it
			}
		}
		return a.removeFinalizer(ctx, u, log)
	}
	if perr != nil {
		return nil // reported by the Table; left as it is, its id taken
	}
	ns, err := a.s.nsLister.Get(l.Namespace)
	if err == nil && ns.UID == l.NamespaceUID {
		a.mu.Lock()
		delete(a.orphanSince, l.UID)
		a.mu.Unlock()
		if live := a.liveLocks(l.NamespaceUID); len(live) > 0 && live[0] < l.ID {
			return a.release(ctx, l, fmt.Sprintf("namespace %s holds the lower id %d", l.Namespace, live[0]), log)
		}
		return nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	// The namespace is not in the cache: usually the garbage collector
	// deletes the lock soon. Wait, then ask the API server, not the cache.
	a.mu.Lock()
	since, seen := a.orphanSince[l.UID]
	if !seen {
		since = a.now()
		a.orphanSince[l.UID] = since
	}
	a.mu.Unlock()
	if wait := a.s.cfg.Timing.OrphanGrace - a.now().Sub(since); wait > 0 {
		t.lockQ.AddAfter(name, wait)
		return nil
	}
	live, err := a.s.kube.CoreV1().Namespaces().Get(ctx, l.Namespace, metav1.GetOptions{})
	switch {
	case err == nil && live.UID == l.NamespaceUID:
		return nil // the cache is behind
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("nsid: lock %s: read namespace %s: %w", name, l.Namespace, err)
	}
	return a.release(ctx, l, fmt.Sprintf("namespace %s (uid %s) is gone", l.Namespace, l.NamespaceUID), log)
}

// blockingNodes returns the nodes running nodeflow whose watermark is below
// rv. Nodes without the annotation never ran nodeflow's agent.
func (a *allocator) blockingNodes(rv string) []string {
	nodes, _ := a.s.nodeLister.List(labels.Everything())
	var out []string
	for _, n := range nodes {
		w, ok := n.Annotations[ReleasedAnnotation]
		if !ok {
			continue
		}
		if c, err := compareRV(w, rv); err != nil || c < 0 {
			out = append(out, n.Name)
		}
	}
	sort.Strings(out)
	return out
}

// release deletes a live lock. The Finalizer keeps it (and its id) in
// quarantine until every node has released the id.
func (a *allocator) release(ctx context.Context, l Lock, why string, log logrus.FieldLogger) error {
	uid := l.UID
	err := a.s.dyn.Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("nsid: release lock %s: %w", l.Name, err)
	}
	log.WithFields(logrus.Fields{"namespace": l.Namespace, "why": why}).Info("namespace id released (quarantined until every node drops it)")
	return nil
}

func (a *allocator) removeFinalizer(ctx context.Context, u *unstructured.Unstructured, log logrus.FieldLogger) error {
	c := u.DeepCopy()
	c.SetFinalizers(slices.DeleteFunc(c.GetFinalizers(), func(f string) bool { return f == Finalizer }))
	_, err := a.s.dyn.Update(ctx, c, metav1.UpdateOptions{FieldManager: fieldManager})
	switch {
	case err == nil:
		log.Info("namespace id free again: every node released it")
		return nil
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		return errors.New("nsid: lock " + u.GetName() + " changed while its finalizer was removed")
	}
	return fmt.Errorf("nsid: lock %s: remove finalizer: %w", u.GetName(), err)
}
