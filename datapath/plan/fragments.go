package plan

// IP fragments under policy (docs/pipeline.md, "Fragments").
//
// With the userspace datapath, a ct action collects an IP datagram's
// fragments, runs the whole datagram through conntrack, and sends the
// original fragments on together, each with the datagram's conntrack
// state. Only the first fragment carries the L4 ports (and, since OpenFlow
// switches in normal fragment mode hide even those, only in ct_tp_dst, the
// connection's tuple); a later fragment's flow key has no port at all on
// Open vSwitch releases before "miniflow_extract: Push ct_tp_{src, dst}
// for later frags". So a stage that judges ports (NetworkPolicy egress and
// ingress, the egress firewall) judges a datagram by its first fragment,
// and its later fragments wait for that verdict at a ct action: they go
// straight to it, the first fragment goes to the same ct action (the same
// zone, commit, continuation and registers) only when the stage allows it.
// The datagram's fragments are sent on only when they are all there, that
// is, only when the first fragment was allowed; otherwise the later ones
// stay with the datapath until it drops them. Each stage marks the
// fragments it sends to its meeting with a bit of its own, so that they
// come back to the stage's table as judged (and so that the first
// fragment and the later ones carry the same registers into the ct
// action, whose continuation is keyed by them).

// FragmentsEgress, reg0[7], marks a datagram's fragments that went through
// table PodEgressPolicy's meeting.
var FragmentsEgress = mustField("FragmentsEgress", Pod, SpaceReg, 0, 7, 7, "a fragmented datagram's fragments met at table 45's ct: its first fragment was allowed")

// FragmentsFirewall, reg0[8], marks a datagram's fragments that went
// through the egress firewall's meeting (table PodEgressFirewallFragments).
var FragmentsFirewall = mustField("FragmentsFirewall", Pod, SpaceReg, 0, 8, 8, "a fragmented datagram's fragments met at table 55's ct: its first fragment was allowed")

// FragmentsIngress, reg0[9], marks a datagram's fragments that went
// through table PodIngressPolicy's meeting.
var FragmentsIngress = mustField("FragmentsIngress", Pod, SpaceReg, 0, 9, 9, "a fragmented datagram's fragments met at table 65's ct: its first fragment was allowed")

// Marks: the fragments went to the stage's meeting.
var (
	EgressFragmentsMet   = mustMark("EgressFragmentsMet", FragmentsEgress, 1)
	FirewallFragmentsMet = mustMark("FirewallFragmentsMet", FragmentsFirewall, 1)
	IngressFragmentsMet  = mustMark("IngressFragmentsMet", FragmentsIngress, 1)
)

// Table 45 and 65 priorities of fragments (NetworkPolicy). From the top:
//
//	300  established and related pass (the datagram's fragments share its state)
//	296  fragments back from the meeting, invalid (overlapping): drop
//	295  fragments back from the meeting: pass
//	290  exempt sources
//	251  (45) a new datagram's later fragments, to a local pod: to the meeting, uncommitted
//	250  a new datagram's later fragments: to the meeting, committing it
//	204  (45) a rule allows the first fragment, to a local pod: to the meeting, uncommitted
//	203  a rule allows the first fragment: to the meeting (committing it, but in 45 toward a local pod)
//	200-202, clauses 110-173, isolation 100: as for whole packets
//	13   (45) no policy, first fragment to a local pod: to the meeting, uncommitted
//	12   no policy, first fragment: to the meeting, committing it
const (
	// PriorityPolicyFragmentInvalid drops fragments back from the
	// meeting that conntrack found invalid.
	PriorityPolicyFragmentInvalid Priority = 296
	// PriorityPolicyFragmentWhole passes fragments back from the meeting.
	PriorityPolicyFragmentWhole Priority = 295
	// PriorityPolicyFragmentLaterLocal (45) sends a new datagram's later
	// fragments toward a local pod to the meeting, uncommitted.
	PriorityPolicyFragmentLaterLocal Priority = 251
	// PriorityPolicyFragmentLater sends a new datagram's later fragments
	// to the meeting, committing the connection.
	PriorityPolicyFragmentLater Priority = 250
	// PriorityPolicyFragmentAllowLocal (45) sends a first fragment a rule
	// allows toward a local pod to the meeting, uncommitted.
	PriorityPolicyFragmentAllowLocal Priority = 204
	// PriorityPolicyFragmentAllowNew sends a first fragment a rule allows
	// to the meeting, committing the connection.
	PriorityPolicyFragmentAllowNew Priority = 203
	// PriorityPolicyFragmentLocalNew (45) sends a first fragment of a pod
	// no policy isolates, toward a local pod, to the meeting, uncommitted.
	PriorityPolicyFragmentLocalNew Priority = 13
	// PriorityPolicyFragmentDefaultNew sends a first fragment that no
	// policy judges to the meeting, committing the connection.
	PriorityPolicyFragmentDefaultNew Priority = 12
)

// Egress firewall priorities of fragments, in tables PodEgressFirewall and
// PodEgressFirewallFragments.
const (
	// PriorityEgressFirewallLaterFragments (table 50, per namespace with
	// rules) sends the later fragments of a datagram that no NAT touched
	// to the meeting in table 55, above every rule: the rules judge the
	// first fragment.
	PriorityEgressFirewallLaterFragments Priority = 11000
	// PriorityEgressFirewallFirstFragment (table 50, per namespace with
	// rules), below every rule: a first fragment that no rule matched is
	// allowed, through table 55.
	PriorityEgressFirewallFirstFragment Priority = 999
	// PriorityEgressFirewallFragmentInvalid (table 55) drops fragments
	// that came back from the meeting invalid.
	PriorityEgressFirewallFragmentInvalid Priority = 300
	// PriorityEgressFirewallFragmentWhole (table 55) passes fragments that
	// came back from the meeting.
	PriorityEgressFirewallFragmentWhole Priority = 200
	// PriorityEgressFirewallFragmentFirst (table 55, per namespace with
	// rules): an allowed first fragment goes to the meeting.
	PriorityEgressFirewallFragmentFirst Priority = 100
)
