package service

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// IdledAtAnnotation marks a Service as idled (an RFC 3339 time). A Service
// that has it and no endpoints is left to the unidling hook.
const IdledAtAnnotation = "idling.alpha.openshift.io/idled-at"

// DefaultAffinityTimeout is the ClientIP affinity timeout when the Service
// gives none (the API's default, 3 hours).
const DefaultAffinityTimeout = 10800 * time.Second

// Errors wrapped by InputError.
var (
	ErrBadIP          = errors.New("unparseable IP")
	ErrPortRange      = errors.New("port out of range")
	ErrProtocol       = errors.New("unsupported protocol")
	ErrAddressType    = errors.New("unknown address type")
	ErrFamilyMismatch = errors.New("address of the wrong family")
	ErrDuplicateIP    = errors.New("cluster IP already in use")
	ErrBadCIDR        = errors.New("unparseable CIDR")
)

// unmapBits is how many leading bits of a's prefix length are the
// IPv4-mapped prefix (::ffff:0:0/96) that Unmap takes away.
func unmapBits(a netip.Addr) int {
	if a.Is4In6() {
		return 96
	}
	return 0
}

// comparePrefix orders prefixes by address, then length.
func comparePrefix(x, y netip.Prefix) int {
	if c := x.Addr().Compare(y.Addr()); c != 0 {
		return c
	}
	return x.Bits() - y.Bits()
}

// ServicePort is the model of one port of a Service: everything the flow
// builders need except the endpoints. Addresses are sorted; a family only
// appears when the Service has a ClusterIP of that family.
type ServicePort struct {
	Name     ServicePortName
	Protocol v1.Protocol
	// Port is the service port, on ClusterIPs, ExternalIPs and ingress IPs.
	Port uint16
	// NodePort is the node port, 0 for none.
	NodePort uint16
	// ClusterIPs holds one address per family, IPv4 first.
	ClusterIPs      []netip.Addr
	ExternalIPs     []netip.Addr
	LoadBalancerIPs []netip.Addr
	// SourcesRestricted says that only SourceRanges reach the
	// LoadBalancerIPs (spec.loadBalancerSourceRanges of a LoadBalancer
	// Service, both families; each family's flows take that family's
	// ranges). Other sources are dropped. A list given with no valid
	// entry restricts to nothing.
	SourcesRestricted bool
	SourceRanges      []netip.Prefix
	// AffinityTimeout is the ClientIP session affinity timeout; 0 means no
	// affinity.
	AffinityTimeout time.Duration
	// ExternalPolicyLocal is externalTrafficPolicy=Local: external traffic
	// (NodePort, ExternalIPs, ingress IPs) only goes to endpoints on this
	// node, and keeps the client's address.
	ExternalPolicyLocal bool
	// InternalPolicyLocal is internalTrafficPolicy=Local.
	InternalPolicyLocal bool
	// HealthCheckNodePort is the port on which the node answers
	// LoadBalancer health checks (ETP Local), 0 for none.
	HealthCheckNodePort uint16
	// Idled says the Service carries IdledAtAnnotation.
	Idled bool
}

// Families returns the families of the port's ClusterIPs.
func (p *ServicePort) Families() []Family {
	var fs []Family
	for _, a := range p.ClusterIPs {
		fs = append(fs, FamilyOf(a))
	}
	return fs
}

// ClusterIP returns the ClusterIP of family f.
func (p *ServicePort) ClusterIP(f Family) (netip.Addr, bool) {
	for _, a := range p.ClusterIPs {
		if FamilyOf(a) == f {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// serviceInfo is the processed form of one Service: what the tracker
// compares and applies.
type serviceInfo struct {
	key        types.NamespacedName
	created    time.Time
	clusterIPs []netip.Addr
	// ports are the service ports in the order of spec.ports: a Service
	// has one or a few, and a map would cost more than they do.
	ports []*ServicePort
}

// portNamed returns the port of ps named n, or nil.
func portNamed(ps []*ServicePort, n ServicePortName) *ServicePort {
	if k := slices.IndexFunc(ps, func(p *ServicePort) bool { return p.Name == n }); k >= 0 {
		return ps[k]
	}
	return nil
}

// ServiceProxyNameLabel marks a Service that a service proxy other than
// the cluster's default serves: kube-proxy leaves every Service that
// carries it alone, and nodeflow every one whose value is not ProxyName.
const ServiceProxyNameLabel = "service.kubernetes.io/service-proxy-name"

// HeadlessLabel marks a Service as headless whatever its spec says: no
// service proxy serves it (kube-proxy's rule).
const HeadlessLabel = "service.kubernetes.io/headless"

// ProxyName is the value of ServiceProxyNameLabel that gives a Service to
// nodeflow.
const ProxyName = "nodeflow"

// ServicePorts processes svc into its service ports. Headless and
// ExternalName Services have none (kube-proxy ignores them), nor a Service
// labelled headless (HeadlessLabel) or one another service proxy serves
// (ServiceProxyNameLabel); a Service
// without a selector is processed like any other, its endpoints coming
// from EndpointSlices someone else manages. Bad fields are returned as
// *InputError; a bad ClusterIP rejects the whole Service, a bad ExternalIP,
// ingress IP or port only that entry.
func ServicePorts(svc *v1.Service) (map[ServicePortName]*ServicePort, []error) {
	info, errs := processService(svc)
	if info == nil {
		return nil, errs
	}
	m := make(map[ServicePortName]*ServicePort, len(info.ports))
	for _, p := range info.ports {
		m[p.Name] = p
	}
	return m, errs
}

// processService reads svc into its service ports, as ServicePorts says;
// nil for a Service this proxy does not serve or whose ClusterIP is bad.
func processService(svc *v1.Service) (*serviceInfo, []error) {
	if svc == nil || !proxied(svc) {
		return nil, nil
	}
	sp := &serviceParser{svc: svc}
	info := &serviceInfo{key: types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}, created: svc.CreationTimestamp.Time}
	var ok bool
	if info.clusterIPs, ok = sp.clusterIPs(); !ok {
		return nil, sp.errs
	}
	base := sp.servicePort(info.clusterIPs)
	for i, port := range svc.Spec.Ports {
		p := sp.port(i, port, info.key, base)
		if p == nil {
			continue
		}
		// A name given twice (the API server refuses it): the last wins.
		if k := slices.IndexFunc(info.ports, func(q *ServicePort) bool { return q.Name == p.Name }); k >= 0 {
			info.ports[k] = p
		} else {
			info.ports = append(info.ports, p)
		}
	}
	return info, sp.errs
}

// proxied reports whether this proxy serves svc: a Service with a
// ClusterIP, not labelled headless, and not another service proxy's.
func proxied(svc *v1.Service) bool {
	if svc.Spec.Type == v1.ServiceTypeExternalName || svc.Spec.ClusterIP == v1.ClusterIPNone || svc.Spec.ClusterIP == "" {
		return false
	}
	if name, ok := svc.Labels[ServiceProxyNameLabel]; ok && name != ProxyName {
		return false // another service proxy's
	}
	if _, ok := svc.Labels[HeadlessLabel]; ok {
		return false // headless by its label, whatever its ClusterIP
	}
	return true
}

// serviceParser reads one Service's fields, collecting an *InputError for
// each bad one.
type serviceParser struct {
	svc  *v1.Service
	errs []error
}

// bad records that field of the Service is bad.
func (sp *serviceParser) bad(field string, err error) {
	sp.errs = append(sp.errs, &InputError{Kind: "Service", Namespace: sp.svc.Namespace, Name: sp.svc.Name, Field: field, Err: err})
}

// clusterIPs returns the Service's ClusterIPs, one per family (the first
// of each), sorted; false when one does not parse, which rejects the
// Service.
func (sp *serviceParser) clusterIPs() ([]netip.Addr, bool) {
	ips := sp.svc.Spec.ClusterIPs
	field := "spec.clusterIPs"
	if len(ips) == 0 {
		ips, field = []string{sp.svc.Spec.ClusterIP}, "spec.clusterIP"
	}
	var out []netip.Addr
	have := map[Family]bool{}
	for i, s := range ips {
		a, err := netip.ParseAddr(s)
		if err != nil {
			f := field
			if field == "spec.clusterIPs" {
				f = fmt.Sprintf("%s[%d]", field, i)
			}
			sp.bad(f, fmt.Errorf("%w %q", ErrBadIP, s))
			return nil, false
		}
		a = a.Unmap()
		if have[FamilyOf(a)] {
			continue
		}
		have[FamilyOf(a)] = true
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, true
}

// servicePort returns what every port of the Service shares: its
// addresses, source ranges, affinity, traffic policies, health check
// port and idling.
func (sp *serviceParser) servicePort(clusterIPs []netip.Addr) ServicePort {
	spec := &sp.svc.Spec
	externalIPs, lbIPs := sp.externalAddresses(clusterIPs)
	restricted, ranges := sp.sourceRanges()
	etpLocal := spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal
	_, idled := sp.svc.Annotations[IdledAtAnnotation]
	return ServicePort{
		ClusterIPs:          clusterIPs,
		ExternalIPs:         externalIPs,
		LoadBalancerIPs:     lbIPs,
		SourcesRestricted:   restricted,
		SourceRanges:        ranges,
		AffinityTimeout:     affinityTimeout(sp.svc),
		ExternalPolicyLocal: etpLocal,
		InternalPolicyLocal: spec.InternalTrafficPolicy != nil && *spec.InternalTrafficPolicy == v1.ServiceInternalTrafficPolicyLocal,
		HealthCheckNodePort: sp.healthCheckNodePort(etpLocal),
		Idled:               idled,
	}
}

// externalAddresses returns the Service's ExternalIPs and load-balancer
// ingress IPs, each sorted and without duplicates. An address of a family
// the Service has no ClusterIP of is dropped, as kube-proxy does, and so
// is an ingress in Proxy IP mode.
func (sp *serviceParser) externalAddresses(clusterIPs []netip.Addr) (externalIPs, lbIPs []netip.Addr) {
	parseOne := func(field, s string, out []netip.Addr) []netip.Addr {
		a, err := netip.ParseAddr(s)
		if err != nil {
			sp.bad(field, fmt.Errorf("%w %q", ErrBadIP, s))
			return out
		}
		a = a.Unmap()
		if slices.ContainsFunc(clusterIPs, func(c netip.Addr) bool { return FamilyOf(c) == FamilyOf(a) }) && !slices.Contains(out, a) {
			out = append(out, a)
		}
		return out
	}
	for i, s := range sp.svc.Spec.ExternalIPs {
		externalIPs = parseOne(fmt.Sprintf("spec.externalIPs[%d]", i), s, externalIPs)
	}
	for i, in := range sp.svc.Status.LoadBalancer.Ingress {
		if in.IP == "" || (in.IPMode != nil && *in.IPMode == v1.LoadBalancerIPModeProxy) {
			continue
		}
		lbIPs = parseOne(fmt.Sprintf("status.loadBalancer.ingress[%d].ip", i), in.IP, lbIPs)
	}
	slices.SortFunc(externalIPs, netip.Addr.Compare)
	slices.SortFunc(lbIPs, netip.Addr.Compare)
	return externalIPs, lbIPs
}

// sourceRanges reports whether a LoadBalancer Service restricts its
// sources, and the ranges it allows, sorted and without duplicates. A bad
// range is left out; the rest still restrict the sources.
func (sp *serviceParser) sourceRanges() (restricted bool, ranges []netip.Prefix) {
	spec := &sp.svc.Spec
	if spec.Type != v1.ServiceTypeLoadBalancer || len(spec.LoadBalancerSourceRanges) == 0 {
		return false, nil
	}
	for i, s := range spec.LoadBalancerSourceRanges {
		r, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err == nil {
			r = netip.PrefixFrom(r.Addr().Unmap(), r.Bits()-unmapBits(r.Addr())).Masked()
		}
		if err != nil || !r.IsValid() {
			sp.bad(fmt.Sprintf("spec.loadBalancerSourceRanges[%d]", i), fmt.Errorf("%w %q: left out, the rest still restrict the sources", ErrBadCIDR, s))
			continue
		}
		if !slices.Contains(ranges, r) {
			ranges = append(ranges, r)
		}
	}
	slices.SortFunc(ranges, comparePrefix)
	return true, ranges
}

// affinityTimeout returns the Service's ClientIP affinity timeout, or 0
// for no affinity.
func affinityTimeout(svc *v1.Service) time.Duration {
	if svc.Spec.SessionAffinity != v1.ServiceAffinityClientIP {
		return 0
	}
	if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
		return time.Duration(*c.ClientIP.TimeoutSeconds) * time.Second
	}
	return DefaultAffinityTimeout
}

// healthCheckNodePort returns the health check node port of a
// LoadBalancer Service with externalTrafficPolicy Local (etpLocal), or 0.
func (sp *serviceParser) healthCheckNodePort(etpLocal bool) uint16 {
	p := sp.svc.Spec.HealthCheckNodePort
	if !etpLocal || sp.svc.Spec.Type != v1.ServiceTypeLoadBalancer || p == 0 {
		return 0
	}
	if p < 1 || p > 65535 {
		sp.bad("spec.healthCheckNodePort", fmt.Errorf("%w: %d (1-65535)", ErrPortRange, p))
		return 0
	}
	return uint16(p)
}

// port returns spec.ports[i], p, as a port of the Service key that shares
// the rest with base; nil when its protocol or port is bad.
// A bad node port is left out.
func (sp *serviceParser) port(i int, p v1.ServicePort, key types.NamespacedName, base ServicePort) *ServicePort {
	f := fmt.Sprintf("spec.ports[%d]", i)
	proto := p.Protocol
	if proto == "" {
		proto = v1.ProtocolTCP
	}
	switch proto {
	case v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP:
	default:
		sp.bad(f+".protocol", fmt.Errorf("%w %q", ErrProtocol, proto))
		return nil
	}
	if p.Port < 1 || p.Port > 65535 {
		sp.bad(f+".port", fmt.Errorf("%w: %d (1-65535)", ErrPortRange, p.Port))
		return nil
	}
	var np uint16
	nodePorts := sp.svc.Spec.Type == v1.ServiceTypeNodePort || sp.svc.Spec.Type == v1.ServiceTypeLoadBalancer
	if nodePorts && p.NodePort != 0 {
		if p.NodePort < 1 || p.NodePort > 65535 {
			sp.bad(f+".nodePort", fmt.Errorf("%w: %d (1-65535)", ErrPortRange, p.NodePort))
		} else {
			np = uint16(p.NodePort)
		}
	}
	port := base
	port.Name = ServicePortName{NamespacedName: key, Port: p.Name, Protocol: proto}
	port.Protocol = proto
	port.Port = uint16(p.Port)
	port.NodePort = np
	return &port
}
