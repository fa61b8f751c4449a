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

func processService(svc *v1.Service) (*serviceInfo, []error) {
	if svc == nil {
		return nil, nil
	}
	var errs []error
	bad := func(field string, err error) {
		errs = append(errs, &InputError{Kind: "Service", Namespace: svc.Namespace, Name: svc.Name, Field: field, Err: err})
	}
	key := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	if svc.Spec.Type == v1.ServiceTypeExternalName || svc.Spec.ClusterIP == v1.ClusterIPNone || svc.Spec.ClusterIP == "" {
		return nil, nil
	}
	if name, ok := svc.Labels[ServiceProxyNameLabel]; ok && name != ProxyName {
		return nil, nil // another service proxy's
	}
	if _, ok := svc.Labels[HeadlessLabel]; ok {
		return nil, nil // headless by its label, whatever its ClusterIP
	}
	ips := svc.Spec.ClusterIPs
	field := "spec.clusterIPs"
	if len(ips) == 0 {
		ips, field = []string{svc.Spec.ClusterIP}, "spec.clusterIP"
	}
	info := &serviceInfo{key: key, created: svc.CreationTimestamp.Time}
	have := map[Family]bool{}
	for i, s := range ips {
		a, err := netip.ParseAddr(s)
		if err != nil {
			f := field
			if field == "spec.clusterIPs" {
				f = fmt.Sprintf("%s[%d]", field, i)
			}
			bad(f, fmt.Errorf("%w %q", ErrBadIP, s))
			return nil, errs
		}
		a = a.Unmap()
		if have[FamilyOf(a)] {
			continue
		}
		have[FamilyOf(a)] = true
		info.clusterIPs = append(info.clusterIPs, a)
	}
	slices.SortFunc(info.clusterIPs, netip.Addr.Compare)

	// parseOne parses an ExternalIP or ingress IP; an address of a family
	// the Service has no ClusterIP of is dropped, as kube-proxy does.
	parseOne := func(field, s string, out []netip.Addr) []netip.Addr {
		a, err := netip.ParseAddr(s)
		if err != nil {
			bad(field, fmt.Errorf("%w %q", ErrBadIP, s))
			return out
		}
		a = a.Unmap()
		if have[FamilyOf(a)] && !slices.Contains(out, a) {
			out = append(out, a)
		}
		return out
	}
	var externalIPs, lbIPs []netip.Addr
	for i, s := range svc.Spec.ExternalIPs {
		externalIPs = parseOne(fmt.Sprintf("spec.externalIPs[%d]", i), s, externalIPs)
	}
	for i, in := range svc.Status.LoadBalancer.Ingress {
		if in.IP == "" || (in.IPMode != nil && *in.IPMode == v1.LoadBalancerIPModeProxy) {
			continue
		}
		lbIPs = parseOne(fmt.Sprintf("status.loadBalancer.ingress[%d].ip", i), in.IP, lbIPs)
	}
	slices.SortFunc(externalIPs, netip.Addr.Compare)
	slices.SortFunc(lbIPs, netip.Addr.Compare)
	var ranges []netip.Prefix
	restricted := svc.Spec.Type == v1.ServiceTypeLoadBalancer && len(svc.Spec.LoadBalancerSourceRanges) > 0
	if restricted {
		for i, s := range svc.Spec.LoadBalancerSourceRanges {
			r, err := netip.ParsePrefix(strings.TrimSpace(s))
			if err == nil {
				r = netip.PrefixFrom(r.Addr().Unmap(), r.Bits()-unmapBits(r.Addr())).Masked()
			}
			if err != nil || !r.IsValid() {
				bad(fmt.Sprintf("spec.loadBalancerSourceRanges[%d]", i), fmt.Errorf("%w %q: left out, the rest still restrict the sources", ErrBadCIDR, s))
				continue
			}
			if !slices.Contains(ranges, r) {
				ranges = append(ranges, r)
			}
		}
		slices.SortFunc(ranges, comparePrefix)
	}

	var affinity time.Duration
	if svc.Spec.SessionAffinity == v1.ServiceAffinityClientIP {
		affinity = DefaultAffinityTimeout
		if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			affinity = time.Duration(*c.ClientIP.TimeoutSeconds) * time.Second
		}
	}
	etpLocal := svc.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal
	itpLocal := svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == v1.ServiceInternalTrafficPolicyLocal
	var hc uint16
	if etpLocal && svc.Spec.Type == v1.ServiceTypeLoadBalancer && svc.Spec.HealthCheckNodePort != 0 {
		if p := svc.Spec.HealthCheckNodePort; p < 1 || p > 65535 {
			bad("spec.healthCheckNodePort", fmt.Errorf("%w: %d (1-65535)", ErrPortRange, p))
		} else {
			hc = uint16(p)
		}
	}
	_, idled := svc.Annotations[IdledAtAnnotation]
	nodePorts := svc.Spec.Type == v1.ServiceTypeNodePort || svc.Spec.Type == v1.ServiceTypeLoadBalancer

	for i, sp := range svc.Spec.Ports {
		f := fmt.Sprintf("spec.ports[%d]", i)
		proto := sp.Protocol
		if proto == "" {
			proto = v1.ProtocolTCP
		}
		switch proto {
		case v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP:
		default:
			bad(f+".protocol", fmt.Errorf("%w %q", ErrProtocol, proto))
			continue
		}
		if sp.Port < 1 || sp.Port > 65535 {
			bad(f+".port", fmt.Errorf("%w: %d (1-65535)", ErrPortRange, sp.Port))
			continue
		}
		var np uint16
		if nodePorts && sp.NodePort != 0 {
			if sp.NodePort < 1 || sp.NodePort > 65535 {
				bad(f+".nodePort", fmt.Errorf("%w: %d (1-65535)", ErrPortRange, sp.NodePort))
			} else {
				np = uint16(sp.NodePort)
			}
		}
		name := ServicePortName{NamespacedName: key, Port: sp.Name, Protocol: proto}
		port := &ServicePort{
			Name:                name,
			Protocol:            proto,
			Port:                uint16(sp.Port),
			NodePort:            np,
			ClusterIPs:          info.clusterIPs,
			ExternalIPs:         externalIPs,
			LoadBalancerIPs:     lbIPs,
			SourcesRestricted:   restricted,
			SourceRanges:        ranges,
			AffinityTimeout:     affinity,
			ExternalPolicyLocal: etpLocal,
			InternalPolicyLocal: itpLocal,
			HealthCheckNodePort: hc,
			Idled:               idled,
		}
		// A name given twice (the API server refuses it): the last wins.
		if k := slices.IndexFunc(info.ports, func(p *ServicePort) bool { return p.Name == name }); k >= 0 {
			info.ports[k] = port
		} else {
			info.ports = append(info.ports, port)
		}
	}
	return info, errs
}
