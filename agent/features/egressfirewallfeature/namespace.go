package egressfirewallfeature

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"nodeflow/datapath/egressfirewallflows"
	"nodeflow/datapath/reconcile"
	"nodeflow/lib/openflow"
	"nodeflow/model/egressfirewall"
)

// guardOwner owns table 50's guards.
const guardOwner = egressfirewallflows.GuardOwner

func guardState() reconcile.State { return reconcile.State{Flows: egressfirewallflows.GuardFlows()} }

// syncNamespaceLocked decides what namespace ns enforces and replaces its
// owner's flows in one Set, so that the reconciler installs the change as
// one bundle. It reports false when the flows could not be set (to be
// retried). f.mu is held.
func (f *Firewall) syncNamespaceLocked(ns string) bool {
	start := time.Now()
	log := f.log.WithField("namespace", ns)
	sel := egressfirewall.Select(ns, f.objects(ns))
	problems := sel.Problems
	defer func() { f.events.problems(ns, problems) }()

	st := f.ns[ns]
	if st == nil {
		st = &nsState{}
	}
	pol := sel.Policy
	if sel.Hold {
		// The object that should be enforced is invalid: keep what was
		// enforced before, whatever it was.
		pol = st.enforced
		if pol != nil && pol.Source.UID != sel.Chosen.UID {
			log.WithField("object", sel.Chosen.String()).Warn("invalid; still enforcing the policy before it")
		}
	}
	id, haveID := f.h.NamespaceIDs().Lookup(ns)
	owner := egressfirewallflows.Owner(ns)

	var (
		flows   int
		rules   int
		setErr  error
		newRefs []string
	)
	switch {
	case pol == nil:
		setErr = f.pod.Set(owner, reconcile.State{})
	case !haveID:
		// Without an id the namespace's pods carry no traffic yet; its
		// rules are built once the id comes (NamespaceIDs.OnChange).
		setErr = f.pod.Set(owner, reconcile.State{})
		pol = nil
	default:
		newRefs = dnsNames(pol)
		for _, n := range newRefs {
			if !slices.Contains(st.names, n) {
				if err := f.names.Add(n); err != nil {
					log.WithError(err).WithField("dnsName", n).Error("cannot register name")
				}
			}
		}
		var fl []openflow.Flow
		fl, setErr = f.build(ns, id, pol)
		if setErr == nil {
			setErr = f.pod.Set(owner, reconcile.State{Flows: fl})
			flows, rules = len(fl), len(pol.Rules)
		}
		if setErr != nil {
			// Keep the names of the policy still installed.
			for _, n := range newRefs {
				if !slices.Contains(st.names, n) {
					f.names.Release(n)
				}
			}
			newRefs = st.names
		}
	}
	if setErr != nil {
		f.m.syncErrors.Inc()
		log.WithError(setErr).Error("cannot set the namespace's egress firewall flows; keeping what is installed")
		st.failed = true
		f.ns[ns] = st
		if sel.Chosen.Kind == egressfirewall.KindEgressFirewall && !sel.Hold {
			f.status.want(sel.Chosen, notApplied(setErr))
		}
		return false
	}
	// The flows are set: release the names the old policy used and no
	// longer does, and record what is enforced.
	for _, n := range st.names {
		if !slices.Contains(newRefs, n) {
			f.names.Release(n)
		}
	}
	f.index(ns, st.enforced, pol)
	st.enforced, st.names, st.flows, st.rules, st.failed = pol, newRefs, flows, rules, false
	if pol == nil {
		delete(f.ns, ns)
		f.conj.Release(owner)
	} else {
		f.ns[ns] = st
	}
	f.m.syncDuration.Observe(time.Since(start).Seconds())

	// Names that do not resolve are reported: the rule is in place but
	// matches nothing.
	unresolved := f.unresolved(pol)
	problems = append(problems, unresolved...)

	// The status of the EgressFirewall that should be enforced.
	switch {
	case sel.Chosen.Kind != egressfirewall.KindEgressFirewall:
	case sel.Hold:
		var why error = errors.New("invalid")
		if len(sel.Problems) > 0 {
			why = sel.Problems[0].Err
		}
		f.status.want(sel.Chosen, notApplied(why))
	case !haveID:
		f.status.want(sel.Chosen, notApplied(fmt.Errorf("namespace %s has no namespace id yet", ns)))
	case len(unresolved) > 0:
		f.status.want(sel.Chosen, notApplied(unresolved[0].Err))
	default:
		f.status.want(sel.Chosen, applied())
	}
	f.status.keepOnly(ns, sel.Chosen)
	log.WithFields(logrus.Fields{"rules": rules, "flows": flows, "took": time.Since(start).String()}).Debug("namespace synced")
	return true
}

// build resolves pol's destinations and builds the namespace's flows.
func (f *Firewall) build(ns string, id uint32, pol *egressfirewall.Policy) ([]openflow.Flow, error) {
	block, err := f.conj.Get(egressfirewallflows.Owner(ns))
	if err != nil {
		return nil, fmt.Errorf("egressfirewall: namespace %s: %w", ns, err)
	}
	nodes := f.nodeList()
	rules := egressfirewallflows.Rules(pol, func(r egressfirewall.Rule) []netip.Prefix {
		switch r.Dest.Kind() {
		case egressfirewall.DestCIDR:
			return []netip.Prefix{r.Dest.CIDR}
		case egressfirewall.DestDNSName:
			return hostPrefixes(f.names.Addrs(r.Dest.DNSName))
		case egressfirewall.DestNodeSelector:
			var out []netip.Prefix
			for _, n := range nodes {
				if r.Dest.NodeSelector.Matches(labels.Set(n.Labels)) {
					out = append(out, hostPrefixes(nodeAddrs(n))...)
				}
			}
			return out
		}
		return nil
	})
	return egressfirewallflows.Build(f.config(), egressfirewallflows.Namespace{Name: ns, ID: id, ConjBlock: block, Rules: rules})
}

// ReasonDNSNameUnresolved is the event reason of a dnsName rule whose
// exact name does not resolve (NXDOMAIN, or no server answers): the rule
// is in place but matches no address until the name resolves.
const ReasonDNSNameUnresolved = "EgressFirewallDNSNameUnresolved"

// unresolved returns a problem for each rule of pol whose exact dnsName
// has been looked up and has no address because the lookup failed or the
// name does not exist. Wildcards are never looked up, so never reported.
func (f *Firewall) unresolved(pol *egressfirewall.Policy) []egressfirewall.Problem {
	if pol == nil {
		return nil
	}
	var out []egressfirewall.Problem
	for _, r := range pol.Rules {
		n := r.Dest.DNSName
		if n == "" || strings.HasPrefix(n, "*.") {
			continue
		}
		st, ok := f.names.Status(n)
		if !ok || st.LastLookup.IsZero() || len(st.Addrs) > 0 || st.LastError == nil {
			continue
		}
		ref := pol.Ref()
		out = append(out, egressfirewall.Problem{Object: ref, Reason: ReasonDNSNameUnresolved, Err: &egressfirewall.FieldError{
			Object: ref, Field: fmt.Sprintf("spec.egress[%d].to.dnsName", r.Index),
			Detail: fmt.Sprintf("%q does not resolve (%v); the rule matches no address until it does", n, st.LastError),
		}})
	}
	return out
}

// config is the node's facts the builder needs: each node IP with the
// host masquerade address that stands in for it at table 50.
func (f *Firewall) config() egressfirewallflows.Config {
	node := f.h.Node()
	var c egressfirewallflows.Config
	seen := map[bool]bool{}
	for _, ip := range node.Addrs() {
		if seen[ip.Is4()] {
			continue
		}
		seen[ip.Is4()] = true
		if m, ok := node.Masquerade.For(ip); ok {
			c.HostAliases = append(c.HostAliases, egressfirewallflows.HostAlias{Host: ip, Alias: m.Host})
		}
	}
	return c
}

// index records which namespaces use which names and select nodes, from
// the policy enforced before (old) to the one enforced now (cur).
func (f *Firewall) index(ns string, old, cur *egressfirewall.Policy) {
	for _, n := range dnsNames(old) {
		if s := f.byName[n]; s != nil {
			delete(s, ns)
			if len(s) == 0 {
				delete(f.byName, n)
			}
		}
	}
	for _, n := range dnsNames(cur) {
		s := f.byName[n]
		if s == nil {
			s = map[string]struct{}{}
			f.byName[n] = s
		}
		s[ns] = struct{}{}
	}
	if hasNodeSelector(cur) {
		f.withNodes[ns] = struct{}{}
	} else {
		delete(f.withNodes, ns)
	}
	_, had := f.withDNS[ns]
	has := cur != nil && cur.HasDNSNames()
	if has {
		f.withDNS[ns] = struct{}{}
	} else {
		delete(f.withDNS, ns)
	}
	if had != has {
		f.dmu.Lock()
		f.dnsDirty = true
		f.dmu.Unlock()
	}
}

// nodeList returns the Nodes the informer holds.
func (f *Firewall) nodeList() []*corev1.Node {
	var out []*corev1.Node
	for _, o := range f.nodeInf.GetStore().List() {
		if n, ok := o.(*corev1.Node); ok {
			out = append(out, n)
		}
	}
	return out
}

// updateGaugesLocked sets the gauges from the namespaces' state.
func (f *Firewall) updateGaugesLocked() {
	var rules, flows int
	for _, st := range f.ns {
		rules += st.rules
		flows += st.flows
	}
	f.m.namespaces.Set(float64(len(f.ns)))
	f.m.rules.Set(float64(rules))
	f.m.flows.Set(float64(flows))
}

// dnsNames returns the distinct dnsNames of p's rules, in rule order.
func dnsNames(p *egressfirewall.Policy) []string {
	if p == nil {
		return nil
	}
	var out []string
	for _, r := range p.Rules {
		if n := r.Dest.DNSName; n != "" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

func hasNodeSelector(p *egressfirewall.Policy) bool {
	if p == nil {
		return false
	}
	for _, r := range p.Rules {
		if r.Dest.Kind() == egressfirewall.DestNodeSelector {
			return true
		}
	}
	return false
}

// hostPrefixes returns each address as a /32 or /128.
func hostPrefixes(addrs []netip.Addr) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(addrs))
	for _, a := range addrs {
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out
}

// nodeAddrs returns a Node's internal and external addresses, sorted.
func nodeAddrs(n *corev1.Node) []netip.Addr {
	var out []netip.Addr
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			out = append(out, ip.Unmap())
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// podAddrs returns a pod's addresses; none for a host-network pod, whose
// traffic never crosses br0's pod ports.
func podAddrs(p *corev1.Pod) []netip.Addr {
	if p.Spec.HostNetwork {
		return nil
	}
	var out []netip.Addr
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

func mapsEqual(a, b map[string]string) bool { return maps.Equal(a, b) }

// specEqual reports whether two versions of an object have the same spec
// (what the firewall reads besides the name). The API server bumps a
// custom resource's metadata.generation on every change of its spec and
// never on a change of its status (both CRDs have the status subresource),
// so equal generations are equal specs: comparing 8,000 rules item by item
// on every status write cost tens of milliseconds. Without generations (a
// client that does not set them) the specs are compared.
func specEqual(a, b *unstructured.Unstructured) bool {
	if a.GetUID() != b.GetUID() {
		return false
	}
	if ga, gb := a.GetGeneration(), b.GetGeneration(); ga != 0 && gb != 0 {
		return ga == gb
	}
	return reflect.DeepEqual(a.Object["spec"], b.Object["spec"])
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
