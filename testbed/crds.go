package testbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"

	"nodeflow/deploy"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// readCRDs returns the CustomResourceDefinitions in every YAML file of
// fsys's crds directory, in file order.
func readCRDs(fsys fs.FS) ([]*unstructured.Unstructured, error) {
	return readManifests(fsys, func(u *unstructured.Unstructured) error {
		if u.GetAPIVersion() != "apiextensions.k8s.io/v1" || u.GetKind() != "CustomResourceDefinition" {
			return fmt.Errorf("%s %s %q is not a named apiextensions.k8s.io/v1 CustomResourceDefinition", u.GetAPIVersion(), u.GetKind(), u.GetName())
		}
		return nil
	}, "crds/*.yaml")
}

// readManifests returns the objects of the YAML files of fsys that match
// each pattern, in pattern and file order; every object must have an
// apiVersion, a kind and a name, and pass accept (when not nil).
func readManifests(fsys fs.FS, accept func(*unstructured.Unstructured) error, patterns ...string) ([]*unstructured.Unstructured, error) {
	var files []string
	for _, pat := range patterns {
		m, err := fs.Glob(fsys, pat)
		if err != nil {
			return nil, err
		}
		files = append(files, m...)
	}
	var out []*unstructured.Unstructured
	for _, f := range files {
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for doc := 1; ; doc++ {
			var obj map[string]any
			if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, fmt.Errorf("testbed: deploy/%s: document %d: %w", f, doc, err)
			}
			if len(obj) == 0 {
				continue
			}
			u := &unstructured.Unstructured{Object: obj}
			if u.GetAPIVersion() == "" || u.GetKind() == "" || u.GetName() == "" {
				return nil, fmt.Errorf("testbed: deploy/%s: document %d lacks an apiVersion, a kind or a name", f, doc)
			}
			if accept != nil {
				if err := accept(u); err != nil {
					return nil, fmt.Errorf("testbed: deploy/%s: document %d: %w", f, doc, err)
				}
			}
			out = append(out, u)
		}
	}
	return out, nil
}

// installCRDs applies nodeflow's CustomResourceDefinitions (deploy/crds,
// embedded in the binary) with server-side apply, and waits until the API
// server serves each of them.
func installCRDs(ctx context.Context, cfg *rest.Config, timeout time.Duration) error {
	crds, err := readCRDs(deploy.CRDs)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	client := dyn.Resource(crdGVR)
	for _, crd := range crds {
		if _, err := client.Apply(ctx, crd.GetName(), crd, metav1.ApplyOptions{FieldManager: "nodeflow-testbed", Force: true}); err != nil {
			return fmt.Errorf("testbed: apply CRD %s: %w", crd.GetName(), err)
		}
	}
	deadline := time.Now().Add(timeout)
	for _, crd := range crds {
		for {
			cur, err := client.Get(ctx, crd.GetName(), metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("testbed: CRD %s: %w", crd.GetName(), err)
			}
			established, problem := crdEstablished(cur)
			if established {
				break
			}
			if problem != "" {
				return fmt.Errorf("testbed: CRD %s: %s", crd.GetName(), problem)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("testbed: CRD %s not Established after %s", crd.GetName(), timeout)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// crdEstablished reads a CRD's conditions: whether it is Established, and
// why it never will be (its names are not accepted).
func crdEstablished(crd *unstructured.Unstructured) (bool, string) {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	established := false
	problem := ""
	for _, c := range conds {
		m, _ := c.(map[string]any)
		typ, _ := m["type"].(string)
		status, _ := m["status"].(string)
		switch {
		case typ == "Established" && status == "True":
			established = true
		case typ == "NamesAccepted" && status == "False":
			msg, _ := m["message"].(string)
			problem = "names not accepted: " + msg
		}
	}
	return established, problem
}

// DryRunManifests reads the YAML files of fsys that match patterns and
// applies their objects with a server-side dry run: the API server checks
// them (schemas, defaults, admission) and stores nothing.
func DryRunManifests(ctx context.Context, kubeconfig string, fsys fs.FS, patterns ...string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	objs, err := readManifests(fsys, nil, patterns...)
	if err != nil {
		return err
	}
	return applyManifests(ctx, cfg, objs, true)
}

// applyManifests applies objs with server-side apply (field manager
// nodeflow-testbed), each to the resource the API server's discovery maps
// its kind to; dryRun stores nothing.
func applyManifests(ctx context.Context, cfg *rest.Config, objs []*unstructured.Unstructured, dryRun bool) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, u := range objs {
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("testbed: apply %s %s: %w", gvk.Kind, u.GetName(), err)
		}
		var r dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			r = dyn.Resource(m.Resource).Namespace(u.GetNamespace())
		}
		opts := metav1.ApplyOptions{FieldManager: "nodeflow-testbed", Force: true}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		if _, err := r.Apply(ctx, u.GetName(), u, opts); err != nil {
			return fmt.Errorf("testbed: apply %s %s/%s: %w", gvk.Kind, u.GetNamespace(), u.GetName(), err)
		}
	}
	return nil
}
