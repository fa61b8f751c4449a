package vnet

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Subnet is one CIDR block on one virtual network (VNI), from which the
// IPAM controller assigns addresses to the NetworkAttachments that name
// it. Its spec is immutable: change it by deleting the Subnet and creating
// another.
type Subnet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SubnetSpec   `json:"spec"`
	Status SubnetStatus `json:"status,omitempty"`
}

// SubnetSpec is what the client asks for.
type SubnetSpec struct {
	// VNI is the VXLAN network identifier of the virtual network, in
	// MinVNI..MaxVNI. Several Subnets may share a VNI; they must then be in
	// the same namespace and must not overlap.
	VNI uint32 `json:"vni"`
	// CIDR is the block addresses are assigned from, in canonical form
	// (no host bits set): an IPv4 prefix of length 8 to 32, or an IPv6
	// prefix of length 64 to 128. AddressRange says which of its addresses
	// are assigned.
	CIDR string `json:"cidr"`
}

// SubnetStatus is what the IPAM controller reports.
type SubnetStatus struct {
	// Errors are the problems that keep the IPAM controller from
	// assigning addresses from this Subnet (an invalid spec, an overlap
	// with an older Subnet of the VNI, a VNI whose oldest Subnet is in
	// another namespace), each "field: problem". Empty when the Subnet is
	// usable.
	Errors []string `json:"errors,omitempty"`
}

// SubnetList is a list of Subnets.
type SubnetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []Subnet `json:"items"`
}

// NetworkAttachment asks for a network interface on a Subnet (spec.subnet,
// a Subnet in the same namespace) on a node (spec.node). The IPAM
// controller writes the address and MAC it chose into the status; the
// connection agent on the node writes the host's address and the
// interface's name. spec.node and spec.subnet are immutable, and spec.vni
// can only be set once.
type NetworkAttachment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NetworkAttachmentSpec   `json:"spec"`
	Status NetworkAttachmentStatus `json:"status,omitempty"`
}

// NetworkAttachmentSpec is what the client asks for.
type NetworkAttachmentSpec struct {
	// Node is the name of the Node the interface is made on.
	Node string `json:"node"`
	// Subnet is the name of the Subnet, in the attachment's namespace, the
	// address is assigned from.
	Subnet string `json:"subnet"`
	// VNI is a copy of the Subnet's spec.vni, so that the attachments of a
	// VNI can be listed and watched with a field selector. When the client
	// leaves it unset (0), the IPAM controller sets it from the Subnet;
	// when it differs from the Subnet's, the IPAM controller reports the
	// mismatch in status.errors.ipam and assigns nothing.
	VNI uint32 `json:"vni,omitempty"`
}

// NetworkAttachmentStatus is what the IPAM controller (IP, MAC,
// Errors.IPAM) and the node's connection agent (HostIP, IfcName,
// Errors.Host) report.
type NetworkAttachmentStatus struct {
	// IP is the assigned address, canonical. It is written only while the
	// attachment holds the address's IPLock.
	IP string `json:"ip,omitempty"`
	// MAC is MACOf(spec.vni, ip), colon-separated lowercase hex.
	MAC string `json:"mac,omitempty"`
	// HostIP is the address of the node that hosts the interface, the
	// other end of the VXLAN tunnels to it.
	HostIP string `json:"hostIP,omitempty"`
	// IfcName is the name of the Linux network interface on the node.
	IfcName string `json:"ifcName,omitempty"`
	// Errors are the problems each party reports, each "field: problem".
	Errors NetworkAttachmentErrors `json:"errors,omitempty"`
}

// NetworkAttachmentErrors are the problems reported on an attachment.
type NetworkAttachmentErrors struct {
	// IPAM are the IPAM controller's: why no address is assigned (a
	// missing, invalid, conflicting or full Subnet, a VNI mismatch, a
	// missing Node).
	IPAM []string `json:"ipam,omitempty"`
	// Host are the connection agent's: why the interface is not made.
	Host []string `json:"host,omitempty"`
}

// NetworkAttachmentList is a list of NetworkAttachments.
type NetworkAttachmentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []NetworkAttachment `json:"items"`
}

// IPLock is the hard state of one address on one VNI: while it exists, the
// NetworkAttachment named by its controller owner reference (and by
// spec.attachment) holds the address. Its name is LockName(spec.vni,
// spec.ip), and it lives in the attachment's namespace, so the API
// server's unique names make creating it an atomic test-and-set of the
// address. Its spec is immutable. An IPLock without a controller owner
// reference reserves its address: the IPAM controller never assigns it and
// never deletes the lock.
type IPLock struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec IPLockSpec `json:"spec"`
}

// IPLockSpec says which address is locked, and for whom.
type IPLockSpec struct {
	// Attachment is the name of the NetworkAttachment, in the lock's
	// namespace, that holds the address.
	Attachment string `json:"attachment"`
	// VNI and IP are the locked address; the lock's name is
	// LockName(VNI, IP).
	VNI uint32 `json:"vni"`
	IP  string `json:"ip"`
}

// IPLockList is a list of IPLocks.
type IPLockList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []IPLock `json:"items"`
}
