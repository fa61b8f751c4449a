package namespaceid

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"nodeflow/deploy"
)

// TestCRDManifest checks deploy/crds/namespaceids.yaml against the
// package's names, so that the two cannot drift.
func TestCRDManifest(t *testing.T) {
	b, err := deploy.CRDs.ReadFile("crds/namespaceids.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd unstructured.Unstructured
	if err := yaml.Unmarshal(b, &crd.Object); err != nil {
		t.Fatalf("namespaceids.yaml: %v", err)
	}
	str := func(path ...string) string {
		s, _, _ := unstructured.NestedString(crd.Object, path...)
		return s
	}
	checks := []struct{ field, got, want string }{
		{"kind", crd.GetKind(), "CustomResourceDefinition"},
		{"metadata.name", crd.GetName(), Resource + "." + Group},
		{"spec.group", str("spec", "group"), Group},
		{"spec.scope", str("spec", "scope"), "Cluster"},
		{"spec.names.kind", str("spec", "names", "kind"), Kind},
		{"spec.names.plural", str("spec", "names", "plural"), Resource},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.field, c.got, c.want)
		}
	}
	short, _, _ := unstructured.NestedStringSlice(crd.Object, "spec", "names", "shortNames")
	if !slices.Contains(short, "nsid") {
		t.Errorf("shortNames %v lack nsid", short)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	if len(versions) != 1 {
		t.Fatalf("%d versions, want 1", len(versions))
	}
	v := versions[0].(map[string]any)
	if v["name"] != Version || v["served"] != true || v["storage"] != true {
		t.Errorf("version %v %v %v", v["name"], v["served"], v["storage"])
	}
	root, _, _ := unstructured.NestedMap(v, "schema", "openAPIV3Schema")
	rules, _, _ := unstructured.NestedSlice(root, "x-kubernetes-validations")
	if len(rules) != 1 || !strings.Contains(rules[0].(map[string]any)["rule"].(string), "<= "+FormatID(LastID)) {
		t.Errorf("the name rule does not bound the name by LastID (%d): %v", LastID, rules)
	}
	// The spec's fields are exactly those newLockObject writes and
	// ParseLock reads.
	props, _, _ := unstructured.NestedMap(root, "properties", "spec", "properties")
	required, _, _ := unstructured.NestedStringSlice(root, "properties", "spec", "required")
	written, _, _ := unstructured.NestedMap(newLockObject(1, namespace("web", "u")).Object, "spec")
	var propNames, writtenNames []string
	for k := range props {
		propNames = append(propNames, k)
	}
	for k := range written {
		writtenNames = append(writtenNames, k)
	}
	slices.Sort(propNames)
	slices.Sort(writtenNames)
	slices.Sort(required)
	if !slices.Equal(propNames, writtenNames) || !slices.Equal(required, writtenNames) {
		t.Errorf("schema properties %v, required %v; the lock object has %v", propNames, required, writtenNames)
	}
}
