// Package idling idles Services the way `oc idle` does, and holds what the
// idler and the unidler share: the annotation keys, the unidle-targets
// codec, and scaling through the scale subresource.
//
// Idling a Service:
//   - finds the scalables behind it from its EndpointSlices: every ready
//     endpoint whose targetRef is a Pod, the pod's controller, and that
//     controller's own controller when it has one (ReplicaSet -> Deployment);
//   - records them on the Service (UnidleTargetsAnnotation, a JSON list of
//     kind, name, group and replicas, merged with any list already there) and
//     marks it idled (IdledAtAnnotation, an RFC 3339 time in UTC);
//   - then, only after the Service is annotated, so that no request goes
//     unnoticed, marks each scalable with PreviousScaleAnnotation and scales
//     it to zero through its scale subresource.
//
// Deployments, ReplicaSets, ReplicationControllers and StatefulSets can be
// idled. The annotations are those of openshift's unidling API, so a
// Service idled here is woken by openshift-controller-manager's unidling
// controller as well as by nodeflow's (package unidler), and the other way
// round.
package idling
