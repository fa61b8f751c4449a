package crdtest

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"nodeflow/deploy"
)

// TestEveryCRDLoads: every manifest in deploy/crds is one the API server
// accepts, and its validator refuses an object whose spec is not an
// object.
func TestEveryCRDLoads(t *testing.T) {
	entries, err := deploy.CRDs.ReadDir("crds")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) == 0 {
		t.Fatal("no CRD in deploy/crds")
	}
	for _, e := range entries {
		t.Run(e.Name(), func(t *testing.T) {
			crd, v := Load(t, e.Name())
			g, version := crd.Spec.Group, crd.Spec.Versions[0].Name
			bad := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": g + "/" + version, "kind": crd.Spec.Names.Kind,
				"metadata": map[string]any{"name": "x"}, "spec": "not an object",
			}}
			if errs := v.Validate(bad, nil); len(errs) == 0 {
				t.Errorf("a %s whose spec is a string passes", crd.Spec.Names.Kind)
			}
		})
	}
}
