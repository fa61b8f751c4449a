package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"nodeflow/model/idling"
)

var (
	crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	dcResource  = schema.GroupVersionResource{Group: "apps.openshift.io", Version: "v1", Resource: "deploymentconfigs"}
)

// dcCRD is a stand-in for OpenShift's DeploymentConfig API: the kind and
// its scale subresource, which is all `oc idle` and the unidlers use.
func dcCRD() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "deploymentconfigs.apps.openshift.io"},
		"spec": map[string]any{
			"group": "apps.openshift.io", "scope": "Namespaced",
			"names": map[string]any{"plural": "deploymentconfigs", "singular": "deploymentconfig", "kind": "DeploymentConfig", "listKind": "DeploymentConfigList"},
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
				"subresources": map[string]any{"scale": map[string]any{
					"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
			}},
		},
	}}
}

// TestIdleDeploymentConfig idles a Service whose pods a
// ReplicationController of a DeploymentConfig runs, as OpenShift deploys
// them: `nodeflow idle` records and scales the DeploymentConfig (through
// the scale subresource the API server serves for it, found by discovery),
// not its ReplicationController, and `nodeflow unidler` scales it back up
// on a NeedPods event. (No DeploymentConfig controller runs here: the pods
// stay, which is all the commands need to be checked against a real API
// server.)
func TestIdleDeploymentConfig(t *testing.T) {
	e := up(t)
	requireAgent(t, e)
	ctx := context.Background()
	dyn := adminDynamic(t, e)
	if _, err := dyn.Resource(crdResource).Create(ctx, dcCRD(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = dyn.Resource(crdResource).Delete(context.Background(), "deploymentconfigs.apps.openshift.io", metav1.DeleteOptions{})
	})
	ns := createNamespace(t, e, "e2e-idle-dc")
	dcs := dyn.Resource(dcResource).Namespace(ns)
	var dc *unstructured.Unstructured
	eventually(t, 30*time.Second, "the DeploymentConfig API served", func(ctx context.Context) error {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apps.openshift.io/v1", "kind": "DeploymentConfig",
			"metadata": map[string]any{"name": "front"}, "spec": map[string]any{"replicas": int64(2)}}}
		var err error
		dc, err = dcs.Create(ctx, obj, metav1.CreateOptions{})
		return err
	})
	labels := map[string]string{"app": "front"}
	rc, err := e.client.CoreV1().ReplicationControllers(ns).Create(ctx, &v1.ReplicationController{
		ObjectMeta: metav1.ObjectMeta{Name: "front-1", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps.openshift.io/v1", Kind: "DeploymentConfig", Name: "front", UID: dc.GetUID(), Controller: ptr.To(true)}}},
		Spec: v1.ReplicationControllerSpec{Replicas: ptr.To(int32(2)), Selector: labels, Template: &v1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "web", Image: "testbed/web"}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// No ReplicationController controller runs in the testbed: its pods
	// are made here, as it would make them.
	for i := range 2 {
		_, err := e.client.CoreV1().Pods(ns).Create(ctx, &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("front-1-%d", i), Labels: labels, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "ReplicationController", Name: rc.Name, UID: rc.UID, Controller: ptr.To(true)}}},
			Spec: v1.PodSpec{TerminationGracePeriodSeconds: ptr.To(int64(2)),
				Containers: []v1.Container{{Name: "web", Image: "testbed/web", Ports: []v1.ContainerPort{{ContainerPort: 8080}}}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	createService(t, e, ns, &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "front"},
		Spec: v1.ServiceSpec{Selector: labels, Ports: []v1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: v1.ProtocolTCP}}}})
	waitReadyEndpoints(t, e, ns, "front", 2)

	out := runNodeflow(t, e, "", "idle", "--kubeconfig", e.state.Kubeconfig, "-n", ns, "front")
	if !strings.Contains(out, "wakes up DeploymentConfig.apps.openshift.io/front to 2") {
		t.Errorf("nodeflow idle did not name the DeploymentConfig:\n%s", out)
	}
	if got, want := serviceAnnotations(t, e, ns, "front")[idling.UnidleTargetsAnnotation],
		`[{"kind":"DeploymentConfig","name":"front","group":"apps.openshift.io","replicas":2}]`; got != want {
		t.Errorf("unidle targets %s, want %s", got, want)
	}
	dcState := func(ctx context.Context) (int64, map[string]string, error) {
		got, err := dcs.Get(ctx, "front", metav1.GetOptions{})
		if err != nil {
			return 0, nil, err
		}
		n, _, _ := unstructured.NestedInt64(got.Object, "spec", "replicas")
		return n, got.GetAnnotations(), nil
	}
	if n, a, err := dcState(ctx); err != nil || n != 0 || a[idling.PreviousScaleAnnotation] != "2" || a[idling.IdledAtAnnotation] == "" {
		t.Errorf("DeploymentConfig after idling: %d replicas, annotations %v, %v", n, a, err)
	}
	if got, _ := e.client.CoreV1().ReplicationControllers(ns).Get(ctx, "front-1", metav1.GetOptions{}); *got.Spec.Replicas != 2 {
		t.Errorf("the ReplicationController was scaled (%d): its DeploymentConfig owns its scale", *got.Spec.Replicas)
	}

	startUnidler(t, e, "unidler-dc")
	needPodsCore(t, e, ns, "front")
	eventually(t, 60*time.Second, "the DeploymentConfig scaled back up", func(ctx context.Context) error {
		n, a, err := dcState(ctx)
		if err != nil {
			return err
		}
		if n != 2 || len(a) != 0 {
			return fmt.Errorf("%d replicas, annotations %v", n, a)
		}
		if s := serviceAnnotations(t, e, ns, "front"); s[idling.IdledAtAnnotation] != "" {
			return fmt.Errorf("service still annotated: %v", s)
		}
		return nil
	})
}
