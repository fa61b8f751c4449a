// Package feature is the seam between the node agent and its features.
//
// A feature (node networking, the service proxy, the egress firewall,
// unidling, NetworkPolicy, ...) is one package that implements Feature. The
// agent (package controller) wires every feature the same way, top to
// bottom:
//
//  1. Init: the feature registers what it watches (informers from the
//     shared factories the Host gives it) and its metrics. No I/O yet.
//  2. The agent starts the informers and waits until they have listed
//     everything.
//  3. Sync: the feature writes its first desired state into its reconciler
//     owners. Every feature's state is complete before the reconcilers
//     start, so the start-up bundle installs everything at once and
//     deletes only what nobody wants.
//  4. Run: once both bridges are connected, the feature runs until the
//     agent stops.
//
// What a feature may touch is narrow on purpose:
//   - the owners of the plan features it declares (Feature.Owns); the Host's
//     owner writers refuse any other owner, and the reconciler's store
//     refuses flows in tables the plan does not give those features;
//   - packet-ins of the categories it declares (PacketInHandler), each
//     category with its own bounded queue, fair between sources, and
//     counters (Dispatcher);
//   - packet-outs and other messages through Host.Send;
//   - read-only facts about the node (Host.Node) and the namespace ids
//     (Host.NamespaceIDs).
//
// No feature reads or writes another feature's state.
package feature
