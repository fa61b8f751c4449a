package plan

// The virtual networks' part of the plan (docs/virtual-networks.md): their
// tables are PodVNetPortSecurity, PodVNetARP and PodVNetForward (tables.go),
// their flows FeatureVNet's, and their traffic is kept apart from the pod
// network's by the VXLAN key: namespace ids are 1..0x7fffff, VNIs
// 0x800000..0xffffff, so the key's bit 23 says which a packet carries.

// VNetLocal says that a virtual network's packet came in by a local
// attachment's port (table 0 sets it). It is a field of its own, not a
// PktSource value, so that nothing of the pod network's tables, which
// look at PktSource, has anything to say about virtual networks.
var VNetLocal = mustField("VNetLocal", Pod, SpaceReg, 0, 6, 6, "a virtual network's packet from a local attachment's port (the forwarding table tunnels only these)")

// FromLocalAttachment is VNetLocal set. The forwarding table tunnels only
// packets that carry it: what came from the tunnel is delivered locally
// or dropped, never sent on.
var FromLocalAttachment = mustMark("FromLocalAttachment", VNetLocal, 1)

// TunnelKeyVNIBit is the bit of the VXLAN key (tun_id) and of NamespaceID
// that is set in every VNI and clear in every namespace id. br0's table 15
// lets into the pod pipeline only keys without it, and into the virtual
// networks' only keys with it.
const TunnelKeyVNIBit uint64 = 0x800000

// PriorityVNetTunnel is table 15's acceptance of a VNI from a node that
// hosts an attachment of it, above the pod network's per-node flows
// (PriorityNormal), which match only keys without TunnelKeyVNIBit anyway.
const PriorityVNetTunnel Priority = 200
