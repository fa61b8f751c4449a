package egressfirewallfeature

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	coreinformers "k8s.io/client-go/informers/core/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"nodeflow/agent/feature"
	"nodeflow/datapath/egressfirewallflows"
)

// Whom the DNS learner trusts (datapath/egressfirewallflows.DNSSources says how a reply
// proves it): the cluster DNS Services (Options.ClusterDNSServices), read
// from the API as they change, their own ClusterIPs and the addresses of
// the EndpointSlices the EndpointSlice controller made for them, each with
// the id of the Service's namespace; the agent's own resolvers; and the
// resolvers the operator names (Options.TrustedDNS). Every node reads the
// same objects and configuration, so every node makes the same decision
// (the node's own resolvers aside, which only its pods' replies from the
// gateway or host can match).

// DefaultClusterDNSService is the cluster DNS Service trusted when
// Options.ClusterDNSServices is nil.
var DefaultClusterDNSService = types.NamespacedName{Namespace: metav1.NamespaceSystem, Name: "kube-dns"}

// endpointSliceController is the EndpointSlice controller's value of the
// managed-by label: only its slices, made from the Service's selector,
// count.
const endpointSliceController = "endpointslice-controller.k8s.io"

// ParseClusterDNSServices parses "namespace/name" entries (empty ones are
// skipped), for the --cluster-dns-service flag and its configuration
// field.
func ParseClusterDNSServices(ss []string) ([]types.NamespacedName, error) {
	out := []types.NamespacedName{}
	for i, s := range ss {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		ns, name, ok := strings.Cut(s, "/")
		if !ok {
			return nil, fmt.Errorf("cluster DNS Service [%d] %q: want namespace/name", i, s)
		}
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return nil, fmt.Errorf("cluster DNS Service [%d] %q: namespace: %s", i, s, strings.Join(errs, "; "))
		}
		if errs := validation.IsDNS1035Label(name); len(errs) > 0 {
			return nil, fmt.Errorf("cluster DNS Service [%d] %q: name: %s", i, s, strings.Join(errs, "; "))
		}
		k := types.NamespacedName{Namespace: ns, Name: name}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out, nil
}

// ParseTrustedDNS parses addresses ("169.254.20.10", taken as one
// address) and prefixes, for the --trusted-dns flag and its configuration
// field.
func ParseTrustedDNS(ss []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for i, s := range ss {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		var p netip.Prefix
		if a, err := netip.ParseAddr(s); err == nil {
			if a.Zone() != "" {
				return nil, fmt.Errorf("trusted DNS [%d] %q: an address with a zone cannot be matched", i, s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		} else if p, err = netip.ParsePrefix(s); err != nil {
			return nil, fmt.Errorf("trusted DNS [%d] %q: not an address or a prefix", i, s)
		}
		if p.Addr().Is4In6() {
			return nil, fmt.Errorf("trusted DNS [%d] %q: an IPv4-mapped address cannot be matched; give the IPv4 address", i, s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// CheckTrustedDNS refuses trusted resolvers that overlap the cluster's
// pod or service networks: a reply from such an address is a pod's or a
// Service's, which only the cluster DNS Services' own attribution can
// vouch for (a tenant's Service with an endpoint outside the cluster
// answers from its ClusterIP through the gateway).
func CheckTrustedDNS(trusted, clusterCIDRs, serviceCIDRs []netip.Prefix) error {
	for _, p := range trusted {
		for _, kind := range []struct {
			what string
			nets []netip.Prefix
		}{{"pod network", clusterCIDRs}, {"service network", serviceCIDRs}} {
			for _, n := range kind.nets {
				if p.Overlaps(n) {
					return fmt.Errorf("trusted DNS %s overlaps the %s %s: name a cluster DNS Service (--cluster-dns-service) instead", p, kind.what, n)
				}
			}
		}
	}
	return nil
}

// dnsTrust keeps the trusted sources current.
type dnsTrust struct {
	f        *Firewall
	log      logrus.FieldLogger
	services []types.NamespacedName
	// resolvers are the agent's own and the operator's, sorted.
	resolvers []netip.Prefix
	infs      []trustInformers
	// changed is called when the sources change.
	changed func()

	// umu makes each update whole: read the caches, store, call changed.
	umu    sync.Mutex
	mu     sync.Mutex
	cur    egressfirewallflows.DNSSources
	issues map[types.NamespacedName]string // what was last logged about each Service
	// synced is set once the informers' caches hold what they listed:
	// before, a Service not there yet is not reported as missing.
	synced atomic.Bool
}

// trustInformers watch one cluster DNS Service and its EndpointSlices, in
// its namespace only.
type trustInformers struct {
	key      types.NamespacedName
	svc      cache.SharedIndexInformer
	slices   cache.SharedIndexInformer
	services cache.Indexer
}

// newDNSTrust builds the informers of the trusted Services and the
// resolver list; it does no I/O.
func newDNSTrust(f *Firewall, services []types.NamespacedName, resolvers []netip.Prefix, changed func()) (*dnsTrust, error) {
	t := &dnsTrust{f: f, log: f.log, services: services, changed: changed, issues: map[types.NamespacedName]string{}}
	rs := slices.Clone(resolvers)
	slices.SortFunc(rs, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	t.resolvers = slices.Compact(rs)
	kube := f.h.Kube()
	if kube == nil {
		return t, nil
	}
	for _, k := range services {
		svc := coreinformers.NewFilteredServiceInformer(kube, k.Namespace, 10*time.Minute, cache.Indexers{},
			func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", k.Name).String()
			})
		sl := discoveryinformers.NewFilteredEndpointSliceInformer(kube, k.Namespace, 10*time.Minute, cache.Indexers{},
			func(o *metav1.ListOptions) {
				o.LabelSelector = labels.SelectorFromSet(labels.Set{discovery.LabelServiceName: k.Name}).String()
			})
		for _, inf := range []cache.SharedIndexInformer{svc, sl} {
			if err := inf.SetTransform(stripManagedFields); err != nil {
				return nil, fmt.Errorf("egressfirewall: cluster DNS Service %s: %w", k, err)
			}
			if _, err := inf.AddEventHandler(feature.OnEveryChange(func(any) { t.update() })); err != nil {
				return nil, fmt.Errorf("egressfirewall: cluster DNS Service %s: %w", k, err)
			}
		}
		t.infs = append(t.infs, trustInformers{key: k, svc: svc, slices: sl, services: svc.GetIndexer()})
	}
	return t, nil
}

// start runs the informers until ctx ends and waits for their caches.
func (t *dnsTrust) start(ctx context.Context) error {
	var synced []cache.InformerSynced
	for _, i := range t.infs {
		go i.svc.RunWithContext(ctx)
		go i.slices.RunWithContext(ctx)
		synced = append(synced, i.svc.HasSynced, i.slices.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("egressfirewall: cluster DNS informers did not sync: %w", ctx.Err())
	}
	t.synced.Store(true)
	t.update()
	return nil
}

// namespaceChanged updates the sources when a trusted Service's
// namespace gets or loses its id.
func (t *dnsTrust) namespaceChanged(ns string) {
	if slices.ContainsFunc(t.services, func(k types.NamespacedName) bool { return k.Namespace == ns }) {
		t.update()
	}
}

// sources returns the current sources.
func (t *dnsTrust) sources() egressfirewallflows.DNSSources {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cur
}

// update recomputes the sources, and calls changed when they differ.
func (t *dnsTrust) update() {
	t.umu.Lock()
	defer t.umu.Unlock()
	var svcs []egressfirewallflows.DNSService
	issues := map[types.NamespacedName]string{}
	for _, i := range t.infs {
		s, issue := t.service(i)
		if issue != "" {
			issues[i.key] = issue
			continue
		}
		svcs = append(svcs, s)
	}
	next := egressfirewallflows.DNSSources{Services: svcs, Resolvers: t.resolvers}
	if err := next.Validate(); err != nil {
		// Every address was parsed and checked; a broken invariant.
		t.log.WithError(err).Error("cluster DNS sources")
		return
	}
	t.mu.Lock()
	same := t.cur.Equal(next)
	t.cur = next
	var logs []func()
	for _, i := range t.infs {
		if !t.synced.Load() {
			break // nothing to report from half-filled caches
		}
		if issues[i.key] != t.issues[i.key] {
			k, issue := i.key, issues[i.key]
			logs = append(logs, func() {
				if issue == "" {
					t.log.WithField("service", k.String()).Info("cluster DNS Service: its replies are learned from")
				} else {
					t.log.WithField("service", k.String()).Warn("cluster DNS Service: " + issue + "; its replies are not learned from")
				}
			})
		}
	}
	if t.synced.Load() {
		t.issues = issues
	}
	t.mu.Unlock()
	for _, l := range logs {
		l()
	}
	if same {
		return
	}
	cips, eps, res := next.Addresses()
	t.f.m.dnsSources.WithLabelValues(sourceClusterIP).Set(float64(cips))
	t.f.m.dnsSources.WithLabelValues(sourceEndpoint).Set(float64(eps))
	t.f.m.dnsSources.WithLabelValues(sourceResolver).Set(float64(res))
	t.log.WithFields(logrus.Fields{"clusterIPs": cips, "endpoints": eps, "resolvers": res}).Debug("trusted DNS sources changed")
	if t.changed != nil {
		t.changed()
	}
}

// service reads one trusted Service from its informers: its namespace id,
// its own ClusterIPs, and the endpoint addresses of the slices the
// EndpointSlice controller made for it (owned by this Service, by UID).
// issue says why it is not trusted now.
func (t *dnsTrust) service(i trustInformers) (egressfirewallflows.DNSService, string) {
	out := egressfirewallflows.DNSService{Name: i.key.String()}
	obj, ok, _ := i.services.GetByKey(i.key.String())
	svc, _ := obj.(*corev1.Service)
	if !ok || svc == nil {
		return out, "not found"
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return out, "an ExternalName Service"
	}
	id, ok := t.f.h.NamespaceIDs().Lookup(i.key.Namespace)
	if !ok {
		return out, "its namespace has no id yet"
	}
	out.NamespaceID = id
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	for _, s := range ips {
		if a, err := netip.ParseAddr(s); err == nil && plainAddr(a) {
			out.ClusterIPs = append(out.ClusterIPs, a)
		}
	}
	for _, o := range i.slices.GetStore().List() {
		sl, _ := o.(*discovery.EndpointSlice)
		if sl == nil || !ownedSlice(sl, svc) {
			continue
		}
		for _, ep := range sl.Endpoints {
			for _, s := range ep.Addresses {
				a, err := netip.ParseAddr(s)
				if err != nil || !plainAddr(a) || (a.Is4() != (sl.AddressType == discovery.AddressTypeIPv4)) {
					continue
				}
				out.Endpoints = append(out.Endpoints, a)
			}
		}
	}
	for _, l := range []*[]netip.Addr{&out.ClusterIPs, &out.Endpoints} {
		slices.SortFunc(*l, netip.Addr.Compare)
		*l = slices.Compact(*l)
	}
	return out, ""
}

// ownedSlice reports whether sl is one the EndpointSlice controller made
// for svc: in its namespace, labelled with its name and the controller,
// and owned by it (its UID, so a Service deleted and made again does not
// inherit the old one's slices).
func ownedSlice(sl *discovery.EndpointSlice, svc *corev1.Service) bool {
	if sl.Namespace != svc.Namespace || sl.Labels[discovery.LabelServiceName] != svc.Name || sl.Labels[discovery.LabelManagedBy] != endpointSliceController {
		return false
	}
	if sl.AddressType != discovery.AddressTypeIPv4 && sl.AddressType != discovery.AddressTypeIPv6 {
		return false
	}
	return slices.ContainsFunc(sl.OwnerReferences, func(r metav1.OwnerReference) bool {
		return r.Kind == "Service" && r.APIVersion == "v1" && r.Name == svc.Name && r.UID == svc.UID
	})
}

// plainAddr reports whether a is an address a flow can match.
func plainAddr(a netip.Addr) bool {
	return a.IsValid() && !a.Is4In6() && a.Zone() == "" && !a.IsUnspecified()
}
