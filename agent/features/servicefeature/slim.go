package servicefeature

import (
	"k8s.io/apimachinery/pkg/api/meta"

	"nodeflow/model/service"
)

// lastApplied is the annotation kubectl apply keeps the whole object in.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// stripManagedFields drops an object's managed fields (server-side apply
// bookkeeping, often larger than the object itself) and kubectl's copy of
// the last applied object before a cache stores it; no feature reads
// either.
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

// processService is the Service informer's transform: the cache keeps
// each Service as the proxy reads it (proxy.ServiceOf: the identity, and
// the processed service ports), not the object. The unidling feature reads
// the same cache for a Service's identity only. Anything else passes
// through with its managed fields stripped.
func processService(obj any) (any, error) { return keepProcessed(obj, service.ServiceOf) }

// processSlice is the EndpointSlice informer's transform. Only the service
// proxy watches EndpointSlices, and the cache holds every one of the
// cluster: it keeps each as the proxy reads it (proxy.SliceOf: the
// identity, and the endpoints of each service port, processed once), not
// the object, and the tracker shares those endpoints rather than copying
// them. Anything else passes through with its managed fields stripped.
func processSlice(obj any) (any, error) { return keepProcessed(obj, service.SliceOf) }

// keepProcessed is a transform that keeps an In as process makes it, lets
// what it made already pass (a relist's replace), and strips the managed
// fields of anything else.
func keepProcessed[In, Out any](obj any, process func(In) Out) (any, error) {
	switch o := obj.(type) {
	case In:
		return process(o), nil
	case Out:
		return o, nil
	}
	return stripManagedFields(obj)
}
