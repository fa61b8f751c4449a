package idlingcontroller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"nodeflow/cluster/workers"
	"nodeflow/model/idling"
)

// Defaults of Options.
const (
	DefaultWorkers      = 2
	DefaultMaxRetries   = 10
	DefaultReadyTimeout = 2 * time.Minute
)

// The polling of a woken Service's EndpointSlices for a ready endpoint.
const (
	firstReadyPoll = 200 * time.Millisecond
	maxReadyPoll   = 2 * time.Second
)

// Reasons of the events the controller emits on Services.
const (
	ReasonUnidled           = "Unidled"                 // Normal: a target scaled back up
	ReasonMalformedIdledAt  = "MalformedIdledAt"        // Warning
	ReasonMalformedTargets  = "MalformedUnidleTargets"  // Warning
	ReasonTargetNotFound    = "UnidleTargetNotFound"    // Warning: dropped from the list
	ReasonTargetUnsupported = "UnidleTargetUnsupported" // Warning: kept in the list
	ReasonFailedUnidling    = "FailedUnidling"          // Warning: retries exhausted
)

// component is the source of the controller's events and logs.
const component = "nodeflow-unidler"

// Options configure a Controller.
type Options struct {
	// Client reads and writes the cluster.
	Client kubernetes.Interface
	// Discovered scales the targets of kinds beyond Deployment,
	// ReplicaSet, ReplicationController and StatefulSet (a
	// DeploymentConfig recorded by `oc idle`); nil refuses them.
	Discovered *idling.Discovered
	// Recorder emits the events on Services; nil makes one that writes
	// core/v1 Events as component nodeflow-unidler.
	Recorder record.EventRecorder
	// Registerer gets the metrics; nil registers them nowhere.
	Registerer prometheus.Registerer
	// Log is the logger (default: logrus's standard logger).
	Log logrus.FieldLogger
	// Workers is the number of Services handled at once (DefaultWorkers).
	Workers int
	// MaxRetries bounds the retries of a Service whose targets fail
	// (DefaultMaxRetries); then a FailedUnidling event is emitted.
	MaxRetries int
	// RateLimiter spaces the retries (default: client-go's controller
	// rate limiter, per-item exponential from 5 ms to 1000 s, and 10/s
	// overall).
	RateLimiter workqueue.TypedRateLimiter[types.NamespacedName]
	// ReadyTimeout bounds the wait for a ready endpoint of a woken
	// Service before its annotations are removed (DefaultReadyTimeout).
	ReadyTimeout time.Duration
	// CoreEvents and EventsAPI choose the APIs watched: core/v1 Events
	// and events.k8s.io/v1 Events. Both false means both.
	CoreEvents, EventsAPI bool
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Controller wakes idled Services up when NeedPods events ask for them.
type Controller struct {
	opts   Options
	log    logrus.FieldLogger
	scaler *idling.Scaler
	queue  workqueue.TypedRateLimitingInterface[types.NamespacedName]
	fired  lastFired
	m      *metrics
	rec    record.EventRecorder

	mu     sync.Mutex
	waking map[types.NamespacedName]*wake
}

// wake is a Service whose targets are all up, waiting for a ready
// endpoint before its annotations are removed.
type wake struct {
	idledAt string // the idling it wakes from
	since   time.Time
	polls   int
	scaled  bool // this controller scaled a target up
}

// New returns a Controller; Run runs it.
func New(opts Options) *Controller {
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.MaxRetries <= 0 {
		opts.MaxRetries = DefaultMaxRetries
	}
	if opts.RateLimiter == nil {
		opts.RateLimiter = workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName]()
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = DefaultReadyTimeout
	}
	if !opts.CoreEvents && !opts.EventsAPI {
		opts.CoreEvents, opts.EventsAPI = true, true
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = logrus.StandardLogger()
	}
	return &Controller{
		opts:   opts,
		log:    opts.Log.WithField("component", component),
		scaler: idling.NewScaler(opts.Client, opts.Discovered),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(opts.RateLimiter,
			workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "unidler"}),
		fired:  lastFired{items: map[types.NamespacedName]needPods{}},
		m:      newMetrics(opts.Registerer),
		rec:    opts.Recorder,
		waking: map[types.NamespacedName]*wake{},
	}
}

// Run watches NeedPods events and wakes their Services up until ctx ends.
// A Controller runs once.
func (c *Controller) Run(ctx context.Context) error {
	if c.rec == nil {
		b := record.NewBroadcaster(record.WithContext(ctx))
		b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.opts.Client.CoreV1().Events("")})
		defer b.Shutdown()
		c.rec = b.NewRecorder(scheme.Scheme, v1.EventSource{Component: component})
	}
	c.m.leader.Set(1)
	defer c.m.leader.Set(0)
	defer c.queue.ShutDown()

	var synced []cache.InformerSynced
	for _, inf := range c.informers() {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    c.offer,
			UpdateFunc: func(_, obj any) { c.offer(obj) },
			DeleteFunc: c.forget,
		}); err != nil {
			return fmt.Errorf("unidler: event handler: %w", err)
		}
		go inf.RunWithContext(ctx)
		synced = append(synced, inf.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil // ctx ended
	}
	c.log.Info("watching NeedPods events")
	workers.Run(ctx, c.opts.Workers, c.queue, c.next)
	return nil
}

func (c *Controller) informers() []cache.SharedIndexInformer {
	var out []cache.SharedIndexInformer
	if c.opts.CoreEvents {
		out = append(out, selectedInformer[*v1.EventList](c.opts.Client, c.opts.Client.CoreV1().Events(metav1.NamespaceAll), coreEventSelector, &v1.Event{}))
	}
	if c.opts.EventsAPI {
		out = append(out, selectedInformer[*eventsv1.EventList](c.opts.Client, c.opts.Client.EventsV1().Events(metav1.NamespaceAll), eventsEventSelector, &eventsv1.Event{}))
	}
	return out
}

// eventLister lists and watches one API's Events.
type eventLister[L runtime.Object] interface {
	List(ctx context.Context, o metav1.ListOptions) (L, error)
	Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error)
}

// selectedInformer is an informer of the objects like obj that evs lists
// and watches with the field selector.
func selectedInformer[L runtime.Object](client kubernetes.Interface, evs eventLister[L], selector string, obj runtime.Object) cache.SharedIndexInformer {
	return cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return evs.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return evs.Watch(ctx, o)
		},
	}, client), obj, 0, cache.Indexers{})
}

// offer queues the Service of a NeedPods event newer than the last one
// seen for it.
func (c *Controller) offer(obj any) {
	e, ok := readEvent(obj)
	if !ok || !c.fired.addIfNewer(e) {
		return
	}
	c.m.events.Inc()
	c.log.WithField("service", e.service.String()).WithField("at", e.at).Debug("NeedPods")
	c.queue.Add(e.service)
}

func (c *Controller) forget(obj any) {
	if e, ok := readEvent(obj); ok {
		c.fired.forget(e)
	}
}

// next handles one queued Service; false when the queue is shut down.
func (c *Controller) next(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	log := c.log.WithField("service", key.String())
	after, err := c.sync(ctx, key, c.fired.get(key))
	switch {
	case err == nil:
		c.queue.Forget(key)
		if after > 0 {
			c.queue.AddAfter(key, after)
		}
	case ctx.Err() != nil:
	case c.queue.NumRequeues(key) < c.opts.MaxRetries:
		log.WithError(err).Info("not fully woken up; will retry")
		c.queue.AddRateLimited(key)
	default:
		log.WithError(err).Error("giving up waking up")
		c.queue.Forget(key)
		c.clearWake(key)
		c.warn(key, ReasonFailedUnidling, "giving up after %d retries: %v", c.opts.MaxRetries, err)
	}
	return true
}

// warn emits a Warning event on the Service key.
func (c *Controller) warn(key types.NamespacedName, reason, format string, args ...any) {
	c.rec.Eventf(serviceRef(key), v1.EventTypeWarning, reason, format, args...)
}

// serviceRef is an object reference the recorder can use without the
// Service object (which may be gone).
func serviceRef(key types.NamespacedName) *v1.ObjectReference {
	return &v1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: key.Namespace, Name: key.Name}
}

// sync wakes the Service key up for an event observed at fired. It
// returns when to look again (0: done), or an error to retry.
func (c *Controller) sync(ctx context.Context, key types.NamespacedName, fired time.Time) (time.Duration, error) {
	log := c.log.WithField("service", key.String())
	svc, err := c.opts.Client.CoreV1().Services(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		c.clearWake(key)
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("service %s: %w", key, err)
	}
	at, idled := svc.Annotations[idling.IdledAtAnnotation]
	if !idled {
		log.Debug("not idled; ignoring NeedPods")
		c.clearWake(key)
		return 0, nil
	}
	idledAt, err := time.Parse(time.RFC3339, at)
	if err != nil {
		c.m.failed.WithLabelValues(causeMalformed).Inc()
		c.warn(key, ReasonMalformedIdledAt, "service %s: annotation %s: %q is not an RFC 3339 time", key, idling.IdledAtAnnotation, at)
		return 0, nil
	}
	if fired.Before(idledAt) {
		log.WithField("event", fired).WithField("idledAt", idledAt).Debug("NeedPods older than the idling; ignoring")
		return 0, nil
	}
	var targets []idling.Target
	raw, listed := svc.Annotations[idling.UnidleTargetsAnnotation]
	if listed {
		if targets, err = idling.ParseTargets(key.String(), raw); err != nil {
			c.m.failed.WithLabelValues(causeMalformed).Inc()
			c.warn(key, ReasonMalformedTargets, "%v", err)
			return 0, nil
		}
	}

	remaining, scaled, err := c.wakeTargets(ctx, key, targets)
	if len(remaining) > 0 {
		if s := idling.FormatTargets(remaining); s != raw {
			svc.Annotations[idling.UnidleTargetsAnnotation] = s
			if _, uerr := c.opts.Client.CoreV1().Services(key.Namespace).Update(ctx, svc, metav1.UpdateOptions{}); uerr != nil {
				err = errors.Join(err, fmt.Errorf("service %s: keep the failed targets: %w", key, uerr))
			}
		}
		return 0, err
	}

	// Every target is up: remove the annotations once the Service has a
	// ready endpoint, so that no agent rejects what it holds for it.
	if len(targets) > 0 {
		w := c.waitFor(key, at, scaled)
		ready, rerr := c.hasReadyEndpoint(ctx, key)
		if rerr != nil {
			log.WithError(rerr).Debug("endpoints not read")
		}
		waited := c.opts.Now().Sub(w.since)
		if !ready && waited < c.opts.ReadyTimeout {
			return min(firstReadyPoll<<min(w.polls, 8), maxReadyPoll), nil
		}
		if ready && w.scaled {
			c.m.ready.Observe(waited.Seconds())
		}
		if !ready {
			log.WithField("waited", waited).Warn("no ready endpoint; removing the idling annotations anyway")
		}
	}
	delete(svc.Annotations, idling.IdledAtAnnotation)
	delete(svc.Annotations, idling.UnidleTargetsAnnotation)
	if _, err := c.opts.Client.CoreV1().Services(key.Namespace).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		return 0, fmt.Errorf("service %s: remove the idling annotations: %w", key, err)
	}
	c.clearWake(key)
	log.Info("woken up; idling annotations removed")
	return 0, nil
}

// wakeTargets scales every target still at 0 back up. It returns the
// targets to keep listed (those that failed, and those it cannot scale),
// whether it scaled one, and the errors worth a retry.
func (c *Controller) wakeTargets(ctx context.Context, key types.NamespacedName, targets []idling.Target) ([]idling.Target, bool, error) {
	var remaining []idling.Target
	var errs []error
	scaled := false
	zero := int32(0)
	for _, t := range targets {
		log := c.log.WithField("service", key.String()).WithField("target", t.Ref.String())
		if err := c.scaler.Check(t.Ref); err != nil {
			c.m.failed.WithLabelValues(causeUnsupported).Inc()
			c.warn(key, ReasonTargetUnsupported, "service %s: annotation %s: %v; left in the list", key, idling.UnidleTargetsAnnotation, err)
			remaining = append(remaining, t)
			continue
		}
		replicas := max(t.Replicas, 1)
		set, err := c.scaler.SetReplicas(ctx, key.Namespace, t.Ref, replicas, &zero)
		switch {
		case apierrors.IsNotFound(err):
			c.m.failed.WithLabelValues(causeNotFound).Inc()
			c.warn(key, ReasonTargetNotFound, "service %s: annotation %s: %s does not exist; dropped from the list", key, idling.UnidleTargetsAnnotation, t.Ref)
		case err != nil:
			c.m.failed.WithLabelValues(causeError).Inc()
			log.WithError(err).Warn("cannot scale up")
			remaining = append(remaining, t)
			errs = append(errs, err)
		case set:
			scaled = true
			c.m.unidled.Inc()
			log.WithField("replicas", replicas).Info("scaled up")
			c.rec.Eventf(serviceRef(key), v1.EventTypeNormal, ReasonUnidled, "scaled %s up from 0 to %d replicas", t.Ref, replicas)
			if err := c.scaler.Annotate(ctx, key.Namespace, t.Ref, map[string]*string{idling.IdledAtAnnotation: nil, idling.PreviousScaleAnnotation: nil}); err != nil {
				log.WithError(err).Warn("cannot remove the idling annotations of the target")
			}
		default:
			log.Debug("already up")
		}
	}
	return remaining, scaled, errors.Join(errs...)
}

// waitFor counts a look at key's wait for a ready endpoint, started now
// for the idling at idledAt if it was not, and returns the wait as it was
// before this look.
func (c *Controller) waitFor(key types.NamespacedName, idledAt string, scaled bool) wake {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.waking[key]
	if w == nil || w.idledAt != idledAt {
		w = &wake{idledAt: idledAt, since: c.opts.Now()}
		c.waking[key] = w
	}
	w.scaled = w.scaled || scaled
	out := *w
	w.polls++
	return out
}

func (c *Controller) clearWake(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.waking, key)
}

// hasReadyEndpoint says whether an EndpointSlice of the Service has a
// ready endpoint (a nil condition counts as ready, as the API says).
func (c *Controller) hasReadyEndpoint(ctx context.Context, key types.NamespacedName) (bool, error) {
	list, err := c.opts.Client.DiscoveryV1().EndpointSlices(key.Namespace).List(ctx,
		metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + key.Name})
	if err != nil {
		return false, fmt.Errorf("service %s: list endpointslices: %w", key, err)
	}
	for _, es := range list.Items {
		for _, ep := range es.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				return true, nil
			}
		}
	}
	return false, nil
}
