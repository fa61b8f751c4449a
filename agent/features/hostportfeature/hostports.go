// Package hostportfeature is the node agent's hostPort feature: a container port
// with a hostPort is reached at the node's addresses and that port, as the
// portmap CNI plugin gives it to other CNIs.
//
// For each pod of this node (not host-network) with hostPorts, it keeps
// the pod's flows (datapath/hostportflows) under the owner "hostport/<ns>/<pod>"
// on both bridges: the DNAT in br0's table 30 for connections from pods,
// other nodes and the outside world, and breth0's ingress from the uplink.
// The host's own connections to its hostPorts never reach the bridges (the
// kernel delivers them locally): an nftables table of its own,
// `nodeflow-hostports` (one per family, as package hostnat builds it),
// DNATs them in the output path to the pod. A hostPort without a hostIP
// is on every node IP of the pod IP's family and on the loopback address
// of that family; a hostIP of 127.0.0.1 (or ::1) is for the host only.
// The host's connections to a loopback hostPort must come from a node
// address (curl --interface): the kernel does not route a 127.0.0.0/8
// source out of the loopback device, as with the portmap plugin in IPv6.
//
// A mapping nodeflow cannot serve (an SCTP hostPort on another port than
// its container port, a hostIP of the other family) gets a Warning event
// on its pod naming it; the pod's other mappings are served.
package hostportfeature

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"nodeflow/agent/feature"
	"nodeflow/datapath/hostportflows"
	"nodeflow/datapath/plan"
	"nodeflow/datapath/reconcile"
	"nodeflow/host/nat"
	"nodeflow/lib/syncloop"
)

// NFTable is the name of the feature's nftables tables.
const NFTable = nat.HostPortsTable

// retryInterval is the wait before retrying a failed nftables apply.
const retryInterval = 5 * time.Second

// hostKey is the sync loop's key for the host's nftables rules (a pod's
// key is never empty).
const hostKey = ""

// HostPorts implements feature.Feature.
type HostPorts struct {
	opts    Options
	h       feature.Host
	log     logrus.FieldLogger
	pods    cache.SharedIndexInformer
	applier *nat.Applier

	// loop syncs the pods marked (namespace/name keys; all of them on a
	// full pass), then the host's rules (hostKey, retried when they fail).
	loop *syncloop.Keyed[string]

	mu sync.Mutex
	// mappings holds each served pod's mappings, for the host's rules.
	mappings map[string][]hostportflows.Mapping
	// warned holds the last warning given for each pod, so that each is
	// given once.
	warned map[string]string
}

// New returns the feature.
// Options configure the hostPort feature.
type Options struct {
	// ReservedPorts are the node's own TCP ports, which no hostPort may
	// take: the kubelet's API (KubeletPort) and the agent's listeners.
	ReservedPorts []uint16
}

// KubeletPort is the kubelet's API port: a hostPort on it would take the
// API server's connections to the kubelet (logs, exec) on that node.
const KubeletPort = 10250

// New returns the hostPort feature.
func New(opts Options) *HostPorts {
	f := &HostPorts{opts: opts, mappings: map[string][]hostportflows.Mapping{}, warned: map[string]string{}}
	f.loop = syncloop.NewKeyed(f.pass, syncloop.KeyedOptions{RetryInterval: retryInterval})
	return f
}

// Name implements feature.Feature.
func (f *HostPorts) Name() string { return "hostports" }

// Owns implements feature.Feature.
func (f *HostPorts) Owns() []plan.Feature { return []plan.Feature{plan.FeatureHostPort} }

// APIAccess implements feature.APIUser: this node's pods, and events on
// them.
func (f *HostPorts) APIAccess() []feature.APIAccess {
	return []feature.APIAccess{{Verb: "list", Resource: "pods"}, {Verb: "watch", Resource: "pods"}, {Verb: "create", Resource: "events"}}
}

// Init implements feature.Feature.
func (f *HostPorts) Init(h feature.Host) error {
	f.h, f.log = h, h.Log()
	f.pods = h.LocalPods().Core().V1().Pods().Informer()
	if _, err := f.pods.AddEventHandler(feature.OnEveryChange(f.podChanged)); err != nil {
		return fmt.Errorf("hostports: pods: %w", err)
	}
	h.OnNodeChange(f.loop.MarkAll)
	return nil
}

// Sync implements feature.Feature: every local pod's hostPorts, before the
// reconcilers start.
func (f *HostPorts) Sync(ctx context.Context) error {
	f.loop.MarkAll()
	f.loop.SyncNow(ctx)
	return nil
}

// Run implements feature.Feature: it rebuilds the pods that change and
// programs the host's rules, retrying a failed apply after retryInterval.
func (f *HostPorts) Run(ctx context.Context) {
	f.applier = nat.NewApplier(nat.Options{Table: NFTable})
	f.loop.Loop(ctx)
}

// pass is the sync loop's function: the pods marked (or all of them),
// then the host's rules once the loop runs. A failed apply returns
// hostKey, for a retry after retryInterval.
func (f *HostPorts) pass(_ context.Context, keys []string, full bool) (failed []string) {
	f.syncPods(keys, full)
	if f.applier == nil {
		return nil // Sync, before Run
	}
	if err := f.applyHost(); err != nil {
		f.log.WithError(err).Error("cannot program the host's DNAT to its hostPorts; retrying")
		return []string{hostKey}
	}
	return nil
}

func (f *HostPorts) podChanged(obj any) {
	pod, ok := feature.ObjectOf[*v1.Pod](obj)
	if !ok {
		return
	}
	f.loop.Mark(pod.Namespace + "/" + pod.Name)
}

// syncPods rebuilds the pods marked dirty (or all of them).
func (f *HostPorts) syncPods(marked []string, all bool) {
	keys := slices.DeleteFunc(marked, func(k string) bool { return k == hostKey })
	if all {
		keys = append(keys, f.pods.GetStore().ListKeys()...)
		f.mu.Lock()
		for k := range f.mappings {
			keys = append(keys, k)
		}
		f.mu.Unlock()
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	node := f.h.Node()
	hn := hostportflows.Node{IPs: node.Addrs(), Secondary: node.Secondary, Reserved: f.opts.ReservedPorts,
		Uplink: node.Ports.Uplink, Patch: node.Ports.GatewayPatch}
	for _, key := range keys {
		f.syncPod(hn, key)
	}
}

// syncPod sets the owner of one pod from its current state.
func (f *HostPorts) syncPod(node hostportflows.Node, key string) {
	ns, name, _ := strings.Cut(key, "/")
	owner := hostportflows.Owner(ns, name)
	var pod *v1.Pod
	if obj, exists, err := f.pods.GetStore().GetByKey(key); err == nil && exists {
		pod, _ = obj.(*v1.Pod)
	}
	ms, bad := Mappings(pod)
	var good []hostportflows.Mapping
	for _, m := range ms {
		if err := m.CheckOn(node); err != nil {
			bad = append(bad, err.Error())
			continue
		}
		good = append(good, m)
	}
	f.warn(pod, key, bad)
	out, err := hostportflows.Build(node, good)
	if err != nil { // Check passed: a broken invariant
		f.log.WithError(err).WithField("pod", key).Error("cannot build hostPorts")
		return
	}
	for _, x := range []struct {
		b  plan.Bridge
		st reconcile.State
	}{{plan.Pod, out.Pod}, {plan.Gateway, out.Gateway}} {
		if err := f.h.Owners(x.b).Set(owner, x.st); err != nil {
			f.log.WithError(err).WithFields(logrus.Fields{"pod": key, "bridge": x.b}).Error("cannot set hostPort flows")
			f.event(pod, fmt.Sprintf("hostPorts not served: %v", err))
		}
	}
	f.mu.Lock()
	if len(good) == 0 {
		delete(f.mappings, key)
	} else {
		f.mappings[key] = good
	}
	f.mu.Unlock()
}

// warn gives a pod's problems as one Warning event, once per change.
func (f *HostPorts) warn(pod *v1.Pod, key string, bad []string) {
	msg := strings.Join(bad, "; ")
	f.mu.Lock()
	same := f.warned[key] == msg
	if msg == "" || pod == nil {
		delete(f.warned, key)
	} else {
		f.warned[key] = msg
	}
	f.mu.Unlock()
	if msg == "" || pod == nil || same {
		return
	}
	f.log.WithField("pod", key).Warn(msg)
	f.event(pod, msg)
}

func (f *HostPorts) event(pod *v1.Pod, msg string) {
	if pod != nil {
		f.h.Recorder().Event(pod, v1.EventTypeWarning, "HostPortNotServed", msg)
	}
}

// applyHost programs the host's own DNAT rules from the pods' mappings
// (the applier sends nothing when they did not change).
func (f *HostPorts) applyHost() error {
	f.mu.Lock()
	keys := make([]string, 0, len(f.mappings))
	for k := range f.mappings {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var rules []nat.Rule
	nodeIPs := f.h.Node().Addrs()
	for _, k := range keys {
		rules = append(rules, HostRules(nodeIPs, f.mappings[k])...)
	}
	f.mu.Unlock()
	rs, dropped := nat.NewRuleset(rules)
	for _, r := range dropped {
		f.log.WithField("rule", r.String()).Warn("two pods want one hostPort on the host; the first in name order keeps it")
	}
	return f.applier.Apply(rs)
}

// HostRules returns the nftables DNAT rules that take the host's own
// connections to mappings ms to their pods: one per host address (see
// hostport.Mapping.Addrs) and, without a hostIP, the loopback address of
// the pod IP's family.
func HostRules(nodeIPs []netip.Addr, ms []hostportflows.Mapping) []nat.Rule {
	var out []nat.Rule
	for _, m := range ms {
		p, err := nat.ParseProto(string(m.Protocol))
		if err != nil {
			continue
		}
		addrs := m.Addrs(nodeIPs)
		if !m.HostIP.IsValid() || m.HostIP.IsUnspecified() {
			lo := netip.MustParseAddr("127.0.0.1")
			if m.PodIP.Is6() {
				lo = netip.IPv6Loopback()
			}
			addrs = append(addrs, lo)
		}
		for _, a := range addrs {
			out = append(out, nat.Rule{Key: nat.Key{Daddr: a, Proto: p, Port: m.HostPort}, To: netip.AddrPortFrom(m.PodIP, m.ContainerPort)})
		}
	}
	return out
}

// Mappings returns a pod's hostPort mappings, one per container port with
// a hostPort and pod IP of the port's family (the hostIP's, or both when it
// has none), and what cannot be mapped (an unparsable hostIP). A pod that
// is gone, finished, on the host's network or without IPs has none.
func Mappings(pod *v1.Pod) ([]hostportflows.Mapping, []string) {
	if pod == nil || pod.Spec.HostNetwork || pod.DeletionTimestamp != nil ||
		pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
		return nil, nil
	}
	var ips []netip.Addr
	for _, ip := range pod.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			ips = append(ips, a.Unmap())
		}
	}
	var out []hostportflows.Mapping
	var bad []string
	containers := slices.Clone(pod.Spec.Containers)
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			containers = append(containers, c) // sidecars run beside the others
		}
	}
	for _, c := range containers {
		for i, p := range c.Ports {
			if p.HostPort <= 0 || p.HostPort > 65535 || p.ContainerPort <= 0 || p.ContainerPort > 65535 {
				continue
			}
			var host netip.Addr
			if p.HostIP != "" {
				a, err := netip.ParseAddr(p.HostIP)
				if err != nil {
					bad = append(bad, fmt.Sprintf("spec.containers[%s].ports[%d].hostIP %q: not an IP address", c.Name, i, p.HostIP))
					continue
				}
				host = a.Unmap()
			}
			proto := p.Protocol
			if proto == "" {
				proto = v1.ProtocolTCP
			}
			for _, ip := range ips {
				if host.IsValid() && !host.IsUnspecified() && host.Is4() != ip.Is4() {
					continue
				}
				if host.IsUnspecified() && host.Is4() != ip.Is4() {
					continue // 0.0.0.0 is IPv4's, :: IPv6's
				}
				out = append(out, hostportflows.Mapping{Protocol: proto, HostIP: host, HostPort: uint16(p.HostPort), PodIP: ip, ContainerPort: uint16(p.ContainerPort)})
			}
		}
	}
	return out, bad
}
