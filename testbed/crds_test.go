package testbed

import (
	"strings"
	"testing"
	"testing/fstest"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"nodeflow/deploy"
)

func TestReadCRDs(t *testing.T) {
	crds, err := readCRDs(deploy.CRDs)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range crds {
		found = found || c.GetName() == "namespaceids.nodeflow.io"
	}
	if !found {
		t.Errorf("deploy/crds has no namespaceids.nodeflow.io among %d CRDs", len(crds))
	}

	const crd = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: %s}\n"
	tests := []struct {
		name    string
		files   map[string]string
		want    []string
		wantErr string
	}{
		{"two documents, an empty one between", map[string]string{"crds/a.yaml": strings.ReplaceAll(crd, "%s", "as.x.io") + "---\n---\n" + strings.ReplaceAll(crd, "%s", "bs.x.io")},
			[]string{"as.x.io", "bs.x.io"}, ""},
		{"files in name order, other extensions ignored", map[string]string{
			"crds/b.yaml": strings.ReplaceAll(crd, "%s", "bs.x.io"), "crds/a.yaml": strings.ReplaceAll(crd, "%s", "as.x.io"), "crds/notes.txt": "x"},
			[]string{"as.x.io", "bs.x.io"}, ""},
		{"not a CRD", map[string]string{"crds/a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"},
			nil, "deploy/crds/a.yaml: document 1: v1 ConfigMap"},
		{"no name", map[string]string{"crds/a.yaml": "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"},
			nil, "document 1"},
		{"bad YAML", map[string]string{"crds/a.yaml": strings.ReplaceAll(crd, "%s", "as.x.io") + "---\nkind: [\n"},
			nil, "deploy/crds/a.yaml: document 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for n, s := range tt.files {
				fsys[n] = &fstest.MapFile{Data: []byte(s)}
			}
			got, err := readCRDs(fsys)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, c := range got {
				names = append(names, c.GetName())
			}
			if strings.Join(names, ",") != strings.Join(tt.want, ",") {
				t.Errorf("CRDs %v, want %v", names, tt.want)
			}
		})
	}
}

func TestCRDEstablished(t *testing.T) {
	cond := func(typ, status, msg string) any {
		return map[string]any{"type": typ, "status": status, "message": msg}
	}
	tests := []struct {
		name        string
		conds       []any
		established bool
		problem     string
	}{
		{"no status yet", nil, false, ""},
		{"names accepted, not established", []any{cond("NamesAccepted", "True", ""), cond("Established", "False", "")}, false, ""},
		{"established", []any{cond("NamesAccepted", "True", ""), cond("Established", "True", "")}, true, ""},
		{"names conflict", []any{cond("NamesAccepted", "False", "plural taken")}, false, "names not accepted: plural taken"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: map[string]any{}}
			if tt.conds != nil {
				u.Object["status"] = map[string]any{"conditions": tt.conds}
			}
			est, problem := crdEstablished(u)
			if est != tt.established || problem != tt.problem {
				t.Errorf("crdEstablished = %v, %q; want %v, %q", est, problem, tt.established, tt.problem)
			}
		})
	}
}

// The embedded namespace and RBAC manifests read as the objects the
// testbed applies.
func TestReadManifests(t *testing.T) {
	objs, err := readManifests(deploy.Manifests, nil, "namespace.yaml", "rbac/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, u := range objs {
		kinds[u.GetKind()]++
	}
	for _, k := range []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} {
		if kinds[k] == 0 {
			t.Errorf("no %s among the manifests: %v", k, kinds)
		}
	}
}
