package service

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
// cluster. Its fields are never modified once made (nothing calls its
// setters; a copy may share DeletionTimestamp).
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

// *Identity is a metav1.Object, which meta.Accessor (and so an informer's
// key and index functions) reads before anything else: the identity's own
// fields are read and written; the others read as empty and writes to them
// are dropped. Being one itself, rather than handing out an ObjectMeta,
// spares an allocation on every key an informer computes (23 MB over a cold
// start at 10,000 Services).
var _ metav1.Object = (*Identity)(nil)

// GetNamespace returns the object's namespace.
func (id *Identity) GetNamespace() string { return id.Namespace }

// SetNamespace sets the object's namespace.
func (id *Identity) SetNamespace(ns string) { id.Namespace = ns }

// GetName returns the object's name.
func (id *Identity) GetName() string { return id.Name }

// SetName sets the object's name.
func (id *Identity) SetName(name string) { id.Name = name }

// GetUID returns the object's UID.
func (id *Identity) GetUID() types.UID { return id.UID }

// SetUID sets the object's UID.
func (id *Identity) SetUID(uid types.UID) { id.UID = uid }

// GetResourceVersion returns the object's resource version.
func (id *Identity) GetResourceVersion() string { return id.ResourceVersion }

// SetResourceVersion sets the object's resource version.
func (id *Identity) SetResourceVersion(v string) { id.ResourceVersion = v }

// GetDeletionTimestamp returns when the object's deletion was asked for.
func (id *Identity) GetDeletionTimestamp() *metav1.Time { return id.DeletionTimestamp }

// SetDeletionTimestamp sets when the object's deletion was asked for.
func (id *Identity) SetDeletionTimestamp(t *metav1.Time) { id.DeletionTimestamp = t }

// GetGenerateName is empty: it is not kept.
func (id *Identity) GetGenerateName() string { return "" }

// SetGenerateName drops the value: it is not kept.
func (id *Identity) SetGenerateName(string) {}

// GetGeneration is 0: it is not kept.
func (id *Identity) GetGeneration() int64 { return 0 }

// SetGeneration drops the value: it is not kept.
func (id *Identity) SetGeneration(int64) {}

// GetSelfLink is empty: it is not kept.
func (id *Identity) GetSelfLink() string { return "" }

// SetSelfLink drops the value: it is not kept.
func (id *Identity) SetSelfLink(string) {}

// GetCreationTimestamp is the zero time: it is not kept.
func (id *Identity) GetCreationTimestamp() metav1.Time { return metav1.Time{} }

// SetCreationTimestamp drops the value: it is not kept.
func (id *Identity) SetCreationTimestamp(metav1.Time) {}

// GetDeletionGracePeriodSeconds is nil: it is not kept.
func (id *Identity) GetDeletionGracePeriodSeconds() *int64 { return nil }

// SetDeletionGracePeriodSeconds drops the value: it is not kept.
func (id *Identity) SetDeletionGracePeriodSeconds(*int64) {}

// GetLabels is nil: labels are not kept.
func (id *Identity) GetLabels() map[string]string { return nil }

// SetLabels drops the labels: they are not kept.
func (id *Identity) SetLabels(map[string]string) {}

// GetAnnotations is nil: annotations are not kept.
func (id *Identity) GetAnnotations() map[string]string { return nil }

// SetAnnotations drops the annotations: they are not kept.
func (id *Identity) SetAnnotations(map[string]string) {}

// GetFinalizers is nil: finalizers are not kept.
func (id *Identity) GetFinalizers() []string { return nil }

// SetFinalizers drops the finalizers: they are not kept.
func (id *Identity) SetFinalizers([]string) {}

// GetOwnerReferences is nil: owners are not kept.
func (id *Identity) GetOwnerReferences() []metav1.OwnerReference { return nil }

// SetOwnerReferences drops the owners: they are not kept.
func (id *Identity) SetOwnerReferences([]metav1.OwnerReference) {}

// GetManagedFields is nil: managed fields are not kept.
func (id *Identity) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }

// SetManagedFields drops the managed fields: they are not kept.
func (id *Identity) SetManagedFields([]metav1.ManagedFieldsEntry) {}
