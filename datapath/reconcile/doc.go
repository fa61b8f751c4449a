// Package reconcile keeps an Open vSwitch bridge equal to a desired state.
//
// The desired state is held in a Store, keyed by owner: an owner such as
// "gateway/defaults", "service/default/web:80/TCP" or "pod/default/a"
// replaces its whole set of flows, groups and meters at once with Set. The
// Store knows, beside what each owner wants, what it believes the switch
// has; the difference between the two is the work to do. That part is pure
// and does no I/O: it computes the minimal diff (flows matched strictly on
// table, priority and match; groups and meters by id), orders it so that
// groups and meters exist before the flows that use them and outlive them,
// and splits it into bundles along owner boundaries, so that the switch
// never sees a state that drops traffic: a service's group and its flows
// always travel together.
//
// Flows and groups are held in their OpenFlow 1.5 encoding (see
// openflow.PackedFlow): a fraction of the memory of Go values, sent as
// copies of their bytes, and compared with a dump in the dump's own memory
// (openflow.EachFlowStats), decoding only the flows that differ.
//
// Each owner belongs to one namespace's object or to the node
// (plan.OwnerNamespace): the Store counts what every namespace wants
// (NamespaceUse, WriteNamespaces), and a Budget shared by a node's Stores
// holds back the newest objects of a namespace whose flows and buckets
// would exceed it.
//
// A Reconciler is the imperative shell around one Store and one OpenFlow
// connection to one bridge. It reads the switch at start-up and keeps what
// already matches, replacing the rest in one atomic bundle; it replays the
// whole state after the switch restarts; it coalesces bursts of updates
// into one bundle; and it repairs drift reported by a flow monitor, with a
// periodic audit as the safety net.
package reconcile
