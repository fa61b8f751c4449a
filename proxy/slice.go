package proxy

import (
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
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

// SliceOf processes s (nil for nil). Bad fields are kept as errors, and
// reported when the slice is recorded (EndpointsTracker.RecordSlice).
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

// GetObjectKind implements runtime.Object: a Slice has no kind of its own.
func (s *Slice) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object. The processed endpoints are
// never modified once made, so the copy shares them.
func (s *Slice) DeepCopyObject() runtime.Object {
	c := *s
	s.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return &c
}
