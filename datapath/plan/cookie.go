package plan

import (
	"fmt"
	"hash/fnv"
	"strings"
)

// Feature is the top byte of a cookie: which part of nodeflow wrote a flow.
// A flow whose cookie carries an undeclared feature (0 included) is foreign.
type Feature uint8

// Features. The numbers are stable: they are in the cookies of installed
// flows, which survive agent upgrades.
const (
	// FeatureMeta is the reconciler's own version-note flow.
	FeatureMeta Feature = 0x01
	// FeaturePipeline is the priority-0 miss flow of every table.
	FeaturePipeline Feature = 0x02
	// FeatureGateway is breth0's default flows (the seed's).
	FeatureGateway Feature = 0x03
	// FeatureNode is br0's node-wide flows: classifier, conntrack,
	// routing, tunnels to other nodes, gateway output.
	FeatureNode Feature = 0x04
	// FeaturePod is the flows of one local pod: port security, ARP,
	// delivery.
	FeaturePod Feature = 0x05
	// FeatureService is one service port's group and br0 flows.
	FeatureService Feature = 0x06
	// FeatureServiceGateway is one service port's breth0 flows (NodePort,
	// ExternalIP, LoadBalancer ingress).
	FeatureServiceGateway Feature = 0x07
	// FeatureEgressFirewall is one namespace's egress firewall rules.
	FeatureEgressFirewall Feature = 0x08
	// FeatureUnidle is an idled service's metered packet-in flows.
	FeatureUnidle Feature = 0x09
	// FeatureHostPort is one pod's hostPorts: their DNAT on br0 and their
	// ingress on breth0.
	FeatureHostPort Feature = 0x0a
	// FeatureNetworkPolicy is NetworkPolicy on br0 (tables 45 and 65).
	FeatureNetworkPolicy Feature = 0x0b
	// FeatureVNet is the virtual networks' flows (tables 100-110, and their
	// entries in tables 0 and 15): one local attachment's, or one VNI's
	// remote mappings.
	FeatureVNet Feature = 0x0c
	// FeatureLearned marks flows that `learn` actions create (session
	// affinity). The reconciler never deletes or rewrites them.
	FeatureLearned Feature = 0xfe
)

// FeatureInfo describes a feature and the owner-name prefix that selects it.
type FeatureInfo struct {
	Feature Feature
	Name    string
	// Prefix is the first path element of the owners of this feature:
	// owner "service/default/web:80/TCP" has prefix "service".
	Prefix string
	Doc    string
}

var features = []FeatureInfo{
	{FeatureMeta, "Meta", "meta", "the reconciler's version note"},
	{FeaturePipeline, "Pipeline", "pipeline", "the explicit priority-0 flow of every table"},
	{FeatureGateway, "Gateway", "gateway", "breth0's default flows: the shared gateway's masquerade, commit and return flows"},
	{FeatureNode, "Node", "node", "br0's node-wide flows and the routes and tunnels to other nodes"},
	{FeaturePod, "Pod", "pod", "one local pod: port security, ARP, delivery"},
	{FeatureService, "Service", "service", "one service port: its select group and br0 flows"},
	{FeatureServiceGateway, "ServiceGateway", "service-gateway", "one service port's breth0 flows: NodePort, ExternalIP, LoadBalancer ingress"},
	{FeatureEgressFirewall, "EgressFirewall", "egressfirewall", "one namespace's egress firewall"},
	{FeatureUnidle, "Unidle", "unidle", "an idled service's metered packet-in"},
	{FeatureHostPort, "HostPort", "hostport", "one pod's hostPorts: the DNAT on br0, the ingress from the uplink on breth0"},
	{FeatureNetworkPolicy, "NetworkPolicy", "netpol", "NetworkPolicy: a policy's rules, a pod's isolation and clauses, a peer's clauses"},
	{FeatureVNet, "VNet", "vnet", "virtual networks: a local attachment's port, port security, ARP answer and delivery; a VNI's remote mappings and tunnel ingress"},
	{FeatureLearned, "Learned", "", "flows created by learn actions; never touched by the reconciler"},
}

// Features returns every declared feature.
func Features() []FeatureInfo { return append([]FeatureInfo(nil), features...) }

// LookupFeature returns the declaration of f.
func LookupFeature(f Feature) (FeatureInfo, bool) {
	for _, fi := range features {
		if fi.Feature == f {
			return fi, true
		}
	}
	return FeatureInfo{}, false
}

// String returns the feature's name, or "foreign(0xNN)" when undeclared.
func (f Feature) String() string {
	if fi, ok := LookupFeature(f); ok {
		return fi.Name
	}
	return fmt.Sprintf("foreign(0x%02x)", uint8(f))
}

// MaxOwnerLen bounds an owner name.
const MaxOwnerLen = 512

// OwnerFeature validates an owner name and returns the feature its prefix
// selects. An owner is "<prefix>/<object>" (or just "<prefix>" for a
// singleton such as "pipeline"), printable ASCII without spaces.
func OwnerFeature(owner string) (Feature, error) {
	if owner == "" {
		return 0, fmt.Errorf("plan: owner: empty name")
	}
	if len(owner) > MaxOwnerLen {
		return 0, fmt.Errorf("plan: owner %.40q...: longer than %d bytes", owner, MaxOwnerLen)
	}
	for i := 0; i < len(owner); i++ {
		if c := owner[i]; c <= ' ' || c > '~' {
			return 0, fmt.Errorf("plan: owner %q: byte %d (0x%02x) is not printable ASCII", owner, i, c)
		}
	}
	prefix, _, _ := strings.Cut(owner, "/")
	for _, fi := range features {
		if fi.Prefix != "" && fi.Prefix == prefix {
			return fi.Feature, nil
		}
	}
	return 0, fmt.Errorf("plan: owner %q: unknown prefix %q", owner, prefix)
}

// Cookie is a flow cookie in nodeflow's layout:
//
//	bits 63-56  feature (8 bits)
//	bits 55-16  owner: 40 bits of the FNV-1a 64-bit hash of the owner name
//	bits 15-0   generation (16 bits): the agent incarnation that last wrote
//	            the flow
//
// The reconciler compares cookies under OwnerMask: a flow kept across a
// restart keeps the generation that wrote it.
type Cookie uint64

// Cookie masks.
const (
	FeatureMask    Cookie = 0xff00_0000_0000_0000
	OwnerHashMask  Cookie = 0x00ff_ffff_ffff_0000
	GenerationMask Cookie = 0x0000_0000_0000_ffff
	// OwnerMask selects feature and owner: the bits that identify who
	// wants a flow.
	OwnerMask = FeatureMask | OwnerHashMask
)

// Generation is the 16-bit agent incarnation number kept in cookies and in
// the version note.
type Generation uint16

// Next returns the generation after g. It skips 0, which learned flows and
// foreign flows carry.
func (g Generation) Next() Generation {
	if g == 0xffff {
		return 1
	}
	return g + 1
}

// OwnerHash returns the 40-bit hash of an owner name used in cookies.
func OwnerHash(owner string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(owner))
	s := h.Sum64()
	return (s ^ s>>40) & (1<<40 - 1)
}

// MakeCookie builds the cookie of owner's flows written in generation gen.
func MakeCookie(f Feature, owner string, gen Generation) Cookie {
	return Cookie(uint64(f)<<56 | OwnerHash(owner)<<16 | uint64(gen))
}

// OwnerCookie validates owner and returns its cookie for generation gen.
func OwnerCookie(owner string, gen Generation) (Cookie, error) {
	f, err := OwnerFeature(owner)
	if err != nil {
		return 0, err
	}
	return MakeCookie(f, owner, gen), nil
}

// LearnedCookie is the cookie a learn action should give the flows it
// creates on behalf of owner, so that the reconciler leaves them alone and
// an operator can tell whose they are.
func LearnedCookie(owner string) Cookie { return MakeCookie(FeatureLearned, owner, 0) }

// Feature returns the cookie's feature byte.
func (c Cookie) Feature() Feature { return Feature(c >> 56) }

// OwnerHash returns the cookie's 40-bit owner hash.
func (c Cookie) OwnerHash() uint64 { return uint64(c&OwnerHashMask) >> 16 }

// Generation returns the cookie's generation.
func (c Cookie) Generation() Generation { return Generation(c & GenerationMask) }

// Owned reports whether the cookie carries a declared feature other than
// FeatureLearned: a flow the reconciler manages.
func (c Cookie) Owned() bool {
	_, ok := LookupFeature(c.Feature())
	return ok && c.Feature() != FeatureLearned
}

// String renders the cookie as ovs-ofctl does ("0x604a1b2c3d4e0007").
func (c Cookie) String() string { return fmt.Sprintf("0x%x", uint64(c)) }
