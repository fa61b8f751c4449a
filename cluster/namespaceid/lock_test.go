package namespaceid

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestParseLock(t *testing.T) {
	good := map[string]any{"namespace": "web", "namespaceUID": "uid-web"}
	terminating := func(u *unstructured.Unstructured) *unstructured.Unstructured {
		now := metav1.Now()
		u.SetDeletionTimestamp(&now)
		u.SetFinalizers([]string{"other.io/x", Finalizer})
		return u
	}
	tests := []struct {
		name    string
		obj     *unstructured.Unstructured
		want    Lock
		wantErr []string // substrings of the error; nil: no error
	}{
		{"well-formed", lockObject("42", good),
			Lock{Name: "42", ID: 42, Namespace: "web", NamespaceUID: "uid-web"}, nil},
		{"terminating with the finalizer", terminating(lockObject("7", good)),
			Lock{Name: "7", ID: 7, Namespace: "web", NamespaceUID: "uid-web", Terminating: true, Finalizer: true}, nil},
		{"name not a number", lockObject("abc", good),
			Lock{Name: "abc", Namespace: "web", NamespaceUID: "uid-web"}, []string{`NamespaceID "abc"`, "metadata.name"}},
		{"name in the VNI range", lockObject("8388608", good),
			Lock{Name: "8388608", Namespace: "web", NamespaceUID: "uid-web"}, []string{"metadata.name", "1..8388607"}},
		{"no spec", lockObject("43", nil),
			Lock{Name: "43", ID: 43}, []string{`NamespaceID "43"`, "spec: missing"}},
		{"spec not an object", func() *unstructured.Unstructured {
			u := lockObject("44", nil)
			u.Object["spec"] = "web"
			return u
		}(), Lock{Name: "44", ID: 44}, []string{"spec: missing or not an object"}},
		{"namespace not a string", lockObject("45", map[string]any{"namespace": int64(5), "namespaceUID": "u"}),
			Lock{Name: "45", ID: 45, NamespaceUID: "u"}, []string{"spec.namespace"}},
		{"no namespaceUID", lockObject("46", map[string]any{"namespace": "web"}),
			Lock{Name: "46", ID: 46, Namespace: "web"}, []string{"spec.namespaceUID"}},
		{"everything wrong, every field named", terminating(lockObject("0", map[string]any{})),
			Lock{Name: "0", Terminating: true, Finalizer: true}, []string{"metadata.name", "spec.namespace:", "spec.namespaceUID"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseLock(tt.obj)
			if got != tt.want {
				t.Errorf("ParseLock = %+v, want %+v", got, tt.want)
			}
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

func TestNewLockObject(t *testing.T) {
	ns := namespace("web", "uid-web")
	u := newLockObject(4242, ns)
	l, err := ParseLock(u)
	if err != nil {
		t.Fatal(err)
	}
	want := Lock{Name: "4242", ID: 4242, Namespace: "web", NamespaceUID: "uid-web", Finalizer: true}
	if l != want {
		t.Errorf("lock %+v, want %+v", l, want)
	}
	refs := u.GetOwnerReferences()
	if len(refs) != 1 || refs[0].Kind != "Namespace" || refs[0].APIVersion != "v1" || refs[0].Name != "web" || refs[0].UID != "uid-web" {
		t.Errorf("owner references %+v", refs)
	}
	if refs[0].BlockOwnerDeletion != nil || refs[0].Controller != nil {
		t.Errorf("owner reference must not block the namespace's deletion: %+v", refs[0])
	}
	if u.GetAPIVersion() != "nodeflow.io/v1alpha1" || u.GetKind() != "NamespaceID" {
		t.Errorf("type %s %s", u.GetAPIVersion(), u.GetKind())
	}
}
