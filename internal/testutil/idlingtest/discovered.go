package idlingtest

import (
	"context"
	"fmt"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	scalefake "k8s.io/client-go/scale/fake"
	k8stesting "k8s.io/client-go/testing"

	"nodeflow/model/idling"
)

// DeploymentConfigGVR is OpenShift's DeploymentConfig resource.
var DeploymentConfigGVR = schema.GroupVersionResource{Group: "apps.openshift.io", Version: "v1", Resource: "deploymentconfigs"}

// DeploymentConfig returns a DeploymentConfig ns/name asking for replicas.
func DeploymentConfig(ns, name string, replicas int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"replicas": replicas}}}
	u.SetAPIVersion("apps.openshift.io/v1")
	u.SetKind("DeploymentConfig")
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// Discovered returns an idling.Discovered that knows DeploymentConfigs,
// kept in a fake dynamic client with objs, whose scale subresource reads
// and writes their spec.replicas.
func Discovered(objs ...runtime.Object) (*idling.Discovered, *dynamicfake.FakeDynamicClient) {
	gv := DeploymentConfigGVR.GroupVersion()
	apps := schema.GroupVersion{Group: "apps", Version: "v1"}
	mapper := meta.NewDefaultRESTMapper([]schema.GroupVersion{gv, apps})
	mapper.Add(gv.WithKind("DeploymentConfig"), meta.RESTScopeNamespace)
	mapper.Add(apps.WithKind("DaemonSet"), meta.RESTScopeNamespace) // served, without a scale subresource
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{DeploymentConfigGVR: "DeploymentConfigList"}, objs...)
	scales := &scalefake.FakeScaleClient{}
	get := func(ns, name string) (*unstructured.Unstructured, error) {
		return dyn.Resource(DeploymentConfigGVR).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	}
	scales.AddReactor("get", "deploymentconfigs", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ga := a.(k8stesting.GetAction)
		dc, err := get(ga.GetNamespace(), ga.GetName())
		if err != nil {
			return true, nil, err
		}
		n, _, _ := unstructured.NestedInt64(dc.Object, "spec", "replicas")
		return true, &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Namespace: dc.GetNamespace(), Name: dc.GetName()},
			Spec: autoscalingv1.ScaleSpec{Replicas: int32(n)}}, nil
	})
	scales.AddReactor("update", "deploymentconfigs", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s, ok := a.(k8stesting.UpdateAction).GetObject().(*autoscalingv1.Scale)
		if !ok {
			return true, nil, fmt.Errorf("update of %T, want a Scale", a.(k8stesting.UpdateAction).GetObject())
		}
		dc, err := get(a.GetNamespace(), s.Name)
		if err != nil {
			return true, nil, err
		}
		if err := unstructured.SetNestedField(dc.Object, int64(s.Spec.Replicas), "spec", "replicas"); err != nil {
			return true, nil, err
		}
		if _, err := dyn.Resource(DeploymentConfigGVR).Namespace(a.GetNamespace()).Update(context.Background(), dc, metav1.UpdateOptions{}); err != nil {
			return true, nil, err
		}
		return true, s, nil
	})
	return &idling.Discovered{Mapper: mapper, Scales: scales, ScaleKinds: scaleKinds{}, Dynamic: dyn}, dyn
}

// scaleKinds knows the scale subresource of DeploymentConfigs alone.
type scaleKinds struct{}

func (scaleKinds) ScaleForResource(r schema.GroupVersionResource) (schema.GroupVersionKind, error) {
	if r.GroupResource() != DeploymentConfigGVR.GroupResource() {
		return schema.GroupVersionKind{}, fmt.Errorf("%s has no scale subresource", r)
	}
	return autoscalingv1.SchemeGroupVersion.WithKind("Scale"), nil
}
