// Package egressfirewallfeature is the egress firewall feature: it enforces each
// namespace's EgressFirewall (k8s.ovn.org/v1) or EgressNetworkPolicy
// (network.openshift.io/v1) on br0, in table 50, after the service DNAT.
//
// What it watches: both CRDs through the dynamic client (package egressfw
// decodes, checks and selects them), the namespaces' ids
// (feature.Host.NamespaceIDs; a namespace is rebuilt when its id changes),
// every Node (nodeSelector rules follow label and address changes and
// nodes that join), this node's pods (the DNS learning flows), the
// cluster DNS Services and their EndpointSlices, each in its own
// namespace only (the sources DNS answers are learned from), and the
// dnsnames cache (rules follow the addresses of their names).
//
// What it writes: one reconciler owner per namespace
// (datapath/egressfirewallflows.Owner), replaced whole by each sync, so an update is one
// bundle and the namespace is never unprotected nor over-blocked in
// between; the guards (datapath/egressfirewallflows.GuardOwner); the DNS learning flows
// and their meter (datapath/egressfirewallflows.DNSOwner). An object that is invalid
// never replaces what was enforced before (egressfw.Select's Hold).
//
// Status: once the flows are in the switch, each node writes its own
// message into the enforced EgressFirewall's status.messages by
// server-side apply on the status subresource, with a field manager per
// node (FieldManager), and the roll-up into status.status (Rollup):
// "<node>: EgressFirewall Rules applied", or "<node>: EgressFirewall
// Rules not correctly applied: <why>". Bad input is also reported as a
// Warning event on the object, naming the field (involvedObject.fieldPath
// and the message), once per object and problem.
//
// DNS learning (dns.go): DNS replies to the local pods of namespaces with
// dnsName rules come to the agent by a metered packet-in, only from the
// trusted sources (dnstrust.go: the cluster DNS Services, answered by a
// pod of their namespace; the agent's resolvers and Options.TrustedDNS,
// from the gateway or the host); the others go on unlearned, counted by
// their flows. The agent checks each reply it is sent again; a reply
// whose names a rule matches is held until its addresses are installed,
// then released into routing by packet-out; any other reply is released
// at once. MaxHold and MaxHeld bound the hold; a reply that cannot be
// installed in time is dropped (the pod's resolver asks again), so a pod
// is never a step ahead of its firewall. A restart keeps the dnsName
// addresses installed (restart.go).
//
// Metrics: rules and flows programmed, sync time and errors, problems by
// reason, status writes, DNS replies by result, held replies and their
// hold time, and the packets denied per namespace from the deny flows'
// counters (counters.go); the dnsnames cache adds its lookup metrics.
package egressfirewallfeature
