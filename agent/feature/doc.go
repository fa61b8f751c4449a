// Package feature is the seam between the node agent and its features.
//
// A feature (node networking, the service proxy, the egress firewall,
// unidling, NetworkPolicy, hostPorts, virtual networks) is one package
// under agent/features that implements Feature. The agent (package agent)
// wires every feature the same way, through this package only: no feature
// imports the agent or another feature, and this package imports none of
// them. The features the agent runs are listed once, in package features
// (agent/features), which the agent's command, its configuration file and
// cleanup all read.
//
// # Lifecycle
//
// Before Run, the agent has checked its permissions (APIUser), connected
// to OVSDB, created both bridges and learned the node's facts. Then, for
// every feature in the order the list gives:
//
//  1. Init(h): the feature registers what it watches (informers from the
//     shared factories h gives it), its event handlers, its callbacks
//     (OnNodeChange, OnBridgeReady, NamespaceIDs.OnChange) and its
//     metrics. No I/O yet, and no blocking. The agent registers the
//     packet-in categories it declares (PacketInHandler).
//  2. The agent starts the informers and waits until they have listed
//     everything, and until the namespace ids are known.
//  3. Sync(ctx): the feature writes its first desired state into its
//     reconciler owners. Every feature's state is complete before the
//     reconcilers start, so the start-up bundle installs everything at
//     once and deletes only what nobody wants.
//  4. The agent connects to both bridges and starts their reconcilers.
//  5. Run(ctx): the feature runs until the agent stops (ctx ends). The
//     bridges keep their flows when it does.
//
// # The Host
//
// Host is everything a feature may use of the agent:
//
//   - Log, Kube, Dynamic, Recorder, Registry: its logger (with a "feature"
//     field), the API clients with the agent's credentials and rate limit,
//     the event recorder, and the registry of its metrics.
//   - Informers, LocalPods: the shared informer factories (the whole
//     cluster; this node's pods), started and synced by the agent between
//     Init and Sync.
//   - Node, OnNodeChange: the node's facts (feature.Node) and a callback
//     after they change.
//   - NamespaceIDs: the namespaces' 24-bit ids, and a callback when one
//     changes.
//   - Owners: the feature's handle on a bridge's desired state. Only the
//     owners of the plan features it declares (Feature.Owns) are writable:
//     the Host's owner writers refuse any other, and the reconciler's
//     store refuses flows in tables the plan does not give those features.
//   - Flush, FlushThen: wait until a bridge holds every state set before
//     the call, and send packet-outs right behind it.
//   - Send: packet-outs and other messages on a bridge's connection (after
//     Run has started).
//   - ReadFlows: the flows a bridge has installed in a table, over a
//     connection of its own, so that it works before the reconcilers start
//     (to carry state over a restart).
//   - FlowStats, MeterStats: the statistics of a bridge's flows in one
//     table, and of its meters, read on the agent's own connection of the
//     bridge, for the metrics that follow the switch's counters (through
//     CounterPoll and Growth, the one counters loop). They fail before Run
//     and while the connection is down.
//   - Interfaces, OVSDB: OVSDB's Interface cache (one monitor shared by
//     the agent, where the CNI plugin describes the pods' ports) and the
//     agent's OVSDB client, for the ports a feature adds itself. Both are
//     nil before Sync.
//   - Repairs: the account of the host configuration the feature keeps
//     (addresses, routes, sysctls), shown by /readyz while a repair keeps
//     failing.
//   - OnBridgeReady: a callback each time a bridge holds the agent's flows
//     after a connection (the start-up, and every reconnection).
//
// Packet-ins reach a feature only for the categories it declares
// (PacketInHandler), each category with its own bounded queue, fair
// between sources, and counters (Dispatcher).
//
// # The sync loop
//
// A feature's background work runs on one sync loop from lib/syncloop,
// never on wake channels, dirty sets or retry timers of its own. A
// feature whose state is independent parts (a namespace, a pod, an
// object) uses syncloop.Keyed: its informer handlers and Host callbacks
// Mark the keys that changed (MarkAll when the node's facts change), Sync
// runs the first full pass in its own goroutine (SyncNow), and Run runs
// Loop. The loop merges a burst of marks into one pass, keeps passes a
// least interval apart, and retries each key the pass reports failed
// after the feature's retry interval. A feature that recomputes its state
// as a whole, as the service proxy does, uses syncloop.Runner.
//
// No feature reads or writes another feature's state.
package feature
