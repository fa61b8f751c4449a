package servicefeature

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"nodeflow/agent/feature"
	"nodeflow/datapath/plan"
	"nodeflow/datapath/reconcile"
	"nodeflow/datapath/serviceflows"
	"nodeflow/internal/kubeclient"
	"nodeflow/lib/openflow"
	"nodeflow/lib/syncloop"
	"nodeflow/model/service"
)

// Service proxy timing.
const (
	// serviceMinSyncInterval spaces two service syncs; changes arriving
	// in between merge into one sync, as do those arriving while a sync
	// waits for the bridges. A partial sync costs about 2 ms of CPU at
	// 10,000 Services, so back-to-back changes keep the loop under half a
	// core, and a change never waits more than this for the sync before it.
	serviceMinSyncInterval = 5 * time.Millisecond
	// serviceFullSyncInterval is how often every service port is rebuilt
	// even without changes.
	serviceFullSyncInterval = 15 * time.Minute
	// serviceRetryInterval is the wait before retrying a failed sync.
	serviceRetryInterval = time.Second
	// serviceFlushTimeout bounds the wait for the bridges to hold a sync's
	// flows.
	serviceFlushTimeout = 30 * time.Second
)

// Proxy is the agent's service proxy (in place of kube-proxy):
// informers on every Service and EndpointSlice feed the change trackers of
// package proxy; each sync rebuilds the service ports that changed with
// datapath/serviceflows and sets their reconciler owners on br0 and breth0.
type Proxy struct {
	h       feature.Host
	idle    IdleHandler
	log     logrus.FieldLogger
	metrics *serviceMetrics

	// pod and gw are the proxy's owners on br0 and breth0.
	pod, gw feature.Owners

	svcs   *service.ServiceTracker
	eps    *service.EndpointsTracker
	ids    *plan.IDAllocator
	runner *syncloop.Runner

	svcInf, sliceInf cache.SharedIndexInformer
	// handled says when the trackers hold every object the informers
	// listed: the handlers that feed them run behind the caches.
	handled []cache.InformerSynced
	opts    Options
	// proxyHealth is what kube-proxy's /healthz reports.
	proxyHealth *proxyHealth

	// started is when the proxy started: changes triggered before it are
	// not counted in the network programming latency, whose start the
	// agent never saw (kube-proxy skips them too).
	started time.Time

	// running is set once the bridges are connected (Run): from then on
	// a sync waits for them and flushes stale conntrack entries.
	running atomic.Bool

	// Sync state: syncs run one at a time (the start-up sync, then the
	// Runner's).
	mu    sync.Mutex
	built map[service.ServicePortName]builtPort
	// failed holds the ports whose last build or set failed (a conflict
	// with another service, say): every sync tries them again.
	failed service.ChangeSet
	node   serviceflows.Node
	first  bool // the start-up sync has run
	// check refuses the endpoints that cannot be right (a service
	// address, a broadcast address), as of the last sync; refused counts
	// the endpoints it left out of the built ports.
	check   service.EndpointCheck
	refused int
	// claims decides which external and ingress IPs each port owns, as
	// of the last sync; refusedAddrs are the addresses it refused, by
	// port, counted in the refused-addresses gauge.
	claims       service.AddressCheck
	refusedAddrs map[service.ServicePortName][]service.RefusedAddress
	// nodes follows every Node's addresses and pod subnets.
	nodes clusterNodes
	// installed are br0's service flows as a restarted agent found them,
	// for the start-up sync to keep their group ids (restoreGroupIDs).
	installed []openflow.Flow

	// byID maps group ids (ServiceIDs) to their service port, for the
	// packet-in handler, which must not wait for a sync.
	idMu sync.Mutex
	byID map[uint32]service.ServicePortName

	repMu    sync.Mutex
	reported map[string]string // object/field -> last message reported

	// peaks are the high-water marks of built and byID (costs.go).
	peaks mapPeaks

	// health serves the health-check node ports (services_healthcheck.go).
	health *healthChecks
	// hostNAT DNATs the host's own traffic to its node ports, external
	// and ingress IPs (services_hostnat.go).
	hostNAT *hostNAT
}

// builtPort is what the last sync installed for one service port.
type builtPort struct {
	port *service.ServicePort
	// used are the endpoints its groups hold (internal and external).
	used []service.Endpoint
	ids  groupIDs
	// idled: the port is idled and left to the idle handler.
	idled bool
	// refused counts the endpoints left out because they cannot be right.
	refused int
	// lost are its addresses another port has (contested.go), nil for
	// none.
	lost *lostClaims
}

// Options configure the service proxy.
type Options struct {
	// Idle takes over idled service ports (the unidling feature); nil
	// leaves them dropped.
	Idle IdleHandler
	// HealthzAddr serves kube-proxy's /healthz and /livez (its port
	// 10256, which load balancers probe); "" serves none.
	HealthzAddr string
	// MetricsAddr serves kube-proxy's /proxyMode and /metrics (its port
	// 10249); "" serves none.
	MetricsAddr string
	// ExternalIPs and IngressIPs are the operator's policies for the
	// addresses of spec.externalIPs and of status.loadBalancer.ingress:
	// the zero value allows none.
	ExternalIPs, IngressIPs service.CIDRPolicy
}

// New returns the service proxy feature: in place of kube-proxy, it
// watches every Service and EndpointSlice and load-balances them on br0.
func New(opts Options) *Proxy {
	return &Proxy{
		idle: opts.Idle, opts: opts, proxyHealth: newProxyHealth(),
		ids:   plan.NewIDAllocator(plan.ServiceGroups),
		built: map[service.ServicePortName]builtPort{}, failed: service.ChangeSet{}, byID: map[uint32]service.ServicePortName{},
		reported: map[string]string{}, started: time.Now(),
		refusedAddrs: map[service.ServicePortName][]service.RefusedAddress{},
		nodes:        clusterNodes{nodes: map[string]nodeFacts{}},
	}
}

// Name implements feature.Feature.
func (p *Proxy) Name() string { return "services" }

// Owns implements feature.Feature: one service port's br0 flows and group,
// and its breth0 flows.
func (p *Proxy) Owns() []plan.Feature {
	return []plan.Feature{plan.FeatureService, plan.FeatureServiceGateway}
}

// Init implements feature.Feature.
func (p *Proxy) Init(h feature.Host) error {
	p.h = h
	p.log = h.Log()
	p.pod, p.gw = h.Owners(plan.Pod), h.Owners(plan.Gateway)
	p.svcs = service.NewServiceTracker(p.reportInput)
	p.eps = service.NewEndpointsTracker(p.reportInput)
	p.metrics = newServiceMetrics(h.Registry(), p.svcs.PendingCount, p.eps.PendingCount)
	p.health = newHealthChecks(p.log)
	p.hostNAT = newHostNAT(h.Registry(), p.log)
	p.runner = syncloop.NewRunner(p.syncReportingHealth, syncloop.RunnerOptions{
		MinInterval: serviceMinSyncInterval, MaxInterval: serviceFullSyncInterval, RetryInterval: serviceRetryInterval,
	})
	p.nodes.changed = p.runner.Run
	// A change of the node's facts (a secondary address, say) rebuilds
	// every service: sync compares the node model.
	h.OnNodeChange(p.runner.Run)
	return p.watch(h)
}

// Sync implements feature.Feature: it reads the group ids br0's service
// flows use (a restarted agent keeps them), then builds every service.
// It first waits until the trackers hold every Service and EndpointSlice
// the caches listed: a first build without some of them would have the
// start-up bundle delete their flows, and a later pass put them back.
func (p *Proxy) Sync(ctx context.Context) error {
	if !kubeclient.WaitSynced(ctx, p.handled...) {
		return fmt.Errorf("services: the Services and EndpointSlices listed did not all reach the proxy: %w", ctx.Err())
	}
	p.enableHostNAT()
	if installed, err := p.readServiceFlows(ctx); err != nil {
		p.log.WithError(err).Warn("cannot read the installed service flows; group ids start afresh")
	} else {
		p.installed = installed
	}
	start := time.Now()
	if err := p.sync(ctx, true); err != nil {
		p.log.WithError(err).Warn("first service sync")
		return nil
	}
	// The loop's first sync need not build every port again.
	p.runner.SyncedFull(start)
	return nil
}

// Run implements feature.Feature: the sync loop, until ctx ends.
func (p *Proxy) Run(ctx context.Context) {
	p.running.Store(true)
	gather, _ := p.h.Registry().(prometheus.Gatherer)
	if gather == nil {
		gather = prometheus.NewRegistry()
	}
	serveProxyEndpoints(ctx, p.log, p.proxyHealth, gather, p.opts.HealthzAddr, p.opts.MetricsAddr)
	p.runner.Loop(ctx)
	p.health.closeAll()
}

// PacketIns implements feature.PacketInHandler: the rejects of new
// connections to service ports without endpoints.
func (p *Proxy) PacketIns() []feature.PacketInCategory {
	return []feature.PacketInCategory{{Category: plan.PacketInReject}}
}

// watch registers the Service and EndpointSlice informers (the whole
// cluster); the agent starts them.
func (p *Proxy) watch(h feature.Host) error {
	f := h.Informers()
	p.svcInf = f.Core().V1().Services().Informer()
	p.sliceInf = f.Discovery().V1().EndpointSlices().Informer()
	// The caches hold every Service and EndpointSlice of the cluster, each
	// as the proxy reads it (processed once), not the object.
	if err := p.svcInf.SetTransform(processService); err != nil {
		return fmt.Errorf("services: services: %w", err)
	}
	if err := p.sliceInf.SetTransform(processSlice); err != nil {
		return fmt.Errorf("services: endpointslices: %w", err)
	}
	svc := func(obj any) *service.Service {
		if s, ok := feature.ObjectOf[*service.Service](obj); ok {
			return s
		}
		if s, ok := feature.ObjectOf[*corev1.Service](obj); ok { // not through the transform
			return service.ServiceOf(s)
		}
		return nil
	}
	slice := func(obj any) *service.Slice {
		if s, ok := feature.ObjectOf[*service.Slice](obj); ok {
			return s
		}
		if s, ok := feature.ObjectOf[*discovery.EndpointSlice](obj); ok { // not through the transform
			return service.SliceOf(s)
		}
		return nil
	}
	// queued counts a recorded change and asks for a sync.
	queued := func(changes prometheus.Counter) {
		changes.Inc()
		p.metrics.lastQueued.SetToCurrentTime()
		p.proxyHealth.queued()
		p.runner.Run()
	}
	recordSvc := func(old, cur *service.Service) {
		if (old != nil || cur != nil) && p.svcs.RecordService(old, cur) {
			queued(p.metrics.serviceChanges)
		}
	}
	recordSlice := func(old, cur *service.Slice) {
		if (old != nil || cur != nil) && p.eps.RecordSlice(old, cur) {
			queued(p.metrics.endpointChanges)
		}
	}
	svcReg, err := p.svcInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { recordSvc(nil, svc(obj)) },
		UpdateFunc: func(old, cur any) { recordSvc(svc(old), svc(cur)) },
		DeleteFunc: func(obj any) { recordSvc(svc(obj), nil) },
	})
	if err != nil {
		return fmt.Errorf("services: services: %w", err)
	}
	sliceReg, err := p.sliceInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { recordSlice(nil, slice(obj)) },
		UpdateFunc: func(old, cur any) { recordSlice(slice(old), slice(cur)) },
		DeleteFunc: func(obj any) { recordSlice(slice(obj), nil) },
	})
	if err != nil {
		return fmt.Errorf("services: endpointslices: %w", err)
	}
	// Every Node's addresses and pod subnets: which addresses a Service
	// may claim, and which endpoint addresses cannot be right.
	nodeReg, err := p.nodes.watch(f.Core().V1().Nodes().Informer())
	if err != nil {
		return err
	}
	p.handled = []cache.InformerSynced{svcReg.HasSynced, sliceReg.HasSynced, nodeReg.HasSynced}
	return nil
}

// nodeModel is what the builders need to know about this node.
func (p *Proxy) nodeModel() serviceflows.Node {
	a := p.h.Node()
	n := serviceflows.Node{
		Name: a.Name, Zone: a.Zone, ClusterCIDRs: a.ClusterCIDRs, Masquerade: a.Masquerade,
		UplinkPort: a.Ports.Uplink, PatchPort: a.Ports.GatewayPatch, NodePortAddrs: slices.Clone(a.NodePortAddrs),
	}
	if n.NodePortAddrs == nil {
		// A host that does not decide them (tests): the node IPs.
		n.NodePortAddrs = a.Addrs()
	}
	have := map[service.Family]bool{}
	for _, ip := range a.Addrs() {
		if f := service.FamilyOf(ip); !have[f] {
			have[f] = true
			n.IPs = append(n.IPs, ip)
		} else {
			n.Secondary = append(n.Secondary, ip)
		}
	}
	// The host's other addresses (hostaddrs.go), sorted: sameNode
	// compares them in order.
	n.Secondary = append(n.Secondary, a.Secondary...)
	slices.SortFunc(n.Secondary, netip.Addr.Compare)
	n.Secondary = slices.Compact(n.Secondary)
	return n
}

// checks returns what the proxy knows that makes an endpoint address
// wrong (the service CIDRs and every Service's ClusterIP, as no endpoint
// is a service address; the IPv4 subnets whose broadcast address it knows:
// this node's pod subnets, the cluster networks, the node's network; every
// Node's pod subnets' network and broadcast addresses), and which
// external and ingress IPs a Service may claim (proxy.AddressCheck): both
// from the cluster's facts.
func (p *Proxy) checks() (service.EndpointCheck, service.AddressCheck) {
	n := p.h.Node()
	nodeAddrs, subnets := p.nodes.facts()
	c := service.EndpointCheck{ServiceCIDRs: n.ServiceCIDRs, ClusterIP: p.svcs.ClusterIPOwner, NodeSubnets: subnets}
	c.Subnets = slices.Concat(n.PodCIDRs, n.ClusterCIDRs, n.IPs)
	pods := slices.Clone(n.ClusterCIDRs)
	for _, s := range subnets {
		pods = append(pods, s.Prefix)
	}
	slices.SortFunc(pods, func(x, y netip.Prefix) int {
		if c := x.Addr().Compare(y.Addr()); c != 0 {
			return c
		}
		return x.Bits() - y.Bits()
	})
	var masq []netip.Prefix
	for _, m := range []netip.Prefix{n.Masquerade.V4.Subnet, n.Masquerade.V6.Subnet} {
		if m.IsValid() {
			masq = append(masq, m)
		}
	}
	claims := service.AddressCheck{
		Facts:       service.ClusterFacts{ServiceCIDRs: n.ServiceCIDRs, PodCIDRs: slices.Compact(pods), NodeAddrs: nodeAddrs, Masquerade: masq},
		ExternalIPs: p.opts.ExternalIPs, IngressIPs: p.opts.IngressIPs, ClusterIP: p.svcs.ClusterIPOwner,
	}
	return c, claims
}

// outside returns the addresses of addrs in none of cidrs.
func outside(addrs []netip.Addr, cidrs []netip.Prefix) []netip.Addr {
	var out []netip.Addr
	for _, a := range addrs {
		if !slices.ContainsFunc(cidrs, func(p netip.Prefix) bool { return p.Contains(a) }) {
			out = append(out, a)
		}
	}
	return out
}

func sameNode(x, y serviceflows.Node) bool {
	return x.Name == y.Name && x.Zone == y.Zone && slices.Equal(x.IPs, y.IPs) && slices.Equal(x.Secondary, y.Secondary) &&
		slices.Equal(x.NodePortAddrs, y.NodePortAddrs) &&
		slices.Equal(x.ClusterCIDRs, y.ClusterCIDRs) && x.Masquerade == y.Masquerade &&
		x.UplinkPort == y.UplinkPort && x.PatchPort == y.PatchPort
}

// usedEndpoints returns the endpoints the port's groups hold: the union of
// those for internal and external traffic.
func usedEndpoints(port *service.ServicePort, eps []service.Endpoint, nodeName, zone string) []service.Endpoint {
	in, ex := service.Categorize(port, eps, nodeName, zone)
	if len(in) == len(ex) && (len(in) == 0 || &in[0] == &ex[0]) {
		// The same endpoints for both (the usual case), in the tracker's
		// order (sorted, without duplicates): no copy.
		return in
	}
	all := slices.Concat(in, ex)
	slices.SortFunc(all, func(x, y service.Endpoint) int {
		if c := x.IP.Compare(y.IP); c != 0 {
			return c
		}
		return int(x.Port) - int(y.Port)
	})
	return slices.CompactFunc(all, func(x, y service.Endpoint) bool { return x.IP == y.IP && x.Port == y.Port })
}

// sync applies the trackers' pending changes: it rebuilds each changed
// service port (every port when full), sets its owners, waits for both
// bridges to hold the result, then flushes stale UDP conntrack entries and
// stale affinity bindings.
func (p *Proxy) sync(ctx context.Context, full bool) error {
	start := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	changed := p.svcs.Update()
	changed.Merge(p.eps.Update())
	triggers := p.eps.TakeTriggerTimes()
	changed.Merge(p.failed)
	clear(p.failed)
	node := p.nodeModel()
	check, claims := p.checks()
	fullSync := full || !p.first || !sameNode(node, p.node) || !check.Same(&p.check) || !claims.Same(&p.claims)
	// A ClusterIP taken or freed outside the service CIDRs changes the
	// usable endpoints of the ports with an endpoint there (inside them,
	// every address is refused anyway), and the claims of the ports that
	// name it as an external or ingress IP: the ClusterIP always wins.
	moves := p.svcs.TakeClusterIPChanges()
	if moved := outside(moves, check.ServiceCIDRs); len(moved) > 0 && !fullSync {
		changed.Merge(p.eps.PortsUsing(moved))
		changed.Merge(p.portsClaiming(moved))
	}
	p.guardAddresses(moves)
	var restored []string
	if !p.first && p.installed != nil {
		restored = p.restoreGroupIDs(p.installed)
		p.installed = nil
		p.log.WithField("groups", len(restored)).Info("kept the group ids installed")
	}
	if fullSync {
		for n := range p.svcs.Ports() {
			changed[n] = struct{}{}
		}
		for n := range p.built {
			changed[n] = struct{}{}
		}
		if err := p.pod.Set(serviceflows.RejectMeterOwner, reconcile.State{Meters: []openflow.MeterEntry{serviceflows.RejectMeter()}}); err != nil {
			p.log.WithError(err).Error("reject meter")
		}
		p.guardCIDRs(check.ServiceCIDRs)
	}
	p.node = node
	p.check = check
	p.claims = claims
	p.first = true

	s := portSync{node: &node, check: &check}
	// Ports that give up an address go first, so that the port taking it
	// over in the same sync finds it free (a ClusterIP over an external IP
	// that claimed it, say) rather than contested.
	type claimed struct {
		name    service.ServicePortName
		port    *service.ServicePort // nil: gone
		refused []service.RefusedAddress
	}
	var later []claimed
	for _, name := range changed.Sorted() {
		c := claimed{name: name}
		if port, ok := p.svcs.Port(name); ok {
			c.port, c.refused = claims.Claims(port)
		}
		if old, had := p.built[name]; had && gaveUp(old.port, c.port) {
			p.syncPort(&s, c.name, c.port, c.refused)
			continue
		}
		later = append(later, c)
	}
	for _, c := range later {
		p.syncPort(&s, c.name, c.port, c.refused)
	}
	p.metrics.services.Set(float64(len(p.built)))
	p.metrics.refusedEndpoints.Set(float64(p.refused))
	p.shrinkMaps()
	if restored != nil {
		p.releaseUnbuilt(restored)
	}
	p.healthSync(changed.Sorted(), node.Name)
	p.syncHostNAT(fullSync, s.natDirty)

	// Wait for the bridges, then clean up after the endpoints that left.
	if p.running.Load() && len(changed) > 0 {
		fctx, cancel := context.WithTimeout(ctx, serviceFlushTimeout)
		defer cancel()
		if err := p.h.Flush(fctx); err != nil {
			p.metrics.syncErrors.Inc()
			p.tellIdle(s.idle) // the built state records them already
			return fmt.Errorf("services: waiting for the bridges: %w", err)
		}
		if len(s.flushes) > 0 {
			if err := p.h.Send(fctx, plan.Pod, s.flushes...); err != nil {
				p.log.WithError(err).Warn("cannot flush stale conntrack entries and affinity bindings")
			} else {
				p.metrics.staleFlushes.Add(float64(len(s.flushes)))
			}
		}
	}
	p.tellIdle(s.idle)
	now := time.Now()
	for _, ts := range triggers {
		for _, t := range ts {
			if d := now.Sub(t); d >= 0 && t.After(p.started) {
				p.metrics.programming.Observe(d.Seconds())
			}
		}
	}
	took := time.Since(start).Seconds()
	p.metrics.syncDuration.Observe(took)
	if fullSync {
		p.metrics.fullSync.Observe(took)
	} else {
		p.metrics.partialSync.Observe(took)
	}
	p.metrics.lastSync.SetToCurrentTime()
	if len(changed) > 0 {
		p.log.WithFields(logrus.Fields{"ports": len(changed), "full": full, "took": time.Since(start).String()}).Debug("services synced")
	}
	return nil
}

// portSync is what the ports of one sync share and gather.
type portSync struct {
	node  *serviceflows.Node
	check *service.EndpointCheck
	// flushes are the conntrack flushes and affinity deletes to send once
	// the bridges hold the sync's flows; idle the changes to tell the idle
	// handler.
	flushes []openflow.Message
	idle    []idleChange
	// natDirty: a change touches the host's own-traffic DNAT.
	natDirty bool
}

// gaveUp reports whether a port built with old claims an external or
// ingress IP, or a node port, that cur (nil: the port is gone) does not.
func gaveUp(old, cur *service.ServicePort) bool {
	if old == nil {
		return false
	}
	if cur == nil {
		return true
	}
	lost := func(was, is []netip.Addr) bool {
		for _, a := range was {
			if !slices.Contains(is, a) {
				return true
			}
		}
		return false
	}
	return lost(old.ExternalIPs, cur.ExternalIPs) || lost(old.LoadBalancerIPs, cur.LoadBalancerIPs) ||
		(old.NodePort != 0 && old.NodePort != cur.NodePort)
}

// portsClaiming returns the service ports that name one of addrs as an
// external or ingress IP (claimed or refused). It reads every port: call
// it only when addrs is not empty.
func (p *Proxy) portsClaiming(addrs []netip.Addr) service.ChangeSet {
	out := service.ChangeSet{}
	for n, sp := range p.svcs.Ports() {
		for _, a := range addrs {
			if slices.Contains(sp.ExternalIPs, a) || slices.Contains(sp.LoadBalancerIPs, a) {
				out[n] = struct{}{}
				break
			}
		}
	}
	return out
}

// syncPort rebuilds one service port: port is its model with only the
// addresses it owns (nil when it is gone), refused the addresses it named
// but may not have. p.mu is held.
func (p *Proxy) syncPort(s *portSync, name service.ServicePortName, port *service.ServicePort, refused []service.RefusedAddress) {
	node := s.node
	old, had := p.built[name]
	s.natDirty = s.natDirty || (had && hostNATRelevant(old.port)) || (port != nil && hostNATRelevant(port))
	p.noteRefusals(name, refused)
	if port == nil {
		if !had {
			return
		}
		p.set(p.pod, serviceflows.Owner(name), reconcile.State{})
		p.set(p.gw, serviceflows.GatewayOwner(name), reconcile.State{})
		p.forget(name, old, nil)
		p.refused -= old.refused
		s.idle = append(s.idle, idleChanges(name, nil, nil, old.idled, false, false)...)
		for _, m := range serviceflows.StaleConntrack(node, old.port.Protocol, old.used, nil) {
			s.flushes = append(s.flushes, m)
		}
		delete(p.built, name)
		return
	}
	// Endpoints that cannot be right are left out, each reported on
	// its EndpointSlice; the rest of the service keeps working.
	eps, bad := p.eps.Usable(name, s.check)
	for _, err := range bad {
		p.reportInput(err)
	}
	refusedEps := len(p.eps.Endpoints(name)) - len(eps)
	var keys []string
	out, err := serviceflows.Build(node, serviceflows.Input{Port: port, Endpoints: eps, WasIdled: had && old.idled}, func(key string) (uint32, error) {
		keys = append(keys, key)
		return p.ids.Get(key)
	})
	podSet, podLost := false, (*lostClaims)(nil)
	if err == nil {
		out.Pod.Charge = p.charge(name)
		out.Gateway.Charge = out.Pod.Charge
		podSet, podLost = p.setShared(p.pod, out.Owner, out.Pod, name, port)
	}
	if err == nil && !podSet {
		err = fmt.Errorf("services: %s: br0's store refused its state", name)
	}
	if err != nil {
		p.metrics.buildErrors.Inc()
		p.log.WithError(err).WithField("service", name.String()).Error("cannot build or set service flows; keeping what was installed")
		p.failed[name] = struct{}{}
		// Give back the ids this attempt took that the installed
		// state does not use.
		for _, k := range keys {
			if _, used := old.ids.lookup(k); !used {
				p.ids.Release(k)
			}
		}
		return
	}
	gwSet, gwLost := p.setShared(p.gw, out.GatewayOwner, out.Gateway, name, port)
	if !gwSet {
		// br0 has the new state; breth0 keeps the old one until a
		// later sync.
		p.metrics.buildErrors.Inc()
		p.failed[name] = struct{}{}
	}
	lost := podLost.merge(gwLost)
	if lost != nil {
		// Another service has some of its addresses: try again on
		// every sync, to take them over once it lets go.
		p.failed[name] = struct{}{}
	}
	used := usedEndpoints(port, eps, node.Name, node.Zone)
	p.forget(name, old, out.GroupIDs)
	p.idMu.Lock()
	for _, id := range out.GroupIDs {
		p.byID[id] = name
	}
	p.idMu.Unlock()
	if had {
		for _, m := range serviceflows.StaleConntrack(node, port.Protocol, old.used, used) {
			s.flushes = append(s.flushes, m)
		}
		for _, m := range serviceflows.StaleAffinity(node, port, old.used, used) {
			s.flushes = append(s.flushes, m)
		}
	}
	s.idle = append(s.idle, idleChanges(name, port, out.GroupIDs, had && old.idled, out.Idled, service.HasEndpoints(eps))...)
	p.refused += refusedEps - old.refused
	p.built[name] = builtPort{port: port, used: used, ids: compactIDs(out.GroupIDs), idled: out.Idled, refused: refusedEps, lost: lost}
}

// forget releases the group ids old used that keep is without, and their
// reverse mapping.
func (p *Proxy) forget(name service.ServicePortName, old builtPort, keep map[string]uint32) {
	p.idMu.Lock()
	defer p.idMu.Unlock()
	for _, g := range old.ids {
		if _, ok := keep[g.key]; ok {
			continue
		}
		p.ids.Release(g.key)
		if p.byID[g.id] == name {
			delete(p.byID, g.id)
		}
	}
}

// set replaces owner's state in store; a failure (a conflict with another
// service's flows, say) is logged and leaves the owner as it was.
func (p *Proxy) set(store feature.Owners, owner string, st reconcile.State) bool {
	if err := store.Set(owner, st); err != nil {
		p.log.WithError(err).WithField("owner", owner).Error("cannot set service flows")
		return false
	}
	return true
}

// portOf returns the service port whose group (and ServiceID) is id.
func (p *Proxy) portOf(id uint32) (service.ServicePortName, bool) {
	p.idMu.Lock()
	defer p.idMu.Unlock()
	n, ok := p.byID[id]
	return n, ok
}

// reportKey is what reportInput reports once: an object's field, or for a
// refused address (several in one field), the refusal itself.
func reportKey(ie *service.InputError) string {
	key := ie.Kind + "/" + ie.Namespace + "/" + ie.Name + "/" + ie.Field
	if errors.Is(ie, service.ErrAddressRefused) {
		key += "/" + ie.Error()
	}
	return key
}

// eventName names the Event of a report after the object and the
// message: every node decides the same on the same input, so the first
// node's report stands for all, and a cluster of thousands of nodes makes
// one Event, not one per node.
func eventName(ie *service.InputError) string {
	h := fnv.New64a()
	h.Write([]byte(ie.Kind + "/" + ie.Error()))
	return fmt.Sprintf("%s.nodeflow-%016x", ie.Name, h.Sum64())
}

// forgetReported forgets that err was reported, so that it is reported
// again when it comes back.
func (p *Proxy) forgetReported(err *service.InputError) {
	p.repMu.Lock()
	delete(p.reported, reportKey(err))
	p.repMu.Unlock()
}

// reportInput logs bad input once per object and field and message, and
// records a Warning event on the object: reason NodeflowBadInput, or
// NodeflowAddressRefused for an external or ingress IP the Service may
// not claim.
func (p *Proxy) reportInput(err error) {
	var ie *service.InputError
	if !errors.As(err, &ie) {
		p.log.WithError(err).Warn("service input")
		return
	}
	key := reportKey(ie)
	p.repMu.Lock()
	same := p.reported[key] == err.Error()
	p.reported[key] = err.Error()
	p.repMu.Unlock()
	if same {
		return
	}
	p.metrics.inputErrors.WithLabelValues(ie.Kind).Inc()
	p.log.WithError(err).WithFields(logrus.Fields{"kind": ie.Kind, "namespace": ie.Namespace, "name": ie.Name, "field": ie.Field}).
		Warn("bad input ignored; the rest keeps working")
	kube := p.h.Kube()
	if kube == nil {
		return
	}
	reason := "NodeflowBadInput"
	if errors.Is(err, service.ErrAddressRefused) {
		reason = "NodeflowAddressRefused"
	}
	apiVersion := "v1"
	if ie.Kind == "EndpointSlice" {
		apiVersion = "discovery.k8s.io/v1"
	}
	ns := ie.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: eventName(ie), Namespace: ns},
		InvolvedObject: corev1.ObjectReference{Kind: ie.Kind, Namespace: ie.Namespace, Name: ie.Name, APIVersion: apiVersion, FieldPath: ie.Field},
		Reason:         reason, Message: err.Error(), Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "nodeflow-agent", Host: p.h.Node().Name},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := kube.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			p.log.WithError(err).Debug("cannot record event")
		}
	}()
}

// packetIn answers a reject packet-in from br0: a new connection to a
// service port without endpoints gets a TCP RST+ACK or an ICMP port
// unreachable, sent back out of the port it came in on.
//
// The host's connections are the exception. They reach br0 from the host
// masquerade address, through breth0's SNAT conntrack zone, and the
// answer could go back the same way, but Open vSwitch 3.1's userspace
// conntrack aborts (an assertion in conn_update_state) on a reset in the
// reply direction of such a connection. So the answer to the host is
// addressed to the source the host uses toward the service (its route's
// source: the masquerade address or the node IP) and sent by packet-out
// straight to breth0's LOCAL port, past conntrack; the entry left in
// breth0's zone expires on its own.
func (p *Proxy) HandlePacketIn(pi feature.PacketIn) {
	pin := pi.Msg
	if pi.Bridge != plan.Pod || len(pin.Userdata) < 5 || pin.Userdata[0] != byte(plan.PacketInReject) {
		return
	}
	id := uint32(pin.Userdata[1])<<24 | uint32(pin.Userdata[2])<<16 | uint32(pin.Userdata[3])<<8 | uint32(pin.Userdata[4])
	if p.Reject(pin) {
		if n, ok := p.portOf(id); ok {
			p.log.WithFields(logrus.Fields{"service": n.String(), "in_port": pin.InPort()}).Trace("rejected a connection to a service without endpoints")
		}
	}
}

// Reject answers the packet of a br0 packet-in as a service without
// endpoints does: a TCP RST+ACK, or an ICMP port unreachable, sent back to
// the port it came from (to breth0's LOCAL port for the host's own
// traffic). It reports whether it sent one. The unidling feature uses it
// for the packets it held past their hold time.
func (p *Proxy) Reject(pin *openflow.PacketIn) bool {
	node := p.h.Node()
	frame, bridge, outPort := pin.Data, plan.Pod, pin.InPort()
	if src, dst, ok := frameAddrs(frame); ok {
		if mq, ok := node.Masquerade.For(src); ok && mq.Host == src {
			hostSrc, ok := hostSource(node, dst)
			if !ok {
				p.metrics.rejectErrors.Inc()
				return false
			}
			f, err := withSource(frame, node.HostMAC, hostSrc)
			if err != nil {
				p.metrics.rejectErrors.Inc()
				p.log.WithError(err).Debug("cannot answer reject packet-in")
				return false
			}
			frame, bridge, outPort = f, plan.Gateway, openflow.PortLocal
		}
	}
	reply, err := rejectReply(frame)
	if err != nil {
		if !errors.Is(err, errNotRejectable) {
			p.metrics.rejectErrors.Inc()
			p.log.WithError(err).Debug("cannot answer reject packet-in")
		}
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	out := &openflow.PacketOut{InPort: openflow.PortController, Actions: []openflow.Action{openflow.OutputPort(outPort)}, Data: reply}
	if err := p.h.Send(ctx, bridge, out); err != nil {
		p.metrics.rejectErrors.Inc()
		p.log.WithError(err).Debug("cannot send reject")
		return false
	}
	p.metrics.rejects.Inc()
	return true
}

// hostSource returns the address the host sends from to the service
// address dst: the source of its route (the masquerade address itself,
// or the node IP), else the node IP of dst's family.
func hostSource(node feature.Node, dst netip.Addr) (netip.Addr, bool) {
	if rs, err := netlink.RouteGet(dst.AsSlice()); err == nil && len(rs) > 0 && rs[0].Src != nil {
		if a, ok := netip.AddrFromSlice(rs[0].Src); ok && a.Unmap().Is4() == dst.Is4() {
			return a.Unmap(), true
		}
	}
	for _, ip := range node.Addrs() {
		if ip.Is4() == dst.Is4() {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// servicePorts returns the names of the service ports built, sorted (for
// tests and introspection).
func (p *Proxy) servicePorts() []service.ServicePortName {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.SortedFunc(maps.Keys(p.built), service.ServicePortName.Compare)
}

// noteRefusals reports the addresses a port named but may not claim, each
// once (a Warning event on its Service), and keeps the count of refused
// addresses by field and reason. p.mu is held.
func (p *Proxy) noteRefusals(name service.ServicePortName, refused []service.RefusedAddress) {
	old := p.refusedAddrs[name]
	if len(old) == 0 && len(refused) == 0 {
		return
	}
	for _, r := range old {
		p.metrics.refusedAddresses.WithLabelValues(r.Kind.Field(), r.Reason).Dec()
		if !slices.ContainsFunc(refused, func(n service.RefusedAddress) bool { return n.IP == r.IP && n.Kind == r.Kind && n.Why == r.Why }) {
			// Refused no longer: a refusal that comes back is reported
			// again.
			p.forgetReported(r.Error(name.NamespacedName))
		}
	}
	for _, r := range refused {
		p.metrics.refusedAddresses.WithLabelValues(r.Kind.Field(), r.Reason).Inc()
		p.reportInput(r.Error(name.NamespacedName))
	}
	if len(refused) == 0 {
		delete(p.refusedAddrs, name)
	} else {
		p.refusedAddrs[name] = refused
	}
}
