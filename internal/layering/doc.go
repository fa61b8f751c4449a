// Package layering states nodeflow's architecture as rules on imports, and
// its test fails when a package breaks one. The tree is built in floors;
// a package imports only its own floor and the floors below it:
//
//	lib/       wire libraries and generic tools (OpenFlow, OVSDB, packets,
//	           DNS messages, the sync loop): no Kubernetes API (its generic
//	           tools only: clocks, rate limiters), nothing of the project
//	           above lib/
//	model/     the semantics of each concept (services, network policy,
//	           egress firewall, idling, virtual networks): pure, over lib/
//	datapath/  the pipeline plan, the reconciler and one flow builder per
//	           concept (<concept>flows): pure, over model/ and lib/
//	host/      the node's own plumbing (network stack, NAT, repairs, network
//	           namespaces, CNI): over lib/, model/ and the plan
//	cluster/   the cluster controllers (idling, namespace ids, virtual
//	           network IPAM, leader election)
//	agent/     the node agent: the wiring, the seam (agent/feature) and one
//	           feature per concept (agent/features/<concept>feature)
//	internal/  process infrastructure, and test helpers (internal/testutil)
//	cmd/       the commands, which may import anything
//
// Within the agent, the seam holds: the seam imports no feature and not the
// agent; a feature imports the seam and the floors below, never the agent
// or another feature; only the feature list and the commands import the
// features. Product code never imports a test helper or the testbed.
package layering
