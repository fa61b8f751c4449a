package plan

// Priorities and ids that only the egress firewall's flows
// (datapath/egressfirewallflows) use, in table PodEgressFirewall. The rule band
// (EgressFirewallRules) and the cluster bypass
// (PriorityEgressFirewallBypass) are in priority.go.
//
// Table 50 from the top:
//
//	45000  DNS learning: DNS replies from trusted sources to the pods of
//	       namespaces with dnsName rules, to the agent (by conjunction)
//	44000  DNS learning: the other DNS replies to those pods, counted and
//	       sent on unlearned
//	40000  guards: replies, and packets that did not come from a pod
//	21000-31000  EgressFirewallHostAliases: a namespace's rules for the
//	       addresses that stand in for a host address (the host masquerade
//	       address a service DNATs to when its endpoint is this node's IP)
//	20000  cluster and service destinations (Node)
//	11000  a namespace's later fragments of datagrams that no NAT touched:
//	       to the meeting in table 55 (PriorityEgressFirewallLaterFragments)
//	1000-10999  EgressFirewallRules: a namespace's rules, first rule highest;
//	       Allow goes on to table 55
//	999    a namespace's first fragment that no rule matched: allowed,
//	       through table 55 (PriorityEgressFirewallFirstFragment)
//	0      miss: allow (goto 60)
//
// Matches in different bands never need each other's order except the
// guards (above everything) and the host aliases (above the rules whose
// prefixes also hold the alias address); the alias and bypass flows match
// disjoint destinations.

// PriorityEgressFirewallGuard is table 50's guards, above everything
// else in it: replies (ct_state=+rpl+trk) are never judged, nor are packets
// that did not come from a local pod (tunnel, gateway, host).
const PriorityEgressFirewallGuard Priority = 40000

// EgressFirewallHostAliases ranks a namespace's rules for host alias
// addresses: rule i of a namespace gets High-i, like EgressFirewallRules,
// and Low is the alias's own "no rule matched: allow". It has one more
// priority than EgressFirewallRules has rules.
var EgressFirewallHostAliases = Band{Name: "EgressFirewallHostAliases", Low: 21000, High: 31000}

// Conjunction ids of the egress firewall. OpenFlow conj_id is 32 bits; a
// namespace id is 24 and a rule index needs 14 (10,000 rules), so an id
// cannot be the pair itself. Instead each namespace with a firewall holds a
// block of 2^EgressFirewallConjRuleBits ids, numbered from
// EgressFirewallConjBlocks by a node-local IDAllocator keyed by its owner
// (a hash of the name first, so the block and the flows survive an agent
// restart unchanged), and rule i's id is block<<EgressFirewallConjRuleBits
// | i. The blocks cover ids 0x4000-0x7fffffff: 131,071 namespaces per node,
// unique on the bridge; ids from 0x80000000 are left for other features
// (NetworkPolicy).
const EgressFirewallConjRuleBits = 14

// EgressFirewallConjBlocks is the range of conjunction id blocks.
var EgressFirewallConjBlocks = IDRange{Name: "EgressFirewallConjBlocks", First: 1, Last: 1<<(31-EgressFirewallConjRuleBits) - 1}

// PriorityEgressFirewallDNS is table 50's DNS learning flows, above the
// guards: a DNS reply (UDP from port 53) to a local pod whose namespace
// has dnsName rules, from a source the agent learns from, goes to the
// agent (PacketInDNS, through MeterEgressFirewallDNS), which installs the
// addresses it carries and then releases it into table PodRouting by
// packet-out. The flows are a conjunction per pod address (ids
// EgressFirewallDNSConjIDs): clause 1 the pod, clause 2 the trusted
// sources, each with the attribution it must carry (namespace id,
// conntrack state, where it entered br0).
const PriorityEgressFirewallDNS Priority = 45000

// PriorityEgressFirewallDNSUntrusted is table 50's flows for the DNS
// replies to the same pods that no trusted source sent: they go on to
// table PodRouting unlearned, where table 50 would have sent them anyway
// (a local pod is a cluster destination), and their n_packets count them.
const PriorityEgressFirewallDNSUntrusted Priority = 44000

// EgressFirewallDNSConjIDs are the conjunction ids of the DNS learning
// flows, one per pod address: the block below EgressFirewallConjBlocks,
// which no namespace is given.
var EgressFirewallDNSConjIDs = IDRange{Name: "EgressFirewallDNSConjIDs", First: 1, Last: 1<<EgressFirewallConjRuleBits - 1}

// MeterEgressFirewallDNS limits the DNS replies sent to the agent for
// learning; replies over the rate are dropped, and the pod's resolver
// retries.
const MeterEgressFirewallDNS uint32 = 3

// PacketInDNS is the packet-in category of DNS replies held for learning.
const PacketInDNS PacketInCategory = 3
