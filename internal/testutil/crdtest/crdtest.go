// Package crdtest loads the project's CustomResourceDefinitions in tests
// and checks objects against them as the API server does, without one.
package crdtest

import (
	"context"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	"nodeflow/deploy"
)

// Validator checks objects the way the API server does for one CRD: its
// OpenAPI schema (types, enums, patterns, formats, bounds) and its CEL
// rules, transition rules included.
type Validator struct {
	schema     validation.SchemaValidator
	structural *structuralschema.Structural
	cel        *cel.Validator
}

// Validate returns what the API server would refuse in obj, an update of
// old (nil for a create).
func (v *Validator) Validate(obj, old *unstructured.Unstructured) field.ErrorList {
	errs := validation.ValidateCustomResource(nil, obj.Object, v.schema)
	var oldObj any
	if old != nil {
		oldObj = old.Object
	}
	celErrs, _ := v.cel.Validate(context.Background(), nil, v.structural, obj.Object, oldObj, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}

// Load reads deploy/crds/<file> strictly into a CustomResourceDefinition,
// checks it as the API server checks a CRD on create (structural schema,
// selectable fields, CEL compilation and its estimated cost), and returns
// it with a Validator for its one version.
func Load(t testing.TB, file string) (*apiextensionsv1.CustomResourceDefinition, *Validator) {
	t.Helper()
	b, err := deploy.CRDs.ReadFile("crds/" + file)
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(b, crd); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(crd)
	internal := &apiextensions.CustomResourceDefinition{}
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(crd, internal, nil); err != nil {
		t.Fatalf("%s: convert: %v", file, err)
	}
	if errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), internal); len(errs) > 0 {
		t.Fatalf("%s: the API server would refuse it: %v", file, errs.ToAggregate())
	}
	// The internal form keeps a schema that all versions share at the top.
	if len(internal.Spec.Versions) != 1 || internal.Spec.Validation == nil || internal.Spec.Validation.OpenAPIV3Schema == nil {
		t.Fatalf("%s: want one version with a schema", file)
	}
	s := internal.Spec.Validation.OpenAPIV3Schema
	sv, _, err := validation.NewSchemaValidator(s)
	if err != nil {
		t.Fatal(err)
	}
	st, err := structuralschema.NewStructural(s)
	if err != nil {
		t.Fatal(err)
	}
	return crd, &Validator{schema: sv, structural: st, cel: cel.NewValidator(st, true, celconfig.PerCallLimit)}
}
