package proxy

import (
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Slice is one EndpointSlice as the proxy reads it: processed once, when
// it arrives, into the endpoints of each service port it serves. It is
// small enough to be what an informer's cache keeps in place of the
// object (SliceOf is that informer's transform), and the tracker keeps
// the same processed endpoints rather than a copy, so a slice is held
// once.
type Slice struct {
	// ObjectMeta holds the slice's identity only: namespace, name, UID,
	// resource version and deletion time.
	metav1.ObjectMeta
	info    *sliceInfo
	errs    []error
	trigger time.Time
}

// SliceOf processes s (nil for nil). Bad fields are kept as errors
// (Errors), reported when the slice is recorded.
func SliceOf(s *discovery.EndpointSlice) *Slice {
	if s == nil {
		return nil
	}
	info, errs := processSlice(s)
	out := &Slice{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name, UID: s.UID,
			ResourceVersion: s.ResourceVersion, DeletionTimestamp: s.DeletionTimestamp},
		info: info, errs: errs,
	}
	if v := s.Annotations[v1.EndpointsLastChangeTriggerTime]; v != "" && info != nil {
		if ts, err := time.Parse(time.RFC3339Nano, v); err == nil {
			out.trigger = ts
		}
	}
	return out
}

// Errors returns the slice's bad fields, as *InputError.
func (s *Slice) Errors() []error { return s.errs }

// GetObjectKind implements runtime.Object: a Slice has no kind of its own.
func (s *Slice) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object. The processed endpoints are
// never modified once made, so the copy shares them.
func (s *Slice) DeepCopyObject() runtime.Object {
	c := *s
	s.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return &c
}

// Ports returns the Service the slice serves and its endpoints by service
// port (the lists are shared: do not modify them); a slice that serves none (no service-name
// label, address type FQDN, or one that is unknown) returns false.
func (s *Slice) Ports() (types.NamespacedName, map[ServicePortName][]Endpoint, bool) {
	if s.info == nil {
		return types.NamespacedName{}, nil, false
	}
	return s.info.service, s.info.portMap(), true
}
