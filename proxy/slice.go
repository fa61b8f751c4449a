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
	Identity
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
	out := &Slice{Identity: identityOf(&s.ObjectMeta), info: info, errs: errs}
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
	return &c
}

// Service is one Service as the proxy reads it: processed once, when it
// arrives, into its service ports. Like Slice, it is what an informer's
// cache keeps in place of the object (ServiceOf is that informer's
// transform), about a quarter of the object's size, and the tracker keeps
// the same processed ports.
type Service struct {
	Identity
	info *serviceInfo
	errs []error
}

// ServiceOf processes svc (nil for nil). Bad fields are kept as errors,
// and reported when the Service is recorded (ServiceTracker.RecordService).
func ServiceOf(svc *v1.Service) *Service {
	if svc == nil {
		return nil
	}
	info, errs := processService(svc)
	return &Service{Identity: identityOf(&svc.ObjectMeta), info: info, errs: errs}
}

// GetObjectKind implements runtime.Object: a Service has no kind of its
// own.
func (s *Service) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object. The processed ports are never
// modified once made, so the copy shares them.
func (s *Service) DeepCopyObject() runtime.Object {
	c := *s
	return &c
}

// Identity is what the proxy keeps of an object's metadata: what an
// informer's cache needs to key, version and delete it. At 72 bytes it is
// a third of metav1.ObjectMeta, for every Service and EndpointSlice of the
// cluster. Its fields are never modified once made (a copy may share
// DeletionTimestamp).
type Identity struct {
	Namespace, Name, ResourceVersion string
	UID                              types.UID
	DeletionTimestamp                *metav1.Time
}

// parts returns s's identity, processed endpoints and bad fields, none
// for a nil s.
func (s *Slice) parts() (*Identity, *sliceInfo, []error) {
	if s == nil {
		return nil, nil, nil
	}
	return &s.Identity, s.info, s.errs
}

// parts returns s's identity, processed ports and bad fields, none for a
// nil s.
func (s *Service) parts() (*Identity, *serviceInfo, []error) {
	if s == nil {
		return nil, nil, nil
	}
	return &s.Identity, s.info, s.errs
}

func identityOf(m *metav1.ObjectMeta) Identity {
	return Identity{Namespace: m.Namespace, Name: m.Name, ResourceVersion: m.ResourceVersion, UID: m.UID,
		DeletionTimestamp: m.DeletionTimestamp}
}

// GetObjectMeta implements metav1.ObjectMetaAccessor, which meta.Accessor
// (and so an informer's key and index functions) reads: a fresh
// ObjectMeta with the identity, whose changes are not kept.
func (id *Identity) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: id.Namespace, Name: id.Name, ResourceVersion: id.ResourceVersion, UID: id.UID,
		DeletionTimestamp: id.DeletionTimestamp}
}
