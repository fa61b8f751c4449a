package plan

import "strings"

// Every owner's flows serve either the node as a whole or one object of
// one namespace, and its name says which: the features' owner names put
// the object's namespace at a fixed place. ownerNamespaces declares that
// place, once per feature, so that costs are attributed (and namespace
// budgets charged) from one table rather than by parsing names wherever
// they are read. A feature missing here is node-wide.
var ownerNamespaces = map[Feature]func(object string) string{
	// pod/<namespace>/<pod>
	FeaturePod: firstSegment,
	// service/<namespace>/<name>:<port>/<protocol>; the node-wide
	// service/_meters, service/_cidrs and service/_address/<ip> are no
	// namespace's (no namespace starts with "_").
	FeatureService: firstSegment,
	// service-gateway/<namespace>/<name>:<port>/<protocol>
	FeatureServiceGateway: firstSegment,
	// egressfirewall/<namespace>
	FeatureEgressFirewall: firstSegment,
	// unidle/<namespace>/<name>:<port>/<protocol>; unidle/_meters
	FeatureUnidle: firstSegment,
	// hostport/<namespace>/<pod>
	FeatureHostPort: firstSegment,
	// netpol/policy/<namespace>/<name> and netpol/pod/<namespace>/<pod>;
	// netpol/base and the peers' clauses (netpol/src/<prefix>,
	// netpol/dst/<prefix>), which every policy selecting the peer shares,
	// are node-wide.
	FeatureNetworkPolicy: func(object string) string {
		kind, rest, _ := strings.Cut(object, "/")
		if kind != "policy" && kind != "pod" {
			return ""
		}
		return firstSegment(rest)
	},
	// vnet/<namespace>/<attachment>; vnet/_vni/<vni> is node-wide.
	FeatureVNet: firstSegment,
}

// OwnerNamespace returns the namespace of the object whose flows owner
// holds, or "" for an owner of the node as a whole (the pipeline, node
// networking, the gateway's defaults, shared meters and guards) or a name
// that is not an owner.
func OwnerNamespace(owner string) string {
	f, err := OwnerFeature(owner)
	if err != nil {
		return ""
	}
	parse := ownerNamespaces[f]
	if parse == nil {
		return ""
	}
	_, object, _ := strings.Cut(owner, "/")
	return parse(object)
}

// firstSegment returns the first path element of object when it is a
// namespace's name (a DNS label), else "".
func firstSegment(object string) string {
	ns, _, _ := strings.Cut(object, "/")
	if !isDNSLabel(ns) {
		return ""
	}
	return ns
}

// isDNSLabel reports whether s is an RFC 1123 label, as every namespace's
// name is: 1 to 63 lowercase letters, digits and '-', starting and ending
// with a letter or digit.
func isDNSLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}
