package vnet

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func meta(name string) metav1.ObjectMeta {
	yes := true
	return metav1.ObjectMeta{
		Name: name, Namespace: "ns", UID: "uid-" + metav1.NamespaceDefault, ResourceVersion: "7",
		Labels:          map[string]string{"a": "b"},
		Annotations:     map[string]string{"c": "d"},
		Finalizers:      []string{"f"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: APIVersion, Kind: KindNetworkAttachment, Name: "x", UID: "u", Controller: &yes}},
	}
}

// mutate changes every slice, map and pointer reachable from obj's
// metadata and status, so that a deep copy taken before keeps the old
// values.
func mutate(m *metav1.ObjectMeta) {
	m.Labels["a"] = "changed"
	m.Annotations["c"] = "changed"
	m.Finalizers[0] = "changed"
	*m.OwnerReferences[0].Controller = false
	m.OwnerReferences[0].Name = "changed"
}

func TestDeepCopy(t *testing.T) {
	s := &Subnet{TypeMeta: metav1.TypeMeta{APIVersion: APIVersion, Kind: KindSubnet}, ObjectMeta: meta("s"),
		Spec: SubnetSpec{VNI: MinVNI, CIDR: "10.0.0.0/24"}, Status: SubnetStatus{Errors: []string{"e"}}}
	a := &NetworkAttachment{TypeMeta: metav1.TypeMeta{APIVersion: APIVersion, Kind: KindNetworkAttachment}, ObjectMeta: meta("a"),
		Spec: NetworkAttachmentSpec{Node: "n", Subnet: "s", VNI: MinVNI},
		Status: NetworkAttachmentStatus{IP: "10.0.0.1", MAC: "02:00:0a:00:00:01", HostIP: "192.0.2.1", IfcName: "vn1",
			Errors: NetworkAttachmentErrors{IPAM: []string{"i"}, Host: []string{"h"}}}}
	l := &IPLock{TypeMeta: metav1.TypeMeta{APIVersion: APIVersion, Kind: KindIPLock}, ObjectMeta: meta("l"),
		Spec: IPLockSpec{Attachment: "a", VNI: MinVNI, IP: "10.0.0.1"}}
	for _, tc := range []struct {
		name   string
		obj    runtime.Object
		mutate func()
	}{
		{"Subnet", s, func() { mutate(&s.ObjectMeta); s.Status.Errors[0] = "changed" }},
		{"NetworkAttachment", a, func() {
			mutate(&a.ObjectMeta)
			a.Status.Errors.IPAM[0] = "changed"
			a.Status.Errors.Host[0] = "changed"
		}},
		{"IPLock", l, func() { mutate(&l.ObjectMeta) }},
		{"SubnetList", &SubnetList{Items: []Subnet{*s}}, nil},
		{"NetworkAttachmentList", &NetworkAttachmentList{Items: []NetworkAttachment{*a}}, nil},
		{"IPLockList", &IPLockList{Items: []IPLock{*l}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.obj.DeepCopyObject()
			if !reflect.DeepEqual(c, tc.obj) {
				t.Fatalf("copy %+v differs from %+v", c, tc.obj)
			}
			if tc.mutate == nil {
				return
			}
			before := reflect.ValueOf(c).Elem().Interface()
			tc.mutate()
			if reflect.DeepEqual(c, tc.obj) {
				t.Fatal("the copy changed with the original")
			}
			if !reflect.DeepEqual(reflect.ValueOf(c).Elem().Interface(), before) {
				t.Fatal("the copy changed")
			}
		})
	}
	var nilSubnet *Subnet
	if nilSubnet.DeepCopy() != nil || nilSubnet.DeepCopyObject() != nil {
		t.Error("a nil Subnet's copy is not nil")
	}
}

func TestScheme(t *testing.T) {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	for _, obj := range []runtime.Object{&Subnet{}, &SubnetList{}, &NetworkAttachment{}, &NetworkAttachmentList{}, &IPLock{}, &IPLockList{}} {
		gvks, _, err := s.ObjectKinds(obj)
		if err != nil || len(gvks) != 1 || gvks[0].GroupVersion() != SchemeGroupVersion {
			t.Errorf("%T: %v %v", obj, gvks, err)
		}
	}
}
