package vnetfeature

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"nodeflow/agent/feature"
	"nodeflow/datapath/plan"
	"nodeflow/host/netstack"
	"nodeflow/lib/syncloop"
	"nodeflow/model/vnet"
)

// Options configure the connection agent. Zero values take the defaults
// named.
type Options struct {
	// Dynamic reads and writes the vnet.nodeflow.io objects; nil builds
	// one from the host's API client configuration.
	Dynamic dynamic.Interface
	// HostNetns is the network namespace br0's ports are in ("" for the
	// agent's own); NetnsDir holds the attachments' namespaces
	// (DefaultNetnsDir); ProcSysNet is where /proc/sys/net is writable
	// (hostnet.ProcSysNet).
	HostNetns, NetnsDir, ProcSysNet string
	// CheckInterval is how often every attachment's interface is checked
	// (and repaired) besides events (1 minute), and the node cleaned of
	// interfaces nobody wants.
	CheckInterval time.Duration
	// RetryInterval is the wait before a failed pass is retried (5 s).
	RetryInterval time.Duration
	// SyncTimeout bounds how long Sync waits for the informers before the
	// agent goes on without them (30 s): a missing RBAC rule must not
	// keep the node's agent from starting.
	SyncTimeout time.Duration
	// DiscoveryInterval and DiscoveryMaxInterval bound the back-off of the
	// polls for the CRDs while they are not installed (1 s doubling to
	// 1 minute).
	DiscoveryInterval, DiscoveryMaxInterval time.Duration
	// Resync is the informers' resync period (0: none; CheckInterval does
	// the periodic work).
	Resync time.Duration
}

func (o *Options) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.CheckInterval, time.Minute)
	def(&o.RetryInterval, 5*time.Second)
	def(&o.SyncTimeout, 30*time.Second)
	def(&o.DiscoveryInterval, time.Second)
	def(&o.DiscoveryMaxInterval, time.Minute)
	if o.NetnsDir == "" {
		o.NetnsDir = DefaultNetnsDir
	}
	if o.ProcSysNet == "" {
		o.ProcSysNet = netstack.ProcSysNet
	}
}

// Agent is the connection agent: it implements feature.Feature.
type Agent struct {
	opts   Options
	h      feature.Host
	log    logrus.FieldLogger
	owners feature.Owners
	dyn    dynamic.Interface
	m      *metrics
	inf    *informerSet
	host   hostSide

	loop *syncloop.Keyed[key]
	// apiServed is set by waitForAPI when the CRDs are served: the loop
	// then starts the informer on this node's attachments.
	apiServed atomic.Bool

	// Owned by the loop's passes (Sync's, then Run's).
	locals   map[string]*made    // key -> what is made for it
	built    map[uint32]vniBuilt // VNI -> what its owner was built from
	reported map[string]string   // key -> the problems last reported
	states   map[string]string   // key -> its state, for the gauge
	// held is what was asked of passes that could not run yet.
	held      dirty
	warnedAPI bool
	// passSynced is, during a pass, whether each VNI's informers had
	// listed everything when the pass began: every attachment of the pass
	// is judged on that one view, so that a VNI whose informers finish
	// listing in the middle of a pass cannot have its attachments made out
	// of name order (the one made first keeps a contested address).
	passSynced map[uint32]bool
	// premade are the interfaces a pass made ahead of its serial part;
	// statuses the status writes it queued for its end.
	premade  map[string]premadeLink
	statuses []pendingStatus
}

// New returns the connection agent.
func New(opts Options) *Agent {
	opts.setDefaults()
	f := &Agent{
		opts: opts, held: newDirty(),
		locals: map[string]*made{}, built: map[uint32]vniBuilt{}, reported: map[string]string{}, states: map[string]string{},
	}
	f.loop = f.newLoop()
	return f
}

// Name implements feature.Feature.
func (f *Agent) Name() string { return "vnetagent" }

// Owns implements feature.Feature.
func (f *Agent) Owns() []plan.Feature { return []plan.Feature{plan.FeatureVNet} }

// Init implements feature.Feature: the dynamic client, the metrics and
// the handlers. The informers start in Sync, once the CRDs are served.
func (f *Agent) Init(h feature.Host) error {
	f.h, f.log = h, h.Log()
	f.owners = h.Owners(plan.Pod)
	f.m = newMetrics()
	if err := f.m.register(h.Registry()); err != nil {
		return fmt.Errorf("vnetagent: metrics: %w", err)
	}
	dyn := f.opts.Dynamic
	if dyn == nil {
		var err error
		if dyn, err = h.Dynamic(); err != nil {
			return fmt.Errorf("vnetagent: %w", err)
		}
	}
	f.dyn = dyn
	f.inf = newInformerSet(dyn, h.Node().Name, f.opts.Resync, handlers{
		local:      f.localChanged,
		attachment: func(vni uint32, _ any) { f.loop.Mark(vniKey(vni)) },
		subnet:     func(vni uint32, _ any) { f.loop.Mark(subnetsKey(vni)) },
		synced:     func(vni uint32) { f.loop.Mark(vniKey(vni), subnetsKey(vni)) },
	})
	h.OnNodeChange(f.loop.MarkAll)
	return nil
}

// served reports whether the API server serves both CRDs the agent
// watches.
func (f *Agent) served() (bool, error) {
	kube := f.h.Kube()
	if kube == nil {
		return true, nil
	}
	rl, err := kube.Discovery().ServerResourcesForGroupVersion(vnet.APIVersion)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	have := map[string]bool{}
	for _, r := range rl.APIResources {
		have[r.Name] = true
	}
	return have[vnet.ResourceNetworkAttachments] && have[vnet.ResourceSubnets], nil
}

// Sync implements feature.Feature: when the CRDs are served, it starts the
// informers, waits for them (at most SyncTimeout), adopts the interfaces
// already made, removes those nobody wants, and sets every attachment's
// flows, so that the start-up bundle keeps the flows of the attachments
// that work. When the CRDs are not served, it returns at once and Run
// starts when they are.
func (f *Agent) Sync(ctx context.Context) error {
	if f.host == nil {
		if err := f.dialOVSDB(ctx); err != nil {
			// The loop tries again; the rest of the agent goes on.
			f.log.WithError(err).Error("cannot connect to OVSDB; the virtual networks wait for it")
		}
	}
	ok, err := f.served()
	if err != nil || !ok {
		f.notServed(err)
		return nil
	}
	// The informer on this node's attachments starts here without the
	// full pass startLocal asks for once it has listed: Sync waits for the
	// listing and runs that pass itself, and a second one would remove
	// leftovers and write statuses again. Only when Sync gives up waiting
	// does the loop take the full pass over.
	if err := f.inf.startLocal(); err != nil {
		return fmt.Errorf("vnetagent: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, f.opts.SyncTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(sctx.Done(), f.inf.localSynced) {
		f.log.WithField("timeout", f.opts.SyncTimeout).Warn("the NetworkAttachments of this node are not listed yet (RBAC?); the virtual networks start once they are")
		f.fullPassOnceListed(ctx)
		return nil
	}
	var vnis []cache.InformerSynced
	for _, vni := range f.followLocals() {
		vi := f.inf.vni(vni)
		vnis = append(vnis, vi.attachments.inf.HasSynced, vi.subnets.inf.HasSynced)
	}
	if !cache.WaitForCacheSync(sctx.Done(), vnis...) {
		f.log.WithField("timeout", f.opts.SyncTimeout).Warn("the attachments and Subnets of this node's VNIs are not listed yet; going on without them")
	}
	f.loop.MarkAll()
	f.loop.SyncNow(ctx)
	return nil
}

// followLocals starts the informers of the VNIs of this node's attachments,
// as the local informer lists them, and returns those VNIs. Sync calls it
// before its pass, so that the pass sees them listed.
func (f *Agent) followLocals() []uint32 {
	view := f.scanLocals()
	if _, err := f.inf.setVNIs(view.relevant); err != nil {
		// The pass tries again.
		f.log.WithError(err).Error("cannot start the informers of a VNI")
	}
	return f.inf.vniList()
}

// notServed logs, once, that the CRDs are not there.
func (f *Agent) notServed(err error) {
	if f.warnedAPI {
		return
	}
	f.warnedAPI = true
	l := f.log.WithField("api", vnet.APIVersion)
	if err != nil {
		l = l.WithError(err)
	}
	l.Info("virtual network CRDs (networkattachments, subnets) are not served; the connection agent starts once they are")
}

// Run implements feature.Feature: the sync loop, the wait for the CRDs
// when they were not served, and the periodic check. (The watch of the
// ports runs from the OVSDB client's dial.)
func (f *Agent) Run(ctx context.Context) {
	defer f.inf.stopAll()
	if f.inf.local == nil {
		go f.waitForAPI(ctx)
	}
	go f.checkEvery(ctx)
	f.loop.Loop(ctx)
}

// startLocal starts the informer on this node's attachments, and wakes
// the loop for a full pass once it has listed everything (the passes
// before wait for that).
func (f *Agent) startLocal(ctx context.Context) error {
	if err := f.inf.startLocal(); err != nil {
		return err
	}
	f.fullPassOnceListed(ctx)
	return nil
}

// fullPassOnceListed asks the loop for a full pass once the informer on
// this node's attachments has listed everything.
func (f *Agent) fullPassOnceListed(ctx context.Context) {
	local := f.inf.local
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), local.inf.HasSynced) {
			f.loop.MarkAll()
		}
	}()
}

// waitForAPI polls discovery, with back-off, until the CRDs are served.
func (f *Agent) waitForAPI(ctx context.Context) {
	wait := f.opts.DiscoveryInterval
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		ok, err := f.served()
		if err == nil && ok {
			f.apiServed.Store(true)
			f.loop.Mark()
			return
		}
		if err != nil {
			f.log.WithError(err).Debug("discovery")
		}
		wait = min(2*wait, f.opts.DiscoveryMaxInterval)
	}
}
