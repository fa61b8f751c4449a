package vnetipam

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"nodeflow/cluster/workers"
	"nodeflow/model/vnet"
)

// Defaults of Options.
const (
	DefaultWorkers  = 16
	DefaultResync   = 10 * time.Minute
	DefaultClaimTTL = 2 * time.Minute
)

// maxPicks bounds the addresses one sync tries to lock when each turns
// out locked by a lock the cache does not show yet.
const maxPicks = 16

// component is the source of the controller's events, and its field
// manager.
const component = "nodeflow-ipam"

// Options configure a Controller.
type Options struct {
	// Dynamic reads and writes Subnets, NetworkAttachments and IPLocks.
	// Required.
	Dynamic dynamic.Interface
	// Kube reads Nodes (and writes Events when Recorder is nil). Required.
	Kube kubernetes.Interface
	// Recorder emits the events on attachments and Subnets; nil makes one
	// that writes core/v1 Events as component nodeflow-ipam.
	Recorder record.EventRecorder
	// Registerer gets the metrics; nil registers them nowhere.
	Registerer prometheus.Registerer
	// Log is the logger (default: logrus's standard logger).
	Log logrus.FieldLogger
	// Workers is the number of objects synced at once (DefaultWorkers).
	Workers int
	// Resync is how often every attachment and Subnet is synced again
	// from the caches (DefaultResync; negative disables).
	Resync time.Duration
	// ClaimTTL bounds how long the controller trusts its record of a lock
	// it created, or found taken, that its cache does not show yet
	// (DefaultClaimTTL).
	ClaimTTL time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Controller assigns addresses to NetworkAttachments. Run runs it; one
// active Controller in a cluster is enough (RunLeader), and two are safe.
type Controller struct {
	opts Options
	log  logrus.FieldLogger
	rec  record.EventRecorder
	m    *metrics

	subnets, attachments, locks cache.SharedIndexInformer
	nodeFactory                 informers.SharedInformerFactory
	nodes                       cache.SharedIndexInformer

	queue workqueue.TypedRateLimitingInterface[key]
	state *state

	ran atomic.Bool
}

// kind is what a queue key names.
type kind uint8

const (
	attachmentKind kind = iota
	subnetKind
)

// key is a queue item: an attachment or a Subnet, by namespace and name.
// Everything about an attachment, its locks included, is done under its
// key, so one controller never works on one attachment twice at once.
type key struct {
	kind            kind
	namespace, name string
}

func (k key) String() string {
	if k.kind == subnetKind {
		return "Subnet " + k.namespace + "/" + k.name
	}
	return "NetworkAttachment " + k.namespace + "/" + k.name
}

// Informer indexes.
const (
	byHolder = "holder" // locks: namespace/name of the attachment holding them
	bySubnet = "subnet" // attachments: namespace/spec.subnet
	byNode   = "node"   // attachments: spec.node
	byVNI    = "vni"    // Subnets: spec.vni
)

// New returns a Controller. It makes its informers and does no I/O.
func New(opts Options) (*Controller, error) {
	if opts.Dynamic == nil || opts.Kube == nil {
		return nil, errors.New("ipam: options: Dynamic and Kube are required")
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.Resync == 0 {
		opts.Resync = DefaultResync
	} else if opts.Resync < 0 {
		opts.Resync = 0
	}
	if opts.ClaimTTL <= 0 {
		opts.ClaimTTL = DefaultClaimTTL
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = logrus.StandardLogger()
	}
	c := &Controller{
		opts:  opts,
		log:   opts.Log.WithField("component", component),
		rec:   opts.Recorder,
		m:     newMetrics(opts.Registerer),
		state: newState(opts.ClaimTTL),
		// Retries back off per key, from 5 ms to 30 s; the client's QPS
		// bounds the total (client-go's default controller limiter would
		// also hold every retry to 10 per second, which thousands of
		// attachments created at once, or two controllers racing, exceed).
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[key](5*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[key]{Name: "ipam"}),
	}
	var err error
	if c.subnets, err = newInformer(opts.Dynamic, vnet.SubnetGVR, opts.Resync, cache.Indexers{byVNI: indexSubnetVNI}); err != nil {
		return nil, err
	}
	if c.attachments, err = newInformer(opts.Dynamic, vnet.NetworkAttachmentGVR, opts.Resync,
		cache.Indexers{bySubnet: indexAttachmentSubnet, byNode: indexAttachmentNode}); err != nil {
		return nil, err
	}
	if c.locks, err = newInformer(opts.Dynamic, vnet.IPLockGVR, 0, cache.Indexers{byHolder: indexLockHolder}); err != nil {
		return nil, err
	}
	// Nodes: only whether one exists matters, so the cache keeps names.
	c.nodeFactory = informers.NewSharedInformerFactoryWithOptions(opts.Kube, 0, informers.WithTransform(nodeNameOnly))
	c.nodes = c.nodeFactory.Core().V1().Nodes().Informer()
	if err := c.addHandlers(); err != nil {
		return nil, err
	}
	return c, nil
}

// newInformer makes a cluster-wide informer on gvr that keeps no managed
// fields.
func newInformer(client dynamic.Interface, gvr schema.GroupVersionResource, resync time.Duration, idx cache.Indexers) (cache.SharedIndexInformer, error) {
	i := dynamicinformer.NewFilteredDynamicInformer(client, gvr, metav1.NamespaceAll, resync, idx, nil).Informer()
	if err := i.SetTransform(stripManagedFields); err != nil {
		return nil, fmt.Errorf("ipam: %s informer: %w", gvr.Resource, err)
	}
	return i, nil
}

func stripManagedFields(obj any) (any, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		u.SetManagedFields(nil)
	}
	return obj, nil
}

// nodeNameOnly keeps a Node's name, UID and resourceVersion.
func nodeNameOnly(obj any) (any, error) {
	if n, ok := obj.(*corev1.Node); ok {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion}}, nil
	}
	return obj, nil
}

// Run assigns addresses until ctx ends. A Controller runs once.
func (c *Controller) Run(ctx context.Context) error {
	if !c.ran.CompareAndSwap(false, true) {
		return errors.New("ipam: Run called twice")
	}
	if c.rec == nil {
		b := record.NewBroadcaster(record.WithContext(ctx))
		b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.opts.Kube.CoreV1().Events("")})
		defer b.Shutdown()
		c.rec = b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component})
	}
	c.m.leader.Set(1)
	defer c.m.leader.Set(0)
	defer c.queue.ShutDown()

	var informers sync.WaitGroup
	for _, inf := range []cache.SharedIndexInformer{c.subnets, c.attachments, c.locks} {
		informers.Go(func() { inf.RunWithContext(ctx) })
	}
	c.nodeFactory.Start(ctx.Done())
	defer c.nodeFactory.Shutdown()
	defer informers.Wait()
	if !cache.WaitForCacheSync(ctx.Done(), c.subnets.HasSynced, c.attachments.HasSynced, c.locks.HasSynced, c.nodes.HasSynced) {
		return nil // ctx ended
	}
	c.log.WithField("workers", c.opts.Workers).Info("assigning addresses")
	workers.Run(ctx, c.opts.Workers, c.queue, c.next)
	return nil
}

// next syncs one queued key; false when the queue is shut down.
func (c *Controller) next(ctx context.Context) bool {
	k, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(k)
	if ctx.Err() != nil {
		// The term is over (the queue drains on shutdown): leave the
		// rest to the next leader.
		return false
	}
	var err error
	if k.kind == subnetKind {
		err = c.syncSubnet(ctx, k)
	} else {
		err = c.syncAttachment(ctx, k)
	}
	switch {
	case err == nil || ctx.Err() != nil:
		c.queue.Forget(k)
	default:
		c.m.failures.WithLabelValues(reasonAPIError).Inc()
		c.log.WithError(err).WithField("object", k.String()).WithField("retries", c.queue.NumRequeues(k)).Warn("ipam: will retry")
		c.queue.AddRateLimited(k)
	}
	return true
}
