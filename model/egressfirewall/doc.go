// Package egressfirewall is the egress firewall's model: one internal form of a
// namespace's ordered egress rules, and the conversion of both APIs that
// users already have into it.
//
//   - EgressFirewall, k8s.ovn.org/v1 (ovn-kubernetes): the object named
//     "default" in a namespace; rules of Allow or Deny to a cidrSelector,
//     a dnsName (exact, or "*." and one label) or a nodeSelector, limited
//     to protocol/port pairs by ports; a status written per node.
//   - EgressNetworkPolicy, network.openshift.io/v1 (openshift-sdn): rules
//     of Allow or Deny to a cidrSelector or a dnsName, no ports, one
//     object per namespace.
//
// Both are read as unstructured.Unstructured (the agent watches them with
// the dynamic client, so nodeflow needs neither project's Go module).
// DecodeEgressFirewall and DecodeEgressNetworkPolicy check the shape
// strictly (types, unknown fields); their Policy methods check the values
// (CIDRs, DNS names, protocols, ports, label selectors, the rule limit, the
// name "default") and build a Policy. Every problem is a *FieldError that
// names the object and the field, for example
//
//	EgressFirewall ns/default: spec.egress[3].to: two destinations (cidrSelector and dnsName)
//
// and all of an object's problems come back together as an ErrorList, so
// that one status message or event lists them.
//
// A Policy is all or nothing. Rules are ordered and the first match wins,
// so enforcing the valid rules of an invalid object could allow what a
// dropped Deny forbade or deny what a dropped Allow let through; an
// invalid object is enforced not at all, and Select tells the agent to
// hold the rules it enforced before (bad input never wipes good state).
//
// Select decides, from every EgressFirewall and EgressNetworkPolicy of one
// namespace, which one is enforced and why, and reports each of the others
// as a Problem: an EgressFirewall not named "default"; a second
// EgressNetworkPolicy (the oldest is enforced, as openshift-sdn's users
// would want: openshift-sdn itself dropped all of the namespace's external
// traffic); an EgressNetworkPolicy beside an EgressFirewall (the
// EgressFirewall wins: it is the richer and current API, and a namespace
// that has been given one is being moved to it).
//
// The package does no I/O: no DNS, no flows, no API writes. Resolving
// names and node selectors to addresses, and the flows of table 50, are
// the agent's and datapath/egressfirewallflows's.
package egressfirewall
