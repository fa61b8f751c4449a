// Package vnetfeature is the virtual networks' connection agent
// (docs/virtual-networks.md, "Connection agent"): the node agent's
// feature that makes a Linux interface for each NetworkAttachment of its
// node and programs br0 so that the attachments of one VNI reach each
// other across nodes, and nothing else.
//
// What it watches, through its own dynamic client (informers.go): the
// seed's 1+R informers on NetworkAttachments, one with the field selector
// spec.node=<this node>, and one per relevant VNI (the VNIs of this node's
// attachments) with spec.vni=<vni>, plus one Subnet informer per relevant
// VNI. A VNI's informers start with the node's first attachment on it and
// stop (stop channel closed, cache dropped) with its last. Until the CRDs
// are served, it polls discovery with back-off and keeps out of the
// agent's way.
//
// What it makes, per local attachment with an address (link.go,
// netns.go, plumbing.go): a veth pair, both ends named InterfaceName(uid);
// the host end a port of br0 added over OVSDB (external_ids
// owner=OwnerVNet), the other end in a network namespace of its own,
// NetnsName(namespace, name) under /run/netns (as `ip netns add` makes
// them), with the status MAC and the address (IPv4 or IPv6) with its
// Subnet's prefix length; TX checksum offload off on both ends. An IPv6
// address is added without duplicate-address detection, in a namespace
// with IPv6 on but no router advertisements and no link-local address;
// an IPv4 attachment's namespace has IPv6 off. A namespace per
// attachment, because two VNIs may use the same CIDR. Interfaces that are
// already as wanted are adopted, without a break in traffic; those of
// attachments that are gone are removed.
//
// How it syncs (loop.go, pass.go): one syncloop.Keyed whose keys are an
// attachment of this node, a VNI's remote mappings, or a VNI's Subnets.
// The informers' handlers and the watch of the ports on br0 mark keys; a
// full pass (every attachment and VNI, then the removal of what nobody
// wants) follows the first listing, a node change and every
// CheckInterval; a key that fails is retried after RetryInterval. A pass
// brings the VNIs' remote mappings in line first, then the attachments in
// name order (their interfaces made a few at once ahead, premake.go), then
// writes their statuses once br0 holds their flows.
//
// What it programs (datapath/vnetflows): the attachment's own flows under
// vnet.LocalOwner, and each relevant VNI's remote mappings under
// vnet.VNIOwner, built from the attachments' status (guest IP, MAC, host
// IP), eagerly: no flooding, no learning.
//
// What it writes: status.hostIP, status.ifcName and status.errors.host
// of this node's attachments, by server-side apply on the status
// subresource as FieldManager(node), and a Warning event, naming the
// object and the field, when the input is bad (a missing Subnet, a VNI out
// of range, an address that is not the Subnet's) or the interface cannot
// be made.
package vnetfeature
