// Package networkpolicyfeature is the node agent's NetworkPolicy feature
// (networking.k8s.io/v1) on br0: egress in table 45, after the service DNAT,
// so that a connection to a ClusterIP is judged by the endpoint it reaches;
// ingress in table 65, before delivery to a local pod. The semantics are
// package netpol's; the flows are package datapath/networkpolicyflows's; this package
// keeps the Index (which pods, namespaces and policies give which clause
// keys) up to date from the API and writes the owners each change touches.
//
// It watches every pod (a stripped copy: labels, addresses, ports,
// node), every namespace and every NetworkPolicy, and takes the local
// pods' br0 ports from OVSDB as the CNI plugin records them. A policy the
// model refuses keeps its last good version, with a Warning event on it.
package networkpolicyfeature

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"nodeflow/agent/feature"
	"nodeflow/datapath/networkpolicyflows"
	"nodeflow/datapath/plan"
	"nodeflow/datapath/reconcile"
	"nodeflow/host/cni"
	"nodeflow/lib/openflow"
	"nodeflow/lib/syncloop"
	"nodeflow/model/networkpolicy"
)

// Options configure the feature.
type Options struct {
	// CounterInterval is how often the packet counters are read (0:
	// DefaultCounterInterval).
	CounterInterval time.Duration
}

// Feature implements feature.Feature.
type Feature struct {
	opts Options
	h    feature.Host
	log  logrus.FieldLogger
	pod  feature.Owners

	pods, namespaces, policies cache.SharedIndexInformer

	// loop processes the changes marked: objects, OVSDB's ports, the
	// node's facts.
	loop *syncloop.Keyed[change]

	// Owned by the loop (and Sync before it); the counters read the index
	// under idxMu.
	idxMu    sync.RWMutex
	idx      *Index
	counters counterMetrics
	podPorts map[string]uint32 // local pod (namespace/name) -> br0 port
	warned   map[string]string // policy -> last refusal reported
	metrics  metrics
}

type metrics struct {
	policies, rules prometheus.Gauge
	refused         prometheus.Gauge
	changes         prometheus.Counter
	latency         prometheus.Histogram
	errors          prometheus.Counter
}

// change is what the sync loop is told changed: an object (its kind and
// namespace/name key), or OVSDB's ports or the node's facts (key empty).
type change struct {
	kind changeKind
	key  string
}

type changeKind uint8

const (
	podChanged changeKind = iota
	namespaceChanged
	policyChanged
	portsChanged  // OVSDB's ports
	configChanged // the node's facts
)

// New returns the feature.
func New(opts Options) *Feature {
	feature.DefaultIfUnset(&opts.CounterInterval, DefaultCounterInterval)
	f := &Feature{opts: opts, podPorts: map[string]uint32{}, warned: map[string]string{}}
	f.loop = syncloop.NewKeyed(f.pass, syncloop.KeyedOptions{})
	return f
}

// Name implements feature.Feature.
func (f *Feature) Name() string { return "netpolicy" }

// Owns implements feature.Feature.
func (f *Feature) Owns() []plan.Feature { return []plan.Feature{plan.FeatureNetworkPolicy} }

// Init implements feature.Feature.
func (f *Feature) Init(h feature.Host) error {
	f.h, f.log = h, h.Log()
	f.pod = h.Owners(plan.Pod)
	if err := f.initMetrics(h.Registry()); err != nil {
		return err
	}
	f.pods = h.Informers().Core().V1().Pods().Informer()
	// Every pod of the cluster is a possible peer: keep only what policies
	// look at. (No other feature reads the cluster-wide pod informer; one
	// that does must need no more than this.)
	if err := f.pods.SetTransform(slimPod); err != nil {
		return fmt.Errorf("netpolicy: pods: %w", err)
	}
	f.namespaces = h.Informers().Core().V1().Namespaces().Informer()
	f.policies = h.Informers().Networking().V1().NetworkPolicies().Informer()
	if err := f.policies.SetTransform(stripManagedFields); err != nil {
		return fmt.Errorf("netpolicy: policies: %w", err)
	}
	handlers := []struct {
		inf  cache.SharedIndexInformer
		kind changeKind
		what string
	}{
		{f.pods, podChanged, "pods"},
		{f.namespaces, namespaceChanged, "namespaces"},
		{f.policies, policyChanged, "networkpolicies"},
	}
	for _, hd := range handlers {
		mark := func(obj any) {
			key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
			if err != nil {
				return
			}
			f.loop.Mark(change{hd.kind, key})
		}
		if _, err := hd.inf.AddEventHandler(feature.OnEveryChange(mark)); err != nil {
			return fmt.Errorf("netpolicy: %s: %w", hd.what, err)
		}
	}
	h.OnNodeChange(func() { f.loop.Mark(change{kind: configChanged}) })
	return nil
}

func (f *Feature) initMetrics(reg prometheus.Registerer) error {
	f.metrics = metrics{
		policies: feature.NewGauge("nodeflow_netpol_policies", "NetworkPolicies the agent enforces."),
		rules:    feature.NewGauge("nodeflow_netpol_rules", "NetworkPolicy rules (one conjunction each)."),
		refused:  feature.NewGauge("nodeflow_netpol_refused_policies", "NetworkPolicies the agent refuses (their last good version, if any, stays)."),
		changes:  feature.NewCounter("nodeflow_netpol_owner_changes_total", "Flow owners rewritten for NetworkPolicy (a policy, a pod, a peer prefix)."),
		latency:  feature.NewHistogram("nodeflow_netpol_sync_seconds", "Time to turn a batch of pod, namespace and policy changes into desired flows.", prometheus.ExponentialBuckets(0.0001, 2, 16)),
		errors:   feature.NewCounter("nodeflow_netpol_errors_total", "Owners whose flows could not be built or set."),
	}
	if err := feature.Register(reg, f.metrics.policies, f.metrics.rules, f.metrics.refused, f.metrics.changes, f.metrics.latency, f.metrics.errors); err != nil {
		return fmt.Errorf("netpolicy: metrics: %w", err)
	}
	var err error
	f.counters, err = newCounterMetrics(reg)
	return err
}

// Sync implements feature.Feature: every pod, namespace and policy.
func (f *Feature) Sync(ctx context.Context) error {
	f.idxMu.Lock()
	defer f.idxMu.Unlock()
	// Changes from now on are marked again and processed by Run: clear
	// the marks before reading the stores, not after, or a change that
	// lands meanwhile would be lost.
	f.loop.Reset()
	f.idx = NewIndex(f.config0())
	f.readPorts()
	for _, obj := range f.namespaces.GetStore().List() {
		if ns, ok := obj.(*v1.Namespace); ok {
			f.idx.SetNamespace(ns.Name, ns.Labels)
			f.idx.SetLogging(ns.Name, logsDenied(ns.Annotations))
		}
	}
	// In key order, so that a restarted agent gives the same policies the
	// same conjunction ids, and its flows equal those installed.
	keys := f.policies.GetStore().ListKeys()
	slices.Sort(keys)
	for _, key := range keys {
		f.syncPolicy(key)
	}
	for _, key := range f.pods.GetStore().ListKeys() {
		f.syncPod(key)
	}
	f.write()
	return nil
}

// Run implements feature.Feature.
func (f *Feature) Run(ctx context.Context) {
	if ifc := f.h.Interfaces(); ifc != nil {
		// The local pods' ports come from OVSDB: re-read them.
		go ifc.OnChange(ctx, func() { f.loop.Mark(change{kind: portsChanged}) })
	}
	go f.runCounters(ctx)
	f.loop.Loop(ctx)
}

// config0 returns the node's configuration of the policy flows.
func (f *Feature) config0() networkpolicyflows.Config {
	n := f.h.Node()
	return networkpolicyflows.Config{PodCIDRs: n.PodCIDRs, Masquerade: n.Masquerade}
}

// readPorts reads the local pods' br0 ports from OVSDB, and returns the
// pods (namespace/name) whose port changed, came or went.
func (f *Feature) readPorts() []string {
	ifc := f.h.Interfaces()
	if ifc == nil {
		return nil
	}
	ports := map[string]uint32{}
	for _, i := range ifc.List() {
		ids := i.ExternalIDs
		if ids[cni.ExternalIDOwner] != cni.OwnerCNI || i.Ofport <= 0 {
			continue
		}
		ports[ids[cni.ExternalIDPodNamespace]+"/"+ids[cni.ExternalIDPodName]] = uint32(i.Ofport)
	}
	var changed []string
	for k, v := range ports {
		if f.podPorts[k] != v {
			changed = append(changed, k)
		}
	}
	for k := range f.podPorts {
		if _, ok := ports[k]; !ok {
			changed = append(changed, k)
		}
	}
	f.podPorts = ports
	return changed
}

// pass is the sync loop's function: it applies the changes marked since
// the last pass. Nothing fails to be retried: an owner whose flows cannot
// be set is counted and logged.
func (f *Feature) pass(_ context.Context, changes []change, _ bool) []change {
	if len(changes) == 0 {
		return nil
	}
	start := time.Now()
	f.idxMu.Lock()
	defer f.idxMu.Unlock()
	pods, nss, pols := map[string]bool{}, map[string]bool{}, map[string]bool{}
	var ports, config bool
	for _, c := range changes {
		switch c.kind {
		case podChanged:
			pods[c.key] = true
		case namespaceChanged:
			nss[c.key] = true
		case policyChanged:
			pols[c.key] = true
		case portsChanged:
			ports = true
		case configChanged:
			config = true
		}
	}
	if config {
		// The base and rule flows follow the node's pod subnets.
		f.idx.SetConfig(f.config0())
	}
	if ports {
		for _, k := range f.readPorts() {
			pods[k] = true
		}
	}
	for name := range nss {
		var lbl map[string]string
		logs := false
		if obj, ok, _ := f.namespaces.GetStore().GetByKey(name); ok {
			if ns, ok := obj.(*v1.Namespace); ok {
				lbl, logs = ns.Labels, logsDenied(ns.Annotations)
				if lbl == nil {
					lbl = map[string]string{}
				}
			}
		}
		f.idx.SetNamespace(name, lbl)
		f.idx.SetLogging(name, logs)
	}
	for key := range pols {
		f.syncPolicy(key)
	}
	for key := range pods {
		f.syncPod(key)
	}
	f.write()
	f.metrics.latency.Observe(time.Since(start).Seconds())
	return nil
}

// syncPolicy gives the index policy key's current version; one the model
// refuses keeps its last good one.
func (f *Feature) syncPolicy(key string) {
	obj, ok, _ := f.policies.GetStore().GetByKey(key)
	if !ok {
		f.idx.SetPolicy(key, nil)
		delete(f.warned, key)
		f.metrics.refused.Set(float64(len(f.warned)))
		return
	}
	np, ok := obj.(*networkingv1.NetworkPolicy)
	if !ok {
		return
	}
	p, err := networkpolicy.Compile(np)
	if err != nil {
		if f.warned[key] != err.Error() {
			f.warned[key] = err.Error()
			f.log.WithError(err).WithField("networkpolicy", key).Warn("NetworkPolicy refused; its last good version (if any) stays enforced")
			f.h.Recorder().Event(np, v1.EventTypeWarning, "NetworkPolicyRefused", err.Error())
		}
		f.metrics.refused.Set(float64(len(f.warned)))
		return
	}
	delete(f.warned, key)
	f.metrics.refused.Set(float64(len(f.warned)))
	f.idx.SetPolicy(key, p)
}

// syncPod gives the index pod key's current state.
func (f *Feature) syncPod(key string) {
	obj, ok, _ := f.pods.GetStore().GetByKey(key)
	if !ok {
		f.idx.SetPod(key, nil)
		return
	}
	k, ok := obj.(*v1.Pod)
	if !ok {
		return
	}
	f.idx.SetPod(key, PodOf(k, f.h.Node().Name, f.podPorts[key]))
}

// PodOf returns what the index needs of pod k on node (nil for a pod that
// has finished, whose addresses may already be another's); port is its
// br0 port when it runs on this node.
func PodOf(k *v1.Pod, node string, port uint32) *Pod {
	if k.Status.Phase == v1.PodSucceeded || k.Status.Phase == v1.PodFailed || k.DeletionTimestamp != nil && len(k.Status.PodIPs) == 0 {
		return nil
	}
	p := &Pod{Namespace: k.Namespace, Name: k.Name, Labels: k.Labels, HostNetwork: k.Spec.HostNetwork,
		Local: k.Spec.NodeName == node && node != ""}
	if p.Local {
		p.OFPort = port
	}
	for _, ip := range k.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			p.IPs = append(p.IPs, a.Unmap())
		}
	}
	for _, c := range append(slices.Clone(k.Spec.InitContainers), k.Spec.Containers...) {
		p.Ports = append(p.Ports, c.Ports...)
	}
	return p
}

// write sets every owner the index marked, those that allow before those
// that isolate: policies and peers, then pods.
func (f *Feature) write() {
	owners := f.idx.TakeDirty()
	rank := func(o string) int {
		if strings.HasPrefix(o, "netpol/pod/") {
			return 1
		}
		return 0
	}
	slices.SortStableFunc(owners, func(a, b string) int { return cmp.Compare(rank(a), rank(b)) })
	for _, o := range owners {
		fs, err := f.idx.Flows(o)
		if err == nil {
			st := reconcile.State{Flows: fs}
			if o == networkpolicyflows.OwnerBase {
				st.Meters = []openflow.MeterEntry{networkpolicyflows.LogMeter()}
			}
			err = f.pod.Set(o, st)
		}
		if err != nil {
			f.metrics.errors.Inc()
			f.log.WithError(err).WithField("owner", o).Error("cannot set NetworkPolicy flows")
			continue
		}
		f.metrics.changes.Inc()
	}
	f.metrics.policies.Set(float64(f.idx.Policies()))
	f.metrics.rules.Set(float64(f.idx.Rules()))
}

// slimPod keeps what the index reads of a pod.
func slimPod(obj any) (any, error) {
	k, ok := obj.(*v1.Pod)
	if !ok {
		return obj, nil
	}
	out := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: k.Name, Namespace: k.Namespace, UID: k.UID, Labels: k.Labels,
			ResourceVersion: k.ResourceVersion, DeletionTimestamp: k.DeletionTimestamp},
		Spec:   v1.PodSpec{NodeName: k.Spec.NodeName, HostNetwork: k.Spec.HostNetwork},
		Status: v1.PodStatus{Phase: k.Status.Phase, PodIPs: k.Status.PodIPs},
	}
	slim := func(cs []v1.Container) []v1.Container {
		var out []v1.Container
		for _, c := range cs {
			if len(c.Ports) > 0 {
				out = append(out, v1.Container{Name: c.Name, Ports: c.Ports})
			}
		}
		return out
	}
	out.Spec.Containers, out.Spec.InitContainers = slim(k.Spec.Containers), slim(k.Spec.InitContainers)
	return out, nil
}

// stripManagedFields drops the managed fields, which nothing here reads.
func stripManagedFields(obj any) (any, error) {
	if np, ok := obj.(*networkingv1.NetworkPolicy); ok {
		np.ManagedFields = nil
	}
	return obj, nil
}
