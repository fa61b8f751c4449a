package vnetipam

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"nodeflow/internal/testutil/fakeapi"
	"nodeflow/model/vnet"
)

// newFakeAPI returns a fake API (which see for what it does as the API
// server does) serving the three vnet resources; Subnets and
// NetworkAttachments have a status subresource.
func newFakeAPI() *fakeapi.API {
	return fakeapi.New(
		fakeapi.Resource{GVR: vnet.SubnetGVR, Kind: vnet.KindSubnet, Status: true},
		fakeapi.Resource{GVR: vnet.NetworkAttachmentGVR, Kind: vnet.KindNetworkAttachment, Status: true},
		fakeapi.Resource{GVR: vnet.IPLockGVR, Kind: vnet.KindIPLock})
}

func gr(resource string) schema.GroupResource {
	return schema.GroupResource{Group: vnet.Group, Resource: resource}
}

// rivalLocked returns the lock that another controller would have created
// for the same address as the lock l in f, for another attachment of its VNI,
// or nil when there is none. Under mu.
func rivalLocked(t *testing.T, f *fakeapi.API, l *unstructured.Unstructured) *unstructured.Unstructured {
	vni, ip, err := vnet.ParseLockName(l.GetName())
	if err != nil {
		t.Errorf("lock %s: %v", l.GetName(), err)
		return nil
	}
	holder, _, _ := unstructured.NestedString(l.Object, "spec", "attachment")
	for _, u := range f.ListLocked(vnet.ResourceNetworkAttachments) {
		att, err := vnet.FromUnstructured[*vnet.NetworkAttachment](u)
		if err != nil || att.Namespace != l.GetNamespace() || att.Name == holder || att.Spec.VNI != vni {
			continue
		}
		return mustU(t, vnet.NewIPLock(att, vni, ip))
	}
	return nil
}
