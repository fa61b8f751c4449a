package egressfirewallfeature

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"nodeflow/agent/feature"
	"nodeflow/datapath/egressfirewallflows"
	"nodeflow/datapath/plan"
	"nodeflow/lib/syncloop"
	"nodeflow/model/dnsnames"
	"nodeflow/model/egressfirewall"
)

// Options configure the egress firewall.
type Options struct {
	// Dynamic reads the two CRDs, which the agent's typed client cannot;
	// nil builds one from the host's API client configuration.
	Dynamic dynamic.Interface
	// ResolvConf is the resolver configuration whose nameservers look up
	// dnsNames (default /etc/resolv.conf); DNSServers ("host:port"), when
	// set, are used instead.
	ResolvConf string
	DNSServers []string
	// DNS tunes the name cache (TTL floor and ceiling, back-off, limits);
	// Servers, ResolvConf, Exclude and Log are set by the firewall.
	DNS dnsnames.Options
	// ClusterDNSServices are the cluster DNS Services whose answers pods
	// receive are learned from: through their own ClusterIPs, and
	// straight from the endpoints of the EndpointSlices the EndpointSlice
	// controller made for them, in both cases only when a pod of the
	// Service's namespace sent the reply (datapath/egressfirewallflows.DNSSources). nil
	// takes DefaultClusterDNSService; an empty list trusts no Service.
	ClusterDNSServices []types.NamespacedName
	// TrustedDNS are resolvers outside the pod network, besides the
	// agent's own (ResolvConf, DNSServers), whose answers are learned
	// from when they reach a pod from the gateway or the host: a
	// node-local DNS cache's link-local address, say. They must not
	// overlap the pod or service networks (CheckTrustedDNS). Replies
	// from any other source reach the pod unlearned and are counted.
	TrustedDNS []netip.Prefix
	// MaxHold bounds how long a DNS reply is held while its addresses are
	// installed (default 1 s); a reply not released by then is dropped,
	// and the pod's resolver asks again. MaxHeld bounds the replies held
	// at once (default 512); more are dropped.
	MaxHold time.Duration
	MaxHeld int
	// CounterInterval is how often the denied-packet counters are read
	// from the switch (default 10 s).
	CounterInterval time.Duration
	// StatusTimeout bounds one status write (default 10 s).
	StatusTimeout time.Duration
}

// Defaults of Options.
const (
	DefaultMaxHold         = time.Second
	DefaultMaxHeld         = 512
	DefaultCounterInterval = 10 * time.Second
	DefaultStatusTimeout   = 10 * time.Second
)

// retryInterval is the wait before a namespace whose flows could not be
// set is synced again.
const retryInterval = time.Second

// dnsKey is the sync loop's key for the DNS learning flows (a namespace's
// name never holds a slash).
const dnsKey = "/dns"

// Firewall is the egress firewall feature.
type Firewall struct {
	opts Options
	h    feature.Host
	log  logrus.FieldLogger
	pod  feature.Owners
	m    *metrics

	dyn     dynamic.Interface
	factory dynamicinformer.DynamicSharedInformerFactory
	efInf   cache.SharedIndexInformer
	enpInf  cache.SharedIndexInformer
	nodeInf cache.SharedIndexInformer
	podInf  cache.SharedIndexInformer

	names *dnsnames.Cache
	conj  *plan.IDAllocator
	// trust keeps the sources whose DNS replies are learned from.
	trust *dnsTrust
	// seeds are the references taken on names at start-up (restart.go).
	seeds []string

	// loop syncs the namespaces marked, and the DNS flows (dnsKey); its
	// passes (the loop's and the DNS learner's) run one at a time, each
	// taking the cache's changed names too.
	loop *syncloop.Keyed[string]
	// dnsDirty: a namespace synced in this pass gained or lost its
	// dnsName rules, so the DNS flows follow.
	dmu      sync.Mutex
	dnsDirty bool

	// Sync state, under mu.
	mu        sync.Mutex
	ns        map[string]*nsState
	byName    map[string]map[string]struct{} // dnsName -> namespaces whose enforced rules use it
	withNodes map[string]struct{}            // namespaces whose enforced rules select nodes
	withDNS   map[string]struct{}            // namespaces whose enforced rules name DNS names
	dnsPods   []netip.Addr                   // the pod addresses DNSOwner holds
	dnsSrc    egressfirewallflows.DNSSources // the sources DNSOwner's flows trust

	running atomic.Bool
	status  *statusWriter
	events  *reporter
	learn   *learner
}

// nsState is what the firewall enforces in one namespace.
type nsState struct {
	// enforced is the policy whose rules are installed; nil for none.
	enforced *egressfirewall.Policy
	// names are the dnsNames registered in the cache for enforced.
	names []string
	// rules and flows counted in the metrics.
	rules, flows int
	// failed: the last set failed; retried.
	failed bool
}

// New returns the egress firewall feature.
func New(opts Options) *Firewall {
	feature.DefaultIfUnset(&opts.MaxHold, DefaultMaxHold)
	feature.DefaultIfUnset(&opts.MaxHeld, DefaultMaxHeld)
	feature.DefaultIfUnset(&opts.CounterInterval, DefaultCounterInterval)
	feature.DefaultIfUnset(&opts.StatusTimeout, DefaultStatusTimeout)
	f := &Firewall{
		opts: opts,
		ns:   map[string]*nsState{}, byName: map[string]map[string]struct{}{},
		withNodes: map[string]struct{}{}, withDNS: map[string]struct{}{},
		conj: plan.NewIDAllocator(plan.EgressFirewallConjBlocks),
	}
	f.loop = syncloop.NewKeyed(f.pass, syncloop.KeyedOptions{RetryInterval: retryInterval})
	return f
}

// Name implements feature.Feature.
func (f *Firewall) Name() string { return "egressfirewall" }

// Owns implements feature.Feature: table 50's rules, guards and DNS
// learning flows.
func (f *Firewall) Owns() []plan.Feature { return []plan.Feature{plan.FeatureEgressFirewall} }

// PacketIns implements feature.PacketInHandler: DNS replies held for
// learning.
func (f *Firewall) PacketIns() []feature.PacketInCategory {
	return []feature.PacketInCategory{{Category: plan.PacketInDNS, Queue: f.opts.MaxHeld}}
}

// Init implements feature.Feature: the informers (both CRDs through the
// dynamic client, Nodes for nodeSelector rules, this node's pods for DNS
// learning), the name cache and the metrics.
func (f *Firewall) Init(h feature.Host) error {
	f.h, f.log = h, h.Log()
	if err := CheckTrustedDNS(f.opts.TrustedDNS, h.Node().ClusterCIDRs, h.Node().ServiceCIDRs); err != nil {
		return fmt.Errorf("egressfirewall: %w", err)
	}
	f.pod = h.Owners(plan.Pod)
	f.m = newMetrics()
	if err := f.m.register(h.Registry()); err != nil {
		return fmt.Errorf("egressfirewall: metrics: %w", err)
	}
	dyn, err := feature.DynamicClient(h, f.opts.Dynamic)
	if err != nil {
		return fmt.Errorf("egressfirewall: %w", err)
	}
	f.dyn = dyn

	node := h.Node()
	dopts := f.opts.DNS
	dopts.Servers, dopts.ResolvConf = f.opts.DNSServers, f.opts.ResolvConf
	dopts.Exclude = slices.Concat(node.ClusterCIDRs, node.ServiceCIDRs)
	if l, ok := f.log.(*logrus.Entry); ok {
		dopts.Log = l
	}
	names, err := dnsnames.New(dopts)
	if err != nil && len(dopts.Servers) == 0 {
		// No usable resolver configuration: names are still learned from
		// the answers pods receive, and their lookups fail (and are
		// reported) until the node has a resolver.
		f.log.WithError(err).Warn("no resolver for dnsNames; asking the local host's port 53")
		dopts.Servers = []string{"127.0.0.1:53"}
		names, err = dnsnames.New(dopts)
	}
	if err != nil {
		return fmt.Errorf("egressfirewall: dns: %w", err)
	}
	f.names = names
	resolvers := slices.Clone(f.opts.TrustedDNS)
	for _, srv := range names.Servers() {
		ap, err := netip.ParseAddrPort(srv)
		if err != nil {
			continue
		}
		a := ap.Addr().Unmap()
		if a.IsLoopback() {
			continue // the host's own stub resolver: never a pod's
		}
		if a.Zone() != "" || inAny(a, node.ClusterCIDRs, node.ServiceCIDRs) {
			// A cluster DNS Service's address, say: only the Service's
			// own attribution can vouch for a reply from it.
			f.log.WithField("resolver", a).Info("the agent's resolver is in the pod or service network; replies from it are learned only through a cluster DNS Service")
			continue
		}
		resolvers = append(resolvers, netip.PrefixFrom(a, a.BitLen()))
	}
	svcs := f.opts.ClusterDNSServices
	if svcs == nil {
		svcs = []types.NamespacedName{DefaultClusterDNSService}
	}
	trust, err := newDNSTrust(f, svcs, resolvers, f.dnsSourcesChanged)
	if err != nil {
		return err
	}
	f.trust = trust
	h.NamespaceIDs().OnChange(trust.namespaceChanged)
	if err := h.Registry().Register(names); err != nil {
		return fmt.Errorf("egressfirewall: dns metrics: %w", err)
	}
	f.events = newReporter(h, f.m)
	f.status = newStatusWriter(f)
	f.learn = newLearner(f)

	f.factory = dynamicinformer.NewDynamicSharedInformerFactory(dyn, 10*time.Minute)
	f.efInf = f.factory.ForResource(egressfirewall.EgressFirewallGVR).Informer()
	f.enpInf = f.factory.ForResource(egressfirewall.EgressNetworkPolicyGVR).Informer()
	for _, inf := range []cache.SharedIndexInformer{f.efInf, f.enpInf} {
		if err := inf.SetTransform(stripManagedFields); err != nil {
			return fmt.Errorf("egressfirewall: %w", err)
		}
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { f.objectChanged(nil, obj) },
			UpdateFunc: func(old, cur any) { f.objectChanged(old, cur) },
			DeleteFunc: func(obj any) { f.objectChanged(nil, obj) },
		}); err != nil {
			return fmt.Errorf("egressfirewall: %w", err)
		}
	}
	f.nodeInf = h.Informers().Core().V1().Nodes().Informer()
	if _, err := f.nodeInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { f.nodesChanged() },
		UpdateFunc: func(old, cur any) { f.nodeUpdated(old, cur) },
		DeleteFunc: func(any) { f.nodesChanged() },
	}); err != nil {
		return fmt.Errorf("egressfirewall: nodes: %w", err)
	}
	f.podInf = h.LocalPods().Core().V1().Pods().Informer()
	if _, err := f.podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { f.podChanged(nil, obj) },
		UpdateFunc: func(old, cur any) { f.podChanged(old, cur) },
		DeleteFunc: func(obj any) { f.podChanged(nil, obj) },
	}); err != nil {
		return fmt.Errorf("egressfirewall: pods: %w", err)
	}
	h.NamespaceIDs().OnChange(f.markDirty)
	h.OnNodeChange(f.markAll)
	return nil
}

// Sync implements feature.Feature: it starts the CRD informers and waits
// for those whose API is served, installs the guards, and builds every
// namespace that has an egress firewall object, so the start-up bundle
// installs them all at once.
func (f *Firewall) Sync(ctx context.Context) error {
	f.factory.Start(ctx.Done())
	var wait []cache.InformerSynced
	for _, x := range []struct {
		inf cache.SharedIndexInformer
		gvr string
	}{{f.efInf, egressfirewall.EgressFirewallGVR.GroupVersion().String()}, {f.enpInf, egressfirewall.EgressNetworkPolicyGVR.GroupVersion().String()}} {
		if f.served(x.gvr) {
			wait = append(wait, x.inf.HasSynced)
		} else {
			f.log.WithField("api", x.gvr).Warn("API not served (CRD not installed?); its objects are enforced once it is")
		}
	}
	if !cache.WaitForCacheSync(ctx.Done(), wait...) {
		return fmt.Errorf("egressfirewall: informers did not sync: %w", ctx.Err())
	}
	if err := f.trust.start(ctx); err != nil {
		return err
	}
	if err := f.pod.Set(guardOwner, guardState()); err != nil {
		return fmt.Errorf("egressfirewall: guards: %w", err)
	}
	f.seedFromInstalled(ctx)
	f.markAll()
	f.loop.SyncNow(ctx)
	f.releaseSeeds()
	return nil
}

// served reports whether the API server serves the group version; true
// when it cannot tell.
func (f *Firewall) served(gv string) bool {
	kube := f.h.Kube()
	if kube == nil {
		return true
	}
	_, err := kube.Discovery().ServerResourcesForGroupVersion(gv)
	if err == nil {
		return true
	}
	f.log.WithError(err).WithField("api", gv).Debug("discovery")
	return !isNotFound(err)
}

// Run implements feature.Feature: the sync loop, the name cache's
// lookups, the status writer, the DNS learner and the counters.
func (f *Firewall) Run(ctx context.Context) {
	f.running.Store(true)
	go f.names.Run(ctx)
	go f.status.run(ctx)
	go f.learn.run(ctx)
	go f.runCounters(ctx)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-f.names.Changes():
				f.loop.Mark() // the pass takes the changed names
			}
		}
	}()
	f.loop.Loop(ctx)
}

// markDirty asks for namespace ns to be synced.
func (f *Firewall) markDirty(ns string) { f.loop.Mark(ns) }

// markAll asks for every namespace with an object or flows to be synced,
// and for the DNS flows to be rebuilt.
func (f *Firewall) markAll() { f.loop.MarkAll() }

// pass is the sync loop's function: it syncs the namespaces marked (every
// namespace with an object or flows on a full pass) and those using names
// whose addresses changed, then the DNS flows if asked. It returns what
// failed, to be retried.
func (f *Firewall) pass(_ context.Context, keys []string, full bool) (failed []string) {
	dirty := map[string]struct{}{}
	dnsDirty := full
	for _, k := range keys {
		if k == dnsKey {
			dnsDirty = true
		} else {
			dirty[k] = struct{}{}
		}
	}
	if full {
		for _, inf := range []cache.SharedIndexInformer{f.efInf, f.enpInf} {
			for _, k := range inf.GetIndexer().ListKeys() {
				ns, _, _ := cache.SplitMetaNamespaceKey(k)
				dirty[ns] = struct{}{}
			}
		}
		f.mu.Lock()
		for ns := range f.ns {
			dirty[ns] = struct{}{}
		}
		f.mu.Unlock()
	}
	for _, ns := range f.namespacesUsing(f.names.TakeChanged()) {
		dirty[ns] = struct{}{}
	}
	if len(dirty) == 0 && !dnsDirty {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ns := range sortedKeys(dirty) {
		if !f.syncNamespaceLocked(ns) {
			failed = append(failed, ns)
		}
	}
	// A namespace that gained or lost its dnsName rules asks for the DNS
	// flows too.
	f.dmu.Lock()
	dnsDirty = dnsDirty || f.dnsDirty
	f.dnsDirty = false
	f.dmu.Unlock()
	if dnsDirty {
		if err := f.syncDNSFlowsLocked(); err != nil {
			f.log.WithError(err).Error("cannot set the DNS learning flows")
			failed = append(failed, dnsKey)
		}
	}
	f.updateGaugesLocked()
	return failed
}

// objectChanged queues the namespace of an EgressFirewall or
// EgressNetworkPolicy that was added, changed or deleted; a change of the
// status alone (the agents' own writes) only reaches the status writer.
func (f *Firewall) objectChanged(old, cur any) {
	u := unstructuredOf(cur)
	if u == nil {
		return
	}
	if o := unstructuredOf(old); o != nil && specEqual(o, u) && o.GetName() == u.GetName() {
		f.status.objectUpdated(u)
		return
	}
	f.markDirty(u.GetNamespace())
}

// nodeUpdated queues the namespaces with nodeSelector rules when a
// Node's labels or addresses change.
func (f *Firewall) nodeUpdated(old, cur any) {
	o, _ := old.(*corev1.Node)
	n, _ := cur.(*corev1.Node)
	if o != nil && n != nil && mapsEqual(o.Labels, n.Labels) && slices.Equal(nodeAddrs(o), nodeAddrs(n)) {
		return
	}
	f.nodesChanged()
}

// nodesChanged queues the namespaces with nodeSelector rules.
func (f *Firewall) nodesChanged() {
	f.mu.Lock()
	nss := sortedKeys(f.withNodes)
	f.mu.Unlock()
	for _, ns := range nss {
		f.markDirty(ns)
	}
}

// podChanged asks for the DNS flows to be rebuilt when a local pod of a
// namespace with dnsName rules comes, goes or changes its addresses.
func (f *Firewall) podChanged(old, cur any) {
	p := podOf(cur)
	if p == nil {
		return
	}
	if o := podOf(old); o != nil && slices.Equal(podAddrs(o), podAddrs(p)) {
		return
	}
	f.mu.Lock()
	_, ok := f.withDNS[p.Namespace]
	f.mu.Unlock()
	if !ok {
		return
	}
	f.loop.Mark(dnsKey)
}

// dnsSourcesChanged asks for the DNS flows to be rebuilt when the
// trusted sources change.
func (f *Firewall) dnsSourcesChanged() { f.loop.Mark(dnsKey) }

// namespacesUsing returns the namespaces that use names (whose addresses
// changed).
func (f *Firewall) namespacesUsing(names []string) []string {
	if len(names) == 0 {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var nss []string
	for _, n := range names {
		for ns := range f.byName[n] {
			nss = append(nss, ns)
		}
	}
	return nss
}

// objects returns the namespace's EgressFirewalls and
// EgressNetworkPolicies as the informers hold them.
func (f *Firewall) objects(ns string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, inf := range []cache.SharedIndexInformer{f.efInf, f.enpInf} {
		objs, err := inf.GetIndexer().ByIndex(cache.NamespaceIndex, ns)
		if err != nil {
			continue
		}
		for _, o := range objs {
			if u := unstructuredOf(o); u != nil {
				out = append(out, u)
			}
		}
	}
	return out
}

// stripManagedFields drops an object's managed fields before the cache
// stores it.
func stripManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

func unstructuredOf(obj any) *unstructured.Unstructured {
	u, _ := feature.ObjectOf[*unstructured.Unstructured](obj)
	return u
}

func podOf(obj any) *corev1.Pod {
	p, _ := feature.ObjectOf[*corev1.Pod](obj)
	return p
}

// inAny reports whether a is in one of the prefix lists.
func inAny(a netip.Addr, lists ...[]netip.Prefix) bool {
	for _, l := range lists {
		for _, p := range l {
			if p.Contains(a) {
				return true
			}
		}
	}
	return false
}
