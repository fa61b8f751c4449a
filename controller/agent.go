package controller

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"nodeflow/cni"
	"nodeflow/conntrack"
	"nodeflow/flows/gateway"
	"nodeflow/flows/node"
	"nodeflow/flows/plan"
	"nodeflow/flows/reconcile"
	"nodeflow/openflow"
	"nodeflow/openflow/ofconn"
	"nodeflow/ovsdb"
)

// Agent is the node agent. Create it with New and call Run.
type Agent struct {
	cfg     Config
	log     logrus.FieldLogger
	metrics *Metrics

	db    *ovsdb.Client
	ifc   *ovsdb.InterfaceCache
	kube  kubernetes.Interface
	nodes cache.SharedIndexInformer
	pods  cache.SharedIndexInformer

	ports     Ports
	nodeIPs   []netip.Prefix
	routerMAC net.HardwareAddr
	mgmtMAC   net.HardwareAddr
	hostMAC   net.HardwareAddr
	podCIDRs  []netip.Prefix

	podStore, gwStore *reconcile.Store
	podRec, gwRec     *reconcile.Reconciler
	conns             []*ofconn.Conn

	dirty     chan struct{}
	hostDirty chan struct{}
	ready     atomic.Bool
	lastLoop  atomic.Int64

	mu       sync.Mutex
	reported map[string]string // node name -> last problem reported

	probed map[netip.Addr]time.Time // next hops probed, when (sync goroutine only)

	secondary hostAddrSet // the host's secondary addresses (hostaddrs.go)

	servicesOn  bool          // run the service proxy (SetServices)
	idleHandler IdleHandler   // takes over idled service ports (SetIdleHandler)
	svc         *serviceProxy // nil when off
}

// probeInterval spaces the probes of one unresolved next hop.
const probeInterval = 10 * time.Second

// New returns an agent for cfg.
func New(cfg Config, log logrus.FieldLogger) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = logrus.StandardLogger()
	}
	return &Agent{
		cfg: cfg, log: log.WithField("node", cfg.NodeName), metrics: NewMetrics(),
		dirty: make(chan struct{}, 1), hostDirty: make(chan struct{}, 1), reported: map[string]string{},
		probed: map[netip.Addr]time.Time{},
	}, nil
}

// Metrics returns the agent's metrics.
func (a *Agent) Metrics() *Metrics { return a.metrics }

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
	if err := a.setupOVS(ctx); err != nil {
		return err
	}
	defer a.db.Close()
	if err := a.setupKube(ctx); err != nil {
		return err
	}
	if err := a.waitLocalNode(ctx); err != nil {
		return err
	}
	a.writeCNI()
	if err := a.ensureHost(); err != nil {
		a.log.WithError(err).Warn("host side not fully configured yet; will retry")
	}
	// The desired state is complete before either reconciler starts: its
	// start-up pass deletes whatever the store does not want, so an empty
	// store would empty the bridges for a moment.
	a.podStore = reconcile.NewStore(reconcile.StoreOptions{Bridge: plan.Pod})
	a.gwStore = reconcile.NewStore(reconcile.StoreOptions{Bridge: plan.Gateway})
	a.sync()
	if a.servicesOn {
		// Services too are in the store before the reconcilers start.
		a.svc = newServiceProxy(a)
		a.svc.enableHostNAT()
		if err := a.svc.start(ctx); err != nil {
			return err
		}
		if installed, err := a.readServiceFlows(ctx); err != nil {
			a.log.WithError(err).Warn("cannot read the installed service flows; group ids start afresh")
		} else {
			a.svc.installed = installed
		}
		if err := a.svc.sync(ctx, true); err != nil {
			a.log.WithError(err).Warn("first service sync")
		}
	} else {
		// No service proxy: no DNAT of the host's traffic to services.
		a.removeHostNAT()
	}
	if err := a.startReconcilers(ctx); err != nil {
		return err
	}
	defer func() {
		for _, c := range a.conns {
			c.Close()
		}
	}()
	if a.svc != nil {
		go a.svc.run(ctx, a.conns[0], a.conns[1])
	}
	go a.watchOVSDB(ctx)
	go a.watchNetlink(ctx)
	go a.watchHostAddrs(ctx)
	if a.cfg.IntrospectSocket != "" {
		go func() {
			if err := reconcile.ServeIntrospection(ctx, a.cfg.IntrospectSocket, reconcile.NewIntrospection(a.podRec, a.gwRec)); err != nil && ctx.Err() == nil {
				a.log.WithError(err).Warn("introspection socket")
			}
		}()
	}
	go func() {
		for _, r := range []*reconcile.Reconciler{a.podRec, a.gwRec} {
			select {
			case <-r.Synced():
			case <-ctx.Done():
				return
			}
		}
		a.ready.Store(true)
		a.log.WithField("startup", time.Since(start).String()).Info("both bridges reconciled")
	}()
	return a.loop(ctx)
}

// setupOVS creates the bridges and ports, moves the node's addresses to
// breth0, and reads the MACs the flows need.
func (a *Agent) setupOVS(ctx context.Context) error {
	db, err := ovsdb.Dial(ctx, a.cfg.DBSocket(), ovsdb.Options{Logger: a.log})
	if err != nil {
		return fmt.Errorf("controller: ovsdb %s: %w", a.cfg.DBSocket(), err)
	}
	a.db = db
	var uplinkMAC net.HardwareAddr
	if l, err := netlink.LinkByName(a.cfg.Uplink); err == nil {
		uplinkMAC = l.Attrs().HardwareAddr
	} else {
		return fmt.Errorf("controller: uplink %s: %w", a.cfg.Uplink, err)
	}
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	ports, err := EnsureBridges(sctx, db, a.cfg, uplinkMAC)
	if err != nil {
		return err
	}
	a.ports = ports
	a.log.WithFields(logrus.Fields{"vxlan0": ports.Tunnel, "patch": ports.PodPatch, "mp0": ports.Mgmt,
		"uplink": ports.Uplink, "gateway-patch": ports.GatewayPatch}).Info("bridges ready")
	if a.cfg.DatapathType == "netdev" {
		// The userspace datapath validates checksums: no TX offload on
		// its taps and on the uplink.
		for _, ifn := range []string{a.cfg.GatewayBridge, MgmtPortName, a.cfg.Uplink} {
			if err := waitLink(ctx, ifn); err != nil {
				return err
			}
			if err := cni.SetTxChecksum("", ifn, false); err != nil {
				a.log.WithError(err).WithField("interface", ifn).Warn("cannot turn TX checksum offload off")
			}
		}
	}
	if err := waitLink(ctx, a.cfg.GatewayBridge); err != nil {
		return err
	}
	if err := MoveUplinkConfig(a.log, a.cfg.Uplink, a.cfg.GatewayBridge); err != nil {
		return err
	}
	ips, err := NodeIPs(a.cfg.Uplink, a.cfg.GatewayBridge, a.cfg.Masquerade)
	if err != nil {
		return err
	}
	a.nodeIPs = ips
	gw, err := netlink.LinkByName(a.cfg.GatewayBridge)
	if err != nil {
		return fmt.Errorf("controller: %s: %w", a.cfg.GatewayBridge, err)
	}
	a.hostMAC = gw.Attrs().HardwareAddr
	if a.cfg.DatapathType == "system" && len(uplinkMAC) == 6 {
		a.hostMAC = uplinkMAC
	}
	if a.cfg.DatapathType == "netdev" {
		if err := QuietUplink(a.cfg.Uplink); err != nil {
			return err
		}
	}
	ic, err := db.Interfaces(ctx)
	if err != nil {
		return fmt.Errorf("controller: ovsdb interfaces: %w", err)
	}
	a.ifc = ic
	return nil
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

func (a *Agent) setupKube(ctx context.Context) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if a.cfg.Kubeconfig != "" {
		rules.ExplicitPath = a.cfg.Kubeconfig
	}
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("controller: kubeconfig: %w", err)
	}
	rc.UserAgent = "nodeflow-agent/" + a.cfg.NodeName
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("controller: kubernetes client: %w", err)
	}
	a.kube = kc
	// Nodes: all of them (their podCIDRs and addresses give the VXLAN
	// routes). Pods: only this node's.
	nf := informers.NewSharedInformerFactory(kc, 10*time.Minute)
	a.nodes = nf.Core().V1().Nodes().Informer()
	pf := informers.NewSharedInformerFactoryWithOptions(kc, 10*time.Minute, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", a.cfg.NodeName).String()
	}))
	a.pods = pf.Core().V1().Pods().Informer()
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke(a.dirty) },
		UpdateFunc: func(any, any) { poke(a.dirty) },
		DeleteFunc: func(any) { poke(a.dirty) },
	}
	if _, err := a.nodes.AddEventHandler(h); err != nil {
		return err
	}
	if _, err := a.pods.AddEventHandler(h); err != nil {
		return err
	}
	nf.Start(ctx.Done())
	pf.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), a.nodes.HasSynced, a.pods.HasSynced) {
		return fmt.Errorf("controller: informers did not sync: %w", ctx.Err())
	}
	return nil
}

// waitLocalNode waits until this node's Node object has podCIDRs.
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
				a.podCIDRs = cidrs
				for _, p := range cidrs {
					if p.Addr().Is4() {
						a.routerMAC = conntrack.MAC(node.RouterIP(p))
						a.mgmtMAC = conntrack.MAC(node.MgmtIP(p))
					}
				}
				if a.routerMAC == nil {
					a.routerMAC = conntrack.MAC(node.RouterIP(cidrs[0]))
					a.mgmtMAC = conntrack.MAC(node.MgmtIP(cidrs[0]))
				}
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

func (a *Agent) nodeAddrs() []netip.Addr {
	var out []netip.Addr
	for _, p := range a.nodeIPs {
		out = append(out, p.Addr())
	}
	return out
}

func (a *Agent) hostPlan() HostPlan {
	return HostPlan{
		Gateway: a.cfg.GatewayBridge, Mgmt: MgmtPortName, NodeIPs: a.nodeAddrs(), ServiceCIDRs: a.cfg.ServiceCIDRs,
		ClusterCIDRs: a.cfg.ClusterCIDRs, PodCIDRs: a.podCIDRs, Masquerade: a.cfg.Masquerade,
		MgmtMAC: a.mgmtMAC, RouterMAC: a.routerMAC, MTU: a.cfg.MTU,
	}
}

// writeCNI writes the pod network's CNI configuration and reserves mp0's
// addresses in its IPAM.
func (a *Agent) writeCNI() {
	var reserved []netip.Addr
	for _, p := range a.podCIDRs {
		reserved = append(reserved, node.MgmtIP(p))
	}
	changed, err := WriteCNIConfig(CNIConfig{ConfDir: a.cfg.CNIConfDir, DataDir: a.cfg.CNIDataDir, OVSDB: a.cfg.DBSocket(),
		DatapathType: a.cfg.DatapathType, MTU: a.cfg.MTU, Subnets: a.podCIDRs, Reserved: reserved})
	if err != nil {
		a.log.WithError(err).Error("cni configuration")
	} else if changed {
		a.log.WithField("dir", a.cfg.CNIConfDir).Info("wrote cni configuration")
	}
}

func (a *Agent) ensureHost() error {
	n, err := EnsureHost(a.hostPlan())
	if n > 0 {
		a.metrics.HostChanges.Add(float64(n))
		a.log.WithField("changes", n).Info("host side configured")
	}
	if err != nil {
		a.metrics.HostErrors.Inc()
	}
	return err
}

func (a *Agent) startReconcilers(ctx context.Context) error {
	mk := func(bridge string, store *reconcile.Store) (*reconcile.Reconciler, error) {
		// Every series exists from the start, at zero.
		a.metrics.ReconcileErrors.WithLabelValues(bridge)
		a.metrics.PacketIns.WithLabelValues(bridge)
		r := reconcile.New(store, reconcile.Options{Bridge: bridge, Logger: a.log,
			OnSync: func(rep reconcile.SyncReport) { a.metrics.observe(bridge, store, rep) }})
		opts := r.ConnOptions(ofconn.Options{Logger: a.log.WithField("bridge", bridge), ControllerID: plan.ControllerID,
			DetectEmptyTables: true,
			Handlers: ofconn.Handlers{PacketIn: func(m ofconn.AsyncMessage) {
				a.metrics.PacketIns.WithLabelValues(bridge).Inc()
				if a.svc != nil && bridge == a.cfg.PodBridge {
					a.svc.packetIn(m)
				}
			}}})
		dctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		c, err := ofconn.Dial(dctx, a.cfg.MgmtSocket(bridge), opts)
		if err != nil {
			return nil, fmt.Errorf("controller: openflow %s: %w", bridge, err)
		}
		a.conns = append(a.conns, c)
		go func() {
			if err := r.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				a.log.WithError(err).WithField("bridge", bridge).Error("reconciler stopped")
			}
		}()
		return r, nil
	}
	var err error
	if a.podRec, err = mk(a.cfg.PodBridge, a.podStore); err != nil {
		return err
	}
	a.gwRec, err = mk(a.cfg.GatewayBridge, a.gwStore)
	return err
}

// loop recomputes the desired state on events, and re-checks the host side
// on netlink events and periodically.
func (a *Agent) loop(ctx context.Context) error {
	t := time.NewTicker(a.cfg.HostCheckInterval)
	defer t.Stop()
	for {
		a.lastLoop.Store(time.Now().UnixNano())
		select {
		case <-ctx.Done():
			a.log.Info("stopping; the bridges keep their flows")
			return nil
		case <-a.dirty:
			a.sync()
		case <-a.hostDirty:
			if err := a.ensureHost(); err != nil {
				a.log.WithError(err).Warn("host side")
			}
			a.sync()
		case <-t.C:
			a.writeCNI()
			if err := a.ensureHost(); err != nil {
				a.log.WithError(err).Warn("host side")
			}
			a.sync()
		}
	}
}

func (a *Agent) nodeConfig() node.Config {
	return node.Config{
		TunnelPort: a.ports.Tunnel, PatchPort: a.ports.PodPatch, MgmtPort: a.ports.Mgmt,
		RouterMAC: a.routerMAC, MgmtMAC: a.mgmtMAC, HostMAC: a.hostMAC,
		PodCIDRs: a.podCIDRs, ClusterCIDRs: a.cfg.ClusterCIDRs, ServiceCIDRs: a.cfg.ServiceCIDRs,
		NodeIPs: a.nodeAddrs(), Masquerade: a.cfg.Masquerade,
	}
}

// set replaces owner's state in store, logging a failure.
func (a *Agent) set(store *reconcile.Store, owner string, fs []openflow.Flow) {
	if err := store.Set(owner, reconcile.State{Flows: fs}); err != nil {
		a.metrics.ModelErrors.WithLabelValues("owner").Inc()
		a.log.WithError(err).WithField("owner", owner).Error("cannot set desired flows")
	}
}

// sync computes the desired state of both bridges from the models.
func (a *Agent) sync() {
	a.refreshHostAddrs(true)
	nc := a.nodeConfig()
	// breth0.
	gfs, err := gateway.Flows(gateway.Config{
		UplinkPort: a.ports.Uplink, PatchPort: a.ports.GatewayPatch, NodeIPs: a.nodeAddrs(),
		ServiceCIDRs: a.cfg.ServiceCIDRs, Masquerade: a.cfg.Masquerade, RouterMAC: a.routerMAC, HostMAC: a.hostMAC,
		SecondaryIPs: a.hostSecondaryIPs(),
	})
	if err != nil {
		a.log.WithError(err).Error("breth0 default flows")
	} else {
		a.set(a.gwStore, gateway.Owner, gfs)
	}
	a.set(a.gwStore, gateway.PipelineOwner(plan.Gateway), gateway.PipelineFlows(plan.Gateway))

	// br0: node-wide.
	a.set(a.podStore, gateway.PipelineOwner(plan.Pod), gateway.PipelineFlows(plan.Pod))
	if fs, err := node.NodeFlows(nc); err != nil {
		a.log.WithError(err).Error("br0 node flows")
	} else {
		a.set(a.podStore, node.OwnerLocal, fs)
	}

	// Remote nodes, oldest first: a node whose pod subnet overlaps an
	// older node's is refused, so a bad Node object cannot take over
	// another node's traffic.
	want := map[string]bool{}
	var remoteIPs []netip.Addr
	var nodes []*corev1.Node
	for _, obj := range a.nodes.GetStore().List() {
		nodes = append(nodes, obj.(*corev1.Node))
	}
	sort.Slice(nodes, func(i, j int) bool {
		ti, tj := nodes[i].CreationTimestamp, nodes[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return nodes[i].Name < nodes[j].Name
	})
	taken := map[netip.Prefix]string{}
	for _, n := range nodes {
		if n.Name == a.cfg.NodeName {
			continue
		}
		owner := node.RemoteOwner(n.Name)
		r, err := remoteOf(n)
		var fs []openflow.Flow
		if err == nil {
			err = overlapping(r, taken)
		}
		if err == nil {
			fs, err = node.RemoteFlows(nc, r)
		}
		if err != nil {
			a.reportNode(n, err)
			continue // keep whatever was installed for it before
		}
		for _, p := range r.PodCIDRs {
			taken[p] = n.Name
		}
		a.clearReport(n.Name)
		want[owner] = true
		remoteIPs = append(remoteIPs, r.TunnelIP)
		a.set(a.podStore, owner, fs)
	}
	for _, owner := range a.podStore.Owners("node/remote/") {
		if !want[owner] {
			if _, exists, _ := a.nodes.GetStore().GetByKey(strings.TrimPrefix(owner, "node/remote/")); !exists {
				a.set(a.podStore, owner, nil)
			}
		}
	}

	// Local pods, from the ports the CNI plugin described in OVSDB.
	wantPods := map[string]bool{}
	ndPorts := []uint32{a.ports.Mgmt}
	for _, p := range a.localPods() {
		fs, err := node.PodFlows(nc, p)
		if err != nil {
			a.metrics.ModelErrors.WithLabelValues("pod").Inc()
			a.log.WithError(err).Warn("pod port")
			continue
		}
		owner := node.PodOwner(p.Namespace, p.Name)
		wantPods[owner] = true
		ndPorts = append(ndPorts, p.Port)
		a.set(a.podStore, owner, fs)
	}
	for _, owner := range a.podStore.Owners("pod/") {
		if !wantPods[owner] {
			a.set(a.podStore, owner, nil)
		}
	}
	a.set(a.podStore, node.OwnerND, node.NDFlows(ndPorts))

	// Next hops toward the uplink.
	var skip []netip.Prefix
	for _, m := range []conntrack.Masquerade{a.cfg.Masquerade.V4, a.cfg.Masquerade.V6} {
		if m.Subnet.IsValid() {
			skip = append(skip, m.Subnet)
		}
	}
	hops, missing, err := NextHops(a.cfg.GatewayBridge, remoteIPs, skip)
	if err != nil {
		a.log.WithError(err).Warn("next hops")
	}
	now := time.Now()
	for _, ip := range missing {
		// At most one probe per address every probeInterval: a neighbour
		// that never answers must not keep the loop busy.
		if last, ok := a.probed[ip]; ok && now.Sub(last) < probeInterval {
			continue
		}
		a.probed[ip] = now
		Probe(ip)
	}
	if fs, err := node.GatewayOutputFlows(nc, hops); err != nil {
		a.log.WithError(err).Error("gateway output flows")
	} else {
		a.set(a.podStore, node.OwnerNextHops, fs)
	}
}

// remoteOf returns the model of another node, or why it has none.
func remoteOf(n *corev1.Node) (node.Remote, error) {
	r := node.Remote{Name: n.Name}
	for _, ad := range n.Status.Addresses {
		if ad.Type != corev1.NodeInternalIP {
			continue
		}
		ip, err := netip.ParseAddr(ad.Address)
		if err == nil && ip.Is4() && !r.TunnelIP.IsValid() {
			r.TunnelIP = ip
		}
	}
	if !r.TunnelIP.IsValid() {
		return r, fmt.Errorf("node %s: no IPv4 InternalIP address", n.Name)
	}
	for _, s := range n.Spec.PodCIDRs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return r, fmt.Errorf("node %s: podCIDR %q: %w", n.Name, s, err)
		}
		r.PodCIDRs = append(r.PodCIDRs, p)
	}
	if len(r.PodCIDRs) == 0 {
		return r, fmt.Errorf("node %s: no podCIDR yet", n.Name)
	}
	return r, nil
}

// overlapping reports whether a pod subnet of r overlaps one already taken
// by another node.
func overlapping(r node.Remote, taken map[netip.Prefix]string) error {
	for _, p := range r.PodCIDRs {
		for q, other := range taken {
			if p.Overlaps(q) {
				return fmt.Errorf("node %s: podCIDR %s overlaps node %s's %s", r.Name, p, other, q)
			}
		}
	}
	return nil
}

// reportNode logs a problem with another node once per distinct problem
// and records a Warning event on it.
func (a *Agent) reportNode(n *corev1.Node, err error) {
	a.mu.Lock()
	same := a.reported[n.Name] == err.Error()
	a.reported[n.Name] = err.Error()
	a.mu.Unlock()
	if same {
		return
	}
	a.metrics.ModelErrors.WithLabelValues("node").Inc()
	a.log.WithError(err).WithField("remote", n.Name).Warn("ignoring remote node; the others keep working")
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: n.Name + ".", Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: n.Name, UID: n.UID, APIVersion: "v1"},
		Reason:         "NodeflowBadNode", Message: err.Error(), Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "nodeflow-agent", Host: a.cfg.NodeName},
		FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1,
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := a.kube.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			a.log.WithError(err).Debug("cannot record event")
		}
	}()
}

func (a *Agent) clearReport(name string) {
	a.mu.Lock()
	delete(a.reported, name)
	a.mu.Unlock()
}

// NamespaceID is the id a namespace's traffic carries in br0's NamespaceID
// register and in the VXLAN VNI: 24 bits of the FNV-1a hash of its name,
// never 0.
func NamespaceID(ns string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(ns))
	id := h.Sum32() & 0xffffff
	if id == 0 {
		id = 1
	}
	return id
}

// localPods returns the pods attached to br0, from the external_ids the CNI
// plugin wrote on their interfaces.
func (a *Agent) localPods() []node.Pod {
	var out []node.Pod
	for _, i := range a.ifc.List() {
		ids := i.ExternalIDs
		if ids[cni.ExternalIDOwner] != cni.OwnerCNI || i.Ofport <= 0 {
			continue
		}
		mac, err := net.ParseMAC(ids[cni.ExternalIDMAC])
		if err != nil {
			a.log.WithField("interface", i.Name).Warn("pod port without a valid mac in external_ids")
			continue
		}
		var ips []netip.Addr
		for _, s := range strings.Split(ids[cni.ExternalIDIP], ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			if p, err := netip.ParsePrefix(s); err == nil {
				ips = append(ips, p.Addr())
			} else if ip, err := netip.ParseAddr(s); err == nil {
				ips = append(ips, ip)
			}
		}
		ns := ids[cni.ExternalIDPodNamespace]
		out = append(out, node.Pod{Namespace: ns, Name: ids[cni.ExternalIDPodName], Port: uint32(i.Ofport), MAC: mac,
			IPs: ips, NamespaceID: NamespaceID(ns)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Port < out[j].Port })
	return out
}

func (a *Agent) watchOVSDB(ctx context.Context) {
	sub := a.ifc.Subscribe()
	defer sub.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-sub.Events():
			if !ok {
				return
			}
			poke(a.dirty)
		}
	}
}

// watchNetlink re-checks the host side and the next hops on link, address,
// route and neighbour events.
func (a *Agent) watchNetlink(ctx context.Context) {
	done := make(chan struct{})
	go func() { <-ctx.Done(); close(done) }()
	links := make(chan netlink.LinkUpdate, 64)
	addrs := make(chan netlink.AddrUpdate, 64)
	routes := make(chan netlink.RouteUpdate, 64)
	neighs := make(chan netlink.NeighUpdate, 64)
	if err := netlink.LinkSubscribe(links, done); err != nil {
		a.log.WithError(err).Warn("netlink link events")
	}
	if err := netlink.AddrSubscribe(addrs, done); err != nil {
		a.log.WithError(err).Warn("netlink address events")
	}
	if err := netlink.RouteSubscribe(routes, done); err != nil {
		a.log.WithError(err).Warn("netlink route events")
	}
	if err := netlink.NeighSubscribe(neighs, done); err != nil {
		a.log.WithError(err).Warn("netlink neighbour events")
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-links:
			poke(a.hostDirty)
		case <-addrs:
			poke(a.hostDirty)
		case <-routes:
			poke(a.hostDirty)
		case u := <-neighs:
			// The host's permanent entry for the service next hop is host
			// side, which only a host check restores; other neighbours
			// change next-hop MACs in the flows.
			if ip, ok := netip.AddrFromSlice(u.IP); ok && a.isServiceNextHop(ip.Unmap()) {
				poke(a.hostDirty)
			} else {
				poke(a.dirty)
			}
		}
	}
}

// isServiceNextHop reports whether ip is the dummy next hop of the host's
// service routes (169.254.169.4, fd69::4).
func (a *Agent) isServiceNextHop(ip netip.Addr) bool {
	m, ok := a.cfg.Masquerade.For(ip)
	return ok && m.NextHop == ip
}

func (a *Agent) serveHealth(ctx context.Context) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if age := time.Since(time.Unix(0, a.lastLoop.Load())); age > 2*a.cfg.HostCheckInterval+30*time.Second {
			http.Error(w, "main loop stuck for "+age.String(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !a.ready.Load() {
			http.Error(w, "bridges not reconciled yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
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
