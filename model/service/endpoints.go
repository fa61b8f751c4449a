package service

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"unique"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Endpoint is one endpoint of one service port: the address and port
// traffic is DNATed to, the node it runs on, and its conditions as
// kube-proxy reads them (a missing ready condition means ready, a missing
// serving condition copies ready, a missing terminating means false).
type Endpoint struct {
	// The fields are in an order that leaves no padding between them
	// (56 bytes, not 64): a node at scale holds one per endpoint and
	// service port.
	IP       netip.Addr
	NodeName string
	// Hints are the EndpointSlice controller's topology hints, interned
	// (the zero handle for none, the usual case).
	Hints       unique.Handle[Hints]
	Port        uint16
	Ready       bool
	Serving     bool
	Terminating bool
}

// Hints are an endpoint's topology hints: the zones and nodes whose
// proxies should use it (EndpointSlice endpoints[].hints.forZones and
// forNodes), each sorted and joined with commas.
type Hints struct {
	Zones, Nodes string
}

// hints returns e's hints, the zero Hints for none.
func (e *Endpoint) hints() Hints {
	if e.Hints == (unique.Handle[Hints]{}) {
		return Hints{}
	}
	return e.Hints.Value()
}

// hasName reports whether the comma-joined list names name.
func hasName(list, name string) bool {
	for n := range strings.SplitSeq(list, ",") {
		if n == name && n != "" {
			return true
		}
	}
	return false
}

// hintsOf returns the interned hints of an EndpointSlice endpoint, the
// zero handle for none.
func hintsOf(h *discovery.EndpointHints) unique.Handle[Hints] {
	if h == nil || len(h.ForZones)+len(h.ForNodes) == 0 {
		return unique.Handle[Hints]{}
	}
	var zones, nodes []string
	for _, z := range h.ForZones {
		zones = append(zones, z.Name)
	}
	for _, n := range h.ForNodes {
		nodes = append(nodes, n.Name)
	}
	slices.Sort(zones)
	slices.Sort(nodes)
	return unique.Make(Hints{Zones: strings.Join(zones, ","), Nodes: strings.Join(nodes, ",")})
}

// String renders "ip:port".
func (e Endpoint) String() string { return netip.AddrPortFrom(e.IP, e.Port).String() }

func compareEndpoints(a, b Endpoint) int {
	if c := a.IP.Compare(b.IP); c != 0 {
		return c
	}
	return cmp.Compare(a.Port, b.Port)
}

// sliceInfo is the processed form of one EndpointSlice.
type sliceInfo struct {
	service types.NamespacedName
	// ports holds the endpoints of each service port, in the order of the
	// slice's ports: a slice has one or a few, and a map would cost more
	// than the endpoints of a small slice.
	ports []slicePort
	// addrs holds the address of each entry of the slice's endpoints, in
	// their order (none for an entry that was skipped): the field that an
	// endpoint refused later, in context, is reported at.
	addrs entryAddrs
}

// entryAddrs holds one address, or none, for each entry of a slice, all
// of one family: a first byte with the addresses' length (4 or 16), then
// for each entry a byte that says whether it has one and that many bytes.
// Ten IPv4 entries take 51 bytes, where ten netip.Addr take 240.
type entryAddrs []byte

// newEntryAddrs returns room for n entries of family f, none set.
func newEntryAddrs(n int, f Family) entryAddrs {
	l := 4
	if f == IPv6 {
		l = 16
	}
	e := make(entryAddrs, 1+n*(l+1))
	e[0] = byte(l)
	return e
}

// set records entry i's address a, of the family e was made for.
func (e entryAddrs) set(i int, a netip.Addr) {
	w := int(e[0]) + 1
	if len(a.AsSlice())+1 != w {
		return
	}
	at := 1 + i*w
	e[at] = 1
	copy(e[at+1:at+w], a.AsSlice())
}

// each calls fn with the index and address of every entry that has one.
func (e entryAddrs) each(fn func(i int, a netip.Addr)) {
	if len(e) == 0 {
		return
	}
	w := int(e[0]) + 1
	for i, at := 0, 1; at+w <= len(e); i, at = i+1, at+w {
		if e[at] == 0 {
			continue
		}
		a, _ := netip.AddrFromSlice(e[at+1 : at+w])
		fn(i, a)
	}
}

// slicePort is the endpoints of one service port in one slice.
type slicePort struct {
	name ServicePortName
	eps  []Endpoint
}

// portMap returns the slice's endpoints by service port.
func (info *sliceInfo) portMap() map[ServicePortName][]Endpoint {
	m := make(map[ServicePortName][]Endpoint, len(info.ports))
	for _, p := range info.ports {
		m[p.name] = p.eps
	}
	return m
}

// SliceEndpoints processes an EndpointSlice into the endpoints of each
// service port it serves. A slice without the kubernetes.io/service-name
// label, or of address type FQDN, serves none (kube-proxy ignores them).
// Bad fields are returned as *InputError and only that entry is skipped;
// an unknown address type skips the whole slice. Addresses that parse but
// cannot be right (a broadcast address, a ClusterIP) are kept here: they
// depend on the cluster, and EndpointsTracker.Usable leaves them out.
func SliceEndpoints(s *discovery.EndpointSlice) (types.NamespacedName, map[ServicePortName][]Endpoint, []error) {
	info, errs := processSlice(s)
	if info == nil {
		return types.NamespacedName{}, nil, errs
	}
	return info.service, info.portMap(), errs
}

func processSlice(s *discovery.EndpointSlice) (*sliceInfo, []error) {
	if s == nil {
		return nil, nil
	}
	var errs []error
	bad := func(field string, err error) {
		errs = append(errs, &InputError{Kind: "EndpointSlice", Namespace: s.Namespace, Name: s.Name, Field: field, Err: err})
	}
	svcName := s.Labels[discovery.LabelServiceName]
	if svcName == "" {
		return nil, nil
	}
	if _, ok := s.Labels[HeadlessLabel]; ok {
		return nil, nil // a headless Service's: no proxy serves it
	}
	var want Family
	switch s.AddressType {
	case discovery.AddressTypeIPv4:
		want = IPv4
	case discovery.AddressTypeIPv6:
		want = IPv6
	case discovery.AddressTypeFQDN:
		return nil, nil
	default:
		bad("addressType", fmt.Errorf("%w %q", ErrAddressType, s.AddressType))
		return nil, errs
	}
	info := &sliceInfo{service: types.NamespacedName{Namespace: s.Namespace, Name: svcName}}

	// Parse the endpoints once; every port shares them.
	type parsed struct {
		ip                          netip.Addr
		node                        string
		ready, serving, terminating bool
		hints                       unique.Handle[Hints]
	}
	eps := make([]parsed, 0, len(s.Endpoints))
	info.addrs = newEntryAddrs(len(s.Endpoints), want)
	for i, ep := range s.Endpoints {
		if len(ep.Addresses) == 0 {
			continue
		}
		// The field's name is only made for an error: a cold start
		// processes every endpoint of the cluster.
		f := func() string { return fmt.Sprintf("endpoints[%d].addresses[0]", i) }
		a, err := netip.ParseAddr(ep.Addresses[0])
		if err != nil {
			bad(f(), fmt.Errorf("%w %q", ErrBadIP, ep.Addresses[0]))
			continue
		}
		a = a.Unmap()
		if FamilyOf(a) != want {
			bad(f(), fmt.Errorf("%w %q in a slice of address type %s", ErrFamilyMismatch, ep.Addresses[0], s.AddressType))
			continue
		}
		p := parsed{ip: a, ready: true, terminating: false}
		if ep.NodeName != nil {
			// One copy of each node name, not one per endpoint.
			p.node = unique.Make(*ep.NodeName).Value()
		}
		if c := ep.Conditions.Ready; c != nil {
			p.ready = *c
		}
		p.serving = p.ready
		if c := ep.Conditions.Serving; c != nil {
			p.serving = *c
		}
		if c := ep.Conditions.Terminating; c != nil {
			p.terminating = *c
		}
		p.hints = hintsOf(ep.Hints)
		eps = append(eps, p)
		info.addrs.set(i, a)
	}
	for i, port := range s.Ports {
		f := func() string { return fmt.Sprintf("ports[%d]", i) }
		if port.Port == nil {
			continue
		}
		if *port.Port < 1 || *port.Port > 65535 {
			bad(f()+".port", fmt.Errorf("%w: %d (1-65535)", ErrPortRange, *port.Port))
			continue
		}
		proto := v1.ProtocolTCP
		if port.Protocol != nil {
			proto = *port.Protocol
		}
		switch proto {
		case v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP:
		default:
			bad(f()+".protocol", fmt.Errorf("%w %q", ErrProtocol, proto))
			continue
		}
		name := ServicePortName{NamespacedName: info.service, Protocol: proto}
		if port.Name != nil {
			name.Port = *port.Name
		}
		k := slices.IndexFunc(info.ports, func(p slicePort) bool { return p.name == name })
		if k < 0 {
			k = len(info.ports)
			info.ports = append(info.ports, slicePort{name: name, eps: make([]Endpoint, 0, len(eps))})
		}
		list := info.ports[k].eps
		for _, p := range eps {
			list = append(list, Endpoint{IP: p.ip, Port: uint16(*port.Port), NodeName: p.node,
				Ready: p.ready, Serving: p.serving, Terminating: p.terminating, Hints: p.hints})
		}
		info.ports[k].eps = list
	}
	for k := range info.ports {
		info.ports[k].eps = sortEndpoints(info.ports[k].eps)
	}
	return info, errs
}

// sortEndpoints sorts l and drops duplicates of the same address and port,
// keeping the first (by conditions, a ready one wins).
func sortEndpoints(l []Endpoint) []Endpoint {
	slices.SortStableFunc(l, func(a, b Endpoint) int {
		if c := compareEndpoints(a, b); c != 0 {
			return c
		}
		// Ready before not ready, so Compact keeps the ready one.
		switch {
		case a.Ready && !b.Ready:
			return -1
		case b.Ready && !a.Ready:
			return 1
		}
		return 0
	})
	return slices.CompactFunc(l, func(a, b Endpoint) bool { return compareEndpoints(a, b) == 0 })
}

// Categorize applies kube-proxy's rules to the endpoints of one service
// port on node nodeName, in zone (its topology.kubernetes.io/zone label,
// "" for none), and returns the endpoints for internal traffic (ClusterIP)
// and for external traffic (NodePort, ExternalIPs, ingress IPs).
//
//   - Cluster-wide, the ready endpoints are used; when none is ready, the
//     serving endpoints that are terminating are used instead, so that
//     connections drain instead of failing during a rollout.
//   - Topology: when every ready endpoint has node hints and one of them
//     names this node, cluster-wide traffic uses the ready endpoints
//     hinted for this node (trafficDistribution PreferSameNode); otherwise,
//     when every ready endpoint has zone hints and one names this node's
//     zone, those hinted for the zone (PreferSameZone, PreferClose, the
//     topology-mode annotation). Any other case uses every ready endpoint.
//   - With a Local traffic policy, the ready (or else serving terminating)
//     endpoints on this node only are used, hints or not; with none there,
//     that traffic has no endpoints (it is dropped, not sent to another
//     node).
//
// Both results are sorted by address and port, and may be eps itself:
// read them, do not change them.
func Categorize(p *ServicePort, eps []Endpoint, nodeName, zone string) (internal, external []Endpoint) {
	byNode, byZone := topologyMode(eps, nodeName, zone)
	pick := func(local bool) []Endpoint {
		if !local && !byNode && !byZone && allReady(eps) {
			// Shared with the tracker, not copied.
			return eps
		}
		var ready, terminating []Endpoint
		for _, e := range eps {
			if local && e.NodeName != nodeName {
				continue
			}
			switch {
			case e.Ready:
				if !local && (byNode || byZone) {
					h := e.hints()
					if byNode && !hasName(h.Nodes, nodeName) || byZone && !hasName(h.Zones, zone) {
						continue
					}
				}
				ready = append(ready, e)
			case e.Serving && e.Terminating:
				terminating = append(terminating, e)
			}
		}
		if len(ready) > 0 {
			return ready
		}
		return terminating
	}
	cluster := pick(false)
	internal, external = cluster, cluster
	if p.InternalPolicyLocal {
		internal = pick(true)
	}
	if p.ExternalPolicyLocal {
		external = pick(true)
	}
	return internal, external
}

// topologyMode says whether the ready endpoints are chosen by their node
// hints (every ready endpoint has some, and one names nodeName) or else by
// their zone hints (the same for zone), as kube-proxy decides.
func topologyMode(eps []Endpoint, nodeName, zone string) (byNode, byZone bool) {
	anyReady, allNodes, allZones, forNode, forZone := false, true, true, false, false
	for i := range eps {
		e := &eps[i]
		if !e.Ready {
			continue
		}
		anyReady = true
		h := e.hints()
		if h.Nodes == "" {
			allNodes = false
		} else if hasName(h.Nodes, nodeName) {
			forNode = true
		}
		if h.Zones == "" {
			allZones = false
		} else if hasName(h.Zones, zone) {
			forZone = true
		}
		if !allNodes && !allZones {
			return false, false // an endpoint without hints: the usual case, decided at once
		}
	}
	if !anyReady {
		return false, false
	}
	if allNodes && forNode {
		return true, false
	}
	return false, allZones && forZone
}

// allReady reports whether every endpoint of eps is ready.
func allReady(eps []Endpoint) bool {
	for i := range eps {
		if !eps[i].Ready {
			return false
		}
	}
	return len(eps) > 0
}

// HasEndpoints reports whether any endpoint exists at all for the port,
// ready or not. kube-proxy rejects traffic to a service port without
// endpoints, but drops traffic that a Local policy leaves without any.
func HasEndpoints(eps []Endpoint) bool {
	for _, e := range eps {
		if e.Ready || (e.Serving && e.Terminating) {
			return true
		}
	}
	return false
}
