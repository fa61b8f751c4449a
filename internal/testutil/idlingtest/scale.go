// Package idlingtest makes client-go's fake clientset serve the scale
// subresource of Deployments, ReplicaSets, StatefulSets and
// ReplicationControllers, which its object tracker does not: a scale read
// gives the object's spec.replicas, a scale write sets them.
package idlingtest

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// AddScaleReactors makes cs serve the scale subresource.
func AddScaleReactors(cs *fake.Clientset) {
	for _, res := range []string{"deployments", "replicasets", "statefulsets", "replicationcontrollers"} {
		cs.PrependReactor("get", res, func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() != "scale" {
				return false, nil, nil
			}
			g := a.(k8stesting.GetAction)
			obj, err := cs.Tracker().Get(a.GetResource(), a.GetNamespace(), g.GetName())
			if err != nil {
				return true, nil, err
			}
			return true, scaleOf(obj), nil
		})
		cs.PrependReactor("update", res, func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() != "scale" {
				return false, nil, nil
			}
			s := a.(k8stesting.UpdateAction).GetObject().(*autoscalingv1.Scale)
			obj, err := cs.Tracker().Get(a.GetResource(), a.GetNamespace(), s.Name)
			if err != nil {
				return true, nil, err
			}
			if err := setReplicas(obj, s.Spec.Replicas); err != nil {
				return true, nil, err
			}
			if err := cs.Tracker().Update(a.GetResource(), obj, a.GetNamespace()); err != nil {
				return true, nil, err
			}
			return true, scaleOf(obj), nil
		})
	}
}

// replicasOf returns the spec.replicas field of a scalable.
func replicasOf(obj runtime.Object) **int32 {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return &o.Spec.Replicas
	case *appsv1.ReplicaSet:
		return &o.Spec.Replicas
	case *appsv1.StatefulSet:
		return &o.Spec.Replicas
	case *v1.ReplicationController:
		return &o.Spec.Replicas
	}
	return nil
}

func scaleOf(obj runtime.Object) *autoscalingv1.Scale {
	m := obj.(metav1.Object)
	s := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: m.GetName(), Namespace: m.GetNamespace(), ResourceVersion: m.GetResourceVersion()}}
	s.Spec.Replicas = 1 // the API's default
	if p := replicasOf(obj); p != nil && *p != nil {
		s.Spec.Replicas = **p
	}
	s.Status.Replicas = s.Spec.Replicas
	return s
}

func setReplicas(obj runtime.Object, n int32) error {
	p := replicasOf(obj)
	if p == nil {
		return fmt.Errorf("idlingtest: %T has no scale", obj)
	}
	*p = &n
	return nil
}
