package namespaceid

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"nodeflow/internal/kubeclient"
)

// Client rate limits of the clients New builds from Config.Rest: creating
// the locks of thousands of namespaces created at once must not wait on
// client-go's default of 5 requests per second.
const (
	ClientQPS   = 500
	ClientBurst = 1000
)

// Config configures a Service.
type Config struct {
	// NodeName is this node's name: its Node object carries the node's
	// watermark. Required.
	NodeName string
	// InUse returns the ids that flows on this node still use: those of
	// the flows installed on the bridges and those of flow changes not yet
	// installed, including rebuilds asked for by Table.OnChange callbacks
	// that have not run yet. It returns nil (not an empty map) while the
	// agent does not know yet, before it has read what is on the bridges:
	// the watermark then stays where it is. Required; see the package
	// documentation.
	InUse func() map[uint32]bool

	// Rest is the API server's configuration; New builds its own clients
	// from a copy, with ClientQPS and ClientBurst. Dynamic and Kube, when
	// set, are used instead (tests).
	Rest    *rest.Config
	Dynamic dynamic.Interface
	Kube    kubernetes.Interface
	// Informers is the cluster-wide informer factory the Namespace and
	// Node informers are taken from; the caller starts it after New. When
	// nil, the Service makes its own from Kube and starts it in Run.
	Informers informers.SharedInformerFactory

	// Log defaults to logrus's standard logger.
	Log logrus.FieldLogger
	// Election configures the allocator's leader election.
	Election Election
	// Timing has the defaults of DefaultTiming where zero.
	Timing Timing
}

// Election configures the leader election among the allocators.
type Election struct {
	// Disabled runs the allocator without an election (tests only: two
	// allocators then race, which the lock objects keep safe).
	Disabled bool
	// Namespace and Name name the Lease (kube-system,
	// nodeflow-nsid-allocator by default).
	Namespace, Name string
	// Identity is this candidate's; NodeName plus a random suffix by
	// default, so that a restarted agent is a new candidate.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's
	// (15 s, 10 s and 2 s by default: leader.Election's).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Timing holds the Service's intervals.
type Timing struct {
	// Recheck is how often a node re-checks its watermark while some lock
	// above it is terminating (1 s).
	Recheck time.Duration
	// MinInterval is the least time between two watermark checks (200 ms).
	MinInterval time.Duration
	// OrphanGrace is how long a lock whose namespace the allocator does not
	// know waits before the allocator deletes it itself (1 min); the garbage
	// collector usually deletes it first.
	OrphanGrace time.Duration
	// ClaimTTL bounds how long the allocator trusts its own record of a lock
	// it created or found taken but does not see in its cache yet (2 min).
	ClaimTTL time.Duration
	// Clock defaults to the wall clock.
	Clock clock.Clock
}

// DefaultTiming is the Timing of a zero Config.Timing.
var DefaultTiming = Timing{Recheck: time.Second, MinInterval: 200 * time.Millisecond, OrphanGrace: time.Minute, ClaimTTL: 2 * time.Minute}

// Default names of the Lease.
const (
	DefaultLeaseNamespace = "kube-system"
	DefaultLeaseName      = "nodeflow-nsid-allocator"
)

// Service is nsid on one node: the Table, the allocator (active on the
// elected node only) and the node's releaser, which publishes the node's
// watermark.
type Service struct {
	cfg  Config
	log  logrus.FieldLogger
	dyn  dynamic.NamespaceableResourceInterface
	kube kubernetes.Interface

	factory    informers.SharedInformerFactory
	ownFactory bool
	locks      cache.SharedIndexInformer
	namespaces cache.SharedIndexInformer
	nsLister   corelisters.NamespaceLister
	nodes      cache.SharedIndexInformer
	nodeLister corelisters.NodeLister

	table *Table
	alloc *allocator
	rel   *releaser

	runOnce sync.Once
}

// byNamespaceUID indexes the locks by spec.namespaceUID.
const byNamespaceUID = "namespaceUID"

// New returns the Service of node cfg.NodeName. It registers its
// informers (on cfg.Informers when given) and does no I/O.
func New(cfg Config) (*Service, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("nsid: config: NodeName is empty")
	}
	if cfg.InUse == nil {
		return nil, errors.New("nsid: config: InUse is nil")
	}
	if cfg.Log == nil {
		cfg.Log = logrus.StandardLogger()
	}
	cfg.Timing = cfg.Timing.withDefaults()
	e := &cfg.Election
	if e.Namespace == "" {
		e.Namespace = DefaultLeaseNamespace
	}
	if e.Name == "" {
		e.Name = DefaultLeaseName
	}
	if e.Identity == "" {
		e.Identity = cfg.NodeName + "_" + utilrand.String(8)
	}
	if cfg.Dynamic == nil || cfg.Kube == nil {
		if cfg.Rest == nil {
			return nil, errors.New("nsid: config: neither Rest nor Dynamic and Kube are set")
		}
		rc := rest.CopyConfig(cfg.Rest)
		rc.QPS, rc.Burst = ClientQPS, ClientBurst
		var err error
		if cfg.Dynamic == nil {
			if cfg.Dynamic, err = dynamic.NewForConfig(rc); err != nil {
				return nil, fmt.Errorf("nsid: dynamic client: %w", err)
			}
		}
		if cfg.Kube == nil {
			if cfg.Kube, err = kubeclient.NewTyped(rc); err != nil {
				return nil, fmt.Errorf("nsid: client: %w", err)
			}
		}
	}
	s := &Service{cfg: cfg, log: cfg.Log.WithField("component", "nsid"), dyn: cfg.Dynamic.Resource(GVR), kube: cfg.Kube}
	s.factory = cfg.Informers
	if s.factory == nil {
		s.factory = informers.NewSharedInformerFactory(cfg.Kube, 0)
		s.ownFactory = true
	}
	s.namespaces = s.factory.Core().V1().Namespaces().Informer()
	s.nsLister = s.factory.Core().V1().Namespaces().Lister()
	s.nodes = s.factory.Core().V1().Nodes().Informer()
	s.nodeLister = s.factory.Core().V1().Nodes().Lister()

	s.locks = dynamicinformer.NewFilteredDynamicInformer(cfg.Dynamic, GVR, "", 0,
		cache.Indexers{byNamespaceUID: indexNamespaceUID}, nil).Informer()
	if err := s.locks.SetTransform(stripManagedFields); err != nil {
		return nil, fmt.Errorf("nsid: lock informer: %w", err)
	}
	var err error
	if s.table, err = newTable(s.log, s.locks, s.namespaces); err != nil {
		return nil, fmt.Errorf("nsid: table: %w", err)
	}
	s.alloc = newAllocator(s)
	if s.rel, err = newReleaser(s); err != nil {
		return nil, err
	}
	return s, nil
}

func (t Timing) withDefaults() Timing {
	d := DefaultTiming
	if t.Recheck <= 0 {
		t.Recheck = d.Recheck
	}
	if t.MinInterval <= 0 {
		t.MinInterval = d.MinInterval
	}
	if t.OrphanGrace <= 0 {
		t.OrphanGrace = d.OrphanGrace
	}
	if t.ClaimTTL <= 0 {
		t.ClaimTTL = d.ClaimTTL
	}
	if t.Clock == nil {
		t.Clock = clock.RealClock{}
	}
	return t
}

// Table returns the node's namespace id table.
func (s *Service) Table() *Table { return s.table }

// Notify tells the Service that the node's flows changed, so that a
// watermark waiting on InUse is checked again soon. It never blocks.
func (s *Service) Notify() { s.rel.runner.Run() }

// IsLeader reports whether this node's allocator is the active one.
func (s *Service) IsLeader() bool { return s.alloc.leading.Load() }

// Run runs the Service until ctx is done: the lock informer (and the
// Service's own informer factory, if it made one), the node's releaser,
// and the allocator under leader election. Call it once.
func (s *Service) Run(ctx context.Context) error {
	started := false
	s.runOnce.Do(func() { started = true })
	if !started {
		return errors.New("nsid: Run called twice")
	}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); s.locks.RunWithContext(ctx) }()
	if s.ownFactory {
		s.factory.Start(ctx.Done())
	}
	go func() { defer wg.Done(); s.rel.run(ctx) }()
	go func() { defer wg.Done(); s.runAllocator(ctx) }()
	wg.Wait()
	if s.ownFactory {
		s.factory.Shutdown()
	}
	return nil
}

// WaitReady waits until the Table holds every lock and namespace the
// caches listed and this node's Node carries its watermark annotation.
// The agent must not install flows that use namespace ids before: until
// its Node has the annotation, the allocator does not wait for this node.
func (s *Service) WaitReady(ctx context.Context) error {
	if !kubeclient.WaitSynced(ctx, s.table.HasSynced) {
		return fmt.Errorf("nsid: wait for the lock and namespace caches: %w", ctx.Err())
	}
	select {
	case <-s.rel.ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("nsid: wait for node %s's %s annotation: %w", s.cfg.NodeName, ReleasedAnnotation, ctx.Err())
	}
}

func indexNamespaceUID(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	uid, _, _ := unstructured.NestedString(u.Object, "spec", "namespaceUID")
	if uid == "" {
		return nil, nil
	}
	return []string{uid}, nil
}

// stripManagedFields drops what the informer's cache does not need.
func stripManagedFields(obj any) (any, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		u.SetManagedFields(nil)
	}
	return obj, nil
}
