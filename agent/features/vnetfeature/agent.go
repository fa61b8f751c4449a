package vnetfeature

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"nodeflow/agent/feature"
	"nodeflow/datapath/plan"
	"nodeflow/datapath/reconcile"
	"nodeflow/datapath/vnetflows"
	"nodeflow/host/cni"
	"nodeflow/host/netstack"
	"nodeflow/lib/openflow"
	"nodeflow/lib/ovsdb"
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

	mu           sync.Mutex
	dirtyLocal   map[string]bool
	dirtyVNI     map[uint32]bool
	dirtySubnets map[uint32]bool
	all          bool
	kick         chan struct{}
	apiReady     chan struct{}

	// Owned by the loop (and Sync before it).
	locals   map[string]*made    // key -> what is made for it
	built    map[uint32]vniBuilt // VNI -> what its owner was built from
	reported map[string]string   // key -> the problems last reported
	states   map[string]string   // key -> its state, for the gauge
	// retryLocal and retryVNI failed in the last pass: they are tried
	// again after RetryInterval.
	retryLocal map[string]bool
	retryVNI   map[uint32]bool
	warnedAPI  bool
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

// made is what the agent made for one local attachment.
type made struct {
	want desired
	port uint32
}

// vniBuilt is what a VNI's owner was last built from.
type vniBuilt struct {
	remotes []vnetflows.Remote
	taken   []netip.Addr
	cfg     vnetflows.Config
	report  string
}

// New returns the connection agent.
func New(opts Options) *Agent {
	opts.setDefaults()
	return &Agent{
		opts: opts, dirtyLocal: map[string]bool{}, dirtyVNI: map[uint32]bool{}, dirtySubnets: map[uint32]bool{},
		kick: make(chan struct{}, 1), apiReady: make(chan struct{}, 1),
		locals: map[string]*made{}, built: map[uint32]vniBuilt{}, reported: map[string]string{}, states: map[string]string{},
		retryLocal: map[string]bool{}, retryVNI: map[uint32]bool{},
	}
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
		attachment: func(vni uint32, _ any) { f.mark(func() { f.dirtyVNI[vni] = true }) },
		subnet:     func(vni uint32, _ any) { f.mark(func() { f.dirtySubnets[vni] = true }) },
		synced: func(vni uint32) {
			f.mark(func() { f.dirtyVNI[vni], f.dirtySubnets[vni] = true, true })
		},
	})
	h.OnNodeChange(func() { f.mark(func() { f.all = true }) })
	return nil
}

// mark records a change under the lock and wakes the loop.
func (f *Agent) mark(change func()) {
	f.mu.Lock()
	change()
	f.mu.Unlock()
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

func (f *Agent) localChanged(obj any) {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	f.mark(func() { f.dirtyLocal[key] = true })
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
	if err := f.startLocal(ctx); err != nil {
		return fmt.Errorf("vnetagent: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, f.opts.SyncTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(sctx.Done(), f.inf.localSynced) {
		f.log.WithField("timeout", f.opts.SyncTimeout).Warn("the NetworkAttachments of this node are not listed yet (RBAC?); the virtual networks start once they are")
		return nil
	}
	f.syncPass(ctx) // starts the informers of the relevant VNIs
	var vnis []cache.InformerSynced
	for _, vni := range f.inf.vniList() {
		vi := f.inf.vni(vni)
		vnis = append(vnis, vi.attachments.inf.HasSynced, vi.subnets.inf.HasSynced)
	}
	if !cache.WaitForCacheSync(sctx.Done(), vnis...) {
		f.log.WithField("timeout", f.opts.SyncTimeout).Warn("the attachments and Subnets of this node's VNIs are not listed yet; going on without them")
		return nil
	}
	f.mark(func() { f.all = true })
	f.syncPass(ctx)
	return nil
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

// dialOVSDB takes the agent's OVSDB client and its Interface cache, which
// reports the attachments' ports' changes (watchPorts) until ctx ends.
func (f *Agent) dialOVSDB(ctx context.Context) error {
	// The attachments' ports are added through the agent's OVSDB client
	// (feature.Host.OVSDB), and its Interface cache (one monitor, shared
	// with the rest of the agent) reports their changes.
	db := f.h.OVSDB()
	if db == nil {
		return errors.New("vnetagent: the agent's OVSDB client is not connected yet")
	}
	ic, err := db.Interfaces(ctx)
	if err != nil {
		return fmt.Errorf("vnetagent: ovsdb interfaces: %w", err)
	}
	go f.watchPorts(ctx, ic)
	f.host = &plumbing{
		links: &Links{HostNetns: f.opts.HostNetns, NetnsDir: f.opts.NetnsDir, ProcSysNet: f.opts.ProcSysNet},
		db:    db, bridge: f.h.Node().PodBridge, ofportTimeout: 10 * time.Second,
	}
	return nil
}

// Run implements feature.Feature: the sync loop, the wait for the CRDs
// when they were not served, and the watch of the ports.
func (f *Agent) Run(ctx context.Context) {
	defer f.inf.stopAll()
	if f.inf.local == nil {
		go f.waitForAPI(ctx)
	}
	check := time.NewTicker(f.opts.CheckInterval)
	defer check.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.apiReady:
			if err := f.startLocal(ctx); err != nil {
				f.log.WithError(err).Error("cannot start the NetworkAttachment informer")
			} else {
				f.log.Info("virtual network CRDs are served; connection agent started")
			}
		case <-check.C:
			f.mark(func() { f.all = true })
		case <-f.kick:
		case <-retry.C:
			f.mu.Lock()
			for k := range f.retryLocal {
				f.dirtyLocal[k] = true
			}
			for v := range f.retryVNI {
				f.dirtyVNI[v] = true
			}
			f.mu.Unlock()
			clear(f.retryLocal)
			clear(f.retryVNI)
		}
		if f.syncPass(ctx) {
			retry.Reset(f.opts.RetryInterval)
		}
	}
}

// startLocal starts the informer on this node's attachments, and wakes
// the loop for a full pass once it has listed everything (the passes
// before wait for that).
func (f *Agent) startLocal(ctx context.Context) error {
	if err := f.inf.startLocal(); err != nil {
		return err
	}
	local := f.inf.local
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), local.inf.HasSynced) {
			f.mark(func() { f.all = true })
		}
	}()
	return nil
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
			f.apiReady <- struct{}{}
			return
		}
		if err != nil {
			f.log.WithError(err).Debug("discovery")
		}
		wait = min(2*wait, f.opts.DiscoveryMaxInterval)
	}
}

// watchPorts marks an attachment dirty when its port changes in OVSDB
// (deleted by an operator, renumbered by a restarted ovs-vswitchd).
func (f *Agent) watchPorts(ctx context.Context, ic *ovsdb.InterfaceCache) {
	sub := ic.Subscribe()
	defer sub.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-sub.Events():
			if !ok {
				return
			}
			for _, i := range []*ovsdb.Interface{ev.Old, ev.New} {
				if i != nil && i.ExternalIDs[cni.ExternalIDOwner] == OwnerVNet && (ev.Kind == ovsdb.InterfaceDeleted || ev.OfportChanged()) {
					key := i.ExternalIDs[ExternalIDAttachment]
					f.mark(func() { f.dirtyLocal[key] = true })
					break
				}
			}
		}
	}
}

// asAttachment returns obj as an attachment, or nil with the reason it
// is not one.
func asAttachment(obj any) (*vnet.NetworkAttachment, error) {
	switch o := obj.(type) {
	case *vnet.NetworkAttachment:
		return o, nil
	case *unstructured.Unstructured:
		return vnet.FromUnstructured[*vnet.NetworkAttachment](o)
	}
	return nil, fmt.Errorf("vnetagent: %T is not a NetworkAttachment", obj)
}

// nodeIP is this node's tunnel endpoint: its first IPv4 address.
func nodeIP(n feature.Node) (netip.Addr, bool) {
	for _, a := range n.Addrs() {
		if a.Is4() {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// syncPass applies what changed since the last pass and reports whether
// something failed (it is retried after RetryInterval).
func (f *Agent) syncPass(ctx context.Context) (failed bool) {
	if f.inf.local == nil || !f.inf.localSynced() {
		return false
	}
	if f.host == nil {
		if err := f.dialOVSDB(ctx); err != nil {
			f.log.WithError(err).Warn("cannot connect to OVSDB; retrying")
			return true
		}
	}
	f.mu.Lock()
	dirtyLocal, dirtyVNI, dirtySubnets, all := f.dirtyLocal, f.dirtyVNI, f.dirtySubnets, f.all
	f.dirtyLocal, f.dirtyVNI, f.dirtySubnets, f.all = map[string]bool{}, map[uint32]bool{}, map[uint32]bool{}, false
	f.mu.Unlock()

	// This node's attachments, and their VNIs.
	locals := map[string]any{}
	relevant := map[uint32]bool{}
	taken := map[uint32][]netip.Addr{}
	for _, obj := range f.inf.locals() {
		key, err := cache.MetaNamespaceKeyFunc(obj)
		if err != nil {
			continue
		}
		locals[key] = obj
		a, err := asAttachment(obj)
		if err != nil || a.Spec.Node != f.h.Node().Name || !vnet.ValidVNI(a.Spec.VNI) {
			continue
		}
		relevant[a.Spec.VNI] = true
		if ip, err := netip.ParseAddr(a.Status.IP); err == nil {
			taken[a.Spec.VNI] = append(taken[a.Spec.VNI], ip)
		}
	}
	stopped, err := f.inf.setVNIs(relevant)
	if err != nil {
		f.log.WithError(err).Error("cannot start the informers of a VNI")
		failed = true
		for vni := range relevant {
			f.retryVNI[vni] = true
		}
	}
	f.passSynced = map[uint32]bool{}
	for _, vni := range f.inf.vniList() {
		f.passSynced[vni] = f.inf.vni(vni).synced()
	}
	defer func() { f.passSynced = nil }()
	for _, vni := range stopped {
		dirtyVNI[vni] = true
		f.log.WithField("vni", vni).Info("no attachment of this node on the VNI any more: its informers stopped")
	}
	for key, obj := range locals {
		if a, err := asAttachment(obj); err == nil && dirtySubnets[a.Spec.VNI] {
			dirtyLocal[key] = true
		}
	}
	if all {
		for key := range locals {
			dirtyLocal[key] = true
		}
		for key := range f.locals {
			dirtyLocal[key] = true
		}
		for _, vni := range f.inf.vniList() {
			dirtyVNI[vni] = true
		}
	}
	for vni := range relevant {
		slices.SortFunc(taken[vni], netip.Addr.Compare)
		if b, ok := f.built[vni]; !ok || !slices.Equal(b.taken, taken[vni]) {
			dirtyVNI[vni] = true
		}
	}

	// The VNIs' remote mappings first, so that an address a local
	// attachment takes over is given up by the VNI's owner before the
	// attachment's own flows want it.
	for _, vni := range slices.Sorted(maps.Keys(dirtyVNI)) {
		if f.syncVNI(vni, taken[vni]) {
			failed = true
			f.retryVNI[vni] = true
		}
	}
	keys := slices.Sorted(maps.Keys(dirtyLocal))
	f.premade = f.premake(ctx, keys, locals)
	for _, key := range keys {
		if f.syncLocal(ctx, key, locals[key]) {
			failed = true
			f.retryLocal[key] = true
		}
	}
	f.premade = nil
	if len(f.statuses) > 0 {
		// A status says the interface is ready: its flows are in br0
		// first, so that a client that waits for the status can send at
		// once.
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := f.h.Flush(fctx, plan.Pod); err != nil {
			f.log.WithError(err).Debug("br0 not in step before the status writes")
		}
		cancel()
	}
	for _, key := range f.flushStatuses(ctx) {
		failed = true
		f.retryLocal[key] = true
	}
	if all && !failed && f.allSynced() {
		f.collect(ctx)
	}
	f.gauges()
	return failed
}

// allSynced reports whether every informer has listed everything, so that
// what they do not hold is really not there.
func (f *Agent) allSynced() bool {
	if !f.inf.localSynced() {
		return false
	}
	for _, vni := range f.inf.vniList() {
		if !f.inf.vni(vni).synced() {
			return false
		}
	}
	return true
}

// collect removes the interfaces, namespaces and ports of attachments that
// are gone (deleted while the agent was not running, or left by a failed
// attempt).
func (f *Agent) collect(ctx context.Context) {
	keep := map[string]string{}
	for _, m := range f.locals {
		keep[m.want.link.Name] = m.want.link.Netns
	}
	removed, err := f.host.collect(ctx, keep)
	for _, r := range removed {
		f.log.WithField("removed", r).Info("removed an attachment's leftover: its attachment is gone")
	}
	if err != nil {
		f.m.hostErrors.Inc()
		f.log.WithError(err).Warn("cannot remove every leftover of gone attachments; retrying at the next check")
	}
	for _, owner := range f.owners.List("vnet/") {
		if strings.HasPrefix(owner, vnetflows.VNIOwnerPrefix) {
			continue
		}
		ns, name, _ := strings.Cut(strings.TrimPrefix(owner, "vnet/"), "/")
		if _, ok := f.locals[ns+"/"+name]; !ok {
			f.setFlows(owner, nil)
		}
	}
}

func (f *Agent) gauges() {
	running, cached := f.inf.counts()
	for r, n := range running {
		f.m.informers.WithLabelValues(r).Set(float64(n))
	}
	for k, n := range cached {
		f.m.cached.WithLabelValues(k[0], k[1]).Set(float64(n))
	}
	f.m.vnis.Set(float64(len(f.inf.vniList())))
	counts := map[string]int{stateReady: 0, stateWaiting: 0, stateError: 0}
	for _, s := range f.states {
		counts[s]++
	}
	for s, n := range counts {
		f.m.attachments.WithLabelValues(s).Set(float64(n))
	}
}

// setFlows sets an owner's flows, logging a failure.
func (f *Agent) setFlows(owner string, fs []openflow.Flow) error {
	err := f.owners.Set(owner, reconcile.State{Flows: fs})
	if err != nil {
		f.log.WithError(err).WithField("owner", owner).Error("cannot set desired flows")
	}
	return err
}

// syncVNI rebuilds the remote mappings of one VNI: the attachments of the
// VNI on other nodes that have an address, a MAC and a host address.
func (f *Agent) syncVNI(vni uint32, taken []netip.Addr) (failed bool) {
	owner := vnetflows.VNIOwner(vni)
	vi := f.inf.vni(vni)
	if vi == nil {
		if _, ok := f.built[vni]; ok || slices.Contains(f.owners.List(owner), owner) {
			if f.setFlows(owner, nil) != nil {
				return true
			}
		}
		delete(f.built, vni)
		return false
	}
	if !vi.synced() {
		return false // the synced handler marks it again
	}
	node := f.h.Node()
	self, _ := nodeIP(node)
	cfg := vnetflows.Config{TunnelPort: node.Ports.Tunnel, HostIP: self}
	var remotes []vnetflows.Remote
	for _, obj := range vi.attachments.inf.GetStore().List() {
		a, err := asAttachment(obj)
		if err != nil || a.Spec.Node == node.Name || a.Spec.VNI != vni || a.Status.IP == "" || a.Status.HostIP == "" {
			continue // not remote, or not made yet by its node's agent
		}
		r := vnetflows.Remote{Namespace: a.Namespace, Name: a.Name}
		r.IP, _ = netip.ParseAddr(a.Status.IP)
		r.HostIP, _ = netip.ParseAddr(a.Status.HostIP)
		r.MAC = parseMAC(a.Status.MAC)
		remotes = append(remotes, r)
	}
	slices.SortFunc(remotes, func(x, y vnetflows.Remote) int {
		return strings.Compare(x.Namespace+"/"+x.Name, y.Namespace+"/"+y.Name)
	})
	if b, ok := f.built[vni]; ok && b.cfg == cfg && slices.Equal(b.taken, taken) && slices.EqualFunc(b.remotes, remotes, sameRemote) {
		return false
	}
	fs, problems, err := vnetflows.VNIFlows(cfg, vni, remotes, taken)
	if err != nil {
		f.log.WithError(err).WithField("vni", vni).Error("cannot build the VNI's remote mappings")
		return true
	}
	report := fmt.Sprint(problems)
	if len(problems) > 0 && report != f.built[vni].report {
		f.log.WithField("vni", vni).WithField("problems", errors.Join(problems...).Error()).Warn("remote attachments left out of the VNI's mappings")
	}
	if f.setFlows(owner, fs) != nil {
		return true
	}
	f.built[vni] = vniBuilt{remotes: remotes, taken: taken, cfg: cfg, report: report}
	return false
}

func sameRemote(a, b vnetflows.Remote) bool {
	return a.Namespace == b.Namespace && a.Name == b.Name && a.IP == b.IP && a.HostIP == b.HostIP && a.MAC.String() == b.MAC.String()
}

// subnet finds a Subnet in a VNI's informer.
func (f *Agent) subnet(vni uint32, namespace, name string) (*vnet.Subnet, bool, bool) {
	vi := f.inf.vni(vni)
	synced := vi.synced()
	if f.passSynced != nil {
		synced = f.passSynced[vni]
	}
	if !synced {
		return nil, false, false
	}
	obj, ok, _ := vi.subnets.inf.GetStore().GetByKey(namespace + "/" + name)
	if !ok {
		return nil, false, true
	}
	s, ok := obj.(*vnet.Subnet)
	if !ok || s.Spec.VNI != vni {
		return nil, false, true
	}
	return s, true, true
}

// syncLocal makes, adopts or removes one local attachment's interface,
// port and flows, and writes its status.
func (f *Agent) syncLocal(ctx context.Context, key string, obj any) (failed bool) {
	node := f.h.Node()
	if obj == nil {
		delete(f.reported, key)
		delete(f.states, key)
		return f.teardown(ctx, key)
	}
	a, err := asAttachment(obj)
	if err != nil {
		f.states[key] = stateError
		failed = f.teardown(ctx, key)
		if ro, ok := obj.(runtime.Object); ok {
			f.report(key, ro, []problem{{ReasonMalformed, "spec", err.Error()}})
		}
		return failed
	}
	if a.Spec.Node != node.Name {
		// Not this node's (the field selector says it is): never an
		// interface here.
		delete(f.states, key)
		return f.teardown(ctx, key)
	}
	j := judge(a, f.subnet, node.MTU)
	if j.wait {
		f.states[key] = stateWaiting
		failed = f.teardown(ctx, key)
		delete(f.reported, key)
		if a.Status.IP == "" && !hostStatusOf(a).empty() {
			failed = !f.writeStatus(ctx, a, hostStatus{}) || failed
		}
		return failed
	}
	self, ok := nodeIP(node)
	if len(j.problems) == 0 && !ok {
		j.problems = []problem{{ReasonNoNodeAddress, "status.hostIP", fmt.Sprintf("node %s has no IPv4 address to be the VXLAN endpoint", node.Name)}}
	}
	if len(j.problems) > 0 {
		return f.fail(ctx, key, a, j.problems)
	}
	return f.make(ctx, key, a, j.want, self)
}

// placeholderPort stands for an attachment's port in the flows that
// check, before anything is made, whether another owner wants them: a
// valid ofport no switch gives (Open vSwitch numbers ports below 65280).
const placeholderPort uint32 = 0xfffffe00

// make makes or adopts a ready attachment's interface and port, sets its
// flows and writes its status. An address another local attachment of
// the VNI already has is refused before anything is made, and retried.
func (f *Agent) make(ctx context.Context, key string, a *vnet.NetworkAttachment, want desired, self netip.Addr) (failed bool) {
	owner := vnetflows.LocalOwner(a.Namespace, a.Name)
	model := vnetflows.Local{Namespace: a.Namespace, Name: a.Name, VNI: want.vni, Port: placeholderPort, MAC: want.mac, IP: want.ip}
	probe, err := vnetflows.LocalFlows(model)
	if err != nil {
		// judge checked the model: a broken invariant.
		return f.fail(ctx, key, a, []problem{{ReasonAddressInvalid, "status", err.Error()}})
	}
	if contested := f.owners.Contested(owner, reconcile.State{Flows: probe}); len(contested) > 0 {
		var with []string
		for _, c := range contested {
			with = append(with, c.Owner)
		}
		slices.Sort(with)
		f.fail(ctx, key, a, []problem{{ReasonAddressConflict, "status.ip",
			fmt.Sprintf("%s on VNI %d is also wanted by %s", want.ip, want.vni, strings.Join(slices.Compact(with), ", "))}})
		return true // until the other one goes
	}
	if m := f.locals[key]; m != nil && (m.want.link.Name != want.link.Name || m.want.link.Netns != want.link.Netns) {
		if f.teardown(ctx, key) {
			return true
		}
	}
	var port uint32
	var adopted bool
	if pm, ok := f.premade[key]; ok && sameSpec(pm.want.link, want.link) {
		port, adopted, err = pm.port, pm.adopted, pm.err
	} else {
		port, adopted, err = f.host.attach(ctx, want)
	}
	if err != nil {
		f.m.hostErrors.Inc()
		f.fail(ctx, key, a, []problem{{ReasonInterfaceFailed, "status.ifcName", fmt.Sprintf("cannot make interface %s: %v", want.link.Name, err)}})
		return true
	}
	model.Port = port
	fs, err := vnetflows.LocalFlows(model)
	if err == nil {
		err = f.setFlows(owner, fs)
	}
	if err != nil {
		return true
	}
	prev := f.locals[key]
	f.locals[key] = &made{want: want, port: port}
	if prev == nil || prev.port != port {
		f.log.WithFields(logrus.Fields{"attachment": key, "interface": want.link.Name, "netns": want.link.Netns,
			"ip": want.ip, "vni": want.vni, "ofport": port, "adopted": adopted}).Info("attachment ready")
	}
	f.states[key] = stateReady
	delete(f.reported, key)
	f.queueStatus(key, a, hostStatus{hostIP: self.String(), ifcName: want.link.Name, errors: []string{}})
	return false
}

// premadeLink is an attachment's interface and port made ahead of the
// serial pass (premake).
type premadeLink struct {
	want    desired
	port    uint32
	adopted bool
	err     error
}

// sameSpec reports whether a and b describe the same interface.
func sameSpec(a, b Spec) bool {
	return a.Name == b.Name && a.Netns == b.Netns && bytes.Equal(a.MAC, b.MAC) && a.Addr == b.Addr && a.MTU == b.MTU
}

// premakeWorkers bounds the attachments whose interfaces and ports are
// made at once.
const premakeWorkers = 8

// premake makes the interfaces and ports of the attachments among keys
// that are ready and not made yet, premakeWorkers at a time: each is a few
// netlink and OVSDB round trips, and ovs-vswitchd's reconfiguration, which
// one after the other made a burst of attachments wait for each other. The
// serial pass then uses what was made (make), and does everything else as
// before. Only plumbing runs here: no flows, no status, no shared state.
func (f *Agent) premake(ctx context.Context, keys []string, locals map[string]any) map[string]premadeLink {
	node := f.h.Node()
	var todo []desired
	seen := map[string]bool{}
	for _, key := range keys {
		a, err := asAttachment(locals[key])
		if err != nil || a.Spec.Node != node.Name {
			continue
		}
		if m := f.locals[key]; m != nil {
			continue // made before: make adopts or remakes it
		}
		j := judge(a, f.subnet, node.MTU)
		if j.wait || len(j.problems) > 0 {
			continue
		}
		// An address another attachment wants is refused by make before
		// anything is made: leave those, and all but the first of a
		// batch's attachments that want one address, to it.
		at := fmt.Sprintf("%d/%s", j.want.vni, j.want.ip)
		if seen[at] {
			continue
		}
		seen[at] = true
		probe, err := vnetflows.LocalFlows(vnetflows.Local{Namespace: a.Namespace, Name: a.Name, VNI: j.want.vni, Port: placeholderPort, MAC: j.want.mac, IP: j.want.ip})
		if err != nil || len(f.owners.Contested(vnetflows.LocalOwner(a.Namespace, a.Name), reconcile.State{Flows: probe})) > 0 {
			continue
		}
		todo = append(todo, j.want)
	}
	if len(todo) < 2 {
		return nil
	}
	out := make([]premadeLink, len(todo))
	sem := make(chan struct{}, premakeWorkers)
	var wg sync.WaitGroup
	for i, want := range todo {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			port, adopted, err := f.host.attach(ctx, want)
			out[i] = premadeLink{want: want, port: port, adopted: adopted, err: err}
		}()
	}
	wg.Wait()
	made := make(map[string]premadeLink, len(out))
	for _, pm := range out {
		made[pm.want.key()] = pm
	}
	return made
}

// pendingStatus is a status write queued by a pass.
type pendingStatus struct {
	key string
	a   *vnet.NetworkAttachment
	s   hostStatus
}

// queueStatus queues a status write for the end of the pass.
func (f *Agent) queueStatus(key string, a *vnet.NetworkAttachment, s hostStatus) {
	if hostStatusOf(a).equal(s) {
		return
	}
	f.statuses = append(f.statuses, pendingStatus{key: key, a: a, s: s})
}

// statusWorkers bounds the status writes in flight at once.
const statusWorkers = 8

// flushStatuses writes the queued statuses, statusWorkers at a time, and
// returns the keys of those that failed (to be retried).
func (f *Agent) flushStatuses(ctx context.Context) []string {
	queued := f.statuses
	f.statuses = nil
	ok := make([]bool, len(queued))
	sem := make(chan struct{}, statusWorkers)
	var wg sync.WaitGroup
	for i, p := range queued {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ok[i] = f.writeStatus(ctx, p.a, p.s)
		}()
	}
	wg.Wait()
	var failed []string
	for i, p := range queued {
		if !ok[i] {
			failed = append(failed, p.key)
		}
	}
	return failed
}

// fail removes what was made for an attachment, reports its problems and
// writes them into its status. It reports whether writing failed.
func (f *Agent) fail(ctx context.Context, key string, a *vnet.NetworkAttachment, probs []problem) bool {
	f.states[key] = stateError
	failed := f.teardown(ctx, key)
	f.report(key, a, probs)
	errs := make([]string, len(probs))
	for i, p := range probs {
		errs[i] = p.String()
	}
	return !f.writeStatus(ctx, a, hostStatus{errors: errs}) || failed
}

// report logs an attachment's problems and records a Warning event on it,
// once each time they change.
func (f *Agent) report(key string, obj runtime.Object, probs []problem) {
	msg := joinProblems(probs)
	if f.reported[key] == msg {
		return
	}
	f.reported[key] = msg
	f.log.WithField("attachment", key).Warn(msg)
	f.h.Recorder().Event(obj, corev1.EventTypeWarning, probs[0].reason, "NetworkAttachment "+key+": "+msg)
}

// teardown removes what was made for an attachment. It reports whether
// that failed (the attachment is tried again).
func (f *Agent) teardown(ctx context.Context, key string) (failed bool) {
	m := f.locals[key]
	ns, name, _ := strings.Cut(key, "/")
	owner := vnetflows.LocalOwner(ns, name)
	if slices.Contains(f.owners.List(owner), owner) && f.setFlows(owner, nil) != nil {
		failed = true
	}
	if m == nil {
		return failed
	}
	return f.teardownMade(ctx, key, m.want) || failed
}

// teardownMade removes want's interface and port.
func (f *Agent) teardownMade(ctx context.Context, key string, want desired) bool {
	if err := f.host.detach(ctx, want.link.Name, want.link.Netns); err != nil {
		f.m.hostErrors.Inc()
		f.log.WithError(err).WithField("attachment", key).Warn("cannot remove the attachment's interface; retrying")
		return true
	}
	if f.locals[key] != nil {
		f.log.WithFields(logrus.Fields{"attachment": key, "interface": want.link.Name, "netns": want.link.Netns}).Info("attachment's interface removed")
	}
	delete(f.locals, key)
	return false
}

// writeStatus applies s to a's status unless it holds it already. It
// reports whether the status is as wanted.
func (f *Agent) writeStatus(ctx context.Context, a *vnet.NetworkAttachment, s hostStatus) bool {
	if hostStatusOf(a).equal(s) {
		return true
	}
	if err := applyStatus(ctx, f.dyn, f.h.Node().Name, a.Namespace, a.Name, a.UID, s); err != nil {
		f.m.statusWrites.WithLabelValues("error").Inc()
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			// Gone, or another object of that name: its own event
			// follows.
			f.log.WithError(err).Debug("status not written")
			return true
		}
		f.log.WithError(err).Warn("cannot write the attachment's status; retrying")
		return false
	}
	f.m.statusWrites.WithLabelValues("ok").Inc()
	return true
}

func parseMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		return nil
	}
	return m
}
