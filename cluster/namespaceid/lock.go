package namespaceid

import (
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// The NamespaceID custom resource (deploy/crds/namespaceids.yaml).
const (
	Group    = "nodeflow.io"
	Version  = "v1alpha1"
	Kind     = "NamespaceID"
	Resource = "namespaceids"
	// Finalizer keeps a released lock, and so its id, taken until every
	// node has removed the flows that use the id.
	Finalizer = "nodeflow.io/flows-released"
	// ReleasedAnnotation is each node's watermark, on its Node object: a
	// resourceVersion R of NamespaceID objects (or "0"), meaning that no
	// flow on the node uses the id of any lock that was terminating at a
	// resourceVersion up to R.
	ReleasedAnnotation = "nodeflow.io/nsid-released"
)

// GVR is the NamespaceID resource.
var GVR = schema.GroupVersionResource{Group: Group, Version: Version, Resource: Resource}

// Lock is a parsed NamespaceID object: the lock that gives ID to a
// namespace.
type Lock struct {
	// Name is metadata.name; ID is its value, 0 when the name is not a
	// namespace id.
	Name string
	ID   uint32
	// UID and ResourceVersion are the lock object's.
	UID             types.UID
	ResourceVersion string
	// Namespace and NamespaceUID are spec.namespace and spec.namespaceUID:
	// the namespace that holds the id.
	Namespace    string
	NamespaceUID types.UID
	// Terminating is set once the lock has a deletionTimestamp: the id is
	// released and in quarantine until the lock is gone.
	Terminating bool
	// Finalizer is set while the lock carries the Finalizer.
	Finalizer bool
}

// ParseLock reads a NamespaceID object. A malformed object gives an error
// that names the object and the field, and the fields that could be read
// (at least Name, UID, ResourceVersion, Terminating and Finalizer; ID when
// the name is an id).
func ParseLock(u *unstructured.Unstructured) (Lock, error) {
	l := Lock{
		Name:            u.GetName(),
		UID:             u.GetUID(),
		ResourceVersion: u.GetResourceVersion(),
		Terminating:     u.GetDeletionTimestamp() != nil,
		Finalizer:       slices.Contains(u.GetFinalizers(), Finalizer),
	}
	var errs []error
	id, err := ParseID(l.Name)
	if err != nil {
		errs = append(errs, fmt.Errorf("metadata.name: %w", err))
	}
	l.ID = id
	spec, ok := u.Object["spec"].(map[string]any)
	if !ok {
		errs = append(errs, errors.New("spec: missing or not an object"))
	} else {
		ns, _ := spec["namespace"].(string)
		uid, _ := spec["namespaceUID"].(string)
		if ns == "" {
			errs = append(errs, errors.New("spec.namespace: missing or not a string"))
		}
		if uid == "" {
			errs = append(errs, errors.New("spec.namespaceUID: missing or not a string"))
		}
		l.Namespace, l.NamespaceUID = ns, types.UID(uid)
	}
	if len(errs) > 0 {
		return l, fmt.Errorf("nsid: NamespaceID %q: %w", l.Name, errors.Join(errs...))
	}
	return l, nil
}

// newLockObject returns the lock that gives id to ns: owned by ns (the
// garbage collector deletes it when ns is gone) and held by the Finalizer
// until every node has released the id.
func newLockObject(id uint32, ns *corev1.Namespace) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"namespace":    ns.Name,
			"namespaceUID": string(ns.UID),
		},
	}}
	u.SetAPIVersion(Group + "/" + Version)
	u.SetKind(Kind)
	u.SetName(FormatID(id))
	u.SetFinalizers([]string{Finalizer})
	u.SetOwnerReferences([]metav1.OwnerReference{{
		APIVersion: "v1", Kind: "Namespace", Name: ns.Name, UID: ns.UID,
	}})
	return u
}

// Watermark comparison. "0" is below every resourceVersion (nothing
// released yet); other values are resourceVersions of NamespaceID objects,
// which Kubernetes defines as comparable within one resource.

// compareRV compares two watermarks or resourceVersions.
func compareRV(a, b string) (int, error) {
	switch {
	case a == "0" && b == "0":
		return 0, nil
	case a == "0":
		if _, err := resourceversion.CompareResourceVersion(b, b); err != nil {
			return 0, err
		}
		return -1, nil
	case b == "0":
		if _, err := resourceversion.CompareResourceVersion(a, a); err != nil {
			return 0, err
		}
		return 1, nil
	}
	return resourceversion.CompareResourceVersion(a, b)
}
