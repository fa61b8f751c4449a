package services

import (
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	"nodeflow/proxy"
)

// lastApplied is the annotation kubectl apply keeps the whole object in.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// stripManagedFields is the Service informer's transform: it drops an
// object's managed fields (server-side apply bookkeeping, often larger
// than the object itself) and kubectl's copy of the last applied object
// before the cache stores it; no feature reads either.
func stripManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
		if a := m.GetAnnotations(); a[lastApplied] != "" {
			b := make(map[string]string, len(a)-1)
			for k, v := range a {
				if k != lastApplied {
					b[k] = v
				}
			}
			m.SetAnnotations(b)
		}
	}
	return obj, nil
}

// processSlice is the EndpointSlice informer's transform. Only the service
// proxy watches EndpointSlices, and the cache holds every one of the
// cluster: it keeps each as the proxy reads it (proxy.SliceOf: the
// identity, and the endpoints of each service port, processed once), not
// the object, and the tracker shares those endpoints rather than copying
// them. Anything else passes through with its managed fields stripped.
func processSlice(obj any) (any, error) {
	if s, ok := obj.(*discovery.EndpointSlice); ok {
		return proxy.SliceOf(s), nil
	}
	if _, ok := obj.(*proxy.Slice); ok {
		return obj, nil
	}
	return stripManagedFields(obj)
}
