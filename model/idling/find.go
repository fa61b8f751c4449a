package idling

import (
	"context"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
)

// finder finds the scalables behind Services, caching the pods and
// controllers it reads, which Services often share.
type finder struct {
	client      kubernetes.Interface
	scaler      *Scaler
	pods        map[string]*v1.Pod                // ns/name -> pod (nil: gone)
	controllers map[string]*metav1.OwnerReference // ns/Kind.group/name -> its own controller (nil: none)
}

func newFinder(client kubernetes.Interface, scaler *Scaler) *finder {
	return &finder{client: client, scaler: scaler, pods: map[string]*v1.Pod{}, controllers: map[string]*metav1.OwnerReference{}}
}

// find returns the scalables behind the Service ns/name, sorted: those of
// the pods of its ready endpoints, from its EndpointSlices.
func (f *finder) find(ctx context.Context, ns, name string) ([]Ref, error) {
	list, err := f.client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
	if err != nil {
		return nil, fmt.Errorf("service %s/%s: list endpointslices: %w", ns, name, err)
	}
	found := map[Ref]bool{}
	for _, es := range list.Items {
		for _, ep := range es.Endpoints {
			// A nil ready condition means unknown, to be read as ready.
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			if ep.TargetRef == nil || ep.TargetRef.Kind != "Pod" {
				continue
			}
			podNS := ep.TargetRef.Namespace
			if podNS == "" {
				podNS = ns
			}
			ref, ok, err := f.scalableOf(ctx, podNS, ep.TargetRef.Name)
			if err != nil {
				return nil, fmt.Errorf("service %s/%s: endpointslice %s: %w", ns, name, es.Name, err)
			}
			if ok {
				found[ref] = true
			}
		}
	}
	out := make([]Ref, 0, len(found))
	for r := range found {
		out = append(out, r)
	}
	slices.SortFunc(out, compareRefs)
	return out, nil
}

// scalableOf returns the scalable that runs the pod ns/name: its
// controller, or that controller's controller. ok is false when the pod or
// its controller is gone (being deleted, not something to idle).
func (f *finder) scalableOf(ctx context.Context, ns, name string) (Ref, bool, error) {
	pod, err := f.pod(ctx, ns, name)
	if err != nil || pod == nil {
		return Ref{}, false, err
	}
	owner := metav1.GetControllerOf(pod)
	if owner == nil {
		return Ref{}, false, fmt.Errorf("pod %s/%s has no controller: it cannot be idled", ns, name)
	}
	ref, err := refOf(owner)
	if err != nil {
		return Ref{}, false, fmt.Errorf("pod %s/%s: controller: %w", ns, name, err)
	}
	// A ReplicaSet or ReplicationController may itself be controlled (by a
	// Deployment, a DeploymentConfig): then its controller is the scalable.
	if (ref.Kind == "ReplicaSet" && (ref.Group == "apps" || ref.Group == "extensions")) || (ref.Kind == "ReplicationController" && ref.Group == "") {
		parent, gone, err := f.controllerOf(ctx, ns, ref)
		if err != nil {
			return Ref{}, false, fmt.Errorf("pod %s/%s: %w", ns, name, err)
		}
		if gone {
			return Ref{}, false, nil
		}
		if parent != nil {
			pref, err := refOf(parent)
			if err != nil {
				return Ref{}, false, fmt.Errorf("pod %s/%s: controller of its %s: %w", ns, name, ref, err)
			}
			ref = pref
		}
	}
	if ref.Group == "extensions" {
		ref.Group = "apps"
	}
	if err := f.scaler.Check(ref); err != nil {
		return Ref{}, false, fmt.Errorf("pod %s/%s: its controller %w", ns, name, err)
	}
	return ref, true, nil
}

func (f *finder) pod(ctx context.Context, ns, name string) (*v1.Pod, error) {
	key := ns + "/" + name
	if p, ok := f.pods[key]; ok {
		return p, nil
	}
	p, err := f.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		p, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", ns, name, err)
	}
	f.pods[key] = p
	return p, nil
}

// controllerOf returns the controller of the ReplicaSet or
// ReplicationController r (nil when it has none), or gone when r does not
// exist.
func (f *finder) controllerOf(ctx context.Context, ns string, r Ref) (owner *metav1.OwnerReference, gone bool, err error) {
	key := ns + "/" + r.String()
	if o, ok := f.controllers[key]; ok {
		return o, false, nil
	}
	var m metav1.Object
	if r.Kind == "ReplicaSet" {
		rs, gerr := f.client.AppsV1().ReplicaSets(ns).Get(ctx, r.Name, metav1.GetOptions{})
		m, err = rs, gerr
	} else {
		rc, gerr := f.client.CoreV1().ReplicationControllers(ns).Get(ctx, r.Name, metav1.GetOptions{})
		m, err = rc, gerr
	}
	if apierrors.IsNotFound(err) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", r, err)
	}
	owner = metav1.GetControllerOf(m)
	f.controllers[key] = owner
	return owner, false, nil
}

// refOf turns an owner reference into a Ref.
func refOf(o *metav1.OwnerReference) (Ref, error) {
	gv, err := schema.ParseGroupVersion(o.APIVersion)
	if err != nil {
		return Ref{}, fmt.Errorf("%s %s: apiVersion %q: %w", o.Kind, o.Name, o.APIVersion, err)
	}
	return Ref{Kind: o.Kind, Name: o.Name, Group: gv.Group}, nil
}
