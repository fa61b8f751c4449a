// Package cleanup is `nodeflow cleanup`: it takes off a node everything the
// node agent put there, so that nodeflow can be uninstalled and the node is
// as it was before the agent first started (kube-proxy's --cleanup, for
// nodeflow).
//
// It works in three parts. Inspect reads what is on the node (Facts): the
// bridges in OVSDB and their external_ids, the node's addresses and routes
// on the gateway bridge and on the uplink, the uplink's sysctls and TX
// checksum offload and the record the agent kept of them
// (hostnet.UplinkStateFile), the agent's record of the node's addresses
// (hostnet.NodeL3File), nodeflow's
// nftables tables, the CNI configuration file, the introspection socket,
// the CNI plugin's IPAM store and binary, the virtual-network attachments'
// veths and namespaces. Make turns Options and Facts into
// a Plan (pure: no I/O), an ordered list of Steps and the notes of what is
// left and why. Apply carries the steps out, one log line each.
//
// The order keeps the node reachable as long as possible:
//
//  1. nodeflow's CNI configuration file goes first, so that no new pod is
//     wired to a bridge about to go;
//  2. the uplink's sysctls get their recorded values back (disable_ipv6
//     first, so that its IPv6 addresses can come back), and so does its
//     TX checksum offload; without a recorded value the offload is left as
//     it is, with a warning when it is off;
//  3. the node's addresses and routes are copied from the gateway bridge
//     back to the uplink, less nodeflow's masquerade addresses and its own
//     routes;
//  4. the pod bridge, then the gateway bridge, are deleted, only when
//     their external_ids say nodeflow created them; with them go their
//     ports, flows, groups and meters, mp0 and everything on it, and
//     everything the agent kept on the gateway bridge's interface; the
//     uplink's promiscuous mode goes off if Open vSwitch left it on; then
//     the virtual-network attachments' veths and namespaces;
//  5. nodeflow's nftables tables, the introspection socket, the IPAM store
//     and the CNI plugin (when no pod holds an address any more, or with
//     Purge), the record of the node's addresses, and last the record of
//     the uplink.
//
// Running it again, or on a node where the agent never ran, finds nothing
// to do. Run refuses to start while an agent answers on the node or holds
// the node's Open vSwitch (the OVSDB lock Options.AgentLock), unless forced;
// it holds that lock itself while it runs, so that an agent started
// meanwhile waits for it to end.
package cleanup
