// Package egressfirewallflows builds the egress firewall's flows in br0 table 50
// (plan.PodEgressFirewall): pure functions from one namespace's rules, with
// each rule's destinations already resolved to prefixes, to
// []openflow.Flow. No I/O and no cookies (the reconciler stamps them).
//
// Table 50 runs after the service DNAT and the SNAT table, so a service's
// endpoint is judged, one endpoint at a time, with the source namespace
// still in plan.NamespaceID. What reaches the rules:
//
//   - GuardFlows (owner GuardOwner, priority plan.PriorityEgressFirewallGuard):
//     replies (ct_state=+rpl+trk) go on to routing unjudged, so a namespace
//     that denies 0.0.0.0/0 still answers its NodePort, ExternalIP and
//     ingress clients; so does every packet that did not come from a local
//     pod (plan.PktSource other than plan.FromPod: the tunnel, the gateway,
//     the host).
//   - The node's flows send cluster and service destinations on at
//     plan.PriorityEgressFirewallBypass: pod to pod is never judged.
//   - Build (owner Owner(namespace)): the namespace's rules. Rule i gets
//     plan.EgressFirewallRules.Rank(i), so the first match wins; the
//     table's miss allows. Allow is goto_table:55
//     (plan.PodEgressFirewallFragments), which sends everything but a
//     datagram's first fragment straight on to routing (plan.PodRouting);
//     Deny is a flow without actions, so every denied packet is counted in
//     some flow's n_packets.
//
// A rule matches the namespace id, one of its prefixes (a 0.0.0.0/0 or
// ::/0 prefix matches without nw_dst) and, when it has ports, one of its
// protocol/port pairs (port 0: the protocol alone). Its prefixes are split
// by family; its ports are matched in each family that has prefixes. A
// rule with N prefixes and M ports either crosses them (N*M flows) or, when
// that is cheaper, uses a conjunctive match: N prefix flows (clause 1), M
// port flows per family (clause 2) and one conj_id flow that carries the
// verdict, N+M+1 flows in one family. With one prefix the cross is always
// the cheaper (M flows against M+2). Conjunction ids come from a
// per-namespace block (ConjID, plan.EgressFirewallConjBlocks).
//
// Host aliases. A service whose endpoint is this node's own IP is DNATed
// to the host masquerade address (169.254.169.2, fd69::2), not to the node
// IP, so table 50 sees the alias. The node IP must be judged like any
// address (a rule that allows or denies it, a nodeSelector that selects
// this node), and an alias must not be judged by a rule that holds it
// without holding the node IP ("Deny 169.254.0.0/16" must not cut pods off
// the API server on this node). Config.HostAliases names such pairs; for
// each, the rules whose prefixes hold the host are repeated for the alias
// address alone in the band plan.EgressFirewallHostAliases, above the
// rules, in the same order, and the band's lowest priority allows the
// alias when no rule holding the host matched (only when some rule's
// prefix holds the alias; otherwise the rules cannot match it anyway).
//
// Fragments. A datagram that arrives in fragments has its ports in its
// first fragment alone, and there only in its connection's tuple
// (ct_tp_dst), which is the packet's own when no NAT touched the
// connection. For such a datagram the rules judge the first fragment, a
// port by the tuple (a second flow per port); its later fragments skip the
// rules (plan.PriorityEgressFirewallLaterFragments) and wait at a ct action
// in the service zone that continues in table 55, the meeting. Table 55
// (GuardFlows) sends an allowed first fragment to the same ct action, so
// the datagram's fragments go on together when its first fragment is
// allowed (the userspace datapath's ct holds them until it has them all),
// and the later ones never do otherwise. A first fragment that no rule
// matched is allowed through table 55 too
// (plan.PriorityEgressFirewallFirstFragment). The fragments of a NATed or
// an invalid connection cannot be judged by port: a rule with ports never
// allows them, and a Deny rule with ports drops them, whatever their port.
//
// DNS learning (DNSFlows, owner DNSOwner): UDP from port 53 to the local
// pods of namespaces with dnsName rules goes to the agent by a metered
// packet-in (DNSAction, DNSMeter) only when a trusted source sent it
// (DNSSources: a cluster DNS Service's ClusterIP or endpoint, answered by
// a pod of its namespace, or a resolver outside the pod network reached
// through the gateway or the host), by a conjunction per pod address at
// plan.PriorityEgressFirewallDNS, above the guards; the other replies go
// on to routing at plan.PriorityEgressFirewallDNSUntrusted, counted. The
// agent installs the addresses of an answer and releases the reply with
// Release, a packet-out that resubmits it to plan.PodRouting with its
// in_port and registers.
//
// An update is one owner's flows replaced in one bundle by the
// reconciler: a rule keeps its priority while its position does not
// change, and a flow whose match is kept but whose verdict changes is
// modified in place, so the namespace is never unprotected or
// over-blocked in between.
package egressfirewallflows
