// Package vnet holds the virtual-network API of nodeflow (group
// vnet.nodeflow.io, version v1alpha1): Subnet, NetworkAttachment and
// IPLock, their CustomResourceDefinitions' names (deploy/crds/vnet-*.yaml),
// and the pure functions every part of the feature must agree on: the name
// of an address's lock (LockName), the MAC of an address (MACOf), the VNI
// range (MinVNI..MaxVNI) and the assignable addresses of a CIDR
// (AddressRange).
//
// The package does no I/O. Its types are plain Go structs with
// hand-written DeepCopy methods; they implement runtime.Object, and
// FromUnstructured and ToUnstructured convert them for the dynamic client.
//
// # The resources
//
// All three are namespaced.
//
//	Subnet             spec.vni, spec.cidr                   status.errors
//	NetworkAttachment  spec.node, spec.subnet, spec.vni      status.ip, status.mac, status.hostIP,
//	                                                         status.ifcName, status.errors.{ipam,host}
//	IPLock             spec.attachment, spec.vni, spec.ip    (no status)
//
// A Subnet is one CIDR on one VNI; a VNI may have several Subnets, all in
// one namespace and none overlapping (the IPAM controller reports a Subnet
// that breaks either rule, and the attachments on it, in their status). A
// NetworkAttachment asks for an interface on a Subnet (named in the same
// namespace) on a node; spec.vni is a copy of the Subnet's VNI, so that
// agents can select the attachments of a VNI with a field selector. An
// IPLock is the hard state of an address: it exists, named
// LockName(vni, ip) in the attachment's namespace, while the attachment
// its controller owner reference names holds the address. Creating it is
// taking the address. docs/virtual-networks.md describes the design.
package vnet
