package vnet

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestUnstructuredRoundTrip(t *testing.T) {
	att := &NetworkAttachment{Spec: NetworkAttachmentSpec{Node: "n1", Subnet: "s", VNI: MinVNI + 1},
		Status: NetworkAttachmentStatus{IP: "10.0.0.2", Errors: NetworkAttachmentErrors{IPAM: []string{"x"}}}}
	att.Namespace, att.Name, att.UID = "ns", "a", "u1"
	u, err := ToUnstructured(att)
	if err != nil {
		t.Fatal(err)
	}
	if u.GetAPIVersion() != APIVersion || u.GetKind() != KindNetworkAttachment {
		t.Errorf("apiVersion %q kind %q", u.GetAPIVersion(), u.GetKind())
	}
	if vni, _, _ := unstructured.NestedInt64(u.Object, "spec", "vni"); vni != int64(MinVNI+1) {
		t.Errorf("spec.vni = %d", vni)
	}
	back, err := FromUnstructured[*NetworkAttachment](u)
	if err != nil {
		t.Fatal(err)
	}
	att.APIVersion, att.Kind = APIVersion, KindNetworkAttachment
	if !reflect.DeepEqual(back, att) {
		t.Errorf("round trip: %+v, want %+v", back, att)
	}

	l := NewIPLock(att, MinVNI+1, netip.MustParseAddr("10.0.0.2"))
	ul, err := ToUnstructured(l)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := FromUnstructured[*IPLock](ul)
	if err != nil || !reflect.DeepEqual(lb, l) {
		t.Errorf("lock round trip: %+v %v", lb, err)
	}

	if _, err := FromUnstructured[*Subnet](u); err == nil || !strings.Contains(err.Error(), "ns/a is not a "+APIVersion+" Subnet") {
		t.Errorf("an attachment read as a Subnet: %v", err)
	}
	bad := u.DeepCopy()
	bad.Object["spec"] = map[string]any{"vni": "many"}
	if _, err := FromUnstructured[*NetworkAttachment](bad); err == nil || !strings.Contains(err.Error(), "NetworkAttachment ns/a") {
		t.Errorf("a string VNI: %v", err)
	}
}
