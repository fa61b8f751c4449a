// Package featuretest provides a feature.Host for unit tests of features:
// real reconciler stores for both bridges, a fake clientset with its
// informer factories, a Prometheus registry, and records of what the
// feature sent. There is no switch: Flush returns at once, ReadFlows
// returns what the test put in Installed, FlowStats and MeterStats what it
// put in Counters and Meters; Interfaces and OVSDB return what it put in
// Ifc and DB (nil: none, as before the agent has connected).
package featuretest

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"nodeflow/agent/feature"
	"nodeflow/datapath/conntrack"
	"nodeflow/datapath/plan"
	"nodeflow/datapath/reconcile"
	"nodeflow/host/repair"
	"nodeflow/lib/openflow"
	"nodeflow/lib/ovsdb"
)

// Host is a feature.Host for tests. Its fields may be set before the
// feature's Init.
type Host struct {
	Logger  logrus.FieldLogger
	Client  kubernetes.Interface
	Reg     *prometheus.Registry
	Events  *record.FakeRecorder
	Stores  map[plan.Bridge]*reconcile.Store
	factory informers.SharedInformerFactory
	local   informers.SharedInformerFactory

	// Installed is what ReadFlows returns, by bridge.
	Installed map[plan.Bridge][]openflow.Flow
	// ReadErr makes ReadFlows, FlowStats and MeterStats fail.
	ReadErr error
	// Counters and Meters are what FlowStats and MeterStats return, by
	// bridge; set them before the feature runs.
	Counters map[plan.Bridge][]openflow.FlowStats
	Meters   map[plan.Bridge][]openflow.MeterStats
	// Ifc and DB are what Interfaces and OVSDB return; set them before
	// the feature runs.
	Ifc *ovsdb.InterfaceCache
	DB  *ovsdb.Client
	// DBFunc, when set, is what OVSDB returns instead of DB: a test that
	// connects the client while the feature runs answers through it.
	DBFunc func() *ovsdb.Client
	// Tracker is what Repairs returns; its metrics are in Reg.
	Tracker *repair.Tracker

	mu      sync.Mutex
	node    feature.Node
	onNode  []func()
	onReady []func(plan.Bridge)
	sendErr error
	sent    []Sent
	ids     *NamespaceIDs
	allowed []plan.Feature // nil: any
}

// Sent is one message sent through the host.
type Sent struct {
	Bridge plan.Bridge
	Msg    openflow.Message
}

// DefaultNode returns node1 of the testbed's default topology: IPv4 only,
// ports numbered 1 to 5.
func DefaultNode() feature.Node {
	masq, err := conntrack.NewPlan(conntrack.DefaultMasqueradeV4, conntrack.DefaultMasqueradeV6)
	if err != nil {
		panic(err)
	}
	mac := func(s string) net.HardwareAddr { m, _ := net.ParseMAC(s); return m }
	return feature.Node{
		Name: "node1", PodBridge: "br0", GatewayBridge: "breth0",
		Ports:        feature.Ports{Tunnel: 1, PodPatch: 2, Mgmt: 3, Uplink: 1, GatewayPatch: 2},
		IPs:          []netip.Prefix{netip.MustParsePrefix("172.30.0.11/24")},
		PodCIDRs:     []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")},
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")},
		Masquerade:   masq,
		RouterMAC:    mac("0a:58:0a:f4:01:01"), MgmtMAC: mac("0a:58:0a:f4:01:02"), HostMAC: mac("02:00:00:00:00:11"),
		MTU: 1400,
	}
}

// New returns a host for node with a fake clientset holding objects.
func New(node feature.Node, objects ...runtime.Object) *Host {
	log := logrus.New()
	log.SetLevel(logrus.ErrorLevel)
	client := fake.NewClientset(objects...)
	h := &Host{
		Logger: log, Client: client, Reg: prometheus.NewRegistry(), Events: record.NewFakeRecorder(100),
		Stores: map[plan.Bridge]*reconcile.Store{
			plan.Pod:     reconcile.NewStore(reconcile.StoreOptions{Bridge: plan.Pod}),
			plan.Gateway: reconcile.NewStore(reconcile.StoreOptions{Bridge: plan.Gateway}),
		},
		Installed: map[plan.Bridge][]openflow.Flow{},
		node:      node,
		ids:       &NamespaceIDs{ids: map[string]uint32{}},
	}
	h.factory = informers.NewSharedInformerFactory(client, 0)
	h.local = informers.NewSharedInformerFactory(client, 0)
	h.Tracker = repair.New(repair.Options{Log: log})
	h.Reg.MustRegister(h.Tracker)
	return h
}

// Restrict makes Owners refuse owners outside features, as the agent does.
func (h *Host) Restrict(features []plan.Feature) { h.allowed = features }

// Start starts the informer factories and waits for their caches.
func (h *Host) Start(ctx context.Context) {
	h.factory.Start(ctx.Done())
	h.local.Start(ctx.Done())
	h.factory.WaitForCacheSync(ctx.Done())
	h.local.WaitForCacheSync(ctx.Done())
}

// Started initialises f on h, then starts h's informers with a context that
// ends when the test does, and returns that context. It fails the test if
// Init fails.
func (h *Host) Started(t testing.TB, f feature.Feature) context.Context {
	t.Helper()
	if err := f.Init(h); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h.Start(ctx)
	return ctx
}

// Synced is Started followed by f's first Sync, which must succeed.
func (h *Host) Synced(t testing.TB, f feature.Feature) context.Context {
	t.Helper()
	ctx := h.Started(t, f)
	if err := f.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	return ctx
}

// Repairs implements feature.Host.
func (h *Host) Repairs() *repair.Tracker { return h.Tracker }

// OnBridgeReady implements feature.Host.
func (h *Host) OnBridgeReady(f func(b plan.Bridge)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.onReady = append(h.onReady, f)
}

// BridgeReady calls the OnBridgeReady callbacks for bridge b, as the
// agent does once b's switch holds its flows after a connection.
func (h *Host) BridgeReady(b plan.Bridge) {
	h.mu.Lock()
	fs := append([]func(plan.Bridge){}, h.onReady...)
	h.mu.Unlock()
	for _, f := range fs {
		f(b)
	}
}

// SetNode replaces the node's facts and calls the OnNodeChange callbacks.
func (h *Host) SetNode(n feature.Node) {
	h.mu.Lock()
	h.node = n
	fs := append([]func(){}, h.onNode...)
	h.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// Sent returns the messages sent so far.
func (h *Host) Sent() []Sent {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Sent(nil), h.sent...)
}

// Log implements feature.Host.
func (h *Host) Log() logrus.FieldLogger { return h.Logger }

// Kube implements feature.Host.
func (h *Host) Kube() kubernetes.Interface { return h.Client }

// Informers implements feature.Host.
func (h *Host) Informers() informers.SharedInformerFactory { return h.factory }

// LocalPods implements feature.Host.
func (h *Host) LocalPods() informers.SharedInformerFactory { return h.local }

// Recorder implements feature.Host.
func (h *Host) Recorder() record.EventRecorder { return h.Events }

// Registry implements feature.Host.
func (h *Host) Registry() prometheus.Registerer { return h.Reg }

// Node implements feature.Host.
func (h *Host) Node() feature.Node {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.node
}

// OnNodeChange implements feature.Host.
func (h *Host) OnNodeChange(f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.onNode = append(h.onNode, f)
}

// NamespaceIDs implements feature.Host.
func (h *Host) NamespaceIDs() feature.NamespaceIDs { return h.ids }

// IDs returns the test's namespace id table, to set ids.
func (h *Host) IDs() *NamespaceIDs { return h.ids }

// Owners implements feature.Host.
func (h *Host) Owners(b plan.Bridge) feature.Owners {
	if h.allowed != nil {
		return feature.Restrict(h.Stores[b], "test", h.allowed)
	}
	return storeOwners{h.Stores[b]}
}

type storeOwners struct{ s *reconcile.Store }

func (o storeOwners) Set(owner string, st reconcile.State) error { return o.s.Set(owner, st) }
func (o storeOwners) List(prefix string) []string                { return o.s.Owners(prefix) }
func (o storeOwners) Contested(owner string, st reconcile.State) []reconcile.Contest {
	return o.s.Contested(owner, st)
}

// Flush implements feature.Host: there is no switch to wait for.
func (h *Host) Flush(ctx context.Context, _ ...plan.Bridge) error { return ctx.Err() }

// Dynamic implements feature.Host: there is no API server; features
// under test are given their own client.
func (h *Host) Dynamic() (dynamic.Interface, error) {
	return nil, errors.New("featuretest: no dynamic client: give the feature one")
}

// FlushThen implements feature.Host: it records msgs as sent.
func (h *Host) FlushThen(ctx context.Context, b plan.Bridge, msgs ...openflow.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return h.Send(ctx, b, msgs...)
}

// ReadFlows implements feature.Host: the test's Installed flows of b in
// table t with cookies of feature f.
func (h *Host) ReadFlows(_ context.Context, b plan.Bridge, t plan.TableID, f plan.Feature) ([]openflow.Flow, error) {
	if h.ReadErr != nil {
		return nil, h.ReadErr
	}
	var out []openflow.Flow
	for _, fl := range h.Installed[b] {
		if fl.Table == uint8(t) && plan.Cookie(fl.Cookie).Feature() == f {
			out = append(out, fl)
		}
	}
	return out, nil
}

// FlowStats implements feature.Host: the test's Counters of b in table t
// with cookies of feature f.
func (h *Host) FlowStats(_ context.Context, b plan.Bridge, t plan.TableID, f plan.Feature) ([]openflow.FlowStats, error) {
	if h.ReadErr != nil {
		return nil, h.ReadErr
	}
	var out []openflow.FlowStats
	for _, s := range h.Counters[b] {
		if s.Table == uint8(t) && plan.Cookie(s.Cookie).Feature() == f {
			out = append(out, s)
		}
	}
	return out, nil
}

// MeterStats implements feature.Host: the test's Meters of b.
func (h *Host) MeterStats(_ context.Context, b plan.Bridge) ([]openflow.MeterStats, error) {
	if h.ReadErr != nil {
		return nil, h.ReadErr
	}
	return h.Meters[b], nil
}

// Interfaces implements feature.Host: the test's Ifc.
func (h *Host) Interfaces() *ovsdb.InterfaceCache { return h.Ifc }

// OVSDB implements feature.Host: the test's DBFunc's answer, else DB.
func (h *Host) OVSDB() *ovsdb.Client {
	if h.DBFunc != nil {
		return h.DBFunc()
	}
	return h.DB
}

// SetSendError makes Send fail with err (nil: succeed again), as it
// does while the agent is not connected.
func (h *Host) SetSendError(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sendErr = err
}

// Send implements feature.Host: it records the messages, or fails with
// the error SetSendError gave.
func (h *Host) Send(_ context.Context, b plan.Bridge, msgs ...openflow.Message) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sendErr != nil {
		return h.sendErr
	}
	for _, m := range msgs {
		h.sent = append(h.sent, Sent{Bridge: b, Msg: m})
	}
	return nil
}

// WaitFor polls cond until it holds or the deadline passes.
func WaitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

// NamespaceIDs is a settable feature.NamespaceIDs.
type NamespaceIDs struct {
	mu  sync.Mutex
	ids map[string]uint32
	on  []func(string)
}

// Set gives namespace id (0 removes it) and calls the OnChange callbacks.
func (n *NamespaceIDs) Set(namespace string, id uint32) {
	n.mu.Lock()
	if id == 0 {
		delete(n.ids, namespace)
	} else {
		n.ids[namespace] = id
	}
	fs := append([]func(string){}, n.on...)
	n.mu.Unlock()
	for _, f := range fs {
		f(namespace)
	}
}

// Lookup implements feature.NamespaceIDs.
func (n *NamespaceIDs) Lookup(namespace string) (uint32, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	id, ok := n.ids[namespace]
	return id, ok
}

// OnChange implements feature.NamespaceIDs.
func (n *NamespaceIDs) OnChange(f func(string)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.on = append(n.on, f)
}

var _ feature.Host = (*Host)(nil)
