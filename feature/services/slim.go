package services

import (
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// slimEndpointSlice is the EndpointSlice informer's transform. Only the
// service proxy watches EndpointSlices, and the cache holds every one of
// the cluster: it keeps what the proxy reads (the identity, the
// service-name label, the trigger-time annotation, the address type, the
// ports, and each endpoint's first address, conditions and node) and drops
// the rest (target references, zones, hints, owner references, other
// labels and annotations), a large part of each slice. The endpoints keep
// their positions, so that an error names the same field.
func slimEndpointSlice(obj any) (any, error) {
	s, ok := obj.(*discovery.EndpointSlice)
	if !ok {
		return stripManagedFields(obj)
	}
	out := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: s.Name, Namespace: s.Namespace, UID: s.UID, ResourceVersion: s.ResourceVersion,
			Generation: s.Generation, DeletionTimestamp: s.DeletionTimestamp,
		},
		AddressType: s.AddressType,
		Ports:       s.Ports,
	}
	if v, ok := s.Labels[discovery.LabelServiceName]; ok {
		out.Labels = map[string]string{discovery.LabelServiceName: v}
	}
	if v, ok := s.Annotations[corev1.EndpointsLastChangeTriggerTime]; ok {
		out.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: v}
	}
	if len(s.Endpoints) > 0 {
		out.Endpoints = make([]discovery.Endpoint, len(s.Endpoints))
		for i, e := range s.Endpoints {
			out.Endpoints[i] = discovery.Endpoint{Conditions: e.Conditions, NodeName: e.NodeName}
			if len(e.Addresses) > 0 {
				out.Endpoints[i].Addresses = e.Addresses[:1:1]
			}
		}
	}
	return out, nil
}
