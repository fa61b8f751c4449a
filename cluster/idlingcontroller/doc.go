// Package idlingcontroller is the cluster controller that wakes idled Services up:
// `nodeflow unidler`, compatible with openshift-controller-manager's
// unidling controller, so that either can replace the other.
//
// It watches Events with reason NeedPods about a Service, through the core
// API (involvedObject) and the events.k8s.io API (regarding). Both APIs
// serve the same objects, so an event is queued once: only when it is
// newer than the last one seen for its Service. For a queued Service it:
//   - ignores it when it has no idled-at annotation, or the event is older
//     than that annotation (an event of an earlier idling);
//   - scales every target of its unidle-targets annotation that is still at
//     0 back to its recorded replicas, through the scale subresource, and
//     removes the idling annotations from the target;
//   - keeps the targets that failed in the annotation (and retries them
//     with a rate limiter), drops those that no longer exist, and removes
//     both annotations when none remain.
//
// It waits for a ready endpoint of the Service (or ReadyTimeout) before it
// removes the annotations: a node agent holding the first packets of the
// Service keeps them while the Service is idled, and rejects them if the
// Service stops being idled while it has no endpoint.
//
// A malformed annotation and a target that does not exist or cannot be
// scaled are reported with a Warning event on the Service. RunLeader runs
// the controller under leader election on a Lease, so that two replicas can
// run.
package idlingcontroller
