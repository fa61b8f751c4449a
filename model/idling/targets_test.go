package idling

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseTargets(t *testing.T) {
	dep := func(name string, n int32) Target {
		return Target{Ref: Ref{Kind: "Deployment", Name: name, Group: "apps"}, Replicas: n}
	}
	good := []struct {
		name, in string
		want     []Target
	}{
		{"oc idle's form", `[{"kind":"Deployment","name":"web","group":"apps","replicas":2}]`, []Target{dep("web", 2)}},
		{"core group left out", `[{"kind":"ReplicationController","name":"rc-1","replicas":3}]`,
			[]Target{{Ref: Ref{Kind: "ReplicationController", Name: "rc-1"}, Replicas: 3}}},
		{"apiVersion of old writers", `[{"kind":"Deployment","name":"web","apiVersion":"extensions/v1beta1","replicas":1}]`,
			[]Target{{Ref: Ref{Kind: "Deployment", Name: "web", Group: "extensions"}, Replicas: 1}}},
		{"group wins over apiVersion", `[{"kind":"Deployment","name":"web","apiVersion":"extensions/v1beta1","group":"apps","replicas":1}]`,
			[]Target{dep("web", 1)}},
		{"unknown fields ignored", `[{"kind":"Deployment","name":"web","group":"apps","replicas":1,"extra":true}]`, []Target{dep("web", 1)}},
		{"duplicate: the first one counts", `[{"kind":"Deployment","name":"web","group":"apps","replicas":4},{"kind":"Deployment","name":"web","group":"apps","replicas":1}]`,
			[]Target{dep("web", 4)}},
		{"two", `[{"kind":"Deployment","name":"a","group":"apps","replicas":1},{"kind":"StatefulSet","name":"db","group":"apps","replicas":0}]`,
			[]Target{dep("a", 1), {Ref: Ref{Kind: "StatefulSet", Name: "db", Group: "apps"}, Replicas: 0}}},
		{"empty list", `[]`, []Target{}},
		{"null", `null`, []Target{}},
	}
	for _, tc := range good {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTargets("ns/svc", tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	bad := []struct {
		name, in, want string
	}{
		{"empty", ``, "not a JSON list"},
		{"an object", `{"kind":"Deployment"}`, "not a JSON list"},
		{"truncated", `[{"kind":"Deployment","name":"web"`, "not a JSON list"},
		{"null entry", `[null]`, "entry 0: null"},
		{"no kind", `[{"name":"web","replicas":1}]`, "entry 0: kind is empty"},
		{"kind with a slash", `[{"kind":"apps/Deployment","name":"web","replicas":1}]`, `kind "apps/Deployment" is not alphanumeric`},
		{"no name", `[{"kind":"Deployment","group":"apps","replicas":1}]`, "entry 0: Deployment: name is empty"},
		{"name with a slash", `[{"kind":"Deployment","name":"../x","replicas":1}]`, `name "../x"`},
		{"bad group", `[{"kind":"Deployment","name":"web","group":"Apps!","replicas":1}]`, `group "Apps!"`},
		{"bad apiVersion", `[{"kind":"Deployment","name":"web","apiVersion":"a/b/c","replicas":1}]`, `apiVersion "a/b/c"`},
		{"no replicas", `[{"kind":"Deployment","name":"web","group":"apps"}]`, "entry 0: Deployment.apps/web: no replicas"},
		{"negative replicas", `[{"kind":"Deployment","name":"web","group":"apps","replicas":1},{"kind":"Deployment","name":"x","group":"apps","replicas":-1}]`,
			"entry 1: Deployment.apps/x: replicas -1 is negative"},
		{"replicas too large", `[{"kind":"Deployment","name":"web","replicas":4294967296}]`, "entry 0:"},
		{"replicas a string", `[{"kind":"Deployment","name":"web","replicas":"2"}]`, "entry 0:"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTargets("ns/svc", tc.in)
			if err == nil {
				t.Fatalf("no error, got %+v", got)
			}
			var ae *AnnotationError
			if !errors.As(err, &ae) || ae.Service != "ns/svc" || ae.Annotation != UnidleTargetsAnnotation {
				t.Errorf("error %v is not an AnnotationError of ns/svc's %s", err, UnidleTargetsAnnotation)
			}
			prefix := "service ns/svc: annotation " + UnidleTargetsAnnotation + ": "
			if !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want %q...%q", err, prefix, tc.want)
			}
		})
	}
}

func TestFormatTargets(t *testing.T) {
	got := FormatTargets([]Target{
		{Ref: Ref{Kind: "Deployment", Name: "web", Group: "apps"}, Replicas: 2},
		{Ref: Ref{Kind: "ReplicationController", Name: "rc"}, Replicas: 0},
	})
	// What `oc idle` writes: group left out in the core group.
	want := `[{"kind":"Deployment","name":"web","group":"apps","replicas":2},{"kind":"ReplicationController","name":"rc","replicas":0}]`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got := FormatTargets(nil); got != "[]" {
		t.Errorf("no targets: %s, want []", got)
	}
}

func TestMergeTargets(t *testing.T) {
	d := func(name string, n int32) Target {
		return Target{Ref: Ref{Kind: "Deployment", Name: name, Group: "apps"}, Replicas: n}
	}
	s := func(name string, n int32) Target {
		return Target{Ref: Ref{Kind: "StatefulSet", Name: name, Group: "apps"}, Replicas: n}
	}
	for _, tc := range []struct {
		name              string
		recorded, current []Target
		want              []Target
	}{
		{"nothing recorded: the current replicas", nil, []Target{d("b", 3), d("a", 2)}, []Target{d("a", 2), d("b", 3)}},
		{"current wins over recorded", []Target{d("a", 5)}, []Target{d("a", 2)}, []Target{d("a", 2)}},
		{"already at 0: the recorded replicas", []Target{d("a", 5)}, []Target{d("a", 0)}, []Target{d("a", 5)}},
		{"at 0, none recorded: 1", nil, []Target{d("a", 0)}, []Target{d("a", 1)}},
		{"at 0, recorded 0: 1", []Target{d("a", 0)}, []Target{d("a", 0)}, []Target{d("a", 1)}},
		{"recorded ones not found now are kept", []Target{s("db", 3), d("old", 0)}, []Target{d("a", 2)},
			[]Target{d("a", 2), d("old", 1), s("db", 3)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := MergeTargets(tc.recorded, tc.current); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
