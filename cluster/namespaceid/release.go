package namespaceid

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"nodeflow/lib/syncloop"
)

// listPage is the page size of the releaser's consistent list of locks.
const listPage = 500

// releaser publishes this node's watermark: the ReleasedAnnotation on its
// Node, raised when no flow on the node uses the ids of the locks that
// were terminating up to the new value.
type releaser struct {
	s      *Service
	log    logrus.FieldLogger
	runner *syncloop.Runner

	mu        sync.Mutex
	published string // the watermark on the Node; "" before ensure
	ready     chan struct{}

	checks atomic.Int64 // checks run, for tests
}

func newReleaser(s *Service) (*releaser, error) {
	r := &releaser{s: s, log: s.log.WithField("part", "releaser"), ready: make(chan struct{})}
	tm := s.cfg.Timing
	check := func(ctx context.Context, full bool) error {
		err := r.check(ctx, full)
		if err != nil && ctx.Err() == nil {
			r.log.WithError(err).Warn("nsid: watermark check failed; will retry")
		}
		return err
	}
	r.runner = syncloop.NewRunner(check, syncloop.RunnerOptions{MinInterval: tm.MinInterval, RetryInterval: tm.Recheck, Clock: tm.Clock})
	s.table.afterLockChange(r.runner.Run)
	// Our Node re-created, or the annotation removed by hand: write it again.
	_, err := s.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.nodeEvent(obj) },
		UpdateFunc: func(_, obj any) { r.nodeEvent(obj) },
	})
	if err != nil {
		return nil, fmt.Errorf("nsid: node handler: %w", err)
	}
	return r, nil
}

func (r *releaser) nodeEvent(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok || n.Name != r.s.cfg.NodeName {
		return
	}
	if !r.annotationValid(n) {
		r.runner.Run()
	}
}

// annotationValid reports whether n carries a well-formed watermark.
func (r *releaser) annotationValid(n *corev1.Node) bool {
	w, ok := n.Annotations[ReleasedAnnotation]
	if !ok {
		return false
	}
	_, err := compareRV(w, w)
	return err == nil
}

func (r *releaser) current() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.published
}

func (r *releaser) run(ctx context.Context) {
	if !r.ensure(ctx) {
		return
	}
	close(r.ready)
	go r.recheckLoop(ctx)
	r.runner.Loop(ctx)
}

// ensure makes sure the Node carries a watermark before the agent installs
// flows: the Node's own, or "0" (nothing released) on a node that never
// ran nodeflow. It retries until it succeeds or ctx is done.
func (r *releaser) ensure(ctx context.Context) bool {
	clk := r.s.cfg.Timing.Clock
	wait := 100 * time.Millisecond
	for {
		err := r.ensureOnce(ctx)
		if err == nil {
			return true
		}
		r.log.WithError(err).Warn("nsid: node watermark not published yet")
		select {
		case <-ctx.Done():
			return false
		case <-clk.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

func (r *releaser) ensureOnce(ctx context.Context) error {
	n, err := r.s.kube.CoreV1().Nodes().Get(ctx, r.s.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("nsid: read node %s: %w", r.s.cfg.NodeName, err)
	}
	if r.annotationValid(n) {
		r.mu.Lock()
		r.published = n.Annotations[ReleasedAnnotation]
		r.mu.Unlock()
		return nil
	}
	if w, ok := n.Annotations[ReleasedAnnotation]; ok {
		r.log.WithField("value", w).Warn("nsid: node's watermark annotation is malformed; resetting it to 0")
	}
	return r.publish(ctx, "0")
}

func (r *releaser) publish(ctx context.Context, w string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{ReleasedAnnotation: w}}})
	if err != nil {
		return err
	}
	if _, err := r.s.kube.CoreV1().Nodes().Patch(ctx, r.s.cfg.NodeName, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager}); err != nil {
		return fmt.Errorf("nsid: node %s: publish watermark %s: %w", r.s.cfg.NodeName, w, err)
	}
	r.mu.Lock()
	r.published = w
	r.mu.Unlock()
	return nil
}

// recheckLoop asks for a check every Recheck while a terminating lock is
// above the watermark: InUse may change without a Notify.
func (r *releaser) recheckLoop(ctx context.Context) {
	clk := r.s.cfg.Timing.Clock
	for {
		select {
		case <-ctx.Done():
			return
		case <-clk.After(r.s.cfg.Timing.Recheck):
		}
		if r.s.table.pendingAbove(r.current()) {
			r.runner.Run()
		}
	}
}

// check raises the watermark as far as the node's flows allow. It reads
// the terminating locks from a consistent list, not from the informer: an
// informer may deliver two locks' changes out of resourceVersion order.
func (r *releaser) check(ctx context.Context, _ bool) error {
	defer r.checks.Add(1)
	pub := r.current()
	if n, err := r.s.nodeLister.Get(r.s.cfg.NodeName); err == nil && !r.annotationValid(n) {
		if err := r.publish(ctx, pub); err != nil {
			return err
		}
	}
	if !r.s.table.pendingAbove(pub) {
		return nil
	}
	term, listRV, err := r.listTerminating(ctx)
	if err != nil {
		return err
	}
	if len(term) == 0 {
		return nil
	}
	inUse := r.s.cfg.InUse()
	if inUse == nil {
		return nil // the agent does not know its flows yet
	}
	w := ""
	blocked := Lock{}
	for _, l := range term {
		if inUse[l.ID] || !r.s.table.releasedHere(l.UID) {
			blocked = l
			break
		}
		w = l.ResourceVersion
	}
	if blocked.Name == "" {
		w = listRV
	}
	if w == "" {
		r.log.WithFields(logrus.Fields{"id": blocked.ID, "namespace": blocked.Namespace}).Debug("oldest released id still in use here")
		return nil
	}
	if c, err := compareRV(w, pub); err != nil || c <= 0 {
		return err
	}
	if err := r.publish(ctx, w); err != nil {
		return err
	}
	r.log.WithFields(logrus.Fields{"watermark": w, "blocked_by": blocked.ID}).Debug("watermark raised")
	return nil
}

// listTerminating returns the terminating locks with an id, oldest
// resourceVersion first, and the list's resourceVersion, from one
// consistent (paged) list.
func (r *releaser) listTerminating(ctx context.Context) ([]Lock, string, error) {
	var term []Lock
	listRV := ""
	opts := metav1.ListOptions{Limit: listPage}
	for {
		page, err := r.s.dyn.List(ctx, opts)
		if err != nil {
			if apierrors.IsResourceExpired(err) && opts.Continue != "" {
				term, listRV, opts = nil, "", metav1.ListOptions{Limit: listPage}
				continue
			}
			return nil, "", fmt.Errorf("nsid: list locks: %w", err)
		}
		if listRV == "" {
			listRV = page.GetResourceVersion()
		}
		for i := range page.Items {
			l, _ := ParseLock(&page.Items[i])
			if l.Terminating && l.ID != None {
				if _, err := compareRV(l.ResourceVersion, l.ResourceVersion); err != nil {
					return nil, "", fmt.Errorf("nsid: lock %s: resourceVersion: %w", l.Name, err)
				}
				term = append(term, l)
			}
		}
		if page.GetContinue() == "" {
			break
		}
		opts.Continue = page.GetContinue()
	}
	sort.Slice(term, func(i, j int) bool {
		c, _ := compareRV(term[i].ResourceVersion, term[j].ResourceVersion)
		return c < 0
	})
	return term, listRV, nil
}
