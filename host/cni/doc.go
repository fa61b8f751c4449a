// Package cni is nodeflow's CNI plugin (container network interface,
// specification 1.0 and 1.1), run as `nodeflow cni` by a container runtime.
//
// For each pod network attachment it
//   - allocates one address per IP family from the node's pod subnets, in a
//     crash-safe on-disk store (see Store);
//   - creates a veth pair, moves one end into the pod's network namespace as
//     CNI_IFNAME with a MAC derived from the pod's IPv4 address, the addresses
//     and a default route per family via the subnet's gateway address;
//   - turns TX checksum offload off on both ends, because the OVS userspace
//     datapath validates checksums in conntrack;
//   - adds the host end to the pod bridge (br0) over OVSDB, with external_ids
//     naming the pod (see the ExternalID constants) so that the node agent can
//     program its flows;
//   - keeps a durable record of that port on disk (see PortRecord), from which
//     the node agent recreates the port when it is deleted (with its bridge,
//     say) while the pod and its veth remain (see WithPortRecords).
//
// DEL undoes all of this and succeeds for attachments it does not know, as
// the specification requires. CHECK compares the live state with the
// prevResult and the port record. GC releases addresses, port records and
// ports of attachments that are no longer valid. STATUS reports whether the
// plugin can serve ADD.
package cni
