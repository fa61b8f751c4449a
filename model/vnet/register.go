package vnet

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The API group and version.
const (
	Group   = "vnet.nodeflow.io"
	Version = "v1alpha1"
)

// Kinds.
const (
	KindSubnet            = "Subnet"
	KindNetworkAttachment = "NetworkAttachment"
	KindIPLock            = "IPLock"
)

// Resources (the plurals of the CRDs).
const (
	ResourceSubnets            = "subnets"
	ResourceNetworkAttachments = "networkattachments"
	ResourceIPLocks            = "iplocks"
)

// SchemeGroupVersion is vnet.nodeflow.io/v1alpha1.
var SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// The resources, for the dynamic client.
var (
	SubnetGVR            = SchemeGroupVersion.WithResource(ResourceSubnets)
	NetworkAttachmentGVR = SchemeGroupVersion.WithResource(ResourceNetworkAttachments)
	IPLockGVR            = SchemeGroupVersion.WithResource(ResourceIPLocks)
)

// APIVersion is the apiVersion of the objects: "vnet.nodeflow.io/v1alpha1".
var APIVersion = SchemeGroupVersion.String()

// AddToScheme registers the types (and their lists) in s.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion,
		&Subnet{}, &SubnetList{},
		&NetworkAttachment{}, &NetworkAttachmentList{},
		&IPLock{}, &IPLockList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}
