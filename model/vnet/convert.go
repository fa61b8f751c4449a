package vnet

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// Object is one of the package's three kinds.
type Object interface {
	*Subnet | *NetworkAttachment | *IPLock
	runtime.Object
}

// FromUnstructured decodes u, as the dynamic client and its informers
// return it, into a typed object of kind T. It fails, naming the object,
// when u is of another kind or a field has the wrong type; unknown fields
// are ignored (the CRDs prune them).
func FromUnstructured[T Object](u *unstructured.Unstructured) (T, error) {
	var out T
	switch any(out).(type) {
	case *Subnet:
		out = any(&Subnet{}).(T)
	case *NetworkAttachment:
		out = any(&NetworkAttachment{}).(T)
	case *IPLock:
		out = any(&IPLock{}).(T)
	}
	want := kindOf(out)
	if u.GetKind() != want || u.GetAPIVersion() != APIVersion {
		return out, fmt.Errorf("vnet: %s %s/%s is not a %s %s", u.GetAPIVersion()+" "+u.GetKind(), u.GetNamespace(), u.GetName(), APIVersion, want)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		return out, fmt.Errorf("vnet: %s %s/%s: %w", want, u.GetNamespace(), u.GetName(), err)
	}
	return out, nil
}

// ToUnstructured encodes obj for the dynamic client, with its apiVersion
// and kind set. It goes through JSON rather than
// runtime.DefaultUnstructuredConverter, which keeps a uint32 as a uint64:
// unstructured objects hold JSON values, and their DeepCopy panics on one.
func ToUnstructured[T Object](obj T) (*unstructured.Unstructured, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("vnet: %s: %w", kindOf(obj), err)
	}
	var m map[string]any
	if err := utiljson.Unmarshal(b, &m); err != nil { // numbers as int64
		return nil, fmt.Errorf("vnet: %s: %w", kindOf(obj), err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(APIVersion)
	u.SetKind(kindOf(obj))
	return u, nil
}

func kindOf(obj runtime.Object) string {
	switch obj.(type) {
	case *Subnet:
		return KindSubnet
	case *NetworkAttachment:
		return KindNetworkAttachment
	case *IPLock:
		return KindIPLock
	}
	return ""
}
