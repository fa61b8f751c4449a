// Package agent is the node agent, read top to bottom in this file:
// it checks, before it changes anything on the node, that its
// configuration fits the node and that the API server answers, knows this
// node and lets the agent do what it must (preflight.go); it learns this
// node's facts (feature.Node) from its Node object, creates br0 and breth0
// over OVSDB and moves the node's addresses to breth0, then wires every
// feature (package feature) the same way: Init, informers started and
// synced, Sync, the reconcilers of both bridges started with one atomic
// start-up bundle each, and Run. Packet-ins are dispatched by category to
// the feature that declared it. The agent itself keeps the facts current
// (the host's addresses), repairs what an operator deletes (bridges,
// ports, the node's own addresses and routes), and serves health, metrics
// and introspection.
package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"nodeflow/agent/feature"
	"nodeflow/cluster/namespaceid"
	"nodeflow/datapath/conntrack"
	"nodeflow/datapath/gatewayflows"
	"nodeflow/datapath/plan"
	"nodeflow/datapath/reconcile"
	"nodeflow/host/cni"
	"nodeflow/host/netstack"
	"nodeflow/host/repair"
	"nodeflow/internal/kubeclient"
	"nodeflow/lib/memlimit"
	"nodeflow/lib/openflow"
	"nodeflow/lib/openflow/ofconn"
	"nodeflow/lib/ovsdb"
)

// Agent is the node agent. Create it with New, add features with Use, and
// call Run.
type Agent struct {
	cfg     Config
	log     logrus.FieldLogger
	metrics *Metrics

	db  *ovsdb.Client
	ifc atomic.Pointer[ovsdb.InterfaceCache]

	kube       kubernetes.Interface
	rest       *rest.Config // the API client's configuration
	dynOnce    sync.Once    // dyn, the dynamic client for features (Host.Dynamic)
	dyn        dynamic.Interface
	dynErr     error
	informers  informers.SharedInformerFactory
	localPods  informers.SharedInformerFactory
	recorder   record.EventRecorder
	nodes      cache.SharedIndexInformer
	namespaces feature.NamespaceIDs
	ids        *namespaceid.Service
	// idsDone is closed once the namespace id service has stopped.
	idsDone chan struct{}

	features   []feature.Feature
	dispatcher *feature.Dispatcher

	stores map[plan.Bridge]*reconcile.Store
	recs   map[plan.Bridge]*reconcile.Reconciler
	conns  sync.Map // plan.Bridge -> *ofconn.Conn

	// The node's facts, as features see them (feature.Host.Node).
	nodeMu    sync.Mutex
	node      feature.Node
	onNode    []func()
	onReady   []func(plan.Bridge) // features' OnBridgeReady callbacks, under nodeMu
	uplinkMAC net.HardwareAddr
	// gatewayMAC is breth0's MAC with the userspace datapath, pinned in
	// OVSDB after the first start (PinGatewayMAC).
	gatewayMAC net.HardwareAddr

	secondary hostAddrSet
	// l3 keeps the node's own addresses and routes on the gateway bridge
	// (nodeaddrs.go); repairs is the account of every repair of the
	// node's own configuration, shown on /readyz while one keeps failing.
	l3      *nodeL3Keeper
	repairs *repair.Tracker
	// l3Record is the record of the node's addresses read before the
	// start-up touched anything (checkHost); nil when there was none.
	l3Record *netstack.NodeL3

	// heal asks the agent to check and repair its bridges and ports.
	heal chan struct{}
	// reconciled is closed once both bridges are reconciled (Reconciled):
	// the agent is ready from then on.
	reconciled chan struct{}
	// waitingFor says what the agent waits for before it can be ready
	// ("" when nothing), for /readyz.
	waitingFor atomic.Value
	// podBridgeRead is set once br0's flows were read and reconciled, so
	// that the reconciler knows what is installed (namespaceIDsInUse).
	podBridgeRead atomic.Bool
	lastLoop      atomic.Int64
	// lock is AgentLock, held from the start-up's first step.
	lock *ovsdb.Lock
	// releaser gives memory back after the desired state shrinks
	// (costs.go).
	releaser *memlimit.Releaser
}

// New returns an agent for cfg.
func New(cfg Config, log logrus.FieldLogger) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = logrus.StandardLogger()
	}
	a := &Agent{
		cfg: cfg, log: log.WithField("node", cfg.NodeName), metrics: NewMetrics(),
		heal: make(chan struct{}, 1), reconciled: make(chan struct{}),
	}
	a.dispatcher = feature.NewDispatcher(a.metrics.Registry, a.log)
	a.repairs = repair.New(repair.Options{Log: a.log,
		What: append([]string{netstack.RepairNodeAddress, netstack.RepairNodeRoute}, netstack.HostParts...)})
	if err := a.metrics.Registry.Register(a.repairs); err != nil {
		return nil, fmt.Errorf("controller: metrics: %w", err)
	}
	return a, nil
}

// Reconciled is closed once both bridges hold the agent's flows for the
// first time: the end of its start-up.
func (a *Agent) Reconciled() <-chan struct{} { return a.reconciled }

// isReconciled reports whether the start-up is over (Reconciled).
func (a *Agent) isReconciled() bool {
	select {
	case <-a.reconciled:
		return true
	default:
		return false
	}
}

// Use adds a feature; call it before Run. Features are initialised and
// synced in the order they are added.
func (a *Agent) Use(f feature.Feature) { a.features = append(a.features, f) }

// Metrics returns the agent's metrics.
func (a *Agent) Metrics() *Metrics { return a.metrics }

// Interfaces returns OVSDB's Interface cache; nil before Run has set up
// OVS.
func (a *Agent) Interfaces() *ovsdb.InterfaceCache { return a.ifc.Load() }

// OVSDB returns the agent's OVSDB client, nil before Run has connected it
// (features call it from Sync and Run, which come after).
func (a *Agent) OVSDB() *ovsdb.Client { return a.db }

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Run starts the agent and blocks until ctx ends. On return the bridges
// keep their flows: the datapath keeps working without the agent.
func (a *Agent) Run(ctx context.Context) error {
	start := time.Now()
	a.lastLoop.Store(time.Now().UnixNano())
	if a.cfg.HealthAddr != "" {
		go a.serveHealth(ctx)
	}
	// When each step of the start-up ended, from the process's start: the
	// log line that says both bridges are reconciled gives them.
	steps := logrus.Fields{}
	step := func(name string) { steps[name] = time.Since(start).Round(time.Millisecond).String() }
	// 1. Before anything on the node changes: the kubeconfig, the API,
	// this node's object and the agent's permissions (preflight.go).
	if err := a.preflight(ctx); err != nil {
		return err
	}
	step("api")
	// 2. The API clients, and this node's facts from its object.
	if err := a.setupKube(ctx); err != nil {
		return err
	}
	if err := a.waitLocalNode(ctx); err != nil {
		return err
	}
	step("node")
	// 3. The bridges, their ports, and the uplink's addresses on breth0,
	// kept there from now on.
	if err := a.setupOVS(ctx); err != nil {
		return err
	}
	defer a.db.Close()
	go a.l3.run(ctx)
	a.refreshHostAddrs()
	step("ovsdb")

	// 4. The features. Their desired state is complete before either
	// reconciler starts: its start-up pass deletes whatever the store does
	// not want, so an empty store would empty the bridges for a moment.
	if err := a.syncFeatures(ctx, step); err != nil {
		return err
	}
	a.startReleaser(ctx)

	// 5. The reconcilers, then the features' own loops.
	if err := a.startReconcilers(ctx); err != nil {
		return err
	}
	defer a.conns.Range(func(_, c any) bool { c.(*ofconn.Conn).Close(); return true })
	a.dispatcher.Run(ctx)
	for _, f := range a.features {
		go f.Run(ctx)
	}
	go a.watchHostAddrs(ctx)
	go a.watchOwnPorts(ctx)
	if a.cfg.IntrospectSocket != "" {
		go func() {
			if err := reconcile.ServeIntrospection(ctx, a.cfg.IntrospectSocket, reconcile.NewIntrospection(a.recs[plan.Pod], a.recs[plan.Gateway])); err != nil && ctx.Err() == nil {
				a.log.WithError(err).Warn("introspection socket")
			}
		}()
	}
	go func() {
		for _, b := range plan.Bridges {
			select {
			case <-a.recs[b].Synced():
			case <-ctx.Done():
				return
			}
		}
		close(a.reconciled)
		a.log.WithFields(steps).WithField("startup", time.Since(start).String()).Info("both bridges reconciled")
	}()
	defer a.waitNamespaceIDs()
	return a.loop(ctx)
}

// syncFeatures makes the bridges' stores and gives them every feature's
// first desired state: each feature's Init, the informers started and
// synced, the namespace ids, each feature's Sync. step marks the end of
// each part in the start-up's log line.
func (a *Agent) syncFeatures(ctx context.Context, step func(string)) error {
	budget := a.newBudget()
	a.stores = map[plan.Bridge]*reconcile.Store{
		plan.Pod:     reconcile.NewStore(reconcile.StoreOptions{Bridge: plan.Pod, Budget: budget}),
		plan.Gateway: reconcile.NewStore(reconcile.StoreOptions{Bridge: plan.Gateway, Budget: budget}),
	}
	a.metrics.Registry.MustRegister(newCostCollector(a))
	for _, b := range plan.Bridges {
		// The pipeline's skeleton: every table's explicit miss flow.
		if err := a.stores[b].Set(gatewayflows.PipelineOwner(b), reconcile.State{Flows: gatewayflows.PipelineFlows(b)}); err != nil {
			return fmt.Errorf("controller: %s pipeline: %w", b, err)
		}
	}
	for _, f := range a.features {
		if err := f.Init(a.hostFor(f)); err != nil {
			return fmt.Errorf("controller: feature %s: %w", f.Name(), err)
		}
		if h, ok := f.(feature.PacketInHandler); ok {
			for _, c := range h.PacketIns() {
				if err := a.dispatcher.Register(f.Name(), c, h.HandlePacketIn); err != nil {
					return err
				}
			}
		}
	}
	a.informers.Start(ctx.Done())
	a.localPods.Start(ctx.Done())
	// The namespace ids before any flow that carries one.
	if err := a.runNamespaceIDs(ctx); err != nil {
		return err
	}
	step("namespace-ids")
	for _, factory := range []informers.SharedInformerFactory{a.informers, a.localPods} {
		for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return fmt.Errorf("controller: informer for %v did not sync: %w", typ, ctx.Err())
			}
		}
	}
	step("informers")
	for _, f := range a.features {
		if err := f.Sync(ctx); err != nil {
			return fmt.Errorf("controller: feature %s: first sync: %w", f.Name(), err)
		}
	}
	step("features")
	if budget != nil {
		// The objects held back once every feature's first state is in,
		// then each change.
		budget.Report(a.reportBudget(budget))
	}
	return nil
}

// setupOVS creates the bridges and ports, moves the node's addresses to
// breth0, and reads the MACs the flows need.
func (a *Agent) setupOVS(ctx context.Context) error {
	db, err := dialOVSDB(ctx, a.cfg.DBSocket(), a.log, func(err error) {
		// Waiting is alive: the liveness probe must not restart it.
		a.lastLoop.Store(time.Now().UnixNano())
		if err == nil {
			a.waitingFor.Store("")
		} else {
			a.waitingFor.Store("waiting for Open vSwitch at " + a.cfg.DBSocket() + ": " + err.Error())
		}
	})
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	a.db = db
	// Nothing is written to the switch before the agent holds it alone.
	if err := a.takeLock(ctx); err != nil {
		return err
	}
	if l, err := netlink.LinkByName(a.cfg.Uplink); err == nil {
		a.uplinkMAC = l.Attrs().HardwareAddr
	} else {
		return fmt.Errorf("controller: uplink %s: %w", a.cfg.Uplink, err)
	}
	if a.cfg.DatapathType == "netdev" {
		// The uplink's sysctls and TX checksum offload as they were before
		// nodeflow, for `nodeflow cleanup`: before ensureBridges turns the
		// offload off.
		if wrote, err := netstack.RecordUplinkSysctls(a.log, netstack.UplinkStatePath(a.cfg.CNIDataDir), a.cfg.Uplink); err != nil {
			a.log.WithError(err).Warn("cannot record the uplink's sysctls and TX checksum offload; nodeflow cleanup will restore the sysctls' kernel defaults and leave the offload as it is")
		} else if wrote {
			a.log.WithField("file", netstack.UplinkStatePath(a.cfg.CNIDataDir)).Info("recorded the uplink's sysctls")
		}
	}
	ports, err := a.ensureBridges(ctx)
	if err != nil {
		return err
	}
	a.log.WithFields(logrus.Fields{"vxlan0": ports.Tunnel, "patch": ports.PodPatch, "mp0": ports.Mgmt,
		"uplink": ports.Uplink, "gateway-patch": ports.GatewayPatch}).Info("bridges ready")
	if put, err := switchWhileEmpty(ctx, a.cfg.MgmtSocket(a.cfg.GatewayBridge), a.log.WithField("bridge", a.cfg.GatewayBridge)); err != nil {
		return err
	} else if put {
		a.log.Info("the gateway bridge has no flows: it switches as a plain bridge until its pipeline is installed")
	}
	found, err := netstack.ReadL3Config(a.cfg.GatewayBridge)
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	moved, err := netstack.MoveUplinkConfig(a.log, a.cfg.Uplink, a.cfg.GatewayBridge)
	if err != nil {
		return err
	}
	kept := a.keepNodeL3(a.l3Record, found, moved)
	a.l3 = newNodeL3Keeper(a.cfg.GatewayBridge, kept, a.log, a.repairs)
	// What somebody deleted while no agent ran comes back now.
	a.l3.check()
	ips := kept.IPs()
	if len(ips) == 0 {
		if ips, err = netstack.NodeIPs(a.cfg.Uplink, a.cfg.GatewayBridge, a.cfg.Masquerade); err != nil {
			return err
		}
	}
	gw, err := netlink.LinkByName(a.cfg.GatewayBridge)
	if err != nil {
		return fmt.Errorf("controller: %s: %w", a.cfg.GatewayBridge, err)
	}
	hostMAC := gw.Attrs().HardwareAddr
	if a.cfg.DatapathType == "system" && len(a.uplinkMAC) == 6 {
		hostMAC = a.uplinkMAC
	}
	if a.cfg.DatapathType == "netdev" {
		if err := netstack.QuietUplink(a.cfg.Uplink); err != nil {
			return err
		}
	}
	a.updateNode(func(n *feature.Node) {
		n.Name, n.PodBridge, n.GatewayBridge = a.cfg.NodeName, a.cfg.PodBridge, a.cfg.GatewayBridge
		n.Ports, n.IPs, n.HostMAC = ports, ips, hostMAC
		n.ClusterCIDRs, n.ServiceCIDRs, n.Masquerade, n.MTU = a.cfg.ClusterCIDRs, a.cfg.ServiceCIDRs, a.cfg.Masquerade, a.cfg.MTU
	})
	ic, err := db.Interfaces(ctx)
	if err != nil {
		return fmt.Errorf("controller: ovsdb interfaces: %w", err)
	}
	a.ifc.Store(ic)
	return nil
}

// warnOldDatapath warns, once at start-up, when the userspace datapath of
// this Open vSwitch loses large UDP datagrams sent to a Service (see
// conntrack.FragmentPortsFixed), and when it releases fragments it gave up
// on into other packets' actions (conntrack.ExpiredFragmentsDropped).
func (a *Agent) warnOldDatapath(ctx context.Context) {
	sw, err := a.db.Switch(ctx)
	if err != nil {
		a.log.WithError(err).Debug("cannot read the Open vSwitch version")
		return
	}
	if !conntrack.FragmentPortsFixed(sw.OVSVersion) {
		a.log.WithField("ovs_version", sw.OVSVersion).Warn("this Open vSwitch's userspace datapath does not give later IP fragments their connection's ports: " +
			"UDP datagrams larger than the MTU sent to a Service are lost (fixed in Open vSwitch 2.17.12, 3.0.8, 3.1.7, 3.2.5, 3.3.4, 3.4.2 and 3.5.0)")
	}
	if !conntrack.ExpiredFragmentsDropped(sw.OVSVersion) {
		a.log.WithField("ovs_version", sw.OVSVersion).Warn("this Open vSwitch's userspace datapath sends the IP fragments it gave up reassembling (an incomplete datagram, " +
			"or one a policy denied) on after 15 s with an unrelated packet's actions, out of any port; nodeflow cannot stop that from its flows " +
			"(fixed in Open vSwitch 3.2.6, 3.3.5, 3.4.3 and 3.5.1)")
	}
}

// ensureBridges creates or repairs both bridges and the agent's ports
// (EnsureBridges), turns TX checksum offload off where the userspace
// datapath needs it, and returns the ports' ofports.
func (a *Agent) ensureBridges(ctx context.Context) (feature.Ports, error) {
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	mac := a.gatewayMAC
	if a.cfg.DatapathType == "system" {
		mac = a.uplinkMAC
	}
	ports, err := EnsureBridges(sctx, a.db, a.cfg, mac)
	if err != nil {
		return ports, err
	}
	if a.cfg.DatapathType == "netdev" {
		a.warnOldDatapath(sctx)
		// The userspace datapath validates checksums: no TX offload on
		// its taps and on the uplink.
		for _, ifn := range []string{a.cfg.GatewayBridge, MgmtPortName, a.cfg.Uplink} {
			if err := waitLink(ctx, ifn); err != nil {
				return ports, err
			}
			if err := cni.SetTxChecksum("", ifn, false); err != nil {
				a.log.WithError(err).WithField("interface", ifn).Warn("cannot turn TX checksum offload off")
			}
		}
	}
	if err := waitLink(ctx, a.cfg.GatewayBridge); err != nil {
		return ports, err
	}
	if len(mac) != 6 {
		if a.gatewayMAC, err = PinGatewayMAC(sctx, a.db, a.cfg); err != nil {
			return ports, err
		}
	}
	return ports, nil
}

func waitLink(ctx context.Context, name string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := netlink.LinkByName(name); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("controller: interface %s did not appear: %w", name, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// setupKube prepares the shared informer factories (the whole cluster, and
// this node's pods) and the event recorder on the API client preflight
// made; the Node informer starts at once, for this node's facts.
func (a *Agent) setupKube(ctx context.Context) error {
	kc, rc := a.kube, a.rest
	if kc == nil {
		if err := a.loadKubeconfig(); err != nil {
			return err
		}
		kc, rc = a.kube, a.rest
	}
	a.informers = informers.NewSharedInformerFactory(kc, 10*time.Minute)
	a.localPods = informers.NewSharedInformerFactoryWithOptions(kc, 10*time.Minute, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", a.cfg.NodeName).String()
	}))
	eb := record.NewBroadcaster(record.WithContext(ctx))
	eb.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kc.CoreV1().Events("")})
	a.recorder = eb.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "nodeflow-agent", Host: a.cfg.NodeName})
	if err := a.setupNamespaceIDs(rc); err != nil {
		return err
	}
	a.nodes = a.informers.Core().V1().Nodes().Informer()
	// This node's zone label decides topology-aware routing: follow it.
	zoneOf := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok && n.Name == a.cfg.NodeName {
			zone := n.Labels[corev1.LabelTopologyZone]
			a.updateNode(func(fn *feature.Node) { fn.Zone = zone })
		}
	}
	zoneReg, err := a.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: zoneOf, UpdateFunc: func(_, cur any) { zoneOf(cur) },
	})
	if err != nil {
		return fmt.Errorf("controller: node informer: %w", err)
	}
	a.informers.Start(ctx.Done())
	// The zone is taken by the handler, behind the cache.
	if !kubeclient.WaitSynced(ctx, zoneReg.HasSynced) {
		return fmt.Errorf("controller: node informer did not sync: %w", ctx.Err())
	}
	return nil
}

// waitLocalNode waits until this node's Node object has podCIDRs, and
// takes them (and the MACs derived from them) into the node's facts.
func (a *Agent) waitLocalNode(ctx context.Context) error {
	logged := false
	for {
		if obj, ok, _ := a.nodes.GetStore().GetByKey(a.cfg.NodeName); ok {
			n := obj.(*corev1.Node)
			var cidrs []netip.Prefix
			for _, s := range n.Spec.PodCIDRs {
				p, err := netip.ParsePrefix(s)
				if err != nil {
					return fmt.Errorf("controller: node %s: podCIDR %q: %w", n.Name, s, err)
				}
				cidrs = append(cidrs, p.Masked())
			}
			if len(cidrs) > 0 {
				router, mgmt := cidrs[0], cidrs[0]
				for _, p := range cidrs {
					if p.Addr().Is4() {
						router, mgmt = p, p
						break
					}
				}
				a.updateNode(func(fn *feature.Node) {
					fn.PodCIDRs = cidrs
					fn.RouterMAC = conntrack.MAC(plan.RouterIP(router))
					fn.MgmtMAC = conntrack.MAC(plan.MgmtIP(mgmt))
				})
				return nil
			}
		}
		if !logged {
			a.log.Info("waiting for this node's podCIDRs")
			logged = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Node returns the node's current facts.
func (a *Agent) Node() feature.Node {
	a.nodeMu.Lock()
	defer a.nodeMu.Unlock()
	return a.node
}

// updateNode changes the node's facts with f and, when they changed, tells
// the features.
func (a *Agent) updateNode(f func(*feature.Node)) {
	a.nodeMu.Lock()
	old := a.node
	n := a.node
	f(&n)
	n.NodePortAddrs = feature.NodePortAddrs(n, a.cfg.NodePortAddresses)
	a.node = n
	subs := append([]func(){}, a.onNode...)
	a.nodeMu.Unlock()
	if n.Equal(old) {
		return
	}
	for _, s := range subs {
		s()
	}
}

func (a *Agent) startReconcilers(ctx context.Context) error {
	a.recs = map[plan.Bridge]*reconcile.Reconciler{}
	for _, b := range plan.Bridges {
		name := a.bridgeName(b)
		store := a.stores[b]
		// Every series exists from the start, at zero.
		a.metrics.ReconcileErrors.WithLabelValues(name)
		a.metrics.PacketIns.WithLabelValues(name)
		r := reconcile.New(store, reconcile.Options{Bridge: name, Logger: a.log, Agent: a.cfg.Version,
			OnSync: func(rep reconcile.SyncReport) {
				a.metrics.observe(name, store, rep)
				a.observeSize()
				if rep.Err == nil && (rep.Kind == reconcile.SyncStartup || rep.Kind == reconcile.SyncReconnect) {
					a.nodeMu.Lock()
					fs := slices.Clone(a.onReady)
					a.nodeMu.Unlock()
					for _, f := range fs {
						f(b)
					}
				}
				if b == plan.Pod {
					// The ids br0's flows use may have changed.
					a.ids.Notify()
				}
			}})
		opts := r.ConnOptions(ofconn.Options{Logger: a.log.WithField("bridge", name), ControllerID: plan.ControllerID,
			DetectEmptyTables: true,
			Handlers: ofconn.Handlers{PacketIn: func(m ofconn.AsyncMessage) {
				a.metrics.PacketIns.WithLabelValues(name).Inc()
				if pin, ok := m.Message.(*openflow.PacketIn); ok {
					a.dispatcher.Dispatch(b, pin)
				}
			}}})
		dctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		c, err := ofconn.Dial(dctx, a.cfg.MgmtSocket(name), opts)
		cancel()
		if err != nil {
			return fmt.Errorf("controller: openflow %s: %w", name, err)
		}
		a.conns.Store(b, c)
		a.recs[b] = r
		if b == plan.Pod {
			go func() {
				select {
				case <-r.Synced():
					a.podBridgeRead.Store(true)
					a.ids.Notify()
				case <-ctx.Done():
				}
			}()
		}
		go func() {
			if err := r.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				a.log.WithError(err).WithField("bridge", name).Error("reconciler stopped")
			}
		}()
	}
	return nil
}

// bridgeName returns the configured name of bridge role b.
func (a *Agent) bridgeName(b plan.Bridge) string {
	if b == plan.Gateway {
		return a.cfg.GatewayBridge
	}
	return a.cfg.PodBridge
}

// loop keeps the agent's own state: it repairs the bridges and ports when
// asked, and refreshes the host's addresses periodically.
func (a *Agent) loop(ctx context.Context) error {
	t := time.NewTicker(a.cfg.HostCheckInterval)
	defer t.Stop()
	for {
		a.lastLoop.Store(time.Now().UnixNano())
		select {
		case <-ctx.Done():
			a.log.Info("stopping; the bridges keep their flows")
			return nil
		case <-a.lockLost():
			return lockErr(a.lock)
		case <-a.heal:
			a.repair(ctx)
		case <-t.C:
			a.refreshHostAddrs()
			a.repair(ctx)
		}
	}
}

// healthz answers the liveness probe: well while the main loop (or a
// start-up wait) is alive. A restart mends a stuck process and nothing
// else, so nothing else fails it.
func (a *Agent) healthz(w http.ResponseWriter, _ *http.Request) {
	if age := time.Since(time.Unix(0, a.lastLoop.Load())); age > 2*a.cfg.HostCheckInterval+30*time.Second {
		http.Error(w, "main loop stuck for "+age.String(), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

// readyz answers the readiness probe: ready once both bridges are
// reconciled, and while no repair of the node's own configuration keeps
// failing. That one is a readiness matter: the node may be off the
// network, which a restart would not mend (so /healthz stays well), but a
// rollout must not go on past it, and `kubectl get pods` shows it.
func (a *Agent) readyz(w http.ResponseWriter, _ *http.Request) {
	if !a.isReconciled() {
		why := "bridges not reconciled yet"
		if msg, _ := a.waitingFor.Load().(string); msg != "" {
			why = msg
		}
		http.Error(w, why, http.StatusServiceUnavailable)
		return
	}
	if why := a.repairs.Summary(); why != "" {
		http.Error(w, why, http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

func (a *Agent) serveHealth(ctx context.Context) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", a.healthz)
	mux.HandleFunc("/readyz", a.readyz)
	mux.Handle("/metrics", promhttp.HandlerFor(a.metrics.Registry, promhttp.HandlerOpts{}))
	// Profiles, on the same (loopback by default) address.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Addr: a.cfg.HealthAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		a.log.WithError(err).Warn("health server")
	}
}
